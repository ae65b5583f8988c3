// Graph reading for a backend's supports() and preprocess: node predicates (`is(node,
// "aten::conv2d")`), constants read as ints, doubles and int lists, the float-tensor and rank
// checks every CNN backend makes of an input, and a region graph's inputs and results.
#pragma once

#include <torch_delegate/node_queries.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

namespace torch_delegate::toolkit {

using torch_delegate::constant_is;
using torch_delegate::constant_of;
using torch_delegate::known_at_lowering;
using torch_delegate::known_sizes;

/// Whether `node` is of the qualified kind `kind` ("aten::conv2d", "prim::ListConstruct").
inline bool is(const torch::jit::Node* node, const char* kind) { return node->kind() == c10::Symbol::fromQualString(kind); }

/// Whether `node` is of one of `kinds`.
inline bool is_any(const torch::jit::Node* node, std::initializer_list<const char*> kinds) {
  return std::any_of(kinds.begin(), kinds.end(), [&](const char* kind) { return is(node, kind); });
}

/// Whether `value` is typed as a tensor (not a scalar, a list or None).
inline bool is_tensor(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::TensorType; }

/// Whether `value` is typed as a list (an int[] argument, as opposed to padding='same').
inline bool is_list(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::ListType; }

/// A constant int, or nothing (not a constant, or not an int).
inline std::optional<std::int64_t> constant_int(const torch::jit::Value* value) {
  const auto known = constant_of(value);
  if (!known || !known->isInt()) return std::nullopt;
  return known->toInt();
}

/// A constant number as a double (an int or a float constant), or nothing.
inline std::optional<double> constant_double(const torch::jit::Value* value) {
  const auto known = constant_of(value);
  if (known && known->isDouble()) return known->toDouble();
  if (known && known->isInt()) return static_cast<double>(known->toInt());
  return std::nullopt;
}

/// A constant int list (int[] arguments: stride, padding, output_size), or nothing.
inline std::optional<std::vector<std::int64_t>> constant_ints(const torch::jit::Value* value) {
  const auto known = constant_of(value);
  if (!known || !known->isIntList()) return std::nullopt;
  return known->toIntVector();
}

/// Whether `value` is a constant int list whose every element is `expected` (padding all 0,
/// dilation all 1).
inline bool constant_ints_all(const torch::jit::Value* value, std::int64_t expected) {
  const auto list = constant_ints(value);
  return list && std::all_of(list->begin(), list->end(), [&](std::int64_t v) { return v == expected; });
}

/// A float tensor, or a tensor whose dtype is not known (lowering without example inputs).
inline bool is_float_or_unknown(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  return tensor && (!tensor->scalarType() || *tensor->scalarType() == c10::ScalarType::Float);
}

/// A float tensor (or of unknown dtype) of rank `rank`, or of unknown rank.
inline bool is_float_of_rank_or_unknown(const torch::jit::Value* value, std::size_t rank) {
  if (!is_float_or_unknown(value)) return false;
  const auto dim = value->type()->cast<c10::TensorType>()->dim();
  return !dim || *dim == rank;
}

/// The sizes of a float tensor (or of unknown dtype) when they are known and its rank is 1 to
/// `max_rank`; nothing otherwise.
inline std::optional<std::vector<std::int64_t>> float_sizes(const torch::jit::Value* value, std::size_t max_rank = 6) {
  if (!is_float_or_unknown(value)) return std::nullopt;
  auto sizes = known_sizes(value);
  if (!sizes || sizes->empty() || sizes->size() > max_rank) return std::nullopt;
  return sizes;
}

/// Whether the rank of `value` is one of `ranks` where its sizes are known (true when they are
/// not: supports() runs without example inputs too).
inline bool rank_is_or_unknown(const torch::jit::Value* value, std::initializer_list<std::size_t> ranks) {
  const auto sizes = known_sizes(value);
  return !sizes || std::find(ranks.begin(), ranks.end(), sizes->size()) != ranks.end();
}

/// The values a region graph takes: its inputs after `self`.
inline std::vector<const torch::jit::Value*> region_inputs(const torch::jit::Graph& graph) {
  return {graph.inputs().begin() + 1, graph.inputs().end()};
}

/// The values a region graph returns: the elements of the tuple it returns, or its one output.
inline std::vector<const torch::jit::Value*> region_results(const torch::jit::Graph& graph) {
  const torch::jit::Value* returned = graph.outputs()[0];
  if (returned->node()->kind() == c10::prim::TupleConstruct)
    return {returned->node()->inputs().begin(), returned->node()->inputs().end()};
  return {returned};
}

/// Whether `node` builds the tuple of the region's results (preprocess skips it).
inline bool is_results_tuple(const torch::jit::Node* node) {
  return node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
         node->output()->uses()[0].user == node->owningGraph()->return_node();
}

/// The one node that reads `value`, when exactly one use reads it as its input `offset`; null
/// otherwise.
inline const torch::jit::Node* only_reader(const torch::jit::Value* value, std::size_t offset = 0) {
  const auto& uses = value->uses();
  if (uses.size() != 1 || uses[0].offset != offset) return nullptr;
  return uses[0].user;
}

}  // namespace torch_delegate::toolkit
