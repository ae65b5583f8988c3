// Profiling of a backend's instructions: each executed instruction appears in the PyTorch
// profiler (C++ Kineto API, torch.profiler in Python) under the original node's name and source
// line. Include it where a backend times its instructions; the profiler's headers stay out of
// every other translation unit.
#pragma once

#include <torch_delegate/convert.hpp>  // detail::dependent_false
#include <torch_delegate/debug.hpp>

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <cstdint>
#include <string_view>

namespace torch_delegate {

/// The profiler's clock, in nanoseconds: take start and end times of an instruction with it.
TORCH_DELEGATE_DECL std::int64_t now_ns();

/// Whether the PyTorch (Kineto) profiler is recording: skip timing work otherwise. LibTorch's
/// legacy profiler does not take backend events; under it, this is false.
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

/// at::parallel_for for a backend's execute: each chunk runs in the context of the lowered method
/// that called it, so that record_instruction in a worker thread is attributed to that method and
/// reaches the active profiler. (With at::parallel_for alone, events from its worker threads are
/// dropped: LibTorch 1.13's OpenMP workers do not carry the caller's thread-local state, the
/// profiler's included, and the running method is tracked per thread.)
///
/// LibTorch's at::parallel_for is an inline template built on OpenMP (Debian's LibTorch): in a
/// translation unit compiled without OpenMP it runs the whole range on the calling thread, without
/// a word. This one is a compile error there instead.
template <class F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain_size, const F& f) {
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
  static_assert(detail::dependent_false<F>,
                "torch-delegate: parallel_for: this translation unit is compiled without OpenMP, so LibTorch's "
                "at::parallel_for (an inline template built on OpenMP) would run every range on the calling thread. "
                "Compile it with -fopenmp (Meson: dependency('openmp'); CMake: OpenMP::OpenMP_CXX).");
#endif
  const detail::running_method* method = detail::current_method;
  if (!method || !profiling()) {
    at::parallel_for(begin, end, grain_size, f);
    return;
  }
  const at::ThreadLocalState caller;  // the profiler's state among it
  at::parallel_for(begin, end, grain_size, [&](std::int64_t chunk_begin, std::int64_t chunk_end) {
    if (detail::current_method == method) {  // the calling thread
      f(chunk_begin, chunk_end);
      return;
    }
    at::ThreadLocalStateGuard state(caller);
    detail::running_method_scope running(*method);
    f(chunk_begin, chunk_end);
  });
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/profiling.ipp>
#endif
