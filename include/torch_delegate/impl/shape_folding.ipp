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

/// A region's call (a method of a delegate child), or what stands in for one while the method is
/// folded (region_calls_set_aside): alias analysis cannot see into a call and takes it to write to
/// every input and to return what may alias anything, which would leave nothing to fold. A
/// region's backend computes what its nodes compute: it writes to none of its inputs and returns
/// new tensors; the stand-in, a prim::BroadcastSizes (a node alias analysis takes to make new
/// values from its inputs, and one a partitioned method never holds), says so.
inline bool is_call(const torch::jit::Node* node) {
  return node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::BroadcastSizes;
}

/// Region calls swapped for stand-ins while a graph is folded, put back by restore().
class region_calls_set_aside {
 public:
  explicit region_calls_set_aside(torch::jit::Graph& graph) : holder_(graph.create(c10::prim::If, 0)) {
    torch::jit::Block* aside = holder_->addBlock();  // the holder is in no block: walks do not see it
    std::vector<torch::jit::Node*> calls;
    std::vector<torch::jit::Block*> blocks{graph.block()};
    while (!blocks.empty()) {
      torch::jit::Block* block = blocks.back();
      blocks.pop_back();
      for (torch::jit::Node* node : block->nodes()) {
        if (node->kind() == c10::prim::CallMethod) calls.push_back(node);
        for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
      }
    }
    for (torch::jit::Node* call : calls) {
      torch::jit::Node* stand_in = graph.create(c10::prim::BroadcastSizes, call->inputs(), call->outputs().size());
      stand_in->i_(entry_attribute(), static_cast<std::int64_t>(set_aside_.size()));  // found again by it
      stand_in->insertBefore(call);
      for (std::size_t k = 0; k < call->outputs().size(); ++k) {
        stand_in->outputs()[k]->setType(call->outputs()[k]->type());
        call->outputs()[k]->replaceAllUsesWith(stand_in->outputs()[k]);
      }
      set_aside_.push_back(call);
      call->removeAllInputs();
      call->moveBefore(aside->return_node());
    }
  }
  ~region_calls_set_aside() { holder_->destroy(); }
  region_calls_set_aside(const region_calls_set_aside&) = delete;
  region_calls_set_aside& operator=(const region_calls_set_aside&) = delete;

  /// Each call back in its stand-in's place (one that dead code elimination removed: its values
  /// were read by nothing, and so is the call, which computes nothing else).
  void restore(const std::shared_ptr<torch::jit::Graph>& graph) {
    // The stand-ins still in the graph, found by their attribute (not by address: a node the
    // passes since destroyed may have left its address to another).
    std::vector<torch::jit::Node*> stand_ins(set_aside_.size(), nullptr);
    std::shared_ptr<torch::jit::Graph> walked = graph;
    torch::jit::DepthFirstGraphNodeIterator walk(walked);
    for (torch::jit::Node* node = walk.next(); node; node = walk.next())
      if (node->kind() == c10::prim::BroadcastSizes && node->hasAttribute(entry_attribute()))
        stand_ins.at(static_cast<std::size_t>(node->i(entry_attribute()))) = node;
    for (std::size_t i = 0; i < set_aside_.size(); ++i) {
      torch::jit::Node* call = set_aside_[i];
      torch::jit::Node* stand_in = stand_ins[i];
      if (!stand_in) {
        call->destroy();
        continue;
      }
      call->moveBefore(stand_in);
      for (torch::jit::Value* input : stand_in->inputs()) call->addInput(input);  // as folded since
      for (std::size_t k = 0; k < call->outputs().size(); ++k) stand_in->outputs()[k]->replaceAllUsesWith(call->outputs()[k]);
      stand_in->destroy();
    }
    set_aside_.clear();
  }

