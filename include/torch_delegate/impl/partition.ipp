// Definitions for partition.hpp: what partial lowering does around the pure passes
// (canonical_graph.ipp: the graph; regions.ipp: its regions): check the request, extract each
// region as a method of the delegate child, lower it, rewrite the methods, store the report.
#pragma once

#include <torch_delegate/partition.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/passes/shape_analysis.h>
// DepthFirstGraphNodeIterator: from impl/canonical_graph.ipp (graph_iterator.h has no include guard).

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <cctype>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace torch_delegate {

namespace detail {



/// The one check that a backend can lower partially (every route: lower_partially<B>, the
/// Python package's lower and plan; delegation_plan<B> and lower_partially<B> also refuse to
/// compile for such a backend, with the same fix).
inline void require_partitions(const backend_lowering& lowering) {
  if (!lowering.partitions())
    fail({lowering.name(), {}}, "this backend cannot lower partially: it declares no 'static bool supports(const "
                                "torch::jit::Node*)' (docs/partial-lowering.md); lower whole methods instead");
}

/// Every path in keep_submodules and lower_submodules names a submodule of `module`.
inline void check_submodule_paths(const backend_lowering& backend, const torch::jit::Module& module,
                                  const partition_options& options) {
  std::set<std::string> known;
  for (const torch::jit::NameModule& named : module.named_modules())
    if (!named.name.empty()) known.insert(named.name);
  for (const auto& [knob, paths] : {std::pair{"keep_submodules", &options.keep_submodules},
                                    std::pair{"lower_submodules", &options.lower_submodules}})
    for (const std::string& path : *paths)
      if (!known.count(path))
        fail({backend.name(), {}}, std::string(knob) + ": '" + path + "' is not a submodule of " +
                                     module.type()->name()->qualifiedName() + " (its submodules: " +
                                     (known.empty() ? "none" : comma_separated(known)) + ")");
}

/// What a region's input is while lowering, when the backend owns its parameters and the input
/// is a parameter, buffer or attribute the method reads from `self` (a prim::GetAttr chain): its
/// value, a tensor, None (a Conv2d's absent bias) or an owned_attribute (a number, a string, a list
/// of numbers). nullopt for anything else.
inline std::optional<c10::IValue> owned_value(const torch::jit::Module& module, const torch::jit::Value* value) {
  const std::optional<c10::IValue> read = attribute_value(module, value);
  if (!read) return std::nullopt;
  const c10::IValue& object = *read;
  if (object.isTensor()) return object.toTensor().detach();  // a constant: no autograd history
  if (object.isNone()) return object;
  if (owned_attribute(value)) return object.isList() ? c10::IValue(object.toList().copy()) : object;  // lists are mutable: a copy
  return std::nullopt;
}

/// The inputs of a region that its backend owns (owned_value), taken out of `formed.inputs`: the
/// region's graph holds them as constants and its call does not pass them.
inline std::unordered_map<const torch::jit::Value*, c10::IValue> take_owned_inputs(const torch::jit::Module& module,
                                                                                   region& formed) {
  std::unordered_map<const torch::jit::Value*, c10::IValue> owned;
  std::vector<torch::jit::Value*> passed;
  for (torch::jit::Value* input : formed.inputs) {
    if (auto value = owned_value(module, input))
      owned.emplace(input, std::move(*value));
    else
      passed.push_back(input);
  }
  formed.inputs = std::move(passed);
  return owned;
}

/// A region as a method of the delegate child: (self, input_0, ...) -> output or a tuple of them.
/// `owned`: inputs the backend takes as constants (take_owned_inputs).
inline std::shared_ptr<torch::jit::Graph> region_graph(const region& formed, const c10::TypePtr& self_type,
                                                       const std::unordered_map<const torch::jit::Value*, c10::IValue>& owned) {
  auto graph = std::make_shared<torch::jit::Graph>();
  graph->addInput("self")->setType(self_type);
  std::unordered_map<torch::jit::Value*, torch::jit::Value*> mapped;
  for (std::size_t i = 0; i < formed.inputs.size(); ++i) {
    // Plain identifiers: an argument named like `x.1` saves but does not load.
    torch::jit::Value* input = graph->addInput("input_" + std::to_string(i));
    input->setType(formed.inputs[i]->type());
    mapped[formed.inputs[i]] = input;
  }
  auto map = [&](torch::jit::Value* value) -> torch::jit::Value* {
    auto found = mapped.find(value);
    if (found != mapped.end()) return found->second;
    // An owned parameter: a constant of its value.
    if (auto known = owned.find(value); known != owned.end()) return mapped[value] = graph->insertConstant(known->second);
    // A constant read by the region: cloned (constants have no inputs).
    torch::jit::Node* constant = graph->insertNode(graph->createClone(value->node(), [](torch::jit::Value* v) { return v; }));
    return mapped[value] = constant->output();
  };
  for (torch::jit::Node* node : formed.nodes) {
    for (torch::jit::Value* input : node->inputs()) map(input);
    torch::jit::Node* copy = graph->insertNode(graph->createClone(node, map));
    for (std::size_t i = 0; i < node->outputs().size(); ++i) mapped[node->output(i)] = copy->output(i);
  }
  if (formed.outputs.size() == 1) {
    graph->registerOutput(mapped.at(formed.outputs[0]));
  } else {
    std::vector<torch::jit::Value*> outputs;
    for (torch::jit::Value* output : formed.outputs) outputs.push_back(mapped.at(output));
    graph->registerOutput(graph->insertNode(graph->createTuple(outputs))->output());
  }
  return graph;
}

/// Adds `formed` to `child` as its method `name` (region_graph), typed as written: its schema
/// says Tensor, not the shapes recorded from example inputs (those are the region's input specs,
/// checked with their own error).
inline void add_region_method(torch::jit::Module& child, const std::string& name, const region& formed,
                              const std::unordered_map<const torch::jit::Value*, c10::IValue>& owned) {
  auto function = child._ivalue()->compilation_unit()->create_function(c10::QualifiedName(*child.type()->name(), name),
                                                                       region_graph(formed, child.type(), owned));
  const c10::FunctionSchema& inferred = function->getSchema();
  std::vector<c10::Argument> arguments, returns;
  for (const c10::Argument& a : inferred.arguments()) arguments.push_back(a.cloneWithType(c10::unshapedType(a.type())));
  for (const c10::Argument& r : inferred.returns()) returns.push_back(r.cloneWithType(c10::unshapedType(r.type())));
  function->setSchema(inferred.cloneWithArguments(std::move(arguments)).cloneWithReturns(std::move(returns)));
  child.type()->addMethod(function);
}

/// require_full: attribute reads and the nodes outside lower_submodules may stay in TorchScript.
inline void check_full(const partition_options& options, const backend_lowering& backend, const method_delegation& report) {
  if (!options.require_full) return;
  std::vector<const kept_node*> kept;
  // The tuple that packs a method's results, whichever backend's reason is the primary one (a
  // backend that supports prim::TupleConstruct may have got further with it).
  auto result_tuple = [](const kept_node& node) {
    return node.reason == kept_reason::result_tuple ||
           std::any_of(node.per_backend.begin(), node.per_backend.end(),
                       [](const backend_reason& each) { return each.reason == kept_reason::result_tuple; });
  };
  for (const kept_node& node : report.kept)
    if (node.reason != kept_reason::attribute_read && !result_tuple(node) && node.reason != kept_reason::outside_selection)
      kept.push_back(&node);
  if (kept.empty()) return;
  const kept_node& first = *kept.front();
  fail({backend.name(), report.method},
       "require_full: " + std::to_string(kept.size()) + " node(s) would stay in TorchScript, the first " + first.kind +
           " (" + std::string(to_string(first.reason)) + (first.detail.empty() ? "" : ": " + first.detail) + ")" +
           (first.location.empty() ? "" : " at " + first.location));
}

/// `schema` with each unannotated argument's inferred `Tensor` as an explicit `Tensor`: the same
/// type, but LibTorch 1.13 checks a call's Tensor arguments cheaply only against the explicit one
/// (FunctionSchema::checkArg's fast path compares with TensorType::get()); against the inferred
/// one it builds a complete TensorType of every argument on every call, ~1 µs for two.
inline c10::FunctionSchema with_explicit_tensor_types(const c10::FunctionSchema& schema) {
  std::vector<c10::Argument> arguments;
  for (const c10::Argument& argument : schema.arguments()) {
    const auto tensor = argument.type()->cast<c10::TensorType>();
    arguments.push_back(tensor && tensor->isInferredType() ? argument.cloneWithType(c10::TensorType::get()) : argument);
  }
  return schema.cloneWithArguments(std::move(arguments));
}

inline void check_option_methods(std::string_view backend, const std::vector<std::string>& option_methods,
                                              const partition_options& options) {
  for (const std::string& method : option_methods)
    if (std::find(options.methods.begin(), options.methods.end(), method) == options.methods.end())
      fail({backend, method}, "compile options are given for a method that is not partitioned (partition_options::methods: " +
                                  comma_separated(options.methods) + ")");
}

/// A bool that says whether `inputs` have the dtypes and sizes of `specs` (one per input; none:
/// not checked), computed in TorchScript where the insert point is; nullptr when nothing is checked.
inline torch::jit::Value* inputs_match(torch::jit::Graph& graph, const std::vector<torch::jit::Value*>& inputs,
                                       const std::vector<std::optional<tensor_spec>>& specs) {
  torch::jit::Value* all = nullptr;
  for (std::size_t i = 0; i < inputs.size() && i < specs.size(); ++i) {
    if (!specs[i]) continue;
    torch::jit::Value* sizes = graph.insert(c10::aten::size, {inputs[i]});
    torch::jit::Value* same_sizes = graph.insert(c10::aten::eq, {sizes, graph.insertConstant(specs[i]->sizes)});
    torch::jit::Value* dtype = graph.insert(c10::prim::dtype, {inputs[i]});
    torch::jit::Value* same_dtype =
        graph.insert(c10::aten::eq, {dtype, graph.insertConstant(static_cast<std::int64_t>(specs[i]->dtype))});
    torch::jit::Value* both = graph.insert(c10::aten::__and__, {same_sizes, same_dtype});
    all = all ? graph.insert(c10::aten::__and__, {all, both}) : both;
  }
  return all;
}

/// Whether the method was called with grad mode on and a tensor argument that requires grad:
/// inserted once at its entry (nullptr: it takes no tensor). The method's own arguments, not its
/// regions' inputs: those may require grad only because TorchScript computed them from
/// parameters, which inference outside no_grad does (a non-frozen model).
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

/// Where a region keeps its TorchScript path: whether a call may run on its backend as far as
/// autograd and empty tensors go: not when the method wants a gradient (its backend's outputs
/// would have no autograd history), and, for a backend that does not run empty tensors
/// (runs_empty_tensors), not with an input of no elements. nullptr: nothing to ask.
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

/// The input spec of a value whose type is complete (recorded from example inputs), else none.
/// Its dtype and sizes; any layout: at run time a value's strides depend on who made it (a
/// region of a backend that works in NHWC returns channels-last tensors, and ATen's ops pass
/// that layout on), which the example run in TorchScript does not show.
inline std::optional<tensor_spec> recorded_spec(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor || !tensor->isComplete()) return std::nullopt;
  tensor_spec spec{*tensor->sizes().concrete_sizes(), *tensor->scalarType()};
  spec.memory_format = std::nullopt;
  return spec;
}

/// A region's input specs (recorded_spec per input), or nothing when none is recorded.
inline std::optional<std::vector<std::optional<tensor_spec>>> recorded_specs(const region& formed) {
  std::vector<std::optional<tensor_spec>> specs;
  bool any = false;
  for (const torch::jit::Value* input : formed.inputs) {
    specs.push_back(recorded_spec(input));
    any = any || specs.back().has_value();
  }
  if (!any) return std::nullopt;
  return specs;
}

/// For a backend whose regions work in channels-last (B::channels_last): which conversions the
/// boundaries of each region need, in its report, and which uses of its outputs get one. A 4-d
/// input made by another region of the method needs none (it is channels-last already); one made
/// in TorchScript or passed to the method is converted on entry by the backend; an output read by
/// a TorchScript convolution (ATen's convolutions are slower on channels-last input here) gets a
/// conversion to contiguous before it. Other TorchScript nodes take channels-last tensors as they
/// are. Needs the ranks that example inputs give.
/// With several backends, `regions` holds every backend's: those of the backend at `position`
/// (backend_of) are placed; a node in any region is no TorchScript consumer.
inline void place_conversions(const backend_lowering& backend, std::vector<region>& regions, method_delegation& entry,
                              const std::vector<std::size_t>& backend_of, std::size_t position) {
  static const std::set<std::string> prefers_nchw{"aten::conv2d", "aten::_convolution", "aten::convolution",
                                                  "aten::conv_transpose2d"};
  std::unordered_set<const torch::jit::Value*> made_by_region;
  std::unordered_set<const torch::jit::Node*> in_region;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (backend_of[i] == position) made_by_region.insert(regions[i].outputs.begin(), regions[i].outputs.end());
    in_region.insert(regions[i].nodes.begin(), regions[i].nodes.end());
  }
  auto four_d = [](const torch::jit::Value* value) {
    const auto tensor = value->type()->cast<c10::TensorType>();
    return tensor && tensor->dim() && *tensor->dim() == 4;
  };
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (backend_of[i] != position) continue;
    std::vector<std::string>& conversions = entry.regions[i].conversions;
    for (std::size_t k = 0; k < regions[i].inputs.size(); ++k) {
      const torch::jit::Value* input = regions[i].inputs[k];
      if (!four_d(input) || made_by_region.count(input)) continue;
      // A weight the backend owns is a constant of the region, not an input (take_owned_inputs).
      if (backend.partition.owns_parameters && input->node()->kind() == c10::prim::GetAttr) continue;
      const std::string from = input->node()->kind() == c10::prim::Param ? "method argument " + input->debugName()
                                                                           : input->node()->kind().toQualString();
      conversions.push_back("input " + std::to_string(k) + " (" + from + "): to channels_last on entry");
    }
    for (std::size_t k = 0; k < regions[i].outputs.size(); ++k) {
      const torch::jit::Value* output = regions[i].outputs[k];
      if (!four_d(output)) continue;
      for (const torch::jit::Use& use : output->uses()) {
        if (in_region.count(use.user) || !prefers_nchw.count(use.user->kind().toQualString())) continue;
        regions[i].to_contiguous.push_back(use);
        const std::string line = locate_in_model(use.user).line;
        conversions.push_back("output " + std::to_string(k) + ": to contiguous before " + use.user->kind().toQualString() +
                              (line.empty() ? "" : " at " + line));
      }
    }
  }
}

