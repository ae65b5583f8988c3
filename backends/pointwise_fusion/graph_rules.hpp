// pointwise_fusion's reading of a graph, shared by supports() (support.cpp) and preprocess
// (preprocess.cpp): which class of elementwise op a node kind is, and its constant arguments.
// Internal: not installed.
#pragma once

#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <optional>

namespace pointwise::detail {

// ---------------------------------------------------------------------------------------------
// What it fuses
// ---------------------------------------------------------------------------------------------

enum class node_class { unary, binary, scaled, power, clamp, gelu, comparison, where, none };

inline node_class class_of(c10::Symbol kind) {
  using namespace c10;
  static const std::map<Symbol, node_class> classes{
      {aten::neg, node_class::unary},       {aten::abs, node_class::unary},     {aten::relu, node_class::unary},
      {aten::sigmoid, node_class::unary},   {aten::tanh, node_class::unary},    {aten::exp, node_class::unary},
      {aten::log, node_class::unary},       {aten::sqrt, node_class::unary},    {aten::rsqrt, node_class::unary},
      {aten::reciprocal, node_class::unary}, {aten::silu, node_class::unary},
      {aten::mul, node_class::binary},      {aten::div, node_class::binary},
      {aten::minimum, node_class::binary},  {aten::maximum, node_class::binary},
      {aten::clamp_min, node_class::binary}, {aten::clamp_max, node_class::binary},
      {aten::add, node_class::scaled},      {aten::sub, node_class::scaled},    {aten::rsub, node_class::scaled},
      {aten::pow, node_class::power},       {aten::clamp, node_class::clamp},   {aten::gelu, node_class::gelu},
      {aten::lt, node_class::comparison},   {aten::le, node_class::comparison}, {aten::gt, node_class::comparison},
      {aten::ge, node_class::comparison},   {aten::eq, node_class::comparison}, {aten::ne, node_class::comparison},
      {aten::where, node_class::where},
  };
  const auto found = classes.find(kind);
  return found == classes.end() ? node_class::none : found->second;
}

inline bool is_number_type(const c10::TypePtr& type) {
  const c10::TypeKind kind = type->kind();
  return kind == c10::TypeKind::FloatType || kind == c10::TypeKind::IntType || kind == c10::TypeKind::BoolType ||
         kind == c10::TypeKind::NumberType;
}
inline bool is_tensor(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::TensorType; }

inline std::optional<double> constant_number(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  if (!constant) return std::nullopt;
  // A traced model holds its Python numbers as 0-dim tensor constants (`Double() = {0.5}`): with
  // a float tensor they compute as the number does (a 0-dim operand does not promote the dtype).
  if (constant->isTensor()) {
    const at::Tensor& tensor = constant->toTensor();
    if (tensor.dim() != 0 || tensor.is_complex() || !tensor.device().is_cpu()) return std::nullopt;
    return tensor.item<double>();
  }
  if (!(constant->isDouble() || constant->isInt() || constant->isBool())) return std::nullopt;
  return constant->isBool() ? double(constant->toBool()) : constant->toScalar().toDouble();
}
inline bool is_none_constant(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isNone();
}
inline bool makes_bool(const torch::jit::Value* value) { return class_of(value->node()->kind()) == node_class::comparison; }

/// An operand the fused loop can read: a tensor or a number (constant or not).
/// A tensor constant is readable only as the number it holds (0-dim, as tracing makes them).
inline bool readable(const torch::jit::Value* value) {
  if (is_tensor(value)) return value->node()->kind() != c10::prim::Constant || constant_number(value).has_value();
  return is_number_type(value->type());
}

}  // namespace pointwise::detail
