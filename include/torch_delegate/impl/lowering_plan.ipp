// Definitions for detail/lowering_plan.hpp.
#pragma once

#include <torch_delegate/detail/lowering_plan.hpp>

#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/shape_analysis.h>

namespace torch_delegate {

namespace detail {

inline std::string method_names(const torch::jit::Module& module) {
  const std::string names = comma_separated(module.get_methods(), [](const auto& method) { return method.name(); });
  return names.empty() ? std::string("(none)") : names;
}

TORCH_DELEGATE_INTERNAL const c10::FunctionSchema& schema_of(const torch::jit::Module& module, const std::string& method,
                                            const error_context& where) {
  auto found = module.find_method(method);
  if (!found)
    fail(where, "the module (" + module.type()->name()->qualifiedName() + ") has no method '" + method +
                    "' to lower; its methods are: " + method_names(module));
  return found->function().getSchema();
}

TORCH_DELEGATE_DECL std::shared_ptr<torch::jit::Graph> inlined_graph(const torch::jit::Module& module, const std::string& method) {
  auto graph = torch::jit::toGraphFunction(module.get_method(method).function()).graph()->copy();
  torch::jit::Inline(*graph);
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

TORCH_DELEGATE_INTERNAL c10::impl::GenericDict lowering_plan::spec() const {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const delegate_unit& unit : units) spec.insert(unit.name, unit.spec);
  return spec;
}

TORCH_DELEGATE_INTERNAL lowering_plan plan_lowering(std::string_view backend, std::span<const signature_record> signatures,
                                                const torch::jit::Module& module,
                                                const c10::Dict<c10::IValue, c10::IValue>& method_compile_spec) {
  lowering_plan plan{std::string(backend), {}};
  for (const auto& entry : method_compile_spec) {
    if (!entry.key().isString())
      fail({backend, {}}, "method_compile_spec keys must be method names (str), got " +
                              entry.key().type()->annotation_str());
    const std::string& name = entry.key().toStringRef();
    const error_context where{backend, name};
    const c10::FunctionSchema& schema = schema_of(module, name, where);
    const signature_record& signature = select_signature(signatures, schema, where);
    plan.units.push_back({name, &schema, entry.value(), &signature,
                          signature.generic ? std::string() : operator_name(backend, signature.text), nullptr, {}});
  }
  return plan;
}

TORCH_DELEGATE_INTERNAL void apply_input_specs(lowering_plan& plan, const input_specs& inputs) {
  for (const auto& entry : inputs) {
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& method = entry.first;
    const std::vector<std::optional<tensor_spec>>& specs = entry.second;
    auto unit = std::find_if(plan.units.begin(), plan.units.end(), [&](const delegate_unit& u) { return u.name == method; });
    if (unit == plan.units.end())
      fail({plan.backend, method}, "input specs given for a method that is not being lowered");
    const auto& arguments = unit->schema->arguments();
    if (specs.size() + 1 != arguments.size())
      fail({plan.backend, method}, "input specs: expected one entry per argument (" + std::to_string(arguments.size() - 1) +
                                       "), got " + std::to_string(specs.size()));
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (!specs[i]) continue;
      const c10::Argument& argument = arguments[i + 1];
      if (!argument.type()->isSubtypeOf(*c10::TensorType::get()))
        fail({plan.backend, method}, "input specs: argument " + std::to_string(i + 1) + " ('" + argument.name() +
                                         "') is " + argument.type()->annotation_str() +
                                         ", not a Tensor: give std::nullopt for it");
      for (std::int64_t size : specs[i]->sizes)
        if (size < -1)
          fail({plan.backend, method}, "input specs: argument " + std::to_string(i + 1) + " ('" + argument.name() +
                                           "') has size " + std::to_string(size) + "; sizes are >= 0, or -1 for any");
    }
    unit->inputs = specs;
  }
}

/// The unit's graph inputs typed as declared, and the types TorchScript's shape analysis
/// derives from them, so that preprocess sees dtypes and shapes.
inline void type_graph_inputs(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<std::optional<tensor_spec>>& specs) {
  bool complete = true;
  for (std::size_t i = 0; i < specs.size() && i + 1 < graph->inputs().size(); ++i) {
    if (!specs[i]) continue;
    if (specs[i]->is_static()) {
      // Every size known: a complete type (contiguous, which the call is checked for).
      const bool channels_last = specs[i]->memory_format == c10::MemoryFormat::ChannelsLast && specs[i]->sizes.size() == 4;
      const std::vector<std::int64_t> strides =
          channels_last ? c10::get_channels_last_strides_2d(specs[i]->sizes) : c10::IntArrayRef(c10::contiguous_strides(specs[i]->sizes)).vec();
      graph->inputs()[i + 1]->setType(c10::TensorType::create(specs[i]->dtype, at::kCPU, at::IntArrayRef(specs[i]->sizes),
                                                             at::IntArrayRef(strides), false));
      continue;
    }
    complete = false;
    std::vector<c10::optional<std::int64_t>> sizes;
    for (std::int64_t size : specs[i]->sizes) sizes.push_back(size < 0 ? c10::nullopt : c10::optional<std::int64_t>(size));
    graph->inputs()[i + 1]->setType(c10::TensorType::create(specs[i]->dtype, at::kCPU, c10::SymbolicShape(sizes),
                                                           c10::VaryingShape<c10::Stride>(sizes.size()),
                                                           /*requires_grad=*/false));
  }
  // A region whose types were recorded from example inputs (partition_options::example_inputs)
  // has every value typed already: shape analysis, which does not know every op, would only
  // lose some of them.
  const bool typed = std::any_of(graph->nodes().begin(), graph->nodes().end(), [](const torch::jit::Node* node) {
    return std::any_of(node->outputs().begin(), node->outputs().end(), [](const torch::jit::Value* value) {
      const auto tensor = value->type()->cast<c10::TensorType>();
      return tensor && tensor->isComplete();
    });
  });
  if (complete && !typed) {
    try {
      torch::jit::PropagateInputShapes(graph);
    } catch (const std::exception&) {
      // Shape analysis does not know every op: the inputs keep their declared types.
    }
  }
}

TORCH_DELEGATE_DECL c10::IValue preprocess_units(const lowering_plan& plan, std::int64_t payload_version,
                                                 preprocess_trampoline preprocess, const torch::jit::Module& module,
                                                 const torch::jit::BackendDebugHandleGenerator& generate_debug_handles) {
  // Every unit's view first (a preprocess_all sees them all at once): its graph, the debug
  // handle of each node, and where each node comes from, read now because preprocess may run
  // passes on the graph in place and free nodes.
  std::vector<method_to_lower> views;
  std::vector<method_debug_info> debug(plan.units.size());
  views.reserve(plan.units.size());
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    const delegate_unit& unit = plan.units[i];
    auto graph = inlined_graph(module, unit.name);
    if (!unit.inputs.empty()) type_graph_inputs(graph, unit.inputs);
    torch::jit::NodeToDebugHandle handles_of_nodes = generate_debug_handles(graph);
    for (const auto& [node, handle] : handles_of_nodes) debug[i].locations.emplace(handle, locate(node));
    views.emplace_back(module, plan.backend, unit.name, graph, std::move(handles_of_nodes), *unit.schema);
  }
  erased_preprocess_batch batch = preprocess(views, plan);

