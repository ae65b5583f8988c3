// Definitions for detail/regions.hpp: a canonical graph's regions for a backend, and why every
// other node stays in TorchScript. Reads the graph; changes nothing.
#pragma once

#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/partition.hpp>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_set>

namespace torch_delegate::detail {


/// "encoder.block1": the submodule a node was inlined from, by attribute path ("" for the
/// method's own nodes; calls of the module's own methods add nothing).
inline std::string submodule_path(const torch::jit::Node* node) { return locate_in_model(node).submodule; }

/// The first of `submodules` that is `path` or contains it, or nullptr.
inline const std::string* enclosing_submodule(const std::set<std::string>& submodules, const std::string& path) {
  for (const std::string& submodule : submodules)
    if (path == submodule || path.rfind(submodule + ".", 0) == 0) return &submodule;
  return nullptr;
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
/// in, as an attribute read is: the region's graph is the same whether the model was frozen or
/// not. A backend that owns its parameters (B::owns_parameters) gets every constant.
inline bool cloned_into_region(const torch::jit::Value* value, bool owns_parameters) {
  if (value->node()->kind() != c10::prim::Constant) return false;
  if (owns_parameters || !value->type()->isSubtypeOf(*c10::TensorType::get())) return true;
  const c10::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isTensor() && constant->toTensor().dim() == 0;
}

TORCH_DELEGATE_INTERNAL bool owned_attribute(const torch::jit::Value* value) {
  if (value->node()->kind() != c10::prim::GetAttr) return false;
  const c10::TypePtr& type = value->type();
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType: return true;
    case c10::TypeKind::ListType: {
      const c10::TypeKind element = type->containedType(0)->kind();
      return element == c10::TypeKind::IntType || element == c10::TypeKind::FloatType || element == c10::TypeKind::BoolType;
    }
    default: return false;
  }
}

inline bool has_generic_execute(std::span<const signature_record> signatures) {
  return std::any_of(signatures.begin(), signatures.end(), [](const signature_record& s) { return s.generic; });
}

struct partitioner {
  const backend_lowering& backend;
  const partition_options& options;
  torch::jit::AliasDb alias;
  bool generic;
  std::size_t min_size;
  method_delegation& report;
  const std::unordered_set<const torch::jit::Node*>* taken;
  std::vector<const torch::jit::Node*>* kept_nodes;
  const std::unordered_set<const torch::jit::Node*>* computed = nullptr;  // shape folding computes these at lowering
  std::vector<region> regions;

  partitioner(const backend_lowering& b, const partition_options& o, std::shared_ptr<torch::jit::Graph> graph,
              method_delegation& r, const std::unordered_set<const torch::jit::Node*>* t,
              std::vector<const torch::jit::Node*>* k)
      : backend(b),
        options(o),
        alias(std::move(graph)),
        generic(has_generic_execute(b.signatures())),
        min_size(o.min_region_size ? o.min_region_size : std::max<std::size_t>(b.partition.min_region_size, 1)),
        report(r),
        taken(t),
        kept_nodes(k) {}

