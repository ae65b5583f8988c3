// Sizes a graph computes from its tensors' sizes, kept as programs instead of numbers, so that a
// region planned again for other input shapes computes them again: `b, n, c = x.shape` then
// `x.reshape(b, n, 3, heads, c // heads)` is the sizes [x.size(0), x.size(1), 3, 12, x.size(2) // 12],
// whatever x's sizes are at the call. known_values.hpp gives the numbers at lowering; this gives
// how they were computed, where every size they read is of a value the region holds (an input,
// or a value one of its steps makes) and the arithmetic is `*`, `//`, `+` and `-` of ints.
//
// A program is a flat int list (a payload stores it as is): instructions in postfix order, each an
// op code and its operands; `size_op::result` ends one size of the list it computes.
#pragma once

#include "graph.hpp"
#include "known_values.hpp"

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace torch_delegate::toolkit {

/// The instructions of a size program.
enum class size_op : std::int64_t {
  constant = 0,  // constant c: push c
  size = 1,      // size v d: push the size of dimension d of value v (its id in the payload)
  mul = 2,       // pop b, a; push a * b
  floordiv = 3,  // pop b, a; push a // b (Python's: towards negative infinity)
  add = 4,       // pop b, a; push a + b
  sub = 5,       // pop b, a; push a - b
  result = 6,    // pop a: the next size of the list
};

namespace detail_size_programs {
using code = std::vector<std::int64_t>;
inline code constant(std::int64_t c) { return {static_cast<std::int64_t>(size_op::constant), c}; }
inline code size_of(std::int64_t id, std::int64_t dim) { return {static_cast<std::int64_t>(size_op::size), id, dim}; }
inline code binary(code a, const code& b, size_op op) {
  a.insert(a.end(), b.begin(), b.end());
  a.push_back(static_cast<std::int64_t>(op));
  return a;
}

/// The ids of the region's values: nothing for a value the region does not hold.
using value_ids = std::function<std::optional<std::int64_t>(const torch::jit::Value*)>;

inline std::optional<std::vector<code>> list_program(const torch::jit::Value* value, const value_ids& ids, int depth);

inline std::optional<code> int_program(const torch::jit::Value* value, const value_ids& ids, int depth) {
  if (depth > 64) return std::nullopt;
  const torch::jit::Node* node = value->node();
  if (node->kind() == c10::prim::Constant) {
    const auto known = known_value(value);
    if (known && known->isInt()) return constant(known->toInt());
    return std::nullopt;
  }
  if (is_any(node, {"aten::Int", "prim::NumToTensor"})) return int_program(node->input(0), ids, depth + 1);
  if (is(node, "aten::size") && node->inputs().size() == 2 && is_tensor(node->input(0))) {
    const auto sizes = known_sizes(node->input(0));
    const auto dim = known_int(node->input(1));
    const auto id = ids(node->input(0));
    if (!sizes || !dim || !id) return std::nullopt;
    const auto rank = static_cast<std::int64_t>(sizes->size());
    const std::int64_t at = *dim < 0 ? *dim + rank : *dim;
    if (at < 0 || at >= rank) return std::nullopt;
    return size_of(*id, at);
  }
  if (is_any(node, {"prim::ListUnpack", "aten::__getitem__"})) {
    const auto list = list_program(node->input(0), ids, depth + 1);
    const auto index = is(node, "aten::__getitem__") ? known_int(node->input(1)) : std::optional<std::int64_t>(value->offset());
    if (!list || !index) return std::nullopt;
    const auto count = static_cast<std::int64_t>(list->size());
    const std::int64_t at = *index < 0 ? *index + count : *index;
    if (at < 0 || at >= count) return std::nullopt;
    return (*list)[static_cast<std::size_t>(at)];
  }
  const bool traced_arithmetic = is_any(node, {"aten::floor_divide", "aten::mul", "aten::add", "aten::sub"}) && is_tensor(value);
  if (is_any(node, {"aten::mul", "aten::floordiv", "aten::add", "aten::sub"}) || traced_arithmetic) {
    if (is_any(node, {"aten::add", "aten::sub"}) && node->inputs().size() == 3 &&
        !constant_is(node->input(2), c10::IValue(std::int64_t{1})))  // a tensor add's alpha
      return std::nullopt;
    const auto a = int_program(node->input(0), ids, depth + 1), b = int_program(node->input(1), ids, depth + 1);
    if (!a || !b) return std::nullopt;
    const size_op op = is(node, "aten::mul")                                        ? size_op::mul
                       : is_any(node, {"aten::floordiv", "aten::floor_divide"}) ? size_op::floordiv
                       : is(node, "aten::add")                                      ? size_op::add
                                                                                    : size_op::sub;
    return binary(*a, *b, op);
  }
  return std::nullopt;
}

inline std::optional<std::vector<code>> list_program(const torch::jit::Value* value, const value_ids& ids, int depth) {
  if (depth > 64) return std::nullopt;
  const torch::jit::Node* node = value->node();
  if (is(node, "aten::size") && node->inputs().size() == 1 && is_tensor(node->input(0))) {
    const auto sizes = known_sizes(node->input(0));
    const auto id = ids(node->input(0));
    if (!sizes || !id) return std::nullopt;
    std::vector<code> list;
    for (std::size_t k = 0; k < sizes->size(); ++k) list.push_back(size_of(*id, static_cast<std::int64_t>(k)));
    return list;
  }
  if (is(node, "prim::ListConstruct")) {
    std::vector<code> list;
    for (const torch::jit::Value* input : node->inputs()) {
      auto element = int_program(input, ids, depth + 1);
      if (!element) return std::nullopt;
      list.push_back(std::move(*element));
    }
    return list;
  }
  if (node->kind() == c10::prim::Constant) {
    const auto known = known_ints(value);
    if (!known) return std::nullopt;
    std::vector<code> list;
    for (const std::int64_t c : *known) list.push_back(constant(c));
    return list;
  }
  if (is(node, "aten::list") && node->inputs().size() == 1) return list_program(node->input(0), ids, depth + 1);
  if (is(node, "aten::slice") && node->inputs().size() == 4 && is_list(node->input(0))) {  // `x.shape[2:]`
    auto list = list_program(node->input(0), ids, depth + 1);
    if (!list) return std::nullopt;
    const auto range = list_slice(node, static_cast<std::int64_t>(list->size()));
    if (!range) return std::nullopt;
    return std::vector<code>(list->begin() + range->first, list->begin() + range->second);
  }
  return std::nullopt;
}
}  // namespace detail_size_programs

/// The program of the int list `value` (a view's or reshape's sizes: a list constant, a
/// `prim::ListConstruct` of ints, `x.size()`) where every size it reads is of a value `ids` knows;
/// nothing otherwise (a number from outside the region, an op it does not follow).
inline std::optional<std::vector<std::int64_t>> size_list_program(
    const torch::jit::Value* value, const std::function<std::optional<std::int64_t>(const torch::jit::Value*)>& ids) {
  const auto list = detail_size_programs::list_program(value, ids, 0);
  if (!list) return std::nullopt;
  std::vector<std::int64_t> program;
  for (const auto& element : *list) {
    program.insert(program.end(), element.begin(), element.end());
    program.push_back(static_cast<std::int64_t>(size_op::result));
  }
  return program;
}

/// A program of the given parts, each a constant or the size of a dimension of a value: for the
/// sizes an emitter computes itself (the sizes of a value without one of its dimensions).
struct size_part {
  std::int64_t value = -1;  // -1: the constant `size`
  std::int64_t size = 0;    // the dimension of `value`, or the constant
};
inline std::vector<std::int64_t> size_list_program(const std::vector<size_part>& parts) {
  std::vector<std::int64_t> program;
  for (const size_part& part : parts) {
    const auto code = part.value < 0 ? detail_size_programs::constant(part.size) : detail_size_programs::size_of(part.value, part.size);
    program.insert(program.end(), code.begin(), code.end());
    program.push_back(static_cast<std::int64_t>(size_op::result));
  }
  return program;
}

/// Runs `program` with `size(value, dim)` giving the sizes it reads: the list of sizes it computes.
/// A malformed program (a corrupted payload), a division by zero or a size `size` cannot give is
/// an error (`std::invalid_argument`, saying which).
inline std::vector<std::int64_t> run_size_program(std::span<const std::int64_t> program,
                                                  const std::function<std::int64_t(std::int64_t value, std::int64_t dim)>& size) {
  std::vector<std::int64_t> stack, sizes;
  const auto fail = [](const std::string& why) { throw std::invalid_argument("a size program: " + why); };
  const auto pop = [&] {
    if (stack.empty()) fail("an instruction without its operand");
    const std::int64_t top = stack.back();
    stack.pop_back();
    return top;
  };
  for (std::size_t at = 0; at < program.size();) {
    const std::int64_t op = program[at++];
    const auto operand = [&] {
      if (at >= program.size()) fail("an instruction without its operand");
      return program[at++];
    };
    switch (static_cast<size_op>(op)) {
      case size_op::constant: stack.push_back(operand()); break;
      case size_op::size: {
        const std::int64_t value = operand(), dim = operand();
        stack.push_back(size(value, dim));
        break;
      }
      case size_op::mul:
      case size_op::floordiv:
      case size_op::add:
      case size_op::sub: {
        const std::int64_t b = pop(), a = pop();
        if (static_cast<size_op>(op) == size_op::floordiv) {
          if (b == 0) fail("a division by zero");
          const std::int64_t quotient = a / b;
          stack.push_back(quotient * b != a && ((a < 0) != (b < 0)) ? quotient - 1 : quotient);
        } else {
          stack.push_back(static_cast<size_op>(op) == size_op::mul ? a * b : static_cast<size_op>(op) == size_op::add ? a + b : a - b);
        }
        break;
      }
      case size_op::result: sizes.push_back(pop()); break;
      default: fail("unknown instruction " + std::to_string(op));
    }
  }
  if (!stack.empty()) fail("values left over");
  return sizes;
}

}  // namespace torch_delegate::toolkit
