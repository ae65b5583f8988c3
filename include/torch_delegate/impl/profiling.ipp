// Definitions for profiling.hpp.
#pragma once

#include <torch_delegate/profiling.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/api.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/csrc/profiler/util.h>

#include <string>
#include <vector>

namespace torch_delegate {

namespace detail {

/// "aten::add (model.py:12)": the node's kind and where it is, with the file's directory left
/// out to keep profiles readable (errors keep the full path).
inline std::string event_name(const debug_location& where) {
  if (where.file_line.empty()) return where.node_kind;
  const std::size_t slash = where.file_line.rfind('/');
  return where.node_kind + " (" + (slash == std::string::npos ? where.file_line : where.file_line.substr(slash + 1)) + ")";
}

}  // namespace detail

TORCH_DELEGATE_DECL std::int64_t now_ns() { return torch::profiler::impl::getTime(); }

// Kineto's only: record_instruction reports through reportBackendEventToActiveKinetoProfiler,
// which reads the legacy profiler's thread-local state as Kineto's (LibTorch 1.13) and crashes or
// hangs under torch::autograd::profiler::RecordProfile / torch.autograd.profiler(use_kineto=False).
TORCH_DELEGATE_DECL bool profiling() {
  return torch::profiler::impl::profilerEnabled() &&
         torch::profiler::impl::profilerType() == torch::profiler::impl::ActiveProfilerType::KINETO;
}

TORCH_DELEGATE_DECL void record_instruction(std::int64_t instruction, std::int64_t start_ns, std::int64_t end_ns,
                                            std::string_view name) {
  const detail::running_method* method = detail::current_method;
  if (!method || !profiling()) return;
  const std::vector<std::int64_t> handles = method->debug ? method->debug->handles_of(instruction)
                                                          : std::vector<std::int64_t>{instruction};
  std::string event(name);
  const std::int64_t handle = handles.empty() ? instruction : handles.front();
  if (event.empty() && method->debug) {
    for (std::int64_t h : handles)
      if (auto found = method->debug->locations.find(h); found != method->debug->locations.end())
        event += (event.empty() ? "" : " + ") + detail::event_name(found->second);
  }
  if (event.empty()) event = "instruction " + std::to_string(instruction);
  torch::autograd::profiler::reportBackendEventToActiveKinetoProfiler(start_ns / 1000, end_ns / 1000, handle,
                                                                      at::RecordScope::FUNCTION, event,
                                                                      std::string(method->backend));
}

}  // namespace torch_delegate
