// The onednn backend: preprocess (a region's graph -> steps over value ids, convolution weights
// with BatchNorm folded in as named data), compile (weights reordered once into oneDNN's layout)
// and execute (inputs to oneDNN tensors, the steps, outputs back to dense tensors).
#include "onednn_backend.hpp"

#include "../common/folded_conv2d.hpp"

#include <torch_delegate/named_data.hpp>
#include <torch_delegate/node_queries.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace onednn_delegate {

/// A step as execute runs it: the record, and a convolution's weight in oneDNN's layout.
struct compiled_step {
  step_record record;
  at::Tensor weight;                // oneDNN tensor, reordered for the convolution's parameters
  c10::optional<at::Tensor> bias;   // oneDNN tensor
};

namespace {

enum op : std::int64_t { convolution = 0, relu = 1, add = 2, max_pool2d = 3, global_avg_pool2d = 4 };

bool is(const torch::jit::Node* node, const char* kind) { return node->kind() == c10::Symbol::fromQualString(kind); }

using torch_delegate::constant_is;
using torch_delegate::constant_of;
using torch_delegate::known_at_lowering;
using torch_delegate::known_sizes;

/// A float tensor of rank 4, or one whose dtype or rank is not known (no example inputs).
bool float_4d_or_unknown(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor) return false;
  if (tensor->scalarType() && *tensor->scalarType() != c10::ScalarType::Float) return false;
  return !tensor->dim() || *tensor->dim() == 4;
}

bool all_equal(const std::optional<c10::IValue>& list, std::int64_t expected) {
  if (!list || !list->isIntList()) return false;
  const std::vector<std::int64_t> values = list->toIntVector();
  return std::all_of(values.begin(), values.end(), [&](std::int64_t v) { return v == expected; });
}

}  // namespace

bool OnednnBackend::supports(const torch::jit::Node* node) {
  if (is(node, "aten::conv2d"))  // numeric padding (padding='same' is the str overload), weights known at lowering
    return node->inputs().size() == 7 && node->input(4)->type()->kind() == c10::TypeKind::ListType &&
           known_at_lowering(node->input(1)) && known_at_lowering(node->input(2)) && float_4d_or_unknown(node->input(0));
  if (is(node, "aten::batch_norm")) {
    // Folded into the convolution it follows (eval mode, statistics known): not on its own.
    const torch::jit::Node* before = node->input(0)->node();
    return node->inputs().size() == 9 && constant_is(node->input(5), false) && known_at_lowering(node->input(1)) &&
           known_at_lowering(node->input(2)) && known_at_lowering(node->input(3)) && known_at_lowering(node->input(4)) &&
           is(before, "aten::conv2d") && node->input(0)->uses().size() == 1;
  }
  if (is(node, "aten::relu") || is(node, "aten::relu_")) return float_4d_or_unknown(node->input(0));
  if (is(node, "aten::add")) {
    // oneDNN's sum takes two tensors of one shape (no broadcasting): both sizes must be known.
    if (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))) return false;
    const auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
    return a && b && *a == *b && a->size() == 4 && float_4d_or_unknown(node->input(0)) && float_4d_or_unknown(node->input(1));
  }
  if (is(node, "aten::max_pool2d"))  // oneDNN's pooling has no dilation
    return node->inputs().size() == 6 && all_equal(constant_of(node->input(4)), 1) && float_4d_or_unknown(node->input(0));
  if (is(node, "aten::adaptive_avg_pool2d")) {
    const auto size = constant_of(node->input(1));
    return size && size->isIntList() && size->toIntVector() == std::vector<std::int64_t>{1, 1} &&
           float_4d_or_unknown(node->input(0));
  }
  return false;
}

bool OnednnBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  return std::any_of(region.begin(), region.end(), [](const torch::jit::Node* node) { return is(node, "aten::conv2d"); });
}

bool OnednnBackend::is_available() {
  // TD_ONEDNN_UNAVAILABLE: behave as a LibTorch built without oneDNN (the fallback's tests).
  static const bool available = std::getenv("TD_ONEDNN_UNAVAILABLE") == nullptr && at::hasMKLDNN();
  return available;
}

// ---------------------------------------------------------------------------------------------
// preprocess

namespace {

struct step_builder {
  const torch_delegate::method_to_lower& region;
  std::vector<step_record> steps;
  torch_delegate::named_data_store named_data;
  std::unordered_map<const torch::jit::Value*, std::int64_t> ids;
  std::unordered_set<const torch::jit::Value*> outputs;  // the region's results: not folded away
  std::unordered_set<const torch::jit::Node*> folded;
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