/// A backend that owns its parameters takes the attribute reads its regions use as constants
/// (take_owned_inputs): those reads leave the method, so they are not "kept in TorchScript". Drops
/// from the report each attribute read whose value only regions read (a submodule read counts when
/// only such reads read it).
inline void drop_owned_reads(const std::vector<region>& regions, const std::shared_ptr<torch::jit::Graph>& graph,
                             method_delegation& entry) {
  std::unordered_set<const torch::jit::Node*> in_region;
  for (const region& formed : regions) in_region.insert(formed.nodes.begin(), formed.nodes.end());
  std::vector<const torch::jit::Node*> reads;
  std::shared_ptr<torch::jit::Graph> walked = graph;
  torch::jit::DepthFirstGraphNodeIterator walk(walked);
  for (const torch::jit::Node* node = walk.next(); node; node = walk.next())
    if (node->kind() == c10::prim::GetAttr) reads.push_back(node);
  // Users come after what they read: decide from the last read to the first.
  std::unordered_set<const torch::jit::Node*> owned;
  for (auto read = reads.rbegin(); read != reads.rend(); ++read) {
    const auto& uses = (*read)->output()->uses();
    if (!uses.empty() && std::all_of(uses.begin(), uses.end(), [&](const torch::jit::Use& use) {
          return in_region.count(use.user) || owned.count(use.user);
        }))
      owned.insert(*read);
  }
  std::map<std::string, std::size_t> owned_paths;
  for (const torch::jit::Node* read : owned) {
    const std::string path = attribute_path(read);
    ++owned_paths[path.empty() ? std::string("an attribute") : path];
  }
  std::vector<kept_node> kept;
  for (kept_node& node : entry.kept) {
    if (node.reason == kept_reason::attribute_read) {
      auto found = owned_paths.find(node.detail);
      if (found != owned_paths.end() && found->second > 0) {
        --found->second;
        continue;
      }
    }
    kept.push_back(std::move(node));
  }
  entry.kept = std::move(kept);
}