  void keep(const torch::jit::Node* node, kept_reason reason, std::string detail, int depth) {
    model_location where = locate_in_model(node);
    std::vector<backend_reason> per_backend{{std::string(backend.name()), reason, detail}};
    report.kept.push_back({node->kind().toQualString(), reason, std::move(detail), std::move(where.line), depth,
                           std::move(where.submodule), std::move(per_backend)});
    if (kept_nodes) kept_nodes->push_back(node);
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
    // A tensor shape folding computes once (Swin's attention mask): a backend would compute it
    // on every call. (Numbers stay: a region computes its own from its inputs' sizes; so do the
    // 0-dim tensors a trace holds numbers in, prim::NumToTensor's.)
    const auto array = [](const torch::jit::Value* output) {
      const auto type = output->type()->cast<c10::TensorType>();
      return type && !(type->dim() && *type->dim() == 0);  // (a nested node's has no recorded rank)
    };
    if (computed && computed->count(node) && node->kind() != c10::prim::NumToTensor &&
        std::any_of(node->outputs().begin(), node->outputs().end(), array))
      return std::make_pair(kept_reason::computed_at_lowering, std::string("from the example inputs' shapes"));
    if (!node->blocks().empty()) return std::make_pair(kept_reason::control_flow, std::string());
    if (!backend.partition.supports(node)) {
      // The tuple a method returns its results in packs them; it is no computation.
      const bool packs_results = node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
                                 node->output()->uses()[0].user == node->owningBlock()->return_node();
      return std::make_pair(packs_results ? kept_reason::result_tuple : kept_reason::unsupported_kind, std::string());
    }
    if (options.keep_kinds.count(kind)) return std::make_pair(kept_reason::excluded_by_user, std::string());
    if (alias.isMutable(node)) return std::make_pair(kept_reason::mutation_or_aliasing, std::string("writes to its input"));
    if (!makes_new_tensors(node))
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
        if (!inside.count(input->node()) && !cloned_into_region(input, backend.partition.owns_parameters) &&
            !crosses_as(input->type(), generic) && !(backend.partition.owns_parameters && owned_attribute(input)))
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

  /// Takes out of `run` the nodes that compute numbers from numbers and constants alone (no
  /// tensor in or out) for nodes outside the run only: the next layer's `n = ws[0] * ws[1]`, which
  /// the graph's order reaches before the node that reads it. They stay in TorchScript where they
  /// are; the region would otherwise compute them for nothing but to return them.
  void prune_numbers_read_outside(std::vector<torch::jit::Node*>& run, int depth) {
    for (bool pruned = true; pruned;) {
      pruned = false;
      const std::unordered_set<const torch::jit::Node*> inside(run.begin(), run.end());
      for (auto it = run.begin(); it != run.end(); ++it) {
        torch::jit::Node* node = *it;
        const auto tensor = [](const torch::jit::Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; };
        if (node->outputs().empty() || std::any_of(node->inputs().begin(), node->inputs().end(), tensor) ||
            std::any_of(node->outputs().begin(), node->outputs().end(), tensor))
          continue;
        const bool read_inside = std::any_of(node->outputs().begin(), node->outputs().end(), [&](const torch::jit::Value* output) {
          return std::any_of(output->uses().begin(), output->uses().end(), [&](const torch::jit::Use& use) { return inside.count(use.user) > 0; });
        });
        if (read_inside) continue;
        keep(node, kept_reason::boundary_type, "a number that only nodes outside the region read", depth);
        run.erase(it);
        pruned = true;
        break;
      }
    }
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
    prune_numbers_read_outside(run, depth);
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
      region formed{run, reads, {}, {}, depth, {}};
      const std::unordered_set<const torch::jit::Node*> inside(run.begin(), run.end());
      std::unordered_set<const torch::jit::Value*> seen;
      for (torch::jit::Node* node : run) {
        for (torch::jit::Value* input : node->inputs())
          if (!inside.count(input->node()) && !cloned_into_region(input, backend.partition.owns_parameters) && seen.insert(input).second)
            formed.inputs.push_back(input);
        for (torch::jit::Value* output : node->outputs())
          if (std::any_of(output->uses().begin(), output->uses().end(),
                          [&](const torch::jit::Use& use) { return !inside.count(use.user); }))
            formed.outputs.push_back(output);
      }
      regions.push_back(std::move(formed));
    }
  }

