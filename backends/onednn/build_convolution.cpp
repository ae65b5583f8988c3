// The convolution builder: a oneDNN convolution with the post-ops fusion.cpp gave it, never on a
// reference kernel (is_reference), falling back in a fixed order (docs/onednn.md "Which kernels a
// plan runs"): fused, then alone, then in other layouts, then ATen's conv2d. Before them: Winograd
// (build_winograd.cpp), a batch norm of a cat's view (channel_affine), a 1x1 convolution on our
// GEMM where oneDNN runs AVX2 (gemm.hpp).
#include "channel_affine.hpp"
#include "builders.hpp"
#include "internal.hpp"

#include "toolkit/support_rules.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>

namespace onednn_delegate {

/// A convolution primitive the builder may pick, and how it reads its fused adds.
struct conv_candidate {
  dnnl::convolution_forward::primitive_desc pd;
  std::vector<std::tuple<int, std::size_t, md>> addends;  // (post-op index, slot, the layout it is read in)
  std::size_t sum_into = no_slot;                         // a residual added as a sum post-op: the result is written over it
  bool sum_into_copy = false;                             // ... over a copy of it in the destination's layout (brgconv_with_residual)
};

// This family's own helpers (defined below).
static std::optional<conv_candidate> conv_desc(const plan_context& p, std::size_t index, const std::vector<std::size_t>& with,
                                               const md& src, std::optional<tag> layout, bool sum_into_copy = false);
/// Whether convolution `index` is wide enough for brgconv between reorders (a kernel wider than
/// 1x1, no groups, 96 input channels or more, 64 at a stride above 1) and its input in nChw16c.
static bool wide_in_blocks(const plan_context& p, std::size_t index);
static bool brgconv_between_reorders(const plan_context& p, std::size_t index, const conv_candidate& picked);
/// A wide convolution (wide_in_blocks) whose post-ops hold one residual add: on brgconv in nhwc,
/// its residual copied into nhwc and the sum written over the copy; nullopt where oneDNN gives
/// it no brgconv kernel.
static std::optional<conv_candidate> brgconv_with_residual(const plan_context& p, std::size_t index, const std::vector<std::size_t>& with);
static bool channel_affine_convolution(plan_context& p, std::size_t index);
static void emit_conv(plan_context& p, std::size_t index, const conv_candidate& chosen, const std::vector<std::size_t>& with);
static void conv_in_aten(plan_context& p, std::size_t index);

namespace {
/// The weight's dims as oneDNN takes them: [groups, O / groups, I / groups, kh, kw] when grouped
/// (3-d: [groups, O / groups, I / groups, kt, kh, kw]).
dims grouped_weight_dims(const std::vector<std::int64_t>& weight, std::int64_t groups) {
  dims made(weight.begin(), weight.end());
  if (groups > 1) {
    made[0] /= groups;
    made.insert(made.begin(), groups);
  }
  return made;
}
}  // namespace

md plain_weights(const std::vector<std::int64_t>& weight, std::int64_t groups) {
  const dims grouped = grouped_weight_dims(weight, groups);
  return md(grouped, f32, of_rank(groups > 1 ? tag::goihw : tag::oihw, grouped.size()));
}

bool channels_last_region(const region_steps& region) {
  static const bool allowed = onednn_runs_avx512() && !switched_off("TD_ONEDNN_NHWC");
  return allowed && std::any_of(region.steps.begin(), region.steps.end(), [](const compiled_step& s) {
           // weight_sizes[1]: the input channels of a group (1 for a depthwise convolution).
           return s.kind == step_kind::convolution && s.record.convolution && s.record.convolution->groups > 1 &&
                  s.weight_sizes.size() == 4 && s.weight_sizes[1] % 16 != 0;
         });
}

namespace {
/// The ISA in a kernel's name, as a rank (0: none named, as jit:uni or ref:any).
int isa_rank(std::string_view implementation) {
  if (implementation.find("avx512") != std::string_view::npos) return 3;
  if (implementation.find("avx2") != std::string_view::npos) return 2;
  if (implementation.find("sse41") != std::string_view::npos) return 1;
  return 0;
}
}  // namespace

/// [N, O, oh, ow] ([N, O, ot, oh, ow]) for the step's input.
dims conv_output(const plan_context& p, std::size_t index) {
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const dims d = p.slot(p.value(conv.record.inputs[0])).dims();
  const std::vector<std::int64_t>& weight = conv.weight_sizes;
  dims out(d.size(), 0);
  out[0] = d[0], out[1] = weight[0];
  for (std::size_t k = 0; k + 2 < d.size() && k < c.stride.size(); ++k)
    out[k + 2] = torch_delegate::toolkit::window_output_size(d[k + 2], c.padding[k], c.padding[k], weight[k + 2], c.stride[k], c.dilation[k]);
  return out;
}

/// A convolution's primitive descriptor with the steps of `with` as post-ops (after its own folded
/// relu), its source in `src` (a layout, or tag::any), its destination (and a residual it adds) in
/// `layout`, or when none is given in oneDNN's choice (with a residual: the residual's own layout);
/// nullopt when oneDNN refuses it.
std::optional<conv_candidate> conv_desc(const plan_context& p, std::size_t index, const std::vector<std::size_t>& with, const md& src,
                                        std::optional<tag> layout, bool sum_into_copy) {
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const std::int64_t out_channels = conv.weight_sizes[0];
  dnnl::post_ops post_ops;
  int post_op_count = 0;
  auto append_relu = [&] {
    post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    ++post_op_count;
  };
  if (conv.fusion.relu) append_relu();
  md out(conv_output(p, index), f32, layout ? *layout : tag::any);
  conv_candidate made{{}, {}};
  std::int64_t result = p.finished(index);
  for (std::size_t next : with) {
    const compiled_step& fused = p.step(next);
    if (fused.kind == step_kind::add) {
      const auto& inputs = fused.record.inputs;
      const std::int64_t residual = inputs[0] == result ? inputs[1] : inputs[0];
      const std::size_t other = p.value(residual);
      if (p.slot(other).dims() != conv_output(p, index)) return std::nullopt;  // a broadcast add runs after it
      const md addend = layout ? md(p.slot(other).dims(), f32, *layout) : p.slot(other);
      out = addend;  // the sum is made in the residual's layout
      const bool one_add = std::count_if(with.begin(), with.end(), [&](std::size_t k) { return p.step(k).kind == step_kind::add; }) == 1;
      if (sum_into_copy && layout && one_add) {  // written over a copy of the residual in `layout` (emit_conv makes it)
        post_ops.append_sum(1.f);
        made.sum_into = other;
        made.sum_into_copy = true;
        ++post_op_count;
      } else if (sum_post_op_enabled() && one_add && addend == p.slot(other) && overwritable(p, residual, next, index)) {
        // Written over the residual, which no step reads after it (the one add of the post-ops, so
        // that no binary one reads those bytes): a sum post-op, which oneDNN 2.6
        // runs on its brgconv kernels, where a binary add takes the older jit_1x1 ones in nhwc
        // (ResNeXt-50's 1x1 convolutions with their residual: 6-12 % slower that way).
        post_ops.append_sum(1.f);
        made.sum_into = other;
        ++post_op_count;
      } else {
        post_ops.append_binary(dnnl::algorithm::binary_add, addend);
        made.addends.emplace_back(post_op_count++, other, addend);
      }
      if (fused.fusion.relu) append_relu();
    } else {
      for (const auto& [algorithm, alpha, beta] : eltwise_chain(fused)) {
        post_ops.append_eltwise(1.f, algorithm, alpha, beta);
        ++post_op_count;
      }
    }
    result = p.finished(next);
  }
  dims dilation(c.dilation.begin(), c.dilation.end());
  for (auto& each : dilation) each -= 1;  // oneDNN counts the gaps
  const dims stride(c.stride.begin(), c.stride.end()), padding(c.padding.begin(), c.padding.end());
  try {
    made.pd = dnnl::convolution_forward::primitive_desc(
        {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
         md(grouped_weight_dims(conv.weight_sizes, c.groups), f32, tag::any), md({out_channels}, f32, tag::x), out, stride, dilation,
         padding, padding},
        attributes(post_ops), cpu_engine());
  } catch (const dnnl::error&) {
    return std::nullopt;  // e.g. a residual in a layout its kernels do not write
  }
  return made;
}

/// Whether a convolution whose input is in nChw16c runs on oneDNN's pick, brgconv in nhwc, with a
/// reorder of its input into nhwc and of its result back into nChw16c, rather than on the direct
/// kernel that reads nChw16c (jit:avx512_core). On AVX-512, for a kernel wider than 1x1 with at
/// least 96 input channels, or 64 at a stride above 1, brgconv is 15-40 % faster (a standalone
/// run, caches flushed between calls: ResNet-50's 512 -> 512 at 7x7 888 -> 722 us, at 14x14
/// stride 2 1037 -> 731; GoogLeNet's 160 -> 320 at 7x7 198 -> 139), far more than the two reorders
/// cost; below that (SqueezeNet's 16 -> 64 at 54x54: 4 %) the reorders ate the gain (SqueezeNet
/// 1.10x its time with every 3x3 convolution so). With a residual add fused: brgconv_with_residual.
/// TD_ONEDNN_BRGCONV=0 turns it off.
bool wide_in_blocks(const plan_context& p, std::size_t index) {
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const md& given = p.slot(p.value(conv.record.inputs[0]));
  const dims d = given.dims();
  if (d.size() != 4) return false;  // 2-d convolutions only
  const std::int64_t channels = d[1];
  const bool wide = c.groups == 1 && (conv.weight_sizes[2] > 1 || conv.weight_sizes[3] > 1) &&
                    (channels >= 96 || (channels >= 64 && (c.stride[0] > 1 || c.stride[1] > 1)));
  return wide && given == md(d, f32, tag::nChw16c);
}

bool brgconv_between_reorders(const plan_context& p, std::size_t index, const conv_candidate& picked) {
  if (!brgconv_between_reorders_enabled() || !wide_in_blocks(p, index)) return false;
  const dims d = p.slot(p.value(p.step(index).record.inputs[0])).dims();
  return picked.pd.src_desc() == md(d, f32, tag::nhwc) && std::string_view(picked.pd.impl_info_str()).starts_with("brgconv:") &&
         picked.sum_into == no_slot && picked.addends.empty();
}

/// oneDNN 2.6 gives a wide convolution with a residual add in nChw16c its older direct kernel
/// (jit:avx512_core), in nhwc with a binary add post-op too; with a sum post-op in nhwc, brgconv:
/// 18-23 % faster at 512 -> 512 on 7x7 (0.511 -> 0.420 ms and 0.495 -> 0.383, a one-off oneDNN
/// program, caches flushed between calls, AVX-512 EPYC, 2 threads), where a reorder of the
/// 100 KB residual takes 4 us. So the residual is copied into nhwc and the sum written over the
/// copy (the residual itself is left as it is), between the input's reorder and the result's.
/// TD_ONEDNN_BRGCONV_RESIDUAL=0 (or TD_ONEDNN_BRGCONV=0, TD_ONEDNN_SUM=0) turns it off.
std::optional<conv_candidate> brgconv_with_residual(const plan_context& p, std::size_t index, const std::vector<std::size_t>& with) {
  if (!brgconv_with_residual_enabled() || !brgconv_between_reorders_enabled() || !sum_post_op_enabled() || !wide_in_blocks(p, index))
    return std::nullopt;
  if (std::count_if(with.begin(), with.end(), [&](std::size_t k) { return p.step(k).kind == step_kind::add; }) != 1) return std::nullopt;
  const dims d = p.slot(p.value(p.step(index).record.inputs[0])).dims();
  std::optional<conv_candidate> made = conv_desc(p, index, with, md(d, f32, tag::nhwc), tag::nhwc, true);
  if (!made || !made->sum_into_copy || !std::string_view(made->pd.impl_info_str()).starts_with("brgconv:")) return std::nullopt;
  return made;
}

/// A convolution, never on a reference kernel (is_reference). First Winograd, where it applies
/// (build_winograd.cpp). Then, in order, the first that oneDNN
/// runs with a JIT kernel: (1) with its post-ops fused, in nhwc in a channels-last region
/// (channels_last_region; not a GEMM-based kernel), else in the layout oneDNN picks or in its
/// input's own (no reorder; preferred when both are fast, but for a wide brgconv:
/// brgconv_between_reorders); (2) alone, the fused steps after it as
/// primitives of their own, the same two layouts; (3) alone, source and destination in each of
/// nChw16c, nChw8c, nhwc, nchw (weights: oneDNN's pick); (4) ATen's conv2d on dense NCHW, as
/// LibTorch runs it. Its folded relu goes with it in each. A 3-d or 1-d convolution the same, in
/// those layouts' 3-d or 1-d forms, and never on a GEMM-based kernel (then ATen's conv3d, conv1d).
void convolution(plan_context& p, std::size_t index) {
  const compiled_step& conv = p.step(index);
  const std::vector<std::size_t>& fused = conv.fusion.post_ops;
  const std::size_t in = p.value(conv.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const std::int64_t channels = conv.weight_sizes[1] * conv.record.convolution->groups;
  if (d[1] != channels)
    p.refuse("a convolution of " + std::to_string(channels) + " input channels given " + std::to_string(d[1]) + " (input " +
             p.describe(conv) + ")");
  if (d.size() != conv.weight_sizes.size())
    p.refuse("a " + std::to_string(conv.weight_sizes.size() - 2) + "-d convolution given a " + std::to_string(d.size()) + "-d input (" +
             p.describe(conv) + ")");
  const dims out = conv_output(p, index);
  if (std::any_of(out.begin() + 2, out.end(), [](std::int64_t size) { return size <= 0; }))
    p.refuse("a convolution's input " + p.describe(conv) + " is smaller than its kernel");
  if (winograd_convolution(p, index)) return;        // a 3x3, stride-1 convolution where Winograd applies
  if (channel_affine_convolution(p, index)) return;  // a per-channel scale and shift of a cat's view
  if (pointwise_conv_on_own_gemm(p, index)) return;  // a 1x1 convolution on our GEMM (AVX2)
  // An earlier plan's weights, packed for our GEMM: [O, I, 1, 1] again for oneDNN's kernels and
  // ATen's. (Only a 2-d 1x1 convolution's can be: a 1-d one's [1, I, 16] dense weights have the
  // packed descriptor too.)
  const std::vector<std::int64_t>& w = conv.weight_sizes;
  if (w.size() == 4 && w[2] == 1 && w[3] == 1 && conv.record.convolution->groups == 1) unpack_stored_weights(p, index, plain_weights(w, 1));
  const auto gemm = [](const std::optional<conv_candidate>& c) {
    return c && std::string_view(c->pd.impl_info_str()).find("gemm") != std::string_view::npos;
  };
  // A 3-d or 1-d convolution not on a GEMM-based kernel either (below AVX2 the only one oneDNN 2.6
  // has for 3-d: an im2col of every tap of a 3-d window per call; for a dilated depthwise 1-d one
  // its only one), but on ATen's conv3d or conv1d, as LibTorch runs it (R3D-18 lowered ran 1.17x
  // slower than scripted with ONEDNN_MAX_CPU_ISA=SSE41 on it; ConvTasNet's depthwise Conv1d of 512
  // channels, dilation 4, 0.89 ms against ATen's 0.35).
  const bool not_2d = d.size() != 4;
  const auto fast = [&](const std::optional<conv_candidate>& c) { return c && !is_reference(c->pd.impl_info_str()) && !(not_2d && gemm(c)); };
  const std::vector<std::size_t> alone;
  // A SiLU that ends the post-ops runs after the convolution on our kernel (silu.hpp), faster
  // than oneDNN's swish post-op.
  const bool silu_after = !fused.empty() && runs_own_silu(p.step(fused.back()));
  const std::vector<std::size_t> with_onednn(fused.begin(), silu_after ? fused.end() - 1 : fused.end());
  for (const std::vector<std::size_t>* with : {&with_onednn, &alone}) {
    if (with == &alone && with_onednn.empty()) break;  // (1) was already alone
    std::optional<conv_candidate> chosen;
    bool between_reorders = false;  // oneDNN's pick, brgconv in nhwc, where the input is in nChw16c
    if (p.channels_last()) {        // nhwc in and out (its input reordered once if need be), where oneDNN has a direct kernel for it
      chosen = conv_desc(p, index, *with, in_layout(d, tag::nhwc), of_rank(tag::nhwc, d.size()));
      if (!fast(chosen) || gemm(chosen)) chosen.reset();
    }
    const bool in_nhwc = chosen.has_value();
    if (!in_nhwc) chosen = conv_desc(p, index, *with, md(d, f32, tag::any), std::nullopt);
    if (!in_nhwc && (!chosen || chosen->pd.src_desc() != p.slot(in))) {
      // The input's own layout saves a reorder, but not at the price of a GEMM-based kernel
      // (im2col and a matrix product: ShuffleNetV2's convolutions on its 58-channel plain
      // inputs ran 2x slower that way) where oneDNN's pick has a direct one.
      std::optional<conv_candidate> own = conv_desc(p, index, *with, p.slot(in), std::nullopt);
      // Nor at the price of a narrower ISA: on AVX-512 an input in nChw8c (a grouped convolution's
      // layout) gets AVX2 kernels where oneDNN's pick, nChw16c, gets AVX-512 ones (ResNeXt-50's
      // 1x1 convolutions: 46 ms a call that way against 28).
      const bool narrower = own && fast(chosen) && isa_rank(own->pd.impl_info_str()) < isa_rank(chosen->pd.impl_info_str());
      between_reorders = chosen && with == &with_onednn && !silu_after && brgconv_between_reorders(p, index, *chosen);
      if (fast(own) && !(gemm(own) && fast(chosen) && !gemm(chosen)) && !narrower && !between_reorders) chosen = std::move(own);
    }
    if (!in_nhwc && !between_reorders && with == &with_onednn && !silu_after && fast(chosen) &&
        !std::string_view(chosen->pd.impl_info_str()).starts_with("brgconv:")) {
      if (std::optional<conv_candidate> copied = brgconv_with_residual(p, index, *with)) {
        chosen = std::move(copied);
        between_reorders = true;
      }
    }
    if (fast(chosen)) {
      emit_conv(p, index, *chosen, *with);
      if (between_reorders) {  // back into the region's layout: its next steps keep theirs
        const std::int64_t made = with->empty() ? p.finished(index) : p.finished(with->back());
        p.bind(made, p.as(p.value(made), md(out, f32, tag::nChw16c)));
      }
      if (silu_after && !with->empty()) post_op_alone(p, fused.back());  // emit_conv ran the post-ops itself when alone
      return;
    }
  }
  for (const tag image : {tag::nChw16c, tag::nChw8c, tag::nhwc, tag::nchw}) {
    const tag layout = of_rank(image, d.size());
    std::optional<conv_candidate> candidate = conv_desc(p, index, alone, md(d, f32, layout), layout);
    if (fast(candidate)) return emit_conv(p, index, *candidate, alone);
  }
  conv_in_aten(p, index);
}

bool overwritable(const plan_context& p, std::int64_t id, std::size_t adder, std::size_t conv) {
  const std::size_t base = p.root(p.value(id));
  if (base < static_cast<std::size_t>(p.region().inputs) || p.constant_memory(base) || p.decisions().chain_filled.count(base)) return false;
  // Every value in those bytes (the residual, the value it views, other views of it: a residual
  // that is itself a sum written over the block's input before, a cat's part) is read by no step
  // after the add and is no result.
  for (std::int64_t other = 0; other < p.region().values; ++other) {
    if (p.slot_of(other) == no_slot || p.root(p.slot_of(other)) != base) continue;
    if (p.is_output(other)) return false;
    const auto& readers = p.readers(other);
    if (std::any_of(readers.begin(), readers.end(), [&](std::size_t reader) { return reader > adder; })) return false;
  }
  return p.root(p.value(p.step(conv).record.inputs[0])) != base;
}

/// A depthwise 1x1 convolution (a batch norm: a scale and shift per channel), with at most a ReLU
/// after it, of an nhwc view of part of a wider tensor's channels (a cat of a chain, cat_chain):
/// our kernel (channel_affine.hpp) reads the view where oneDNN's JIT kernels read only dense
/// tensors; its result is dense nhwc. False (nothing planned) for any other convolution or input.
bool channel_affine_convolution(plan_context& p, std::size_t index) {
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const std::size_t in = p.value(conv.record.inputs[0]);
  const md given = p.slot(in);  // a copy: constant() below adds slots
  const dims d = given.dims();
  const std::vector<std::int64_t>& w = conv.weight_sizes;
  if (d.size() != 4 || w != std::vector<std::int64_t>{d[1], 1, 1, 1} || c.groups != d[1] || !conv.fusion.post_ops.empty()) return false;
  if (c.stride != std::vector<std::int64_t>{1, 1} || c.padding != std::vector<std::int64_t>{0, 0}) return false;
  if (given.data.format_kind != dnnl_blocked || given.data.format_desc.blocking.inner_nblks != 0) return false;
  const auto* strides = given.data.format_desc.blocking.strides;
  const std::int64_t pixel = strides[3];  // the wider tensor's channels
  if (strides[1] != 1 || pixel <= d[1] || strides[2] != d[3] * pixel || strides[0] != d[2] * d[3] * pixel) return false;
  const std::size_t weights = p.constant(p.store().weights[index], md(grouped_weight_dims(w, c.groups), f32, tag::goihw));
  const std::size_t bias = p.constant(p.store().biases[index], md({d[1]}, f32, tag::x));
  p.keep_weights(index, weights, bias);
  p.define(p.finished(index), md(d, f32, tag::nhwc));
  const dnnl::memory scale = p.constant_memory(weights), shift = p.constant_memory(bias);
  const std::int64_t channels = d[1], pixels = d[0] * d[2] * d[3], offset = given.data.offset0;
  const bool relu = conv.fusion.relu.has_value();
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, p.value(p.finished(index))}}, md(),
      [=](const std::unordered_map<int, dnnl::memory>& bound) {
        const float* x = static_cast<const float*>(bound.at(DNNL_ARG_SRC).get_data_handle()) + offset;
        auto* y = static_cast<float*>(bound.at(DNNL_ARG_DST).get_data_handle());
        const auto* s = static_cast<const float*>(scale.get_data_handle());
        const auto* b = static_cast<const float*>(shift.get_data_handle());
        at::parallel_for(0, pixels, 64, [&](std::int64_t first, std::int64_t last) {
          channel_affine::apply(x, pixel, y, channels, s, b, relu, first, last);
        });
      },
      "convolution", channel_affine::kernel_name());
  return true;
}

