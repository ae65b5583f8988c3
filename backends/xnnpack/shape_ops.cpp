// The shape ops of the xnnpack backend: flatten (a static reshape: NHWC [N, 1, 1, C] and [N, C]
// share their memory order) and dropout (the identity in eval mode or with p = 0: an alias, or a
// copy when it is a region output, XNNPACK having no identity node).
#include "xnnpack_internal.hpp"

namespace xnnpack_delegate {

void emit_flatten(subgraph_builder& builder, const torch::jit::Node* node) {
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t output = builder.define(node->output());
  builder.add_node(reshape, reshape_record{input, output, builder.region().sizes(node->output())});
}

void emit_dropout(subgraph_builder& builder, const torch::jit::Node* node) {
  if (builder.region().argument<bool>(node, "train") && builder.region().argument<double>(node, "p") != 0.0)
    builder.reject(node, "dropout in training mode (call model.eval() before lowering)");
  const std::int64_t input = builder.id(node->input(0));
  if (builder.output_ids.count(node->output())) {
    // A region output: a copy (a clamp over everything).
    builder.add_node(clamp, unary_record{input, builder.define(node->output())}, output_range{});
    return;
  }
  builder.set_id(node->output(), input);
}

bool define_shape_op(const definition_context& context, const node_record& node) {
  if (node.op != reshape) return false;
  const auto r = read_node<reshape_record>(node);
  const std::vector<std::size_t> shape(r.shape.begin(), r.shape.end());
  check(xnn_define_static_reshape(context.subgraph, shape.size(), shape.data(), context.id(r.input), context.id(r.output), 0),
        "xnn_define_static_reshape");
  return true;
}

}  // namespace xnnpack_delegate