  /// Whether every value `node` reads is a constant, an attribute read or made from those alone
  /// by kept nodes (`from_attributes`): nothing a run made, nothing computed from the method's
  /// inputs. (Not any value made before the run: pointwise_fusion's regions, one iteration space
  /// each, would then take ShuffleNetV2's two branches, 56x56 and 28x28, as one.)
  static bool reads_attributes_alone(const torch::jit::Node* node, const std::unordered_set<const torch::jit::Value*>& from_attributes) {
    return std::all_of(node->inputs().begin(), node->inputs().end(), [&](const torch::jit::Value* input) {
      const torch::jit::Node* maker = input->node();
      return maker->kind() == c10::prim::Constant || maker->kind() == c10::prim::GetAttr || from_attributes.count(input) > 0;
    });
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
    std::vector<torch::jit::Node*> reads;              // attribute reads since the run began, and nodes hoisted with them
    std::unordered_set<const torch::jit::Value*> passed;  // made by nodes the run passed, or from them
    std::unordered_set<const torch::jit::Value*> from_attributes;  // made by kept nodes from attributes and constants alone
    std::unordered_set<const torch::jit::Value*> hoisted_here;     // made by the kept nodes hoisted before this run's call
    auto restart = [&] {
      close(run, reads, depth);
      passed.clear();
      hoisted_here.clear();
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
      if (taken && taken->count(node)) {
        // In an earlier backend's region: called there, as a node kept here would be.
        if (!run.empty() && can_pass(node)) {
          for (const torch::jit::Value* output : node->outputs()) passed.insert(output);
          continue;
        }
        restart();
        continue;
      }
      if (auto refused = refusal(node)) {
        keep(node, refused->first, std::move(refused->second), depth);
        if (run.empty() && can_pass(node) && reads_attributes_alone(node, from_attributes))
          for (const torch::jit::Value* output : node->outputs()) from_attributes.insert(output);  // a later run may hoist its readers
        if (!run.empty() && can_pass(node)) {
          if (reads_attributes_alone(node, from_attributes)) {
            // Computed from attributes and constants alone (Swin V2's `clamp(self.logit_scale)
            // .exp()` after its queries' norm): it moves before the region's call with the
            // attribute reads, and the run goes on, the nodes that read it too.
            for (const torch::jit::Value* output : node->outputs()) from_attributes.insert(output), hoisted_here.insert(output);
            reads.push_back(node);
            continue;
          }
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
      // A node that reads a hoisted value and nothing the run made would start a chain of its own
      // in the region (Swin V2's bias MLP on its table beside the block's tokens; pointwise_fusion's
      // regions are one iteration space): a new run begins with it, as before hoisting.
      const bool detached =
          std::any_of(node->inputs().begin(), node->inputs().end(), [&](const torch::jit::Value* input) { return hoisted_here.count(input) > 0; }) &&
          std::none_of(node->inputs().begin(), node->inputs().end(),
                       [&](const torch::jit::Value* input) { return std::find(run.begin(), run.end(), input->node()) != run.end(); });
      if (uses_passed || detached) restart();  // it must run after a node the run passed: a new run begins with it
      run.push_back(node);
    }
    restart();
  }
};

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

TORCH_DELEGATE_DECL std::vector<region> form_regions(const backend_lowering& backend, const partition_options& options,
                                        const std::shared_ptr<torch::jit::Graph>& graph, const std::string& method,
                                        method_delegation& report, const std::unordered_set<const torch::jit::Node*>* taken,
                                        std::vector<const torch::jit::Node*>* kept_nodes,
                                        const std::unordered_set<const torch::jit::Node*>* computed) {
  partitioner p(backend, options, graph, report, taken, kept_nodes);
  p.computed = computed;
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
      select_signature(backend.signatures(), schema, {backend.name(), method});
    } catch (const c10::Error&) {
      std::string text = toString(schema.cloneWithName("", ""));
      for (const torch::jit::Node* node : formed.nodes)
        p.keep(node, kept_reason::boundary_type, "no execute signature takes " + text, formed.depth);
      continue;
    }
    if (backend.partition.accepts_region) {
      const region_verdict verdict =
          backend.partition.accepts_region(std::span<const torch::jit::Node* const>(formed.nodes.data(), formed.nodes.size()));
      if (!verdict.accepted) {
        std::string why = std::to_string(formed.nodes.size()) + "-node region";
        if (!verdict.reason.empty()) why += ": " + verdict.reason;
        for (const torch::jit::Node* node : formed.nodes) p.keep(node, kept_reason::refused_by_backend, why, formed.depth);
        continue;
      }
    }
    model_location where = region_location(formed.nodes);
    region_report entry;
    entry.name = names::region_method(method, report.regions.size());
    entry.location = std::move(where.line);
    entry.depth = formed.depth;
    entry.submodule = std::move(where.submodule);
    entry.backend = std::string(backend.name());
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

}  // namespace torch_delegate::detail
