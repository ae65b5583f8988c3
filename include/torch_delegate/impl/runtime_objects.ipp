// Definitions for detail/runtime_objects.hpp: the TorchBind classes and JIT operators of a
// backend, built from its backend_runtime without templates.
#pragma once

#include <torch_delegate/detail/runtime_objects.hpp>
#include <torch_delegate/detail/registry.hpp>
#include <torch_delegate/payload_format.hpp>

#include <ATen/core/builtin_function.h>
#include <ATen/core/jit_type.h>
#include <ATen/core/stack.h>
#include <c10/util/Type.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/custom_class_detail.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <typeindex>

namespace torch_delegate::detail {

[[noreturn]] inline void fail_copy(std::string_view backend) {
  fail({backend, {}}, "a lowered module cannot be deep-copied or cloned: its compiled handles belong to the "
                      "backend and are not copyable. Save and load it, or lower the original module again.");
}

TORCH_DELEGATE_DECL void fail_not_a_handle(const c10::IValue& value, const backend_runtime& runtime) {
  fail({runtime.name, {}}, "expected a compiled method of this backend (" + runtime.classes->handle->repr_str() +
                               ") as the handle, got " + value.type()->repr_str());
}

inline c10::IValue object_holding(const c10::ClassTypePtr& type, c10::intrusive_ptr<torch::CustomClassHolder> held) {
  auto object = c10::ivalue::Object::create(c10::StrongTypePtr(nullptr, type), /*numSlots=*/1);
  object->setSlot(0, c10::IValue::make_capsule(std::move(held)));
  return c10::IValue(std::move(object));
}

TORCH_DELEGATE_INTERNAL c10::IValue new_backend_object(const backend_runtime& runtime) {
  return object_holding(runtime.classes->backend, c10::make_intrusive<backend_instance>(runtime));
}

TORCH_DELEGATE_INTERNAL c10::intrusive_ptr<backend_instance> backend_instance_of(const c10::IValue& object,
                                                                             const backend_runtime& runtime) {
  if (!object.isObject() || object.toObjectRef().type() != runtime.classes->backend)
    fail({runtime.name, {}}, "expected this backend's object (" + runtime.classes->backend->repr_str() + "), got " +
                                 object.type()->repr_str());
  return c10::static_intrusive_pointer_cast<backend_instance>(object.toObjectRef().getSlot(0).toCapsule());
}

TORCH_DELEGATE_DECL void* handle_for_call(compiled_method& method, const c10::IValue* args, std::size_t count,
                                          std::shared_ptr<void>& keep) {
  if (input_specs_match(method.info, args, count)) return method.handle;
  // Re-planned for other sizes only: another dtype or rank is the input-spec error (raises).
  if (method.info.max_replans <= 0 || !only_sizes_differ(method.info, args, count)) check_input_specs(method.info, args, count);
  given_inputs given;
  for (std::size_t i = 0; i < count; ++i)
    given.push_back(args[i].isTensor() && args[i].toTensor().defined() ? std::optional(tensor_spec::like(args[i].toTensor()))
                                                                      : std::nullopt);
  const backend_runtime& runtime = *method.owner->runtime;
  std::lock_guard<std::mutex> lock(method.replans_mutex);
  for (auto entry = method.replans.begin(); entry != method.replans.end(); ++entry)
    if (entry->first == given) {
      method.replans.splice(method.replans.begin(), method.replans, entry);  // most recently used first
      keep = entry->second;
      return keep.get();
    }
  // Made under the lock: concurrent calls with the same new shape re-plan it once.
  void* made = nullptr;
  try {
    made = runtime.replan(method.owner->backend, method.handle, given);
  } catch (...) {
    rethrow_from_backend(method.info.where(), "replan", method.info.debug.get());
  }
  keep = std::shared_ptr<void>(made, runtime.destroy_handle);
  method.replans.emplace_front(std::move(given), keep);
  // The least recently used beyond the bound is dropped (a call still running on it keeps it).
  while (method.replans.size() > static_cast<std::size_t>(method.info.max_replans)) method.replans.pop_back();
  return made;
}

TORCH_DELEGATE_DECL c10::impl::GenericDict compile_all(const c10::intrusive_ptr<backend_instance>& owner,
                                                       const c10::IValue& processed, const c10::impl::GenericDict& spec,
                                                       bool honour_release) {
  const backend_runtime& runtime = *owner->runtime;
  c10::impl::GenericDict handles(c10::StringType::get(), c10::AnyType::get());
  // The named data, read once for every method; its tensors share storage with `processed`.
  const std::shared_ptr<named_data_map> named_data = read_named_data(processed, runtime.name);
  std::set<std::string> release_requests;
  for (const auto& entry : spec) {
    const std::string& method = entry.key().toStringRef();
    const error_context where{runtime.name, method};
    decoded_method decoded =
        read_processed(processed, runtime.name, method, {runtime.oldest_payload_version, runtime.payload_version});
    method_record& record = decoded.record;
    const signature_record& signature = find_signature(runtime.signatures, record.signature, where);
    // Re-planning needs the backend's replan: a module saved by a build of the backend that had
    // it and loaded by one without runs with the recorded shapes only.
    const std::int64_t max_replans = runtime.replan ? record.max_replans : 0;
    method_info info{std::string(runtime.name), method, std::move(record.argument_names), record.output_count,
                     &signature, std::move(record.debug), std::move(record.input_specs), max_replans,
                     runtime.runs_empty_tensors, names::is_region_method(method)};
    const compile_context context = compile_context_access::make(runtime.name, method, decoded.payload_version,
                                                                 named_data.get(), &release_requests,
                                                                 static_cast<std::size_t>(max_replans));
    std::unique_ptr<void, void (*)(void*) noexcept> handle(
        runtime.compile(owner->backend, record.payload, entry.value(), context), runtime.destroy_handle);
    auto compiled = c10::make_intrusive<compiled_method>(handle.get(), std::move(info), owner);
    handle.release();  // owned by `compiled` now
    handles.insert(method, object_holding(runtime.classes->handle, std::move(compiled)));
  }
  if (honour_release)
    for (const std::string& key : release_requests) {
      if (!named_data->contains(key)) continue;
      named_data->erase(key);
      release_named_data_in(processed, key);
    }
  return handles;
}

// -- registration ---------------------------------------------------------------------------------

inline c10::ClassTypePtr register_class(const std::string& namespace_name, const std::string& class_name) {
  auto type = c10::ClassType::create(c10::QualifiedName(names::torchbind_class(namespace_name, class_name)),
                                     std::weak_ptr<torch::jit::CompilationUnit>(), /*is_module=*/false);
  type->addAttribute("capsule", c10::CapsuleType::get());
  torch::registerCustomClass(type);
  return type;
}

/// A method of a TorchBind class. `self_type`: the schema's type of `self`, the class itself
/// unless LibTorch's interface declares it otherwise (Any, for its backend interface).
inline void add_method(const c10::ClassTypePtr& type, const std::string& name, std::vector<c10::Argument> arguments,
                       std::vector<c10::Argument> returns, std::function<void(torch::jit::Stack&)> body,
                       c10::TypePtr self_type = nullptr) {
  arguments.insert(arguments.begin(), c10::Argument("self", self_type ? std::move(self_type) : c10::TypePtr(type)));
  auto method = std::make_unique<torch::jit::BuiltinOpFunction>(
      c10::QualifiedName(type->name()->qualifiedName() + "." + name),
      c10::FunctionSchema(name, "", std::move(arguments), std::move(returns)), std::move(body));
  type->addMethod(method.get());
  torch::registerCustomClassMethod(std::move(method));
}

/// __getstate__/__setstate__ that refuse: deepcopy and clone of a lowered module must fail with
/// our message instead of copying a pointer to the backend's state.
inline void refuse_copies(const c10::ClassTypePtr& type, std::string_view backend) {
  add_method(type, "__getstate__", {}, {c10::Argument("state", c10::IntType::get())},
             [backend](torch::jit::Stack&) { fail_copy(backend); });
  add_method(type, "__setstate__", {c10::Argument("state", c10::IntType::get())}, {c10::Argument("", c10::NoneType::get())},
             [backend](torch::jit::Stack&) { fail_copy(backend); });
}

inline void register_torchbind_classes(const backend_runtime& runtime) {
  const std::string name(runtime.name);
  const backend_runtime* r = &runtime;
  runtime.classes->handle = register_class(std::string(names::handles_namespace), names::handle_class_basename(name));
  refuse_copies(runtime.classes->handle, runtime.name);

  const c10::ClassTypePtr type = runtime.classes->backend = register_class(std::string(names::backends_namespace), name);
  add_method(type, "__init__", {}, {c10::Argument("", c10::NoneType::get())}, [r](torch::jit::Stack& stack) {
    auto self = torch::jit::pop(stack).toObject();
    self->setSlot(0, c10::IValue::make_capsule(c10::make_intrusive<backend_instance>(*r)));
    stack.emplace_back();
  });
  // LibTorch's schemas for the three methods (self as Any, as its backend interface declares).
  auto any_dict = c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  auto any_list = c10::ListType::create(c10::AnyType::get());
  auto add_libtorch_method = [&](const std::string& method, std::vector<c10::Argument> arguments,
                                 std::vector<c10::Argument> returns, std::function<void(torch::jit::Stack&)> body) {
    add_method(type, method, std::move(arguments), std::move(returns), std::move(body), c10::AnyType::get());
  };
  add_libtorch_method("is_available", {}, {c10::Argument("available", c10::BoolType::get())},
                      [r](torch::jit::Stack& stack) {
                        auto self = backend_instance_of(torch::jit::pop(stack), *r);
                        torch::jit::push(stack, r->is_available(self->backend));
                      });
  add_libtorch_method("compile", {c10::Argument("processed", c10::AnyType::get()), c10::Argument("method_compile_spec", any_dict)},
                      {c10::Argument("handles", any_dict)}, [r](torch::jit::Stack& stack) {
                        auto spec = torch::jit::pop(stack).toGenericDict();
                        auto processed = torch::jit::pop(stack);
                        auto self = backend_instance_of(torch::jit::pop(stack), *r);
                        torch::jit::push(stack, compile_all(self, processed, spec, /*honour_release=*/true));
                      });
  // Called by a lowered module's __getstate__: a module whose named data was released after
  // compile cannot be saved (its payload no longer holds that data).
  add_libtorch_method(std::string(names::check_saveable_method), {c10::Argument("processed", c10::AnyType::get())},
                      {c10::Argument("", c10::NoneType::get())}, [r](torch::jit::Stack& stack) {
                        const c10::IValue processed = torch::jit::pop(stack);
                        torch::jit::drop(stack, 1);
                        const std::vector<std::string> released = released_named_data(processed);
                        torch::jit::push(stack, c10::IValue());
                        if (released.empty()) return;
                        std::string keys;
                        for (const std::string& key : released) keys += (keys.empty() ? "'" : ", '") + key + "'";
                        fail({r->name, {}}, "cannot save this lowered module: its backend released the named data " + keys +
                                                " after compile (compile_context::release_named_data), so its payload no "
                                                "longer holds it. Save the module that lowering returned, or the file it "
                                                "was loaded from.");
                      });
  // LibTorch's execute(handle, inputs) -> outputs, for code that calls it (LibTorch's own
  // generated modules, the generic path): the handle's signature record runs it.
  add_libtorch_method("execute", {c10::Argument("handle", c10::AnyType::get()), c10::Argument("input", any_list)},
                      {c10::Argument("output", any_list)}, [r](torch::jit::Stack& stack) {
                        c10::IValue arguments = torch::jit::pop(stack);
                        c10::IValue handle = torch::jit::pop(stack);
                        torch::jit::drop(stack, 1);  // self: the handle knows its backend instance
                        compiled_method& method = compiled_method_of(handle, *r);
                        torch::jit::push(stack, method.info.signature->call(method, arguments.toListRef()));
                      });
  refuse_copies(type, runtime.name);
}

inline void register_operators(const backend_runtime& runtime) {
  // Alias analysis CONSERVATIVE: a backend call has effects the JIT cannot see, so it must never
  // be deduplicated, reordered or removed as dead code.
  std::vector<c10::optional<torch::jit::Operator>> operators;
  auto add = [&](const std::string& name, const signature_record& signature) {
    operators.emplace_back(torch::jit::Operator(operator_schema(name, signature), torch::jit::Operation(signature.run_operator),
                                                c10::AliasAnalysisKind::CONSERVATIVE));
  };
  for (std::size_t i = 0; i < runtime.signatures.size(); ++i) {
    const signature_record& signature = runtime.signatures[i];
    if (signature.generic) continue;
    add(operator_name(runtime.name, signature.text), signature);
    add(legacy_operator_name(runtime.name, i), signature);
  }
  // RegisterOperators adds them to the process-wide registry in its constructor and holds no
  // state: the operators stay registered after it goes out of scope.
  if (!operators.empty()) torch::jit::RegisterOperators registered(std::move(operators));
}

inline bool is_identifier(const std::string& name) {
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

TORCH_DELEGATE_DECL void register_runtime(const backend_runtime& runtime, const std::type_info& type) {
  const std::string name(runtime.name);
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!claim_backend_name(name, std::type_index(type),
                          c10::demangle(type.name()), registration_part::runtime))
    return;
  try {
    if (!is_identifier(name))
      fail({name, {}}, "a backend name must be an identifier (letters, digits, '_'; not starting with a digit): "
                       "it names a TorchBind class and operators.");
    if (torch::getCustomClass(names::backend_class(name)))
      fail({name, {}}, "the name is already registered with LibTorch by a backend that is not this "
                       "torch-delegate type (torch::jit::backend<T> or another library).");
    register_operators(runtime);
    register_torchbind_classes(runtime);
  } catch (...) {
    release_backend_part(name, registration_part::runtime);
    throw;
  }
}

}  // namespace torch_delegate::detail
