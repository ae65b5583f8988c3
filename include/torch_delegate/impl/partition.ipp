// Definitions for partition.hpp: canonicalize, form regions, rewrite, report.
#pragma once

#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace torch_delegate {

namespace detail {

/// One region: a run of nodes of one block (constants aside) in program order. The nodes between
/// them that stay in TorchScript have no effects and none of the run's later nodes uses what they
/// make, so the region, called where its first node was, is acyclic with respect to the nodes
/// left outside: any path between two of its nodes stays inside it.
struct region {
  std::vector<torch::jit::Node*> nodes;
  std::vector<torch::jit::Node*> hoisted;   // attribute reads among the nodes: moved before the region's call
  std::vector<torch::jit::Value*> inputs;   // made outside, constants excepted, in order of first use
  std::vector<torch::jit::Value*> outputs;  // made inside, used outside
  int depth = 0;
};

/// Replaces each `prim::ListConstruct` of constant ints, floats or bools that only aten operators
/// read (an argument without alias annotation: read, never written, never kept) by a constant
/// list, as TorchScript's constant propagation does not (lists are mutable). Conv's stride,
/// padding and dilation, a view's sizes or a mean's dims then are constants, like a frozen
/// model's weights, and do not end a region.
inline void fold_constant_lists(torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) fold_constant_lists(nested);
    if (node->kind() != c10::prim::ListConstruct) continue;
    const c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
    const c10::TypeKind kind = element->kind();
    if (kind != c10::TypeKind::IntType && kind != c10::TypeKind::FloatType && kind != c10::TypeKind::BoolType) continue;
    const bool constant_elements = std::all_of(node->inputs().begin(), node->inputs().end(), [](const torch::jit::Value* v) {
      return v->node()->kind() == c10::prim::Constant;
    });
    const bool only_read = !node->output()->uses().empty() &&
                           std::all_of(node->output()->uses().begin(), node->output()->uses().end(), [](const torch::jit::Use& use) {
                             if (!use.user->kind().is_aten()) return false;
                             const c10::FunctionSchema* schema = use.user->maybeSchema();
                             return schema && use.offset < schema->arguments().size() &&
                                    schema->arguments()[use.offset].alias_info() == nullptr;
                           });
    if (!constant_elements || !only_read) continue;
    c10::impl::GenericList elements(element);
    for (const torch::jit::Value* input : node->inputs()) elements.push_back(*torch::jit::toIValue(input));
    torch::jit::WithInsertPoint at(node);
    torch::jit::Value* folded = node->owningGraph()->insertConstant(c10::IValue(std::move(elements)), node->sourceRange(), node->scope());
    folded->setType(node->output()->type());
    node->output()->replaceAllUsesWith(folded);
    node->destroy();
  }
}

/// The value whose dtype `value` has for certain: `value` itself, or, through operators whose
/// result has their first input's dtype (a conv, a batch norm, an activation, a pooling, a view),
/// that input's root. Two tensors with one root have one dtype, whatever it is.
inline const torch::jit::Value* dtype_root(const torch::jit::Value* value) {
  static const std::set<std::string> same_dtype_as_input{
      "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::batch_norm", "aten::layer_norm", "aten::group_norm",
      "aten::relu", "aten::relu_", "aten::relu6", "aten::hardtanh", "aten::hardtanh_", "aten::hardswish", "aten::hardswish_",
      "aten::hardsigmoid", "aten::sigmoid", "aten::silu", "aten::gelu", "aten::tanh", "aten::clamp", "aten::clamp_",
      "aten::max_pool2d", "aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::dropout", "aten::contiguous",
      "aten::view", "aten::reshape", "aten::flatten", "aten::permute", "aten::transpose", "aten::add_", "aten::mul_"};
  for (int step = 0; step < 4096; ++step) {
    const torch::jit::Node* maker = value->node();
    if (maker->inputs().empty() || !same_dtype_as_input.count(maker->kind().toQualString())) return value;
    value = maker->input(0);
  }
  return value;
}

