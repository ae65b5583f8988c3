// lower<B>(module, options): turn a scripted module's methods into a module that delegates them
// to backend B, in the structure LibTorch's own to_backend produces; and the typed C++ call path.
#pragma once

#include <torch_delegate/detail/codegen.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/backends/backend_debug_handler.h>
#include <torch/csrc/jit/backends/backend_debug_info.h>
#include <torch/csrc/jit/backends/backend_resolver.h>

#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

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

/// Resolves what generated code names: `torch_delegate.<op>` to our operators, the rest as
/// LibTorch's own lowered modules do. (Saved code spells them ops.torch_delegate.<op>, which
/// every loader understands.)
struct generated_code_resolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::Resolver> fallback = torch::jit::loweredModuleResolver();
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                          const torch::jit::SourceRange& location) override {
    if (name == "torch_delegate") return std::make_shared<torch::jit::BuiltinModule>("torch_delegate");
    return fallback->resolveValue(name, function, location);
  }
  c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange& location) override {
    return fallback->resolveType(name, location);
  }
};

inline std::string debug_info_class_name() {
  return "__torch__.torch.classes." + std::string(torch::jit::kBackendUtilsNamespace) + "." +
         std::string(torch::jit::kBackendDebugInfoClass);
}

/// The TorchScript classes of a lowered module and its wrapper. Built once per backend, module
/// class and method schemas, then shared by every module lowered with that shape: lowering a
/// second module of the same shape instantiates them instead of compiling TorchScript again.
struct lowered_module_types {
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  c10::ClassTypePtr lowered;
  c10::ClassTypePtr wrapper;
};

/// The typed operator each lowered method calls, in spec order ("" for the generic path).
using method_operators = std::vector<std::string>;

inline std::string lowered_types_key(std::string_view backend, const torch::jit::Module& original,
                                     const c10::impl::GenericDict& spec, const method_operators& operators) {
  std::string key(backend);
  key += "|" + original.type()->name()->qualifiedName();
  std::size_t i = 0;
  for (const auto& entry : spec) {
    const std::string& name = entry.key().toStringRef();
    key += "|" + name + ":" + toString(schema_of(original, name, {backend, name}).cloneWithName("", "")) + "@" +
           operators.at(i++);
  }
  return key;
}

inline lowered_module_types build_lowered_module_types(std::string_view backend, const torch::jit::Module& original,
                                                       const c10::impl::GenericDict& spec, const c10::TypePtr& backend_type,
                                                       const method_operators& operators) {
  const std::string backend_name(backend);
  const std::string module_name = original.type()->name()->name();
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module lowered("torch.jit.LoweredModule." + backend_name + "." + module_name, unit, /*shouldMangle=*/true);
  lowered.register_attribute("__processed_module", c10::AnyType::get(), c10::IValue());
  lowered.register_attribute("__method_compile_spec", any_dict_type(), c10::IValue());
  lowered.register_attribute("__backend", backend_type, c10::IValue());
  lowered.register_attribute("__handles", any_dict_type(), c10::IValue());
  // LibTorch's exporters read __backend_debug_info (handle -> source range and call stack) to
  // save debug information with mobile modules; lite builds lack the class, then it is None.
  std::string debug_info_value = "None";  // what __setstate__ assigns to __backend_debug_info
  if (auto debug_info_type = torch::getCustomClass(debug_info_class_name())) {
    lowered.register_attribute("__backend_debug_info", c10::OptionalType::create(debug_info_type), c10::IValue());
    debug_info_value = debug_info_class_name() + "()";
  } else {
    lowered.register_attribute("__backend_debug_info", c10::NoneType::get(), c10::IValue());
  }

  torch::jit::Module wrapper("torch.jit.LoweredWrapper." + backend_name + "." + module_name, unit, /*shouldMangle=*/true);
  wrapper.register_module("__loweredModule__", lowered);
  const auto resolver = std::make_shared<generated_code_resolver>();
  std::string lowered_source = lowered_module_common_source(backend_class_name(backend), debug_info_value);
  std::string wrapper_source;
  std::size_t i = 0;
  for (const auto& entry : spec) {
    const std::string& name = entry.key().toStringRef();
    const error_context where{backend, name};
    const c10::FunctionSchema& schema = schema_of(original, name, where);
    const std::string& operator_name = operators.at(i++);
    lowered_source += "\n" + lowered_method_source(name, schema, where, operator_name);
    wrapper_source += (wrapper_source.empty() ? "" : "\n") + wrapper_method_source(name, schema, where);
  }
  lowered.define(lowered_source, resolver);
  wrapper.define(wrapper_source, resolver);
  return {unit, lowered.type(), wrapper.type()};
}

