// The objects a lowered module holds at run time, and how LibTorch reaches them. Not a template:
// a backend is known here by its backend_runtime, a few function pointers filled in by
// detail/invoker.hpp. Registration with LibTorch (TorchBind classes, JIT operators) and
// compile are built from it in non-template code (impl/runtime_objects.ipp), compiled once in the
// opt-in library.
//
//   __backend                 TorchBind class __torch__.torch.classes.__backends__.<name>: one
//                             backend_instance (the backend object B) per lowered module
//   __handles[unit]           TorchBind class __torch__.torch.classes.__torch_delegate__.<name>__compiled_method:
//                             one compiled_method (B's handle, method_info, its backend_instance)
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/dispatch.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/signature.hpp>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <typeinfo>

namespace torch_delegate::detail {


/// The TorchBind class types of one backend, set when its runtime is registered.
struct runtime_classes {
  c10::ClassTypePtr backend;  // __backends__.<name>
  c10::ClassTypePtr handle;   // __torch_delegate__.<name>__compiled_method
};

/// What the non-template runtime knows of a backend B (detail/invoker.hpp: runtime_of<B>).
struct backend_runtime {
  std::string_view name;
  std::int64_t payload_version = 1;
  std::int64_t oldest_payload_version = 1;
  std::span<const signature_record> signatures;  // typed overloads first, the generic execute last
  runtime_classes* classes = nullptr;
  void* (*create)() = nullptr;                    // new B
  void (*destroy)(void* backend) noexcept = nullptr;
  bool (*is_available)(void* backend) = nullptr;
  /// Checks the payload's type, decodes the options, calls B::compile; returns a new handle.
  void* (*compile)(void* backend, const c10::IValue& payload, const c10::IValue& options,
                   const compile_context& context) = nullptr;
  void (*destroy_handle)(void* handle) noexcept = nullptr;
  /// B::replan (nullptr when B has none): a new handle for the given inputs' specs.
  void* (*replan)(void* backend, void* handle, const given_inputs& given) = nullptr;
  /// B::runs_empty_tensors (default false): whether execute may be given a tensor with no elements.
  bool runs_empty_tensors = false;
};

/// The object behind `__backend`: one backend instance per lowered module.
struct backend_instance : torch::CustomClassHolder {
  explicit backend_instance(const backend_runtime& r) : runtime(&r), backend(r.create()) {}
  ~backend_instance() override { runtime->destroy(backend); }
  backend_instance(const backend_instance&) = delete;
  backend_instance& operator=(const backend_instance&) = delete;

  const backend_runtime* runtime;
  void* backend;  // a B
};

/// The object behind `__handles[unit]`: the backend's compiled handle plus what calls and errors
/// need. It keeps the backend instance that compiled it alive.
struct compiled_method : torch::CustomClassHolder {
  compiled_method(void* h, method_info i, c10::intrusive_ptr<backend_instance> o)
      : handle(h), info(std::move(i)), owner(std::move(o)) {}
  ~compiled_method() override { owner->runtime->destroy_handle(handle); }
  compiled_method(const compiled_method&) = delete;
  compiled_method& operator=(const compiled_method&) = delete;

  void* handle;  // a handle_t<B>
  method_info info;
  c10::intrusive_ptr<backend_instance> owner;
  /// Handles re-planned for other input shapes (other_shapes::replan), most recently used first,
  /// at most info.max_replans of them. Shared: a call keeps its handle alive while it runs.
  std::mutex replans_mutex;
  std::list<std::pair<given_inputs, std::shared_ptr<void>>> replans;
};

/// The handle a call with these arguments runs on: the compiled one when they match the
/// method's input specs (or it has none); else, for a method that may be re-planned, the one
/// B::replan made for their specs (made now, or kept from an earlier call: `keep` holds it for
/// the call); else the input-spec error.
TORCH_DELEGATE_DECL void* handle_for_call(compiled_method& method, const c10::IValue* args, std::size_t count,
                                          std::shared_ptr<void>& keep);
template <class... Args>
void* handle_for_typed_call(compiled_method& method, std::shared_ptr<void>& keep, const Args&... args) {
  // Specs are declared for Tensor arguments only (checked when lowering): others are boxed as None.
  auto tensor_or_none = [](const auto& value) -> c10::IValue {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(value)>, at::Tensor>) return value;
    else return {};
  };
  const c10::IValue boxed[] = {tensor_or_none(args)..., c10::IValue()};
  return handle_for_call(method, boxed, sizeof...(Args), keep);
}

[[noreturn]] TORCH_DELEGATE_DECL void fail_not_a_handle(const c10::IValue& value, const backend_runtime& runtime);

/// The compiled method a handle value holds. The `None`-handle policy, in one place: a module
/// lowered where the backend was unavailable has None handles, and calling one is LibTorch's
/// "Backend is not available." error.
inline compiled_method& compiled_method_of(const c10::IValue& handle, const backend_runtime& runtime) {
  if (handle.isNone()) fail_not_available(nullptr, runtime.name);
  if (!handle.isObject() || handle.toObjectRef().type() != runtime.classes->handle) fail_not_a_handle(handle, runtime);
  const c10::IValue& capsule = handle.toObjectRef().getSlot(0);
  return *static_cast<compiled_method*>(static_cast<c10::intrusive_ptr_target*>(const_cast<void*>(capsule.internalToPointer())));
}

/// A new `__backend` object: a TorchBind object holding a fresh backend instance.
TORCH_DELEGATE_INTERNAL c10::IValue new_backend_object(const backend_runtime& runtime);

/// The backend instance inside a `__backend` object of this backend; an error for anything else.
TORCH_DELEGATE_INTERNAL c10::intrusive_ptr<backend_instance> backend_instance_of(const c10::IValue& object,
                                                                             const backend_runtime& runtime);

/// LibTorch's compile(processed, method_compile_spec) -> {unit: handle}: reads each unit's record
/// from the processed payload (payload_format.hpp) and compiles it with the owner's backend,
/// every unit seeing the module's named data. `honour_release` (loading, not lowering): drop the
/// named data the backend asked to release once every unit is compiled.
TORCH_DELEGATE_DECL c10::impl::GenericDict compile_all(const c10::intrusive_ptr<backend_instance>& owner,
                                                       const c10::IValue& processed, const c10::impl::GenericDict& spec,
                                                       bool honour_release);

/// Registers a backend's runtime with LibTorch: its TorchBind classes (is_available, compile,
/// execute in LibTorch's schemas) and one JIT operator per typed execute signature (plus the
/// positional names older saved modules use). Checks the name; idempotent per backend type;
/// another type with the same name is an error naming both.
TORCH_DELEGATE_DECL void register_runtime(const backend_runtime& runtime, const std::type_info& type);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/runtime_objects.ipp>
#endif