/// Whether the in-place `node`'s out-of-place form computes the same values: an activation
/// (`relu_`, `hardtanh_`, ...: one tensor in, the same dtype and shape out), or an add, sub, mul or
/// div of two tensors that have one dtype (dtype_root; ResNet's `out += identity`). Not a
/// comparison (`m.gt_(0.5)` keeps a float tensor where `m.gt(0.5)` makes a bool one), nor a
/// tensor and a number, nor tensors of unknown dtypes (`a.add_(b)` keeps a's dtype where `a + b`
/// promotes). One difference stays: where `a.add_(b)` fails because `b` would broadcast `a`,
/// `a + b` broadcasts; for every input on which the original gives a result, the result is the same.
inline bool out_of_place_is_equivalent(torch::jit::Node* node) {
  static const std::set<std::string> activations{
      "aten::relu_", "aten::relu6_", "aten::hardtanh_", "aten::hardswish_", "aten::hardsigmoid_", "aten::sigmoid_",
      "aten::tanh_", "aten::silu_", "aten::elu_", "aten::leaky_relu_", "aten::gelu_", "aten::mish_", "aten::clamp_"};
  const std::string kind = node->kind().toQualString();
  if (activations.count(kind)) return true;
  static const std::set<std::string> binary{"aten::add_", "aten::sub_", "aten::mul_", "aten::div_"};
  if (!binary.count(kind) || node->inputs().size() < 2) return false;
  const torch::jit::Value* a = node->input(0);
  const torch::jit::Value* b = node->input(1);
  if (!a->type()->isSubtypeOf(*c10::TensorType::get()) || !b->type()->isSubtypeOf(*c10::TensorType::get())) return false;
  const auto a_type = a->type()->expect<c10::TensorType>(), b_type = b->type()->expect<c10::TensorType>();
  if (a_type->scalarType() && b_type->scalarType()) return *a_type->scalarType() == *b_type->scalarType();
  return dtype_root(a) == dtype_root(b);
}

