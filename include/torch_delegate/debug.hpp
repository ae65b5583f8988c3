// Errors a backend raises at one of its instructions, and the debug information (recorded at
// preprocess, kept in the payload) that shows the model's source for them. Profiling of
// instructions is in profiling.hpp.
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/backends/backend_exception.h>  // c10::BackendRuntimeException, TORCH_DELEGATED_BACKEND_THROW

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
TORCH_DELEGATE_SHARED inline thread_local const running_method* current_method = nullptr;

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
TORCH_DELEGATE_INTERNAL std::string describe_handle(const method_debug_info& debug, std::int64_t handle);

/// The error text for an instruction_error: the backend's message, then where in the model.
TORCH_DELEGATE_INTERNAL std::string describe_instruction(const method_debug_info* debug, std::int64_t instruction);


}  // namespace detail

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/debug.ipp>
#endif
