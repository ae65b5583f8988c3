// The Winograd builder: a 3x3, stride-1 convolution as F(m x m, 3 x 3) (winograd.hpp) — the input
// transform and the output transform (with the bias, a residual add and ReLU/clip fused) are
// kernels of ours run on ATen's threads, the products between them one oneDNN batched matmul.
// Tried first for each eligible convolution (winograd_eligible); where it does not apply, the
// convolution builder's direct kernels run. TD_ONEDNN_WINOGRAD=0 turns it off.
#include "builders.hpp"
#include "internal.hpp"
#include "winograd.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace onednn_delegate {

bool own_avx2_kernels_allowed(const char* switch_variable) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx2 = static_cast<unsigned>(dnnl::cpu_isa::avx2);
  // oneDNN capped below AVX2 (ONEDNN_MAX_CPU_ISA): the tests' "this ISA" runs no AVX2 kernel of ours either.
  return !(switch_variable && switched_off(switch_variable)) && winograd::cpu_supported() && (isa & avx2) == avx2;
}

bool onednn_runs_avx512() {
  static const bool runs = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & avx512) == avx512;
  }();
  return runs;
}

bool linear_as_matmul() {
  static const bool matmul = onednn_runs_avx512() && !switched_off("TD_ONEDNN_LINEAR_MATMUL");
  return matmul;
}

bool sum_post_op_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_SUM");
  return enabled;
}

bool brgconv_between_reorders_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_BRGCONV");
  return enabled;
}

bool brgconv_with_residual_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_BRGCONV_RESIDUAL");
  return enabled;
}

bool cat_chain_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_CAT_CHAIN");
  return enabled;
}

bool direct_outputs_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_DIRECT_OUTPUTS");
  return enabled;
}

bool winograd_enabled() {
  static const bool enabled = own_avx2_kernels_allowed("TD_ONEDNN_WINOGRAD");
  return enabled;
}

namespace {
/// Where oneDNN runs AVX-512, its convolutions' blocked layout is nChw16c: Winograd's transforms
/// read and write that (8 channels a vector, two a block), else they would pull the convolutions
/// around them onto nChw8c's AVX2 kernels or add reorders (ResNet-50 on an AVX-512 EPYC: 39.2 ms
/// in nChw8c, 27.2 with no Winograd; docs/onednn.md).
std::int64_t activation_block() { return onednn_runs_avx512() ? 16 : 8; }

/// The debug query's name of a transform: its tile, its layout when nhwc and the kernels' ISA
/// (winograd_tiles.ipp), e.g. winograd_f4x4_input_nhwc:avx512.
const char* kernel_name(const winograd::geometry& g, bool output) {
  static const auto names = [] {
    std::array<std::string, 16> all;
    for (int k = 0; k < 16; ++k)
      all[static_cast<std::size_t>(k)] = std::string("winograd_") + (k & 8 ? "f4x4" : "f2x2") + (k & 4 ? "_output" : "_input") +
                                         (k & 2 ? "_nhwc" : "") + (k & 1 ? ":avx512" : ":avx2");
    return all;
  }();
  const bool wide = g.layout_block == 16 && winograd::avx512_supported();
  return names[static_cast<std::size_t>((g.m == 4) * 8 + output * 4 + g.channels_last * 2 + wide)].c_str();
}
}  // namespace