/// The method's graph as partitioning sees it: calls inlined, non-tensor constants and constant
/// lists folded, dead code removed (F.relu's `if inplace:` branch disappears, so it does not
/// block a region), and in-place operators made out-of-place where nothing can observe the write
/// (LibTorch's RemoveTensorMutation, with alias analysis: `hardtanh_` on a conv's fresh output
/// becomes `hardtanh`; a write to an input or to a tensor with a view stays) and where the two
/// forms compute the same (out_of_place_is_equivalent).
inline std::shared_ptr<torch::jit::Graph> canonical_graph(const torch::jit::Module& module, const std::string& method) {
  std::shared_ptr<torch::jit::Graph> graph = inlined_graph(module, method);
  torch::jit::ConstantPropagationImmutableTypes(graph);
  fold_constant_lists(graph->block());
  torch::jit::RemoveTensorMutation(graph, std::function<bool(torch::jit::Node*)>(out_of_place_is_equivalent));
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

/// "encoder.block1": the submodule a node was inlined from, by attribute path ("" for the
/// method's own nodes; calls of the module's own methods add nothing).
inline std::string submodule_path(const torch::jit::Node* node) { return locate_in_model(node).submodule; }

/// The first of `submodules` that is `path` or contains it, or nullptr.
inline const std::string* enclosing_submodule(const std::set<std::string>& submodules, const std::string& path) {
  for (const std::string& submodule : submodules)
    if (path == submodule || path.rfind(submodule + ".", 0) == 0) return &submodule;
  return nullptr;
}

/// "a, b, c"
template <class Names>
std::string comma_separated(const Names& names) {
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}


/// Every path in keep_submodules and lower_submodules names a submodule of `module`.
inline void check_submodule_paths(const partition_backend& backend, const torch::jit::Module& module,
                                  const partition_options& options) {
  std::set<std::string> known;
  for (const torch::jit::NameModule& named : module.named_modules())
    if (!named.name.empty()) known.insert(named.name);
  for (const auto& [knob, paths] : {std::pair{"keep_submodules", &options.keep_submodules},
                                    std::pair{"lower_submodules", &options.lower_submodules}})
    for (const std::string& path : *paths)
      if (!known.count(path))
        fail({backend.name, {}}, std::string(knob) + ": '" + path + "' is not a submodule of " +
                                     module.type()->name()->qualifiedName() + " (its submodules: " +
                                     (known.empty() ? "none" : comma_separated(known)) + ")");
}

/// Whether a value of `type` can pass between TorchScript and a region: a tensor; with a generic
/// execute also a number or bool; and an Optional of those (a stock Conv2d's `self.bias` is an
/// Optional[Tensor]): the region's method takes it as such, a typed execute with a
/// std::optional<at::Tensor> parameter or a generic execute sees a tensor or None. Whether an
/// execute signature takes the region's types is decided when the region is formed.
inline bool crosses_as(const c10::TypePtr& type, bool generic) {
  if (const auto optional = type->cast<c10::OptionalType>()) return crosses_as(optional->getElementType(), generic);
  if (type->isSubtypeOf(*c10::TensorType::get())) return true;
  if (!generic) return false;
  const c10::TypeKind kind = type->kind();
  return kind == c10::TypeKind::IntType || kind == c10::TypeKind::FloatType || kind == c10::TypeKind::BoolType;
}

/// Whether a region that reads `value` gets its own copy of it: a constant that is not a tensor
/// (a number, a list of ints, None), or a zero-dimensional tensor (how tracing records a number).
/// Any other tensor constant (a frozen model's weight, a PReLU's one-element weight) is passed
/// in, as an attribute read is: the region's graph is the same whether the model was frozen or not.
inline bool cloned_into_region(const torch::jit::Value* value) {
  if (value->node()->kind() != c10::prim::Constant) return false;
  if (!value->type()->isSubtypeOf(*c10::TensorType::get())) return true;
  const c10::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isTensor() && constant->toTensor().dim() == 0;
}

inline bool has_generic_execute(std::span<const signature_record> signatures) {
  return std::any_of(signatures.begin(), signatures.end(), [](const signature_record& s) { return s.generic; });
}

struct partitioner {
  const partition_backend& backend;
  const partition_options& options;
  torch::jit::AliasDb alias;
  bool generic;
  std::size_t min_size;
  method_delegation& report;
  std::vector<region> regions;

  partitioner(const partition_backend& b, const partition_options& o, std::shared_ptr<torch::jit::Graph> graph,
              method_delegation& r)
      : backend(b),
        options(o),
        alias(std::move(graph)),
        generic(has_generic_execute(b.signatures)),
        min_size(o.min_region_size ? o.min_region_size : std::max<std::size_t>(b.min_region_size, 1)),
        report(r) {}

  void keep(const torch::jit::Node* node, kept_reason reason, std::string detail, int depth) {
    model_location where = locate_in_model(node);
    report.kept.push_back({node->kind().toQualString(), reason, std::move(detail), std::move(where.line), depth,
                           std::move(where.submodule)});
  }

  /// Why `node` cannot join a region, or nothing.
  std::optional<std::pair<kept_reason, std::string>> refusal(torch::jit::Node* node) {
    const std::string kind = node->kind().toQualString();
    // The user's choice of submodules first: outside the selection, nothing else matters.
    if (!options.keep_submodules.empty() || !options.lower_submodules.empty()) {
      const std::string path = submodule_path(node);
      if (const std::string* submodule = enclosing_submodule(options.keep_submodules, path))
        return std::make_pair(kept_reason::excluded_by_user, "in submodule " + *submodule);
      if (!options.lower_submodules.empty() && !enclosing_submodule(options.lower_submodules, path))
        return std::make_pair(kept_reason::outside_selection, std::string());
    }
    if (!node->blocks().empty()) return std::make_pair(kept_reason::control_flow, std::string());
    if (!backend.supports(node)) {
      // The tuple a method returns its results in packs them; it is no computation.
      const bool packs_results = node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
                                 node->output()->uses()[0].user == node->owningBlock()->return_node();
      return std::make_pair(packs_results ? kept_reason::result_tuple : kept_reason::unsupported_kind, std::string());
    }
    if (options.keep_kinds.count(kind)) return std::make_pair(kept_reason::excluded_by_user, std::string());
    if (alias.isMutable(node)) return std::make_pair(kept_reason::mutation_or_aliasing, std::string("writes to its input"));
    for (const torch::jit::Value* output : node->outputs())
      if (alias.hasWriters(output))
        return std::make_pair(kept_reason::mutation_or_aliasing, "%" + output->debugName() + " is written to later");
    // The types of the values it takes and makes are checked when its run closes: only those
    // that cross the region's boundary must pass (a List[int] made and read inside stays inside).
    return std::nullopt;
  }

  /// The first node of `nodes` (a run) that takes from outside the run, or gives to a node
  /// outside it, a value that cannot cross a region's boundary, with the reason.
  std::optional<std::pair<std::size_t, std::string>> boundary_refusal(const std::vector<torch::jit::Node*>& nodes) const {
    const std::unordered_set<const torch::jit::Node*> inside(nodes.begin(), nodes.end());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      for (const torch::jit::Value* input : nodes[i]->inputs())
        if (!inside.count(input->node()) && !cloned_into_region(input) && !crosses_as(input->type(), generic))
          return std::make_pair(i, input->type()->annotation_str() + " input");
      for (const torch::jit::Value* output : nodes[i]->outputs()) {
        const bool leaves = std::any_of(output->uses().begin(), output->uses().end(),
                                        [&](const torch::jit::Use& use) { return !inside.count(use.user); });
        if (leaves && !crosses_as(output->type(), generic))
          return std::make_pair(i, output->type()->annotation_str() + " output");
      }
    }
    return std::nullopt;
  }

  void close(std::vector<torch::jit::Node*>& run, std::vector<torch::jit::Node*>& reads, int depth) {
    form(std::move(run), std::move(reads), depth);
    run.clear();
    reads.clear();
  }

  /// Makes a region of a closed run. A node whose value that crosses the boundary cannot cross
  /// stays in TorchScript, where it is, and cuts the run in two: the nodes before it and the
  /// nodes after it (each formed the same way). The attribute reads go with the part they
  /// precede.
  void form(std::vector<torch::jit::Node*> run, std::vector<torch::jit::Node*> reads, int depth) {
    if (run.empty()) return;
    if (auto refused = boundary_refusal(run)) {
      torch::jit::Node* cut = run[refused->first];
      keep(cut, kept_reason::boundary_type, std::move(refused->second), depth);
      std::vector<torch::jit::Node*> before(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(refused->first));
      std::vector<torch::jit::Node*> after(run.begin() + static_cast<std::ptrdiff_t>(refused->first) + 1, run.end());
      std::vector<torch::jit::Node*> reads_before, reads_after;
      for (torch::jit::Node* read : reads) (read->isBefore(cut) ? reads_before : reads_after).push_back(read);
      form(std::move(before), std::move(reads_before), depth);
      form(std::move(after), std::move(reads_after), depth);
      return;
    }
    if (run.size() < min_size) {
      for (const torch::jit::Node* node : run)
        keep(node, kept_reason::region_too_small,
             std::to_string(run.size()) + (run.size() == 1 ? " node" : " nodes") + " < " + std::to_string(min_size), depth);
    } else {
      region formed{run, reads, {}, {}, depth};
      const std::unordered_set<const torch::jit::Node*> inside(run.begin(), run.end());
      std::unordered_set<const torch::jit::Value*> seen;
      for (torch::jit::Node* node : run) {
        for (torch::jit::Value* input : node->inputs())
          if (!inside.count(input->node()) && !cloned_into_region(input) && seen.insert(input).second)
            formed.inputs.push_back(input);
        for (torch::jit::Value* output : node->outputs())
          if (std::any_of(output->uses().begin(), output->uses().end(),
                          [&](const torch::jit::Use& use) { return !inside.count(use.user); }))
            formed.outputs.push_back(output);
      }
      regions.push_back(std::move(formed));
    }
  }

  /// Whether a run may continue past `node`, which stays in TorchScript: later nodes that do not
  /// use its values then join the run and are called before it. Only a node without effects may
  /// be passed (no side effects, no writes, nothing written to later, no nested blocks), so the
  /// order of every effect is kept; a node that reads what it produces is passed too.
  bool can_pass(torch::jit::Node* node) {
    if (!node->blocks().empty() || node->hasSideEffects() || alias.isMutable(node)) return false;
    return std::none_of(node->outputs().begin(), node->outputs().end(),
                        [&](const torch::jit::Value* output) { return alias.hasWriters(output); });
  }

  void partition(torch::jit::Block* block, int depth) {
    std::vector<torch::jit::Node*> run;
    std::vector<torch::jit::Node*> reads;              // attribute reads since the run began
    std::unordered_set<const torch::jit::Value*> passed;  // made by nodes the run passed, or from them
    auto restart = [&] {
      close(run, reads, depth);
      passed.clear();
    };
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::prim::Constant) continue;  // cloned into each region that reads it, or passed in
      if (node->kind() == c10::prim::GetAttr) {
        // A weight or attribute read stays in TorchScript and passes its value to the region; it
        // does not end a run: it has no effects, so it can move before the region's call.
        const std::string path = attribute_path(node);
        keep(node, kept_reason::attribute_read, path.empty() ? std::string("an attribute") : path, depth);
        if (!run.empty()) reads.push_back(node);
        continue;
      }
      if (auto refused = refusal(node)) {
        keep(node, refused->first, std::move(refused->second), depth);
        if (!run.empty() && can_pass(node)) {
          // The run goes on past it; what it makes cannot join the run.
          for (const torch::jit::Value* output : node->outputs()) passed.insert(output);
          continue;
        }
        restart();
        for (torch::jit::Block* nested : node->blocks()) partition(nested, depth + 1);
        continue;
      }
      const bool uses_passed = std::any_of(node->inputs().begin(), node->inputs().end(),
                                           [&](const torch::jit::Value* input) { return passed.count(input) > 0; });
      if (uses_passed) restart();  // it must run after a node the run passed: a new run begins with it
      run.push_back(node);
    }
    restart();
  }
};

