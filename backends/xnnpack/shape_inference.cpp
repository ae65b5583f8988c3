// Shape inference for re-planning (other_shapes::replan): every value's XNNPACK dims for new input
// sizes, node by node as XNNPACK computes them, so the region's runtime can be built again from
// its kept weights. Each op's rule is a function of its input dims and record (unit-tested:
// tests/xnnpack_shape_inference.cpp); replanned_payload applies them to a whole payload.
#include "xnnpack_internal.hpp"

#include "toolkit/support_rules.hpp"

#include <algorithm>

namespace xnnpack_delegate {

namespace {

std::int64_t replanned_window(std::int64_t size, std::int64_t before, std::int64_t after, std::int64_t kernel, std::int64_t stride,
                              std::int64_t dilation) {
  const std::int64_t out = toolkit::window_output_size(size, before, after, kernel, stride, dilation);
  if (out < 1) throw cannot_replan("an input of " + std::to_string(size) + " is too small for a window of " + std::to_string(kernel));
  return out;
}

/// `dims` as a value of rank `rank` at least; else cannot_replan naming `what`.
void require_rank(const std::vector<std::int64_t>& dims, std::size_t rank, const char* what) {
  if (dims.size() < rank)
    throw cannot_replan(std::string(what) + " takes a tensor of " + std::to_string(rank) + " dimensions, got " +
                        std::to_string(dims.size()));
}

}  // namespace

std::vector<std::int64_t> window_output_dims(const std::vector<std::int64_t>& input, const window_2d& w, std::int64_t channels) {
  require_rank(input, 4, "a convolution or pooling");
  return {input[0],
          replanned_window(input[1], w.padding_top, w.padding_bottom, w.kernel_height, w.stride_height, w.dilation_height),
          replanned_window(input[2], w.padding_left, w.padding_right, w.kernel_width, w.stride_width, w.dilation_width), channels};
}

max_pooling_record with_ceil_mode_padding(max_pooling_record r, const std::vector<std::int64_t>& input) {
  require_rank(input, 4, "max_pool2d");
  // A payload without ceil_mode (-1) says so by bottom or right padding beyond top or left.
  const bool ceil_mode = r.ceil_mode >= 0 ? r.ceil_mode != 0 : (r.padding_bottom != r.padding_top || r.padding_right != r.padding_left);
  if (!ceil_mode) return r;
  // PyTorch's ceil mode: the bottom and right padding that give its output size.
  const std::int64_t pads[2] = {r.padding_top, r.padding_left}, kernels[2] = {r.kernel_height, r.kernel_width},
                     strides[2] = {r.stride_height, r.stride_width}, dilations[2] = {r.dilation_height, r.dilation_width};
  std::int64_t* after[2] = {&r.padding_bottom, &r.padding_right};
  for (int d = 0; d < 2; ++d) {
    const std::int64_t size = input[1 + static_cast<std::size_t>(d)];
    const std::int64_t out = toolkit::window_output_size(size, pads[d], pads[d], kernels[d], strides[d], dilations[d], true);
    const std::int64_t needed = (out - 1) * strides[d] + (kernels[d] - 1) * dilations[d] + 1 - size - pads[d];
    *after[d] = std::max(needed, pads[d]);
  }
  return r;
}

std::vector<std::int64_t> fully_connected_dims(std::vector<std::int64_t> input, std::int64_t output_features) {
  require_rank(input, 1, "linear");
  input.back() = output_features;
  return input;
}

std::vector<std::int64_t> broadcast_dims(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  std::vector<std::int64_t> out(std::max(a.size(), b.size()), 1);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::int64_t p = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
    const std::int64_t q = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
    if (p != q && p != 1 && q != 1) throw cannot_replan("operands of sizes that do not broadcast");
    out[k] = std::max(p, q);
  }
  return out;
}

average_pooling_record adaptive_windows(average_pooling_record r, const std::vector<std::int64_t>& input) {
  if (r.adaptive_height <= 0 || r.adaptive_width <= 0) return r;  // an avg_pool2d: its windows are its own
  require_rank(input, 4, "adaptive_avg_pool2d");
  const std::int64_t height = input[1], width = input[2];
  if (height % r.adaptive_height != 0 || width % r.adaptive_width != 0)
    throw cannot_replan("its adaptive_avg_pool2d to " + std::to_string(r.adaptive_height) + "x" + std::to_string(r.adaptive_width) +
                        " is given " + std::to_string(height) + "x" + std::to_string(width) +
                        ": windows of unequal sizes, which XNNPACK's pooling does not run");
  r.kernel_height = r.stride_height = height / r.adaptive_height;
  r.kernel_width = r.stride_width = width / r.adaptive_width;
  return r;
}

std::vector<std::int64_t> global_pool_dims(const std::vector<std::int64_t>& input) {
  require_rank(input, 4, "adaptive_avg_pool2d");
  return {input[0], 1, 1, input[3]};
}