/// One partitioned method: its canonical graph, its regions (every backend's, in the order of
/// its report's) and its report; backend_of[i]: the position, in the list of backends, of the
/// backend region i goes to.
struct partitioned_method {
  std::string method;
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<region> regions;
  std::vector<std::size_t> backend_of;
  method_delegation entry;
};

/// The child holding every partitioned method's regions, lowered once to the backend (lower<B>'s
/// funnel, lower_methods): each region with the spec of the method it comes from in
/// `spec_by_method`, or the backend's defaults; one lowered module, so named data is shared by all.
inline torch::jit::Module lower_regions(const backend_lowering& lowering, const torch::jit::Module& regions,
                                        const std::map<std::string, std::string>& method_of_region,
                                        const c10::impl::GenericDict& spec_by_method, bool fallback_when_unavailable,
                                        const input_specs& recorded, std::int64_t max_replans) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& region : regions.get_methods()) {
    const auto given = spec_by_method.find(method_of_region.at(region.name()));
    spec.insert(region.name(), given == spec_by_method.end() ? lowering.default_spec() : given->value());
  }
  return lower_methods(lowering, regions, spec, fallback_when_unavailable, recorded.empty() ? nullptr : &recorded,
                       max_replans);
}

/// Every value the top level of `graph` (a method's canonical graph) makes, as the method makes
/// it from `inputs` (its example inputs): what a measured region is called with.
inline std::unordered_map<const torch::jit::Value*, c10::IValue> example_values(const torch::jit::Module& module,
                                                                                const std::shared_ptr<torch::jit::Graph>& graph,
                                                                                const std::vector<c10::IValue>& inputs) {
  // A copy whose outputs are every top-level value: the same nodes in the same order.
  std::shared_ptr<torch::jit::Graph> probe = graph->copy();
  std::vector<const torch::jit::Value*> recorded;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i) recorded.push_back(graph->inputs()[i]);
  for (std::size_t i = 1; i < probe->inputs().size(); ++i) probe->registerOutput(probe->inputs()[i]);
  auto original = graph->nodes().begin();
  for (auto copy = probe->nodes().begin(); copy != probe->nodes().end(); ++copy, ++original)
    for (std::size_t k = 0; k < copy->outputs().size(); ++k) {
      recorded.push_back(original->outputs()[k]);
      probe->registerOutput(copy->outputs()[k]);
    }
  torch::jit::Stack stack{module._ivalue()};
  stack.insert(stack.end(), inputs.begin(), inputs.end());
  {
    c10::NoGradGuard no_grad;
    torch::jit::Code code(probe, "example_values");
    torch::jit::InterpreterState(code).run(stack);
  }
  std::unordered_map<const torch::jit::Value*, c10::IValue> values;
  const std::size_t first = stack.size() - recorded.size();
  for (std::size_t i = 0; i < recorded.size(); ++i) values.emplace(recorded[i], stack[first + i]);
  return values;
}

/// The median of timed calls (the upper one of an even count).
inline double median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

