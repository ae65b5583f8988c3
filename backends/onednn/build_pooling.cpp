// The pooling builders: max_pool2d and max_pool3d (PyTorch's ceil_mode rule as oneDNN's right
// padding) and the global average pooling (adaptive_avg_pool2d to 1x1, adaptive_avg_pool3d to
// 1x1x1, a mean over the spatial dimensions), over as many spatial dimensions as the input has.
#include "builders.hpp"
#include "internal.hpp"

#include "toolkit/support_rules.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <string_view>

namespace onednn_delegate {

void max_pool(plan_context& p, std::size_t index) {
  const compiled_step& pool = p.step(index);
  const pooling_parameters& w = *pool.record.pooling;
  const std::size_t in = p.value(pool.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const std::size_t spatial = w.kernel.size();
  TORCH_CHECK(d.size() == spatial + 2, "onednn: region ", p.region().method, ": ", name_of(pool.kind), " given a ", d.size(), "-d input ",
              c10::IntArrayRef(d), " (expected ", spatial + 2, "-d)");
  const dims kernel(w.kernel.begin(), w.kernel.end()), strides(w.stride.begin(), w.stride.end()), left(w.padding.begin(), w.padding.end());
  dims out(d.begin(), d.begin() + 2), right(spatial);
  for (std::size_t k = 0; k < spatial; ++k) {
    const std::int64_t size = d[k + 2], span = size + 2 * left[k] - kernel[k];
    TORCH_CHECK(span >= 0, "onednn: region ", p.region().method, ": ", name_of(pool.kind), "'s kernel ", kernel[k],
                " is larger than its padded input ", size + 2 * left[k]);
    const std::int64_t o = torch_delegate::toolkit::window_output_size(size, left[k], left[k], kernel[k], strides[k], 1, w.ceil_mode);
    out.push_back(o);
    // Right padding that gives o windows: any in [exact, exact + stride - 1]; the symmetric one when it fits.
    const std::int64_t exact = (o - 1) * strides[k] + kernel[k] - size - left[k];
    right[k] = std::max<std::int64_t>(0, left[k] >= exact && left[k] < exact + strides[k] ? left[k] : exact);
  }
  // In its input's layout; where oneDNN has no JIT kernel for that (a 3-d pooling of a dense
  // input below AVX2: "simple_nchw", plain loops, S3D's 13 max poolings 300 ms a call at
  // ONEDNN_MAX_CPU_ISA=SSE41), in a blocked or channels-last one.
  const auto plain_loops = [](const dnnl::pooling_forward::primitive_desc& pd) {
    const std::string_view implementation = pd.impl_info_str();
    return is_reference(implementation) || implementation.starts_with("simple");
  };
  std::optional<dnnl::pooling_forward::primitive_desc> chosen;
  for (const md& src : {p.slot(in), in_layout(d, tag::nChw16c), in_layout(d, tag::nChw8c), in_layout(d, tag::nhwc)}) {
    try {
      dnnl::pooling_forward::primitive_desc pd(
          {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, src, md(out, f32, tag::any), strides, kernel, left, right},
          attributes(), cpu_engine());
      if (!chosen || !plain_loops(pd)) chosen = pd;
      if (!plain_loops(pd)) break;
    } catch (const dnnl::error&) {
    }
  }
  if (!chosen) p.refuse("step " + std::to_string(index) + " (" + std::string(name_of(pool.kind)) + "): oneDNN refused it in every layout");
  const std::size_t src = p.as(in, chosen->src_desc());
  p.define(pool.record.output, chosen->dst_desc());
  p.call(dnnl::pooling_forward(*chosen), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(pool.record.output)}}, chosen->scratchpad_desc());
}

void global_avg_pool(plan_context& p, std::size_t index) {
  const compiled_step& pool = p.step(index);
  const std::size_t in = p.value(pool.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const std::size_t expected = pool.kind == step_kind::global_avg_pool3d ? 5 : 4;
  TORCH_CHECK(d.size() == expected, "onednn: region ", p.region().method, ": ", name_of(pool.kind), " given a ", d.size(), "-d input ",
              c10::IntArrayRef(d), " (expected ", expected, "-d)");
  dims out(d.size(), 1), window(d.begin() + 2, d.end());
  out[0] = d[0], out[1] = d[1];
  const dims ones(d.size() - 2, 1), zeros(d.size() - 2, 0);
  const dnnl::pooling_forward::primitive_desc pd({dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding,
                                                  p.slot(in), md(out, f32, tag::any), ones, window, zeros, zeros},
                                                 attributes(), cpu_engine());
  p.define(pool.record.output, pd.dst_desc());
  p.call(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, p.value(pool.record.output)}}, pd.scratchpad_desc());
}

