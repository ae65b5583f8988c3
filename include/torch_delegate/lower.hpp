// lower<B>(module, options): turn a scripted module's methods into a module that delegates them
// to backend B, in the structure LibTorch's own to_backend produces; and the typed C++ call path.
#pragma once

#include <torch_delegate/detail/codegen.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/backends/backend_debug_handler.h>
#include <torch/csrc/jit/backends/backend_debug_info.h>
#include <torch/csrc/jit/backends/backend_resolver.h>
#include <torch/csrc/jit/serialization/import.h>

#include <map>

namespace torch_delegate {

/// Typed options per method to lower: {{"forward", {...}}, {"accum", {...}}}.
template <class B>
using method_options = std::map<std::string, options_t<B>>;

namespace detail {

inline torch::jit::NodeToDebugHandle assign_debug_handles(torch::jit::BackendDebugInfoRecorder& recorder,
                                                          const std::shared_ptr<torch::jit::Graph>& graph) {
  torch::jit::NodeToDebugHandle handles;
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : block->nodes()) {
      handles[node] = recorder.getNextDebugHandle(node);
      for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
    }
  }
  return handles;
}

inline c10::DictTypePtr any_dict_type() {
  static const c10::DictTypePtr type = c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  return type;
}

inline std::string unavailable_warning(std::string_view backend) {
  return "Backend [" + std::string(backend) +
         "] is not available. Execution of this Module is still possible by saving and loading on a device where "
         "the backend is available.";
}

/// Compiles every method of a preprocessed module with the backend behind `backend_object`.
using compile_function = c10::impl::GenericDict (*)(const c10::IValue& backend_object, const c10::IValue& processed,
                                                    const c10::impl::GenericDict& spec);

/// Builds LoweredModule + LoweredWrapper around a preprocessed module. Not a template: the
/// backend is known here only by its name, its TorchBind object and its compile function.
inline torch::jit::Module assemble_lowered_module(std::string_view backend, const torch::jit::Module& original,
                                                  const c10::impl::GenericDict& spec, const c10::IValue& processed,
                                                  c10::IValue backend_object, bool available, compile_function compile,
                                                  torch::jit::BackendDebugInfoMapType debug_info) {
  const std::string backend_name(backend);
  const std::string module_name = original.type()->name()->name();
  torch::jit::Module lowered("torch.jit.LoweredModule." + backend_name + "." + module_name,
                             std::make_shared<torch::jit::CompilationUnit>(), /*shouldMangle=*/true);
  lowered.register_attribute("__processed_module", c10::AnyType::get(), processed);
  lowered.register_attribute("__method_compile_spec", any_dict_type(), spec);
  lowered.register_attribute("__backend", backend_object.type(), backend_object);
  lowered.register_attribute("__handles", any_dict_type(), c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  // LibTorch's exporters read __backend_debug_info (handle -> source range and call stack) to
  // save debug information with mobile modules; lite builds lack the class, then it is None.
  const std::string debug_info_class = "__torch__.torch.classes." + std::string(torch::jit::kBackendUtilsNamespace) + "." +
                                       std::string(torch::jit::kBackendDebugInfoClass);
  std::string create_debug_info = "def __create_backend_debug_info(self):\n    self.__backend_debug_info = None\n";
  if (auto debug_info_type = torch::getCustomClass(debug_info_class)) {
    auto recorded = c10::make_intrusive<torch::jit::PyTorchBackendDebugInfo>();
    recorded->setDebugInfoMap(std::move(debug_info));
    lowered.register_attribute("__backend_debug_info", c10::OptionalType::create(debug_info_type), c10::IValue(recorded));
    create_debug_info = "def __create_backend_debug_info(self):\n    self.__backend_debug_info = " + debug_info_class + "()\n";
  } else {
    lowered.register_attribute("__backend_debug_info", c10::NoneType::get(), c10::IValue());
  }

  torch::jit::Module wrapper("torch.jit.LoweredWrapper." + backend_name + "." + module_name,
                             std::make_shared<torch::jit::CompilationUnit>(), /*shouldMangle=*/true);
  const auto resolver = torch::jit::loweredModuleResolver();
  std::string lowered_source = lowered_module_common_source(backend_class_name(backend)) + "\n" + create_debug_info;
  std::string wrapper_source;
  for (const auto& entry : spec) {
    const std::string& name = entry.key().toStringRef();
    const error_context where{backend, name};
    const c10::FunctionSchema& schema = schema_of(original, name, where);
    lowered_source += "\n" + lowered_method_source(name, schema, where);
    wrapper_source += (wrapper_source.empty() ? "" : "\n") + wrapper_method_source(name, schema, where);
  }
  lowered.define(lowered_source, resolver);

  if (available) {
    // What __setstate__ does on load, called directly: errors stay c10::Errors without an
    // interpreter traceback of generated code.
    lowered.setattr("__handles", compile(backend_object, processed, spec));
  } else {
    TORCH_WARN(unavailable_warning(backend));
    c10::impl::GenericDict placeholders(c10::StringType::get(), c10::AnyType::get());
    for (const auto& entry : spec) placeholders.insert(entry.key(), c10::IValue());
    lowered.setattr("__handles", placeholders);
  }
  wrapper.register_module("__loweredModule__", lowered);
  wrapper.define(wrapper_source, resolver);
  return wrapper;
}

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
    if (!backend.is_available()) detail::fail_not_available(&compiled_->info, B::name);
    if constexpr (detail::signature_is_executable<B, R(A...)>::value) {
      if (direct_) return backend.execute(compiled_->handle, std::forward<Args>(args)...);
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
    const detail::method_info& info = compiled_->info;
    if constexpr (requires { std::tuple_size<R>::value; }) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return R(check_output<std::tuple_element_t<I, R>>(outputs.get(I), I)...);
      }(std::make_index_sequence<std::tuple_size_v<R>>{});
    } else {
      return check_output<R>(outputs.get(0), 0);
    }
    (void)info;
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