  /// The relu that alone reads `output` (and `output` not a result): folded into the step before.
  bool fused_relu(const torch::jit::Value*& output) {
    if (output->uses().size() != 1 || outputs.count(output)) return false;
    const torch::jit::Node* user = output->uses()[0].user;
    if (!(is(user, "aten::relu") || is(user, "aten::relu_"))) return false;
    folded.insert(user);
    output = user->output();
    return true;
  }

  void conv2d(const torch::jit::Node* node) {
    const cnn_common::folded_conv2d conv = cnn_common::read_conv2d(
        region, node, [&](const torch::jit::Value* value) { return outputs.count(value) != 0; }, folded, "onednn");
    const auto& [stride, padding, dilation] = std::tie(conv.stride, conv.padding, conv.dilation);
    const torch::jit::Value* output = conv.output;
    const std::int64_t input = id(node->input(0));
    const bool then_relu = fused_relu(output);
    steps.push_back({convolution,
                     {input, define(output), stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], conv.groups,
                      then_relu ? 1 : 0},
                     constant(conv.weight),
                     constant(conv.bias)});
  }

  void add_node(const torch::jit::Node* node) {
    if (folded.count(node) || node->kind() == c10::prim::Constant) return;
    if (node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
        node->output()->uses()[0].user == node->owningGraph()->return_node())
      return;  // the region's results
    if (is(node, "aten::conv2d")) return conv2d(node);
    if (is(node, "aten::batch_norm")) region.reject(node, "onednn: a batch_norm that does not follow a convolution");
    if (is(node, "aten::relu") || is(node, "aten::relu_")) {
      const std::int64_t input = id(node->input(0));
      steps.push_back({relu, {input, define(node->output())}, "", ""});
      return;
    }
    if (is(node, "aten::add")) {
      const std::int64_t a = id(node->input(0)), b = id(node->input(1));
      const torch::jit::Value* output = node->output();
      const bool then_relu = fused_relu(output);
      // In place into its first operand when nothing else reads it (a residual's convolution
      // output; a region input is a oneDNN copy made per call, so the caller's tensor is not it).
      const torch::jit::Value* first = node->input(0);
      const bool in_place = first->uses().size() == 1 && !outputs.count(first);
      steps.push_back({add, {a, b, define(output), (then_relu ? 1 : 0) | (in_place ? 2 : 0)}, "", ""});
      return;
    }
    if (is(node, "aten::max_pool2d")) {
      const auto kernel = region.argument<std::vector<std::int64_t>>(node, "kernel_size");
      auto stride = region.argument<std::vector<std::int64_t>>(node, "stride");
      const auto padding = region.argument<std::vector<std::int64_t>>(node, "padding");
      const bool ceil = region.argument<bool>(node, "ceil_mode");
      if (stride.empty()) stride = kernel;
      auto two = [](std::vector<std::int64_t> v) { return v.size() == 1 ? std::vector<std::int64_t>{v[0], v[0]} : v; };
      const auto k = two(kernel), s = two(stride), p = two(padding);
      if (k.size() != 2 || s.size() != 2 || p.size() != 2) region.reject(node, "onednn: max_pool2d with two sizes each");
      const std::int64_t input = id(node->input(0));
      steps.push_back({max_pool2d, {input, define(node->output()), k[0], k[1], s[0], s[1], p[0], p[1], ceil ? 1 : 0}, "", ""});
      return;
    }
    if (is(node, "aten::adaptive_avg_pool2d")) {
      const std::int64_t input = id(node->input(0));
      steps.push_back({global_avg_pool2d, {input, define(node->output())}, "", ""});
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

// ---------------------------------------------------------------------------------------------
// runtime

compiled_region OnednnBackend::compile(const region_payload& payload, const torch_delegate::compile_context& context) {
  TORCH_CHECK(is_available(), "onednn: this LibTorch was built without oneDNN");
  auto steps = std::make_shared<std::vector<compiled_step>>();
  std::vector<std::string> used;  // released once every step has read them (steps share equal weights)
  for (const step_record& record : payload.steps) {
    // Per op: how many ints it has, and how many of them (first) are value ids.
    static constexpr std::int64_t sizes[] = {10, 2, 4, 9, 2}, ids[] = {2, 2, 3, 2, 2};
    TORCH_CHECK(record.op >= convolution && record.op <= global_avg_pool2d, "onednn: region ", context.method(),
                ": unknown step ", record.op, " (a payload from a newer onednn backend?)");
    const auto op = static_cast<std::size_t>(record.op);
    TORCH_CHECK(static_cast<std::int64_t>(record.ints.size()) == sizes[op], "onednn: region ", context.method(), ": step ",
                record.op, " has ", record.ints.size(), " parameters, expected ", sizes[op]);
    for (std::int64_t k = 0; k < ids[op]; ++k)
      TORCH_CHECK(record.ints[static_cast<std::size_t>(k)] >= 0 && record.ints[static_cast<std::size_t>(k)] < payload.values,
                  "onednn: region ", context.method(), ": value ", record.ints[static_cast<std::size_t>(k)], " out of range [0, ",
                  payload.values, ")");
    compiled_step step{record, {}, c10::nullopt};
    if (record.op == convolution) {
      const auto& p = record.ints;
      const at::Tensor weight = context.named_data().tensor(record.weight);
      step.weight = at::mkldnn_reorder_conv2d_weight(weight.to_mkldnn(), {p[4], p[5]}, {p[2], p[3]}, {p[6], p[7]}, p[8]);
      step.bias = context.named_data().tensor(record.bias).to_mkldnn();
      used.push_back(record.weight);
      used.push_back(record.bias);
    }
    steps->push_back(std::move(step));
  }
  for (const std::string& key : used) context.release_named_data(key);  // the reordered copies are what execute reads
  for (std::int64_t index : payload.outputs)
    TORCH_CHECK(index >= payload.inputs && index < payload.values, "onednn: region ", context.method(), ": output value ",
                index, " out of range");
  return {std::move(steps), payload.inputs, payload.values, payload.outputs, std::string(context.method())};
}

std::vector<c10::IValue> OnednnBackend::execute(compiled_region& region, torch_delegate::inputs args) {
  TORCH_CHECK(static_cast<std::int64_t>(args.size()) == region.inputs, "onednn: region ", region.method, " takes ",
              region.inputs, " inputs, got ", args.size());
  std::vector<at::Tensor> values(static_cast<std::size_t>(region.values));
  for (std::size_t i = 0; i < args.size(); ++i) {
    TORCH_CHECK(args[i].isTensor(), "onednn: region ", region.method, ": input ", i + 1, " is not a tensor");
    const at::Tensor& given = args[i].toTensor();
    TORCH_CHECK(given.scalar_type() == at::kFloat && given.device().is_cpu() && given.dim() == 4, "onednn: region ",
                region.method, ": input ", i + 1, " must be a 4-d float CPU tensor, got ", given.dim(), "-d ",
                given.scalar_type(), " on ", given.device());
    values[i] = given.contiguous().to_mkldnn();
  }
  for (const compiled_step& step : *region.steps) {
    const auto& p = step.record.ints;
    auto in = [&](std::size_t k) -> const at::Tensor& { return values.at(static_cast<std::size_t>(p[k])); };
    auto out = [&](std::size_t k) -> at::Tensor& { return values.at(static_cast<std::size_t>(p[k])); };
    switch (step.record.op) {
      case convolution:
        out(1) = at::mkldnn_convolution(in(0), step.weight, step.bias, {p[4], p[5]}, {p[2], p[3]}, {p[6], p[7]}, p[8]);
        if (p[9]) at::relu_(out(1));
        break;
      case relu:
        out(1) = at::relu(in(0));
        break;
      case add:
        if (p[3] & 2) {
          at::Tensor sum = in(0);
          sum.add_(in(1));
          out(2) = std::move(sum);
        } else {
          out(2) = at::add(in(0), in(1));
        }
        if (p[3] & 1) at::relu_(out(2));
        break;
      case max_pool2d:
        out(1) = at::max_pool2d(in(0), {p[2], p[3]}, {p[4], p[5]}, {p[6], p[7]}, {1, 1}, p[8] != 0);
        break;
      case global_avg_pool2d:
        out(1) = at::adaptive_avg_pool2d(in(0), {1, 1});
        break;
    }
  }
  std::vector<c10::IValue> outputs;
  for (std::int64_t index : region.outputs) outputs.emplace_back(values.at(static_cast<std::size_t>(index)).to_dense());
  return outputs;
}

}  // namespace onednn_delegate
