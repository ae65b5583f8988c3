// The eltwise and binary builders: activations (relu and the ones of activation_parameters), and
// the binary primitives of add, mul (a squeeze-excitation's broadcast scale) and scale (times a
// constant), each in a layout where oneDNN has a JIT kernel when one has.
#include "channel_affine.hpp"
#include "builders.hpp"
#include "internal.hpp"
#include "silu.hpp"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace onednn_delegate {

// This family's own helpers (defined below).
static void own_silu(plan_context& p, std::size_t index, std::size_t in, bool in_place);
/// a of [N, C, H, W] times b of [N, C, 1, 1] making value `made` on our kernel (channel_affine.hpp,
/// a scale alone) where oneDNN runs AVX-512 and a is nhwc, or in channel blocks that C fills;
/// false (nothing planned) otherwise.
static bool channel_scale(plan_context& p, std::size_t a, std::size_t b, std::int64_t made);
/// Whether mul step `index` (a of [1, C, H, W] times b of [1, C, 1, 1]) is left to the one
/// convolution that reads it, as weights scaled by b (plan_decisions::scaled_input).
static bool mul_into_weights(plan_context& p, std::size_t index, std::size_t a, std::size_t b);
static void binary(plan_context& p, dnnl::algorithm algorithm, std::size_t a, std::size_t b, const dnnl::post_ops& post_ops,
                   std::int64_t made);

bool own_silu_enabled() {
  static const bool enabled = own_avx2_kernels_allowed("TD_ONEDNN_SILU") && !onednn_runs_avx512();
  return enabled;
}

bool runs_own_silu(const compiled_step& step) {
  return step.kind == step_kind::activation && step.record.activation && step.record.activation->kind == "silu" &&
         own_silu_enabled();
}

std::vector<std::tuple<dnnl::algorithm, float, float>> eltwise_chain(const compiled_step& step) {
  using dnnl::algorithm;
  if (step.kind == step_kind::relu) return {{algorithm::eltwise_relu, 0.f, 0.f}};
  if (step.kind == step_kind::scale_by) return {{algorithm::eltwise_linear, static_cast<float>(*step.record.factor), 0.f}};
  const activation_parameters& a = *step.record.activation;
  if (a.kind == "sigmoid") return {{algorithm::eltwise_logistic, 0.f, 0.f}};
  if (a.kind == "silu") return {{algorithm::eltwise_swish, 1.f, 0.f}};
  if (a.kind == "hardswish") return {{algorithm::eltwise_hardswish, 0.f, 0.f}};
  if (a.kind == "hardsigmoid") return {{algorithm::eltwise_linear, 1.f / 6, 0.5f}, {algorithm::eltwise_clip, 0.f, 1.f}};
  if (a.kind == "gelu_erf") return {{algorithm::eltwise_gelu_erf, 0.f, 0.f}};
  if (a.kind == "gelu_tanh") return {{algorithm::eltwise_gelu_tanh, 0.f, 0.f}};
  const auto bound = [](double value) {  // "clip" (compile checked the kind)
    return static_cast<float>(std::clamp(value, -double(std::numeric_limits<float>::max()), double(std::numeric_limits<float>::max())));
  };
  return {{algorithm::eltwise_clip, bound(a.low), bound(a.high)}};
}