std::vector<std::int64_t> reshape_dims(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& recorded,
                                       std::vector<std::int64_t> shape) {
  if (!shape.empty() && !input.empty() && !recorded.empty() && shape[0] == recorded[0]) shape[0] = input[0];
  std::int64_t from = 1, to = 1;
  for (std::int64_t size : input) from *= size;
  for (std::int64_t size : shape) to *= size;
  if (from != to)
    throw cannot_replan("its flatten was planned for " + std::to_string(to / std::max<std::int64_t>(shape.empty() ? 1 : shape[0], 1)) +
                        " features per sample, these inputs give " +
                        std::to_string(from / std::max<std::int64_t>(input.empty() ? 1 : input[0], 1)));
  return shape;
}

namespace {

/// The payload's values and nodes for new input dims (set in `payload` already): each node's
/// output dims from its inputs'. Nodes whose parameters depend on the sizes are rewritten.
void infer_node_dims(region_payload& payload, const region_payload& recorded) {
  auto dims = [&](std::int64_t id) -> std::vector<std::int64_t>& {
    if (id < 0 || static_cast<std::size_t>(id) >= payload.values.size())
      throw cannot_replan("its payload names value " + std::to_string(id) + " of " + std::to_string(payload.values.size()));
    return payload.values[static_cast<std::size_t>(id)].dims;
  };
  for (node_record& node : payload.nodes) {
    switch (node.op) {
      case conv2d: {
        const auto r = read_node<convolution_record>(node);
        dims(r.output) = window_output_dims(dims(r.input), window_of(r), dims(r.filter).at(0));
        break;
      }
      case depthwise_conv2d: {
        const auto r = read_node<depthwise_record>(node);
        dims(r.output) = window_output_dims(dims(r.input), window_of(r), dims(r.filter).at(3));
        break;
      }
      case fully_connected: {
        const auto r = read_node<fully_connected_record>(node);
        dims(r.output) = fully_connected_dims(dims(r.input), dims(r.filter).at(0));
        break;
      }
      case clamp:
      case sigmoid:
      case hardswish:
      case softmax: {
        const auto r = read_node<unary_record>(node);
        dims(r.output) = dims(r.input);
        break;
      }
      case add2:
      case multiply2: {
        const auto r = read_node<binary_record>(node);
        dims(r.output) = broadcast_dims(dims(r.first), dims(r.second));
        break;
      }
      case max_pool2d: {
        const auto planned = read_node<max_pooling_record>(node);
        const auto r = with_ceil_mode_padding(planned, dims(planned.input));
        const std::vector<std::int64_t>& in = dims(r.input);
        dims(r.output) = window_output_dims(in, window_of(r), in.at(3));
        node.ints = toolkit::record_ints(r);
        break;
      }
      case avg_pool2d: {
        const auto planned = read_node<average_pooling_record>(node);
        const auto r = adaptive_windows(planned, dims(planned.input));
        const std::vector<std::int64_t>& in = dims(r.input);
        dims(r.output) = window_output_dims(in, window_of(r), in.at(3));
        node.ints = toolkit::record_ints(r);
        break;
      }
      case global_avg_pool2d: {
        const auto r = read_node<unary_record>(node);
        dims(r.output) = global_pool_dims(dims(r.input));
        break;
      }
      case reshape: {
        auto r = read_node<reshape_record>(node);
        r.shape = reshape_dims(dims(r.input), recorded.values.at(static_cast<std::size_t>(r.input)).dims, std::move(r.shape));
        dims(r.output) = r.shape;
        node.ints = toolkit::record_ints(r);
        break;
      }
      default:
        throw cannot_replan("unknown op " + std::to_string(node.op));
    }
  }
}

}  // namespace

region_payload replanned_payload(const region_payload& recorded, const torch_delegate::given_inputs& given, const std::string& method) {
  region_payload payload = recorded;
  auto& [values, nodes, output_sizes, inputs] = payload;
  try {
    if (given.size() != static_cast<std::size_t>(inputs))
      throw cannot_replan("it takes " + std::to_string(inputs) + " inputs, got " + std::to_string(given.size()));
    for (auto& value : values)
      if (value.key.empty() && !(value.external >= 0 && value.external < inputs)) value.dims.clear();  // to be computed
    for (std::int64_t i = 0; i < inputs; ++i) {
      const auto& spec = given[static_cast<std::size_t>(i)];
      if (!spec || spec->dtype != at::kFloat) throw cannot_replan("input " + std::to_string(i + 1) + " is not a float tensor");
      auto& value = values[static_cast<std::size_t>(i)];
      if (spec->sizes.size() != value.dims.size())
        throw cannot_replan("input " + std::to_string(i + 1) + " has " + std::to_string(spec->sizes.size()) +
                            " dimensions, the region was planned for " + std::to_string(value.dims.size()));
      value.dims = xnn_dims(spec->sizes);
    }
    infer_node_dims(payload, recorded);
  } catch (const cannot_replan& why) {
    TORCH_CHECK(false, "xnnpack: region ", method, " cannot be re-planned for these inputs: ", why.what());
  }
  output_sizes.clear();
  for (const auto& value : values)
    if (value.external >= inputs) output_sizes.push_back(nchw_sizes(value.dims));
  return payload;
}

}  // namespace xnnpack_delegate
