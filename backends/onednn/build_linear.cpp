// The linear builder: over the last dimension, on our GEMM where oneDNN runs AVX2
// (build_gemm.cpp), else oneDNN's inner product (its matmul where oneDNN runs AVX-512) with the
// activations fusion.cpp gave it as post-ops, never on a reference kernel; else alone, else
// ATen's linear.
#include "builders.hpp"
#include "internal.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace onednn_delegate {

/// A linear over the last dimension: oneDNN's inner product (or matmul) on [rows, I] (the leading
/// dimensions flattened, in row-major order), with the activations after it as post-ops.
void linear(plan_context& p, std::size_t index) {
  const compiled_step& fc = p.step(index);
  const std::vector<std::size_t>& fused = fc.fusion.post_ops;
  const dims d = p.slot(p.value(fc.record.inputs[0])).dims();
  const std::int64_t outputs = fc.weight_sizes[0], features = fc.weight_sizes[1];
  TORCH_CHECK(d.back() == features, "onednn: region ", p.region().method, ": a linear of ", features, " input features given ",
              c10::IntArrayRef(d));
  const std::size_t in = p.as(p.value(fc.record.inputs[0]), dense(d));
  std::int64_t rows = 1;
  for (std::size_t k = 0; k + 1 < d.size(); ++k) rows *= d[k];
  const std::size_t flat = p.view(p.slot(in).reshape({rows, features}), in);
  dims shaped(d.begin(), d.end() - 1);
  shaped.push_back(outputs);
  // A bias computed in the call (the step's second input; Swin V2's qkv): dense [O], read as a
  // matmul's [1, O] where the linear is one; no_slot: the store's constant.
  std::size_t given_bias = no_slot;
  if (fc.record.inputs.size() == 2) {
    const dims b = p.slot(p.value(fc.record.inputs[1])).dims();
    if (b != dims{outputs})
      p.refuse("a linear of " + std::to_string(outputs) + " outputs given a bias of sizes " + c10::str(c10::IntArrayRef(b)));
    given_bias = p.as(p.value(fc.record.inputs[1]), dense(b));
  }
  // Our GEMM from one block of 6 rows up, where it applies the post-ops itself (none, or a lone
  // ReLU or erf GELU): else oneDNN's, with them fused (a GELU as a step of its own cost Swin-T more
  // than our GEMM gained). Below 6 rows, oneDNN's product of a vector (a CNN's classifier at batch
  // 1: 512 -> 1000 took 19 us on it, 22 on ours, at the AVX2 cap; no gain there).
  if (own_gemm_enabled() && rows >= 6 && own_gemm_activation(p, index))
    return linear_on_own_gemm(p, index, flat, rows, shaped, given_bias, *own_gemm_activation(p, index));
  unpack_stored_weights(p, index, md({outputs, features}, f32, tag::ab));  // an earlier plan's, for our GEMM
  // Never a reference kernel: with its activations as post-ops, else alone (the activations
  // after it as primitives of their own), else ATen's linear. As a matmul where oneDNN runs
  // AVX-512 (linear_as_matmul: the store holds the weights as [I, O]), else an inner product.
  const bool as_matmul = linear_as_matmul();
  auto primitive = [&](const std::vector<std::size_t>& with) -> std::optional<dnnl::primitive_desc> {
    dnnl::post_ops post_ops;
    for (std::size_t next : with)
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(p.step(next))) post_ops.append_eltwise(1.f, algorithm, alpha, beta);
    try {
      if (as_matmul) {
        dnnl::matmul::primitive_desc pd({md({rows, features}, f32, tag::ab), md({features, outputs}, f32, tag::any),
                                         md({1, outputs}, f32, tag::ab), md({rows, outputs}, f32, tag::ab)},
                                        attributes(post_ops), cpu_engine());
        if (!is_reference(pd.impl_info_str())) return pd;
      } else {
        dnnl::inner_product_forward::primitive_desc pd(
            {dnnl::prop_kind::forward_inference, md({rows, features}, f32, tag::ab), md({outputs, features}, f32, tag::any),
             md({outputs}, f32, tag::a), md({rows, outputs}, f32, tag::ab)},
            attributes(post_ops), cpu_engine());
        if (!is_reference(pd.impl_info_str())) return pd;
      }
    } catch (const dnnl::error&) {
    }
    return std::nullopt;
  };
  const std::vector<std::size_t> alone;
  for (const std::vector<std::size_t>* with : {&fused, &alone}) {
    if (with == &alone && fused.empty()) break;
    const auto pd = primitive(*with);
    if (!pd) continue;
    const std::size_t weights = p.constant(p.store().weights[index], pd->weights_desc());
    const std::size_t bias = given_bias != no_slot ? p.view(pd->weights_desc(1), given_bias)  // [O] or, for a matmul, [1, O]
                                                   : p.constant(p.store().biases[index], pd->weights_desc(1));
    p.keep_weights(index, weights, given_bias != no_slot ? no_slot : bias);
    const std::size_t out = p.add_slot(pd->dst_desc());
    const std::int64_t made = with->empty() ? fc.record.output : p.finished(with->back());
    p.bind(made, p.view(dense(shaped), out));
    std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_SRC, flat}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, out}};
    p.call(dnnl::primitive(*pd), std::move(arguments), pd->scratchpad_desc());
    if (with->empty())
      for (std::size_t next : fused) p.plan_step(next);
    return;
  }
  // Dense [O, I] bytes: from the store's [I, O] as its transposed layout (ba) when it holds [I, O].
  const std::size_t weights =
      p.constant(p.store().weights[index], as_matmul ? md({features, outputs}, f32, tag::ba) : md({outputs, features}, f32, tag::ab));
  const std::size_t bias = given_bias != no_slot ? given_bias : p.constant(p.store().biases[index], md({outputs}, f32, tag::a));
  p.keep_weights(index, weights, given_bias != no_slot ? no_slot : bias);
  p.define(fc.record.output, dense(shaped));
  const dnnl::memory weight_memory = p.constant_memory(weights);
  auto run_linear = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    c10::InferenceMode inference;
    const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), {rows, features}, at::kFloat);
    const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), {outputs, features}, at::kFloat);
    const at::Tensor b = at::from_blob(arguments.at(DNNL_ARG_BIAS).get_data_handle(), {outputs}, at::kFloat);
    at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), {rows, outputs}, at::kFloat).copy_(at::linear(x, w, b));
  };
  p.call(dnnl::primitive(), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, p.value(fc.record.output)}}, md(), run_linear,
         "inner_product", "aten::linear");
  for (std::size_t next : fused) p.plan_step(next);
}

}  // namespace onednn_delegate
