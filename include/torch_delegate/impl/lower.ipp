// Definitions for lower.hpp: the TorchScript classes of a lowered module, built from a plan.
#pragma once

#include <torch_delegate/lower.hpp>

#include <torch/csrc/jit/backends/backend_debug_info.h>
#include <torch/csrc/jit/backends/backend_resolver.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <list>
#include <mutex>
#include <unordered_map>

namespace torch_delegate::detail {

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

/// Resolves what generated code names: `torch_delegate.<op>` to our operators, the rest as
/// LibTorch's own lowered modules do. (Saved code spells them ops.torch_delegate.<op>, which
/// every loader understands.)
struct generated_code_resolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::Resolver> fallback = torch::jit::loweredModuleResolver();
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                          const torch::jit::SourceRange& location) override {
    if (name == names::operator_namespace) return std::make_shared<torch::jit::BuiltinModule>(std::string(names::operator_namespace));
    return fallback->resolveValue(name, function, location);
  }
  c10::TypePtr resolveType(const std::string& name, const torch::jit::SourceRange& location) override {
    return fallback->resolveType(name, location);
  }
};

inline std::string debug_info_class_name() {
  return names::torchbind_class(torch::jit::kBackendUtilsNamespace, torch::jit::kBackendDebugInfoClass);
}

/// The TorchScript classes of a lowered module and its wrapper. Built once per plan key, then
/// shared by every module lowered with that shape: lowering a second module of the same shape
/// instantiates them instead of compiling TorchScript again.
struct lowered_module_types {
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  c10::ClassTypePtr lowered;
  c10::ClassTypePtr wrapper;
};

inline std::string lowered_types_key(const lowering_plan& plan, const torch::jit::Module& original) {
  std::string key = plan.backend + (plan.fallback_when_unavailable ? "|fallback|" : "|") + original.type()->name()->qualifiedName();
  for (const delegate_unit& unit : plan.units)
    key += "|" + unit.name + ":" + toString(unit.schema->cloneWithName("", "")) + "@" + unit.operator_name;
  return key;
}

inline lowered_module_types build_lowered_module_types(const lowering_plan& plan, const torch::jit::Module& original,
                                                       const c10::TypePtr& backend_type) {
  const std::string module_name = original.type()->name()->name();
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module lowered(std::string(names::lowered_module_class_prefix) + plan.backend + "." + module_name, unit, /*shouldMangle=*/true);
  lowered.register_attribute(std::string(names::processed_module), c10::AnyType::get(), c10::IValue());
  lowered.register_attribute(std::string(names::method_compile_spec), any_dict_type(), c10::IValue());
  lowered.register_attribute(std::string(names::backend_object), backend_type, c10::IValue());
  lowered.register_attribute(std::string(names::handles), any_dict_type(), c10::IValue());
  // LibTorch's exporters read __backend_debug_info (handle -> source range and call stack) to
  // save debug information with mobile modules; lite builds lack the class, then it is None.
  std::string debug_info_value = "None";  // what __setstate__ assigns to __backend_debug_info
  if (auto debug_info_type = torch::getCustomClass(debug_info_class_name())) {
    lowered.register_attribute(std::string(names::backend_debug_info), c10::OptionalType::create(debug_info_type), c10::IValue());
    debug_info_value = debug_info_class_name() + "()";
  } else {
    lowered.register_attribute(std::string(names::backend_debug_info), c10::NoneType::get(), c10::IValue());
  }

  torch::jit::Module wrapper(std::string(names::lowered_wrapper_class_prefix) + plan.backend + "." + module_name, unit, /*shouldMangle=*/true);
  wrapper.register_module(std::string(names::lowered_module), lowered);
  const auto resolver = std::make_shared<generated_code_resolver>();
  std::string lowered_source =
      lowered_module_common_source(names::backend_class(plan.backend), debug_info_value, plan.fallback_when_unavailable);
  std::string wrapper_source;
  if (plan.fallback_when_unavailable) {
    lowered_source += "\n" + availability_method_source(/*wrapper=*/false);
    wrapper_source = availability_method_source(/*wrapper=*/true);
  }
  for (const delegate_unit& unit : plan.units) {
    const error_context where = unit.where(plan.backend);
    lowered_source += "\n" + lowered_method_source(unit.name, *unit.schema, where, unit.operator_name);
    wrapper_source += (wrapper_source.empty() ? "" : "\n") + wrapper_method_source(unit.name, *unit.schema, where);
  }
  lowered.define(lowered_source, resolver);
  wrapper.define(wrapper_source, resolver);
  return {unit, lowered.type(), wrapper.type()};
}

