// What a backend's supports() and preprocess ask of a graph node's inputs: a constant's value,
// whether a value is known when lowering (a constant, or a parameter a region owns), and a
// tensor's sizes where example inputs recorded them.
#pragma once

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace torch_delegate {

/// The value of `value` when a constant node makes it (`prim::Constant`), or nothing.
inline std::optional<c10::IValue> constant_of(const torch::jit::Value* value) {
  auto known = torch::jit::toIValue(value);
  if (!known) return std::nullopt;
  return std::move(*known);
}

/// Whether `value` is a constant equal to `expected` (`constant_is(node->input(2), 1)`).
inline bool constant_is(const torch::jit::Value* value, const c10::IValue& expected) {
  const auto known = constant_of(value);
  return known && *known == expected;
}

/// Whether preprocess sees `value` as a constant: a constant node, or an attribute read of the
/// module (a parameter or buffer, read from the method's `self` through its submodules; a backend
/// with `owns_parameters` gets it as a constant in its region, and method_to_lower::tensor_of
/// reads it in any case). Not an attribute of an object the method makes: torchvision's
/// detection models read their batched images as `images.tensors`, from an ImageList.
inline bool known_at_lowering(const torch::jit::Value* value) {
  if (value->node()->kind() == c10::prim::Constant) return true;
  if (value->node()->kind() != c10::prim::GetAttr) return false;
  while (value->node()->kind() == c10::prim::GetAttr) value = value->node()->input(0);
  const auto object = value->type()->cast<c10::ClassType>();
  const torch::jit::Graph& graph = *value->owningGraph();
  return object && object->is_module() && !graph.inputs().empty() && value == graph.inputs()[0];
}

/// The sizes of a tensor value whose type is complete (partition_options::example_inputs records
/// them for every tensor a method makes), or nothing (another type, or sizes not known).
inline std::optional<std::vector<std::int64_t>> known_sizes(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor) return std::nullopt;
  auto sizes = tensor->sizes().concrete_sizes();
  if (!sizes) return std::nullopt;
  return std::move(*sizes);
}

}  // namespace torch_delegate
