// lowered_module<B>: a module lowered to B, as a runtime sees it (adopt, call typed). Needs only
// the backend's runtime half: a binary that loads modules preprocessed elsewhere includes this
// (and load.hpp to load them), not lower.hpp.
#pragma once

#include <torch_delegate/detail/invoker.hpp>

#include <torch/csrc/jit/api/module.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

namespace torch_delegate {

namespace detail {

[[noreturn]] inline void fail_not_lowered(std::string_view backend, const torch::jit::Module& module, const std::string& why) {
  fail({backend, {}}, "the module (" + module.type()->name()->qualifiedName() + ") is not a module lowered to this backend: " + why);
}

/// The lowered module inside a wrapper, checked to belong to `backend`.
inline torch::jit::Module lowered_part(std::string_view backend, const torch::jit::Module& wrapper) {
  auto lowered = wrapper.attr(std::string(names::lowered_module), c10::IValue());
  if (!lowered.isModule()) fail_not_lowered(backend, wrapper, "it has no " + std::string(names::lowered_module));
  torch::jit::Module module(lowered.toObject());
  auto backend_attribute = module.attr(std::string(names::backend_object), c10::IValue());
  if (!backend_attribute.isObject() ||
      backend_attribute.toObjectRef().type()->name()->qualifiedName() != names::backend_class(backend))
    fail_not_lowered(backend, wrapper, "its " + std::string(names::backend_object) + " is " +
                                           (backend_attribute.isNone() ? std::string("missing") : backend_attribute.type()->repr_str()));
  return module;
}

}  // namespace detail

/// Calls `visit(method, handle)` with B's compiled handle (what B::compile returned) of each method
/// lowered to B in `module` or any of its submodules: a module lowered whole, or each region of a
/// partial lowering (a region is a method of a lowered child), and the handles re-planned for other
/// input shapes. For a backend's debug queries (the onednn backend lists the kernels its plans
/// chose). Handles are shared with running calls: read them as a call would (B's own locking).
template <class B, class Visit>
void for_each_compiled(const torch::jit::Module& module, Visit&& visit) {
  const std::string backend_class = detail::names::backend_class(B::name);
  for (const torch::jit::Module& part : module.modules()) {
    if (!part.hasattr(std::string(detail::names::backend_object)) || !part.hasattr(std::string(detail::names::handles))) continue;
    const c10::IValue backend = part.attr(std::string(detail::names::backend_object));
    if (!backend.isObject() || backend.toObjectRef().type()->name()->qualifiedName() != backend_class) continue;
    const c10::IValue handles = part.attr(std::string(detail::names::handles));
    if (!handles.isGenericDict()) continue;
    for (const auto& entry : handles.toGenericDict()) {
      if (entry.value().isNone()) continue;  // lowered where B was unavailable: nothing compiled
      detail::compiled_method& method = detail::compiled_method_of(entry.value(), detail::runtime_of<B>::value);
      const std::string& name = entry.key().toStringRef();
      visit(name, static_cast<const handle_t<B>&>(*static_cast<handle_t<B>*>(method.handle)));
      std::vector<std::shared_ptr<void>> replanned;
      {
        std::lock_guard<std::mutex> lock(method.replans_mutex);
        for (const auto& [given, handle] : method.replans) replanned.push_back(handle);
      }
      for (const auto& handle : replanned) visit(name, static_cast<const handle_t<B>&>(*static_cast<handle_t<B>*>(handle.get())));
    }
  }
}

template <class B, class Signature>
class typed_method;

/// A module lowered to backend B: a real torch::jit::Module (save it, load it, call it through
/// TorchScript) plus typed C++ access to its methods.
template <class B>
class lowered_module {
 public:
  /// Adopts a module lowered to B (e.g. one just loaded); throws if it is not one.
  explicit lowered_module(torch::jit::Module module) : module_(std::move(module)) {
    detail::lowered_part(B::name, module_);
  }

