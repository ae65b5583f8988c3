// Definitions for preprocess.hpp.
#pragma once

#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/ir/constants.h>

namespace torch_delegate {

TORCH_DELEGATE_DECL torch::jit::DebugHandleType method_to_lower::debug_handle(const torch::jit::Node* node) const {
  auto found = debug_handles_.find(const_cast<torch::jit::Node*>(node));
  if (found == debug_handles_.end())
    detail::fail({backend_, name_}, "the node " + std::string(node->kind().toQualString()) +
                                        " has no debug handle: it is not a node of this method's graph");
  return found->second;
}

TORCH_DELEGATE_DECL std::optional<c10::IValue> method_to_lower::value_of(const torch::jit::Value* value) const {
  if (auto constant = torch::jit::toIValue(value)) return constant;
  if (value->owningGraph() != graph_.get()) return std::nullopt;
  return detail::attribute_value(module_, value);
}

TORCH_DELEGATE_DECL at::Tensor method_to_lower::tensor_of(const torch::jit::Value* value) const {
  const std::optional<c10::IValue> known = value_of(value);
  if (!known || !known->isTensor())
    reject(value->node(), "expected a tensor known at lowering time (a constant, parameter or buffer), got " +
                              std::string(known ? known->tagKind() : "a value computed at run time") + ".");
  return known->toTensor();
}

TORCH_DELEGATE_DECL std::vector<std::int64_t> method_to_lower::sizes(const torch::jit::Value* value) const {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor) reject(value->node(), "%" + value->debugName() + " is " + value->type()->annotation_str() + ", not a tensor.");
  const auto concrete = tensor->sizes().concrete_sizes();
  if (!concrete)
    reject(value->node(), "the shape of %" + value->debugName() +
                              " is not known at lowering time: lower with example inputs (partition_options::example_inputs; "
                              "Python: example_inputs=(x,)).");
  return *concrete;
}

TORCH_DELEGATE_DECL void method_to_lower::reject(const torch::jit::Node* node, std::string_view message) const {
  std::string text(message);
  text += " Source code: ";
  text += detail::source_of(node, name_);
  throw c10::Error(text, "");
}

}  // namespace torch_delegate