/// A region as a method of the delegate child: (self, input_0, ...) -> output or a tuple of them.
inline std::shared_ptr<torch::jit::Graph> region_graph(const region& formed, const c10::TypePtr& self_type) {
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

/// "a.b" for "a.b.c" and "a.b.d": the longest common prefix of two attribute paths, by whole names.
inline std::string common_submodule(const std::string& a, const std::string& b) {
  std::size_t common = 0;
  for (std::size_t i = 0;; ++i) {
    const bool end_a = i == a.size() || a[i] == '.', end_b = i == b.size() || b[i] == '.';
    if (end_a && end_b) {
      common = i;
      if (i == a.size() || i == b.size()) break;
    } else if (end_a || end_b || a[i] != b[i]) {
      break;
    }
  }
  return a.substr(0, common);
}

/// Where a region is: the model's own line of its first node that has one (else the first
/// node's line), and the submodule that holds all its nodes.
inline model_location region_location(const std::vector<torch::jit::Node*>& nodes) {
  model_location region;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    model_location where = locate_in_model(nodes[i]);
    if (i == 0) {
      region = std::move(where);
      continue;
    }
    if (!is_model_line(region.line) && is_model_line(where.line)) region.line = where.line;
    region.submodule = common_submodule(region.submodule, where.submodule);
  }
  return region;
}

