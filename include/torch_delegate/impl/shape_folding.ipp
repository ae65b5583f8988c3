// Definitions for detail/shape_folding.hpp.
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
  static const std::unordered_set<std::string> kinds{"aten::size", "aten::dim",     "aten::numel",    "prim::dtype",
                                                     "prim::device", "prim::layout", "aten::new_zeros", "aten::new_ones",
                                                     "aten::new_full", "aten::new_empty"};
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
      "prim::Constant", "prim::CallMethod", "prim::CallFunction", "prim::GetAttr", "prim::SetAttr", "prim::Uninitialized",
      "prim::Enter",    "prim::Exit",       "prim::requires_grad", "prim::grad",   "prim::Closure", "prim::fork",
      "prim::PythonOp", "prim::Print",      "prim::RaiseException", "prim::profile", "prim::TypeCheck", "prim::Guard"};
  if (never.count(kind.toQualString())) return false;
  if (node->isNondeterministic() || node->hasSideEffects()) return false;
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
      "aten::FloatImplicit",  "aten::__is__",        "aten::__isnot__"};
  if (kinds.count(node->kind().toQualString())) return true;
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
  std::unordered_set<const torch::jit::Value*> root_set;

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
      if (shape_folding_rules::reads_only_metadata(node, i) && is_tensor(input) && determined.count(input) && recorded_type(input)) {
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
    if (node->kind() == c10::prim::If) {
      if (!is_known(node->input(0)) && !same_either_way.count(node)) return false;
      return true;  // each branch's outputs: checked by the caller
    }
    if (!node->blocks().empty()) return false;
    for (const torch::jit::Value* input : node->inputs())
      if (!is_determined(input) && !input->type()->cast<c10::ClassType>()) return false;
    return true;
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
        for (torch::jit::Block* branch : node->blocks()) visit_determined(branch);
        for (std::size_t k = 0; k < node->outputs().size(); ++k) {
          bool every = true;
          for (torch::jit::Block* branch : node->blocks()) every = every && is_determined(branch->outputs()[k]);
          if (every) determined.insert(node->outputs()[k]);
        }
        continue;
      }
      if (determines(node))
        for (const torch::jit::Value* output : node->outputs()) determined.insert(output);
    }
  }

  // Inside a branch that does not fold: which values the arguments determine (nothing folds there).
  void visit_determined(torch::jit::Block* block) {
    for (torch::jit::Node* node : block->nodes()) {
      if (node->kind() == c10::prim::If && determines(node)) {
        for (torch::jit::Block* branch : node->blocks()) visit_determined(branch);
        for (std::size_t k = 0; k < node->outputs().size(); ++k) {
          bool every = true;
          for (torch::jit::Block* branch : node->blocks()) every = every && is_determined(branch->outputs()[k]);
          if (every) determined.insert(node->outputs()[k]);
        }
      } else if (determines(node)) {
        for (const torch::jit::Value* output : node->outputs()) determined.insert(output);
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
  if (node->kind() == c10::prim::CallMethod) return false;
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
      if (user->kind() == c10::prim::CallMethod) continue;
      if (user == body->return_node()) return true;
      std::vector<torch::jit::Value*> next;
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

/// A bool: whether the graph's tensor arguments have the dtypes, sizes and devices of their
/// recorded types (the example's), inserted where the insert point is; nullptr: none is recorded.
inline torch::jit::Value* arguments_match(torch::jit::Graph& graph, std::unordered_set<const torch::jit::Value*>& guarded) {
  torch::jit::Value* all = nullptr;
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) {
    torch::jit::Value* argument = graph.inputs()[i];
    const c10::TensorTypePtr type = recorded_type(argument);
    if (!type) continue;
    guarded.insert(argument);
    const std::vector<std::int64_t> sizes = *type->sizes().concrete_sizes();
    torch::jit::Value* same = graph.insert(c10::aten::eq, {graph.insert(c10::aten::size, {argument}), graph.insertConstant(sizes)});
    torch::jit::Value* dtype = graph.insert(c10::prim::dtype, {argument});
    same = graph.insert(c10::aten::__and__,
                        {same, graph.insert(c10::aten::eq, {dtype, graph.insertConstant(static_cast<std::int64_t>(*type->scalarType()))})});
    torch::jit::Value* device = graph.insert(c10::prim::device, {argument});
    same = graph.insert(c10::aten::__and__, {same, graph.insert(c10::aten::eq, {device, graph.insertConstant(*type->device())})});
    all = all ? graph.insert(c10::aten::__and__, {all, same}) : same;
  }
  return all;
}

/// The nodes of `a` and of its copy `b`, pair by pair (the same structure).
inline void zip_nodes(torch::jit::Block* a, torch::jit::Block* b,
                      const std::function<void(torch::jit::Node*, torch::jit::Node*)>& each) {
  auto x = a->nodes().begin();
  auto y = b->nodes().begin();
  for (; x != a->nodes().end() && y != b->nodes().end(); ++x, ++y) {
    each(*x, *y);
    for (std::size_t k = 0; k < x->blocks().size() && k < y->blocks().size(); ++k) zip_nodes(x->blocks()[k], y->blocks()[k], each);
  }
}

/// The int a constant value holds (an absent one: `absent`), or nullopt when it is not one.
inline std::optional<std::int64_t> constant_int(const torch::jit::Value* value, std::optional<std::int64_t> absent) {
  const c10::optional<c10::IValue> known = torch::jit::toIValue(value);
  if (!known) return std::nullopt;
  if (known->isNone()) return absent;
  if (known->isInt()) return known->toInt();
  return std::nullopt;
}

/// What the folded constants make into whole copies, in the specialized body: a slice of a whole
/// dimension (Swin's `x[:, :H, :W, :]` after a padding of zero) is its input, a view of all of
/// it; a padding by zero on every side (`F.pad` at a size that needs none) copies its input, and
/// becomes `contiguous()` of it (no copy where it is contiguous) where nothing writes to either
/// and the method cannot return it (its caller would get its own argument back).
inline void drop_whole_copies(std::shared_ptr<torch::jit::Graph>& graph, torch::jit::Block* body) {
  torch::jit::AliasDb alias(graph);
  std::vector<torch::jit::Node*> done;
  for (torch::jit::Node* node : body->nodes()) {
    const c10::TensorTypePtr type = recorded_type(node->inputs().empty() ? node->output(0) : node->input(0));
    if (!type || node->outputs().size() != 1) continue;
    const std::vector<std::int64_t> sizes = *type->sizes().concrete_sizes();
    if (node->kind() == c10::aten::slice && node->inputs().size() == 5 && is_tensor(node->input(0))) {
      const auto rank = static_cast<std::int64_t>(sizes.size());
      std::optional<std::int64_t> dim = constant_int(node->input(1), std::nullopt);
      const std::optional<std::int64_t> start = constant_int(node->input(2), 0), end = constant_int(node->input(3), INT64_MAX),
                                        step = constant_int(node->input(4), 1);
      if (!dim || !start || !end || !step || *dim < -rank || *dim >= rank) continue;
      if (*dim < 0) *dim += rank;
      if (*start != 0 || *step != 1 || *end < sizes[static_cast<std::size_t>(*dim)]) continue;
      node->output()->replaceAllUsesWith(node->input(0));
      done.push_back(node);
    } else if (node->kind() == c10::aten::constant_pad_nd && node->inputs().size() == 3) {
      const c10::optional<c10::IValue> pads = torch::jit::toIValue(node->input(1));
      if (!pads || !pads->isIntList()) continue;
      const std::vector<std::int64_t> amounts = pads->toIntVector();
      if (std::any_of(amounts.begin(), amounts.end(), [](std::int64_t amount) { return amount != 0; })) continue;
      const torch::jit::ValueSet both{node->input(0), node->output()};
      if (std::any_of(body->nodes().begin(), body->nodes().end(), [&](torch::jit::Node* other) { return writes_to(alias, other, both); }) ||
          may_be_returned(alias, body, node->output()))
        continue;
      torch::jit::WithInsertPoint at(node);
      torch::jit::Value* whole = graph->insert(c10::aten::contiguous, {node->input(0)});
      whole->setType(node->output()->type());
      node->output()->replaceAllUsesWith(whole);
      done.push_back(node);
    }
  }
  for (torch::jit::Node* node : done) node->destroy();
}

}  // namespace shape_folding_rules

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> fold_shapes(const std::shared_ptr<torch::jit::Graph>& original,
                                                                       const std::unordered_set<const torch::jit::Node*>& same_either_way,
                                                                       std::size_t min_nodes, shape_folding& result) {
  using namespace shape_folding_rules;
  result = {};
  std::shared_ptr<torch::jit::Graph> graph = original->copy();
  torch::jit::Block* top = graph->block();
  const std::vector<torch::jit::Node*> nodes(top->nodes().begin(), top->nodes().end());
  if (nodes.empty()) return nullptr;
  // The ifs whose branches compute the same, in the copy.
  std::unordered_set<const torch::jit::Node*> choices;
  zip_nodes(original->block(), top, [&](torch::jit::Node* x, torch::jit::Node* y) {
    if (same_either_way.count(x)) choices.insert(y);
  });

  // if <arguments match>: <a copy, to fold> else: <the method as it was>
  std::unordered_set<const torch::jit::Value*> guarded;
  torch::jit::Node* choice = nullptr;
  {
    torch::jit::WithInsertPoint at_start(nodes.front());
    torch::jit::Value* match = arguments_match(*graph, guarded);
    if (!match) return nullptr;
    choice = graph->create(c10::prim::If, {match}, 0);
    choice->insertBefore(nodes.front());
  }
  torch::jit::Block* body = choice->addBlock();
  torch::jit::Block* as_was = choice->addBlock();
  for (torch::jit::Node* node : nodes) node->moveBefore(as_was->return_node());
  std::unordered_map<torch::jit::Value*, torch::jit::Value*> copied;
  for (torch::jit::Node* node : nodes) {
    torch::jit::Node* copy = graph->createClone(node, [&](torch::jit::Value* v) {
      const auto found = copied.find(v);
      return found == copied.end() ? v : found->second;
    });
    body->appendNode(copy);
    for (std::size_t k = 0; k < node->outputs().size(); ++k) copied[node->outputs()[k]] = copy->outputs()[k];
  }
  std::unordered_set<const torch::jit::Node*> body_choices;
  zip_nodes(as_was, body, [&](torch::jit::Node* x, torch::jit::Node* y) {
    if (choices.count(x)) body_choices.insert(y);
  });
  for (std::size_t i = 0; i < graph->outputs().size(); ++i) {
    torch::jit::Value* output = graph->outputs()[i];
    const auto found = copied.find(output);
    body->registerOutput(found == copied.end() ? output : found->second);
    as_was->registerOutput(output);
    choice->addOutput()->setType(output->type());
    graph->return_node()->replaceInput(i, choice->outputs()[i]);
  }
  const std::size_t before = count_nodes(body);

  std::unordered_set<const torch::jit::Node*> excluded;
  for (int round = 0; round < 16; ++round) {
    torch::jit::AliasDb alias(graph);
    fold_analysis analysis{body_choices, excluded, {}, {}, {}, {}, {}};
    for (const torch::jit::Value* argument : guarded) analysis.determined.insert(argument);
    analysis.determined.insert(graph->inputs()[0]);  // self: its attributes' reads
    analysis.visit(body, true);
    if (analysis.folded.empty()) break;
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
    // The values the rest reads: computed once; a tensor the method could return is not (its
    // caller could write to it).
    std::vector<torch::jit::Value*> boundary;
    for (torch::jit::Node* node : analysis.folded)
      for (torch::jit::Value* output : node->outputs()) {
        bool read_outside = false;
        for (const torch::jit::Use& use : output->uses()) {
          torch::jit::Node* holder = holder_in(body, use.user);
          if (!holder || !folded.count(holder)) read_outside = true;
        }
        if (!read_outside) continue;
        if (may_be_returned(alias, body, output)) {
          excluded.insert(node), changed = true;
          continue;
        }
        boundary.push_back(output);
      }
    if (changed) continue;

    // Computed on stand-ins: tensors of the recorded sizes, dtypes and devices, whose values the
    // folded nodes do not read.
    auto evaluated = std::make_shared<torch::jit::Graph>();
    std::unordered_map<torch::jit::Value*, torch::jit::Value*> env;
    torch::jit::Stack stack;
    for (const torch::jit::Value* root : analysis.roots) {
      const c10::TensorTypePtr type = recorded_type(root);
      env[const_cast<torch::jit::Value*>(root)] = evaluated->addInput()->setType(root->type());
      stack.emplace_back(at::empty(*type->sizes().concrete_sizes(), at::TensorOptions().dtype(*type->scalarType()).device(*type->device())));
    }
    const auto map = [&](torch::jit::Value* v) -> torch::jit::Value* {
      const auto found = env.find(v);
      if (found != env.end()) return found->second;
      if (v->node()->kind() == c10::prim::Constant) {
        torch::jit::WithInsertPoint at_end(evaluated->block());
        torch::jit::Value* constant = evaluated->insertConstant(*torch::jit::toIValue(v));
        constant->setType(v->type());
        env[v] = constant;
        return constant;
      }
      return v;  // not reached: a folded node reads nothing else
    };
    for (torch::jit::Node* node : analysis.folded) {
      for (torch::jit::Value* input : node->inputs()) map(input);
      torch::jit::Node* copy = evaluated->createClone(node, map);
      evaluated->appendNode(copy);
      for (std::size_t k = 0; k < node->outputs().size(); ++k) env[node->outputs()[k]] = copy->outputs()[k];
    }
    for (torch::jit::Value* value : boundary) evaluated->registerOutput(env.at(value));
    try {
      c10::NoGradGuard no_grad;
      torch::jit::Code code(evaluated, "shape folding");
      torch::jit::InterpreterState(code).run(stack);
    } catch (const std::exception&) {
      // What the example run computed without error fails here only if it read a stand-in's
      // values after all: nothing is folded.
      return nullptr;
    }
    // Each value the rest reads becomes a constant at the start of the body.
    std::vector<torch::jit::Value*> constants;
    {
      torch::jit::WithInsertPoint at_start(body->nodes().front());
      for (std::size_t i = 0; i < boundary.size(); ++i) {
        c10::IValue value = stack[i];
        if (value.isTensor()) value = value.toTensor().clone();
        const c10::optional<torch::jit::Value*> constant = torch::jit::tryInsertConstant(*graph, value);
        if (!constant) {
          excluded.insert(boundary[i]->node());
          constants.push_back(nullptr);
          continue;
        }
        (*constant)->setType(boundary[i]->type());
        constants.push_back(*constant);
      }
    }
    if (std::find(constants.begin(), constants.end(), nullptr) != constants.end()) {
      for (torch::jit::Value* constant : constants)
        if (constant) constant->node()->destroy();
      continue;
    }
    for (std::size_t i = 0; i < boundary.size(); ++i) boundary[i]->replaceAllUsesWith(constants[i]);
    for (auto node = analysis.folded.rbegin(); node != analysis.folded.rend(); ++node) {
      for (torch::jit::Value* output : (*node)->outputs())
        if (output->hasUses()) return nullptr;  // not reached: what the rest reads is replaced
      (*node)->destroy();
    }
    excluded.clear();
    // What the constants decide: ifs on them inlined, what reads only them computed.
    torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
    // The body's ifs that compute the same either way are the same nodes as before.
    std::unordered_set<const torch::jit::Node*> live;
    std::shared_ptr<torch::jit::Graph> walked = graph;
    torch::jit::DepthFirstGraphNodeIterator walk(walked);
    for (torch::jit::Node* node = walk.next(); node; node = walk.next()) live.insert(node);
    for (auto it = body_choices.begin(); it != body_choices.end();) it = live.count(*it) ? std::next(it) : body_choices.erase(it);
  }
  drop_whole_copies(graph, body);
  const std::size_t after = count_nodes(body);
  if (before < after + min_nodes) return nullptr;
  result.folded_nodes = before - after;
  return graph;
}

}  // namespace torch_delegate::detail