 private:
  static c10::Symbol entry_attribute() { return c10::Symbol::attr("torch_delegate_region_call"); }
  torch::jit::Node* holder_;
  std::vector<torch::jit::Node*> set_aside_;  // the calls, in the holder's block
};

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
    torch::jit::Value* layout = graph.insert(c10::prim::layout, {argument});
    same = graph.insert(c10::aten::__and__,
                        {same, graph.insert(c10::aten::eq, {layout, graph.insertConstant(static_cast<std::int64_t>(c10::kStrided))})});
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
inline void drop_whole_copies(std::shared_ptr<torch::jit::Graph>& graph, torch::jit::Block* body,
                              const std::unordered_set<const torch::jit::Value*>& determined) {
  torch::jit::AliasDb alias(graph);
  std::vector<torch::jit::Node*> done;
  for (torch::jit::Node* node : body->nodes()) {
    if (node->inputs().empty() || !determined.count(node->input(0))) continue;  // sizes the arguments' fix
    const c10::TensorTypePtr type = recorded_type(node->input(0));
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

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> fold_shapes(const std::shared_ptr<torch::jit::Graph>& original,
                                                                       const std::unordered_set<const torch::jit::Node*>& same_either_way,
                                                                       std::size_t min_nodes, shape_folding& result) {
  using namespace shape_folding_rules;
  result = {};
  std::shared_ptr<torch::jit::Graph> graph = original->copy();
  torch::jit::Block* top = graph->block();
  const std::vector<torch::jit::Node*> nodes(top->nodes().begin(), top->nodes().end());
  if (nodes.empty()) return nullptr;
  // The ifs whose branches compute the same, marked in the copy (and in the body's copy of it:
  // a clone keeps its attributes), found again by the mark after each round's passes.
  const c10::Symbol same_mark = c10::Symbol::attr("torch_delegate_same_either_way");
  zip_nodes(original->block(), top, [&](torch::jit::Node* x, torch::jit::Node* y) {
    if (same_either_way.count(x)) y->i_(same_mark, 1);
  });
  const auto marked = [&](torch::jit::Block* block) {
    std::unordered_set<const torch::jit::Node*> found;
    std::vector<torch::jit::Block*> blocks{block};
    while (!blocks.empty()) {
      torch::jit::Block* each = blocks.back();
      blocks.pop_back();
      for (torch::jit::Node* node : each->nodes()) {
        if (node->hasAttribute(same_mark)) found.insert(node);
        for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
      }
    }
    return found;
  };

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
  std::unordered_set<const torch::jit::Node*> body_choices = marked(body);
  for (std::size_t i = 0; i < graph->outputs().size(); ++i) {
    torch::jit::Value* output = graph->outputs()[i];
    const auto found = copied.find(output);
    body->registerOutput(found == copied.end() ? output : found->second);
    as_was->registerOutput(output);
    choice->addOutput()->setType(output->type());
    graph->return_node()->replaceInput(i, choice->outputs()[i]);
  }
  const std::size_t before = count_nodes(body);
  region_calls_set_aside calls(*graph);

  std::unordered_set<const torch::jit::Node*> excluded;
  for (int round = 0; round < 16; ++round) {
    std::vector<torch::jit::Value*> boundary;
    fold_analysis analysis = settled(graph, body, body_choices, guarded, excluded, boundary);
    if (analysis.folded.empty()) break;

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
        if (value.isTensor()) {
          c10::NoGradGuard no_grad;
          value = value.toTensor().detach().clone();
        }
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
    torch::jit::ConstantPropagationImmutableTypes(graph);
    torch::jit::EliminateDeadCode(graph);
    body_choices = marked(body);
  }
  {
    // The sizes the arguments' determine in the method as folded (the analysis of a last round).
    std::unordered_set<const torch::jit::Node*> none;
    std::vector<torch::jit::Value*> boundary;
    const std::unordered_set<const torch::jit::Value*> determined =
        settled(graph, body, body_choices, guarded, none, boundary).determined;
    drop_whole_copies(graph, body, determined);
  }
  const std::size_t after = count_nodes(body);
  if (before < after + min_nodes) return nullptr;
  calls.restore(graph);
  for (const torch::jit::Node* node : marked(graph->block())) const_cast<torch::jit::Node*>(node)->removeAttribute(same_mark);
  result.folded_nodes = before - after;
  return graph;
}

}  // namespace torch_delegate::detail
