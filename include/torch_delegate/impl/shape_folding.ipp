// Definitions for detail/shape_folding.hpp, the rewrite half: the specialized method, its check
// of the arguments, the folded values computed and put in as constants. The analysis it runs is
// shape_folding_analysis.ipp's.
#pragma once

#include <torch_delegate/detail/shape_folding.hpp>
#include <torch_delegate/impl/shape_folding_analysis.ipp>
#include <torch_delegate/input_spec.hpp>

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

// A bool that says whether `inputs` have the dtypes and sizes of `specs` (one per input; none:
// not checked), computed in TorchScript where the insert point is; nullptr when nothing is checked.
// (A region's guard, partition_rewrite.ipp; with layout and device, a specialized method's.)
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

namespace shape_folding_rules {

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

/// A bool: whether the graph's tensor arguments have the dtypes, sizes and devices of their
/// recorded types (the example's), inserted where the insert point is; nullptr: none is recorded.
inline torch::jit::Value* arguments_match(torch::jit::Graph& graph, std::unordered_set<const torch::jit::Value*>& guarded) {
  std::vector<torch::jit::Value*> arguments;
  std::vector<std::optional<tensor_spec>> specs;
  for (std::size_t i = 1; i < graph.inputs().size(); ++i)
    if (const c10::TensorTypePtr type = recorded_type(graph.inputs()[i])) {
      arguments.push_back(graph.inputs()[i]);
      specs.emplace_back(tensor_spec{*type->sizes().concrete_sizes(), *type->scalarType()});
    }
  torch::jit::Value* all = inputs_match(graph, arguments, specs);
  for (torch::jit::Value* argument : arguments) {
    guarded.insert(argument);
    torch::jit::Value* layout = graph.insert(c10::prim::layout, {argument});
    all = graph.insert(c10::aten::__and__,
                       {all, graph.insert(c10::aten::eq, {layout, graph.insertConstant(static_cast<std::int64_t>(c10::kStrided))})});
    torch::jit::Value* device = graph.insert(c10::prim::device, {argument});
    all = graph.insert(c10::aten::__and__,
                       {all, graph.insert(c10::aten::eq, {device, graph.insertConstant(*recorded_type(argument)->device())})});
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
}  // namespace shape_folding_rules

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> fold_shapes(const std::shared_ptr<torch::jit::Graph>& original,
                                                                       const std::unordered_set<const torch::jit::Node*>& same_either_way,
                                                                       std::size_t min_nodes) {
  using namespace shape_folding_rules;
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
        // The value's own type where the boundary's is an Optional (a constant cannot be one: an
        // interpolate's `int[]? size` folded to a list did not print, so the module did not save).
        if (!boundary[i]->type()->cast<c10::OptionalType>()) (*constant)->setType(boundary[i]->type());
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
  return graph;
}
}  // namespace torch_delegate::detail
