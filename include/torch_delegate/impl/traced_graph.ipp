// The passes of the canonical graph (canonical_graph.ipp) that make a traced model's graph read
// as a scripted one's: its convolutions spelled as conv2d, its recorded tensor types forgotten.
#pragma once

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace torch_delegate::detail {

/// The number of elements of an int list known at lowering (a constant, or a prim::ListConstruct,
/// whose length is fixed whatever its elements are), or nullopt.
inline std::optional<std::size_t> int_list_length(const torch::jit::Value* list) {
  if (list->node()->kind() == c10::prim::ListConstruct) return list->node()->inputs().size();
  const c10::optional<c10::IValue> value = torch::jit::toIValue(list);
  if (value && value->isIntList()) return value->toIntVector().size();
  return std::nullopt;
}

/// Whether `value` is a constant int list of zeros.
inline bool constant_zeros(const torch::jit::Value* value) {
  const c10::optional<c10::IValue> list = torch::jit::toIValue(value);
  if (!list || !list->isIntList()) return false;
  const std::vector<std::int64_t> elements = list->toIntVector();
  return std::all_of(elements.begin(), elements.end(), [](std::int64_t e) { return e == 0; });
}

/// torch.jit.trace records every convolution as what nn.Conv2d's call reaches inside ATen:
/// `aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
/// groups, benchmark, deterministic, cudnn_enabled[, allow_tf32])` (or `aten::convolution`, its
/// first nine arguments), where a scripted model says `aten::conv2d`. No backend takes those
/// spellings; each becomes the operator a scripted model calls, which reaches the same ATen
/// function with the same arguments:
/// - transposed false, output_padding all zeros: conv1d / conv2d / conv3d(input, weight, bias,
///   stride, padding, dilation, groups);
/// - transposed true: conv_transpose1d / 2d / 3d(input, weight, bias, stride, padding,
///   output_padding, groups, dilation).
/// The number of spatial dimensions is the length of `stride`; padding and dilation (and a
/// transposed one's output_padding) must have that length, and the weight's rank must be known at
/// lowering (a constant, or a parameter read from `self`) and 2 more: _convolution expands a
/// one-element stride to a 4-d weight's two dimensions, where conv1d would refuse the weight. The
/// input's rank, where known, must be 2 more too (conv2d also takes an unbatched 3-d input, which
/// _convolution refuses: on every input where the traced node gives a result, the rewritten one
/// gives the same).
/// The last flags choose among CUDA's kernels (cuDNN, its benchmark mode, determinism, TF32) and
/// do nothing on CPU; conv2d reads them from the global context at run time, as the scripted
/// model does. Left as it is: a non-transposed one with non-zero or unknown output_padding,
/// unknown flags or list lengths, a rank that does not match. The new node keeps the traced one's
/// source range and scope (the report's lines and submodules).
inline void rewrite_traced_convolutions(const torch::jit::Module& module, torch::jit::Block* block) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;
    for (torch::jit::Block* nested : node->blocks()) rewrite_traced_convolutions(module, nested);
    const bool traced = node->kind() == c10::aten::_convolution && (node->inputs().size() == 12 || node->inputs().size() == 13);
    const bool public_form = node->kind() == c10::aten::convolution && node->inputs().size() == 9;
    if (!traced && !public_form) continue;
    torch::jit::Value* input = node->input(0);
    torch::jit::Value* weight = node->input(1);
    torch::jit::Value* bias = node->input(2);
    torch::jit::Value* stride = node->input(3);
    torch::jit::Value* padding = node->input(4);
    torch::jit::Value* dilation = node->input(5);
    torch::jit::Value* output_padding = node->input(7);
    torch::jit::Value* groups = node->input(8);
    const c10::optional<c10::IValue> transposed = torch::jit::toIValue(node->input(6));
    const std::optional<std::size_t> spatial = int_list_length(stride);
    if (!transposed || !transposed->isBool() || !spatial || *spatial < 1 || *spatial > 3) continue;
    if (int_list_length(padding) != spatial || int_list_length(dilation) != spatial) continue;
    const bool is_transposed = transposed->toBool();
    if (is_transposed ? int_list_length(output_padding) != spatial : !constant_zeros(output_padding)) continue;
    const auto input_type = input->type()->cast<c10::TensorType>();
    if (!input_type || (input_type->dim() && *input_type->dim() != *spatial + 2)) continue;
    std::optional<std::size_t> weight_rank;
    if (const auto type = weight->type()->cast<c10::TensorType>(); type && weight->node()->kind() == c10::prim::Constant) {
      if (const auto dim = type->dim()) weight_rank = *dim;
    } else if (const std::optional<c10::IValue> parameter = attribute_value(module, weight); parameter && parameter->isTensor()) {
      weight_rank = static_cast<std::size_t>(parameter->toTensor().dim());
    }
    if (weight_rank != *spatial + 2) continue;
    static const char* const direct[] = {"aten::conv1d", "aten::conv2d", "aten::conv3d"};
    static const char* const transposed_kinds[] = {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"};
    const c10::Symbol kind = c10::Symbol::fromQualString((is_transposed ? transposed_kinds : direct)[*spatial - 1]);
    torch::jit::Graph* graph = node->owningGraph();
    torch::jit::Node* replacement =
        is_transposed ? graph->create(kind, {input, weight, bias, stride, padding, output_padding, groups, dilation})
                      : graph->create(kind, {input, weight, bias, stride, padding, dilation, groups});
    replacement->setSourceRange(node->sourceRange());
    replacement->setScope(node->scope());
    replacement->output()->copyMetadata(node->output());
    replacement->insertBefore(node);
    if (!replacement->maybeSchema()) {  // an overload this LibTorch does not have: keep the original
      replacement->destroy();
      continue;
    }
    node->output()->replaceAllUsesWith(replacement->output());
    node->destroy();
  }
}

/// A traced graph's tensors carry the complete types of the tracing run (`Float(1, 64, 56, 56,
/// strides=...)`); those sizes hold for the example the model was traced with, not for every call
/// (a traced CNN takes other image sizes). A scripted graph's tensors are `Tensor`: each tensor a
/// node makes (not a constant: a frozen model's weights) and each argument becomes `Tensor` again,
/// so that what the partitioner and the backends know comes from example inputs alone, for a
/// traced model as for a scripted one.
inline void forget_traced_types(torch::jit::Block* block) {
  for (torch::jit::Value* input : block->inputs())
    if (input->type()->kind() == c10::TypeKind::TensorType) input->setType(c10::TensorType::get());
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* nested : node->blocks()) forget_traced_types(nested);
    if (node->kind() == c10::prim::Constant) continue;
    for (torch::jit::Value* output : node->outputs())
      if (output->type()->kind() == c10::TypeKind::TensorType) output->setType(c10::TensorType::get());
  }
}

}  // namespace torch_delegate::detail
