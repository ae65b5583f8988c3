// What the numbers and lists a graph computes from its tensors' sizes are at lowering: with
// example inputs every tensor's sizes are known (and a region's input specs hold them at run
// time), so `b, t, d = x.shape`, `d // heads` and the int list a view is given are constants for
// the region that holds them. A backend evaluates them at preprocess instead of leaving them,
// and the views they feed, to TorchScript (ShuffleNetV2's channel shuffle, attention's reshapes).
#pragma once

#include "graph.hpp"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace torch_delegate::toolkit {

/// The value of the non-tensor `value` at lowering, when constants and known tensor sizes
/// determine it: a constant; `aten::size` (all, or one dimension) and `aten::dim` of a tensor of
/// known sizes; and the pure number and list operators below, of known values, run as
/// TorchScript runs them; a traced graph's numbers in 0-dim tensors (known_number_tensor) as their
/// numbers. Nothing otherwise (a tensor, an input, an unknown size, another op).
inline std::optional<c10::IValue> known_value(const torch::jit::Value* value, int depth = 0);

/// A number in a 0-dim tensor, as a traced graph computes sizes (`prim::NumToTensor` of a size,
/// `aten::floor_divide` of it and a constant): its value as an int or a double, or nothing.
inline std::optional<c10::IValue> known_number_tensor(const torch::jit::Value* value, int depth) {
  const torch::jit::Node* node = value->node();
  if (node->kind() == c10::prim::Constant) {
    const auto constant = torch::jit::toIValue(value);
    if (!constant || !constant->isTensor() || constant->toTensor().dim() != 0) return std::nullopt;
    const at::Tensor& number = constant->toTensor();
    if (at::isFloatingType(number.scalar_type())) return c10::IValue(number.item<double>());
    if (at::isIntegralType(number.scalar_type(), false)) return c10::IValue(number.item<std::int64_t>());
    return std::nullopt;
  }
  if (is(node, "prim::NumToTensor")) return known_value(node->input(0), depth + 1);
  if (!is_any(node, {"aten::floor_divide", "aten::mul", "aten::add", "aten::sub"})) return std::nullopt;
  if (is_any(node, {"aten::add", "aten::sub"}) && (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))))
    return std::nullopt;
  const auto a = known_value(node->input(0), depth + 1), b = known_value(node->input(1), depth + 1);
  if (!a || !b || !a->isInt() || !b->isInt()) return std::nullopt;  // sizes: ints (a float would need dtype rules)
  const std::int64_t x = a->toInt(), y = b->toInt();
  if (is(node, "aten::floor_divide")) {
    if (y == 0) return std::nullopt;
    const std::int64_t quotient = x / y;
    return c10::IValue(quotient * y != x && ((x < 0) != (y < 0)) ? quotient - 1 : quotient);
  }
  return c10::IValue(is(node, "aten::mul") ? x * y : is(node, "aten::add") ? x + y : x - y);
}

/// The elements [first, last) that slice.t(list, start, end, 1) of a list of `count` takes
/// (Python's rules: negative from the end, clamped; None: the ends), or nothing where its bounds
/// are not known or its step is not 1.
inline std::optional<std::pair<std::int64_t, std::int64_t>> list_slice(const torch::jit::Node* node, std::int64_t count) {
  const auto bound = [&](std::size_t k, std::int64_t absent) -> std::optional<std::int64_t> {
    if (node->input(k)->type()->kind() == c10::TypeKind::NoneType) return absent;
    const auto known = constant_of(node->input(k));
    if (!known || !known->isInt()) return std::nullopt;
    std::int64_t at = known->toInt() < 0 ? known->toInt() + count : known->toInt();
    return std::clamp<std::int64_t>(at, 0, count);
  };
  const auto first = bound(1, 0), last = bound(2, count), step = bound(3, 1);
  if (!first || !last || step != std::optional<std::int64_t>(1)) return std::nullopt;
  return std::make_pair(*first, std::max(*first, *last));
}