  // Named data: one copy per key for the whole lowered module.
  named_data_store named_data;
  std::map<std::string, std::string> owners;
  merge_named_data(plan.backend, named_data, owners, batch.shared, "preprocess_all");
  c10::impl::GenericDict units(c10::StringType::get(), c10::AnyType::get());
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    const delegate_unit& unit = plan.units[i];
    erased_preprocess_result& preprocessed = batch.units[i];
    merge_named_data(plan.backend, named_data, owners, preprocessed.named_data, unit.name);
    const c10::FunctionSchema& schema = *unit.schema;
    debug[i].instruction_handles = std::move(preprocessed.instruction_handles);
    method_record record;
    record.signature = std::string(unit.signature->text);
    for (std::size_t a = 1; a < schema.arguments().size(); ++a) record.argument_names.push_back(schema.arguments()[a].name());
    record.output_count = output_count_of(schema.returns()[0].type());
    record.payload = std::move(preprocessed.payload);
    record.input_specs = unit.inputs;
    if (!unit.inputs.empty()) record.max_replans = plan.max_replans;
    record.debug = std::make_shared<method_debug_info>(std::move(debug[i]));
    units.insert(unit.name, encode_method_record(record));
  }
  return encode_processed(plan.backend, payload_version, std::move(units), named_data);
}

}  // namespace detail

}  // namespace torch_delegate
