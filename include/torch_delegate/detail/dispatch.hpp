// The non-template half of a call to execute: what a compiled method knows of itself
// (method_info), the errors a call can produce, and run_execute, where every route's call of a
// backend's execute runs. The typed half is detail/invoker.hpp.
#pragma once

#include <torch_delegate/input_spec.hpp>

#include <torch_delegate/debug.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/detail/signature.hpp>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <optional>
#include <string_view>
#include <vector>

namespace torch_delegate::detail {

/// Everything about one compiled method that errors need, kept by its handle.
struct method_info {
  std::string backend;
  std::string method;
  std::vector<std::string> argument_names;
  std::int64_t output_count = 1;
  const signature_record* signature = nullptr;
  std::shared_ptr<const method_debug_info> debug;  // never null once compiled
  std::vector<std::optional<tensor_spec>> input_specs;  // declared at lowering; empty: none
  std::int64_t max_replans = 0;  // other input shapes a call may re-plan it for (other_shapes::replan)
  bool runs_empty_tensors = false;  // the backend's runs_empty_tensors: else a call with an empty tensor is refused
  /// A region of a partially lowered method (its name says so, names::is_region_method): an
  /// argument that requires grad counts for the autograd check only when it is a leaf (the
  /// model's input, or a parameter passed in). A computed one may require grad only because
  /// TorchScript computed it from parameters, as plain inference outside no_grad does with a
  /// model that is not frozen; that must keep running.
  bool is_region = false;

  error_context where() const { return {backend, method}; }
};

/// The number of entries in execute's outputs list for a method returning `type`.
inline std::int64_t output_count_of(const c10::TypePtr& type) {
  if (auto tuple = type->cast<c10::TupleType>()) return static_cast<std::int64_t>(tuple->elements().size());
  return 1;
}

[[noreturn]] TORCH_DELEGATE_DECL void fail_argument_count(const method_info& method, std::size_t given);

/// Checks a call's arguments against the input specs declared when the method was lowered
/// (nothing to do when none were): a tensor of another dtype or shape is an error naming the
/// argument, what was declared and what was given, before the backend runs.
TORCH_DELEGATE_INTERNAL void check_input_specs(const method_info& method, const c10::IValue* args, std::size_t count);
/// Whether a call's arguments match the method's input specs (check_input_specs raises otherwise).
TORCH_DELEGATE_INTERNAL bool input_specs_match(const method_info& method, const c10::IValue* args, std::size_t count);
/// Whether the arguments that have input specs differ from them in sizes or layout alone (the same
/// dtypes and ranks): what a re-plan may serve; another dtype or rank is the input-spec error.
TORCH_DELEGATE_INTERNAL bool only_sizes_differ(const method_info& method, const c10::IValue* args, std::size_t count);

[[noreturn]] TORCH_DELEGATE_DECL void fail_argument_type(const method_info& method, std::size_t index, std::string_view expected,
                                            const c10::IValue& given);

[[noreturn]] TORCH_DELEGATE_DECL void fail_output_count(const method_info& method, std::size_t given);

/// What the checks before a call found that the checks after it need: the first argument that
/// wants a gradient (grad mode on and a tensor that requires grad), if any.
struct call_inspection {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::size_t gradient_argument = none;
  std::string gradient_tensor;  // that tensor's place, "argument 1 ('x')" or "argument 2 ('xs') element 3"
  bool wants_gradient() const { return gradient_argument != none; }
};

/// The checks of one argument before execute, whatever the route: a tensor with no elements for a
/// backend that does not run them (runs_empty_tensors) is an error naming the argument and the way
/// out (a library kernel given a null data pointer commonly asserts and ends the process: stopped
/// here, before the backend); a tensor that requires grad while grad mode is on is noted, for
/// check_output_history. Tensors inside lists and tuples count.
TORCH_DELEGATE_DECL void inspect_argument(const method_info& method, std::size_t index, const c10::IValue& value,
                                              call_inspection& inspection);
TORCH_DELEGATE_DECL void inspect_tensor_argument(const method_info& method, std::size_t index, const at::Tensor& tensor,
                                                     call_inspection& inspection);
/// inspect_argument for a typed execute's argument: tensors directly, other values boxed.
template <class T>
void inspect_typed_argument(const method_info& method, std::size_t index, const T& value, call_inspection& inspection) {
  using plain = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<plain, at::Tensor>) {
    inspect_tensor_argument(method, index, value, inspection);
  } else if constexpr (std::is_same_v<plain, c10::IValue>) {
    inspect_argument(method, index, value, inspection);
  } else if constexpr (!std::is_arithmetic_v<plain> && !std::is_same_v<plain, std::string> &&
                       requires { c10::IValue(value); }) {
    inspect_argument(method, index, c10::IValue(value), inspection);  // lists and tuples may hold tensors
  }
}

/// The message of a call that would drop a gradient, after the context: "autograd: <who> requires
/// grad and grad mode is on, but <what> comes back from backend '<backend>' without autograd
/// history (...)" and the ways out.
TORCH_DELEGATE_INTERNAL std::string dropped_gradient_message(std::string_view who, std::string_view what, std::string_view backend);

/// After execute, when an argument wants a gradient: a floating-point output without autograd
/// history (the backend ran outside autograd) is an error naming the method, the argument, the
/// output and the ways out, instead of a result whose backward() fails far away or silently
/// leaves the inputs without gradients. Outputs the backend computed with autograd (a backend
/// that runs ATen operators) pass.
TORCH_DELEGATE_DECL void check_output_history(const method_info& method, const call_inspection& inspection,
                                                  std::size_t output, const c10::IValue& value);

/// The exact text upstream LibTorch raises, kept so that code matching on it keeps working.
inline constexpr std::string_view backend_not_available = "Backend is not available.";

[[noreturn]] TORCH_DELEGATE_DECL void fail_not_available(const method_info* method, std::string_view backend);

/// Adds "while executing" context to an exception thrown by a backend's execute, without
/// losing its type when it is a c10::Error. An instruction_error becomes LibTorch's
/// c10::BackendRuntimeException carrying the instruction's debug handle, so that the lite
/// interpreter symbolicates it as it does for LibTorch's own backends; its text shows the
/// model's source for the instruction (what the full JIT prints).
[[noreturn]] TORCH_DELEGATE_DECL void rethrow_from_backend(const error_context& where, std::string_view stage,
                                              const method_debug_info* debug = nullptr);

/// The one place a backend's execute runs, whichever path called it (TorchScript operator,
/// TorchBind execute, typed C++ call): the method is current for record_instruction, and an
/// exception leaves with the backend and method named (raise_at's with the model's source).
template <class Execute>
decltype(auto) run_execute(const method_info& method, Execute&& execute) {
  try {
    running_method_scope running({method.backend, method.debug.get()});
    return std::forward<Execute>(execute)();
  } catch (...) {
    rethrow_from_backend(method.where(), "execute", method.debug.get());
  }
}

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/dispatch.ipp>
#endif