/// The classes for a plan: from the cache, or built (outside the cache's lock: compiling
/// TorchScript takes milliseconds, and other threads' lookups must not wait for it).
inline lowered_module_types lowered_types_for(const lowering_plan& plan, const torch::jit::Module& original,
                                              const c10::TypePtr& backend_type) {
  using entry = std::pair<std::string, lowered_module_types>;
  static std::mutex mutex;
  static std::list<entry> recent;  // most recently used first
  static std::unordered_map<std::string, std::list<entry>::iterator> index;
  std::string key = lowered_types_key(plan, original);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = index.find(key); found != index.end()) {
      recent.splice(recent.begin(), recent, found->second);
      return found->second->second;
    }
  }
  lowered_module_types built = build_lowered_module_types(plan, original, backend_type);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = index.find(key); found != index.end()) return found->second->second;  // another thread was first
  recent.emplace_front(key, std::move(built));
  index.emplace(std::move(key), recent.begin());
  if (recent.size() > lowered_types_cache_capacity) {
    index.erase(recent.back().first);
    recent.pop_back();
  }
  return recent.front().second;
}

inline torch::jit::Module assemble_lowered_module(const lowering_plan& plan, const torch::jit::Module& original,
                                                               const c10::IValue& processed, c10::IValue backend_object,
                                                               bool available,
                                                               torch::jit::BackendDebugInfoMapType debug_info) {
  const lowered_module_types types = lowered_types_for(plan, original, backend_object.type());
  const c10::impl::GenericDict spec = plan.spec();
  torch::jit::Module lowered(types.unit, types.lowered);
  lowered.setattr(std::string(names::processed_module), processed);
  lowered.setattr(std::string(names::method_compile_spec), spec);
  lowered.setattr(std::string(names::backend_object), backend_object);
  if (torch::getCustomClass(debug_info_class_name())) {
    auto recorded = c10::make_intrusive<torch::jit::PyTorchBackendDebugInfo>();
    recorded->setDebugInfoMap(std::move(debug_info));
    lowered.setattr(std::string(names::backend_debug_info), c10::IValue(std::move(recorded)));
  }
  if (available) {
    // What __setstate__ does on load, called directly: errors stay c10::Errors without an
    // interpreter traceback of generated code.
    auto instance = c10::static_intrusive_pointer_cast<backend_instance>(backend_object.toObjectRef().getSlot(0).toCapsule());
    lowered.setattr(std::string(names::handles), compile_all(instance, processed, spec, /*honour_release=*/false));
  } else {
    TORCH_WARN(unavailable_warning(plan.backend));
    c10::impl::GenericDict placeholders(c10::StringType::get(), c10::AnyType::get());
    // None handles: calling one is LibTorch's "Backend is not available."; with fallback, no
    // handles at all, which td_is_available() reads as "run the original".
    if (!plan.fallback_when_unavailable)
      for (const delegate_unit& unit : plan.units) placeholders.insert(unit.name, c10::IValue());
    lowered.setattr(std::string(names::handles), placeholders);
  }
  torch::jit::Module wrapper(types.unit, types.wrapper);
  wrapper.setattr(std::string(names::lowered_module), lowered._ivalue());
  return wrapper;
}

inline torch::jit::Module lower_planned(const lowering_plan& plan, const torch::jit::Module& module,
                                                     std::int64_t payload_version, preprocess_trampoline preprocess,
                                                     const backend_runtime& runtime) {
  // No clone: preprocess sees the module as const and works on copies of its graphs, so the
  // original is untouched (tested) and a second lowering costs no module copy.
  torch::jit::BackendDebugInfoRecorder recorder;
  c10::IValue processed = preprocess_units(plan, payload_version, preprocess, module,
                                           [&](const std::shared_ptr<torch::jit::Graph>& graph) {
                                             return assign_debug_handles(recorder, graph);
                                           });
  c10::IValue backend = new_backend_object(runtime);
  const bool available = runtime.is_available(backend_instance_of(backend, runtime)->backend);
  return assemble_lowered_module(plan, module, processed, std::move(backend), available, recorder.stopRecording());
}

TORCH_DELEGATE_DECL torch::jit::Module lower_methods(const backend_lowering& lowering, const torch::jit::Module& module,
                                                     const c10::impl::GenericDict& method_compile_spec,
                                                     bool fallback_when_unavailable, const input_specs* inputs,
                                                     std::int64_t max_replans) {
  lowering_plan plan = plan_request(lowering, module, method_compile_spec, fallback_when_unavailable, inputs);
  plan.max_replans = max_replans;
  return lower_planned(plan, module, lowering.payload_version(), lowering.preprocess, *lowering.runtime);
}

}  // namespace torch_delegate::detail
