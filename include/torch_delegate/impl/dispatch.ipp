// Definitions for detail/dispatch.hpp.
#pragma once

#include <torch_delegate/detail/dispatch.hpp>

#include <torch/csrc/jit/backends/backend_exception.h>

namespace torch_delegate::detail {

[[noreturn]] TORCH_DELEGATE_DECL void fail_argument_count(const method_info& method, std::size_t given) {
  fail(method.where(), "expected " + std::to_string(method.argument_names.size()) + " arguments, got " +
                           std::to_string(given));
}

[[noreturn]] TORCH_DELEGATE_DECL void fail_argument_type(const method_info& method, std::size_t index, std::string_view expected,
                                            const c10::IValue& given) {
  std::string name = index < method.argument_names.size() ? method.argument_names[index] : "?";
  fail(method.where(), "argument " + std::to_string(index + 1) + " ('" + name + "') expects " +
                           std::string(expected) + ", got " + given.type()->annotation_str());
}

TORCH_DELEGATE_INTERNAL bool input_specs_match(const method_info& method, const c10::IValue* args, std::size_t count) {
  for (std::size_t i = 0; i < count && i < method.input_specs.size(); ++i) {
    const std::optional<tensor_spec>& spec = method.input_specs[i];
    if (spec && !(args[i].isTensor() && spec->matches(args[i].toTensor()))) return false;
  }
  return true;
}

TORCH_DELEGATE_INTERNAL void check_input_specs(const method_info& method, const c10::IValue* args, std::size_t count) {
  for (std::size_t i = 0; i < count && i < method.input_specs.size(); ++i) {
    const std::optional<tensor_spec>& spec = method.input_specs[i];
    if (!spec || (args[i].isTensor() && spec->matches(args[i].toTensor()))) continue;
    std::string given = args[i].type()->annotation_str();
    if (args[i].isTensor() && args[i].toTensor().defined()) {
      const at::Tensor& tensor = args[i].toTensor();
      given = tensor_spec::describe(tensor.scalar_type(), tensor.sizes());
      if (spec->is_static() && !tensor.is_contiguous()) given += " not contiguous";
    }
    const std::string name = i < method.argument_names.size() ? method.argument_names[i] : "?";
    fail(method.where(), "argument " + std::to_string(i + 1) + " ('" + name + "') must be " + spec->to_string() +
                             " (its input spec when the method was lowered; -1: any size), got " + given);
  }
}

[[noreturn]] TORCH_DELEGATE_DECL void fail_output_count(const method_info& method, std::size_t given) {
  fail(method.where(), "execute returned " + std::to_string(given) + " outputs, the method returns " +
                           std::to_string(method.output_count));
}

[[noreturn]] TORCH_DELEGATE_DECL void fail_not_available(const method_info* method, std::string_view backend) {
  std::string text(backend_not_available);
  text += " (torch-delegate: backend '";
  text.append(backend);
  text += "' reports is_available() == false";
  if (method) text += " when running method '" + method->method + "'";
  text += ")";
  throw c10::Error(text, "");
}

[[noreturn]] TORCH_DELEGATE_DECL void rethrow_from_backend(const error_context& where, std::string_view stage,
                                              const method_debug_info* debug) {
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

}  // namespace torch_delegate::detail
