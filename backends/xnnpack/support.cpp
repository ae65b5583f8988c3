// The xnnpack backend's support table: every node kind it runs, the rule supports() applies to a
// node of that kind (the forms XNNPACK 2022 takes, docs/xnnpack.md), and the emitter preprocess
// calls for it. One table, so what supports() accepts is what preprocess can build.
#include "xnnpack_internal.hpp"

#include "toolkit/graph.hpp"
#include "toolkit/support_rules.hpp"

#include <algorithm>

namespace xnnpack_delegate {

namespace {

using toolkit::clamp_range;
using toolkit::constant_is;
using toolkit::constant_ints_all;
using toolkit::conv2d_foldable;
using toolkit::is;
using toolkit::is_float_or_unknown;
using toolkit::is_tensor;
using toolkit::known_at_lowering;
using toolkit::known_sizes;
using toolkit::rank_is_or_unknown;

bool float_input_supported(const torch::jit::Node* node) { return is_float_or_unknown(node->input(0)); }

bool clamp_supported(const torch::jit::Node* node) { return clamp_range(node) && is_float_or_unknown(node->input(0)); }

bool conv2d_supported(const torch::jit::Node* node) { return conv2d_foldable(node) && is_float_or_unknown(node->input(0)); }

bool linear_supported(const torch::jit::Node* node) {
  // [N, C] or [N, T, C] (a transformer's tokens: XNNPACK's fully-connected takes every leading
  // dimension as batch); not 4-d, which is NHWC inside.
  return known_at_lowering(node->input(1)) && known_at_lowering(node->input(2)) && rank_is_or_unknown(node->input(0), {2, 3}) &&
         is_float_or_unknown(node->input(0));
}

bool binary_supported(const torch::jit::Node* node) {
  // Two float tensors of one rank (numpy broadcasting, NHWC inside), add's alpha 1.
  if (node->inputs().size() < 2 || !is_tensor(node->input(0)) || !is_tensor(node->input(1))) return false;
  if (is(node, "aten::add") && (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))))
    return false;
  const auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
  return (!a || !b || a->size() == b->size()) && is_float_or_unknown(node->input(0)) && is_float_or_unknown(node->input(1));
}

bool max_pool_supported(const torch::jit::Node* node) {  // float (XNNPACK's pooling has no integer form)
  return node->inputs().size() == 6 && is_float_or_unknown(node->input(0));
}

bool avg_pool_supported(const torch::jit::Node* node) {  // no padding, floor mode, no divisor override
  return node->inputs().size() == 7 && constant_is(node->input(4), false) && constant_is(node->input(6), c10::IValue()) &&
         constant_ints_all(node->input(3), 0) && is_float_or_unknown(node->input(0));
}

bool flatten_supported(const torch::jit::Node* node) {
  // NHWC inside: flattening [N, C, 1, 1] (or a 2-d tensor) keeps the memory order.
  const auto sizes = known_sizes(node->input(0));
  return constant_is(node->input(1), c10::IValue(std::int64_t{1})) && constant_is(node->input(2), c10::IValue(std::int64_t{-1})) &&
         (!sizes || sizes->size() == 2 || (sizes->size() == 4 && (*sizes)[2] == 1 && (*sizes)[3] == 1));
}

bool dropout_supported(const torch::jit::Node* node) {
  // The identity in eval mode, or with p = 0 in any mode (Swin's attention dropout is called
  // with its default training=True and p=0.0).
  return constant_is(node->input(2), false) || constant_is(node->input(1), c10::IValue(0.0));
}

bool softmax_supported(const torch::jit::Node* node) {
  return constant_is(node->input(2), c10::IValue()) && rank_is_or_unknown(node->input(0), {2});
}

}  // namespace

const toolkit::op_table<subgraph_builder>& xnnpack_ops() {
  static const toolkit::op_table<subgraph_builder> table = [] {
    toolkit::op_table<subgraph_builder> t;
    t.add({"aten::relu", "aten::relu6", "aten::hardtanh", "aten::clamp"}, clamp_supported, emit_clamp);
    t.add({"aten::hardswish", "aten::sigmoid"}, float_input_supported, emit_unary);
    t.add("aten::silu", float_input_supported, emit_silu);
    t.add("aten::hardsigmoid", float_input_supported, emit_hardsigmoid);
    t.add("aten::conv2d", conv2d_supported, emit_convolution);
    t.add("aten::batch_norm", toolkit::batch_norm_eval, emit_batch_norm);
    t.add("aten::linear", linear_supported, emit_linear);
    t.add({"aten::add", "aten::mul"}, binary_supported, emit_binary);
    t.add("aten::max_pool2d", max_pool_supported, emit_pooling);
    t.add("aten::avg_pool2d", avg_pool_supported, emit_pooling);
    t.add("aten::adaptive_avg_pool2d", [](const torch::jit::Node* node) {
      return toolkit::adaptive_pool_to_one(node) || toolkit::adaptive_pool_window(node).has_value();
    }, emit_adaptive_pooling);
    t.add("aten::flatten", flatten_supported, emit_flatten);
    t.add("aten::dropout", dropout_supported, emit_dropout);
    t.add("aten::softmax", softmax_supported, emit_softmax);
    return t;
  }();
  return table;
}

bool XnnpackBackend::supports(const torch::jit::Node* node) { return xnnpack_ops().supports(node); }

torch_delegate::region_verdict XnnpackBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  using torch_delegate::region_verdict;
  // In an if or loop body (nn.MultiheadAttention's branches), example inputs give no shapes:
  // such a region is refused rather than failing at preprocess (at the top level, preprocess's
  // error asks for example inputs).
  if (!region.empty() && region.front()->owningBlock() != region.front()->owningGraph()->block())
    for (const torch::jit::Node* node : region)
      for (const torch::jit::Value* output : node->outputs())
        if (toolkit::is_tensor(output) && !toolkit::known_sizes(output))
          return region_verdict::refuse("in an if or loop body, " + std::string(node->kind().toQualString()) +
                                        "'s sizes are not known from the example inputs");
  if (std::none_of(region.begin(), region.end(), [](const torch::jit::Node* node) {
        return toolkit::is_any(node, {"aten::conv2d", "aten::linear", "aten::max_pool2d", "aten::adaptive_avg_pool2d"});
      }))
    return region_verdict::refuse("no convolution, linear or pooling: not worth a call");
  return true;
}

}  // namespace xnnpack_delegate
