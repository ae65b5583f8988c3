// lowered_module<B>: a module lowered to B, as a runtime sees it (adopt, load, call typed).
// Needs only the backend's runtime half: a target binary that loads modules preprocessed
// elsewhere includes this and runtime.hpp, not lower.hpp.
#pragma once

#include <torch_delegate/runtime.hpp>

#include <torch/csrc/jit/api/module.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <cctype>
#include <memory>

namespace torch_delegate {

namespace detail {

[[noreturn]] inline void fail_not_lowered(std::string_view backend, const torch::jit::Module& module, const std::string& why) {
  fail({backend, {}}, "the module (" + module.type()->name()->qualifiedName() + ") is not a module lowered to this backend: " + why);
}

/// The lowered module inside a wrapper, checked to belong to `backend`.
inline torch::jit::Module lowered_part(std::string_view backend, const torch::jit::Module& wrapper) {
  auto lowered = wrapper.attr("__loweredModule__", c10::IValue());
  if (!lowered.isModule()) fail_not_lowered(backend, wrapper, "it has no __loweredModule__");
  torch::jit::Module module(lowered.toObject());
  auto backend_attribute = module.attr("__backend", c10::IValue());
  if (!backend_attribute.isObject() ||
      backend_attribute.toObjectRef().type()->name()->qualifiedName() != backend_class_name(backend))
    fail_not_lowered(backend, wrapper, "its __backend is " +
                                           (backend_attribute.isNone() ? std::string("missing") : backend_attribute.type()->repr_str()));
  return module;
}

}  // namespace detail

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
/// backend instance and the compiled handle alive; calls are as thread-safe as B::execute.
template <class B, class R, class... A>
class typed_method<B, R(A...)> {
  using signature = detail::typed_signature<B, R(A...)>;

 public:
  typed_method(const torch::jit::Module& lowered, const std::string& name)
      : backend_(lowered.attr("__backend").toCustomClass<detail::backend_object<B>>()) {
    const detail::error_context where{B::name, name};
    auto handles = lowered.attr("__handles").toGenericDict();
    auto found = handles.find(name);
    if (found == handles.end())
      detail::fail(where, "the lowered module has no such method; it has: " + method_list(handles));
    if (found->value().isNone()) detail::fail_not_available(nullptr, B::name);
    compiled_ = found->value().toCustomClass<detail::compiled_method<B>>();
    const detail::signature_record& compiled_signature = *compiled_->info.signature;
    direct_ = compiled_signature.text == signature::text.view();
    if (!direct_ && !compiled_signature.generic)
      detail::fail(where, "requested as " + std::string(signature::text.view()) + " but compiled for execute" +
                              std::string(compiled_signature.text));
    if (!direct_ && compiled_->info.argument_names.size() != sizeof...(A)) {
      detail::fail_argument_count(compiled_->info, sizeof...(A));
    }
  }

  template <class... Args>
  R operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(A), "torch-delegate: wrong number of arguments for this signature");
    B& backend = backend_->backend;
    if (!detail::backend_is_available(backend)) detail::fail_not_available(&compiled_->info, B::name);
    if constexpr (detail::signature_is_executable<B, R(A...)>::value) {
      if (direct_)
        return detail::run_execute(compiled_->info, [&]() -> R {
          return detail::call_execute<R, A...>(backend, compiled_->handle, std::forward<Args>(args)...);
        });
    }
    if constexpr (backend_executes_generically<B>) {
      const std::array<c10::IValue, sizeof...(A)> packed{detail::caster_of<A>::cast(A(std::forward<Args>(args)))...};
      c10::impl::GenericList outputs = compiled_->info.signature->call(&backend, &compiled_->handle, packed, compiled_->info);
      return unpack(outputs);
    } else {
      TORCH_INTERNAL_ASSERT(false, "unreachable: signature checked at construction");
    }
  }

 private:
  static std::string method_list(const c10::impl::GenericDict& handles) {
    std::string names;
    for (const auto& entry : handles) names += (names.empty() ? "" : ", ") + entry.key().toStringRef();
    return names;
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

  c10::intrusive_ptr<detail::backend_object<B>> backend_;
  c10::intrusive_ptr<detail::compiled_method<B>> compiled_;
  bool direct_ = false;
};

