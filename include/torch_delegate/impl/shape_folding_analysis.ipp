// Definitions for detail/shape_folding.hpp, the analysis half: which values of a method the
// sizes of its arguments determine and which nodes fold (the rules of docs/partial-lowering.md,
// "Shape folding"), shared by partitioning (computed_at_lowering) and the rewrite (fold_shapes,
// shape_folding.ipp).
#pragma once

#include <torch_delegate/detail/shape_folding.hpp>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>
namespace torch_delegate::detail {

namespace shape_folding_rules {

inline bool is_tensor(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::TensorType; }

/// A region's call (a method of a delegate child), or what stands in for one while the method is
/// folded (region_calls_set_aside): alias analysis cannot see into a call and takes it to write to
/// every input and to return what may alias anything, which would leave nothing to fold. A
/// region's backend computes what its nodes compute: it writes to none of its inputs and returns
/// new tensors; the stand-in, a prim::BroadcastSizes (a node alias analysis takes to make new
/// values from its inputs, and one a partitioned method never holds), says so.
inline bool is_call(const torch::jit::Node* node) {
  return node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::BroadcastSizes;
}

/// Whether a value of `type` is or holds a tensor (List[Tensor], Optional[Tensor], a tuple with one).
inline bool holds_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const c10::TypePtr& contained : type->containedTypes())
    if (holds_tensor(contained)) return true;
  return false;
}

/// A tensor's type with the sizes, dtype and device an example run recorded, or nullptr.
inline c10::TensorTypePtr recorded_type(const torch::jit::Value* value) {
  const auto type = value->type()->cast<c10::TensorType>();
  if (!type || !type->sizes().concrete_sizes() || !type->scalarType() || !type->device()) return nullptr;
  return type;
}

/// Whether `node` reads only the size, dtype or device of its input `index` (not its values):
/// x.size(), x.dim(), x.numel(), x.dtype, x.device, and the tensor x.new_zeros(...) takes its
/// options from.
inline bool reads_only_metadata(const torch::jit::Node* node, std::size_t index) {
  if (index != 0) return false;
  static const std::unordered_set<std::string> kinds{"aten::size", "aten::dim",      "aten::numel",    "prim::dtype",
                                                     "prim::device", "aten::new_zeros", "aten::new_ones", "aten::new_full",
                                                     "aten::new_empty"};
  return kinds.count(node->kind().toQualString()) != 0;
}

/// Whether a node of this kind may be computed once at lowering when its inputs are known: an
/// ATen operator or a TorchScript primitive, deterministic, without side effects, not a call,
/// not an attribute's read or write, and reading some input (a node that reads none, such as
/// aten::is_grad_enabled, reads the process's state); a block only an if's or a loop's.
inline bool may_fold_kind(const torch::jit::Node* node) {
  const c10::Symbol kind = node->kind();
  if (!kind.is_aten() && !kind.is_prim()) return false;
  static const std::unordered_set<std::string> never{
      "prim::Constant", "prim::CallMethod", "prim::BroadcastSizes", "prim::CallFunction", "prim::GetAttr", "prim::SetAttr", "prim::Uninitialized",
      "prim::Enter",    "prim::Exit",       "prim::requires_grad", "prim::grad",   "prim::Closure", "prim::fork",
      "prim::PythonOp", "prim::Print",      "prim::RaiseException", "prim::profile", "prim::TypeCheck", "prim::Guard"};
  if (never.count(kind.toQualString())) return false;
  if (node->isNondeterministic() || node->hasSideEffects()) return false;
  // LibTorch 1.13's isNondeterministic lists some schemas only: every node that takes a
  // generator (normal_, bernoulli_, uniform_, ...) draws random numbers, and so do these kinds.
  static const std::unordered_set<std::string> random{
      "aten::rand",      "aten::randn",      "aten::randint",  "aten::randperm", "aten::rand_like",  "aten::randn_like",
      "aten::randint_like", "aten::bernoulli", "aten::bernoulli_", "aten::normal", "aten::normal_",   "aten::uniform_",
      "aten::exponential_", "aten::random_",  "aten::cauchy_",  "aten::log_normal_", "aten::geometric_", "aten::poisson",
      "aten::multinomial", "aten::dropout",   "aten::dropout_", "aten::feature_dropout", "aten::alpha_dropout",
      "aten::feature_alpha_dropout", "aten::rrelu", "aten::rrelu_", "aten::native_dropout"};
  if (random.count(kind.toQualString())) return false;
  if (const c10::FunctionSchema* schema = node->maybeSchema())
    for (const c10::Argument& argument : schema->arguments())
      if (argument.type()->kind() == c10::TypeKind::GeneratorType ||
          (argument.type()->kind() == c10::TypeKind::OptionalType &&
           argument.type()->expectRef<c10::OptionalType>().getElementType()->kind() == c10::TypeKind::GeneratorType))
        return false;
  const bool construct = kind == c10::prim::ListConstruct || kind == c10::prim::TupleConstruct || kind == c10::prim::DictConstruct;
  if (node->inputs().empty() && !construct) return false;
  if (!node->blocks().empty() && kind != c10::prim::If && kind != c10::prim::Loop) return false;
  return true;
}

