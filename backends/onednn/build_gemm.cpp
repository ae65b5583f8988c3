// The builders on our GEMM (gemm.hpp), where oneDNN runs AVX2: a linear's (linear_on_own_gemm,
// from build_linear.cpp) and a 1x1 convolution's (pointwise_conv_on_own_gemm, from
// build_convolution.cpp). The weights are packed once per plan and kept packed in the store after
// it, and unpacked for a later plan on oneDNN's kernels (packed_weights, unpack_stored_weights);
// each call's work is cut into units of one image's panel and block of rows (for_each_unit).
#include "gemm.hpp"
#include "builders.hpp"
#include "internal.hpp"

#include <ATen/Parallel.h>

#include <algorithm>

namespace onednn_delegate {

// This family's own helpers (defined below).
/// Step `index`'s weights packed for our GEMM, a constant slot: the store's when they are packed
/// already, else the store's read as `plain` ([O, I] row-major: ab, or oihw of a 1x1) and packed.
static std::size_t packed_weights(plan_context& p, std::size_t index, const md& plain);

md packed_weights_desc(std::int64_t outputs, std::int64_t features) {
  return md({gemm::panels(outputs), features, gemm::panel_width}, f32, tag::abc);
}

namespace {
/// Whether a product of `multiply_adds` runs on the calling thread (one_thread_work; unless
/// TD_ONEDNN_ONE_THREAD=0).
bool on_one_thread(std::int64_t multiply_adds) {
  static const bool small_on_one_thread = !switched_off("TD_ONEDNN_ONE_THREAD");
  return small_on_one_thread && multiply_adds <= one_thread_work;
}

/// `unit(image, panel, first_row, last_row)` for every unit of `images` products of `rows` rows by
/// `panels` panels (gemm::split_work: whole panels where there are at least 4 a thread, each panel
/// then meeting every row while it is in cache, else blocks of rows too), on the calling thread or
/// split between ATen's threads.
template <class Unit>
void for_each_unit(bool one_thread, std::int64_t images, std::int64_t rows, std::int64_t panels, const Unit& unit) {
  if (images <= 0 || panels <= 0) return;  // a product of 0 outputs
  const std::int64_t threads = one_thread ? 1 : at::get_num_threads();
  const gemm::work_split split = gemm::split_work(rows, images * panels, threads);
  const auto units = [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t u = first; u < last; ++u) {
      const std::int64_t row = u % split.blocks * split.block_rows;
      unit(u / (panels * split.blocks), u / split.blocks % panels, row, std::min(rows, row + split.block_rows));
    }
  };
  const std::int64_t count = images * panels * split.blocks;
  if (threads == 1)
    units(0, count);
  else
    at::parallel_for(0, count, 1, units);
}
}  // namespace

std::size_t packed_weights(plan_context& p, std::size_t index, const md& plain) {
  const std::int64_t outputs = plain.dims()[0], features = plain.dims()[1];
  const md packed_desc = packed_weights_desc(outputs, features);
  if (p.store().weights[index].get_desc() == packed_desc) return p.constant(p.store().weights[index], packed_desc);
  dnnl::memory given = p.store().weights[index];
  if (given.get_desc() != plain) given = reordered_now(given, plain);
  dnnl::memory packed(packed_desc, cpu_engine());
  gemm::pack_weights(static_cast<const float*>(given.get_data_handle()), outputs, features, static_cast<float*>(packed.get_data_handle()));
  return p.constant_as_is(packed);
}

void unpack_stored_weights(plan_context& p, std::size_t index, const md& plain) {
  const std::int64_t outputs = plain.dims()[0], features = plain.dims()[1];
  if (p.store().weights[index].get_desc() != packed_weights_desc(outputs, features)) return;
  dnnl::memory unpacked(plain, cpu_engine());
  gemm::unpack_weights(static_cast<const float*>(p.store().weights[index].get_data_handle()), outputs, features,
                       static_cast<float*>(unpacked.get_data_handle()));
  p.store().weights[index] = unpacked;
}

bool own_gemm_enabled() {
  static const bool enabled = own_avx2_kernels_allowed("TD_ONEDNN_GEMM") && !onednn_runs_avx512();
  return enabled;
}