void emit_conv(plan_context& p, std::size_t index, const conv_candidate& chosen, const std::vector<std::size_t>& with) {
  const compiled_step& conv = p.step(index);
  const auto& pd = chosen.pd;
  const std::size_t src = p.as(p.value(conv.record.inputs[0]), pd.src_desc());
  std::vector<std::pair<int, std::size_t>> addends;
  for (const auto& [post_op, slot, layout] : chosen.addends)
    addends.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1, p.as(slot, layout));
  const std::size_t bias = p.constant(p.store().biases[index], pd.bias_desc());
  std::size_t weights = no_slot;
  if (const auto scaled = p.decisions().scaled_input.find(index); scaled != p.decisions().scaled_input.end()) {
    // A squeeze-excitation's x * s read as x: each call, the weights scaled by s along their input
    // channels (dense, by a loop of ours), then reordered into the layout the primitive takes. (A
    // reorder with s as its per-channel scales did it in one call, but gained nothing: oneDNN 2.6
    // runs such a reorder on its generic kernel.)
    const std::vector<std::int64_t>& w = conv.weight_sizes;
    const md plain(dims(w.begin(), w.end()), f32, of_rank(tag::oihw, w.size()));
    const std::size_t stored = p.constant(p.store().weights[index], plain), scale = scaled->second.second;
    p.keep_weights(index, stored, bias);
    const std::size_t dense_scaled = p.add_slot(plain);
    const dnnl::memory original = p.constant_memory(stored);
    const std::int64_t outputs = w[0], inputs = w[1], taps = std::accumulate(w.begin() + 2, w.end(), std::int64_t{1}, std::multiplies<>());
    p.call(
        dnnl::primitive(), {{DNNL_ARG_SRC, scale}, {DNNL_ARG_DST, dense_scaled}}, md(),
        [original, outputs, inputs, taps](const std::unordered_map<int, dnnl::memory>& bound) {
          const auto* s = static_cast<const float*>(bound.at(DNNL_ARG_SRC).get_data_handle());
          const auto* from = static_cast<const float*>(original.get_data_handle());
          auto* to = static_cast<float*>(bound.at(DNNL_ARG_DST).get_data_handle());
          for (std::int64_t o = 0; o < outputs; ++o)
            for (std::int64_t c = 0; c < inputs; ++c) {
              const float factor = s[c];
              const std::int64_t at = (o * inputs + c) * taps;
              for (std::int64_t t = 0; t < taps; ++t) to[at + t] = from[at + t] * factor;
            }
        },
        "convolution", "scale_weights:cpp");
    weights = p.add_slot(pd.weights_desc());
    p.call(dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plain, cpu_engine(), pd.weights_desc())),
           {{DNNL_ARG_FROM, dense_scaled}, {DNNL_ARG_TO, weights}}, md());
  } else {
    weights = p.constant(p.store().weights[index], pd.weights_desc());
    p.keep_weights(index, weights, bias);
  }
  const std::int64_t made = with.empty() ? p.finished(index) : p.finished(with.back());
  if (chosen.sum_into != no_slot && chosen.sum_into_copy)  // over a copy of the residual, in the destination's layout
    p.bind(made, p.copy_as(chosen.sum_into, pd.dst_desc()));
  else if (chosen.sum_into != no_slot)
    p.bind(made, p.view(pd.dst_desc(), chosen.sum_into));  // over the residual's bytes
  else
    p.define(made, pd.dst_desc());
  std::vector<std::pair<int, std::size_t>> arguments{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, p.value(made)}};
  arguments.insert(arguments.end(), addends.begin(), addends.end());
  p.call(dnnl::convolution_forward(pd), std::move(arguments), pd.scratchpad_desc());
  if (with.empty())
    for (std::size_t next : conv.fusion.post_ops) post_op_alone(p, next);
}

