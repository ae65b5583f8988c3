// The xnnpack backend's preprocess: a region's graph -> an XNNPACK subgraph description (values
// with NHWC dims, nodes as typed records) and its weights as named data, in one pass over the
// nodes. Fusions are decided in that pass: the emitters fold a BatchNorm into its convolution and
// the clamp that alone reads an op's output into that op (XNNPACK's output_min and output_max).
#include "xnnpack_internal.hpp"

#include "toolkit/graph.hpp"

#include <utility>

namespace xnnpack_delegate {

std::vector<std::int64_t> xnn_dims(std::vector<std::int64_t> sizes) {
  if (sizes.size() == 4) return {sizes[0], sizes[2], sizes[3], sizes[1]};
  return sizes;
}

std::vector<std::int64_t> nchw_sizes(std::vector<std::int64_t> dims) {
  if (dims.size() == 4) return {dims[0], dims[3], dims[1], dims[2]};
  return dims;
}

subgraph_builder::subgraph_builder(const torch_delegate::method_to_lower& region) : payload_builder(region, "xnnpack") {}

std::int64_t subgraph_builder::define(const torch::jit::Value* value) {
  std::vector<std::int64_t> dims = xnn_dims(region().sizes(value));
  auto output = output_ids.find(value);
  std::int64_t index;
  if (output != output_ids.end() && values[static_cast<std::size_t>(output->second)].dims.empty()) {
    index = output->second;
    values[static_cast<std::size_t>(index)].dims = std::move(dims);
  } else {
    index = static_cast<std::int64_t>(values.size());
    values.push_back({std::move(dims), -1, ""});
  }
  set_id(value, index);
  return index;
}

std::int64_t subgraph_builder::constant(const at::Tensor& tensor, std::vector<std::int64_t> dims) {
  values.push_back({std::move(dims), -1, store_constant(tensor)});
  return static_cast<std::int64_t>(values.size()) - 1;
}

std::int64_t subgraph_builder::internal_like(std::int64_t like) {
  values.push_back({values[static_cast<std::size_t>(like)].dims, -1, ""});
  return static_cast<std::int64_t>(values.size()) - 1;
}

output_range subgraph_builder::fused_activation(const torch::jit::Value*& output) {
  const auto range = toolkit::fold_following(output, result_check(), folded(), toolkit::clamp_range);
  return range ? output_range{range->first, range->second} : output_range{};
}

std::int64_t subgraph_builder::with_constant(std::int64_t x, op code, const at::Tensor& c, const torch::jit::Value* output) {
  const std::int64_t k = constant(c, {c.numel()});
  const std::int64_t out = output ? define(output) : internal_like(x);
  add_node(code, binary_record{x, k, out}, output_range{});
  return out;
}

torch_delegate::preprocess_result<region_payload> XnnpackBackend::preprocess(const torch_delegate::method_to_lower& region) {
  const torch::jit::Graph& graph = *region.graph();
  subgraph_builder builder(region);
  // Externals first: the inputs (ids 0..), then the outputs (their dims set where they are made).
  for (const torch::jit::Value* input : toolkit::region_inputs(graph)) {
    builder.set_id(input, builder.inputs);
    builder.values.push_back({xnn_dims(region.sizes(input)), builder.inputs++, ""});
  }
  const std::vector<const torch::jit::Value*> outputs = toolkit::region_results(graph);
  std::vector<std::vector<std::int64_t>> output_sizes;
  for (const torch::jit::Value* output : outputs) {
    if (builder.output_ids.count(output) || builder.has_id(output))
      builder.reject(output->node(), "a region that returns one value twice, or an input, is not supported");
    const auto index = static_cast<std::int64_t>(builder.values.size());
    builder.values.push_back({{}, index, ""});
    builder.output_ids[output] = index;
    output_sizes.push_back(region.sizes(output));
  }
  const auto& ops = xnnpack_ops();
  for (const torch::jit::Node* node : graph.nodes())
    if (!builder.skips(node) && !ops.emit(builder, node)) builder.reject_unsupported(node);
  for (const torch::jit::Value* output : outputs)
    if (builder.values[static_cast<std::size_t>(builder.output_ids.at(output))].dims.empty())
      builder.reject(output->node(), "a region output is not made by an XNNPACK node");
  region_payload payload{std::move(builder.values), std::move(builder.nodes), std::move(output_sizes), builder.inputs};
  return {std::move(payload), {}, builder.take_named_data()};
}

}  // namespace xnnpack_delegate