/// Whether the sizes of what `node` makes may depend on the values of its tensor inputs, not
/// only on their sizes (nonzero, masked_select, unique, ...): such a node ends what the
/// arguments' sizes determine.
inline bool shape_depends_on_values(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> kinds{
      "aten::nonzero",        "aten::nonzero_numpy", "aten::argwhere",    "aten::masked_select", "aten::unique",
      "aten::_unique",        "aten::_unique2",      "aten::unique_dim",  "aten::unique_consecutive",
      "aten::unique_dim_consecutive", "aten::repeat_interleave", "aten::bincount", "aten::item", "aten::tolist",
      "aten::Int",            "aten::Float",         "aten::Bool",        "aten::ScalarImplicit", "aten::IntImplicit",
      "aten::FloatImplicit",  "aten::__is__",        "aten::__isnot__",   "prim::tolist",        "aten::one_hot",
      "aten::tensor_split",   "aten::embedding_bag", "aten::_embedding_bag", "aten::equal",      "aten::allclose",
      "aten::is_nonzero",     "aten::masked_scatter", "aten::nonzero_static", "aten::narrow",    "aten::index_put_",
      "aten::index_put",      "aten::_local_scalar_dense", "aten::resize_", "aten::set_",        "aten::as_strided_"};
  if (kinds.count(node->kind().toQualString())) return true;
  // x[mask]: the sizes of an index by a bool or byte tensor are its number of true elements.
  if (node->kind() == c10::aten::index && node->inputs().size() == 2) {
    const torch::jit::Node* indices = node->input(1)->node();
    if (indices->kind() != c10::prim::ListConstruct) return true;
    for (const torch::jit::Value* index : indices->inputs()) {
      const auto type = index->type()->cast<c10::TensorType>();
      if (!type) continue;  // None: a whole dimension
      if (!type->scalarType() || *type->scalarType() == c10::kBool || *type->scalarType() == c10::kByte) return true;
    }
  }
  if (node->kind() == c10::aten::where && node->inputs().size() == 1) return true;
  return false;
}


/// The analysis of one round: which values the arguments' sizes determine, which nodes of the
/// specialized body fold, and the tensors whose metadata they read.
struct fold_analysis {
  const std::unordered_set<const torch::jit::Node*>& same_either_way;  // ifs whose branches compute the same
  const std::unordered_set<const torch::jit::Node*>& excluded;
  std::unordered_set<const torch::jit::Value*> determined;  // sizes (and dtypes) fixed by the arguments'
  std::unordered_set<const torch::jit::Value*> known;       // values fixed by them (constants, folded)
  std::vector<torch::jit::Node*> folded;                    // the body's top-level nodes that fold, in order
  std::vector<const torch::jit::Value*> roots;              // tensors whose metadata they read, in order
  std::vector<torch::jit::Node*> nested;                    // nodes that fold in the branches of ifs whose condition
                                                            // folds (once the if is inlined, they fold at the top)
  std::unordered_set<const torch::jit::Value*> root_set;
  bool assigns_attributes;                                  // the method has a prim::SetAttr
  torch::jit::AliasDb& alias;
  const std::vector<torch::jit::Node*>& writers;            // the nodes that write to an input, region calls aside
  std::unordered_map<const torch::jit::Value*, bool> written;

  bool is_known(const torch::jit::Value* value) const {
    return known.count(value) || value->node()->kind() == c10::prim::Constant;
  }
  bool is_determined(const torch::jit::Value* value) const { return is_known(value) || determined.count(value); }

