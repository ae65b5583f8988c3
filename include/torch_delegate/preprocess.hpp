// What a backend's preprocess sees of the module it lowers: one delegate unit (a method; with
// partial lowering, a region made a method of a child module), its graph, its attribute and
// constant values, its debug handles. The plan that lowering builds for every unit is internal
// (detail/lowering_plan.hpp); registration with LibTorch's preprocess registry is in
// registration.hpp.
#pragma once

#include <torch_delegate/convert.hpp>
#include <torch_delegate/debug.hpp>
#include <torch_delegate/detail/locations.hpp>
#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/backends/backend_detail.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// One delegate unit of the module being lowered, as preprocess sees it: a name, a graph (the
/// method's, inlined), its input and output types (the schema) and the debug handle of every
/// node (nested blocks included). A unit is a whole method: partial lowering makes each region a
/// method of a child module (partition.hpp), so a region reaches preprocess as a method too.
class method_to_lower {
 public:
  method_to_lower(const torch::jit::Module& module, std::string backend, std::string name,
                  std::shared_ptr<torch::jit::Graph> graph, torch::jit::NodeToDebugHandle debug_handles,
                  const c10::FunctionSchema& schema)
      : module_(module),
        backend_(std::move(backend)),
        name_(std::move(name)),
        graph_(std::move(graph)),
        debug_handles_(std::move(debug_handles)),
        schema_(schema) {}

  /// The module being lowered (the caller's, read-only).
  const torch::jit::Module& module() const { return module_; }
  /// The unit's name, e.g. "forward" (the method's name).
  const std::string& name() const { return name_; }
  /// The unit's graph with every call inlined and dead code removed; a copy that preprocess
  /// may change.
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  /// The unit's schema (its input and output types), `self` first.
  const c10::FunctionSchema& schema() const { return schema_; }

  /// What a value of graph() is at lowering time, when that is known: a constant's value, or the
  /// module attribute (parameter, buffer or constant attribute) that a prim::GetAttr chain from
  /// `self` reads, e.g. a Linear's weight, so that preprocess can pack it. nullopt for anything
  /// computed at run time.
  std::optional<c10::IValue> value_of(const torch::jit::Value* value) const;
  /// The tensor `value` is at lowering time (see value_of); an error pointing at the node that
  /// makes `value` when it is not a tensor known at lowering time.
  at::Tensor tensor_of(const torch::jit::Value* value) const;

  /// A node's argument, by its name in the node's schema, as a C++ value known at lowering time
  /// (a constant, or an attribute the method reads, see value_of):
  ///   auto stride = unit.argument<std::vector<std::int64_t>>(conv, "stride");
  ///   auto eps = unit.argument<double>(batch_norm, "eps");
  ///   auto bias = unit.argument<std::optional<at::Tensor>>(conv, "bias");
  /// Any type with an ivalue_caster (convert.hpp); an int given for a double converts. An error
  /// pointing at the node (reject) when the node has no such argument, when its value is
  /// computed at run time, or when it has another type.
  template <class T>
  T argument(const torch::jit::Node* node, std::string_view name) const;

  /// The sizes of a tensor value of graph(), when its type is complete (lowering with example
  /// inputs records every tensor's); an error pointing at the node that makes it otherwise.
  std::vector<std::int64_t> sizes(const torch::jit::Value* value) const;

  /// The debug handle of a node of graph(); it maps back to the node's source range.
  torch::jit::DebugHandleType debug_handle(const torch::jit::Node* node) const;

  /// Rejects the unit because of `node`, in the format of LibTorch's demo compiler:
  /// "<message> Source code: " followed by the node's file, line, source lines and a
  /// `<--- HERE` marker. A node without a source range (e.g. the prim::GetAttr that reads a
  /// weight) is named by what it reads and the method instead.
  [[noreturn]] void reject(const torch::jit::Node* node, std::string_view message) const;

 private:
  const torch::jit::Module& module_;
  std::string backend_;
  std::string name_;
  std::shared_ptr<torch::jit::Graph> graph_;
  torch::jit::NodeToDebugHandle debug_handles_;
  const c10::FunctionSchema& schema_;
};

template <class T>
T method_to_lower::argument(const torch::jit::Node* node, std::string_view name) const {
  const std::string wanted(name);
  const c10::FunctionSchema* schema = node->maybeSchema();
  const c10::optional<int> index = schema ? schema->argumentIndexWithName(wanted) : c10::nullopt;
  if (!index) reject(node, std::string(node->kind().toQualString()) + " has no argument '" + wanted + "'.");
  std::optional<c10::IValue> value = value_of(node->input(static_cast<std::size_t>(*index)));
  if (!value)
    reject(node, "argument '" + wanted + "' of " + node->kind().toQualString() +
                     " is computed at run time; the backend needs it at lowering time (a constant or an attribute).");
  if constexpr (std::is_same_v<T, double>) {
    if (value->isInt()) return static_cast<double>(value->toInt());
  }
  if (!ivalue_caster<T>::check(*value))
    reject(node, "argument '" + wanted + "' of " + node->kind().toQualString() + " is " +
                     value->type()->annotation_str() + ", expected " + std::string(ivalue_caster<T>::name.view()) + ".");
  return ivalue_caster<T>::load(*value);
}



}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/preprocess.ipp>
#endif
