// Which regions onednn accepts (OnednnBackend::accepts_region): one worth its layout conversions
// (a convolution or a linear; 1-d convolutions only chained), whose numbers do not cross its
// boundary, with F.normalize's pattern whole. Each refusal says why in the report.
#include "internal.hpp"

#include "toolkit/graph.hpp"
#include "toolkit/known_values.hpp"

#include <algorithm>
#include <string>
#include <unordered_set>

namespace onednn_delegate {

namespace tk = torch_delegate::toolkit;

namespace {
/// Whether a region whose convolutions are all 1-d chains two of them (one reads what another
/// made, directly or through the steps between them): a lone 1-d convolution, or several side by
/// side, each between a reorder into oneDNN's layout and one back, ran slower than in TorchScript
/// (ConvTasNet's, between the PReLUs and GroupNorms TorchScript keeps: a 1x1 Conv1d of 128 -> 512
/// channels over 3199 samples 1.15 ms against 1.00, the model 1.12x slower with them). True for
/// a region with a 2-d or 3-d convolution, a transposed one, a linear or a recurrent layer.
bool chains_its_1d_convolutions(std::span<const torch::jit::Node* const> region) {
  if (std::any_of(region.begin(), region.end(), [](const torch::jit::Node* node) {
        return tk::is_any(node, {"aten::conv2d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
                                 "aten::conv_transpose3d", "aten::linear", "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"});
      }))
    return true;
  // Tensors made by a 1-d convolution or computed from one's result (not its sizes: numbers).
  std::unordered_set<const torch::jit::Value*> after_convolution;
  for (const torch::jit::Node* node : region) {  // in graph order
    const bool reads = std::any_of(node->inputs().begin(), node->inputs().end(),
                                   [&](const torch::jit::Value* v) { return after_convolution.count(v) > 0; });
    if (reads && tk::is(node, "aten::conv1d")) return true;
    if (reads || tk::is(node, "aten::conv1d"))
      for (const torch::jit::Value* output : node->outputs())
        if (tk::is_tensor(output)) after_convolution.insert(output);
  }
  return false;
}
}  // namespace

torch_delegate::region_verdict OnednnBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  using torch_delegate::region_verdict;
  if (std::none_of(region.begin(), region.end(), [](const torch::jit::Node* node) {
        return tk::is_any(node, {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
                                 "aten::conv_transpose3d", "aten::linear", "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"});
      }))
    return region_verdict::refuse("no convolution or linear: not worth a call");
  if (!chains_its_1d_convolutions(region))
    return region_verdict::refuse(
        "its only convolutions are 1-d ones that read none of each other's results: their layout conversions cost more than they "
        "save");
  // Numbers are evaluated at preprocess and never cross the region's boundary: a region the
  // partition cut between a number and a step that reads it (MaxViT's `B, C, H, W = x.shape`,
  // read across several regions) stays in TorchScript, whole, rather than failing preprocess.
  const std::unordered_set<const torch::jit::Node*> inside(region.begin(), region.end());
  const auto number = [](const torch::jit::Value* value) {  // an int, float, bool or list of them; a traced graph's number in a tensor
    c10::TypePtr type = value->type();
    if (const auto list = type->cast<c10::ListType>()) type = list->getElementType();
    const c10::TypeKind kind = type->kind();
    if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::FloatType || kind == c10::TypeKind::BoolType) return true;
    return tk::is_tensor(value) && value->node()->kind() != c10::prim::Constant && tk::known_value(value).has_value();
  };
  for (const torch::jit::Node* node : region) {
    for (const torch::jit::Value* output : node->outputs())
      if (number(output))
        for (const torch::jit::Use& use : output->uses())
          if (!inside.count(use.user))
            return region_verdict::refuse("a number it makes (" + std::string(node->kind().toQualString()) +
                                          ") is read outside it; numbers do not cross a region's boundary");
    for (const torch::jit::Value* input : node->inputs())
      if (number(input) && !inside.count(input->node()) && !tk::is_any(input->node(), {"prim::Constant", "prim::GetAttr"}))
        return region_verdict::refuse(std::string(node->kind().toQualString()) + " reads a number made outside it (by " +
                                      input->node()->kind().toQualString() + "); numbers do not cross a region's boundary");
    // F.normalize's four nodes are one step: all in the region or none (an earlier backend of a
    // priority list may have taken some of them).
    if (tk::is_any(node, {"aten::norm", "aten::clamp_min", "aten::expand_as", "aten::div"}))
      if (const auto parts = normalize_nodes(node))
        for (const torch::jit::Node* part : *parts)
          if (!inside.count(part))
            return region_verdict::refuse("part of F.normalize's pattern (norm, clamp_min, expand_as, div) is outside it");
  }
  return true;
}

}  // namespace onednn_delegate