std::optional<gemm::activation> own_gemm_activation(const plan_context& p, std::size_t index) {
  const std::vector<std::size_t>& post_ops = p.step(index).fusion.post_ops;
  if (post_ops.empty()) return gemm::activation::none;
  if (post_ops.size() > 1) return std::nullopt;
  const compiled_step& after = p.step(post_ops[0]);
  if (after.kind == step_kind::relu) return gemm::activation::relu;
  if (after.kind == step_kind::activation && after.record.activation && after.record.activation->kind == "gelu_erf")
    return gemm::activation::gelu_erf;
  return std::nullopt;
}

void linear_on_own_gemm(plan_context& p, std::size_t index, std::size_t flat, std::int64_t rows, const dims& shaped, std::size_t given_bias,
                        gemm::activation then) {
  const compiled_step& fc = p.step(index);
  const std::int64_t outputs = fc.weight_sizes[0], features = fc.weight_sizes[1];
  const std::int64_t panels = gemm::panels(outputs);
  const std::size_t weights = packed_weights(p, index, md({outputs, features}, f32, tag::ab));
  const std::size_t bias = given_bias != no_slot ? given_bias : p.constant(p.store().biases[index], md({outputs}, f32, tag::a));
  p.keep_weights(index, weights, given_bias != no_slot ? no_slot : bias);
  // A lone ReLU or erf GELU after it (fusion.cpp's post-ops) is applied as each result is written.
  const std::int64_t made = then == gemm::activation::none ? fc.record.output : p.finished(fc.fusion.post_ops[0]);
  p.define(made, dense(shaped));
  const bool one_thread = on_one_thread(rows * features * outputs);
  const std::int64_t slice = gemm::features_per_slice(features, gemm::l2_cache_bytes());
  auto multiply = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    const auto* in = static_cast<const float*>(arguments.at(DNNL_ARG_SRC).get_data_handle());
    const auto* packed = static_cast<const float*>(arguments.at(DNNL_ARG_WEIGHTS).get_data_handle());
    const auto* b = static_cast<const float*>(arguments.at(DNNL_ARG_BIAS).get_data_handle());
    auto* out = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
    for_each_unit(one_thread, 1, rows, panels, [&](std::int64_t, std::int64_t panel, std::int64_t first_row, std::int64_t last_row) {
      gemm::multiply(in, features, packed, b, out, outputs, first_row, last_row, panel, panel + 1, then, slice);
    });
  };
  p.call(dnnl::primitive(), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, p.value(made)}}, md(),
         multiply, "inner_product", "gemm:avx2");
}

bool gemm_1x1_pays(std::int64_t pixels, std::int64_t features, std::int64_t outputs) {
  const std::int64_t narrower = std::min(features, outputs);
  return pixels >= 6 && ((pixels <= 64 && narrower >= 96) || (pixels <= 196 && narrower >= 256));
}

bool own_pointwise_conv_enabled() {
  static const bool enabled = own_gemm_enabled() && !switched_off("TD_ONEDNN_GEMM_1X1");
  return enabled;
}