std::optional<winograd_choice> winograd_eligible(const std::vector<std::int64_t>& weight, const convolution_parameters& c,
                                                 const dims& input, const dims& output) {
  // A 3-d convolution of a 1x3x3 kernel (R(2+1)D's and MC3's spatial ones), no temporal padding:
  // a 2-d one per frame, the frames a batch (geometry::frames). Of a kt x 3 x 3 kernel (R3D's
  // 3x3x3), kt odd and padded to keep the frames (kt / 2 each side): the frames' transformed tiles
  // once, then per tap a product of the frames it reads with that tap's weights, summed
  // (winograd_choice::taps). Below, the 2-d view of it.
  const bool three_d = weight.size() == 5 && input.size() == 5 && output.size() == 5 && c.stride.size() == 3 && c.stride[0] == 1 &&
                       c.dilation[0] == 1;
  const std::int64_t taps = three_d ? weight[2] : 1;
  const bool same_frames = taps % 2 == 1 && c.padding[0] == taps / 2;
  if (three_d && same_frames) {
    std::optional<winograd_choice> choice = winograd_eligible(
        {weight[0], weight[1], weight[3], weight[4]},
        {{c.stride[1], c.stride[2]}, {c.padding[1], c.padding[2]}, {c.dilation[1], c.dilation[2]}, c.groups},
        {input[0] * input[2], input[1], input[3], input[4]}, {output[0] * output[2], output[1], output[3], output[4]});
    if (choice) choice->g.frames = input[2], choice->taps = taps;
    return choice;
  }
  if (three_d) return std::nullopt;
  if (c.groups != 1 || weight.size() != 4 || weight[2] != 3 || weight[3] != 3) return std::nullopt;
  if (c.stride != std::vector<std::int64_t>{1, 1} || c.dilation != std::vector<std::int64_t>{1, 1}) return std::nullopt;
  if (c.padding.size() != 2 || c.padding[0] > 2 || c.padding[1] > 2) return std::nullopt;
  const std::int64_t k = weight[0], channels = weight[1], block = activation_block();
  if (k % block || channels % block || k < 16 || channels < 16 || input.size() != 4) return std::nullopt;
  // F(4x4, 3x3) where the output has room for its tiles; F(2x2, 3x3) on small maps (ResNet's 7x7:
  // 4x4 tiles would compute 64 outputs for 49, and the 4x larger transformed weights dominate).
  const std::int64_t side = std::min(output[2], output[3]);
  if (side < 4) return std::nullopt;
  // On AVX-512 not F(2x2, 3x3): there the direct kernels are twice as fast, and F(2x2)'s products
  // on small maps (16 rows a matrix) read 16/9 of the weights' bytes at a low rate (ResNet-18's
  // 7x7, 512-channel convolutions: 1.1 ms a matmul against 0.9 ms for the whole direct one).
  if (side < 12 && block == 16) return std::nullopt;
  // Nor, there, on fewer than 64 input channels: a product's K of 16 runs the matmul far below its
  // rate (SqueezeNet's 16-channel expands: SqueezeNet 8 % faster without them), and at 32 or 48 the
  // transforms, 36/16 of the activations' bytes each way, cost more in a model than the products
  // save (SqueezeNet 6 % and GoogLeNet 4 % faster without them, 10 interleaved process pairs; that
  // with the 8-lane transforms: with the AVX-512 ones both time the same, and 64 keeps fewer
  // transformed weights).
  if (channels < 64 && block == 16) return std::nullopt;
  winograd::geometry g;
  g.m = side >= 12 ? 4 : 2;
  g.n = input[0];
  g.c = channels;
  g.k = k;
  g.h = input[2];
  g.w = input[3];
  g.oh = output[2];
  g.ow = output[3];
  g.pad_top = c.padding[0];
  g.pad_left = c.padding[1];
  g.layout_block = block;
  return winograd_choice{g};
}

