// Debuggability for backends: errors raised at an instruction show the model's source, and
// executed instructions appear in the PyTorch profiler under the original node's name.
#pragma once

#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/api.h>
#include <torch/csrc/profiler/util.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_delegate {

/// Where a debug handle points in the model. Recorded at preprocess, kept with the lowered
/// module (inside its processed payload) so that it survives save/load and mobile export.
struct debug_location {
  std::string node_kind;                 // "aten::add"
  std::string file_line;                 // "model.py:12", "<string>:3" or "" when unknown
  std::vector<std::string> call_stack;   // outermost first: how the method reached the node
  std::string source;                    // the node's own source lines with "<--- HERE"
};

/// ExecuTorch-style preprocess result: the payload plus, per backend instruction id, the debug
/// handles of the original nodes it implements (several for a fused instruction). A backend's
/// preprocess may return this instead of a bare payload; `raise_at` and `record_instruction`
/// then take the backend's instruction ids.
template <class Payload>
struct preprocess_result {
  Payload payload;
  std::map<std::int64_t, std::vector<std::int64_t>> instruction_handles;
};

/// An error a backend raised at one of its instructions; torch-delegate replaces it with an
/// error that names the backend and method and shows the model's source for the instruction.
class instruction_error : public c10::Error {
 public:
  instruction_error(std::int64_t instruction, std::string message)
      : c10::Error(std::move(message), ""), instruction_(instruction) {}
  std::int64_t instruction() const { return instruction_; }

 private:
  std::int64_t instruction_;
};

/// Throws from `execute`: `message`, attributed to an instruction (its debug handle, or its
/// instruction id when preprocess returned a preprocess_result).
[[noreturn]] inline void raise_at(std::int64_t instruction, std::string message) {
  throw instruction_error(instruction, std::move(message));
}

/// Re-throws the exception being handled, attributed to an instruction: use in a catch block
/// around a kernel that throws its own exceptions.
[[noreturn]] inline void rethrow_at(std::int64_t instruction) {
  try {
    throw;
  } catch (const instruction_error&) {
    throw;
  } catch (const c10::Error& error) {
    raise_at(instruction, error.what_without_backtrace());
  } catch (const std::exception& error) {
    raise_at(instruction, error.what());
  }
}

namespace detail {

/// The debug information of one lowered method.
struct method_debug_info {
  std::unordered_map<std::int64_t, debug_location> locations;             // by debug handle
  std::map<std::int64_t, std::vector<std::int64_t>> instruction_handles;  // empty: ids are handles

  std::vector<std::int64_t> handles_of(std::int64_t instruction) const {
    if (instruction_handles.empty()) return {instruction};
    auto found = instruction_handles.find(instruction);
    return found == instruction_handles.end() ? std::vector<std::int64_t>{} : found->second;
  }
};

/// What the running execute belongs to, for record_instruction (set by the dispatch layer).
struct running_method {
  std::string_view backend;
  const method_debug_info* debug = nullptr;
};
inline thread_local const running_method* current_method = nullptr;

class running_method_scope {
 public:
  explicit running_method_scope(running_method method) : method_(method), previous_(current_method) {
    current_method = &method_;
  }
  ~running_method_scope() { current_method = previous_; }
  running_method_scope(const running_method_scope&) = delete;
  running_method_scope& operator=(const running_method_scope&) = delete;

 private:
  running_method method_;
  const running_method* previous_;
};

/// "\nThe failing instruction implements aten::add (debug handle 3) at <string>:3:\n<frames><source>"
inline std::string describe_handle(const method_debug_info& debug, std::int64_t handle) {
  auto found = debug.locations.find(handle);
  if (found == debug.locations.end()) return "\n(no debug information for debug handle " + std::to_string(handle) + ")";
  const debug_location& where = found->second;
  std::string text = "\nThe failing instruction implements " + where.node_kind + " (debug handle " + std::to_string(handle) + ")";
  if (!where.file_line.empty()) text += " at " + where.file_line;
  text += ":\n";
  for (const std::string& frame : where.call_stack) text += frame;
  return text + where.source;
}

/// The error text for an instruction_error: the backend's message, then where in the model.
inline std::string describe_instruction(const method_debug_info* debug, std::int64_t instruction) {
  std::string text;
  const std::vector<std::int64_t> handles = debug ? debug->handles_of(instruction) : std::vector<std::int64_t>{};
  if (handles.empty()) return "\n(no debug information for instruction " + std::to_string(instruction) + ")";
  for (std::int64_t handle : handles) text += describe_handle(*debug, handle);
  return text;
}

/// "aten::add (model.py:12)": the node's kind and where it is, with the file's directory left
/// out to keep profiles readable (errors keep the full path).
inline std::string event_name(const debug_location& where) {
  if (where.file_line.empty()) return where.node_kind;
  const std::size_t slash = where.file_line.rfind('/');
  return where.node_kind + " (" + (slash == std::string::npos ? where.file_line : where.file_line.substr(slash + 1)) + ")";
}

}  // namespace detail

/// The profiler's clock, in nanoseconds: take start and end times of an instruction with it.
inline std::int64_t now_ns() { return torch::profiler::impl::getTime(); }

/// Whether a profiler is recording: skip timing work otherwise.
inline bool profiling() { return torch::profiler::impl::profilerEnabled(); }

/// Reports one executed instruction to the active PyTorch profiler (C++ Kineto API,
/// torch.profiler in Python): it appears as an op named after the original node and its source
/// line, e.g. "aten::add (model.py:12)", with its debug handle and the backend's name. A no-op
/// when no profiler is active or outside a lowered method's execute. `name` overrides the op name.
inline void record_instruction(std::int64_t instruction, std::int64_t start_ns, std::int64_t end_ns,
                               std::string_view name = {}) {
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