/// A 1x1 convolution on our GEMM, in nChw8c: each image's H * W pixels are the rows (gemm::strides
/// {8, H * W * 8}), its channels the features and outputs. oneDNN 2.6's AVX2 jit_1x1 kernel ran
/// ResNeXt-101's 1024 -> 1024 at 14x14 at 223 GFLOP/s and 2048 -> 2048 at 7x7 at 157, where this
/// GEMM runs those products at 244 and 206 (docs/performance.md "1x1 convolutions on the GEMM").
bool pointwise_conv_on_own_gemm(plan_context& p, std::size_t index) {
  if (!own_pointwise_conv_enabled()) return false;
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const std::vector<std::int64_t>& w = conv.weight_sizes;
  const dims d = p.slot(p.value(conv.record.inputs[0])).dims();
  if (d.size() != 4 || w.size() != 4 || w[2] != 1 || w[3] != 1 || c.groups != 1) return false;
  if (c.stride != std::vector<std::int64_t>{1, 1} || c.padding != std::vector<std::int64_t>{0, 0}) return false;
  const std::int64_t outputs = w[0], features = w[1], images = d[0], pixels = d[2] * d[3];
  if (outputs % 8 != 0 || features % 8 != 0 || !gemm_1x1_pays(pixels, features, outputs) || p.decisions().scaled_input.count(index) != 0)
    return false;
  // The post-ops it applies: its folded ReLU alone; one residual add of its own sizes, with or
  // without the add's ReLU; a lone ReLU or clip (ReLU6: MobileNetV2's); then a SiLU of ours after it.
  std::vector<std::size_t> with = conv.fusion.post_ops;
  const bool silu_after = !with.empty() && runs_own_silu(p.step(with.back()));
  if (silu_after) with.pop_back();
  gemm::activation then = conv.fusion.relu ? gemm::activation::relu : gemm::activation::none;
  float low = 0.f, high = 0.f;
  std::int64_t residual = -1;
  if (with.size() > 1 || (!with.empty() && conv.fusion.relu)) return false;
  if (!with.empty()) {
    const compiled_step& after = p.step(with[0]);
    if (after.kind == step_kind::add) {
      const auto& inputs = after.record.inputs;
      residual = inputs[0] == p.finished(index) ? inputs[1] : inputs[0];
      if (p.slot(p.value(residual)).dims() != conv_output(p, index)) return false;  // a broadcast add
      then = after.fusion.relu ? gemm::activation::relu : gemm::activation::none;
    } else if (after.kind == step_kind::relu) {
      then = gemm::activation::relu;
    } else if (after.kind == step_kind::activation && after.record.activation && after.record.activation->kind == "clip") {
      then = gemm::activation::clip;
      const auto [algorithm, alpha, beta] = eltwise_chain(after).front();  // its bounds as floats, as oneDNN's clip takes them
      low = alpha, high = beta;
    } else {
      return false;
    }
  }
  const dims out = conv_output(p, index);
  const md blocked(out, f32, tag::nChw8c);
  const std::size_t src = p.as(p.value(conv.record.inputs[0]), md(d, f32, tag::nChw8c));
  const std::size_t addend = residual < 0 ? no_slot : p.as(p.value(residual), blocked);
  // Written over the residual where nothing reads it after (as oneDNN's sum post-op is:
  // conv_desc), each value read before it is written, by the same unit.
  const bool over_residual =
      addend != no_slot && sum_post_op_enabled() && addend == p.value(residual) && overwritable(p, residual, with[0], index);
  const std::size_t weights = packed_weights(p, index, plain_weights(w, 1));  // [O, I] is oihw's 1x1
  const std::size_t bias = p.constant(p.store().biases[index], md({outputs}, f32, tag::x));
  p.keep_weights(index, weights, bias);
  const std::int64_t made = with.empty() ? p.finished(index) : p.finished(with.back());
  if (over_residual)
    p.bind(made, p.view(blocked, addend));
  else
    p.define(made, blocked);
  const std::int64_t panels = gemm::panels(outputs), slice = gemm::features_per_slice(features, gemm::l2_cache_bytes());
  const bool one_thread = on_one_thread(images * pixels * features * outputs);
  const bool with_residual = addend != no_slot;
  auto multiply = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    const auto* x = static_cast<const float*>(arguments.at(DNNL_ARG_SRC).get_data_handle());
    const auto* packed = static_cast<const float*>(arguments.at(DNNL_ARG_WEIGHTS).get_data_handle());
    const auto* b = static_cast<const float*>(arguments.at(DNNL_ARG_BIAS).get_data_handle());
    const auto* r = with_residual ? static_cast<const float*>(arguments.at(DNNL_ARG_SRC_1).get_data_handle()) : nullptr;
    auto* y = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
    const gemm::strides image{8, pixels * 8};
    for_each_unit(one_thread, images, pixels, panels, [&](std::int64_t n, std::int64_t panel, std::int64_t first_row, std::int64_t last_row) {
      const std::int64_t in_at = n * features * pixels, out_at = n * outputs * pixels;
      gemm::multiply(x + in_at, image, features, packed, b, r ? r + out_at : nullptr, y + out_at, image, outputs, first_row, last_row,
                     panel, panel + 1, then, slice, low, high);
    });
  };
  std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}};
  if (with_residual) arguments.emplace_back(DNNL_ARG_SRC_1, addend);
  arguments.emplace_back(DNNL_ARG_DST, p.value(made));
  p.call(dnnl::primitive(), std::move(arguments), md(), multiply, "convolution", "gemm_1x1:avx2");
  if (silu_after) post_op_alone(p, conv.fusion.post_ops.back());
  return true;
}

}  // namespace onednn_delegate
