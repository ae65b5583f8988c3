// Definitions for detail/partition_rewrite.hpp: the regions lowered, the methods rewritten to call
// them, with the guards that keep a region's TorchScript path where a call needs it.
#pragma once

#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/partition_extract.hpp>
#include <torch_delegate/detail/partition_layouts.hpp>
#include <torch_delegate/detail/shape_folding.hpp>
#include <torch_delegate/detail/shape_ranges.hpp>
#include <torch_delegate/impl/shape_folding.ipp>  // inputs_match, the guard both build on
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/shape_analysis.h>

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace torch_delegate::detail {

// -- guards: what a call asks before it runs a region on its backend ----------------------------

// Whether the method was called with grad mode on and a tensor argument that requires grad:
// inserted once at its entry (nullptr: it takes no tensor). The method's own arguments, not its
// regions' inputs: those may require grad only because TorchScript computed them from
// parameters, which inference outside no_grad does (a non-frozen model).
inline torch::jit::Value* method_wants_gradient(torch::jit::Graph& graph) {
  torch::jit::Value* any = nullptr;
  torch::jit::WithInsertPoint at_entry(graph.block()->nodes().front());
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) {
    torch::jit::Value* argument = graph.inputs()[i];
    if (!argument->type()->isSubtypeOf(*c10::TensorType::get())) continue;
    torch::jit::Value* requires_grad = graph.insert(c10::prim::requires_grad, {argument});
    any = any ? graph.insert(c10::aten::__or__, {any, requires_grad}) : requires_grad;
  }
  if (!any) return nullptr;
  return graph.insert(c10::aten::__and__, {graph.insert(c10::Symbol::fromQualString("aten::is_grad_enabled"), {}), any});
}

// Where a region keeps its TorchScript path: whether a call may run on its backend as far as
// autograd and empty tensors go: not when the method wants a gradient (its backend's outputs
// would have no autograd history), and, for a backend that does not run empty tensors
// (runs_empty_tensors), not with an input of no elements. nullptr: nothing to ask.
inline torch::jit::Value* backend_can_run(torch::jit::Graph& graph, const std::vector<torch::jit::Value*>& inputs,
                                          bool runs_empty_tensors, torch::jit::Value* wants_gradient) {
  torch::jit::Value* can_run = wants_gradient ? graph.insert(c10::aten::__not__, {wants_gradient}) : nullptr;
  if (runs_empty_tensors) return can_run;
  for (torch::jit::Value* input : inputs) {
    if (!input->type()->isSubtypeOf(*c10::TensorType::get())) continue;
    torch::jit::Value* has_elements = graph.insert(
        c10::aten::gt, {graph.insert(c10::Symbol::fromQualString("aten::numel"), {input}), graph.insertConstant(static_cast<std::int64_t>(0))});
    can_run = can_run ? graph.insert(c10::aten::__and__, {can_run, has_elements}) : has_elements;
  }
  return can_run;
}

// -- lowering and rewriting -----------------------------------------------------------------------

// `schema` with each unannotated argument's inferred `Tensor` as an explicit `Tensor`: the same
// type, but LibTorch 1.13 checks a call's Tensor arguments cheaply only against the explicit one
// (FunctionSchema::checkArg's fast path compares with TensorType::get()); against the inferred
// one it builds a complete TensorType of every argument on every call, ~1 µs for two.
inline c10::FunctionSchema with_explicit_tensor_types(const c10::FunctionSchema& schema) {
  std::vector<c10::Argument> arguments;
  for (const c10::Argument& argument : schema.arguments()) {
    const auto tensor = argument.type()->cast<c10::TensorType>();
    arguments.push_back(tensor && tensor->isInferredType() ? argument.cloneWithType(c10::TensorType::get()) : argument);
  }
  return schema.cloneWithArguments(std::move(arguments));
}

TORCH_DELEGATE_INTERNAL torch::jit::Module lower_regions(const backend_lowering& lowering, const torch::jit::Module& regions,
                                                         const std::map<std::string, std::string>& method_of_region,
                                                         const c10::impl::GenericDict& spec_by_method,
                                                         bool fallback_when_unavailable, const input_specs& recorded,
                                                         std::int64_t max_replans) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& region : regions.get_methods()) {
    const auto given = spec_by_method.find(method_of_region.at(region.name()));
    spec.insert(region.name(), given == spec_by_method.end() ? lowering.default_spec() : given->value());
  }
  return lower_methods(lowering, regions, spec, fallback_when_unavailable, recorded.empty() ? nullptr : &recorded,
                       max_replans);
}