/// The method's regions, with the report filled in; regions the backend's execute signatures
/// cannot call are dissolved into kept nodes.
inline std::vector<region> form_regions(const partition_backend& backend, const partition_options& options,
                                        const std::shared_ptr<torch::jit::Graph>& graph, const std::string& method,
                                        method_delegation& report) {
  partitioner p(backend, options, graph, report);
  p.partition(graph->block(), 0);
  std::vector<region> accepted;
  for (region& formed : p.regions) {
    // The region's schema must match an execute signature of the backend.
    std::vector<c10::Argument> arguments{c10::Argument("self", c10::AnyType::get())};
    for (std::size_t i = 0; i < formed.inputs.size(); ++i)
      arguments.emplace_back("input_" + std::to_string(i), formed.inputs[i]->type());
    std::vector<c10::TypePtr> output_types;
    for (const torch::jit::Value* output : formed.outputs) output_types.push_back(output->type());
    c10::TypePtr result = output_types.size() == 1 ? output_types[0] : c10::TupleType::create(output_types);
    const c10::FunctionSchema schema("region", "", std::move(arguments), {c10::Argument("", result)});
    try {
      select_signature(backend.signatures, schema, {backend.name, method});
    } catch (const c10::Error&) {
      std::string text = toString(schema.cloneWithName("", ""));
      for (const torch::jit::Node* node : formed.nodes)
        p.keep(node, kept_reason::boundary_type, "no execute signature takes " + text, formed.depth);
      continue;
    }
    if (backend.accepts_region &&
        !backend.accepts_region(std::span<const torch::jit::Node* const>(formed.nodes.data(), formed.nodes.size()))) {
      for (const torch::jit::Node* node : formed.nodes)
        p.keep(node, kept_reason::refused_by_backend, std::to_string(formed.nodes.size()) + "-node region", formed.depth);
      continue;
    }
    model_location where = region_location(formed.nodes);
    region_report entry{method + "_region_" + std::to_string(report.regions.size()), 0, {}, std::move(where.line), formed.depth,
                        std::move(where.submodule)};
    for (const torch::jit::Node* node : formed.nodes) {
      ++entry.node_count;
      const std::string kind = node->kind().toQualString();
      if (std::find(entry.kinds.begin(), entry.kinds.end(), kind) == entry.kinds.end()) entry.kinds.push_back(kind);
    }
    report.regions.push_back(std::move(entry));
    accepted.push_back(std::move(formed));
  }
  return accepted;
}

