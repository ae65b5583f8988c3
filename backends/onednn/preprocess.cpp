// Preprocess: a region's graph -> payload version 2 (payload_records.hpp), one step per node,
// unfused (fusion.cpp decides at compile), weights as named data keyed by content with the
// BatchNorm after a convolution folded into its weight and bias.
#include "internal.hpp"

#include "common/folded_conv2d.hpp"

#include <torch_delegate/named_data.hpp>
#include <torch_delegate/node_queries.hpp>

#include <ATen/ATen.h>

#include <unordered_map>
#include <unordered_set>

namespace onednn_delegate {

namespace {

struct step_builder {
  const torch_delegate::method_to_lower& region;
  std::vector<step_record> steps;
  torch_delegate::named_data_store named_data;
  std::unordered_map<const torch::jit::Value*, std::int64_t> ids;
  std::unordered_set<const torch::jit::Value*> outputs;  // the region's results: not folded away
  std::unordered_set<const torch::jit::Node*> folded;    // BatchNorms folded into their convolution
  std::int64_t values = 0;

  std::int64_t id(const torch::jit::Value* value) {
    auto found = ids.find(value);
    if (found == ids.end())
      region.reject(value->node(), "onednn: %" + value->debugName() + " (" + value->type()->annotation_str() +
                                       ") is not a tensor this region makes or takes");
    return found->second;
  }
  std::int64_t define(const torch::jit::Value* value) { return ids[value] = values++; }

  std::string constant(const at::Tensor& tensor) {
    const at::Tensor data = tensor.to(at::kFloat).contiguous();
    std::string key = torch_delegate::content_key("onednn", data);
    named_data.add_tensor(key, data, 64);
    return key;
  }

  /// A step of `op` reading `inputs` and making `node`'s output (defined after its inputs are read).
  step_record& add(const char* op, std::vector<std::int64_t> inputs, const torch::jit::Value* made) {
    step_record& step = steps.emplace_back();
    step.op = op;
    step.inputs = std::move(inputs);
    step.output = define(made);
    return step;
  }

  void conv2d(const torch::jit::Node* node) {
    const cnn_common::folded_conv2d conv = cnn_common::read_conv2d(
        region, node, [&](const torch::jit::Value* value) { return outputs.count(value) != 0; }, folded, "onednn");
    step_record& step = add("convolution", {id(node->input(0))}, conv.output);
    step.convolution = convolution_parameters{conv.stride, conv.padding, conv.dilation, conv.groups};
    step.weight = constant(conv.weight);
    step.bias = constant(conv.bias);
  }

  void max_pool2d(const torch::jit::Node* node) {
    const auto kernel = region.argument<std::vector<std::int64_t>>(node, "kernel_size");
    auto stride = region.argument<std::vector<std::int64_t>>(node, "stride");
    const auto padding = region.argument<std::vector<std::int64_t>>(node, "padding");
    const bool ceil = region.argument<bool>(node, "ceil_mode");
    if (stride.empty()) stride = kernel;
    auto two = [](std::vector<std::int64_t> v) { return v.size() == 1 ? std::vector<std::int64_t>{v[0], v[0]} : v; };
    pooling_parameters window{two(kernel), two(stride), two(padding), ceil};
    if (window.kernel.size() != 2 || window.stride.size() != 2 || window.padding.size() != 2)
      region.reject(node, "onednn: max_pool2d with two sizes each");
    add("max_pool2d", {id(node->input(0))}, node->output()).pooling = std::move(window);
  }

  void layer_norm(const torch::jit::Node* node) {
    const std::int64_t channels = torch_delegate::known_sizes(node->input(0))->back();
    const auto weight = region.argument<std::optional<at::Tensor>>(node, "weight");
    const auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
    step_record& step = add("layer_norm", {id(node->input(0))}, node->output());
    step.layer_norm_eps = region.argument<double>(node, "eps");
    step.weight = constant(weight ? *weight : at::ones({channels}));
    step.bias = constant(bias ? *bias : at::zeros({channels}));
  }

  void linear(const torch::jit::Node* node) {
    const at::Tensor weight = region.argument<at::Tensor>(node, "weight");
    const auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
    if (weight.dim() != 2) region.reject(node, "onednn: a linear's weight must be 2-d");
    step_record& step = add("linear", {id(node->input(0))}, node->output());
    step.weight = constant(weight);
    step.bias = constant(bias ? *bias : at::zeros({weight.size(0)}));
  }