/// Whether a node computes on tensors (not a view, a size or an interpreter op): what leaves
/// ATen's OpenMP workers spinning, or waits for a backend's pool to sleep.
inline bool computes(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> views{"aten::view", "aten::reshape", "aten::flatten", "aten::squeeze",
                                                     "aten::unsqueeze", "aten::transpose", "aten::permute", "aten::select",
                                                     "aten::slice", "aten::expand", "aten::t", "aten::detach",
                                                     "aten::size", "aten::dim", "aten::len", "aten::__getitem__"};
  if (node->kind().is_prim() || views.count(node->kind().toQualString())) return false;
  return std::any_of(node->outputs().begin(), node->outputs().end(),
                     [](const torch::jit::Value* value) { return value->type()->cast<c10::TensorType>() != nullptr; });
}

/// The wall time of `call()`, in ms: what every measurement of a partition is made of.
template <class F>
double elapsed_ms(F&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// The median time of one call of the original `method` on its example `inputs`, in ms (two
/// calls first: the profiling executor optimises after them): what partition_options::min_gain
/// is a share of.
inline double method_ms(const torch::jit::Module& module, const std::string& method, const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  torch::jit::Method call = module.get_method(method);
  for (int warm = 0; warm < 2; ++warm) call(inputs);
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) times.push_back(elapsed_ms([&] { call(inputs); }));
  return median(std::move(times));
}

/// Whether a TorchScript node that computes makes one of `formed`'s inputs or reads one of its
/// outputs: then, in the method, the region runs right after or before ATen's parallel work.
inline bool has_computing_neighbour(const region& formed) {
  for (const torch::jit::Value* input : formed.inputs)
    if (computes(input->node())) return true;
  for (const torch::jit::Value* output : formed.outputs)
    for (const torch::jit::Use& use : output->uses())
      if (computes(use.user)) return true;
  return false;
}

/// A region's two times, in ms: one call on its backend, one as TorchScript.
struct region_timing {
  double backend_ms;
  double torchscript_ms;
};

/// Times `formed` on `backend` (lowered alone, as lower_partitioned would lower it) and as
/// TorchScript (its own graph, in the interpreter), called with `values`, each between two
/// TorchScript calls and charged for what it costs the call after it; medians. Nothing when a
/// value it takes is not known (a region in an if or loop body).
inline std::optional<region_timing> time_region(const backend_lowering& backend, const torch::jit::Module& module,
                                                const std::string& method, const region& formed, const std::string& name,
                                                const std::unordered_map<const torch::jit::Value*, c10::IValue>& values,
                                                const c10::impl::GenericDict& spec_by_method, bool record_specs) {
  std::vector<c10::IValue> all_inputs{module._ivalue()};
  for (const torch::jit::Value* input : formed.inputs) {
    const auto found = values.find(input);
    if (found == values.end()) return std::nullopt;
    all_inputs.push_back(found->second);
  }
  // The backend's side: the region lowered alone, its owned inputs taken as constants.
  region alone = formed;
  std::unordered_map<const torch::jit::Value*, c10::IValue> owned;
  if (backend.partition.owns_parameters) owned = take_owned_inputs(module, alone);
  torch::jit::Module child(names::regions_class(backend.name()));
  add_region_method(child, name, alone, owned);
  input_specs recorded;
  if (record_specs)
    if (auto specs = recorded_specs(alone)) recorded.emplace(name, std::move(*specs));
  torch::jit::Module lowered = lower_regions(backend, child, {{name, method}}, spec_by_method, false, recorded, 0);
  torch::jit::Method delegated = lowered.get_method(name);
  std::vector<c10::IValue> backend_inputs;
  for (const torch::jit::Value* input : alone.inputs) backend_inputs.push_back(values.at(input));
  // TorchScript's side: the region's own graph.
  torch::jit::GraphFunction script(name, region_graph(formed, module.type(), {}), nullptr);

  c10::NoGradGuard no_grad;
  auto run_backend = [&] { delegated(backend_inputs); };
  auto run_script = [&] {
    torch::jit::Stack stack = all_inputs;
    script.run(stack);
  };
  run_backend();  // warm-up: first calls allocate, set up, optimise
  run_script();
  run_script();
  // A region between TorchScript ops that compute (a layer norm before a Linear) pays for what
  // they leave behind (ATen's OpenMP workers spin for a while after a parallel region, on the
  // cores a backend's own threads need), and they pay for what it leaves (a backend's pool spins
  // too). Such a region is timed that way: its call between two calls of its own graph in
  // TorchScript (standing in for its neighbours), charged with what the call after it took
  // beyond its usual time. A region with no such neighbour (a CNN's whole body, between the
  // method's arguments and its return) runs after itself in steady calls: it is timed in blocks
  // of calls of one kind, the first of each block dropped. Rounds alternate the two paths; at
  // least 5, up to 15, stopping early once the medians are more than 20 % apart.
  std::vector<double> kept, delegated_path, after_kept;
  constexpr int min_rounds = 5, max_rounds = 15;
  const bool between_compute = has_computing_neighbour(formed);
  for (int round = 0; round < max_rounds; ++round) {
    if (between_compute) {
      const double script_ms = elapsed_ms(run_script);
      const double following_script = elapsed_ms(run_script);
      const double backend_ms = elapsed_ms(run_backend);
      const double following_backend = elapsed_ms(run_script);
      kept.push_back(script_ms + following_script);
      after_kept.push_back(following_script);
      delegated_path.push_back(backend_ms + following_backend);
    } else {
      run_script();  // dropped: it pays for what the backend left behind
      kept.push_back(elapsed_ms(run_script));
      after_kept.push_back(0.0);
      run_backend();
      delegated_path.push_back(elapsed_ms(run_backend));
    }
    if (round + 1 >= min_rounds) {
      const double a = median(kept), b = median(delegated_path);
      if (std::max(a, b) > 1.2 * std::min(a, b)) break;
    }
  }
  const double usual_following = median(after_kept);
  return region_timing{std::max(0.0, median(delegated_path) - usual_following), std::max(0.0, median(kept) - usual_following)};
}

/// The region of `replayed` (a method of an earlier report) that `candidate` is, or nullptr: the
/// first one not matched yet (`matched`) with the same backend, kinds, node count, location and
/// depth. Candidates come in program order, as the report's regions do: regions alike (the
/// layers of a loop share a source line) pair up in order, and each is matched once.
inline const region_report* replayed_region(const method_delegation* replayed, const region_report& candidate,
                                            std::vector<bool>& matched) {
  if (!replayed) return nullptr;
  matched.resize(replayed->regions.size(), false);
  for (std::size_t i = 0; i < replayed->regions.size(); ++i) {
    const region_report& region = replayed->regions[i];
    if (!matched[i] && region.backend == candidate.backend && region.kinds == candidate.kinds &&
        region.node_count == candidate.node_count && region.location == candidate.location && region.depth == candidate.depth) {
      matched[i] = true;
      return &region;
    }
  }
  return nullptr;
}

