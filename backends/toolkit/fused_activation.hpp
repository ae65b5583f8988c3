// Activations as CNN backends fuse them: which node is an activation (relu, a clip such as relu6,
// hardtanh or clamp with numeric bounds, sigmoid, silu, hardswish, hardsigmoid, gelu), the
// [min, max] range of a clamp-like one, and the rule for folding the activation that alone reads
// an op's output into that op (XNNPACK's output_min/max, oneDNN's post-ops).
#pragma once

#include "graph.hpp"

#include <torch/csrc/jit/ir/ir.h>

#include <limits>
#include <optional>
#include <unordered_set>
#include <utility>

namespace torch_delegate::toolkit {

inline constexpr double unbounded = std::numeric_limits<double>::infinity();

/// The bounds [min, max] of relu, relu6, hardtanh or clamp with numeric bounds known at lowering
/// (None: unbounded on that side); nullopt for another node.
inline std::optional<std::pair<double, double>> clamp_range(const torch::jit::Node* node) {
  auto bound = [](const torch::jit::Value* value, double otherwise) -> std::optional<double> {
    const auto known = constant_of(value);
    if (!known) return std::nullopt;
    if (known->isNone()) return otherwise;
    return constant_double(value);
  };
  if (is(node, "aten::relu")) return std::make_pair(0.0, unbounded);
  if (is(node, "aten::relu6")) return std::make_pair(0.0, 6.0);
  const bool numeric_bounds = node->inputs().size() == 3 && !is_tensor(node->input(1)) && !is_tensor(node->input(2));
  if (is_any(node, {"aten::hardtanh", "aten::clamp"}) && numeric_bounds) {
    const auto low = bound(node->input(1), -unbounded), high = bound(node->input(2), unbounded);
    if (low && high) return std::make_pair(*low, *high);
  }
  return std::nullopt;
}

/// The activations the toolkit recognises (a backend maps them to its library's own).
enum class activation_kind { relu, clip, sigmoid, silu, hardswish, hardsigmoid, gelu_erf, gelu_tanh };

/// An activation node read: its kind and, for relu and clip, its bounds.
struct activation {
  activation_kind kind;
  double low = -unbounded, high = unbounded;
};

/// The activation `node` computes, or nullopt. relu is {relu, 0, inf}; relu6, hardtanh and
/// clamp with numeric bounds are clips; gelu is read with its `approximate` ("none" or "tanh").
inline std::optional<activation> activation_of(const torch::jit::Node* node) {
  if (is(node, "aten::relu")) return activation{activation_kind::relu, 0.0, unbounded};
  if (const auto range = clamp_range(node)) return activation{activation_kind::clip, range->first, range->second};
  if (is(node, "aten::sigmoid")) return activation{activation_kind::sigmoid};
  if (is(node, "aten::silu")) return activation{activation_kind::silu};
  if (is(node, "aten::hardswish")) return activation{activation_kind::hardswish};
  if (is(node, "aten::hardsigmoid")) return activation{activation_kind::hardsigmoid};
  if (is(node, "aten::gelu") && node->inputs().size() == 2) {
    const auto approximate = constant_of(node->input(1));
    if (approximate && approximate->isString() && approximate->toStringRef() == "none")
      return activation{activation_kind::gelu_erf};
    if (approximate && approximate->isString() && approximate->toStringRef() == "tanh")
      return activation{activation_kind::gelu_tanh};
  }
  return std::nullopt;
}

/// The fusion rule both CNN backends follow: the node that alone reads `output` (as its first
/// input), when `output` is not one of the region's results (`is_result`) and `accept` takes that
/// node, is folded into the op that makes `output`: it is added to `folded` (preprocess then
/// skips it), `output` becomes its output, and what `accept` returned is returned.
///
///   auto range = fold_following(output, is_result, folded, clamp_range);  // XNNPACK's min/max
template <class IsResult, class Accept>
auto fold_following(const torch::jit::Value*& output, IsResult&& is_result, std::unordered_set<const torch::jit::Node*>& folded,
                    Accept&& accept) -> decltype(accept(output->node())) {
  const torch::jit::Node* user = only_reader(output, 0);
  if (!user || is_result(output)) return {};
  auto accepted = accept(user);
  if (!accepted) return {};
  folded.insert(user);
  output = user->output();
  return accepted;
}

}  // namespace torch_delegate::toolkit