/// require_full: attribute reads and the nodes outside lower_submodules may stay in TorchScript.
inline void check_full(const partition_options& options, const partition_backend& backend, const method_delegation& report) {
  if (!options.require_full) return;
  std::vector<const kept_node*> kept;
  for (const kept_node& node : report.kept)
    if (node.reason != kept_reason::attribute_read && node.reason != kept_reason::result_tuple &&
        node.reason != kept_reason::outside_selection)
      kept.push_back(&node);
  if (kept.empty()) return;
  const kept_node& first = *kept.front();
  fail({backend.name, report.method},
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

TORCH_DELEGATE_DECL void check_option_methods(std::string_view backend, const std::vector<std::string>& option_methods,
                                              const partition_options& options) {
  for (const std::string& method : option_methods)
    if (std::find(options.methods.begin(), options.methods.end(), method) == options.methods.end())
      fail({backend, method}, "compile options are given for a method that is not partitioned (partition_options::methods: " +
                                  comma_separated(options.methods) + ")");
}

TORCH_DELEGATE_DECL delegation_report partition_report(const partition_backend& backend, const torch::jit::Module& module,
                                                       const partition_options& options) {
  check_submodule_paths(backend, module, options);
  delegation_report report{std::string(backend.name), module.type()->name()->qualifiedName(), {}};
  for (const std::string& method : options.methods) {
    schema_of(module, method, {backend.name, method});
    method_delegation entry{method, {}, {}};
    form_regions(backend, options, canonical_graph(module, method), method, entry);
    check_full(options, backend, entry);
    report.methods.push_back(std::move(entry));
  }
  return report;
}

TORCH_DELEGATE_DECL torch::jit::Module lower_partitioned(const partition_backend& backend, const torch::jit::Module& module,
                                                         const partition_options& options,
                                                         const lower_regions_function& lower_regions) {
  check_submodule_paths(backend, module, options);
  // A copy with new class types that shares every parameter, buffer and attribute value.
  torch::jit::Module result = module.clone(/*inplace=*/true);
  delegation_report report{std::string(backend.name), module.type()->name()->qualifiedName(), {}};
  // First every method's regions, then one child module holding the regions of all methods,
  // lowered once (one backend object, one payload: named data shared by every region), then
  // each method rewritten to call its regions on it.
  struct partitioned_method {
    std::string method;
    std::shared_ptr<torch::jit::Graph> graph;
    std::vector<region> regions;
    method_delegation entry;
  };
  std::vector<partitioned_method> partitioned;
  for (const std::string& method : options.methods) {
    schema_of(result, method, {backend.name, method});
    std::shared_ptr<torch::jit::Graph> graph = canonical_graph(result, method);
    method_delegation entry{method, {}, {}};
    std::vector<region> regions = form_regions(backend, options, graph, method, entry);
    check_full(options, backend, entry);
    partitioned.push_back({method, std::move(graph), std::move(regions), std::move(entry)});
  }
  const std::string attribute = "__delegate";
  torch::jit::Module child("__torch__.torch_delegate.Regions." + std::string(backend.name));
  std::map<std::string, std::string> method_of_region;
  for (const partitioned_method& p : partitioned)
    for (std::size_t i = 0; i < p.regions.size(); ++i) {
      auto function = child._ivalue()->compilation_unit()->create_function(
          c10::QualifiedName(*child.type()->name(), p.entry.regions[i].name), region_graph(p.regions[i], child.type()));
      child.type()->addMethod(function);
      method_of_region.emplace(p.entry.regions[i].name, p.method);
    }
  if (!method_of_region.empty())
    result.register_module(attribute, lower_regions(child, method_of_region, options.fallback_when_unavailable));

  for (partitioned_method& p : partitioned) {
    const std::string& method = p.method;
    const std::shared_ptr<torch::jit::Graph>& graph = p.graph;
    const std::vector<region>& regions = p.regions;
    method_delegation& entry = p.entry;
    if (!regions.empty()) {
      // With fallback, the method asks once, on entry, whether the regions can run in the backend.
      torch::jit::Value* available = nullptr;
      if (options.fallback_when_unavailable) {
        torch::jit::WithInsertPoint at_entry(graph->block()->nodes().front());
        torch::jit::Value* delegate = graph->insertGetAttr(graph->inputs()[0], attribute);
        torch::jit::Node* ask = graph->insertNode(graph->create(c10::prim::CallMethod, {delegate}, 1));
        ask->s_(c10::attr::name, "td_is_available");
        ask->output()->setType(c10::BoolType::get());
        available = ask->output();
      }

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
        // With fallback: if available: <call the region> else: <the region's own nodes>.
        torch::jit::Node* choice = nullptr;
        if (available) {
          choice = graph->create(c10::prim::If, {available}, 0);
          choice->insertBefore(formed.nodes.front());
          choice->addBlock();
          choice->addBlock();
        }
        torch::jit::WithInsertPoint insert(choice ? choice->blocks()[0]->return_node() : formed.nodes.front());
        torch::jit::Value* delegate = graph->insertGetAttr(graph->inputs()[0], attribute);
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
      torch::jit::EliminateDeadCode(graph);

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

TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with(const backend_lowering& lowering, const torch::jit::Module& module,
                                                            const partition_options& options,
                                                            const c10::impl::GenericDict& spec_by_method) {
  if (!lowering.partitions)
    fail({lowering.name, {}}, "this backend cannot lower partially: it declares no 'static bool supports(const "
                              "torch::jit::Node*)' (docs/partial-lowering.md); lower whole methods instead");
  std::vector<std::string> option_methods;
  for (const auto& entry : spec_by_method) {
    if (!entry.key().isString())
      fail({lowering.name, {}}, "the compile spec's keys must be method names (str), got " + entry.key().type()->annotation_str());
    option_methods.push_back(entry.key().toStringRef());
  }
  check_option_methods(lowering.name, option_methods, options);
  return lower_partitioned(
      lowering.partition, module, options,
      [&](const torch::jit::Module& regions, const std::map<std::string, std::string>& method_of_region, bool fallback_when_unavailable) {
        c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
        for (const auto& region : regions.get_methods()) {
          const auto given = spec_by_method.find(method_of_region.at(region.name()));
          spec.insert(region.name(), given == spec_by_method.end() ? lowering.default_spec() : given->value());
        }
        return lower_methods(lowering, regions, spec, fallback_when_unavailable, nullptr);
      });
}

}  // namespace detail

}  // namespace torch_delegate