namespace detail {

/// The TorchScript code records of a saved module, read without loading it.
inline std::vector<std::string> saved_code(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& error) {
    throw c10::Error("torch-delegate: cannot read '" + path + "' as a saved TorchScript module: " +
                         error.what_without_backtrace(), "");
  }
  std::vector<std::string> code;
  for (const std::string& record : reader->getAllRecords()) {
    if (record.size() < 3 || record.compare(record.size() - 3, 3, ".py") != 0) continue;
    auto [data, size] = reader->getRecord(record);
    code.emplace_back(static_cast<const char*>(data.get()), size);
  }
  return code;
}

/// Every distinct identifier that follows `marker` in `code`.
inline void names_after(const std::string& code, const std::string& marker, std::vector<std::string>& names) {
  for (std::size_t at = code.find(marker); at != std::string::npos; at = code.find(marker, at + 1)) {
    std::size_t end = at + marker.size();
    while (end < code.size() && (std::isalnum(static_cast<unsigned char>(code[end])) || code[end] == '_')) ++end;
    std::string name = code.substr(at + marker.size(), end - at - marker.size());
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
}

/// Fails, naming the signature, when the saved code calls an operator of `backend` that this
/// process does not have: the backend's build no longer has that execute signature.
inline void check_operators(const std::string& path, const std::string& backend, const std::vector<std::string>& code) {
  std::vector<std::string> called;
  for (const std::string& text : code) names_after(text, "ops." + std::string(operator_namespace) + "." + operator_prefix(backend), called);
  for (const std::string& id : called) {
    const std::string name = std::string(operator_namespace) + "::" + operator_prefix(backend) + id;
    if (!torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name)).empty()) continue;
    const std::optional<std::string> signature = signature_of_identifier(id);
    std::string text = "incompatible payload: the module '" + path + "' was lowered for execute" +
                       signature.value_or("<" + id + ">") + ", which this build of the backend does not have; it has:";
    const std::string prefix = std::string(operator_namespace) + "::" + operator_prefix(backend);
    for (const auto& registered : torch::jit::getAllOperators()) {
      const std::string& other = registered->schema().name();
      if (other.rfind(prefix, 0) != 0) continue;
      if (auto known = signature_of_identifier(std::string_view(other).substr(prefix.size()))) text += "\n    execute" + *known;
    }
    text += "\nLower the model again with this build, or load it with a build whose execute signatures include it.";
    fail({backend, {}}, text);
  }
}

}  // namespace detail

/// The backends a saved module delegates to, read from its code without loading it.
inline std::vector<std::string> backends_needed(const std::string& path) {
  std::vector<std::string> names;
  for (const std::string& code : detail::saved_code(path))
    detail::names_after(code, "__torch__.torch.classes." + std::string(detail::backends_namespace) + ".", names);
  return names;
}

/// Loads a saved module after checking that every backend it delegates to is registered in this
/// process, and that each still has the execute signatures the module was lowered for: a missing
/// one is an error that names it (and says how to register a backend), instead of LibTorch's
/// "unknown type" or "unknown builtin op" error from deep inside the loader.
inline torch::jit::Module load(const std::string& path) {
  const std::vector<std::string> code = detail::saved_code(path);
  std::vector<std::string> backends;
  for (const std::string& text : code)
    detail::names_after(text, "__torch__.torch.classes." + std::string(detail::backends_namespace) + ".", backends);
  for (const std::string& backend : backends) {
    if (!torch::getCustomClass(detail::backend_class_name(backend)))
      detail::fail({backend, {}}, "the module '" + path + "' delegates to this backend, which is not registered in this "
                                  "process. Register it before loading: load its library (torch.ops.load_library in "
                                  "Python, dlopen, or link it with -Wl,--no-as-needed), or call "
                                  "torch_delegate::register_runtime<YourBackend>() / TORCH_DELEGATE_REGISTER_RUNTIME.");
    detail::check_operators(path, backend, code);
  }
  return torch::jit::load(path);
}

/// Loads a module lowered to B (registering B's runtime first) and adopts it.
template <class B>
lowered_module<B> load(const std::string& path) {
  register_runtime<B>();
  return lowered_module<B>(load(path));
}

}  // namespace torch_delegate