void eltwise(plan_context& p, std::size_t index) {
  const compiled_step& act = p.step(index);
  std::size_t in = p.value(act.record.inputs[0]);
  // A view that starts inside its value's bytes (a slice): a dense copy first. An eltwise's result
  // takes its input's memory descriptor, offset included, and would be written past its own
  // bytes (tests/onednn_plans.cpp, "silu in a plan after a slice").
  if (p.slot(in).data.offset0 != 0) in = p.as(in, dense(p.slot(in).dims()));
  if (runs_own_silu(act)) return own_silu(p, index, in, false);
  const auto chain = eltwise_chain(act);
  for (std::size_t k = 0; k < chain.size(); ++k) {
    const auto& [algorithm, alpha, beta] = chain[k];
    dnnl::eltwise_forward::primitive_desc pd({dnnl::prop_kind::forward_inference, algorithm, p.slot(in), alpha, beta}, attributes(),
                                             cpu_engine());
    if (is_reference(pd.impl_info_str())) {  // a strided view (attention's query, a select of a permute): dense first
      in = p.as(in, dense(p.slot(in).dims()));
      pd = dnnl::eltwise_forward::primitive_desc({dnnl::prop_kind::forward_inference, algorithm, p.slot(in), alpha, beta}, attributes(),
                                                 cpu_engine());
    }
    std::size_t out;
    if (k + 1 == chain.size()) {
      p.define(act.record.output, pd.dst_desc());
      out = p.value(act.record.output);
    } else {
      out = p.add_slot(pd.dst_desc());
    }
    p.call(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, out}}, pd.scratchpad_desc());
    in = out;
  }
}

/// F.normalize(x, dim=-1) (Swin V2's cosine attention, of its queries and keys): each row of the
/// last dimension divided by the larger of its 2-norm and eps, as ATen does, on a loop of ours
/// over rows (oneDNN 2.6 has no such primitive; its reduction and a binary division would be two
/// passes and a buffer between). A strided input (a view of the qkv linear's result) is made
/// dense first.
void normalize(plan_context& p, std::size_t index) {
  const compiled_step& normalized = p.step(index);
  std::size_t in = p.value(normalized.record.inputs[0]);
  const dims d = p.slot(in).dims();
  if (p.slot(in) != dense(d)) in = p.as(in, dense(d));
  p.define(normalized.record.output, dense(d));
  const std::int64_t width = d.back();
  std::int64_t rows = 1;
  for (std::size_t k = 0; k + 1 < d.size(); ++k) rows *= d[k];
  const auto eps = static_cast<float>(normalized.record.factor.value_or(0.0));
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, p.value(normalized.record.output)}}, md(),
      [=](const std::unordered_map<int, dnnl::memory>& bound) {
        const auto* x = static_cast<const float*>(bound.at(DNNL_ARG_SRC).get_data_handle());
        auto* y = static_cast<float*>(bound.at(DNNL_ARG_DST).get_data_handle());
        at::parallel_for(0, rows, std::max<std::int64_t>(1, (std::int64_t{1} << 14) / std::max<std::int64_t>(width, 1)),
                         [&](std::int64_t first, std::int64_t last) {
                           for (std::int64_t r = first; r < last; ++r) {
                             const float* row = x + r * width;
                             float* out = y + r * width;
                             float squares = 0.f;
                             for (std::int64_t k = 0; k < width; ++k) squares += row[k] * row[k];
                             const float norm = std::max(std::sqrt(squares), eps);
                             for (std::int64_t k = 0; k < width; ++k) out[k] = row[k] / norm;
                           }
                         });
      },
      "normalize", "normalize:any");
}

/// A SiLU on our kernel (silu.hpp) of the value in slot `in`: elementwise over its bytes from their
/// start, so in whatever layout it has (SiLU(0) = 0 keeps a blocked layout's padding 0). In place
/// (`in_place`) where the step alone reads its input (a post-op of a convolution: fusion.cpp
/// guarantees it): the convolution's output is still in the cache, and no second buffer is written.
void own_silu(plan_context& p, std::size_t index, std::size_t in, bool in_place) {
  const compiled_step& act = p.step(index);
  if (in_place)
    p.bind(act.record.output, p.view(p.slot(in), in));
  else
    p.define(act.record.output, p.slot(in));
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, p.value(act.record.output)}}, md(),
      [](const std::unordered_map<int, dnnl::memory>& arguments) {
        const dnnl::memory& source = arguments.at(DNNL_ARG_SRC);
        const auto* from = static_cast<const float*>(source.get_data_handle());
        auto* to = static_cast<float*>(arguments.at(DNNL_ARG_DST).get_data_handle());
        const auto count = static_cast<std::int64_t>(source.get_desc().get_size() / sizeof(float));
        at::parallel_for(0, count, 1 << 14, [&](std::int64_t first, std::int64_t last) {
          silu::apply(from + first, to + first, static_cast<std::size_t>(last - first));
        });
      },
      "eltwise", "silu:avx2");
}