/// How many generated class pairs lowering keeps for reuse, most recently used first. A process
/// that lowers many distinct module classes does not grow without bound; a lowered module keeps
/// its own classes alive, so eviction never affects a module that exists.
inline constexpr std::size_t lowered_types_cache_capacity = 64;

inline lowered_module_types lowered_types_for(std::string_view backend, const torch::jit::Module& original,
                                              const c10::impl::GenericDict& spec, const c10::TypePtr& backend_type,
                                              const method_operators& operators) {
  using entry = std::pair<std::string, lowered_module_types>;
  static std::mutex mutex;
  static std::list<entry> recent;  // most recently used first
  static std::unordered_map<std::string, std::list<entry>::iterator> index;
  std::string key = lowered_types_key(backend, original, spec, operators);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = index.find(key); found != index.end()) {
    recent.splice(recent.begin(), recent, found->second);
    return found->second->second;
  }
  recent.emplace_front(key, build_lowered_module_types(backend, original, spec, backend_type, operators));
  index.emplace(std::move(key), recent.begin());
  if (recent.size() > lowered_types_cache_capacity) {
    index.erase(recent.back().first);
    recent.pop_back();
  }
  return recent.front().second;
}

/// Builds LoweredModule + LoweredWrapper around a preprocessed module. Not a template: the
/// backend is known here only by its name, its TorchBind object and its compile function.
inline torch::jit::Module assemble_lowered_module(std::string_view backend, const torch::jit::Module& original,
                                                  const c10::impl::GenericDict& spec, const c10::IValue& processed,
                                                  c10::IValue backend_object, bool available, compile_function compile,
                                                  torch::jit::BackendDebugInfoMapType debug_info,
                                                  const method_operators& operators) {
  const lowered_module_types types = lowered_types_for(backend, original, spec, backend_object.type(), operators);
  torch::jit::Module lowered(types.unit, types.lowered);
  lowered.setattr("__processed_module", processed);
  lowered.setattr("__method_compile_spec", spec);
  lowered.setattr("__backend", backend_object);
  if (torch::getCustomClass(debug_info_class_name())) {
    auto recorded = c10::make_intrusive<torch::jit::PyTorchBackendDebugInfo>();
    recorded->setDebugInfoMap(std::move(debug_info));
    lowered.setattr("__backend_debug_info", c10::IValue(std::move(recorded)));
  }
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
  torch::jit::Module wrapper(types.unit, types.wrapper);
  wrapper.setattr("__loweredModule__", lowered._ivalue());
  return wrapper;
}

}  // namespace detail

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
    detail::decode_backend_options<B>(entry.value(), where);  // report option errors before any work
    spec.insert(entry.key(), entry.value());
  }
  if (spec.empty()) detail::fail({B::name, {}}, "no method to lower: the method_compile_spec is empty");

  // No clone: preprocess sees the module as const and works on copies of its graphs, so the
  // original is untouched (tested) and a second lowering costs no module copy.
  torch::jit::BackendDebugInfoRecorder recorder;
  c10::IValue processed = detail::preprocess_for_libtorch<B>(
      module, spec, [&](const std::shared_ptr<torch::jit::Graph>& graph) { return detail::assign_debug_handles(recorder, graph); });
  auto backend = c10::make_intrusive<detail::backend_object<B>>();
  const bool available = detail::backend_is_available(backend->backend);
  auto compile = [](const c10::IValue& object, const c10::IValue& processed, const c10::impl::GenericDict& spec) {
    return detail::compile_all(object.toCustomClass<detail::backend_object<B>>(), processed, spec);
  };
  // Each method calls the operator of the signature preprocess selected for it.
  detail::method_operators operators;
  for (const auto& entry : spec) {
    const detail::error_context where{B::name, entry.key().toStringRef()};
    const auto& signature = detail::select_signature(detail::signature_records<B>, detail::schema_of(module, entry.key().toStringRef(), where), where);
    operators.push_back(signature.generic ? std::string() : detail::operator_name(B::name, signature.text));
  }
  return lowered_module<B>(detail::assemble_lowered_module(B::name, module, spec, processed,
                                                           c10::IValue(std::move(backend)), available, compile,
                                                           recorder.stopRecording(), operators));
}

/// Lowers `module`'s methods to B with typed options per method (default: "forward" with
/// default options). The original module is not modified.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const method_options<B>& options = {{"forward", {}}}) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, method_options] : options) spec.insert(method, encode_options(method_options));
  return lower<B>(module, spec);
}

}  // namespace torch_delegate
