// The pooling family of the xnnpack backend: max_pool2d (ceil mode as extra bottom and right
// padding), avg_pool2d (floor mode, no padding) and adaptive_avg_pool2d to 1x1 (a global average
// pooling) or to a size that divides its input's (an average pooling of fixed windows). Emit: a
// node's record from PyTorch's arguments; define: the record as an XNNPACK node.
#include "xnnpack_internal.hpp"

#include "toolkit/graph.hpp"
#include "toolkit/support_rules.hpp"

#include <algorithm>

namespace xnnpack_delegate {

void emit_pooling(subgraph_builder& builder, const torch::jit::Node* node) {
  const auto& region = builder.region();
  const std::vector<std::int64_t> in = region.sizes(node->input(0)), out_sizes = region.sizes(node->output());
  const toolkit::pool_arguments a = toolkit::read_pool(region, node, builder.backend());
  const auto& [kernel, stride, padding, dilation] = std::tie(a.kernel, a.stride, a.padding, a.dilation);
  // ceil_mode: the bottom and right padding that give the recorded output size (max pooling
  // ignores padding, so this is exact).
  std::int64_t bottom = padding[0], right = padding[1];
  for (int d = 0; d < 2; ++d) {
    const std::int64_t needed = (out_sizes[2 + d] - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[2 + d] - padding[d];
    (d == 0 ? bottom : right) = std::max(needed, padding[d]);
  }
  const std::int64_t input = builder.id(node->input(0));
  const torch::jit::Value* output = node->output();
  const output_range range = builder.fused_activation(output);
  const std::int64_t out = builder.define(output);
  if (toolkit::is(node, "aten::max_pool2d")) {
    builder.add_node(max_pool2d,
                     max_pooling_record{input, out, padding[0], right, bottom, padding[1], kernel[0], kernel[1], stride[0], stride[1],
                                        dilation[0], dilation[1], a.ceil_mode ? 1 : 0},
                     range);
  } else {
    // avg_pool_supported takes no padding and floor mode only: the window never reaches past the input.
    TORCH_INTERNAL_ASSERT(bottom == padding[0] && right == padding[1], "xnnpack: an avg_pool2d its support rule excludes");
    builder.add_node(avg_pool2d, average_pooling_record{input, out, 0, 0, 0, 0, kernel[0], kernel[1], stride[0], stride[1]}, range);
  }
}

void emit_adaptive_pooling(subgraph_builder& builder, const torch::jit::Node* node) {
  const std::int64_t input = builder.id(node->input(0));
  const torch::jit::Value* output = node->output();
  const output_range range = builder.fused_activation(output);
  if (toolkit::adaptive_pool_to_one(node)) {
    builder.add_node(global_avg_pool2d, unary_record{input, builder.define(output)}, range);
    return;
  }
  // To a size that divides the input's (toolkit::adaptive_pool_window): windows of input / output
  // at that stride, an average pooling without padding (a copy where they are of one), with the
  // output size kept, so that a re-plan computes the windows again for another input size.
  const std::vector<std::int64_t> window = *toolkit::adaptive_pool_window(node);
  const std::vector<std::int64_t> size = *toolkit::constant_ints(node->input(1));
  builder.add_node(
      avg_pool2d,
      average_pooling_record{input, builder.define(output), 0, 0, 0, 0, window[0], window[1], window[0], window[1], size[0], size[1]},
      range);
}

bool define_pooling(const definition_context& context, const node_record& node) {
  const output_range range = range_of(node);
  const auto min = static_cast<float>(range.min), max = static_cast<float>(range.max);
  auto n = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  switch (node.op) {
    case max_pool2d: {
      const auto r = read_node<max_pooling_record>(node);
      check(xnn_define_max_pooling_2d(context.subgraph, n(r.padding_top), n(r.padding_right), n(r.padding_bottom), n(r.padding_left),
                                      n(r.kernel_height), n(r.kernel_width), n(r.stride_height), n(r.stride_width),
                                      n(r.dilation_height), n(r.dilation_width), min, max, context.id(r.input), context.id(r.output),
                                      0),
            "xnn_define_max_pooling_2d");
      return true;
    }
    case avg_pool2d: {
      const auto r = read_node<average_pooling_record>(node);
      if (r.kernel_height == 1 && r.kernel_width == 1) {  // an adaptive pool to the input's own size: a copy
        check(xnn_define_clamp(context.subgraph, min, max, context.id(r.input), context.id(r.output), 0), "xnn_define_clamp");
        return true;
      }
      check(xnn_define_average_pooling_2d(context.subgraph, n(r.padding_top), n(r.padding_right), n(r.padding_bottom),
                                          n(r.padding_left), n(r.kernel_height), n(r.kernel_width), n(r.stride_height),
                                          n(r.stride_width), min, max, context.id(r.input), context.id(r.output), 0),
            "xnn_define_average_pooling_2d");
      return true;
    }
    case global_avg_pool2d: {
      const auto r = read_node<unary_record>(node);
      check(xnn_define_global_average_pooling_2d(context.subgraph, min, max, context.id(r.input), context.id(r.output), 0),
            "xnn_define_global_average_pooling_2d");
      return true;
    }
    default:
      return false;
  }
}

}  // namespace xnnpack_delegate
