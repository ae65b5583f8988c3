// The linear builder: over the last dimension, on our GEMM where oneDNN runs AVX2 (gemm.hpp),
// else oneDNN's inner product (its matmul where oneDNN runs AVX-512) with the activations
// fusion.cpp gave it as post-ops, never on a reference kernel; else alone, else ATen's linear.
#include "gemm.hpp"
#include "internal.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace onednn_delegate {

/// Where a linear's weights are packed for our GEMM: [panels, I, 16] (gemm.hpp).
md packed_weights_desc(std::int64_t outputs, std::int64_t features) {
  return md({gemm::panels(outputs), features, gemm::panel_width}, f32, tag::abc);
}

bool own_gemm_enabled() {
  static const bool enabled = own_avx2_kernels_allowed("TD_ONEDNN_GEMM") && !onednn_runs_avx512();
  return enabled;
}

std::optional<gemm::activation> planner::own_gemm_activation(std::size_t index) const {
  const std::vector<std::size_t>& post_ops = step(index).fusion.post_ops;
  if (post_ops.empty()) return gemm::activation::none;
  if (post_ops.size() > 1) return std::nullopt;
  const compiled_step& after = step(post_ops[0]);
  if (after.kind == step_kind::relu) return gemm::activation::relu;
  if (after.kind == step_kind::activation && after.record.activation && after.record.activation->kind == "gelu_erf")
    return gemm::activation::gelu_erf;
  return std::nullopt;
}

void planner::linear_on_own_gemm(std::size_t index, std::size_t flat, std::int64_t rows, const dims& shaped, std::size_t given_bias,
                                 gemm::activation then) {
  const compiled_step& fc = step(index);
  const std::int64_t outputs = fc.weight_sizes[0], features = fc.weight_sizes[1];
  const std::int64_t panels = gemm::panels(outputs);
  // Packed once: the store holds the [O, I] weights until the first plan, then that plan's, packed
  // (or in oneDNN's layout where the first plan's rows were too few for ours).
  const md packed_desc = packed_weights_desc(outputs, features);
  std::size_t weights = no_slot;
  if (store_.weights[index].get_desc() == packed_desc) {
    weights = constant(store_.weights[index], packed_desc);
  } else {
    const md plain({outputs, features}, f32, tag::ab);
    dnnl::memory given = store_.weights[index];
    if (given.get_desc() != plain) given = reordered_now(given, plain);
    dnnl::memory packed(packed_desc, cpu_engine());
    gemm::pack_weights(static_cast<const float*>(given.get_data_handle()), outputs, features, static_cast<float*>(packed.get_data_handle()));
    weights = add_slot(packed_desc);
    plan_.constants[weights] = packed;
  }
  const std::size_t bias = given_bias != no_slot ? given_bias : constant(store_.biases[index], md({outputs}, f32, tag::a));
  own_weights_.emplace_back(index, weights, given_bias != no_slot ? no_slot : bias);
  // A lone ReLU or erf GELU after it (fusion.cpp's post-ops) is applied as each result is written.
  const std::int64_t made = then == gemm::activation::none ? fc.record.output : finished(fc.fusion.post_ops[0]);
  define(made, dense(shaped));
  // The work in units of one panel and a block of rows: whole panels where there are at least 4
  // a thread (each panel then meets every row while it is in cache), else blocks of rows too.
  static const bool small_on_one_thread = !switched_off("TD_ONEDNN_ONE_THREAD");
  const bool one_thread = small_on_one_thread && rows * features * outputs <= one_thread_work;
  const std::int64_t slice = gemm::features_per_slice(features, gemm::l2_cache_bytes());
  auto multiply = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    const auto* in = static_cast<const float*>(arguments.at(DNNL_ARG_SRC).get_data_handle());
    const auto* packed = static_cast<const float*>(arguments.at(DNNL_ARG_WEIGHTS).get_data_handle());
    const auto* b = static_cast<const float*>(arguments.at(DNNL_ARG_BIAS).get_data_handle());
    auto* out = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
    if (panels == 0) return;  // a linear of 0 outputs (rows: at least 6)
    const std::int64_t threads = one_thread ? 1 : at::get_num_threads();
    const auto [block_rows, blocks] = gemm::split_work(rows, panels, threads);
    const auto units = [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t unit = first; unit < last; ++unit) {
        const std::int64_t panel = unit / blocks, row = unit % blocks * block_rows;
        gemm::multiply(in, features, packed, b, out, outputs, row, std::min(rows, row + block_rows), panel, panel + 1, then, slice);
      }
    };
    if (threads == 1)
      units(0, panels * blocks);
    else
      at::parallel_for(0, panels * blocks, 1, units);
  };
  call(dnnl::primitive(), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, value(made)}}, md(),
       multiply, "inner_product", "gemm:avx2");
}