// Rewrites `p`'s method of `result` to call its regions, each on the delegate child of its
// backend (attributes[k]); with fallback or on_other_shapes = torchscript, each call in an if whose
// else branch keeps the region's own nodes. `recorded_all`: every region's input specs.
inline void rewrite_method(torch::jit::Module& result, const partitioned_method& p, const backend_list& backends,
                           const std::vector<std::string>& attributes, const partition_options& options,
                           const input_specs& recorded_all) {
  const std::string& method = p.method;
  const std::shared_ptr<torch::jit::Graph>& graph = p.graph;
  const std::vector<region>& regions = p.regions;
  const method_delegation& entry = p.entry;
  if (regions.empty()) return;
  // With fallback, the method asks once, on entry, whether each backend its regions go to
  // can run them.
  std::vector<torch::jit::Value*> available(backends.size(), nullptr);
  if (options.fallback_when_unavailable)
    for (std::size_t k : std::set<std::size_t>(p.backend_of.begin(), p.backend_of.end())) {
      torch::jit::WithInsertPoint at_entry(graph->block()->nodes().front());
      torch::jit::Value* delegate = graph->insertGetAttr(graph->inputs()[0], attributes[k]);
      torch::jit::Node* ask = graph->insertNode(graph->create(c10::prim::CallMethod, {delegate}, 1));
      ask->s_(c10::attr::name, std::string(names::is_available_method));
      ask->output()->setType(c10::BoolType::get());
      available[k] = ask->output();
    }
  // Autograd, decided on the method's own arguments (method_wants_gradient), asked at entry
  // once the first region that keeps its TorchScript path needs it.
  torch::jit::Value* wants_gradient = nullptr;
  bool asked_for_gradient = false;

  // Each region's nodes replaced by a call of its method on the child. A region's input may be
  // an output of an earlier region, replaced (and destroyed) by then: `replaced` maps it.
  std::unordered_map<torch::jit::Value*, torch::jit::Value*> replaced;
  std::unordered_set<const torch::jit::Node*> choices;  // each region's call or its own nodes: the same values
  auto replace = [&](torch::jit::Value* old_value, torch::jit::Value* new_value) {
    old_value->replaceAllUsesWith(new_value);
    replaced[old_value] = new_value;
  };
  // A region's inputs as they are now: an earlier region's output replaced by what replaced it.
  auto current_inputs = [&](const region& formed) {
    std::vector<torch::jit::Value*> inputs;
    for (torch::jit::Value* input : formed.inputs) {
      auto found = replaced.find(input);
      inputs.push_back(found == replaced.end() ? input : found->second);
    }
    return inputs;
  };
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const region& formed = regions[i];
    for (torch::jit::Node* read : formed.hoisted) {
      read->moveBefore(formed.nodes.front());
      for (torch::jit::Value* input : read->inputs())  // a constant a moved node reads (math.log(100.0)) goes first
        if (input->node()->kind() == c10::prim::Constant && read->isBefore(input->node())) input->node()->moveBefore(read);
    }
    // A constant it reads may sit after its first node (constants are placed freely, and a
    // folded list sits where its ListConstruct was): moved before it, so that the call's
    // arguments and, with fallback, the region's own nodes in the else branch see it defined.
    for (torch::jit::Node* node : formed.nodes)
      for (torch::jit::Value* input : node->inputs())
        if (input->node()->kind() == c10::prim::Constant && formed.nodes.front()->isBefore(input->node()))
          input->node()->moveBefore(formed.nodes.front());
    // With fallback: if available: <call the region> else: <the region's own nodes>. With
    // on_other_shapes = torchscript, the condition also asks whether the inputs have the
    // recorded dtypes and sizes.
    const std::size_t k = p.backend_of[i];
    torch::jit::Value* condition = available[k];
    if (options.on_other_shapes == other_shapes::torchscript) {
      const auto specs = recorded_all.find(entry.regions[i].name);
      if (specs != recorded_all.end()) {
        torch::jit::WithInsertPoint before(formed.nodes.front());
        if (torch::jit::Value* matches = inputs_match(*graph, current_inputs(formed), specs->second))
          condition = condition ? graph->insert(c10::aten::__and__, {condition, matches}) : matches;
      }
    }
    // Where the TorchScript path is kept, it also runs the calls the backend would refuse
    // or answer without autograd: eager's result for them, gradients included.
    if (condition) {
      torch::jit::WithInsertPoint before(formed.nodes.front());
      const std::vector<torch::jit::Value*> inputs = current_inputs(formed);
      if (!asked_for_gradient) {
        wants_gradient = method_wants_gradient(*graph);
        asked_for_gradient = true;
      }
      if (torch::jit::Value* can_run =
              backend_can_run(*graph, inputs, backends[k]->runtime->runs_empty_tensors, wants_gradient))
        condition = graph->insert(c10::aten::__and__, {condition, can_run});
    }
    torch::jit::Node* choice = nullptr;
    if (condition) {
      choice = graph->create(c10::prim::If, {condition}, 0);
      choice->insertBefore(formed.nodes.front());
      choice->addBlock();
      choice->addBlock();
      choices.insert(choice);
    }
    torch::jit::WithInsertPoint insert(choice ? choice->blocks()[0]->return_node() : formed.nodes.front());
    torch::jit::Value* delegate = graph->insertGetAttr(graph->inputs()[0], attributes[k]);
    std::vector<torch::jit::Value*> arguments{delegate};
    for (torch::jit::Value* input : current_inputs(formed)) arguments.push_back(input);
    torch::jit::Node* call = graph->insertNode(graph->create(c10::prim::CallMethod, arguments, 1));
    call->s_(c10::attr::name, entry.regions[i].name);
    call->setSourceRange(formed.nodes.front()->sourceRange());
    std::vector<c10::TypePtr> output_types;
    for (const torch::jit::Value* output : formed.outputs) output_types.push_back(output->type());
    std::vector<torch::jit::Value*> results;
    if (formed.outputs.size() == 1) {
      call->output()->setType(output_types[0]);
      results.push_back(call->output());
    } else {
      call->output()->setType(c10::TupleType::create(output_types));
      torch::jit::Node* unpack = graph->insertNode(graph->createTupleUnpack(call->output()));
      results.assign(unpack->outputs().begin(), unpack->outputs().end());
    }
    if (!choice) {
      for (std::size_t k = 0; k < results.size(); ++k) replace(formed.outputs[k], results[k]);
      for (auto node = formed.nodes.rbegin(); node != formed.nodes.rend(); ++node) (*node)->destroy();
      continue;
    }
    // The if's outputs replace the region's outside it; the region's nodes move into the else
    // branch, which returns their values.
    const std::unordered_set<const torch::jit::Node*> inside(formed.nodes.begin(), formed.nodes.end());
    for (std::size_t k = 0; k < results.size(); ++k) {
      choice->blocks()[0]->registerOutput(results[k]);
      torch::jit::Value* chosen = choice->addOutput()->setType(output_types[k]);
      const std::vector<torch::jit::Use> uses = formed.outputs[k]->uses();
      for (const torch::jit::Use& use : uses)
        if (!inside.count(use.user)) use.user->replaceInput(use.offset, chosen);
      replaced[formed.outputs[k]] = chosen;
    }
    for (torch::jit::Node* node : formed.nodes) node->moveBefore(choice->blocks()[1]->return_node());
    for (torch::jit::Value* output : formed.outputs) choice->blocks()[1]->registerOutput(output);
  }
  // The conversions to contiguous place_conversions decided, before the TorchScript nodes
  // that read a region's channels-last output.
  for (const region& formed : regions)
    for (const torch::jit::Use& use : formed.to_contiguous) {
      torch::jit::WithInsertPoint before(use.user);
      use.user->replaceInput(use.offset, graph->insert(c10::aten::contiguous, {use.user->input(use.offset)}));
    }
  torch::jit::EliminateDeadCode(graph);
  // With example inputs, what the method computes from their shapes alone, computed now.
  std::shared_ptr<torch::jit::Graph> method_graph = graph;
  if (options.fold_shapes && options.example_inputs.count(method)) {
    if (std::shared_ptr<torch::jit::Graph> folded = fold_shapes(graph, choices, min_folded_nodes)) method_graph = folded;
  }
  // Conditions decided at lowering: checked at the entry; where one fails, the method as it was.
  if (!p.conditions.empty()) method_graph = guard_conditions(method_graph, p.conditions);
  // Shapes recorded from example inputs were for the regions: the method is typed as written.
  torch::jit::EraseShapeInformation(method_graph);

  // The rewritten graph replaces the method of the copy's class, with the method's own schema
  // (its argument names, defaults and keyword-only arguments; the graph's names are like x.1).
  const c10::FunctionSchema schema = result.get_method(method).function().getSchema();
  for (std::size_t i = 0; i < method_graph->inputs().size() && i < schema.arguments().size(); ++i)
    method_graph->inputs()[i]->setDebugName(schema.arguments()[i].name());
  // Declared ranges under other_shapes::error: the shapes outside them refused at the entry.
  insert_range_check(*method_graph, schema, method, options);
  const c10::QualifiedName name(*result.type()->name(), method);
  result.type()->unsafeRemoveMethod(method);
  result._ivalue()->compilation_unit()->unsafeRemoveMethod(name);
  torch::jit::Function* function = result._ivalue()->compilation_unit()->create_function(name, method_graph);
  function->setSchema(with_explicit_tensor_types(schema));
  result.type()->addMethod(function);
}

