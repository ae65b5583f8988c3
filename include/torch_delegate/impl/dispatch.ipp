// Definitions for detail/dispatch.hpp.
#pragma once

#include <torch_delegate/detail/dispatch.hpp>

#include <torch/csrc/jit/backends/backend_exception.h>

#include <ATen/core/grad_mode.h>

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

TORCH_DELEGATE_INTERNAL bool only_sizes_differ(const method_info& method, const c10::IValue* args, std::size_t count) {
  for (std::size_t i = 0; i < count && i < method.input_specs.size(); ++i) {
    const std::optional<tensor_spec>& spec = method.input_specs[i];
    if (!spec) continue;
    if (!args[i].isTensor() || !args[i].toTensor().defined()) return false;
    const at::Tensor& tensor = args[i].toTensor();
    if (tensor.scalar_type() != spec->dtype || static_cast<std::size_t>(tensor.dim()) != spec->sizes.size()) return false;
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
                             " (its input spec when the method was lowered; -1: any size), got " + given +
                             (method.is_region ? std::string(". To serve other shapes, lower with on_other_shapes=\"torchscript\" or "
                                                             "\"replan\" (C++: other_shapes::torchscript, other_shapes::replan)")
                                               : std::string()));
  }
}

/// "argument 1 ('x')"
inline std::string argument_place(const method_info& method, std::size_t index) {
  const std::string name = index < method.argument_names.size() ? method.argument_names[index] : "?";
  return "argument " + std::to_string(index + 1) + " ('" + name + "')";
}

inline void inspect_tensor(const method_info& method, const at::Tensor& tensor, const std::string& place,
                           call_inspection& inspection, std::size_t index) {
  if (!tensor.defined()) return;
  if (!method.runs_empty_tensors && tensor.numel() == 0)
    fail(method.where(), place + " is empty (" + tensor_spec::describe(tensor.scalar_type(), tensor.sizes()) +
                             "): backend '" + method.backend +
                             "' does not run tensors with no elements. Skip empty inputs before the call, or lower "
                             "with fallback_when_unavailable=True or on_other_shapes=\"torchscript\" (C++: "
                             "partition_options::fallback_when_unavailable, other_shapes::torchscript) so that "
                             "TorchScript runs them");
  if (!inspection.wants_gradient() && tensor.requires_grad() && (!method.is_region || tensor.is_leaf()) &&
      at::GradMode::is_enabled()) {
    inspection.gradient_argument = index;
    inspection.gradient_tensor = place;
  }
}

inline void inspect_value(const method_info& method, const c10::IValue& value, const std::string& place,
                          call_inspection& inspection, std::size_t index) {
  if (value.isTensor()) {
    inspect_tensor(method, value.toTensor(), place, inspection, index);
  } else if (value.isTensorList()) {
    const c10::List<at::Tensor> tensors = value.toTensorList();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      inspect_tensor(method, tensors.get(i), place + " element " + std::to_string(i), inspection, index);
  } else if (value.isList()) {
    const auto& elements = value.toListRef();
    for (std::size_t i = 0; i < elements.size(); ++i)
      inspect_value(method, elements[i], place + " element " + std::to_string(i), inspection, index);
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    for (std::size_t i = 0; i < elements.size(); ++i)
      inspect_value(method, elements[i], place + " element " + std::to_string(i), inspection, index);
  }
}

TORCH_DELEGATE_DECL void inspect_tensor_argument(const method_info& method, std::size_t index, const at::Tensor& tensor,
                                                     call_inspection& inspection) {
  // The common case costs two tests: a non-empty tensor that does not require grad.
  if (!tensor.defined() || (tensor.numel() != 0 && !tensor.requires_grad())) return;
  inspect_tensor(method, tensor, argument_place(method, index), inspection, index);
}

TORCH_DELEGATE_DECL void inspect_argument(const method_info& method, std::size_t index, const c10::IValue& value,
                                              call_inspection& inspection) {
  if (value.isTensor()) return inspect_tensor_argument(method, index, value.toTensor(), inspection);
  if (value.isTensorList() || value.isList() || value.isTuple())
    inspect_value(method, value, argument_place(method, index), inspection, index);
}

/// The first floating-point tensor in `value` that has no autograd history, by its place.
inline std::optional<std::string> detached_tensor(const c10::IValue& value, const std::string& place) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (tensor.defined() && (tensor.is_floating_point() || tensor.is_complex()) && !tensor.requires_grad()) return place;
    return std::nullopt;
  }
  if (value.isList()) {
    const auto& elements = value.toListRef();
    for (std::size_t i = 0; i < elements.size(); ++i)
      if (auto found = detached_tensor(elements[i], place + " element " + std::to_string(i))) return found;
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    for (std::size_t i = 0; i < elements.size(); ++i)
      if (auto found = detached_tensor(elements[i], place + " element " + std::to_string(i))) return found;
  }
  return std::nullopt;
}

TORCH_DELEGATE_INTERNAL std::string dropped_gradient_message(std::string_view who, std::string_view what, std::string_view backend) {
  return "autograd: " + std::string(who) + " requires grad and grad mode is on, but " + std::string(what) +
         " comes back from backend '" + std::string(backend) +
         "' without autograd history (the backend runs outside autograd): its gradient would be silently lost. Call the "
         "model under torch.no_grad() or torch.inference_mode() (C++: torch::NoGradGuard or c10::InferenceMode), or lower "
         "it with fallback_when_unavailable=True or on_other_shapes=\"torchscript\" so that such calls run in TorchScript";
}

TORCH_DELEGATE_DECL void check_output_history(const method_info& method, const call_inspection& inspection,
                                                  std::size_t output, const c10::IValue& value) {
  const std::optional<std::string> detached = detached_tensor(value, "output " + std::to_string(output + 1));
  if (!detached) return;
  fail(method.where(), dropped_gradient_message(inspection.gradient_tensor, *detached, method.backend));
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