/// A linear over the last dimension: oneDNN's inner product (or matmul) on [rows, I] (the leading
/// dimensions flattened, in row-major order), with the activations after it as post-ops.
void planner::linear(std::size_t index) {
  const compiled_step& fc = step(index);
  const std::vector<std::size_t>& fused = fc.fusion.post_ops;
  const dims d = plan_.slots[value(fc.record.inputs[0])].dims();
  const std::int64_t outputs = fc.weight_sizes[0], features = fc.weight_sizes[1];
  TORCH_CHECK(d.back() == features, "onednn: region ", region_.method, ": a linear of ", features, " input features given ",
              c10::IntArrayRef(d));
  const std::size_t in = as(value(fc.record.inputs[0]), dense(d));
  std::int64_t rows = 1;
  for (std::size_t k = 0; k + 1 < d.size(); ++k) rows *= d[k];
  const std::size_t flat = view(plan_.slots[in].reshape({rows, features}), in);
  dims shaped(d.begin(), d.end() - 1);
  shaped.push_back(outputs);
  // A bias computed in the call (the step's second input; Swin V2's qkv): dense [O], read as a
  // matmul's [1, O] where the linear is one; no_slot: the store's constant.
  std::size_t given_bias = no_slot;
  if (fc.record.inputs.size() == 2) {
    const dims b = plan_.slots[value(fc.record.inputs[1])].dims();
    if (b != dims{outputs}) refuse("a linear of " + std::to_string(outputs) + " outputs given a bias of sizes " + c10::str(c10::IntArrayRef(b)));
    given_bias = as(value(fc.record.inputs[1]), dense(b));
  }
  // Our GEMM from one block of 6 rows up, where it applies the post-ops itself (none, or a lone
  // ReLU or erf GELU): else oneDNN's, with them fused (a GELU as a step of its own cost Swin-T more
  // than our GEMM gained). Below 6 rows, oneDNN's product of a vector (a CNN's classifier at batch
  // 1: 512 -> 1000 took 19 us on it, 22 on ours, at the AVX2 cap; no gain there).
  if (own_gemm_enabled() && rows >= 6 && own_gemm_activation(index))
    return linear_on_own_gemm(index, flat, rows, shaped, given_bias, *own_gemm_activation(index));
  if (store_.weights[index].get_desc() == packed_weights_desc(outputs, features)) {  // an earlier plan's, for our GEMM
    dnnl::memory plain(md({outputs, features}, f32, tag::ab), cpu_engine());
    gemm::unpack_weights(static_cast<const float*>(store_.weights[index].get_data_handle()), outputs, features,
                         static_cast<float*>(plain.get_data_handle()));
    store_.weights[index] = plain;
  }
  // Never a reference kernel: with its activations as post-ops, else alone (the activations
  // after it as primitives of their own), else ATen's linear. As a matmul where oneDNN runs
  // AVX-512 (linear_as_matmul: the store holds the weights as [I, O]), else an inner product.
  const bool as_matmul = linear_as_matmul();
  auto primitive = [&](const std::vector<std::size_t>& with) -> std::optional<dnnl::primitive_desc> {
    dnnl::post_ops post_ops;
    for (std::size_t next : with)
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(step(next))) post_ops.append_eltwise(1.f, algorithm, alpha, beta);
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
    const std::size_t weights = constant(store_.weights[index], pd->weights_desc());
    const std::size_t bias = given_bias != no_slot ? view(pd->weights_desc(1), given_bias)  // [O] or, for a matmul, [1, O]
                                                   : constant(store_.biases[index], pd->weights_desc(1));
    own_weights_.emplace_back(index, weights, given_bias != no_slot ? no_slot : bias);
    const std::size_t out = add_slot(pd->dst_desc());
    const std::int64_t made = with->empty() ? fc.record.output : finished(with->back());
    slot_of_.at(static_cast<std::size_t>(made)) = view(dense(shaped), out);
    std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_SRC, flat}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, out}};
    call(dnnl::primitive(*pd), std::move(arguments), pd->scratchpad_desc());
    if (with->empty())
      for (std::size_t next : fused) run(next);
    return;
  }
  // Dense [O, I] bytes: from the store's [I, O] as its transposed layout (ba) when it holds [I, O].
  const std::size_t weights = constant(store_.weights[index], as_matmul ? md({features, outputs}, f32, tag::ba) : md({outputs, features}, f32, tag::ab));
  const std::size_t bias = given_bias != no_slot ? given_bias : constant(store_.biases[index], md({outputs}, f32, tag::a));
  own_weights_.emplace_back(index, weights, given_bias != no_slot ? no_slot : bias);
  define(fc.record.output, dense(shaped));
  const dnnl::memory weight_memory = plan_.constants[weights];
  auto run_linear = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    c10::InferenceMode inference;
    const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), {rows, features}, at::kFloat);
    const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), {outputs, features}, at::kFloat);
    const at::Tensor b = at::from_blob(arguments.at(DNNL_ARG_BIAS).get_data_handle(), {outputs}, at::kFloat);
    at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), {rows, outputs}, at::kFloat).copy_(at::linear(x, w, b));
  };
  call(dnnl::primitive(), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, value(fc.record.output)}}, md(), run_linear,
       "inner_product", "aten::linear");
  for (std::size_t next : fused) run(next);
}

}  // namespace onednn_delegate
