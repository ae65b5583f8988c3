// pointwise_fusion: a CPU backend that fuses each delegated region of elementwise ops into one
// loop. Eager PyTorch makes one pass over memory and allocates one tensor per op; a fused region
// makes one pass for all of them, vectorized for the CPU it runs on (kernels.hpp) and spread over
// at::parallel_for's threads. With partial lowering (torch_delegate::lower_partially), every
// other node stays in TorchScript. docs/pointwise-fusion.md: what it fuses, its figures, limits.
#pragma once

#include "fused_program.hpp"

#include <torch_delegate/backend.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/runtime.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pointwise {

/// What compile makes of a payload: the program, and per input slot what reads it.
struct compiled_region {
  fused_program program;
  std::vector<std::int64_t> first_reader;  // per input: the step id (1-based) of its first reader, 0 if none
  std::vector<bool> only_compared;          // per input: read only by comparisons and where's condition
  /// What the kernels run: program.steps with each multiply / add by a constant that only consumes
  /// the step before it merged into that step as its epilogue. program.steps stays as decoded:
  /// errors and shapes name a step by its place there.
  std::vector<step> kernel_steps;
  std::vector<std::uint32_t> last_use;      // per slot: the index in kernel_steps of the last step that reads it
  /// Steps that pass no value to one another, as parts: kernel_steps split where nothing joins
  /// them (two chains on tensors of different sizes, side by side in the model). A part runs over
  /// its own shape when the parts' shapes differ. Empty: one part, kernel_steps.
  struct part {
    std::vector<step> steps;              // kernel_steps of this part, in order
    std::vector<std::uint32_t> last_use;  // per slot: the index in `steps` of its last reader here
    std::vector<std::uint32_t> inputs;    // the inputs its steps read
  };
  std::vector<part> parts;
  std::vector<std::int32_t> part_of;      // per slot: the part whose step makes it, -1 for none
};

// [struct]
struct PointwiseBackend {
  static constexpr std::string_view name = "pointwise_fusion";

  /// The elementwise ops it fuses (docs/pointwise-fusion.md lists them, with their overloads):
  /// float tensors, numbers and constants in, one tensor out.
  static bool supports(const torch::jit::Node* node);
  /// A region of one node is worth a call only for an op whose kernel beats ATen's (gelu, silu,
  /// sigmoid, tanh, exp, log, pow): a single add or relu, eager does as well.
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region);
  /// Its loops take tensors with no elements (an empty result, as eager gives).
  static constexpr bool runs_empty_tensors = true;

  // host side (support.cpp, preprocess.cpp): the region's graph -> a fused program
  static torch_delegate::preprocess_result<std::string> preprocess(const torch_delegate::method_to_lower& region);

  // runtime side (runtime.cpp, kernels.cpp)
  static bool is_available() { return true; }
  static compiled_region compile(const std::string& payload);
  /// Other input shapes (other_shapes::replan, automatic): the same program, which broadcasts
  /// its operands at every call as the ops it fuses do.
  static compiled_region replan(compiled_region& region, const torch_delegate::given_inputs&) { return region; }
  static std::vector<c10::IValue> execute(compiled_region& region, torch_delegate::inputs inputs);
  // Typed overloads for the most common regions (one result, up to three tensors in): they
  // take TorchScript's operator path, ~2 us less per call than the generic execute's.
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, at::Tensor),
                                                        at::Tensor(at::Tensor, at::Tensor, at::Tensor)>;
  static at::Tensor execute(compiled_region& region, const at::Tensor& a);
  static at::Tensor execute(compiled_region& region, const at::Tensor& a, const at::Tensor& b);
  static at::Tensor execute(compiled_region& region, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c);
};
// [struct]

/// The ISA of the kernels this process runs ("avx512", "avx2", "baseline").
std::string_view kernel_isa();

}  // namespace pointwise
