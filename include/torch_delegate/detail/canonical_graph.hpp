// The canonical graph of a method: what partial lowering partitions and coverage reports on (one
// graph for both). A pure pass over a copy: the module is not changed.
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/lowering_conditions.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate::detail {

/// The method's graph with every call inlined, non-tensor constants and constant lists folded,
/// dead code removed, and in-place operators made out-of-place where nothing can observe the
/// write and both forms compute the same values (docs/partial-lowering.md, "How regions are formed").
/// With `example_inputs`, the method is first run once on them: every tensor it makes at its top
/// level gets the complete type it had (dtype, sizes, strides), and the ranks that makes known are
/// folded (`len(x.size())`, `x.dim()`: the checks F.adaptive_avg_pool2d makes of its argument).
/// `fold_attributes` (a backend that owns its parameters): bool, int, float, str and None attributes
/// read from `self` become constants first, as torch.jit.freeze makes them. With it and `takes`
/// (whether one of the lowering's backends takes a node), nn.MultiheadAttention's self-attention
/// is spelled as straight-line attention (attention_calls.hpp) when a backend takes its matmuls,
/// and left as the module computes it otherwise.
/// With example inputs and `conditions`, control flow whose condition lowering knows is decided
/// (lowering_conditions.hpp): the checks the method must make, what the report says and the graph
/// before go to `conditions`.
/// Whether `node` is an ATen operator whose results are tensors and whose schema marks none of
/// them as an alias (not a view, not in place): each result is a new tensor. A later write to such a result writes what
/// a region's call would return, a new tensor too (partial-lowering.md): the same either way, so
/// the node may join a region though its result is written to later. Alias analysis says
/// "written" of every tensor that goes into a container once any container's tensor is written
/// (RetinaNet's heads and feature pyramid: each convolution's result, appended to a list, was
/// kept). A view's result stays out: it and its base are one tensor in TorchScript, two after a
/// region; so does a node no schema describes.
inline bool makes_new_tensors(const torch::jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || node->kind().ns() != c10::namespaces::aten || node->outputs().empty()) return false;
  for (const torch::jit::Value* output : node->outputs())  // tensors: a list is a container, written by appends
    if (output->type()->kind() != c10::TypeKind::TensorType) return false;
  // Unannotated, yet they may return their input itself: type_as to its own dtype, a dropout
  // that does not train.
  static const std::set<std::string> may_return_input{"aten::type_as", "aten::dropout", "aten::feature_dropout",
                                                      "aten::alpha_dropout", "aten::feature_alpha_dropout"};
  if (may_return_input.count(node->kind().toQualString())) return false;
  return std::none_of(schema->returns().begin(), schema->returns().end(),
                      [](const c10::Argument& result) { return result.alias_info() != nullptr; });
}

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> canonical_graph(const torch::jit::Module& module, const std::string& method,
                                                                           const std::vector<c10::IValue>* example_inputs = nullptr,
                                                                           std::string_view backend = {}, bool fold_attributes = false,
                                                                           const std::function<bool(const torch::jit::Node*)>& takes = {},
                                                                           lowering_conditions* conditions = nullptr);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/canonical_graph.ipp>
#endif