  // Whether `node` (at any depth) folds: every input known, or a determined tensor it reads only
  // the metadata of; its blocks' nodes all fold. Records the metadata it reads in `reads`.
  bool folds(torch::jit::Node* node, std::vector<const torch::jit::Value*>& reads) {
    if (excluded.count(node) || !shape_folding_rules::may_fold_kind(node)) return false;
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      const torch::jit::Value* input = node->inputs()[i];
      if (is_known(input)) continue;
      if (shape_folding_rules::reads_only_metadata(node, i) && is_tensor(input) && determined.count(input) && recorded_type(input) &&
          !is_written(input)) {
        reads.push_back(input);
        continue;
      }
      return false;
    }
    for (torch::jit::Block* block : node->blocks()) {
      for (const torch::jit::Value* parameter : block->inputs()) known.insert(parameter);
      for (torch::jit::Node* inner : block->nodes()) {
        if (!folds(inner, reads)) return false;
        for (const torch::jit::Value* output : inner->outputs()) known.insert(output);
      }
    }
    return true;
  }

  // Whether the sizes of what `node` makes are fixed by the arguments': its inputs determined (a
  // list or tuple of them too), its kind not one whose sizes come from values; an if's outputs
  // when its condition is known or both branches compute the same, and each branch's are.
  bool determines(const torch::jit::Node* node) const {
    if (node->kind() == c10::prim::Loop || shape_folding_rules::shape_depends_on_values(node)) return false;
    // A parameter's or buffer's sizes are taken as fixed (as a backend that compiled it takes
    // them), unless the method assigns attributes (self.seen = torch.cat([self.seen, x])).
    if (node->kind() == c10::prim::GetAttr) return !assigns_attributes;
    if (node->kind() == c10::prim::If) {
      if (!is_known(node->input(0)) && !same_either_way.count(node)) return false;
      return true;  // each branch's outputs: checked by the caller
    }
    if (!node->blocks().empty()) return false;
    for (const torch::jit::Value* input : node->inputs())
      if (!is_determined(input) && !(is_call(node) && input == node->input(0))) return false;
    return true;
  }

  // What a node that determines its outputs' sizes makes: its tensors and containers of tensors
  // (a number or bool a node computes from tensors' values is determined only when it folds).
  // A tensor something writes to (an in-place resize or unsqueeze could change its sizes after
  // the example recorded them) is not.
  void determine(const torch::jit::Value* value) {
    if (holds_tensor(value->type())) determined.insert(value);
  }

  // Whether a node other than a region's call writes to `tensor` (its sizes, recorded after the
  // example run, may then not be those a read before the write saw: t.unsqueeze_(0)).
  bool is_written(const torch::jit::Value* tensor) {
    const auto found = written.find(tensor);
    if (found != written.end()) return found->second;
    bool any = false;
    for (torch::jit::Node* writer : writers) any = any || alias.writesToAlias(writer, {tensor});
    written.emplace(tensor, any);
    return any;
  }

  void visit(torch::jit::Block* block, bool top) {
    for (torch::jit::Node* node : block->nodes()) {
      std::vector<const torch::jit::Value*> reads;
      if (node->kind() != c10::prim::Constant && folds(node, reads)) {
        for (const torch::jit::Value* output : node->outputs()) known.insert(output), determined.insert(output);
        if (top) {
          folded.push_back(node);
          for (const torch::jit::Value* read : reads)
            if (root_set.insert(read).second) roots.push_back(read);
        }
        continue;
      }
      // Not folded: its nested blocks may still determine values (a region's choice).
      if (node->kind() == c10::prim::If && determines(node)) {
        for (torch::jit::Block* branch : node->blocks()) visit_determined(branch, is_known(node->input(0)));
        for (std::size_t k = 0; k < node->outputs().size(); ++k) {
          bool every = true;
          for (torch::jit::Block* branch : node->blocks()) every = every && is_determined(branch->outputs()[k]);
          if (every) determine(node->outputs()[k]);
        }
        continue;
      }
      if (determines(node))
        for (const torch::jit::Value* output : node->outputs()) determine(output);
    }
  }

  // Inside a branch that does not fold: which values the arguments determine (nothing folds there).
  void visit_determined(torch::jit::Block* block, bool collect) {
    for (torch::jit::Node* node : block->nodes()) {
      // A number a region's own nodes compute from sizes (its TorchScript path's view sizes) is
      // known there as anywhere: what it sizes is determined.
      std::vector<const torch::jit::Value*> reads;
      if (node->kind() != c10::prim::Constant && folds(node, reads)) {
        for (const torch::jit::Value* output : node->outputs()) known.insert(output), determined.insert(output);
        if (collect) nested.push_back(node);
        continue;
      }
      if (node->kind() == c10::prim::If && determines(node)) {
        for (torch::jit::Block* branch : node->blocks()) visit_determined(branch, collect && is_known(node->input(0)));
        for (std::size_t k = 0; k < node->outputs().size(); ++k) {
          bool every = true;
          for (torch::jit::Block* branch : node->blocks()) every = every && is_determined(branch->outputs()[k]);
          if (every) determine(node->outputs()[k]);
        }
      } else if (determines(node)) {
        for (const torch::jit::Value* output : node->outputs()) determine(output);
      }
    }
  }
};

