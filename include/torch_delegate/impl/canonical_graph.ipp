// Definitions for detail/canonical_graph.hpp: the graph partial lowering and coverage look at.
#pragma once

#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>

namespace torch_delegate::detail {

/// Replaces each `prim::ListConstruct` of constant ints, floats or bools that only aten operators
/// read (an argument without alias annotation: read, never written, never kept) by a constant
/// list, as TorchScript's constant propagation does not (lists are mutable). Conv's stride,
/// padding and dilation, a view's sizes or a mean's dims then are constants, like a frozen
/// model's weights, and do not end a region.
inline void fold_constant_lists(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) fold_constant_lists(nested);
    if (node->kind() != c10::prim::ListConstruct) continue;
    const c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
    const c10::TypeKind kind = element->kind();
    if (kind != c10::TypeKind::IntType && kind != c10::TypeKind::FloatType && kind != c10::TypeKind::BoolType) continue;
    const bool constant_elements = std::all_of(node->inputs().begin(), node->inputs().end(), [](const torch::jit::Value* v) {
      return v->node()->kind() == c10::prim::Constant;
    });
    const bool only_read = !node->output()->uses().empty() &&
                           std::all_of(node->output()->uses().begin(), node->output()->uses().end(), [](const torch::jit::Use& use) {
                             if (!use.user->kind().is_aten()) return false;
                             const c10::FunctionSchema* schema = use.user->maybeSchema();
                             return schema && use.offset < schema->arguments().size() &&
                                    schema->arguments()[use.offset].alias_info() == nullptr;
                           });
    if (!constant_elements || !only_read) continue;
    c10::impl::GenericList elements(element);
    for (const torch::jit::Value* input : node->inputs()) elements.push_back(*torch::jit::toIValue(input));
    torch::jit::WithInsertPoint at(node);
    torch::jit::Value* folded = node->owningGraph()->insertConstant(c10::IValue(std::move(elements)), node->sourceRange(), node->scope());
    folded->setType(node->output()->type());
    node->output()->replaceAllUsesWith(folded);
    node->destroy();
  }
}

/// The value whose dtype `value` has for certain: `value` itself, or, through operators whose
/// result has their first input's dtype (a conv, a batch norm, an activation, a pooling, a view),
/// that input's root. Two tensors with one root have one dtype, whatever it is.
inline const torch::jit::Value* dtype_root(const torch::jit::Value* value) {
  static const std::set<std::string> same_dtype_as_input{
      "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::batch_norm", "aten::layer_norm", "aten::group_norm",
      "aten::relu", "aten::relu_", "aten::relu6", "aten::hardtanh", "aten::hardtanh_", "aten::hardswish", "aten::hardswish_",
      "aten::hardsigmoid", "aten::sigmoid", "aten::silu", "aten::gelu", "aten::tanh", "aten::clamp", "aten::clamp_",
      "aten::max_pool2d", "aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::dropout", "aten::contiguous",
      "aten::view", "aten::reshape", "aten::flatten", "aten::permute", "aten::transpose", "aten::add_", "aten::mul_"};
  for (int step = 0; step < 4096; ++step) {
    const torch::jit::Node* maker = value->node();
    if (maker->inputs().empty() || !same_dtype_as_input.count(maker->kind().toQualString())) return value;
    value = maker->input(0);
  }
  return value;
}

/// Whether the in-place `node`'s out-of-place form computes the same values: an activation
/// (`relu_`, `hardtanh_`, ...: one tensor in, the same dtype and shape out), or an add, sub, mul or
/// div of two tensors that have one dtype (dtype_root; ResNet's `out += identity`). Not a
/// comparison (`m.gt_(0.5)` keeps a float tensor where `m.gt(0.5)` makes a bool one), nor a
/// tensor and a number, nor tensors of unknown dtypes (`a.add_(b)` keeps a's dtype where `a + b`
/// promotes). One difference stays: where `a.add_(b)` fails because `b` would broadcast `a`,
/// `a + b` broadcasts; for every input on which the original gives a result, the result is the same.
inline bool out_of_place_is_equivalent(torch::jit::Node* node) {
  static const std::set<std::string> activations{
      "aten::relu_", "aten::relu6_", "aten::hardtanh_", "aten::hardswish_", "aten::hardsigmoid_", "aten::sigmoid_",
      "aten::tanh_", "aten::silu_", "aten::elu_", "aten::leaky_relu_", "aten::gelu_", "aten::mish_", "aten::clamp_"};
  const std::string kind = node->kind().toQualString();
  if (activations.count(kind)) return true;
  static const std::set<std::string> binary{"aten::add_", "aten::sub_", "aten::mul_", "aten::div_"};
  if (!binary.count(kind) || node->inputs().size() < 2) return false;
  const torch::jit::Value* a = node->input(0);
  const torch::jit::Value* b = node->input(1);
  if (!a->type()->isSubtypeOf(*c10::TensorType::get()) || !b->type()->isSubtypeOf(*c10::TensorType::get())) return false;
  const auto a_type = a->type()->expect<c10::TensorType>(), b_type = b->type()->expect<c10::TensorType>();
  if (a_type->scalarType() && b_type->scalarType()) return *a_type->scalarType() == *b_type->scalarType();
  return dtype_root(a) == dtype_root(b);
}

// The method's graph as partitioning sees it: calls inlined, non-tensor constants and constant
// lists folded, dead code removed (F.relu's `if inplace:` branch disappears, so it does not
// block a region), and in-place operators made out-of-place where nothing can observe the write
// (LibTorch's RemoveTensorMutation, with alias analysis: `hardtanh_` on a conv's fresh output
// becomes `hardtanh`; a write to an input or to a tensor with a view stays) and where the two
// forms compute the same (out_of_place_is_equivalent).
TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> canonical_graph(const torch::jit::Module& module, const std::string& method) {
  std::shared_ptr<torch::jit::Graph> graph = inlined_graph(module, method);
  torch::jit::ConstantPropagationImmutableTypes(graph);
  fold_constant_lists(graph->block());
  torch::jit::RemoveTensorMutation(graph, std::function<bool(torch::jit::Node*)>(out_of_place_is_equivalent));
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

}  // namespace torch_delegate::detail