/// "0.0412 ms on xnnpack, 0.0275 ms in TorchScript"
inline std::string timing_text(const region_report& region) {
  std::ostringstream text;
  text.precision(3);
  text << region.backend_ms << " ms on " << region.backend << ", " << region.torchscript_ms << " ms in TorchScript";
  return text.str();
}

/// "xnnpack, pointwise_fusion": a priority list's names, as reports give them.
inline std::string names_of(const backend_list& backends) {
  std::vector<std::string> names;
  for (const backend_lowering* backend : backends) names.emplace_back(backend->name());
  return comma_separated(names);
}

/// The checks a priority list of backends gets before anything else: at least one, each able to
/// partition, no backend twice.
inline void check_backend_list(const backend_list& backends) {
  if (backends.empty()) fail({"torch-delegate", {}}, "partial lowering needs at least one backend, got an empty list");
  std::set<std::string_view> seen;
  for (const backend_lowering* backend : backends) {
    require_partitions(*backend);
    if (!seen.insert(backend->name()).second)
      fail({backend->name(), {}}, "the backend is listed twice in the priority list (" + names_of(backends) + ")");
  }
}

/// What the plan and the lowering both do first, per method of `options.methods`: check it
/// exists, take its canonical graph, form each backend's regions in priority order (a node goes
/// to the first backend that takes it), place the layout conversions, apply require_full. (The
/// callers check the submodule paths first, on the user's module: errors name its class, not a
/// copy's.) A node every backend passes on is reported with every backend's reason
/// (kept_node::per_backend), its primary one the furthest (primary_reason).
/// `specs` (lowering): each backend's {method: spec}, which measured regions are compiled with.
inline std::vector<partitioned_method> partition_methods(const backend_list& backends, const torch::jit::Module& module,
                                                         const partition_options& options,
                                                         const std::vector<c10::impl::GenericDict>* specs = nullptr) {
  const backend_lowering& first = *backends.front();
  if (options.on_other_shapes != other_shapes::error && options.example_inputs.empty())
    fail({first.name(), {}}, "on_other_shapes: it applies to the shapes recorded from example_inputs, and none are given");
  for (const backend_lowering* backend : backends)
    if (options.on_other_shapes == other_shapes::replan && !backend->runtime->replan)
      fail({backend->name(), {}}, "on_other_shapes = replan: the backend does not re-plan regions (it has no "
                                  "'Handle replan(Handle&, const torch_delegate::given_inputs&)'); use other_shapes::torchscript "
                                  "(run the region's TorchScript for other shapes) or other_shapes::error");
  if (!(options.min_gain >= 0.0 && options.min_gain < 1.0)) {
    std::ostringstream given;
    given << options.min_gain;
    fail({first.name(), {}}, "min_gain is a share of the method's time, in [0, 1) (0.01: 1 %); got " + given.str());
  }
  if (options.on_other_shapes == other_shapes::replan && options.max_replans == 0)
    fail({first.name(), {}}, "on_other_shapes = replan with max_replans = 0: no shape could be kept; give at least 1");
  for (const auto& [method, inputs] : options.example_inputs)
    if (std::find(options.methods.begin(), options.methods.end(), method) == options.methods.end())
      fail({first.name(), method}, "example_inputs are given for a method that is not partitioned (partition_options::methods: " +
                                       comma_separated(options.methods) + ")");
  const bool owns_parameters = std::any_of(backends.begin(), backends.end(),
                                           [](const backend_lowering* backend) { return backend->partition.owns_parameters; });
  std::vector<partitioned_method> partitioned;
  for (const std::string& method : options.methods) {
    schema_of(module, method, {first.name(), method});
    const auto examples = options.example_inputs.find(method);
    std::shared_ptr<torch::jit::Graph> graph = canonical_graph(
        module, method, examples == options.example_inputs.end() ? nullptr : &examples->second, first.name(), owns_parameters);
    partitioned_method p{method, graph, {}, {}, method_delegation{method, {}, {}}};
    std::unordered_set<const torch::jit::Node*> taken;
    // Measured (or replayed) decisions: which candidate regions each backend keeps.
    const method_delegation* replayed = nullptr;
    if (options.replay)
      for (const method_delegation& earlier : options.replay->methods)
        if (earlier.method == method) replayed = &earlier;
    const bool measuring = !options.replay && options.measure && examples != options.example_inputs.end();
    std::optional<std::unordered_map<const torch::jit::Value*, c10::IValue>> values;  // computed once, when needed
    double whole_ms = -1;  // the original method's time (min_gain), measured once, when needed
    std::vector<bool> matched;  // the replayed regions already paired with a candidate
    // Each backend's reasons for each node it did not take, in the list's order: a node no
    // backend takes is reported (by the last pass) with all of them.
    std::unordered_map<const torch::jit::Node*, std::vector<backend_reason>> reasons_of;
    std::vector<const torch::jit::Node*> last_kept;  // the node of each of the last pass's kept entries
    for (std::size_t k = 0; k < backends.size(); ++k) {
      method_delegation pass{method, {}, {}};
      std::vector<const torch::jit::Node*> kept_nodes;  // the node of each entry of pass.kept
      std::vector<region> regions =
          form_regions(*backends[k], options, graph, method, pass, backends.size() > 1 ? &taken : nullptr, &kept_nodes);
      const std::string backend_name(backends[k]->name());
      std::vector<std::string> why(regions.size());  // why each region stays in TorchScript; empty: delegated
      std::vector<kept_reason> reason(regions.size(), kept_reason::slower_on_backend);
      std::vector<std::size_t> winners;  // measured and faster on the backend
      for (std::size_t i = 0; i < regions.size() && (measuring || options.replay); ++i) {
        region_report& candidate = pass.regions[i];
        if (options.replay) {
          if (const region_report* earlier = replayed_region(replayed, candidate, matched)) {
            candidate.backend_ms = earlier->backend_ms;
            candidate.torchscript_ms = earlier->torchscript_ms;
          } else {
            why[i] = "not delegated in the replayed plan";
            // A region the replayed report kept as slower or as gaining too little on this
            // backend (measured, or dropped by the method's check) keeps that reason and its
            // figures. A kept node without per-backend reasons (made by hand) counts for any.
            auto measured = [](kept_reason r) {
              return r == kept_reason::slower_on_backend || r == kept_reason::gain_below_minimum;
            };
            for (const kept_node& earlier : replayed ? replayed->kept : std::vector<kept_node>{}) {
              if (candidate.kinds.empty() || earlier.kind != candidate.kinds.front() || earlier.location != candidate.location)
                continue;
              const backend_reason* own = nullptr;
              for (const backend_reason& each : earlier.per_backend)
                if (each.backend == backend_name && measured(each.reason)) own = &each;
              if (own || (earlier.per_backend.empty() && measured(earlier.reason))) {
                why[i] = own ? own->detail : earlier.detail;
                reason[i] = own ? own->reason : earlier.reason;
                break;
              }
            }
          }
        } else {
          if (!values) values = example_values(module, graph, examples->second);
          const c10::impl::GenericDict none(c10::StringType::get(), c10::AnyType::get());
          const std::optional<region_timing> timing =
              time_region(*backends[k], module, method, regions[i], candidate.name, *values, specs ? (*specs)[k] : none, true);
          if (!timing) continue;  // not measurable (in an if or loop body): delegated by the rules
          candidate.backend_ms = timing->backend_ms;
          candidate.torchscript_ms = timing->torchscript_ms;
          if (timing->backend_ms > timing->torchscript_ms)
            why[i] = timing_text(candidate);
          else
            winners.push_back(i);
        }
      }
      // The minimum gain: the winners that save least are kept in TorchScript while, together,
      // they save less than min_gain of the method (one region saving too little alone counts;
      // many small ones that add up, as ShuffleNetV2's branches, are delegated).
      if (options.min_gain > 0 && !winners.empty()) {
        if (whole_ms < 0) whole_ms = method_ms(module, method, examples->second);
        auto saved = [&](std::size_t i) { return pass.regions[i].torchscript_ms - pass.regions[i].backend_ms; };
        std::stable_sort(winners.begin(), winners.end(), [&](std::size_t a, std::size_t b) { return saved(a) < saved(b); });
        double together = 0;
        std::size_t least = 0;
        while (least < winners.size() && together + saved(winners[least]) < options.min_gain * whole_ms)
          together += saved(winners[least++]);
        for (std::size_t w = 0; w < least; ++w) {
          const std::size_t i = winners[w];
          std::ostringstream text;
          text.precision(3);
          text << timing_text(pass.regions[i]) << ": saves " << saved(i) << " ms";
          if (least > 1) text << "; the " << least << " regions that save least save " << together << " ms together";
          text << ", less than " << 100 * options.min_gain << " % of " << method << " (" << whole_ms << " ms, min_gain)";
          why[i] = text.str();
          reason[i] = kept_reason::gain_below_minimum;
        }
      }
      for (std::size_t i = 0; i < regions.size(); ++i) {
        if (why[i].empty()) continue;
        for (const torch::jit::Node* node : regions[i].nodes) {
          model_location where = locate_in_model(node);
          pass.kept.push_back({node->kind().toQualString(), reason[i], why[i], std::move(where.line), regions[i].depth,
                               std::move(where.submodule), {{backend_name, reason[i], why[i]}}});
          kept_nodes.push_back(node);
        }
      }
      for (std::size_t n = 0; n < pass.kept.size(); ++n) {
        std::vector<backend_reason>& reasons = reasons_of[kept_nodes[n]];
        if (reasons.empty() || reasons.back().backend != backend_name)  // once per backend
          reasons.push_back({backend_name, pass.kept[n].reason, pass.kept[n].detail});
      }
      for (std::size_t i = 0; i < regions.size(); ++i) {
        if (!why[i].empty()) continue;
        pass.regions[i].name = names::region_method(method, p.entry.regions.size());  // numbered across backends
        taken.insert(regions[i].nodes.begin(), regions[i].nodes.end());
        p.entry.regions.push_back(std::move(pass.regions[i]));
        p.regions.push_back(std::move(regions[i]));
        p.backend_of.push_back(k);
      }
      if (k + 1 == backends.size()) {
        p.entry.kept = std::move(pass.kept);
        last_kept = std::move(kept_nodes);
      }
    }
    // The last pass's kept nodes are those no backend took; every backend gave each a reason.
    for (std::size_t n = 0; n < p.entry.kept.size(); ++n) {
      kept_node& node = p.entry.kept[n];
      std::vector<backend_reason>& reasons = reasons_of.at(last_kept[n]);
      if (!reasons.empty()) node.per_backend = std::move(reasons);  // (a node is kept once per pass)
      if (const backend_reason* primary = primary_reason(node.per_backend)) {
        node.reason = primary->reason;
        node.detail = primary->detail;
      }
    }
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (backends[k]->partition.channels_last) place_conversions(*backends[k], p.regions, p.entry, p.backend_of, k);
    if (owns_parameters) {
      std::vector<region> owning;
      for (std::size_t i = 0; i < p.regions.size(); ++i)
        if (backends[p.backend_of[i]]->partition.owns_parameters) owning.push_back(p.regions[i]);
      drop_owned_reads(owning, graph, p.entry);
    }
    check_full(options, first, p.entry);
    partitioned.push_back(std::move(p));
  }
  return partitioned;
}

