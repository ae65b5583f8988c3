// The pointwise_fusion payload: a fused program (what preprocess writes, compile reads, and the
// lowered module keeps inside its processed payload), its encoder and its decoder. Plain C++,
// no LibTorch, so that the decoder can be fuzzed on its own; decode never crashes on any input,
// it throws std::invalid_argument naming the line and what was expected.
//
// The text, one item per line (values are "slots", numbered in order of definition):
//   pointwise_fusion <format version>
//   inputs <count>                              slots 0 .. count-1, the region's inputs in order
//   const <slot> <number>                       a number known at preprocess
//   <op> <slot> <imm> <node kind> <operand slot>...   one step; as many operands as the op takes
//   outputs <slot>[:bool] ...                   what the region returns, in order
// Each const and step defines the next slot. Version 1 is the only one so far; a newer reader
// keeps reading it.
#pragma once

#include "kernels.hpp"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pointwise {

struct fused_program {
  static constexpr std::int64_t format_version = 1;

  struct constant {
    std::uint32_t slot;
    float value;
  };
  struct output {
    std::uint32_t slot;
    bool is_bool;  // a comparison's result: returned as a bool tensor
  };

  std::uint32_t input_count = 0;
  std::vector<constant> constants;
  std::vector<step> steps;
  std::vector<std::string> step_kinds;  // per step, the node it implements ("aten::mul")
  std::vector<output> outputs;
  std::uint32_t slot_count = 0;  // inputs + constants + steps
};

/// Items joined pair by pair (a union-find): the parts of a program (runtime.cpp) and the chains
/// of a candidate region (support.cpp).
struct disjoint_sets {
  explicit disjoint_sets(std::size_t count) : root(count) {
    for (std::size_t i = 0; i < count; ++i) root[i] = i;
  }
  std::size_t find(std::size_t i) {
    while (root[i] != i) i = root[i] = root[root[i]];
    return i;
  }
  void join(std::size_t a, std::size_t b) { root[find(a)] = find(b); }
  std::vector<std::size_t> root;
};

/// The payload text of a program.
std::string encode(const fused_program& program);

/// Reads a payload; throws std::invalid_argument ("pointwise_fusion payload, line 4: ...") on
/// anything malformed: unknown ops, wrong operand counts, slots used before they are defined.
fused_program decode(std::string_view payload);

/// The steps the kernels run for a program (compile's choice, not part of the format): a mul_imm
/// or add_imm whose operand is the intermediate of the step just before it, read by nothing else
/// and not returned, becomes that step's affine epilogue (multiply first, then add, as the ops
/// ran): its loop, with a load and a store per element, goes. `(x + h) * 2.0 - 1.0`, after
/// compile's immediate forms, is one loop over x and h instead of three.
std::vector<step> merge_affine_epilogues(const fused_program& program);

}  // namespace pointwise