inline std::optional<c10::IValue> known_value(const torch::jit::Value* value, int depth) {
  if (depth > 64) return std::nullopt;
  if (is_tensor(value)) return known_number_tensor(value, depth);
  const torch::jit::Node* node = value->node();
  if (node->kind() == c10::prim::Constant) {
    const auto constant = torch::jit::toIValue(value);
    return constant ? std::optional<c10::IValue>(*constant) : std::nullopt;
  }
  if (is_any(node, {"aten::Int", "aten::Float"}) && is_tensor(node->input(0))) {  // of a number in a tensor
    const auto number = known_number_tensor(node->input(0), depth + 1);
    if (!number) return std::nullopt;
    if (is(node, "aten::Int")) return c10::IValue(number->isInt() ? number->toInt() : static_cast<std::int64_t>(number->toDouble()));
    return c10::IValue(number->isInt() ? static_cast<double>(number->toInt()) : number->toDouble());
  }
  if (is_any(node, {"aten::size", "aten::dim"}) && is_tensor(node->input(0))) {
    const auto sizes = known_sizes(node->input(0));
    if (!sizes) return std::nullopt;
    if (is(node, "aten::dim")) return c10::IValue(static_cast<std::int64_t>(sizes->size()));
    if (node->inputs().size() == 1) return c10::IValue(*sizes);
    const auto dim = known_value(node->input(1), depth + 1);
    if (!dim || !dim->isInt()) return std::nullopt;
    const auto rank = static_cast<std::int64_t>(sizes->size());
    const std::int64_t at = dim->toInt() < 0 ? dim->toInt() + rank : dim->toInt();
    if (at < 0 || at >= rank) return std::nullopt;
    return c10::IValue((*sizes)[static_cast<std::size_t>(at)]);
  }
  // A list's copy or slice (`x.shape[2:]`, `list(size)`): the list's elements.
  if (is(node, "aten::list") && node->inputs().size() == 1 && is_list(node->input(0))) return known_value(node->input(0), depth + 1);
  if (is(node, "aten::slice") && node->inputs().size() == 4 && is_list(node->input(0))) {
    const auto list = known_value(node->input(0), depth + 1);
    if (!list || !list->isList()) return std::nullopt;
    const auto range = list_slice(node, static_cast<std::int64_t>(list->toList().size()));
    if (!range) return std::nullopt;
    c10::impl::GenericList part(list->toList().elementType());
    for (std::int64_t at = range->first; at < range->second; ++at) part.push_back(list->toList().get(static_cast<std::size_t>(at)));
    return c10::IValue(std::move(part));
  }
  // Lists: element by element (prim::ListUnpack and prim::ListConstruct are interpreter
  // instructions, not operators getOperation() can give).
  if (is_any(node, {"prim::ListUnpack", "aten::__getitem__"})) {
    const auto list = known_value(node->input(0), depth + 1);
    const auto index = is(node, "aten::__getitem__") ? known_value(node->input(1), depth + 1) : c10::IValue(static_cast<std::int64_t>(value->offset()));
    if (!list || !index || !list->isList() || !index->isInt()) return std::nullopt;
    const c10::List<c10::IValue> elements = list->toList();
    const auto count = static_cast<std::int64_t>(elements.size());
    const std::int64_t at = index->toInt() < 0 ? index->toInt() + count : index->toInt();
    if (at < 0 || at >= count || (is(node, "prim::ListUnpack") && count != static_cast<std::int64_t>(node->outputs().size())))
      return std::nullopt;
    return elements.get(static_cast<std::size_t>(at));
  }
  if (is(node, "prim::ListConstruct")) {
    std::vector<std::int64_t> ints;
    std::vector<double> doubles;
    for (const torch::jit::Value* input : node->inputs()) {
      const auto known = known_value(input, depth + 1);
      if (!known) return std::nullopt;
      if (known->isInt() && doubles.empty())
        ints.push_back(known->toInt());
      else if (known->isDouble() && ints.empty())
        doubles.push_back(known->toDouble());
      else
        return std::nullopt;
    }
    const auto element = value->type()->expectRef<c10::ListType>().getElementType()->kind();
    if (element == c10::TypeKind::IntType && doubles.empty()) return c10::IValue(ints);
    if (element == c10::TypeKind::FloatType && ints.empty()) return c10::IValue(doubles);
    return std::nullopt;
  }
  // Numbers: run as TorchScript runs them.
  static const std::initializer_list<const char*> pure = {"aten::len",   "aten::floordiv", "aten::mul", "aten::add",   "aten::sub",
                                                          "aten::div",   "aten::neg",      "aten::sqrt", "aten::Int",  "aten::Float",
                                                          "aten::floor", "aten::ceil",     "aten::remainder", "aten::pow"};
  if (!is_any(node, pure)) return std::nullopt;
  for (const torch::jit::Value* output : node->outputs())
    if (is_tensor(output)) return std::nullopt;
  torch::jit::Stack stack;
  for (const torch::jit::Value* input : node->inputs()) {
    auto known = known_value(input, depth + 1);
    if (!known) return std::nullopt;
    stack.push_back(std::move(*known));
  }
  try {
    node->getOperation()(stack);
  } catch (const std::exception&) {  // e.g. unpacking a list of another length: TorchScript would fail too
    return std::nullopt;
  }
  if (stack.size() != node->outputs().size()) return std::nullopt;
  return stack[value->offset()];
}

/// An int known at lowering (known_value), or nothing.
inline std::optional<std::int64_t> known_int(const torch::jit::Value* value) {
  const auto known = known_value(value);
  return known && known->isInt() ? std::optional<std::int64_t>(known->toInt()) : std::nullopt;
}

/// A number (an int or a float) known at lowering, as a double, or nothing.
inline std::optional<double> known_number(const torch::jit::Value* value) {
  const auto known = known_value(value);
  if (!known) return std::nullopt;
  if (known->isInt()) return static_cast<double>(known->toInt());
  if (known->isDouble()) return known->toDouble();
  return std::nullopt;
}

/// An int list known at lowering (known_value), or nothing.
inline std::optional<std::vector<std::int64_t>> known_ints(const torch::jit::Value* value) {
  const auto known = known_value(value);
  return known && known->isIntList() ? std::optional<std::vector<std::int64_t>>(known->toIntVector()) : std::nullopt;
}

}  // namespace torch_delegate::toolkit
