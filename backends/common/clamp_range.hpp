// What the CNN example backends (xnnpack, onednn) both read of an activation that is a clamp.
#pragma once

#include <torch_delegate/node_queries.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <limits>
#include <optional>
#include <utility>

namespace cnn_common {

/// The bounds [min, max] of relu, relu6, hardtanh or clamp with numeric bounds known at lowering
/// (None: unbounded on that side); nullopt for another node.
inline std::optional<std::pair<double, double>> clamp_range(const torch::jit::Node* node) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto number = [](const torch::jit::Value* value, double otherwise) -> std::optional<double> {
    const auto known = torch_delegate::constant_of(value);
    if (!known) return std::nullopt;
    if (known->isNone()) return otherwise;
    if (known->isDouble()) return known->toDouble();
    if (known->isInt()) return static_cast<double>(known->toInt());
    return std::nullopt;
  };
  auto is = [&](const char* kind) { return node->kind() == c10::Symbol::fromQualString(kind); };
  if (is("aten::relu")) return std::make_pair(0.0, inf);
  if (is("aten::relu6")) return std::make_pair(0.0, 6.0);
  const bool numeric_bounds = node->inputs().size() == 3 && node->input(1)->type()->kind() != c10::TypeKind::TensorType &&
                              node->input(2)->type()->kind() != c10::TypeKind::TensorType;
  if ((is("aten::hardtanh") || is("aten::clamp")) && numeric_bounds) {
    const auto low = number(node->input(1), -inf), high = number(node->input(2), inf);
    if (low && high) return std::make_pair(*low, *high);
  }
  return std::nullopt;
}

}  // namespace cnn_common
