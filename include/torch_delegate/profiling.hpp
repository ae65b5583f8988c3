// Profiling of a backend's instructions: each executed instruction appears in the PyTorch
// profiler (C++ Kineto API, torch.profiler in Python) under the original node's name and source
// line. Include it where a backend times its instructions; the profiler's headers stay out of
// every other translation unit.
#pragma once

#include <torch_delegate/debug.hpp>

#include <cstdint>
#include <string_view>

namespace torch_delegate {

/// The profiler's clock, in nanoseconds: take start and end times of an instruction with it.
TORCH_DELEGATE_DECL std::int64_t now_ns();

/// Whether a profiler is recording: skip timing work otherwise.
TORCH_DELEGATE_DECL bool profiling();

/// Reports one executed instruction to the active PyTorch profiler: it appears as an op named
/// after the original node and its source line, e.g. "aten::add (model.py:12)", with its debug
/// handle and the backend's name. A no-op when no profiler is active or outside a lowered
/// method's execute. `name` overrides the op name.
TORCH_DELEGATE_DECL void record_instruction(std::int64_t instruction, std::int64_t start_ns, std::int64_t end_ns,
                                            std::string_view name = {});

/// Times a scope and reports it with record_instruction when the scope ends.
class instruction_timer {
 public:
  explicit instruction_timer(std::int64_t instruction) : instruction_(instruction), start_(profiling() ? now_ns() : -1) {}
  ~instruction_timer() {
    if (start_ >= 0) record_instruction(instruction_, start_, now_ns());
  }
  instruction_timer(const instruction_timer&) = delete;
  instruction_timer& operator=(const instruction_timer&) = delete;

 private:
  std::int64_t instruction_;
  std::int64_t start_;
};

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/profiling.ipp>
#endif