void post_op_alone(plan_context& p, std::size_t index) {
  if (runs_own_silu(p.step(index))) return own_silu(p, index, p.value(p.step(index).record.inputs[0]), true);
  p.plan_step(index);
}

namespace {
/// Whether scale s of [N, C, 1, 1] (layout `sd`) holds its N x C values in order, image by image
/// and channel by channel: in nchw and nhwc, and in channel blocks where C fills them (or N is 1:
/// the padding then follows the C values).
bool channels_in_order(const md& sd, const dims& db) {
  if (sd == dense(db) || sd == md(db, f32, tag::nhwc)) return true;
  const std::int64_t images = db[0], channels = db[1];
  return ((images == 1 || channels % 16 == 0) && sd == md(db, f32, tag::nChw16c)) ||
         ((images == 1 || channels % 8 == 0) && sd == md(db, f32, tag::nChw8c));
}
}  // namespace

void mul(plan_context& p, std::size_t index) {
  const compiled_step& product = p.step(index);
  const std::size_t a = p.value(product.record.inputs[0]), b = p.value(product.record.inputs[1]);
  const dims da = p.slot(a).dims(), db = p.slot(b).dims();
  for (std::size_t k = 0; k < da.size(); ++k)
    TORCH_CHECK(da.size() == db.size() && (db[k] == da[k] || db[k] == 1), "onednn: region ", p.region().method, ": a mul of ",
                c10::IntArrayRef(da), " and ", c10::IntArrayRef(db), " (the second must be of the first's shape or [N, C, 1, 1])");
  if (mul_into_weights(p, index, a, b) || channel_scale(p, a, b, product.record.output)) return;
  binary(p, dnnl::algorithm::binary_mul, a, b, {}, product.record.output);
}

/// Why ours: oneDNN 2.6's binary multiply by [N, C, 1, 1] (jit:uni, nhwc) took three times its
/// global pooling over the same values (EfficientNet-B0's 7x7 and 14x14 squeeze-excitations: 17
/// and 32 us against 6 and 13; docs/onednn.md). TD_ONEDNN_CHANNEL_SCALE=0 turns it off.
bool channel_scale(plan_context& p, std::size_t a, std::size_t b, std::int64_t made) {
  // oneDNN running AVX-512 means the CPU has it: apply() takes its AVX-512 variant.
  static const bool enabled = !switched_off("TD_ONEDNN_CHANNEL_SCALE") && onednn_runs_avx512();
  const md x = p.slot(a), s = p.slot(b);  // copies: define() below adds slots
  const dims da = x.dims(), db = s.dims();
  if (!enabled || da.size() != 4 || db != dims{da[0], da[1], 1, 1}) return false;
  const std::int64_t images = da[0], channels = da[1], pixels = da[2] * da[3];
  // x as planes of pixels of `width` channels each: nhwc (a plane an image), or blocks of 16 or 8
  // channels that C fills (no padding: a block's channels are all real).
  std::int64_t width = 0;
  if (x == md(da, f32, tag::nhwc))
    width = channels;
  else if (channels % 16 == 0 && x == md(da, f32, tag::nChw16c))
    width = 16;
  else if (channels % 8 == 0 && x == md(da, f32, tag::nChw8c))
    width = 8;
  if (width == 0) return false;
  if (!channels_in_order(s, db)) return false;
  p.define(made, x);
  const std::int64_t planes = images * channels / width;
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, b}, {DNNL_ARG_DST, p.value(made)}}, md(),
      [=](const std::unordered_map<int, dnnl::memory>& bound) {
        const auto* from = static_cast<const float*>(bound.at(DNNL_ARG_SRC_0).get_data_handle());
        const auto* by = static_cast<const float*>(bound.at(DNNL_ARG_SRC_1).get_data_handle());
        auto* to = static_cast<float*>(bound.at(DNNL_ARG_DST).get_data_handle());
        // Pixel runs of planes, split where a plane ends (plane q's scale: its `width` values at q * width),
        // 64 K values a run at least (a step of at most 256 K values runs on one thread: small_step).
        const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / width);
        at::parallel_for(0, planes * pixels, grain, [&](std::int64_t first, std::int64_t last) {
          while (first < last) {
            const std::int64_t plane = first / pixels, from_pixel = first % pixels;
            const std::int64_t to_pixel = std::min(pixels, from_pixel + (last - first));
            const std::int64_t offset = plane * pixels * width;
            channel_affine::apply(from + offset, width, to + offset, width, by + plane * width, nullptr, false, from_pixel, to_pixel);
            first += to_pixel - from_pixel;
          }
        });
      },
      "binary", "channel_scale:avx512");
  return true;
}

