// The non-template half of dispatch: signature records, matching a method's schema against
// them, and the errors a call can produce. Templates only fill in these records.
#pragma once

#include <torch_delegate/debug.hpp>
#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/backends/backend_exception.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate::detail {

struct method_info;

/// Runs one execute overload of one backend: converts `arguments`, calls it, converts the
/// result into the outputs list (one entry per top-level tuple element, else one entry).
using execute_trampoline = c10::impl::GenericList (*)(void* backend, void* handle, c10::ArrayRef<c10::IValue> arguments,
                                                      const method_info& method);

/// One execute signature, as constant data built from a C++ function type.
struct signature_record {
  std::string_view text;                         // "(Tensor, Tensor) -> Tensor", or "(*) -> *"
  std::span<const std::string_view> arguments;   // TorchScript type of each argument
  std::string_view result;                       // TorchScript type of the result
  bool generic = false;                          // execute(Handle&, inputs): any schema
  execute_trampoline call = nullptr;
};

inline constexpr std::string_view generic_signature_text = "(*) -> *";

/// Everything about one compiled method that errors need, kept by its handle.
struct method_info {
  std::string backend;
  std::string method;
  std::vector<std::string> argument_names;
  std::int64_t output_count = 1;
  const signature_record* signature = nullptr;
  std::shared_ptr<const method_debug_info> debug;  // never null once compiled

  error_context where() const { return {backend, method}; }
};

/// The number of entries in execute's outputs list for a method returning `type`.
inline std::int64_t output_count_of(const c10::TypePtr& type) {
  if (auto tuple = type->cast<c10::TupleType>()) return static_cast<std::int64_t>(tuple->elements().size());
  return 1;
}

inline std::string schema_without_self(const c10::FunctionSchema& schema) {
  std::string text = schema.name() + "(";
  const auto& arguments = schema.arguments();
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    if (i > 1) text += ", ";
    text += arguments[i].type()->annotation_str() + " " + arguments[i].name();
  }
  text += ") -> " + (schema.returns().empty() ? std::string("None") : schema.returns()[0].type()->annotation_str());
  return text;
}

inline bool signature_matches(const signature_record& signature, const c10::FunctionSchema& schema) {
  const auto& arguments = schema.arguments();
  if (arguments.size() != signature.arguments.size() + 1 || schema.returns().size() != 1) return false;
  for (std::size_t i = 0; i < signature.arguments.size(); ++i)
    if (arguments[i + 1].type()->annotation_str() != signature.arguments[i]) return false;
  return schema.returns()[0].type()->annotation_str() == signature.result;
}

/// Picks the execute signature for a method: the first typed overload whose argument and
/// result types equal the schema's, else the generic execute, else an error that lists the
/// method's schema and every signature the backend has.
inline const signature_record& select_signature(std::span<const signature_record> signatures,
                                                const c10::FunctionSchema& schema, const error_context& where) {
  for (const signature_record& signature : signatures)
    if (!signature.generic && signature_matches(signature, schema)) return signature;
  for (const signature_record& signature : signatures)
    if (signature.generic) return signature;
  std::string text = "no execute signature matches the method.\n  method:    " + schema_without_self(schema) +
                     "\n  available:";
  for (const signature_record& signature : signatures) text += "\n    execute" + std::string(signature.text);
  if (signatures.empty()) text += " (none)";
  text += "\nAdd an execute overload with these types, or a generic "
          "'std::vector<c10::IValue> execute(Handle&, torch_delegate::inputs)'.";
  fail(where, text);
}

/// Finds a compiled method's signature again by its text (it is stored in the payload).
inline const signature_record& find_signature(std::span<const signature_record> signatures, std::string_view text,
                                              const error_context& where) {
  for (const signature_record& signature : signatures)
    if (signature.text == text) return signature;
  std::string message = "the payload was preprocessed for execute" + std::string(text) +
                        ", which this build of the backend does not have; available:";
  for (const signature_record& signature : signatures) message += "\n    execute" + std::string(signature.text);
  fail(where, message);
}

[[noreturn]] inline void fail_argument_count(const method_info& method, std::size_t given) {
  fail(method.where(), "expected " + std::to_string(method.argument_names.size()) + " arguments, got " +
                           std::to_string(given));
}

[[noreturn]] inline void fail_argument_type(const method_info& method, std::size_t index, std::string_view expected,
                                            const c10::IValue& given) {
  std::string name = index < method.argument_names.size() ? method.argument_names[index] : "?";
  fail(method.where(), "argument " + std::to_string(index + 1) + " ('" + name + "') expects " +
                           std::string(expected) + ", got " + given.type()->annotation_str());
}

[[noreturn]] inline void fail_output_count(const method_info& method, std::size_t given) {
  fail(method.where(), "execute returned " + std::to_string(given) + " outputs, the method returns " +
                           std::to_string(method.output_count));
}

/// The exact text upstream LibTorch raises, kept so that code matching on it keeps working.
inline constexpr std::string_view backend_not_available = "Backend is not available.";

[[noreturn]] inline void fail_not_available(const method_info* method, std::string_view backend) {
  std::string text(backend_not_available);
  text += " (torch-delegate: backend '";
  text.append(backend);
  text += "' reports is_available() == false";
  if (method) text += " when running method '" + method->method + "'";
  text += ")";
  throw c10::Error(text, "");
}

/// Adds "while executing" context to an exception thrown by a backend's execute, without
/// losing its type when it is a c10::Error. An instruction_error becomes LibTorch's
/// c10::BackendRuntimeException carrying the instruction's debug handle, so that the lite
/// interpreter symbolicates it as it does for LibTorch's own backends; its text shows the
/// model's source for the instruction (what the full JIT prints).
[[noreturn]] inline void rethrow_from_backend(const error_context& where, std::string_view stage,
                                              const method_debug_info* debug = nullptr) {
  try {
    throw;
  } catch (const instruction_error& error) {
    const std::vector<std::int64_t> handles =
        debug ? debug->handles_of(error.instruction()) : std::vector<std::int64_t>{error.instruction()};
    // One handle: LibTorch reads the handles of this exception as a call stack, innermost first.
    throw c10::BackendRuntimeException(
        {"rethrow_from_backend", __FILE__, static_cast<std::uint32_t>(__LINE__)},
        describe(where) + ": in " + std::string(stage) + ": " + error.msg() + describe_instruction(debug, error.instruction()),
        handles.empty() ? -1 : handles.front());
  } catch (c10::BackendRuntimeException& error) {
    // Thrown with TORCH_DELEGATED_BACKEND_THROW: its first handle is a debug handle.
    std::string context = describe(where) + ": in " + std::string(stage);
    if (debug && !error.getDebugHandles().empty() && debug->locations.count(error.getDebugHandles().front()))
      context += describe_handle(*debug, error.getDebugHandles().front());
    error.add_context(std::move(context));
    throw;
  } catch (c10::Error& error) {
    error.add_context(describe(where) + ": in " + std::string(stage));
    throw;
  } catch (const std::exception& error) {
    fail(where, std::string(stage) + " threw: " + error.what());
  } catch (...) {
    fail(where, std::string(stage) + " threw a non-standard exception");
  }
}

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
