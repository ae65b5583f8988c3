// The builders of attention's steps: matmul (oneDNN's matmul over batches of matrices, reading
// its operands in the layouts they have, a transposed view included, with a scale_by of its first
// operand and the scale_by and activations after it as post-ops) and softmax. Never on a
// reference kernel: where oneDNN has only that for a layout, the operands are made dense first.
#include "builders.hpp"
#include "internal.hpp"

#include <c10/util/Exception.h>

namespace onednn_delegate {

void matmul(plan_context& p, std::size_t index) {
  const compiled_step& product = p.step(index);
  const std::vector<std::size_t>& fused = product.fusion.post_ops;
  const std::optional<std::size_t> scaled = product.fusion.scaled_first;  // (s a) b as s (a b)
  std::size_t a = p.value(scaled ? p.step(*scaled).record.inputs[0] : product.record.inputs[0]), b = p.value(product.record.inputs[1]);
  const dims da = p.slot(a).dims(), db = p.slot(b).dims();
  const std::size_t rank = da.size();
  bool fits = rank >= 2 && rank <= 4 && db.size() == rank && da[rank - 1] == db[rank - 2];
  for (std::size_t k = 0; fits && k + 2 < rank; ++k) fits = da[k] == db[k];
  TORCH_CHECK(fits, "onednn: region ", p.region().method, ": step ", index, ": a matmul of ", c10::IntArrayRef(da), " and ",
              c10::IntArrayRef(db), " (same batch sizes, no broadcasting, expected)");
  dims out = da;
  out.back() = db.back();
  auto candidate = [&](const std::vector<std::size_t>& with) -> std::optional<dnnl::matmul::primitive_desc> {
    dnnl::post_ops post_ops;
    if (scaled)
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(p.step(*scaled))) post_ops.append_eltwise(1.f, algorithm, alpha, beta);
    for (std::size_t next : with)
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(p.step(next))) post_ops.append_eltwise(1.f, algorithm, alpha, beta);
    try {
      dnnl::matmul::primitive_desc pd({p.slot(a), p.slot(b), dense(out)}, attributes(post_ops), cpu_engine());
      if (!is_reference(pd.impl_info_str())) return pd;
    } catch (const dnnl::error&) {
    }
    return std::nullopt;
  };
  const std::vector<std::size_t> alone;  // with the scale of a scaled first operand still
  for (const bool made_dense : {false, true}) {
    if (made_dense) a = p.as(a, dense(da)), b = p.as(b, dense(db));
    for (const std::vector<std::size_t>* with : {&fused, &alone}) {
      if (with == &alone && fused.empty()) break;
      const std::optional<dnnl::matmul::primitive_desc> pd = candidate(*with);
      if (!pd) continue;
      const std::int64_t made = with->empty() ? p.finished(index) : p.finished(with->back());
      p.define(made, pd->dst_desc());
      p.call(dnnl::matmul(*pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, p.value(made)}}, pd->scratchpad_desc());
      if (with->empty())
        for (std::size_t next : fused) p.plan_step(next);
      return;
    }
  }
  p.refuse("step " + std::to_string(index) + " (matmul) of " + p.describe(product) + ": oneDNN has no kernel for it but a reference one");
}

void softmax(plan_context& p, std::size_t index) {
  const compiled_step& normalized = p.step(index);
  const std::size_t in = p.value(normalized.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const std::int64_t axis = *normalized.record.softmax_dim;
  TORCH_CHECK(axis < static_cast<std::int64_t>(d.size()), "onednn: region ", p.region().method, ": step ", index, ": a softmax along ",
              axis, " of ", c10::IntArrayRef(d));
  for (const bool made_dense : {false, true}) {
    const std::size_t source = made_dense ? p.as(in, dense(d)) : in;
    try {
      const dnnl::softmax_forward::primitive_desc pd({dnnl::prop_kind::forward_inference, p.slot(source), static_cast<int>(axis)},
                                                     attributes(), cpu_engine());
      if (is_reference(pd.impl_info_str()) && !made_dense) continue;
      p.define(normalized.record.output, pd.dst_desc());
      p.call(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, source}, {DNNL_ARG_DST, p.value(normalized.record.output)}}, pd.scratchpad_desc());
      return;
    } catch (const dnnl::error&) {
      if (made_dense) throw;
    }
  }
}

}  // namespace onednn_delegate