bool mul_into_weights(plan_context& p, std::size_t index, std::size_t a, std::size_t b) {
  static const bool enabled = !switched_off("TD_ONEDNN_SE_WEIGHTS");
  const compiled_step& product = p.step(index);
  const dims da = p.slot(a).dims(), db = p.slot(b).dims();
  const std::optional<std::size_t> reader = product.fusion.scales_weights_of;  // fusion.cpp: the structure
  if (!enabled || !reader || da.size() != 4 || da[0] != 1 || db != dims{1, da[1], 1, 1}) return false;
  const compiled_step& conv = p.step(*reader);
  if (conv.weight_sizes.size() != 4 || conv.weight_sizes[2] != 1 || conv.weight_sizes[3] != 1) return false;  // 1x1 only
  // Scaling the weights (O x C, on one thread, then their reorder: two calls) instead of the
  // product (C x H x W, read and written on every thread): only where the weights are 4x smaller
  // (EfficientNet-B0's 28x28 maps and larger; with 1x instead of 4x its 14x14 ones too, and no
  // faster: docs/onednn.md).
  if (conv.weight_sizes[0] * 4 >= da[2] * da[3]) return false;
  if (!channels_in_order(p.slot(b), db)) return false;
  p.decisions().scaled_input[*reader] = {index, b};
  p.bind(product.record.output, a);  // the convolution reads x
  return true;
}

void add(plan_context& p, std::size_t index) {
  const auto& inputs = p.step(index).record.inputs;
  dnnl::post_ops post_ops;
  if (p.step(index).fusion.relu) post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  binary(p, dnnl::algorithm::binary_add, p.value(inputs[0]), p.value(inputs[1]), post_ops, p.finished(index));
}

void make_scaled_input(plan_context& p, std::size_t index) {
  const auto found = p.decisions().scaled_input.find(index);
  if (found == p.decisions().scaled_input.end()) return;
  const auto [product, scale] = found->second;
  p.decisions().scaled_input.erase(found);
  const plan_context::naming_step named(p, product);  // the debug query names the mul
  const std::size_t x = p.value(p.step(product).record.inputs[0]);
  if (!channel_scale(p, x, scale, p.step(product).record.output))
    binary(p, dnnl::algorithm::binary_mul, x, scale, {}, p.step(product).record.output);
}