/// A convolution for which oneDNN offered only reference kernels, in every layout: ATen's conv2d
/// (conv3d) on dense NCHW (NCDHW) tensors (the weights kept dense in the plan), its post-ops after it.
void conv_in_aten(plan_context& p, std::size_t index) {
  make_scaled_input(p, index);  // ATen reads the product itself
  const compiled_step& conv = p.step(index);
  const convolution_parameters& c = *conv.record.convolution;
  const dims d = p.slot(p.value(conv.record.inputs[0])).dims();
  const std::vector<std::int64_t> weight = conv.weight_sizes;
  const std::int64_t groups = c.groups, out_channels = weight[0];
  const std::size_t src = p.as(p.value(conv.record.inputs[0]), dense(d));
  const std::size_t weights = p.constant(p.store().weights[index], plain_weights(weight, groups));
  const std::size_t bias = p.constant(p.store().biases[index], md({out_channels}, f32, tag::x));
  p.keep_weights(index, weights, bias);
  const dims out = conv_output(p, index);
  p.define(p.finished(index), dense(out));
  const dnnl::memory weight_memory = p.constant_memory(weights), bias_memory = p.constant_memory(bias);
  const std::vector<std::int64_t> stride = c.stride, padding = c.padding, dilation = c.dilation;
  const bool then_relu = conv.fusion.relu.has_value();
  auto run_conv2d = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    c10::InferenceMode inference;
    const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), d, at::kFloat);
    const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), weight, at::kFloat);
    const at::Tensor b = at::from_blob(bias_memory.get_data_handle(), {out_channels}, at::kFloat);
    at::Tensor y = weight.size() == 5   ? at::conv3d(x, w, b, stride, padding, dilation, groups)
                   : weight.size() == 3 ? at::conv1d(x, w, b, stride, padding, dilation, groups)
                                        : at::conv2d(x, w, b, stride, padding, dilation, groups);
    if (then_relu) y.relu_();
    at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), out, at::kFloat).copy_(y);
  };
  p.call(dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(p.finished(index))}}, md(), run_conv2d, "convolution",
         weight.size() == 5   ? "aten::conv3d"
         : weight.size() == 3 ? "aten::conv1d"
                              : "aten::conv2d");
  for (std::size_t next : conv.fusion.post_ops) post_op_alone(p, next);
}

}  // namespace onednn_delegate
