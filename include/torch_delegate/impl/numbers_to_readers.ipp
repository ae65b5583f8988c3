// The pass of the canonical graph (canonical_graph.ipp) that gives each number computed from
// sizes to the nodes that read it, and the graph queries it rests on (which nodes compute numbers
// only, which lists are only read); fold_scalar_attributes uses the latter too.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_delegate::detail {

/// Whether `node` computes numbers only: sizes (`aten::size`, `aten::dim`, `len`), arithmetic on
/// numbers, and lists of them made, read or unpacked; every output an int, float or bool or a
/// list of them, and nothing written.
inline bool number_node(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> kinds = {
      "aten::size",     "aten::dim",   "aten::len",   "aten::__getitem__", "prim::ListConstruct", "prim::ListUnpack", "aten::Int",
      "aten::Float",    "aten::floordiv", "aten::mul", "aten::add",        "aten::sub",           "aten::div",        "aten::neg",
      "aten::pow",      "aten::remainder", "aten::floor", "aten::ceil",    "aten::sqrt",          "aten::eq",         "aten::ne",
      "aten::lt",       "aten::le",    "aten::gt",    "aten::ge"};
  if (node->outputs().empty() || !kinds.count(node->kind().toQualString())) return false;
  const auto number = [](const torch::jit::Value* value) {
    c10::TypePtr type = value->type();
    if (const auto list = type->cast<c10::ListType>()) type = list->getElementType();
    const c10::TypeKind kind = type->kind();
    return kind == c10::TypeKind::IntType || kind == c10::TypeKind::FloatType || kind == c10::TypeKind::BoolType;
  };
  for (const torch::jit::Value* output : node->outputs())
    if (!number(output)) return false;
  for (const torch::jit::Value* input : node->inputs())  // a tensor only as what aten::size and aten::dim read
    if (input->type()->kind() == c10::TypeKind::TensorType ? !(node->kind() == c10::aten::size || node->kind() == c10::aten::dim)
                                                           : !number(input))
      return false;
  return true;
}

/// Whether each use of `node`'s outputs only reads them (a list, being mutable, is copied only
/// where nothing appends to it or sets an element).
inline bool outputs_only_read(const torch::jit::Node* node) {
  for (const torch::jit::Value* output : node->outputs()) {
    if (output->type()->kind() != c10::TypeKind::ListType) continue;
    for (const torch::jit::Use& use : output->uses()) {
      if (use.user->kind() == c10::prim::ListUnpack || use.user->kind() == c10::prim::Return) continue;
      const c10::FunctionSchema* schema = use.user->maybeSchema();
      if (!schema || use.offset >= schema->arguments().size()) return false;
      const c10::AliasInfo* alias = schema->arguments()[use.offset].alias_info();
      if (alias && alias->isWrite()) return false;
    }
  }
  return true;
}

/// Whether a node of `block` (or of a block in it) changes a tensor's sizes in place.
inline bool resizes_in_place(const torch::jit::Block* block) {
  static const std::unordered_set<std::string> kinds = {"aten::resize_",    "aten::resize_as_", "aten::unsqueeze_", "aten::squeeze_",
                                                        "aten::t_",         "aten::transpose_", "aten::as_strided_", "aten::set_",
                                                        "aten::swapdims_",  "aten::swapaxes_"};
  for (const torch::jit::Node* node : block->nodes()) {
    if (kinds.count(node->kind().toQualString())) return true;
    for (const torch::jit::Block* inner : node->blocks())
      if (resizes_in_place(inner)) return true;
  }
  return false;
}

/// The node of `block` that holds `node` (itself, or the node whose block holds it).
inline torch::jit::Node* holder_in(torch::jit::Node* node, const torch::jit::Block* block) {
  while (node && node->owningBlock() != block) node = node->owningBlock()->owningNode();
  return node;
}

// Numbers computed from sizes (Swin's `B, H, W, C = x.shape`, read by a pad, a view and an `if`;
// MaxViT's, read after a node that ends a region): a backend evaluates the numbers a step reads
// at preprocess, inside the step's region, so a number that another node also reads, or that is
// computed in another run, would keep the step in TorchScript. So each number goes to its
// readers: one reader, the number moves right before it; several, each gets a copy of its own
// right before it. (Numbers, and lists nothing writes, are the same wherever they are computed;
// sizes too, where nothing resizes a tensor in place: else nothing moves and the copies go right
// after the original.) Then the copies no backend takes (`takes`) are merged into the first of
// them, so that TorchScript computes each number once, as before. Copies stop at `budget`.
inline void give_numbers_to_their_readers(torch::jit::Graph& graph, const std::function<bool(const torch::jit::Node*)>& takes,
                                          std::size_t budget) {
  const bool near_readers = !resizes_in_place(graph.block());
  std::vector<torch::jit::Node*> order;
  for (torch::jit::Node* node : graph.block()->nodes()) order.push_back(node);
  std::vector<std::vector<torch::jit::Node*>> groups;  // the copies of one original
  std::size_t made = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    torch::jit::Node* node = *it;
    if (!number_node(node) || !outputs_only_read(node)) continue;
    std::vector<torch::jit::Node*> readers;
    for (const torch::jit::Value* output : node->outputs())
      for (const torch::jit::Use& use : output->uses())
        if (std::find(readers.begin(), readers.end(), use.user) == readers.end()) readers.push_back(use.user);
    if (readers.size() == 1) {  // to its reader, where the run that reader is in can take it
      torch::jit::Node* at = near_readers ? holder_in(readers[0], graph.block()) : nullptr;
      if (at && at != node && at->kind() != c10::prim::Return) node->moveBefore(at);
      continue;
    }
    if (readers.empty() || made + readers.size() > budget) continue;
    std::vector<torch::jit::Node*> group;
    for (torch::jit::Node* reader : readers) {
      torch::jit::Node* copy = graph.createClone(node, [](torch::jit::Value* v) { return v; });
      torch::jit::Node* at = near_readers ? holder_in(reader, graph.block()) : nullptr;
      if (at && at->kind() != c10::prim::Return)
        copy->insertBefore(at);
      else
        copy->insertAfter(node);
      for (std::size_t o = 0; o < node->outputs().size(); ++o)
        for (std::size_t i = 0; i < reader->inputs().size(); ++i)
          if (reader->input(i) == node->output(o)) reader->replaceInput(i, copy->output(o));
      group.push_back(copy);
      ++made;
    }
    node->destroy();  // every reader reads a copy
    groups.push_back(std::move(group));
  }
  if (groups.empty()) return;
  // Which copies a backend takes, decided before any merge (a merge joins untaken readers only).
  std::vector<std::vector<bool>> taken(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (torch::jit::Node* member : groups[g]) taken[g].push_back(takes(member));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    torch::jit::Node* kept = nullptr;  // the first untaken copy: it comes before the other untaken ones' readers
    for (std::size_t m = 0; m < groups[g].size(); ++m)
      if (!taken[g][m] && (!kept || groups[g][m]->isBefore(kept))) kept = groups[g][m];
    for (std::size_t m = 0; m < groups[g].size(); ++m) {
      torch::jit::Node* member = groups[g][m];
      if (taken[g][m] || member == kept) continue;
      for (std::size_t o = 0; o < member->outputs().size(); ++o) member->output(o)->replaceAllUsesWith(kept->output(o));
    }
  }
  torch::jit::EliminateDeadCode(graph.block());
}

}  // namespace torch_delegate::detail