void scale(plan_context& p, std::size_t index) {
  const compiled_step& scaled = p.step(index);
  const std::size_t in = p.value(scaled.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const dims& by = scaled.weight_sizes;
  TORCH_CHECK(by.size() <= d.size(), "onednn: region ", p.region().method, ": a scale of ", by.size(), " dims for a ", d.size(),
              "-d tensor");
  dims padded(d.size() - by.size(), 1);  // numpy's broadcasting: leading ones
  padded.insert(padded.end(), by.begin(), by.end());
  for (std::size_t k = 0; k < d.size(); ++k)
    TORCH_CHECK(padded[k] == 1 || padded[k] == d[k], "onednn: region ", p.region().method, ": a scale of sizes ", c10::IntArrayRef(by),
                " does not broadcast to ", c10::IntArrayRef(d));
  const std::size_t factor = p.constant(p.store().weights[index], dense(padded));
  p.keep_weights(index, factor, no_slot);
  binary(p, dnnl::algorithm::binary_mul, in, factor, {}, scaled.record.output);
}

/// A binary primitive of `a` and `b` (b of a's shape, or broadcast) making value `made`: in the
/// layouts they have (b reordered to a's when of a's shape: oneDNN's fast path), or where that is
/// a reference kernel (a broadcast scale in a blocked layout under SSE4.1), both in nhwc, nChw8c
/// or nchw (dense for other ranks); if every one is a reference kernel, the first (the debug query
/// shows it: docs/onednn.md). With post-ops, never in channel blocks narrower than a vector
/// register (below).
void binary(plan_context& p, dnnl::algorithm algorithm, std::size_t a, std::size_t b, const dnnl::post_ops& post_ops, std::int64_t made) {
  const dims da = p.slot(a).dims(), db = p.slot(b).dims();
  std::vector<std::pair<md, md>> layouts;
  // Not with post-ops in a layout of channel blocks narrower than a vector register (4 or 8
  // channels under AVX-512: a grouped convolution's, 4 or 8 channels a group): there oneDNN 2.6's
  // jit:uni binary applies an eltwise post-op wrongly and writes past its destination (ReLU after
  // a residual add: off by 35 % of the output, then a corrupted heap; tests/python/test_onednn.py).
  const md& given = p.slot(a);
  const std::int64_t lanes = onednn_runs_avx512() ? 16 : 8;
  const auto& blocking = given.data.format_desc.blocking;
  const bool narrow_blocks = given.data.format_kind == dnnl_blocked && blocking.inner_nblks > 0 &&
                             blocking.inner_blks[blocking.inner_nblks - 1] < lanes;
  if (!(narrow_blocks && post_ops.len() > 0)) layouts.emplace_back(given, da == db ? given : p.slot(b));
  if (da.size() == 4) {
    for (const tag layout : {tag::nhwc, tag::nChw8c, tag::nchw})
      if (!(layout == tag::nChw8c && lanes > 8 && post_ops.len() > 0)) layouts.emplace_back(md(da, f32, layout), md(db, f32, layout));
  } else {
    layouts.emplace_back(dense(da), dense(db));
  }
  std::optional<dnnl::binary::primitive_desc> chosen;
  std::pair<md, md> inputs;
  for (const auto& [x, y] : layouts) {
    try {
      dnnl::binary::primitive_desc pd({algorithm, x, y, md(da, f32, tag::any)}, attributes(post_ops), cpu_engine());
      const bool fast = !is_reference(pd.impl_info_str());
      if (!chosen || fast) chosen = pd, inputs = {x, y};
      if (fast) break;
    } catch (const dnnl::error&) {
    }
  }
  if (!chosen)
    p.refuse("step " + std::to_string(p.current_step()) + " (" + std::string(name_of(p.step(p.current_step()).kind)) +
             "): oneDNN refused it in every layout");
  const std::size_t x = p.as(a, inputs.first), y = p.as(b, inputs.second);
  p.define(made, chosen->dst_desc());
  p.call(dnnl::binary(*chosen), {{DNNL_ARG_SRC_0, x}, {DNNL_ARG_SRC_1, y}, {DNNL_ARG_DST, p.value(made)}}, chosen->scratchpad_desc());
}

}  // namespace onednn_delegate