TORCH_DELEGATE_DECL delegation_report partition_report_all(const backend_list& backends, const torch::jit::Module& module,
                                                           const partition_options& options) {
  check_backend_list(backends);
  check_submodule_paths(*backends.front(), module, options);
  delegation_report report{names_of(backends), module.type()->name()->qualifiedName(), {}};
  for (partitioned_method& p : partition_methods(backends, module, options)) report.methods.push_back(std::move(p.entry));
  return report;
}

TORCH_DELEGATE_DECL delegation_report partition_report(const backend_lowering& backend, const torch::jit::Module& module,
                                                       const partition_options& options) {
  return partition_report_all({&backend}, module, options);
}

/// Partially lowers `module` (not modified) to a priority list of backends: a copy sharing its
/// parameters, whose partitioned methods call their regions in one child per backend (the
/// first's `__delegate`, the others' `__delegate_<backend>`), each lowered by lower_regions with
/// that backend's `specs` entry. The report is stored with the module (delegation_report_of
/// reads it, after save/load too).
inline torch::jit::Module lower_partitioned(const backend_list& backends, const torch::jit::Module& module,
                                            const partition_options& options,
                                            const std::vector<c10::impl::GenericDict>& specs) {
  check_submodule_paths(*backends.front(), module, options);
  // A copy with new class types that shares every parameter, buffer and attribute value.
  torch::jit::Module result = module.clone(/*inplace=*/true);
  delegation_report report{names_of(backends), module.type()->name()->qualifiedName(), {}};
  // First every method's regions, then per backend one child module holding its regions of all
  // methods, lowered once (one backend object, one payload: named data shared by its regions),
  // then each method rewritten to call its regions on them.
  std::vector<partitioned_method> partitioned = partition_methods(backends, result, options, &specs);
  std::vector<std::string> attributes;
  for (std::size_t k = 0; k < backends.size(); ++k) attributes.push_back(names::delegate_attribute_of(k, backends[k]->name()));
  const std::int64_t max_replans =
      options.on_other_shapes == other_shapes::replan ? static_cast<std::int64_t>(options.max_replans) : 0;
  input_specs recorded_all;  // every backend's regions' specs, for on_other_shapes = torchscript
  for (std::size_t k = 0; k < backends.size(); ++k) {
    const backend_lowering& lowering = *backends[k];
    torch::jit::Module child(names::regions_class(lowering.name()));
    std::map<std::string, std::string> method_of_region;
    input_specs recorded;  // per region, from example inputs
    for (partitioned_method& p : partitioned)
      for (std::size_t i = 0; i < p.regions.size(); ++i) {
        if (p.backend_of[i] != k) continue;
        std::unordered_map<const torch::jit::Value*, c10::IValue> owned;
        if (lowering.partition.owns_parameters) owned = take_owned_inputs(result, p.regions[i]);
        const std::string& name = p.entry.regions[i].name;
        add_region_method(child, name, p.regions[i], owned);
        method_of_region.emplace(name, p.method);
        // Input specs only from example inputs (a traced graph has complete types too: those of
        // the trace, which its calls need not keep).
        if (!options.example_inputs.count(p.method)) continue;
        if (auto specs_of_region = recorded_specs(p.regions[i])) recorded.emplace(name, std::move(*specs_of_region));
      }
    if (!method_of_region.empty())
      result.register_module(attributes[k], lower_regions(lowering, child, method_of_region, specs[k],
                                                          options.fallback_when_unavailable, recorded, max_replans));
    recorded_all.insert(recorded.begin(), recorded.end());
  }

  for (partitioned_method& p : partitioned) {
    const std::string& method = p.method;
    const std::shared_ptr<torch::jit::Graph>& graph = p.graph;
    const std::vector<region>& regions = p.regions;
    method_delegation& entry = p.entry;
    if (!regions.empty()) {
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
      auto replace = [&](torch::jit::Value* old_value, torch::jit::Value* new_value) {
        old_value->replaceAllUsesWith(new_value);
        replaced[old_value] = new_value;
      };
      for (std::size_t i = 0; i < regions.size(); ++i) {
        const region& formed = regions[i];
        for (torch::jit::Node* read : formed.hoisted) read->moveBefore(formed.nodes.front());
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
            std::vector<torch::jit::Value*> inputs;
            for (torch::jit::Value* input : formed.inputs) {
              auto found = replaced.find(input);
              inputs.push_back(found == replaced.end() ? input : found->second);
            }
            if (torch::jit::Value* matches = inputs_match(*graph, inputs, specs->second))
              condition = condition ? graph->insert(c10::aten::__and__, {condition, matches}) : matches;
          }
        }
        // Where the TorchScript path is kept, it also runs the calls the backend would refuse
        // or answer without autograd: eager's result for them, gradients included.
        if (condition) {
          torch::jit::WithInsertPoint before(formed.nodes.front());
          std::vector<torch::jit::Value*> inputs;
          for (torch::jit::Value* input : formed.inputs) {
            auto found = replaced.find(input);
            inputs.push_back(found == replaced.end() ? input : found->second);
          }
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
        }
        torch::jit::WithInsertPoint insert(choice ? choice->blocks()[0]->return_node() : formed.nodes.front());
        torch::jit::Value* delegate = graph->insertGetAttr(graph->inputs()[0], attributes[k]);
        std::vector<torch::jit::Value*> arguments{delegate};
        for (torch::jit::Value* input : formed.inputs) {
          auto found = replaced.find(input);
          arguments.push_back(found == replaced.end() ? input : found->second);
        }
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
      // Shapes recorded from example inputs were for the regions: the method is typed as written.
      torch::jit::EraseShapeInformation(graph);

      // The rewritten graph replaces the method of the copy's class, with the method's own schema
      // (its argument names, defaults and keyword-only arguments; the graph's names are like x.1).
      const c10::FunctionSchema schema = result.get_method(method).function().getSchema();
      for (std::size_t i = 0; i < graph->inputs().size() && i < schema.arguments().size(); ++i)
        graph->inputs()[i]->setDebugName(schema.arguments()[i].name());
      const c10::QualifiedName name(*result.type()->name(), method);
      result.type()->unsafeRemoveMethod(method);
      result._ivalue()->compilation_unit()->unsafeRemoveMethod(name);
      torch::jit::Function* function = result._ivalue()->compilation_unit()->create_function(name, graph);
      function->setSchema(with_explicit_tensor_types(schema));
      result.type()->addMethod(function);
    }
    report.methods.push_back(std::move(entry));
  }
  result.register_attribute(delegation_report_attribute, c10::StringType::get(), report.to_string());
  result.register_attribute(delegation_report_data_attribute, detail::report_data_type(), detail::encode_report(report));
  return result;
}

