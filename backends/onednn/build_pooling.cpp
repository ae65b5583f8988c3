// The pooling builders: max_pool2d (PyTorch's ceil_mode rule as oneDNN's right padding) and the
// global average pooling (adaptive_avg_pool2d to 1x1).
#include "internal.hpp"

#include "toolkit/support_rules.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

namespace onednn_delegate {

void planner::max_pool(std::size_t index) {
  const compiled_step& pool = step(index);
  const pooling_parameters& w = *pool.record.pooling;
  const std::size_t in = value(pool.record.inputs[0]);
  const dims d = plan_.slots[in].dims();
  const dims kernel{w.kernel[0], w.kernel[1]}, strides{w.stride[0], w.stride[1]}, left{w.padding[0], w.padding[1]};
  dims out_hw(2), right(2);
  for (std::size_t k = 0; k < 2; ++k) {
    const std::int64_t size = d[k + 2], span = size + 2 * left[k] - kernel[k];
    TORCH_CHECK(span >= 0, "onednn: region ", region_.method, ": max_pool2d's kernel ", kernel[k], " is larger than its padded input ",
                size + 2 * left[k]);
    const std::int64_t o = torch_delegate::toolkit::window_output_size(size, left[k], left[k], kernel[k], strides[k], 1, w.ceil_mode);
    out_hw[k] = o;
    // Right padding that gives o windows: any in [exact, exact + stride - 1]; the symmetric one when it fits.
    const std::int64_t exact = (o - 1) * strides[k] + kernel[k] - size - left[k];
    right[k] = std::max<std::int64_t>(0, left[k] >= exact && left[k] < exact + strides[k] ? left[k] : exact);
  }
  const md out({d[0], d[1], out_hw[0], out_hw[1]}, f32, tag::any);
  const dnnl::pooling_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, plan_.slots[in], out, strides, kernel, left, right},
      attributes(), cpu_engine());
  define(pool.record.output, pd.dst_desc());
  call(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, value(pool.record.output)}}, pd.scratchpad_desc());
}

void planner::global_avg_pool(std::size_t index) {
  const compiled_step& pool = step(index);
  const std::size_t in = value(pool.record.inputs[0]);
  const dims d = plan_.slots[in].dims();
  const md out({d[0], d[1], 1, 1}, f32, tag::any);
  const dnnl::pooling_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding, plan_.slots[in], out, {1, 1}, {d[2], d[3]},
       {0, 0}, {0, 0}},
      attributes(), cpu_engine());
  define(pool.record.output, pd.dst_desc());
  call(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, value(pool.record.output)}}, pd.scratchpad_desc());
}

}  // namespace onednn_delegate
