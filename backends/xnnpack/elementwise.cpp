// The elementwise family of the xnnpack backend: clamps (relu, relu6, hardtanh, clamp), add and
// mul (numpy broadcasting), sigmoid, hardswish, silu (x * sigmoid(x)), hardsigmoid (a clamp of
// x / 6 + 1/2), a BatchNorm no convolution took (x * scale + shift) and softmax. Emit: a node's
// records; define: the records as XNNPACK nodes.
#include "xnnpack_internal.hpp"

#include "toolkit/folding.hpp"
#include "toolkit/graph.hpp"

namespace xnnpack_delegate {

void emit_clamp(subgraph_builder& builder, const torch::jit::Node* node) {
  const auto range = toolkit::clamp_range(node);
  if (!range) builder.reject(node, "clamp bounds must be numbers known at lowering (not tensors)");
  const std::int64_t input = builder.id(node->input(0));
  builder.add_node(clamp, unary_record{input, builder.define(node->output())}, output_range{range->first, range->second});
}

void emit_batch_norm(subgraph_builder& builder, const torch::jit::Node* node) {
  const auto [scale, shift] = toolkit::batch_norm_affine(builder.region(), node, builder.backend());
  const std::int64_t scaled = builder.with_constant(builder.id(node->input(0)), multiply2, scale, nullptr);
  builder.with_constant(scaled, add2, shift, node->output());
}

void emit_binary(subgraph_builder& builder, const torch::jit::Node* node) {
  const std::int64_t a = builder.id(node->input(0)), b = builder.id(node->input(1));
  const torch::jit::Value* output = node->output();
  const output_range range = builder.fused_activation(output);
  builder.add_node(toolkit::is(node, "aten::add") ? add2 : multiply2, binary_record{a, b, builder.define(output)}, range);
}

void emit_unary(subgraph_builder& builder, const torch::jit::Node* node) {  // sigmoid, hardswish
  const std::int64_t input = builder.id(node->input(0));
  builder.add_node(toolkit::is(node, "aten::sigmoid") ? sigmoid : hardswish, unary_record{input, builder.define(node->output())});
}

void emit_silu(subgraph_builder& builder, const torch::jit::Node* node) {  // x * sigmoid(x)
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t s = builder.internal_like(input);
  builder.add_node(sigmoid, unary_record{input, s});
  builder.add_node(multiply2, binary_record{input, s, builder.define(node->output())}, output_range{});
}

void emit_hardsigmoid(subgraph_builder& builder, const torch::jit::Node* node) {  // clamp(x / 6 + 1/2, 0, 1)
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t scaled = builder.with_constant(input, multiply2, at::full({1}, 1.0 / 6.0), nullptr);
  const std::int64_t shifted = builder.with_constant(scaled, add2, at::full({1}, 0.5), nullptr);
  builder.add_node(clamp, unary_record{shifted, builder.define(node->output())}, output_range{0.0, 1.0});
}

void emit_softmax(subgraph_builder& builder, const torch::jit::Node* node) {
  const std::int64_t input = builder.id(node->input(0));
  const std::int64_t dim = builder.region().argument<std::int64_t>(node, "dim");
  const auto rank = static_cast<std::int64_t>(builder.region().sizes(node->input(0)).size());
  if (dim != -1 && dim != rank - 1) builder.reject(node, "softmax over the last dimension only (dim=-1)");
  builder.add_node(softmax, unary_record{input, builder.define(node->output())});
}

bool define_elementwise(const definition_context& context, const node_record& node) {
  const output_range range = range_of(node);
  const auto min = static_cast<float>(range.min), max = static_cast<float>(range.max);
  switch (node.op) {
    case clamp: {
      const auto r = read_node<unary_record>(node);
      check(xnn_define_clamp(context.subgraph, min, max, context.id(r.input), context.id(r.output), 0), "xnn_define_clamp");
      return true;
    }
    case add2: {
      const auto r = read_node<binary_record>(node);
      check(xnn_define_add2(context.subgraph, min, max, context.id(r.first), context.id(r.second), context.id(r.output), 0),
            "xnn_define_add2");
      return true;
    }
    case multiply2: {
      const auto r = read_node<binary_record>(node);
      check(xnn_define_multiply2(context.subgraph, min, max, context.id(r.first), context.id(r.second), context.id(r.output), 0),
            "xnn_define_multiply2");
      return true;
    }
    case sigmoid: {
      const auto r = read_node<unary_record>(node);
      check(xnn_define_sigmoid(context.subgraph, context.id(r.input), context.id(r.output), 0), "xnn_define_sigmoid");
      return true;
    }
    case hardswish: {
      const auto r = read_node<unary_record>(node);
      check(xnn_define_hardswish(context.subgraph, context.id(r.input), context.id(r.output), 0), "xnn_define_hardswish");
      return true;
    }
    case softmax: {
      const auto r = read_node<unary_record>(node);
      check(xnn_define_softmax(context.subgraph, context.id(r.input), context.id(r.output), 0), "xnn_define_softmax");
      return true;
    }
    default:
      return false;
  }
}

}  // namespace xnnpack_delegate