/// The compile spec's keys of one backend's entry: method names, each a partitioned method.
inline void check_spec_methods(const backend_lowering& lowering, const c10::impl::GenericDict& spec_by_method,
                               const partition_options& options) {
  std::vector<std::string> option_methods;
  for (const auto& entry : spec_by_method) {
    if (!entry.key().isString())
      fail({lowering.name(), {}}, "the compile spec's keys must be method names (str), got " + entry.key().type()->annotation_str());
    option_methods.push_back(entry.key().toStringRef());
  }
  check_option_methods(lowering.name(), option_methods, options);
}

/// Medians of calls of `method` on each of `modules` with `inputs`, in ms: interleaved blocks of 3
/// calls each (the first dropped), 5 rounds.
inline std::vector<double> time_modules(const std::vector<const torch::jit::Module*>& modules, const std::string& method,
                                        const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  std::vector<torch::jit::Method> calls;
  for (const torch::jit::Module* module : modules) calls.push_back(module->get_method(method));
  for (int warm = 0; warm < 2; ++warm)  // the profiling executor optimises after its first calls
    for (torch::jit::Method& call : calls) call(inputs);
  std::vector<std::vector<double>> times(calls.size());
  for (int round = 0; round < 5; ++round)
    for (std::size_t m = 0; m < calls.size(); ++m)
      for (int call = 0; call < 3; ++call) {
        const double ms = elapsed_ms([&] { calls[m](inputs); });
        if (call > 0) times[m].push_back(ms);
      }
  std::vector<double> medians;
  for (std::vector<double>& each : times) medians.push_back(median(std::move(each)));
  return medians;
}

/// Medians of calls of `method` on `original` and on `lowered`, interleaved (time_modules).
inline std::pair<double, double> time_methods(const torch::jit::Module& original, const torch::jit::Module& lowered,
                                              const std::string& method, const std::vector<c10::IValue>& inputs) {
  const std::vector<double> medians = time_modules({&original, &lowered}, method, inputs);
  return {medians[0], medians[1]};
}