  /// The wrapper module: `torch.jit.LoweredWrapper.<backend>.<original>`.
  const torch::jit::Module& module() const { return module_; }
  torch::jit::Module& module() { return module_; }

  /// Calls "forward" through the TorchScript interpreter, like module().forward(inputs).
  c10::IValue forward(std::vector<c10::IValue> inputs) { return module_.forward(std::move(inputs)); }

  /// A typed C++ entry to a lowered method that calls the backend's execute directly, e.g.
  /// `lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward")`.
  template <class Signature>
  typed_method<B, Signature> method(const std::string& name) const {
    return typed_method<B, Signature>(detail::lowered_part(B::name, module_), name);
  }

  void save(const std::string& path) const { module_.save(path); }

 private:
  torch::jit::Module module_;
};

/// A lowered method called from C++ without the TorchScript interpreter. It keeps the
/// compiled method (and the backend instance that compiled it) alive; calls are as thread-safe
/// as B::execute. A direct call runs the signature's invoker with the C++ arguments as given;
/// on a method compiled for the generic execute, the arguments are boxed and the outputs
/// checked against R.
template <class B, class R, class... A>
class typed_method<B, R(A...)> {
  using invoker = detail::invoker<B, R(A...)>;

 public:
  typed_method(const torch::jit::Module& lowered, const std::string& name) {
    const detail::error_context where{B::name, name};
    auto handles = lowered.attr(std::string(detail::names::handles)).toGenericDict();
    auto found = handles.find(name);
    if (found == handles.end())
      detail::fail(where, "the lowered module has no such method; it has: " + method_list(handles));
    compiled_ = c10::intrusive_ptr<detail::compiled_method>::unsafe_reclaim_from_nonowning(
        &detail::compiled_method_of(found->value(), detail::runtime_of<B>::value));
    const detail::signature_record& compiled_signature = *compiled_->info.signature;
    direct_ = compiled_signature.text == invoker::text.view();
    if (!direct_ && !compiled_signature.generic)
      detail::fail(where, "requested as " + std::string(invoker::text.view()) + " but compiled for execute" +
                              std::string(compiled_signature.text));
    if (!direct_ && compiled_->info.argument_names.size() != sizeof...(A)) {
      detail::fail_argument_count(compiled_->info, sizeof...(A));
    }
  }

  template <class... Args>
  R operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(A), "torch-delegate: wrong number of arguments for this signature");
    if constexpr (detail::signature_is_executable<B, R(A...)>::value) {
      if (direct_) return invoker::invoke(*compiled_, std::forward<Args>(args)...);
    }
    if constexpr (backend_executes_generically<B>) {
      const std::array<c10::IValue, sizeof...(A)> packed{detail::caster_of<A>::cast(A(std::forward<Args>(args)))...};
      return unpack(compiled_->info.signature->call(*compiled_, packed));
    } else {
      TORCH_INTERNAL_ASSERT(false, "unreachable: signature checked at construction");
    }
  }

 private:
  static std::string method_list(const c10::impl::GenericDict& handles) {
    return detail::comma_separated(handles, [](const auto& entry) { return entry.key().toStringRef(); });
  }

  R unpack(const c10::impl::GenericList& outputs) const {
    if constexpr (requires { std::tuple_size<R>::value; }) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return R(check_output<std::tuple_element_t<I, R>>(outputs.get(I), I)...);
      }(std::make_index_sequence<std::tuple_size_v<R>>{});
    } else {
      return check_output<R>(outputs.get(0), 0);
    }
  }

  template <class T>
  T check_output(const c10::IValue& value, std::size_t index) const {
    if (!detail::caster_of<T>::check(value))
      detail::fail(compiled_->info.where(), "output " + std::to_string(index) + " expects " +
                                                std::string(detail::caster_of<T>::name.view()) + ", got " +
                                                value.type()->annotation_str());
    return T(detail::caster_of<T>::load(value));
  }

  c10::intrusive_ptr<detail::compiled_method> compiled_;
  bool direct_ = false;
};

}  // namespace torch_delegate