/// The node of `block` that holds `node` (itself, or the node whose block it is nested in).
inline torch::jit::Node* holder_in(torch::jit::Block* block, torch::jit::Node* node) {
  while (node && node->owningBlock() != block) node = node->owningBlock()->owningNode();
  return node;
}

inline std::size_t count_nodes(torch::jit::Block* block) {
  std::size_t count = 0;
  for (torch::jit::Node* node : block->nodes()) {
    ++count;
    for (torch::jit::Block* nested : node->blocks()) count += count_nodes(nested);
  }
  return count;
}

/// Whether `node` (its nested nodes too) may write to `values`. A region's call is taken to write
/// to none (alias analysis cannot see into it and would say it writes to every input): a region
/// holds no node that writes to its inputs, and its backend computes what those nodes do.
inline bool writes_to(torch::jit::AliasDb& alias, torch::jit::Node* node, const torch::jit::ValueSet& values) {
  if (is_call(node)) return false;
  if (node->blocks().empty()) return alias.writesToAlias(node, values);
  for (torch::jit::Block* block : node->blocks())
    for (torch::jit::Node* inner : block->nodes())
      if (writes_to(alias, inner, values)) return true;
  return false;
}

/// Whether `value`, made in `body`, may reach what `body` returns: itself, or a value that may
/// alias it or contain it (alias analysis) on the way. A region's call is taken to return tensors
/// its backend made (alias analysis cannot see into it and would say every one of its outputs may
/// alias every input): a backend's execute returns new tensors, not its inputs or views of them.
inline bool may_be_returned(torch::jit::AliasDb& alias, torch::jit::Block* body, torch::jit::Value* value) {
  std::vector<torch::jit::Value*> work{value};
  std::unordered_set<torch::jit::Value*> seen{value};
  while (!work.empty()) {
    torch::jit::Value* reached = work.back();
    work.pop_back();
    for (const torch::jit::Use& use : reached->uses()) {
      torch::jit::Node* user = use.user;
      if (is_call(user)) continue;
      if (user == body->return_node()) return true;
      std::vector<torch::jit::Value*> next;
      // Put into a container that is then returned: d["mask"] = mask, l.append(mask).
      for (torch::jit::Value* other : user->inputs())
        if (other != reached && writes_to(alias, user, {other})) next.push_back(other);
      if (user->kind() == c10::prim::Return) {  // a nested block's result: what its if or loop gives
        torch::jit::Node* owner = user->owningBlock()->owningNode();
        if (!owner) return true;
        next.assign(owner->outputs().begin(), owner->outputs().end());
      } else {
        for (torch::jit::Value* output : user->outputs())
          if (alias.mayContainAlias(output, reached)) next.push_back(output);
      }
      for (torch::jit::Value* output : next)
        if (seen.insert(output).second) work.push_back(output);
    }
  }
  return false;
}

/// What `node` reads (its nested nodes' inputs too).
inline torch::jit::ValueSet reads_of(torch::jit::Node* node) {
  torch::jit::ValueSet reads(node->inputs().begin(), node->inputs().end());
  for (torch::jit::Block* block : node->blocks())
    for (torch::jit::Node* inner : block->nodes()) {
      const torch::jit::ValueSet nested = reads_of(inner);
      reads.insert(nested.begin(), nested.end());
    }
  return reads;
}

