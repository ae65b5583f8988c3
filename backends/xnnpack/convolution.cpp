// The convolution family of the xnnpack backend: conv2d (grouped or depthwise, with the BatchNorm
// after it folded in) and linear (XNNPACK's fully-connected). Emit: a node's record and its
// weights in XNNPACK's layouts; define: the record as an XNNPACK node, whose weights XNNPACK packs
// when the runtime is created.
#include "xnnpack_internal.hpp"

#include "toolkit/folding.hpp"

#include <optional>

namespace xnnpack_delegate {

void emit_convolution(subgraph_builder& builder, const torch::jit::Node* node) {
  const toolkit::folded_conv2d conv =
      toolkit::read_conv2d(builder.region(), node, builder.result_check(), builder.folded(), builder.backend());
  const at::Tensor& weight = conv.weight;
  const std::int64_t out_channels = weight.size(0);
  const torch::jit::Value* output = conv.output;
  const output_range range = builder.fused_activation(output);
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t in_channels = builder.region().sizes(node->input(0))[1];
  const std::int64_t kh = weight.size(2), kw = weight.size(3);
  const bool depthwise = conv.groups > 1 && conv.groups == in_channels && weight.size(1) == 1;
  std::int64_t filter;
  if (depthwise)  // [C_out, 1, kh, kw] -> [1, kh, kw, C_out]
    filter = builder.constant(weight.permute({1, 2, 3, 0}), {1, kh, kw, out_channels});
  else  // [O, I/g, kh, kw] -> [O, kh, kw, I/g]
    filter = builder.constant(weight.permute({0, 2, 3, 1}), {out_channels, kh, kw, weight.size(1)});
  const std::int64_t bias = builder.constant(conv.bias, {out_channels});
  const std::int64_t out = builder.define(output);
  const auto& [stride, padding, dilation] = std::tie(conv.stride, conv.padding, conv.dilation);
  if (depthwise) {
    builder.add_node(depthwise_conv2d,
                     depthwise_record{input, filter, bias, out, padding[0], padding[1], padding[0], padding[1], kh, kw, stride[0],
                                      stride[1], dilation[0], dilation[1], out_channels / in_channels, in_channels},
                     range);
  } else {
    builder.add_node(conv2d,
                     convolution_record{input, filter, bias, out, padding[0], padding[1], padding[0], padding[1], kh, kw, stride[0],
                                        stride[1], dilation[0], dilation[1], conv.groups, in_channels / conv.groups,
                                        out_channels / conv.groups},
                     range);
  }
}

void emit_linear(subgraph_builder& builder, const torch::jit::Node* node) {
  const at::Tensor weight = builder.region().argument<at::Tensor>(node, "weight").to(at::kFloat);
  const auto bias = builder.region().argument<std::optional<at::Tensor>>(node, "bias");
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t filter = builder.constant(weight, {weight.size(0), weight.size(1)});
  const std::int64_t b = builder.constant(bias ? *bias : at::zeros({weight.size(0)}), {weight.size(0)});
  const torch::jit::Value* output = node->output();
  const output_range range = builder.fused_activation(output);
  builder.add_node(fully_connected, fully_connected_record{input, filter, b, builder.define(output)}, range);
}

std::vector<std::int64_t> packed_values(const node_record& node) {
  if (node.op != conv2d && node.op != depthwise_conv2d && node.op != fully_connected) return {};
  const auto r = read_node<fully_connected_record>(node);  // the three start with input, filter, bias
  return {r.filter, r.bias};
}

bool define_convolution(const definition_context& context, const node_record& node) {
  const output_range range = range_of(node);
  const auto min = static_cast<float>(range.min), max = static_cast<float>(range.max);
  auto u = [&](std::int64_t value) { return context.id(value); };
  auto n = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  switch (node.op) {
    case conv2d: {
      const auto r = read_node<convolution_record>(node);
      check(xnn_define_convolution_2d(context.subgraph, n(r.padding_top), n(r.padding_right), n(r.padding_bottom), n(r.padding_left),
                                      n(r.kernel_height), n(r.kernel_width), n(r.stride_height), n(r.stride_width),
                                      n(r.dilation_height), n(r.dilation_width), n(r.groups), r.group_input_channels,
                                      r.group_output_channels, min, max, u(r.input), u(r.filter), u(r.bias), u(r.output), 0),
            "xnn_define_convolution_2d");
      return true;
    }
    case depthwise_conv2d: {
      const auto r = read_node<depthwise_record>(node);
      check(xnn_define_depthwise_convolution_2d(context.subgraph, n(r.padding_top), n(r.padding_right), n(r.padding_bottom),
                                                n(r.padding_left), n(r.kernel_height), n(r.kernel_width), n(r.stride_height),
                                                n(r.stride_width), n(r.dilation_height), n(r.dilation_width), n(r.depth_multiplier),
                                                r.input_channels, min, max, u(r.input), u(r.filter), u(r.bias), u(r.output), 0),
            "xnn_define_depthwise_convolution_2d");
      return true;
    }
    case fully_connected: {
      const auto r = read_node<fully_connected_record>(node);
      check(xnn_define_fully_connected(context.subgraph, min, max, u(r.input), u(r.filter), u(r.bias), u(r.output), 0),
            "xnn_define_fully_connected");
      return true;
    }
    default:
      return false;
  }
}

}  // namespace xnnpack_delegate
