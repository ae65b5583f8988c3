// Definitions for detail/partition_layouts.hpp: input specs and layout conversions at a region's
// boundary.
#pragma once

#include <torch_delegate/detail/partition_layouts.hpp>
#include <torch_delegate/detail/locations.hpp>

#include <set>
#include <string>
#include <unordered_set>

namespace torch_delegate::detail {

// The input spec of a value whose type is complete (recorded_specs), else none.
inline std::optional<tensor_spec> recorded_spec(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor || !tensor->isComplete()) return std::nullopt;
  tensor_spec spec{*tensor->sizes().concrete_sizes(), *tensor->scalarType()};
  spec.memory_format = std::nullopt;
  return spec;
}

TORCH_DELEGATE_INTERNAL std::optional<std::vector<std::optional<tensor_spec>>> recorded_specs(const region& formed) {
  std::vector<std::optional<tensor_spec>> specs;
  bool any = false;
  for (const torch::jit::Value* input : formed.inputs) {
    specs.push_back(recorded_spec(input));
    any = any || specs.back().has_value();
  }
  if (!any) return std::nullopt;
  return specs;
}

TORCH_DELEGATE_INTERNAL void place_conversions(const backend_lowering& backend, std::vector<region>& regions,
                                               method_delegation& entry, const std::vector<std::size_t>& backend_of,
                                               std::size_t position) {
  static const std::set<std::string> prefers_nchw{"aten::conv2d", "aten::_convolution", "aten::convolution",
                                                  "aten::conv_transpose2d"};
  std::unordered_set<const torch::jit::Value*> made_by_region;
  std::unordered_set<const torch::jit::Node*> in_region;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (backend_of[i] == position) made_by_region.insert(regions[i].outputs.begin(), regions[i].outputs.end());
    in_region.insert(regions[i].nodes.begin(), regions[i].nodes.end());
  }
  auto four_d = [](const torch::jit::Value* value) {
    const auto tensor = value->type()->cast<c10::TensorType>();
    return tensor && tensor->dim() && *tensor->dim() == 4;
  };
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (backend_of[i] != position) continue;
    std::vector<std::string>& conversions = entry.regions[i].conversions;
    for (std::size_t k = 0; k < regions[i].inputs.size(); ++k) {
      const torch::jit::Value* input = regions[i].inputs[k];
      if (!four_d(input) || made_by_region.count(input)) continue;
      // A weight the backend owns is a constant of the region, not an input (take_owned_inputs).
      if (backend.partition.owns_parameters && input->node()->kind() == c10::prim::GetAttr) continue;
      const std::string from = input->node()->kind() == c10::prim::Param ? "method argument " + input->debugName()
                                                                           : input->node()->kind().toQualString();
      conversions.push_back("input " + std::to_string(k) + " (" + from + "): to channels_last on entry");
    }
    for (std::size_t k = 0; k < regions[i].outputs.size(); ++k) {
      const torch::jit::Value* output = regions[i].outputs[k];
      if (!four_d(output)) continue;
      for (const torch::jit::Use& use : output->uses()) {
        if (in_region.count(use.user) || !prefers_nchw.count(use.user->kind().toQualString())) continue;
        regions[i].to_contiguous.push_back(use);
        const std::string line = locate_in_model(use.user).line;
        conversions.push_back("output " + std::to_string(k) + ": to contiguous before " + use.user->kind().toQualString() +
                              (line.empty() ? "" : " at " + line));
      }
    }
  }
}

}  // namespace torch_delegate::detail