/// The analysis of `body` (the method's block to fold) once the rules on writes and returns
/// hold: nodes that break them are added to `excluded` and the analysis made again. `boundary`:
/// the values of folded nodes that the rest reads.
inline fold_analysis settled(std::shared_ptr<torch::jit::Graph>& graph, torch::jit::Block* body,
                             const std::unordered_set<const torch::jit::Node*>& choices,
                             const std::unordered_set<const torch::jit::Value*>& guarded,
                             std::unordered_set<const torch::jit::Node*>& excluded, std::vector<torch::jit::Value*>& boundary) {
  torch::jit::AliasDb alias(graph);
  std::vector<torch::jit::Node*> writers;
  bool assigns = false;
  {
    std::shared_ptr<torch::jit::Graph> walked = graph;
    torch::jit::DepthFirstGraphNodeIterator walk(walked);
    for (torch::jit::Node* node = walk.next(); node; node = walk.next()) {
      if (!is_call(node) && node->blocks().empty() && alias.isMutable(node)) writers.push_back(node);
      assigns = assigns || node->kind() == c10::prim::SetAttr;
    }
  }
  for (;;) {
    boundary.clear();
    fold_analysis analysis{choices, excluded, {}, {}, {}, {}, {}, {}, assigns, alias, writers, {}};
    for (const torch::jit::Value* argument : guarded) analysis.determined.insert(argument);
    analysis.determined.insert(graph->inputs()[0]);  // self: its attributes' reads
    analysis.visit(body, true);
    if (analysis.folded.empty()) return analysis;
    const std::unordered_set<const torch::jit::Node*> folded(analysis.folded.begin(), analysis.folded.end());
    // What the folded nodes make at the top, and what everything else in the body is.
    torch::jit::ValueSet made, others;
    for (torch::jit::Node* node : body->nodes())
      for (const torch::jit::Value* output : node->outputs()) (folded.count(node) ? made : others).insert(output);
    for (const torch::jit::Value* input : graph->inputs()) others.insert(input);
    // A folded node may write only to what folded nodes make; nothing else may write to that.
    bool changed = false;
    for (torch::jit::Node* node : analysis.folded)
      if (alias.writesToAlias(node, others)) excluded.insert(node), changed = true;
    for (torch::jit::Node* node : body->nodes()) {
      if (folded.count(node) || !writes_to(alias, node, made)) continue;
      for (const torch::jit::Value* value : made)
        if (writes_to(alias, node, {value})) excluded.insert(value->node()), changed = true;
    }
    // A folded write must come before every read of what it writes by the rest: the rest reads
    // the folded values as they are after all folded nodes (m.fill_(1) after y = x + m).
    for (torch::jit::Node* writer : analysis.folded) {
      if (!writes_to(alias, writer, made)) continue;
      for (torch::jit::Node* node : body->nodes()) {
        if (node == writer) break;
        if (folded.count(node)) continue;
        if (writes_to(alias, writer, reads_of(node))) {
          excluded.insert(writer), changed = true;
          break;
        }
      }
    }
    // The values the rest reads: computed once; a tensor the method could return is not (its
    // caller could write to it).
    for (torch::jit::Node* node : analysis.folded)
      for (torch::jit::Value* output : node->outputs()) {
        bool read_outside = false;
        for (const torch::jit::Use& use : output->uses()) {
          torch::jit::Node* holder = holder_in(body, use.user);
          if (!holder || !folded.count(holder)) read_outside = true;
        }
        if (!read_outside) continue;
        // A tensor the method could return is computed each call, and so is every tensor it is
        // computed from (a node of constants alone would be computed once again, by constant
        // propagation); so is a container of tensors the rest reads (its elements could be
        // written to through it).
        const bool container = holds_tensor(output->type()) && !is_tensor(output);
        if (container || may_be_returned(alias, body, output)) {
          std::vector<torch::jit::Node*> work{node};
          while (!work.empty()) {
            torch::jit::Node* from = work.back();
            work.pop_back();
            if (!excluded.insert(from).second && from != node) continue;
            for (torch::jit::Value* input : from->inputs())
              if (folded.count(input->node()) && holds_tensor(input->type())) work.push_back(input->node());
          }
          changed = true;
          continue;
        }
        boundary.push_back(output);
      }
    if (!changed) return analysis;
  }
}

/// The number of nodes (nested ones too) of `nodes`.
inline std::size_t count_all(const std::vector<torch::jit::Node*>& nodes) {
  std::size_t count = 0;
  for (torch::jit::Node* node : nodes) {
    ++count;
    for (torch::jit::Block* nested : node->blocks()) count += count_nodes(nested);
  }
  return count;
}

}  // namespace shape_folding_rules

TORCH_DELEGATE_INTERNAL std::unordered_set<const torch::jit::Node*> computed_at_lowering(
    const std::shared_ptr<torch::jit::Graph>& canonical, std::size_t min_nodes) {
  using namespace shape_folding_rules;
  std::shared_ptr<torch::jit::Graph> graph = canonical;
  std::unordered_set<const torch::jit::Value*> guarded;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i)
    if (recorded_type(graph->inputs()[i])) guarded.insert(graph->inputs()[i]);
  if (guarded.empty()) return {};
  std::unordered_set<const torch::jit::Node*> excluded;
  std::vector<torch::jit::Value*> boundary;
  const std::unordered_set<const torch::jit::Node*> no_choices;
  const fold_analysis analysis = settled(graph, graph->block(), no_choices, guarded, excluded, boundary);
  if (count_all(analysis.folded) + count_all(analysis.nested) < min_nodes) return {};
  std::unordered_set<const torch::jit::Node*> computed(analysis.folded.begin(), analysis.folded.end());
  computed.insert(analysis.nested.begin(), analysis.nested.end());
  return computed;
}
}  // namespace torch_delegate::detail