/// Lowers `module`'s methods to B with an untyped method_compile_spec, exactly LibTorch's
/// format: {"forward": {"key": value, ...}, ...}. The original module is not modified.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const c10::impl::GenericDict& method_compile_spec) {
  register_backend<B>();
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& entry : method_compile_spec) {
    if (!entry.key().isString())
      detail::fail({B::name, {}}, "method_compile_spec keys must be method names (str), got " +
                                      entry.key().type()->annotation_str());
    const detail::error_context where{B::name, entry.key().toStringRef()};
    detail::schema_of(module, entry.key().toStringRef(), where);
    decode_options<options_t<B>>(entry.value(), where);  // report option errors before any work
    spec.insert(entry.key(), entry.value());
  }
  if (spec.empty()) detail::fail({B::name, {}}, "no method to lower: the method_compile_spec is empty");

  torch::jit::Module cloned = module.clone();
  torch::jit::BackendDebugInfoRecorder recorder;
  c10::IValue processed = detail::preprocess_for_libtorch<B>(
      cloned, spec, [&](const std::shared_ptr<torch::jit::Graph>& graph) { return detail::assign_debug_handles(recorder, graph); });
  auto backend = c10::make_intrusive<detail::backend_object<B>>();
  const bool available = detail::backend_is_available(backend->backend);
  auto compile = [](const c10::IValue& object, const c10::IValue& processed, const c10::impl::GenericDict& spec) {
    return detail::compile_all(object.toCustomClass<detail::backend_object<B>>()->backend, processed, spec);
  };
  return lowered_module<B>(detail::assemble_lowered_module(B::name, cloned, spec, processed,
                                                           c10::IValue(std::move(backend)), available, compile,
                                                           recorder.stopRecording()));
}

/// Lowers `module`'s methods to B with typed options per method (default: "forward" with
/// default options). The original module is not modified.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const method_options<B>& options = {{"forward", {}}}) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, method_options] : options) spec.insert(method, encode_options(method_options));
  return lower<B>(module, spec);
}

/// Loads a module lowered to B (registering B's runtime first) and adopts it.
template <class B>
lowered_module<B> load(const std::string& path) {
  register_runtime<B>();
  return lowered_module<B>(torch::jit::load(path));
}

}  // namespace torch_delegate
