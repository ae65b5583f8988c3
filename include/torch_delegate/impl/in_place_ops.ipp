// The passes of the canonical graph (canonical_graph.ipp) that make in-place operators
// out-of-place where no one can see the write: which in-place operators compute what their
// out-of-place forms do (the rule LibTorch's RemoveTensorMutation is given), and the in-place
// operators on a new tensor nothing else reads, which RemoveTensorMutation leaves where alias
// analysis cannot tell that tensor from the others in containers.
#pragma once

#include <torch_delegate/detail/canonical_graph.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <set>
#include <string>

namespace torch_delegate::detail {

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
      "aten::tanh_", "aten::silu_", "aten::elu_", "aten::leaky_relu_", "aten::gelu_", "aten::mish_", "aten::clamp_",
      "aten::dropout_"};
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

/// An in-place operator whose out-of-place form computes the same (out_of_place_is_equivalent)
/// on a new tensor (makes_new_tensors) that nothing else reads, made in the same block: no one
/// can see the write, so it becomes out-of-place. LibTorch's RemoveTensorMutation leaves these
/// where alias analysis cannot tell the tensor from others: ResNet's `out += identity; out =
/// relu_(out)` when `out` then goes into a container (a block IntermediateLayerGetter returns),
/// since any container's tensor may alias it once one is written.
inline void make_sole_writes_out_of_place(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) make_sole_writes_out_of_place(nested);
    const std::string kind = node->kind().toQualString();
    if (node->inputs().empty() || node->outputs().size() != 1 || kind.size() < 2 || kind.back() != '_') continue;
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (!schema || schema->arguments().empty() || !schema->arguments()[0].alias_info() ||
        !schema->arguments()[0].alias_info()->isWrite())
      continue;
    torch::jit::Value* written = node->input(0);
    const torch::jit::Node* maker = written->node();
    if (maker->owningBlock() != block || written->uses().size() != 1 || !makes_new_tensors(maker) ||
        !out_of_place_is_equivalent(node))
      continue;
    const c10::Symbol pure = c10::Symbol::fromQualString(kind.substr(0, kind.size() - 1));
    torch::jit::Node* replacement = block->owningGraph()->create(pure, node->inputs(), 1);
    replacement->insertBefore(node);
    replacement->copyMetadata(node);
    if (!replacement->maybeSchema()) {  // no out-of-place overload takes these arguments
      replacement->destroy();
      continue;
    }
    replacement->output()->setType(node->output()->type());
    node->output()->replaceAllUsesWith(replacement->output());
    node->destroy();
  }
}

}  // namespace torch_delegate::detail