void reduce(plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const reduction_parameters& r = *step.record.reduction;
  const std::size_t in = p.value(step.record.inputs[0]);
  const dims d = p.slot(in).dims();
  dims ones = d;  // the reduced dimensions as ones
  for (const std::int64_t dim : r.dims) {
    if (dim >= static_cast<std::int64_t>(d.size()))
      p.refuse("a max over dimension " + std::to_string(dim) + " of a " + std::to_string(d.size()) + "-d input (" + p.describe(step) + ")");
    ones[static_cast<std::size_t>(dim)] = 1;
  }
  dims out;
  for (std::size_t k = 0; k < d.size(); ++k)
    if (r.keepdim || std::find(r.dims.begin(), r.dims.end(), static_cast<std::int64_t>(k)) == r.dims.end()) out.push_back(ones[k]);
  if (out.empty()) p.refuse("a max over every dimension (" + p.describe(step) + ")");
  const std::size_t src = p.as(in, dense(d));
  const std::int64_t made = p.finished(index);
  std::optional<dnnl::reduction::primitive_desc> pd;
  try {
    pd = dnnl::reduction::primitive_desc({dnnl::algorithm::reduction_max, dense(d), dense(ones), 0.f, 0.f}, attributes(), cpu_engine());
  } catch (const dnnl::error&) {
  }
  if (pd && !is_reference(pd->impl_info_str())) {
    p.define(made, dense(ones));
    const std::size_t reduced = p.value(made);
    p.call(dnnl::reduction(*pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, reduced}}, pd->scratchpad_desc());
    if (!r.keepdim) p.bind(made, p.view(dense(out), reduced));  // the same bytes without the ones
    return;
  }
  // Only a reference kernel: ATen's amax, on the dense input.
  p.define(made, dense(out));
  const std::vector<std::int64_t> over = r.dims;
  const bool keepdim = r.keepdim;
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(made)}}, md(),
      [d, out, over, keepdim](const std::unordered_map<int, dnnl::memory>& arguments) {
        c10::InferenceMode inference;
        const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), d, at::kFloat);
        at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), out, at::kFloat).copy_(at::amax(x, over, keepdim));
      },
      "reduce", "aten::amax");
}

void resample(plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const resampling_parameters& r = *step.record.resampling;
  const std::size_t in = p.value(step.record.inputs[0]);
  const dims d = p.slot(in).dims();
  if (d.size() != 4) p.refuse("an upsampling of a " + std::to_string(d.size()) + "-d input (" + p.describe(step) + "), expected 4-d");
  // Its sizes: whole factors of the input's, constants, or its size program's at this plan's shapes.
  const std::vector<std::int64_t> sizes = step.record.size_program ? *p.program_sizes(index) : r.sizes;
  if (!r.sizes.empty() && (sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1))
    p.refuse("an upsampling to sizes its program gives as " + std::to_string(sizes.size()) + " values, not two of at least 1");
  const dims out{d[0], d[1], r.sizes.empty() ? d[2] * r.scales[0] : sizes[0], r.sizes.empty() ? d[3] * r.scales[1] : sizes[1]};
  const bool nearest = r.mode == "nearest";
  // oneDNN's nearest rounds half-pixel centres, PyTorch's floors: the same where each output size
  // is a whole multiple of the input's.
  const bool same_mapping = !nearest || (out[2] % d[2] == 0 && out[3] % d[3] == 0);
  std::optional<dnnl::resampling_forward::primitive_desc> pd;
  if (same_mapping) {
    for (const md& src : {p.slot(in), dense(d)}) {
      try {
        pd = dnnl::resampling_forward::primitive_desc(
            {dnnl::prop_kind::forward_inference, nearest ? dnnl::algorithm::resampling_nearest : dnnl::algorithm::resampling_linear, src,
             md(out, f32, tag::any)},
            attributes(), cpu_engine());
      } catch (const dnnl::error&) {
        pd.reset();
      }
      if (pd && !is_reference(pd->impl_info_str())) break;
      pd.reset();
    }
  }
  const std::int64_t made = p.finished(index);
  if (pd) {
    const std::size_t src = p.as(in, pd->src_desc());
    p.define(made, pd->dst_desc());
    p.call(dnnl::resampling_forward(*pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(made)}}, pd->scratchpad_desc());
    return;
  }
  // Another mapping, or only a reference kernel: ATen's upsampling, on dense tensors.
  const std::size_t src = p.as(in, dense(d));
  p.define(made, dense(out));
  const std::vector<std::int64_t> size{out[2], out[3]};
  p.call(
      dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(made)}}, md(),
      [d, out, size, nearest](const std::unordered_map<int, dnnl::memory>& arguments) {
        c10::InferenceMode inference;
        const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), d, at::kFloat);
        at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), out, at::kFloat)
            .copy_(nearest ? at::upsample_nearest2d(x, size) : at::upsample_bilinear2d(x, size, false));
      },
      "resample", nearest ? "aten::upsample_nearest2d" : "aten::upsample_bilinear2d");
}

}  // namespace onednn_delegate
