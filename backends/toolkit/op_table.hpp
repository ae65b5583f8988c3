// The op table a backend fills: per node kind ("aten::conv2d"), its support rule (what supports()
// asks of the node) and its emitter (what preprocess adds to the payload for it). One table is
// the backend's support list and its preprocess dispatch, so the two cannot disagree; rules a
// kind-keyed table cannot express (clamp-like activations, several kinds to one emitter) are
// entries with the same rule under each kind.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_delegate::toolkit {

/// What supports() asks of a node of a kind the table lists (its inputs' types, its constants).
using support_rule = bool (*)(const torch::jit::Node*);

/// A rule that accepts every node of its kind.
inline bool always_supported(const torch::jit::Node*) { return true; }

/// The op table of a backend whose preprocess builder is `Builder`: per node kind, a support
/// rule and an emitter `void(Builder&, const torch::jit::Node*)`.
///
///   static const op_table<subgraph_builder>& ops() {
///     static const op_table<subgraph_builder> table = [] {
///       op_table<subgraph_builder> t;
///       t.add("aten::conv2d", conv2d_supported, emit_convolution);
///       t.add({"aten::max_pool2d", "aten::avg_pool2d"}, pool_supported, emit_pooling);
///       return t;
///     }();
///     return table;
///   }
template <class Builder>
class op_table {
 public:
  using emitter = void (*)(Builder&, const torch::jit::Node*);

  /// Lists `kind` (a qualified name, "aten::relu") with its rule and emitter.
  op_table& add(const char* kind, support_rule rule, emitter emit) {
    entries_.insert_or_assign(c10::Symbol::fromQualString(kind), entry{rule, emit});
    kinds_.emplace_back(kind);
    return *this;
  }
  /// Lists each of `kinds` with one rule and emitter.
  op_table& add(std::initializer_list<const char*> kinds, support_rule rule, emitter emit) {
    for (const char* kind : kinds) add(kind, rule, emit);
    return *this;
  }

  /// Whether the table lists `node`'s kind and its rule accepts the node.
  bool supports(const torch::jit::Node* node) const {
    const auto found = entries_.find(node->kind());
    return found != entries_.end() && found->second.rule(node);
  }
  /// Whether the table lists `node`'s kind (whatever its rule says).
  bool lists(const torch::jit::Node* node) const { return entries_.count(node->kind()) != 0; }

  /// Runs the emitter of `node`'s kind; false when the table does not list it (the caller
  /// rejects the node, naming it).
  bool emit(Builder& builder, const torch::jit::Node* node) const {
    const auto found = entries_.find(node->kind());
    if (found == entries_.end()) return false;
    found->second.emit(builder, node);
    return true;
  }

  /// The kinds listed, in the order they were added (docs, tests, diagnostics).
  const std::vector<std::string>& kinds() const { return kinds_; }

 private:
  struct entry {
    support_rule rule;
    emitter emit;
  };
  std::unordered_map<c10::Symbol, entry> entries_;
  std::vector<std::string> kinds_;
};

}  // namespace torch_delegate::toolkit
