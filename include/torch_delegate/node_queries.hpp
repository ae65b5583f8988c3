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

/// Whether preprocess sees `value` as a constant: a constant node, or an attribute read (a
/// parameter or buffer; a backend with `owns_parameters` gets it as a constant in its region,
/// and method_to_lower::tensor_of reads it in any case).
inline bool known_at_lowering(const torch::jit::Value* value) {
  const c10::Symbol kind = value->node()->kind();
  return kind == c10::prim::Constant || kind == c10::prim::GetAttr;
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