  void mul(const torch::jit::Node* node) {
    const bool first_known = torch_delegate::known_at_lowering(node->input(0)), second_known = torch_delegate::known_at_lowering(node->input(1));
    if (first_known != second_known) {  // times a constant: a scale
      const int side = second_known ? 0 : 1;
      const at::Tensor by = region.argument<at::Tensor>(node, side == 0 ? "other" : "self");
      add("scale", {id(node->input(side))}, node->output()).weight = constant(by);
      return;
    }
    // The full-shape operand first: oneDNN broadcasts the second.
    const auto a = torch_delegate::known_sizes(node->input(0)), b = torch_delegate::known_sizes(node->input(1));
    const bool swap = a && b && (*a)[2] == 1 && (*a)[3] == 1 && ((*b)[2] != 1 || (*b)[3] != 1);
    add("mul", {id(node->input(swap ? 1 : 0)), id(node->input(swap ? 0 : 1))}, node->output());
  }

  void add_node(const torch::jit::Node* node) {
    if (folded.count(node) || node->kind() == c10::prim::Constant) return;
    if (node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
        node->output()->uses()[0].user == node->owningGraph()->return_node())
      return;  // the region's results
    if (node->kind() == c10::prim::ListConstruct) return;  // read by its cat
    if (is(node, "aten::conv2d")) return conv2d(node);
    if (is(node, "aten::batch_norm")) region.reject(node, "onednn: a batch_norm that does not follow a convolution");
    if (is(node, "aten::relu") || is(node, "aten::relu_")) return void(add("relu", {id(node->input(0))}, node->output()));
    if (is(node, "aten::add")) return void(add("add", {id(node->input(0)), id(node->input(1))}, node->output()));
    if (is(node, "aten::max_pool2d")) return max_pool2d(node);
    if (is(node, "aten::adaptive_avg_pool2d")) return void(add("adaptive_avg_pool2d", {id(node->input(0))}, node->output()));
    if (const auto act = activation_of(node)) return void(add("activation", {id(node->input(0))}, node->output()).activation = *act);
    if (is(node, "aten::flatten")) {
      add("flatten", {id(node->input(0))}, node->output()).flatten =
          flatten_parameters{region.argument<std::int64_t>(node, "start_dim"), region.argument<std::int64_t>(node, "end_dim")};
      return;
    }
    if (is(node, "aten::dropout")) {  // eval mode: the output is the input
      ids[node->output()] = id(node->input(0));
      return;
    }
    if (is(node, "aten::permute")) {
      const auto dims = region.argument<std::vector<std::int64_t>>(node, "dims");
      if (dims.size() != torch_delegate::known_sizes(node->input(0))->size())
        region.reject(node, "onednn: permute's dims do not match its input's rank");
      add("permute", {id(node->input(0))}, node->output()).permute_dims = dims;
      return;
    }
    if (is(node, "aten::layer_norm")) return layer_norm(node);
    if (is(node, "aten::linear")) return linear(node);
    if (is(node, "aten::mul")) return mul(node);
    if (is(node, "aten::cat")) {
      std::vector<std::int64_t> inputs;
      for (const torch::jit::Value* input : node->input(0)->node()->inputs()) inputs.push_back(id(input));
      add("cat", std::move(inputs), node->output());
      return;
    }
    region.reject(node, std::string("onednn: ") + node->kind().toQualString() + " is not supported here");
  }
};

}  // namespace

torch_delegate::preprocess_result<region_payload> OnednnBackend::preprocess(const torch_delegate::method_to_lower& region) {
  const torch::jit::Graph& graph = *region.graph();
  step_builder builder{region, {}, {}, {}, {}, {}, 0};
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) builder.define(graph.inputs()[i]);
  const std::int64_t inputs = builder.values;
  std::vector<const torch::jit::Value*> results;
  const torch::jit::Value* returned = graph.outputs()[0];
  if (returned->node()->kind() == c10::prim::TupleConstruct)
    results.assign(returned->node()->inputs().begin(), returned->node()->inputs().end());
  else
    results.push_back(returned);
  builder.outputs.insert(results.begin(), results.end());
  for (const torch::jit::Node* node : graph.nodes()) builder.add_node(node);
  region_payload payload{inputs, builder.values, std::move(builder.steps), {}};
  for (const torch::jit::Value* result : results) {
    const std::int64_t index = builder.id(result);
    if (index < inputs) region.reject(result->node(), "onednn: a region that returns its input is not supported");
    payload.outputs.push_back(index);
  }
  return {std::move(payload), {}, std::move(builder.named_data)};
}

}  // namespace onednn_delegate