TORCH_DELEGATE_INTERNAL partitioned_module partition_module(const backend_list& backends, const torch::jit::Module& module,
                                                           const partition_options& options, region_decider& decider) {
  // A copy with new class types that shares every parameter, buffer and attribute value.
  partitioned_module planned{module.clone(/*inplace=*/true), module.type()->name()->qualifiedName(), {}};
  planned.methods = partition_methods(backends, planned.copy, options, decider);
  return planned;
}

TORCH_DELEGATE_INTERNAL torch::jit::Module build_partitioned(const backend_list& backends, partitioned_module planned,
                                                            const partition_options& options,
                                                            const std::vector<c10::impl::GenericDict>& specs) {
  torch::jit::Module result = std::move(planned.copy);
  std::vector<partitioned_method>& partitioned = planned.methods;
  delegation_report report{names_of(backends), planned.module_name, {}};
  // Per backend one child module holding its regions of all methods, lowered once (one backend
  // object, one payload: named data shared by its regions), then each method rewritten to call
  // its regions on them.
  std::vector<std::string> attributes;
  for (std::size_t k = 0; k < backends.size(); ++k) attributes.push_back(names::delegate_attribute_of(k, backends[k]->name()));
  input_specs recorded_all;  // every backend's regions' specs, for on_other_shapes = torchscript
  for (std::size_t k = 0; k < backends.size(); ++k) {
    const backend_lowering& lowering = *backends[k];
    torch::jit::Module child(names::regions_class(lowering.name()));
    std::map<std::string, std::string> method_of_region;
    input_specs recorded;  // per region, from example inputs
    for (partitioned_method& p : partitioned)
      for (std::size_t i = 0; i < p.regions.size(); ++i) {
        if (p.backend_of[i] != k) continue;
        owned_inputs owned;
        if (lowering.partition.owns_parameters) owned = take_owned_inputs(result, p.regions[i]);
        const std::string& name = p.entry.regions[i].name;
        add_region_method(child, name, p.regions[i], owned);
        method_of_region.emplace(name, p.method);
        // Input specs only from example inputs (a traced graph has complete types too: those of
        // the trace, which its calls need not keep).
        if (!options.example_inputs.count(p.method)) continue;
        if (auto specs_of_region = recorded_specs(p.regions[i])) recorded.emplace(name, std::move(*specs_of_region));
      }
    // Re-planned: under other_shapes::replan (every backend has replan: partition_checks), and under
    // other_shapes::automatic where this backend has it; so under other_shapes::error with declared
    // ranges (each method's entry check refuses the shapes outside them).
    const bool replans = options.on_other_shapes == other_shapes::replan ||
                         ((options.on_other_shapes == other_shapes::automatic || ranges_replanned_under_error(options)) &&
                          lowering.runtime->replan);
    const std::int64_t max_replans = replans ? static_cast<std::int64_t>(options.max_replans) : 0;
    if (!method_of_region.empty())
      result.register_module(attributes[k], lower_regions(lowering, child, method_of_region, specs[k],
                                                          options.fallback_when_unavailable, recorded, max_replans));
    recorded_all.insert(recorded.begin(), recorded.end());
  }

  for (partitioned_method& p : partitioned) {
    rewrite_method(result, p, backends, attributes, options, recorded_all);
    report.methods.push_back(std::move(p.entry));
  }
  result.register_attribute(delegation_report_attribute, c10::StringType::get(), report.to_string());
  result.register_attribute(delegation_report_data_attribute, detail::report_data_type(), detail::encode_report(report));
  return result;
}

TORCH_DELEGATE_INTERNAL torch::jit::Module lower_partitioned(const backend_list& backends, const torch::jit::Module& module,
                                                             const partition_options& options,
                                                             const std::vector<c10::impl::GenericDict>& specs,
                                                             region_decider& decider) {
  return build_partitioned(backends, partition_module(backends, module, options, decider), options, specs);
}

}  // namespace torch_delegate::detail