/// A convolution as Winograd when it is eligible, its post-ops are ones the output transform
/// applies (ReLU, clip, a residual add) and oneDNN has a JIT matmul for the products; false
/// otherwise (nothing planned).
bool winograd_convolution(plan_context& p, std::size_t index) {
  if (!winograd_enabled()) return false;
  const compiled_step& conv = p.step(index);
  const std::size_t in = p.value(conv.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const dims out = conv_output(p, index);
  const std::optional<winograd_choice> choice = winograd_eligible(conv.weight_sizes, *conv.record.convolution, d, out);
  if (!choice || d[1] != choice->g.c) return false;
  // In nhwc in a channels-last region (DenseNet's, whose per-channel batch norms run as depthwise
  // convolutions), as its direct convolutions: no reorder into a blocked layout and back around
  // each (DenseNet-121: 1.2 ms of reorders a call on AVX-512).
  winograd::geometry g = choice->g;
  g.channels_last = p.channels_last();

  constexpr float infinity = std::numeric_limits<float>::infinity();
  std::vector<winograd::epilogue_op> ops;
  std::optional<std::size_t> residual;
  if (conv.fusion.relu) ops.push_back({winograd::epilogue_op::clip, 0.f, infinity});
  std::int64_t result = p.finished(index);
  for (std::size_t next : conv.fusion.post_ops) {
    const compiled_step& fused = p.step(next);
    if (fused.kind == step_kind::add) {
      if (residual) return false;
      const auto& inputs = fused.record.inputs;
      residual = p.value(inputs[0] == result ? inputs[1] : inputs[0]);
      if (p.slot(*residual).dims() != conv_output(p, index)) return false;  // a broadcast add: the direct kernel's fallbacks
      ops.push_back({winograd::epilogue_op::add});
      if (fused.fusion.relu) ops.push_back({winograd::epilogue_op::clip, 0.f, infinity});
    } else {
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(fused)) {
        if (algorithm == dnnl::algorithm::eltwise_relu && alpha == 0.f)
          ops.push_back({winograd::epilogue_op::clip, 0.f, infinity});
        else if (algorithm == dnnl::algorithm::eltwise_clip || algorithm == dnnl::algorithm::eltwise_clip_v2)
          ops.push_back({winograd::epilogue_op::clip, alpha, beta});
        else
          return false;  // e.g. SiLU: the direct kernels take it as a post-op
      }
    }
    result = p.finished(next);
  }

  const int positions = g.alpha() * g.alpha();
  const std::int64_t tiles = g.tiles();
  const md transformed_input({positions, tiles, g.c}, f32, tag::abc), products({positions, tiles, g.k}, f32, tag::abc);
  // One product per temporal tap, the middle one first over every frame of every clip, each other
  // one, clip by clip, added to the frames whose input frame + its offset is in the clip (rows of
  // whole frames: a frame's tiles are consecutive rows of each matrix, a clip's frames too).
  const std::int64_t taps = choice->taps, middle = taps / 2, frame_rows = tiles / g.n, clips = g.n / g.frames;
  struct tap_product {
    std::int64_t tap;
    dnnl::matmul::primitive_desc pd;  // its source and destination: the rows of the frames it reads and adds to
  };
  std::vector<tap_product> tap_products;
  for (std::int64_t k = 0; k < taps; ++k) {
    const std::int64_t tap = k == 0 ? middle : k <= middle ? k - 1 : k, offset = tap - middle;
    const std::int64_t rows = (g.frames - std::abs(offset)) * frame_rows;
    if (rows <= 0) continue;  // a clip shorter than the kernel's reach: only the middle taps meet frames
    for (std::int64_t clip = 0; clip < (offset == 0 ? 1 : clips); ++clip) {
      const std::int64_t first = clip * g.frames * frame_rows;
      const std::int64_t from = first + std::max<std::int64_t>(0, offset) * frame_rows;
      const std::int64_t to = first + std::max<std::int64_t>(0, -offset) * frame_rows;
      const md src = offset == 0 ? transformed_input : transformed_input.submemory_desc({positions, rows, g.c}, {0, from, 0});
      const md dst = offset == 0 ? products : products.submemory_desc({positions, rows, g.k}, {0, to, 0});
      dnnl::post_ops sum;
      if (offset != 0) sum.append_sum(1.f);
      try {
        tap_products.push_back(
            {tap, dnnl::matmul::primitive_desc({src, md({positions, g.c, g.k}, f32, tag::any), dst}, attributes(sum), cpu_engine())});
      } catch (const dnnl::error&) {
        return false;
      }
      if (is_reference(tap_products.back().pd.impl_info_str())) return false;
    }
  }

  // The weights: dense [k, c, 3, 3] ([k, c, kt, 3, 3]) from wherever the store holds them (a plan's
  // reordered copy, for a later shape), kept dense in the store (a direct plan for another shape
  // reorders from them); the transformed ones, a set per tap, are this plan's.
  const md dense_weights(d.size() == 5 ? dims{g.k, g.c, taps, 3, 3} : dims{g.k, g.c, 3, 3}, f32, of_rank(tag::oihw, d.size()));
  const dnnl::memory weights = reordered_now(p.store().weights[index], dense_weights);
  std::vector<std::size_t> weight_slots;
  {
    const auto* all = static_cast<const float*>(weights.get_data_handle());
    std::vector<float> one_tap(static_cast<std::size_t>(g.k * g.c * 9));
    for (std::size_t k = 0; k < tap_products.size(); ++k) {
      const tap_product& product = tap_products[k];
      if (k > 0 && tap_products[k - 1].tap == product.tap && tap_products[k - 1].pd.weights_desc() == product.pd.weights_desc()) {
        weight_slots.push_back(weight_slots.back());  // the same tap for the next clip
        continue;
      }
      for (std::int64_t pair = 0; pair < g.k * g.c; ++pair)  // [k, c, tap, 3, 3] -> [k, c, 3, 3]
        std::copy_n(all + (pair * taps + product.tap) * 9, 9, one_tap.begin() + pair * 9);
      dnnl::memory transformed_weights(md({positions, g.c, g.k}, f32, tag::abc), cpu_engine());
      winograd::transform_weights(g, one_tap.data(), static_cast<float*>(transformed_weights.get_data_handle()));
      weight_slots.push_back(p.constant(transformed_weights, product.pd.weights_desc()));
    }
  }
  p.store().weights[index] = weights;
  const std::size_t bias_slot = p.constant(p.store().biases[index], md({g.k}, f32, tag::x));
  p.store().biases[index] = p.constant_memory(bias_slot);

  const tag layout = of_rank(g.channels_last ? tag::nhwc : g.layout_block == 16 ? tag::nChw16c : tag::nChw8c, d.size());
  const md blocked_out(out, f32, layout);
  const std::size_t src = p.as(in, md(d, f32, layout));
  const std::size_t residual_slot = residual ? p.as(*residual, blocked_out) : no_slot;
  const std::size_t input_slot = p.add_slot(transformed_input), product_slot = p.add_slot(products);
  const std::int64_t made = conv.fusion.post_ops.empty() ? p.finished(index) : p.finished(conv.fusion.post_ops.back());
  p.define(made, blocked_out);

  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, input_slot}}, md(),
      [g](const std::unordered_map<int, dnnl::memory>& arguments) {
        const auto* source = static_cast<const float*>(arguments.at(DNNL_ARG_SRC).get_data_handle());
        auto* target = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
        at::parallel_for(0, g.tiles() * (g.c / 8), 16,
                         [&](std::int64_t first, std::int64_t last) { winograd::transform_input(g, source, target, first, last); });
      },
      "convolution", kernel_name(g, false));
  for (std::size_t k = 0; k < tap_products.size(); ++k) {
    const tap_product& product = tap_products[k];
    const std::size_t src_slot = product.tap == middle ? input_slot : p.view(product.pd.src_desc(), input_slot);
    const std::size_t dst_slot = product.tap == middle ? product_slot : p.view(product.pd.dst_desc(), product_slot);
    p.call(dnnl::matmul(product.pd), {{DNNL_ARG_SRC, src_slot}, {DNNL_ARG_WEIGHTS, weight_slots[k]}, {DNNL_ARG_DST, dst_slot}},
           product.pd.scratchpad_desc());
  }
  std::vector<std::pair<int, std::size_t>> arguments{
      {DNNL_ARG_SRC, product_slot}, {DNNL_ARG_BIAS, bias_slot}, {DNNL_ARG_DST, p.value(made)}};
  if (residual) arguments.emplace_back(DNNL_ARG_SRC_1, residual_slot);
  p.call(
      dnnl::primitive(), std::move(arguments), md(),
      [g, ops](const std::unordered_map<int, dnnl::memory>& arguments) {
        const auto* product = static_cast<const float*>(arguments.at(DNNL_ARG_SRC).get_data_handle());
        const auto* bias = static_cast<const float*>(arguments.at(DNNL_ARG_BIAS).get_data_handle());
        const auto found = arguments.find(DNNL_ARG_SRC_1);
        const float* addend = found == arguments.end() ? nullptr : static_cast<const float*>(found->second.get_data_handle());
        auto* target = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
        at::parallel_for(0, g.tiles() * (g.k / 8), 16, [&](std::int64_t first, std::int64_t last) {
          winograd::transform_output(g, product, bias, ops, addend, target, first, last);
        });
      },
      "convolution", kernel_name(g, true));
  return true;
}

}  // namespace onednn_delegate