/// The method's check of a measured partition. Regions are timed one at a time; what counts is
/// the method, where they also pay for what their neighbours leave behind (and the neighbours for
/// them). Each method with example inputs is timed whole, original against lowered; while the
/// lowered one is slower than 1.02x the original, the delegated regions of the smallest measured
/// gain (half of them, at least one) are taken out and the module is lowered again, replaying
/// the rest. A region taken out is kept with kept_reason::slower_on_backend and both methods'
/// times.
inline torch::jit::Module checked_whole(const backend_list& backends, const torch::jit::Module& module,
                                        const partition_options& options, const std::vector<c10::impl::GenericDict>& specs,
                                        torch::jit::Module lowered) {
  std::optional<delegation_report> report = delegation_report_data_of(lowered);
  if (!report) return lowered;
  for (const auto& example : options.example_inputs) {
    const std::string& method = example.first;
    const std::vector<c10::IValue> arguments(example.second.begin(), example.second.end());
    for (std::size_t previous = std::numeric_limits<std::size_t>::max();;) {
      auto entry = std::find_if(report->methods.begin(), report->methods.end(),
                                [&](const method_delegation& m) { return m.method == method; });
      // Stop when nothing is left to take out, or when taking out did not reduce the regions.
      if (entry == report->methods.end() || entry->regions.empty() || entry->regions.size() >= previous) break;
      previous = entry->regions.size();
      const auto [original_ms, lowered_ms] = time_methods(module, lowered, method, arguments);
      if (lowered_ms <= 1.02 * original_ms) break;
      // Smallest gain first; a region not measured (in an if or loop body) counts as no gain.
      std::vector<std::size_t> order(entry->regions.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      auto gain = [&](std::size_t i) {
        const region_report& r = entry->regions[i];
        return r.backend_ms > 0 && r.torchscript_ms >= 0 ? r.torchscript_ms / r.backend_ms : 1.0;
      };
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return gain(x) < gain(y); });
      const std::size_t dropped = std::max<std::size_t>(1, order.size() / 2);
      std::ostringstream why;
      why.precision(3);
      why << "slower in the method: " << method << " took " << lowered_ms << " ms lowered, " << original_ms
          << " ms as TorchScript; the regions of least measured gain are kept";
      std::vector<bool> drop(entry->regions.size(), false);
      for (std::size_t i = 0; i < dropped; ++i) drop[order[i]] = true;
      std::vector<region_report> remaining;
      for (std::size_t i = 0; i < entry->regions.size(); ++i) {
        region_report& r = entry->regions[i];
        if (!drop[i]) {
          remaining.push_back(std::move(r));
          continue;
        }
        std::ostringstream detail;
        detail.precision(3);
        detail << why.str();
        if (r.backend_ms >= 0) detail << " (alone: " << timing_text(r) << ")";
        entry->kept.push_back({r.kinds.empty() ? std::string() : r.kinds.front(), kept_reason::slower_on_backend, detail.str(),
                               r.location, r.depth, r.submodule, {{r.backend, kept_reason::slower_on_backend, detail.str()}}});
      }
      entry->regions = std::move(remaining);
      partition_options again = options;
      again.measure = false;
      again.replay = *report;
      lowered = lower_partitioned(backends, module, again, specs);
      report = delegation_report_data_of(lowered);
      if (!report) break;
    }
  }
  return lowered;
}

TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with_all(const backend_list& backends, const torch::jit::Module& module,
                                                                const partition_options& options,
                                                                const std::vector<c10::impl::GenericDict>& specs) {
  check_backend_list(backends);
  if (specs.size() != backends.size())
    fail({backends.front()->name(), {}}, "one compile spec per backend: " + std::to_string(backends.size()) + " backends, " +
                                             std::to_string(specs.size()) + " specs");
  for (std::size_t k = 0; k < backends.size(); ++k) check_spec_methods(*backends[k], specs[k], options);
  if (options.choose_order && !options.measure)
    fail({backends.front()->name(), {}}, "choose_order compares measured lowerings: set measure (with example_inputs) too");
  torch::jit::Module lowered = lower_partitioned(backends, module, options, specs);
  if (!options.measure || options.replay || options.example_inputs.empty()) return lowered;
  lowered = checked_whole(backends, module, options, specs, std::move(lowered));
  if (!options.choose_order || backends.size() < 2) return lowered;
  // The list's order against each other backend first (the rest in the list's order), and each
  // backend alone where that gave other backends regions too: each measured and checked as above,
  // then all timed whole, side by side.
  std::vector<torch::jit::Module> candidates{std::move(lowered)};
  for (std::size_t first = 1; first < backends.size(); ++first) {
    backend_list order{backends[first]};
    std::vector<c10::impl::GenericDict> order_specs{specs[first]};
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (k != first) {
        order.push_back(backends[k]);
        order_specs.push_back(specs[k]);
      }
    candidates.push_back(checked_whole(order, module, options, order_specs, lower_partitioned(order, module, options, order_specs)));
  }
  // Each backend alone, where its lowering first in the list gave regions to others too: regions
  // measured faster one by one can be slower together (ShuffleNetV2 on AVX2: onednn's branches
  // beside xnnpack's, one backend's threads waiting while the other's OpenMP threads spin down).
  const std::size_t orders = candidates.size();  // candidate k has backends[k] first
  for (std::size_t k = 0; k < orders; ++k) {
    const std::optional<delegation_report> report = delegation_report_data_of(candidates[k]);
    if (!report) continue;
    const bool mixed = std::any_of(report->methods.begin(), report->methods.end(), [&](const method_delegation& method) {
      return std::any_of(method.regions.begin(), method.regions.end(),
                         [&](const region_report& region) { return region.backend != backends[k]->name(); });
    });
    if (!mixed) continue;
    const backend_list alone{backends[k]};
    const std::vector<c10::impl::GenericDict> alone_specs{specs[k]};
    candidates.push_back(checked_whole(alone, module, options, alone_specs, lower_partitioned(alone, module, options, alone_specs)));
  }
  std::vector<const torch::jit::Module*> timed;
  for (const torch::jit::Module& candidate : candidates) timed.push_back(&candidate);
  std::vector<double> total(candidates.size(), 0.0);
  for (const auto& [method, inputs] : options.example_inputs) {
    const std::vector<double> medians = time_modules(timed, method, inputs);
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += medians[i];
  }
  // The list's own order unless another is faster by more than 2 %.
  const std::size_t fastest = static_cast<std::size_t>(std::min_element(total.begin(), total.end()) - total.begin());
  return std::move(candidates[total[0] <= 1.02 * total[fastest] ? 0 : fastest]);
}

TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with(const backend_lowering& lowering, const torch::jit::Module& module,
                                                            const partition_options& options,
                                                            const c10::impl::GenericDict& spec_by_method) {
  return lower_partially_with_all({&lowering}, module, options, {spec_by_method});
}

}  // namespace detail

}  // namespace torch_delegate
