// The xnnpack backend: preprocess (a region's graph -> an XNNPACK subgraph description and its
// packed-layout weights as named data), compile (the description -> an XNNPACK runtime) and
// execute (set up when pointers change, invoke).
#include "xnnpack_backend.hpp"

#include "toolkit/folding.hpp"
#include "toolkit/fused_activation.hpp"

#include <torch_delegate/named_data.hpp>
#include <torch_delegate/node_queries.hpp>

#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <pthreadpool.h>
#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace xnnpack_delegate {

namespace {

enum op : std::int64_t {
  conv2d = 0,
  depthwise_conv2d = 1,
  fully_connected = 2,
  clamp = 3,
  add2 = 4,
  multiply2 = 5,
  sigmoid = 6,
  hardswish = 7,
  max_pool2d = 8,
  avg_pool2d = 9,
  global_avg_pool2d = 10,
  reshape = 11,
  softmax = 12,
};

constexpr double inf = std::numeric_limits<double>::infinity();

bool is(const torch::jit::Node* node, const char* kind) { return node->kind() == c10::Symbol::fromQualString(kind); }

using torch_delegate::constant_is;
using torch_delegate::constant_of;
using torch_delegate::known_at_lowering;
using torch_delegate::known_sizes;

/// Activations XNNPACK runs as a clamp: [min, max], or nullopt for another node.
using torch_delegate::toolkit::clamp_range;

bool is_float_or_unknown(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  return tensor && (!tensor->scalarType() || *tensor->scalarType() == c10::ScalarType::Float);
}

}  // namespace

bool XnnpackBackend::supports(const torch::jit::Node* node) {
  if (clamp_range(node)) return is_float_or_unknown(node->input(0));
  for (const char* kind : {"aten::hardswish", "aten::sigmoid", "aten::silu", "aten::hardsigmoid"})
    if (is(node, kind)) return is_float_or_unknown(node->input(0));
  if (is(node, "aten::conv2d")) {
    // conv2d(input, weight, bias, stride, padding: int[], dilation, groups): the weight known at
    // lowering, numeric padding (padding='same' is the str overload).
    return node->inputs().size() == 7 && node->input(4)->type()->kind() == c10::TypeKind::ListType &&
           known_at_lowering(node->input(1)) && known_at_lowering(node->input(2)) && is_float_or_unknown(node->input(0));
  }
  if (is(node, "aten::batch_norm"))  // eval-mode statistics, known at lowering
    return node->inputs().size() == 9 && constant_is(node->input(5), false) && known_at_lowering(node->input(3)) &&
           known_at_lowering(node->input(4));
  if (is(node, "aten::linear")) {
    auto sizes = known_sizes(node->input(0));
    // [N, C] or [N, T, C] (a transformer's tokens: XNNPACK's fully-connected takes every leading
    // dimension as batch); not 4-d, which is NHWC inside.
    return known_at_lowering(node->input(1)) && known_at_lowering(node->input(2)) &&
           (!sizes || sizes->size() == 2 || sizes->size() == 3);
  }
  if (is(node, "aten::add") || is(node, "aten::mul")) {
    // Two float tensors of one rank (numpy broadcasting, NHWC inside), add's alpha 1.
    if (node->inputs().size() < 2 || node->input(0)->type()->kind() != c10::TypeKind::TensorType ||
        node->input(1)->type()->kind() != c10::TypeKind::TensorType)
      return false;
    if (is(node, "aten::add") && (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))))
      return false;
    auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
    return (!a || !b || a->size() == b->size()) && is_float_or_unknown(node->input(0)) && is_float_or_unknown(node->input(1));
  }
  if (is(node, "aten::max_pool2d")) return node->inputs().size() == 6;
  if (is(node, "aten::avg_pool2d")) {  // no padding, floor mode, no divisor override
    if (node->inputs().size() != 7 || !constant_is(node->input(4), false) || !constant_is(node->input(6), c10::IValue()))
      return false;
    const auto padding = constant_of(node->input(3));
    if (!padding || !padding->isIntList()) return false;
    const std::vector<std::int64_t> pads = padding->toIntVector();
    return std::all_of(pads.begin(), pads.end(), [](std::int64_t p) { return p == 0; });
  }
  if (is(node, "aten::adaptive_avg_pool2d")) {
    const auto size = constant_of(node->input(1));
    return size && size->isIntList() && size->toIntVector() == std::vector<std::int64_t>{1, 1};
  }
  if (is(node, "aten::flatten")) {
    // NHWC inside: flattening [N, C, 1, 1] (or a 2-d tensor) keeps the memory order.
    auto sizes = known_sizes(node->input(0));
    return constant_is(node->input(1), c10::IValue(std::int64_t{1})) && constant_is(node->input(2), c10::IValue(std::int64_t{-1})) &&
           (!sizes || sizes->size() == 2 || (sizes->size() == 4 && (*sizes)[2] == 1 && (*sizes)[3] == 1));
  }
  if (is(node, "aten::dropout")) {
    // The identity in eval mode, or with p = 0 in any mode (Swin's attention dropout is called
    // with its default training=True and p=0.0).
    return constant_is(node->input(2), false) || constant_is(node->input(1), c10::IValue(0.0));
  }
  if (is(node, "aten::softmax")) {
    auto sizes = known_sizes(node->input(0));
    return constant_is(node->input(2), c10::IValue()) && (!sizes || sizes->size() == 2);
  }
  return false;
}

bool XnnpackBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  // In an if or loop body (nn.MultiheadAttention's branches), example inputs give no shapes:
  // such a region is refused rather than failing at preprocess (at the top level, preprocess's
  // error asks for example inputs).
  if (!region.empty() && region.front()->owningBlock() != region.front()->owningGraph()->block())
    for (const torch::jit::Node* node : region)
      for (const torch::jit::Value* output : node->outputs())
        if (output->type()->kind() == c10::TypeKind::TensorType && !known_sizes(output)) return false;
  return std::any_of(region.begin(), region.end(), [](const torch::jit::Node* node) {
    return is(node, "aten::conv2d") || is(node, "aten::linear") || is(node, "aten::max_pool2d") ||
           is(node, "aten::adaptive_avg_pool2d");
  });
}

// ---------------------------------------------------------------------------------------------
// preprocess

namespace {

/// NHWC dims of an NCHW-sized 4-d tensor; other ranks as they are.
std::vector<std::int64_t> xnn_dims(std::vector<std::int64_t> sizes) {
  if (sizes.size() == 4) return {sizes[0], sizes[2], sizes[3], sizes[1]};
  return sizes;
}

struct subgraph_builder {
  const torch_delegate::method_to_lower& region;
  std::vector<value_record> values;
  std::vector<node_record> nodes;
  torch_delegate::named_data_store named_data;
  std::unordered_map<const torch::jit::Value*, std::int64_t> ids;
  std::unordered_map<const torch::jit::Value*, std::int64_t> output_ids;  // region outputs -> external id
  std::unordered_set<const torch::jit::Node*> folded;                      // consumed by the node before them
  std::size_t inputs = 0;

  /// The id of a value made before (an input or a node's output).
  std::int64_t id(const torch::jit::Value* value) {
    auto found = ids.find(value);
    if (found == ids.end())
      region.reject(value->node(), "xnnpack: %" + value->debugName() + " (" + value->type()->annotation_str() +
                                       ") is not a tensor this region makes or takes");
    return found->second;
  }

  /// Defines the output `value` of a node: its region-output id, or a new internal one.
  std::int64_t define(const torch::jit::Value* value) {
    const std::vector<std::int64_t> dims = xnn_dims(region.sizes(value));
    auto output = output_ids.find(value);
    std::int64_t index;
    if (output != output_ids.end() && values[output->second].dims.empty()) {
      index = output->second;
      values[index].dims = dims;
    } else {
      index = static_cast<std::int64_t>(values.size());
      values.push_back({dims, -1, ""});
    }
    ids[value] = index;
    return index;
  }

  /// A static value (weights): stored once by content as named data.
  std::int64_t constant(const at::Tensor& tensor, std::vector<std::int64_t> dims) {
    const at::Tensor data = tensor.to(at::kFloat).contiguous();
    const std::string key = torch_delegate::content_key("xnnpack", data);
    named_data.add_tensor(key, data, 64);
    values.push_back({std::move(dims), -1, key});
    return static_cast<std::int64_t>(values.size()) - 1;
  }

  /// The clamp that follows `output` and only it, folded into the node that makes it.
  std::pair<double, double> fused_activation(const torch::jit::Value*& output) {
    if (output->uses().size() != 1 || output_ids.count(output)) return {-inf, inf};
    const torch::jit::Node* user = output->uses()[0].user;
    const auto range = clamp_range(user);
    if (!range || user->input(0) != output) return {-inf, inf};
    folded.insert(user);
    output = user->output();
    return *range;
  }

  void convolution(const torch::jit::Node* node) {
    const torch_delegate::toolkit::folded_conv2d conv = torch_delegate::toolkit::read_conv2d(
        region, node, [&](const torch::jit::Value* value) { return output_ids.count(value) != 0; }, folded, "xnnpack");
    const at::Tensor& weight = conv.weight;
    const auto& [stride, padding, dilation] = std::tie(conv.stride, conv.padding, conv.dilation);
    const std::int64_t groups = conv.groups;
    const std::int64_t out_channels = weight.size(0);
    const torch::jit::Value* output = conv.output;
    const auto [low, high] = fused_activation(output);
    const std::int64_t input = id(node->input(0));
    const std::int64_t in_channels = region.sizes(node->input(0))[1];
    const std::int64_t kh = weight.size(2), kw = weight.size(3);
    const bool depthwise = groups > 1 && groups == in_channels && weight.size(1) == 1;
    std::int64_t filter;
    if (depthwise)  // [C_out, 1, kh, kw] -> [1, kh, kw, C_out]
      filter = constant(weight.permute({1, 2, 3, 0}), {1, kh, kw, out_channels});
    else  // [O, I/g, kh, kw] -> [O, kh, kw, I/g]
      filter = constant(weight.permute({0, 2, 3, 1}), {out_channels, kh, kw, weight.size(1)});
    const std::int64_t bias_id = constant(conv.bias, {out_channels});
    const std::int64_t out = define(output);
    std::vector<std::int64_t> ints{input, filter, bias_id, out, padding[0], padding[1], padding[0], padding[1], kh, kw,
                                   stride[0], stride[1], dilation[0], dilation[1]};
    if (depthwise) {
      ints.insert(ints.end(), {out_channels / in_channels, in_channels});
      nodes.push_back(node_record{depthwise_conv2d, std::move(ints), std::vector<double>{low, high}});
    } else {
      ints.insert(ints.end(), {groups, in_channels / groups, out_channels / groups});
      nodes.push_back(node_record{conv2d, std::move(ints), std::vector<double>{low, high}});
    }
  }

  void binary(const torch::jit::Node* node, op code) {
    const std::int64_t a = id(node->input(0)), b = id(node->input(1));
    const torch::jit::Value* output = node->output();
    const auto [low, high] = fused_activation(output);
    nodes.push_back(node_record{code, std::vector<std::int64_t>{a, b, define(output)}, std::vector<double>{low, high}});
  }

  /// y = x op c for a per-channel or scalar constant c (dims broadcast against NHWC).
  std::int64_t with_constant(std::int64_t x, op code, const at::Tensor& c, const torch::jit::Value* output) {
    const std::int64_t k = constant(c, {c.numel()});
    const std::int64_t out = output ? define(output) : internal_like(x);
    nodes.push_back(node_record{code, std::vector<std::int64_t>{x, k, out}, std::vector<double>{-inf, inf}});
    return out;
  }

  std::int64_t internal_like(std::int64_t like) {
    values.push_back({values[like].dims, -1, ""});
    return static_cast<std::int64_t>(values.size()) - 1;
  }

  void pooling(const torch::jit::Node* node) {
    const std::vector<std::int64_t> in = region.sizes(node->input(0)), out_sizes = region.sizes(node->output());
    auto kernel = region.argument<std::vector<std::int64_t>>(node, "kernel_size");
    auto stride = region.argument<std::vector<std::int64_t>>(node, "stride");
    auto padding = region.argument<std::vector<std::int64_t>>(node, "padding");
    if (kernel.size() == 1) kernel.push_back(kernel[0]);
    if (stride.empty()) stride = kernel;
    if (stride.size() == 1) stride.push_back(stride[0]);
    if (padding.size() == 1) padding.push_back(padding[0]);
    std::vector<std::int64_t> dilation{1, 1};
    const bool max = is(node, "aten::max_pool2d");
    if (max) {
      dilation = region.argument<std::vector<std::int64_t>>(node, "dilation");
      if (dilation.size() == 1) dilation.push_back(dilation[0]);
    }
    // ceil_mode: the bottom and right padding that give the recorded output size (max pooling
    // ignores padding, so this is exact).
    std::int64_t bottom = padding[0], right = padding[1];
    for (int d = 0; d < 2; ++d) {
      const std::int64_t needed = (out_sizes[2 + d] - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[2 + d] - padding[d];
      (d == 0 ? bottom : right) = std::max(needed, padding[d]);
    }
    const std::int64_t input = id(node->input(0));
    const torch::jit::Value* output = node->output();
    const auto [low, high] = fused_activation(output);
    const std::int64_t out = define(output);
    if (max) {
      nodes.push_back(node_record{max_pool2d,
                         std::vector<std::int64_t>{input, out, padding[0], right, bottom, padding[1], kernel[0], kernel[1],
                                                   stride[0], stride[1], dilation[0], dilation[1],
                                                   region.argument<bool>(node, "ceil_mode") ? 1 : 0},
                         std::vector<double>{low, high}});
    } else {
      if (bottom != padding[0] || right != padding[1]) region.reject(node, "xnnpack: avg_pool2d in ceil mode");
      nodes.push_back(node_record{avg_pool2d,
                         std::vector<std::int64_t>{input, out, 0, 0, 0, 0, kernel[0], kernel[1], stride[0], stride[1]},
                         std::vector<double>{low, high}});
    }
  }

  void alias(const torch::jit::Node* node) {
    const std::int64_t input = id(node->input(0));
    if (output_ids.count(node->output())) {
      // A region output: a copy (a clamp over everything), XNNPACK has no identity.
      nodes.push_back(node_record{clamp, std::vector<std::int64_t>{input, define(node->output())}, std::vector<double>{-inf, inf}});
      return;
    }
    ids[node->output()] = input;
  }

  void add(const torch::jit::Node* node) {
    if (folded.count(node) || node->kind() == c10::prim::Constant) return;
    if (node->kind() == c10::prim::TupleConstruct && node->output()->uses().size() == 1 &&
        node->output()->uses()[0].user == node->owningGraph()->return_node())
      return;  // the region's results
    if (is(node, "aten::conv2d")) return convolution(node);
    if (auto range = clamp_range(node)) {
      const std::int64_t input = id(node->input(0));
      nodes.push_back(node_record{clamp, std::vector<std::int64_t>{input, define(node->output())},
                         std::vector<double>{range->first, range->second}});
      return;
    }
    if (is(node, "aten::batch_norm")) {
      const auto [scale, shift] = torch_delegate::toolkit::batch_norm_affine(region, node, "xnnpack");
      const std::int64_t scaled = with_constant(id(node->input(0)), multiply2, scale, nullptr);
      with_constant(scaled, add2, shift, node->output());
      return;
    }
    if (is(node, "aten::add")) return binary(node, add2);
    if (is(node, "aten::mul")) return binary(node, multiply2);
    if (is(node, "aten::sigmoid") || is(node, "aten::hardswish")) {
      const std::int64_t input = id(node->input(0));
      nodes.push_back(node_record{is(node, "aten::sigmoid") ? sigmoid : hardswish, std::vector<std::int64_t>{input, define(node->output())},
                         std::vector<double>{}});
      return;
    }
    if (is(node, "aten::silu")) {  // x * sigmoid(x)
      const std::int64_t input = id(node->input(0));
      const std::int64_t s = internal_like(input);
      nodes.push_back(node_record{sigmoid, std::vector<std::int64_t>{input, s}, std::vector<double>{}});
      nodes.push_back(node_record{multiply2, std::vector<std::int64_t>{input, s, define(node->output())}, std::vector<double>{-inf, inf}});
      return;
    }
    if (is(node, "aten::hardsigmoid")) {  // clamp(x / 6 + 1/2, 0, 1)
      const std::int64_t input = id(node->input(0));
      const std::int64_t scaled = with_constant(input, multiply2, at::full({1}, 1.0 / 6.0), nullptr);
      const std::int64_t shifted = with_constant(scaled, add2, at::full({1}, 0.5), nullptr);
      nodes.push_back(node_record{clamp, std::vector<std::int64_t>{shifted, define(node->output())}, std::vector<double>{0.0, 1.0}});
      return;
    }
    if (is(node, "aten::max_pool2d") || is(node, "aten::avg_pool2d")) return pooling(node);
    if (is(node, "aten::adaptive_avg_pool2d")) {
      const std::int64_t input = id(node->input(0));
      const torch::jit::Value* output = node->output();
      const auto [low, high] = fused_activation(output);
      nodes.push_back(node_record{global_avg_pool2d, std::vector<std::int64_t>{input, define(output)}, std::vector<double>{low, high}});
      return;
    }
    if (is(node, "aten::flatten")) {
      const std::int64_t input = id(node->input(0));
      std::vector<std::int64_t> ints{input, define(node->output())};
      for (std::int64_t size : region.sizes(node->output())) ints.push_back(size);
      nodes.push_back(node_record{reshape, std::move(ints), std::vector<double>{}});
      return;
    }
    if (is(node, "aten::dropout")) {
      if (region.argument<bool>(node, "train") && region.argument<double>(node, "p") != 0.0)
        region.reject(node, "xnnpack: dropout in training mode");
      return alias(node);
    }
    if (is(node, "aten::linear")) {
      const at::Tensor weight = region.argument<at::Tensor>(node, "weight").to(at::kFloat);
      auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
      const std::int64_t input = id(node->input(0));
      const std::int64_t filter = constant(weight, {weight.size(0), weight.size(1)});
      const std::int64_t b = constant(bias ? *bias : at::zeros({weight.size(0)}), {weight.size(0)});
      const torch::jit::Value* output = node->output();
      const auto [low, high] = fused_activation(output);
      nodes.push_back(node_record{fully_connected, std::vector<std::int64_t>{input, filter, b, define(output)},
                         std::vector<double>{low, high}});
      return;
    }
    if (is(node, "aten::softmax")) {
      const std::int64_t input = id(node->input(0));
      const std::int64_t dim = region.argument<std::int64_t>(node, "dim");
      const auto rank = static_cast<std::int64_t>(region.sizes(node->input(0)).size());
      if (dim != -1 && dim != rank - 1) region.reject(node, "xnnpack: softmax over the last dimension only");
      nodes.push_back(node_record{softmax, std::vector<std::int64_t>{input, define(node->output())}, std::vector<double>{}});
      return;
    }
    region.reject(node, std::string("xnnpack: ") + node->kind().toQualString() + " is not supported here");
  }
};

}  // namespace

torch_delegate::preprocess_result<region_payload> XnnpackBackend::preprocess(const torch_delegate::method_to_lower& region) {
  const torch::jit::Graph& graph = *region.graph();
  subgraph_builder builder{region, {}, {}, {}, {}, {}, {}};
  // Externals first: the inputs (ids 0..), then the outputs (their dims set where they are made).
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) {
    const torch::jit::Value* input = graph.inputs()[i];
    builder.values.push_back({xnn_dims(region.sizes(input)), static_cast<std::int64_t>(i - 1), ""});
    builder.ids[input] = static_cast<std::int64_t>(i - 1);
  }
  builder.inputs = graph.inputs().size() - 1;
  std::vector<const torch::jit::Value*> outputs;
  const torch::jit::Value* returned = graph.outputs()[0];
  if (returned->node()->kind() == c10::prim::TupleConstruct)
    outputs.assign(returned->node()->inputs().begin(), returned->node()->inputs().end());
  else
    outputs.push_back(returned);
  std::vector<std::vector<std::int64_t>> output_sizes;
  for (const torch::jit::Value* output : outputs) {
    if (builder.output_ids.count(output) || builder.ids.count(output))
      region.reject(output->node(), "xnnpack: a region that returns one value twice, or an input, is not supported");
    const auto index = static_cast<std::int64_t>(builder.values.size());
    builder.values.push_back({{}, index, ""});
    builder.output_ids[output] = index;
    output_sizes.push_back(region.sizes(output));
  }
  for (const torch::jit::Node* node : graph.nodes()) builder.add(node);
  for (const torch::jit::Value* output : outputs)
    if (builder.values[builder.output_ids.at(output)].dims.empty())
      region.reject(output->node(), "xnnpack: a region output is not made by an XNNPACK node");
  region_payload payload{std::move(builder.values), std::move(builder.nodes), std::move(output_sizes),
                         static_cast<std::int64_t>(builder.inputs)};
  return {std::move(payload), {}, std::move(builder.named_data)};
}

// ---------------------------------------------------------------------------------------------
// runtime

namespace {

void check(xnn_status status, const char* what) {
  TORCH_CHECK(status == xnn_status_success, "xnnpack: ", what, " failed (xnn_status ", static_cast<int>(status), ")");
}

/// The process's XNNPACK thread pool for `threads` threads (nullptr for one: the calling thread).
pthreadpool_t thread_pool(std::size_t threads) {
  static std::mutex mutex;
  static std::map<std::size_t, std::unique_ptr<pthreadpool, decltype(&pthreadpool_destroy)>> pools;
  if (threads <= 1) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = pools.find(threads);
  if (found == pools.end())
    found = pools.emplace(threads, std::unique_ptr<pthreadpool, decltype(&pthreadpool_destroy)>(pthreadpool_create(threads),
                                                                                                 &pthreadpool_destroy))
                .first;
  return found->second.get();
}

}  // namespace

struct runtime_state {
  xnn_runtime_t runtime = nullptr;
  std::string method;
  std::vector<at::Tensor> statics;  // the static data the runtime reads at run time (binary ops' constants)
  std::vector<std::uint32_t> external_ids;  // inputs, then outputs
  std::vector<std::vector<std::int64_t>> output_sizes;
  std::size_t inputs = 0;
  std::size_t threads = 1;  // the pool's size (at::get_num_threads() when it was built)
  std::vector<const void*> bound;  // the pointers of the last setup
  // Buffers kept from call to call, so that the pointers stay the same and the runtime is not
  // set up again (xnn_setup_runtime re-runs every operator's setup): per input, the NHWC copy of
  // an input given in another layout; per output, the last output, reused once its caller has
  // dropped it (this state holds the only reference).
  std::vector<at::Tensor> staged;
  std::vector<at::Tensor> outputs;
  std::mutex mutex;
  ~runtime_state() {
    if (runtime) xnn_delete_runtime(runtime);
  }
};

namespace {

/// `tensor` laid out NHWC. Converted here, on the calling thread, not with ATen's copy: ATen
/// would run it on its OpenMP threads, which then spin for a while after it, on the cores
/// XNNPACK's pool is about to use (two cores: the whole model twice as slow).
/// `buffer`: the copy made by the last call, reused when nothing else holds it.
at::Tensor to_channels_last(const at::Tensor& tensor, at::Tensor& buffer) {
  const at::Tensor source = tensor.contiguous();  // NCHW (a no-op for the usual image batch)
  if (!buffer.defined() || buffer.use_count() != 1 || buffer.sizes() != tensor.sizes())
    buffer = at::empty(tensor.sizes(), at::TensorOptions(at::kFloat).memory_format(at::MemoryFormat::ChannelsLast));
  at::Tensor out = buffer;
  const std::int64_t n = tensor.size(0), c = tensor.size(1), hw = tensor.size(2) * tensor.size(3);
  const float* from = source.data_ptr<float>();
  float* to = out.data_ptr<float>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t k = 0; k < c; ++k) {
      const float* plane = from + (b * c + k) * hw;
      float* column = to + b * c * hw + k;
      for (std::int64_t p = 0; p < hw; ++p) column[p * c] = plane[p];
    }
  return out;
}

}  // namespace

bool XnnpackBackend::is_available() {
  // TD_XNNPACK_UNAVAILABLE: behave as on a CPU XNNPACK does not support (the fallback's tests).
  static const bool initialized = std::getenv("TD_XNNPACK_UNAVAILABLE") == nullptr && xnn_initialize(nullptr) == xnn_status_success;
  return initialized;
}

namespace {

/// A runtime for `payload` (its dims as they are); `data` gives the tensor of a static value's key.
/// XNNPACK packs convolution and fully-connected weights when the runtime is created: `packed` is
/// told each key it no longer needs.
std::shared_ptr<runtime_state> build_runtime(const region_payload& payload, const std::string& method,
                                             const std::function<at::Tensor(const std::string&)>& data,
                                             const std::function<void(const std::string&)>& packed_key) {
  const auto& [values, nodes, output_sizes, inputs] = payload;
  auto state = std::make_shared<runtime_state>();
  state->method = method;
  state->output_sizes = output_sizes;
  state->inputs = static_cast<std::size_t>(inputs);
  const std::size_t externals = static_cast<std::size_t>(inputs) + output_sizes.size();
  xnn_subgraph_t subgraph = nullptr;
  check(xnn_create_subgraph(static_cast<std::uint32_t>(externals), 0, &subgraph), "xnn_create_subgraph");
  std::unique_ptr<xnn_subgraph, decltype(&xnn_delete_subgraph)> owner(subgraph, &xnn_delete_subgraph);

  // Which static values XNNPACK packs (convolution and fully-connected weights and biases): it
  // copies them when the runtime is created, so the named data can be dropped after. The others
  // (binary ops' constants) are read at run time: the state keeps them.
  std::unordered_set<std::int64_t> packed;
  for (const auto& [code, ints, floats] : nodes)
    if (code == conv2d || code == depthwise_conv2d || code == fully_connected) packed.insert({ints[1], ints[2]});

  std::vector<std::uint32_t> ids(values.size());
  std::vector<at::Tensor> keep_until_created;
  std::vector<std::string> packed_keys;
  for (std::size_t v = 0; v < values.size(); ++v) {
    const auto& [dims, external, key] = values[v];
    std::vector<std::size_t> shape(dims.begin(), dims.end());
    const void* pointer = nullptr;
    if (!key.empty()) {
      at::Tensor tensor = data(key);
      if (!packed.count(static_cast<std::int64_t>(v))) {
        tensor = tensor.clone();
        state->statics.push_back(tensor);
      } else {
        keep_until_created.push_back(tensor);
      }
      pointer = tensor.data_ptr();
      packed_keys.push_back(key);
    }
    std::uint32_t flags = 0;
    if (external >= 0) flags = external < inputs ? XNN_VALUE_FLAG_EXTERNAL_INPUT : XNN_VALUE_FLAG_EXTERNAL_OUTPUT;
    check(xnn_define_tensor_value(subgraph, xnn_datatype_fp32, shape.size(), shape.data(), pointer,
                                  external >= 0 ? static_cast<std::uint32_t>(external) : XNN_INVALID_VALUE_ID, flags, &ids[v]),
          "xnn_define_tensor_value");
  }
  auto u = [&](std::int64_t value) { return ids.at(static_cast<std::size_t>(value)); };
  auto f = [](double value) { return static_cast<float>(value); };
  for (const auto& [code, i, x] : nodes) {
    switch (code) {
      case conv2d:
        check(xnn_define_convolution_2d(subgraph, i[4], i[5], i[6], i[7], i[8], i[9], i[10], i[11], i[12], i[13], i[14], i[15],
                                        i[16], f(x[0]), f(x[1]), u(i[0]), u(i[1]), u(i[2]), u(i[3]), 0),
              "xnn_define_convolution_2d");
        break;
      case depthwise_conv2d:
        check(xnn_define_depthwise_convolution_2d(subgraph, i[4], i[5], i[6], i[7], i[8], i[9], i[10], i[11], i[12], i[13],
                                                  i[14], i[15], f(x[0]), f(x[1]), u(i[0]), u(i[1]), u(i[2]), u(i[3]), 0),
              "xnn_define_depthwise_convolution_2d");
        break;
      case fully_connected:
        check(xnn_define_fully_connected(subgraph, f(x[0]), f(x[1]), u(i[0]), u(i[1]), u(i[2]), u(i[3]), 0),
              "xnn_define_fully_connected");
        break;
      case clamp:
        check(xnn_define_clamp(subgraph, f(x[0]), f(x[1]), u(i[0]), u(i[1]), 0), "xnn_define_clamp");
        break;
      case add2:
        check(xnn_define_add2(subgraph, f(x[0]), f(x[1]), u(i[0]), u(i[1]), u(i[2]), 0), "xnn_define_add2");
        break;
      case multiply2:
        check(xnn_define_multiply2(subgraph, f(x[0]), f(x[1]), u(i[0]), u(i[1]), u(i[2]), 0), "xnn_define_multiply2");
        break;
      case sigmoid:
        check(xnn_define_sigmoid(subgraph, u(i[0]), u(i[1]), 0), "xnn_define_sigmoid");
        break;
      case hardswish:
        check(xnn_define_hardswish(subgraph, u(i[0]), u(i[1]), 0), "xnn_define_hardswish");
        break;
      case max_pool2d:
        check(xnn_define_max_pooling_2d(subgraph, i[2], i[3], i[4], i[5], i[6], i[7], i[8], i[9], i[10], i[11], f(x[0]),
                                        f(x[1]), u(i[0]), u(i[1]), 0),
              "xnn_define_max_pooling_2d");
        break;
      case avg_pool2d:
        check(xnn_define_average_pooling_2d(subgraph, i[2], i[3], i[4], i[5], i[6], i[7], i[8], i[9], f(x[0]), f(x[1]),
                                            u(i[0]), u(i[1]), 0),
              "xnn_define_average_pooling_2d");
        break;
      case global_avg_pool2d:
        check(xnn_define_global_average_pooling_2d(subgraph, f(x[0]), f(x[1]), u(i[0]), u(i[1]), 0),
              "xnn_define_global_average_pooling_2d");
        break;
      case reshape: {
        std::vector<std::size_t> shape(i.begin() + 2, i.end());
        check(xnn_define_static_reshape(subgraph, shape.size(), shape.data(), u(i[0]), u(i[1]), 0), "xnn_define_static_reshape");
        break;
      }
      case softmax:
        check(xnn_define_softmax(subgraph, u(i[0]), u(i[1]), 0), "xnn_define_softmax");
        break;
      default:
        TORCH_CHECK(false, "xnnpack: unknown op ", code, " in the payload of ", state->method);
    }
  }
  const auto threads = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
  state->threads = threads;
  check(xnn_create_runtime_v2(subgraph, thread_pool(threads), XNN_FLAG_YIELD_WORKERS, &state->runtime), "xnn_create_runtime_v2");
  for (std::size_t e = 0; e < externals; ++e) state->external_ids.push_back(static_cast<std::uint32_t>(e));
  for (const std::string& key : packed_keys) packed_key(key);
  return state;
}

/// `recorded` with the dims its values get for inputs of `given` sizes (NCHW): each node's output
/// dims computed from its inputs' as XNNPACK does, the output sizes (NCHW) from those.
region_payload for_inputs(const region_payload& recorded, const torch_delegate::given_inputs& given, const std::string& method) {
  region_payload payload = recorded;
  auto& [values, nodes, output_sizes, inputs] = payload;
  auto cannot = [&](const std::string& why) {
    TORCH_CHECK(false, "xnnpack: region ", method, " cannot be re-planned for these inputs: ", why);
  };
  if (given.size() != static_cast<std::size_t>(inputs))
    cannot("it takes " + std::to_string(inputs) + " inputs, got " + std::to_string(given.size()));
  for (auto& value : values)
    if (value.key.empty() && !(value.external >= 0 && value.external < inputs)) value.dims.clear();  // to be computed
  for (std::int64_t i = 0; i < inputs; ++i) {
    const auto& spec = given[static_cast<std::size_t>(i)];
    if (!spec || spec->dtype != at::kFloat) cannot("input " + std::to_string(i + 1) + " is not a float tensor");
    auto& value = values[static_cast<std::size_t>(i)];
    if (spec->sizes.size() != value.dims.size())
      cannot("input " + std::to_string(i + 1) + " has " + std::to_string(spec->sizes.size()) + " dimensions, the region was planned for " +
             std::to_string(value.dims.size()));
    value.dims = xnn_dims(spec->sizes);
  }
  auto dims = [&](std::int64_t id) -> std::vector<std::int64_t>& { return values.at(static_cast<std::size_t>(id)).dims; };
  auto window = [&](std::int64_t size, std::int64_t before, std::int64_t after, std::int64_t kernel, std::int64_t stride,
                    std::int64_t dilation) {
    const std::int64_t out = (size + before + after - dilation * (kernel - 1) - 1) / stride + 1;
    if (out < 1) cannot("an input of " + std::to_string(size) + " is too small for a window of " + std::to_string(kernel));
    return out;
  };
  for (auto& [code, i, x] : nodes) {
    switch (code) {
      case conv2d:
      case depthwise_conv2d: {
        const auto in = dims(i[0]);
        const std::int64_t channels = code == conv2d ? dims(i[1])[0] : dims(i[1])[3];
        dims(i[3]) = {in[0], window(in[1], i[4], i[6], i[8], i[10], i[12]), window(in[2], i[7], i[5], i[9], i[11], i[13]), channels};
        break;
      }
      case fully_connected: {
        auto out = dims(i[0]);
        out.back() = dims(i[1])[0];
        dims(i[3]) = out;
        break;
      }
      case clamp:
      case sigmoid:
      case hardswish:
      case softmax:
        dims(i[1]) = dims(i[0]);
        break;
      case add2:
      case multiply2: {  // numpy broadcasting
        const auto a = dims(i[0]), b = dims(i[1]);
        std::vector<std::int64_t> out(std::max(a.size(), b.size()), 1);
        for (std::size_t k = 0; k < out.size(); ++k) {
          const std::int64_t p = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
          const std::int64_t q = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
          if (p != q && p != 1 && q != 1) cannot("operands of sizes that do not broadcast");
          out[k] = std::max(p, q);
        }
        dims(i[2]) = out;
        break;
      }
      case max_pool2d: {
        const auto in = dims(i[0]);
        std::int64_t bottom = i[4], right = i[3];
        const bool ceil_mode = i.size() > 12 ? i[12] != 0 : (bottom != i[2] || right != i[5]);
        if (ceil_mode) {  // PyTorch's ceil mode: the bottom and right padding that give its output size
          for (int d = 0; d < 2; ++d) {
            const std::int64_t size = in[1 + d], pad = d == 0 ? i[2] : i[5], kernel = i[6 + d], stride = i[8 + d],
                               dilation = i[10 + d];
            std::int64_t out = (size + 2 * pad - dilation * (kernel - 1) - 1 + stride - 1) / stride + 1;
            if ((out - 1) * stride >= size + pad) --out;
            const std::int64_t needed = (out - 1) * stride + (kernel - 1) * dilation + 1 - size - pad;
            (d == 0 ? bottom : right) = std::max(needed, pad);
          }
          i[4] = bottom;
          i[3] = right;
        }
        dims(i[1]) = {in[0], window(in[1], i[2], i[4], i[6], i[8], i[10]), window(in[2], i[5], i[3], i[7], i[9], i[11]), in[3]};
        break;
      }
      case avg_pool2d: {
        const auto in = dims(i[0]);
        dims(i[1]) = {in[0], window(in[1], i[2], i[4], i[6], i[8], 1), window(in[2], i[5], i[3], i[7], i[9], 1), in[3]};
        break;
      }
      case global_avg_pool2d: {
        const auto in = dims(i[0]);
        dims(i[1]) = {in[0], 1, 1, in[3]};
        break;
      }
      case reshape: {  // a flatten: the batch dimension follows the input's, the rest stays
        const auto in = dims(i[0]);
        const auto& before = recorded.values.at(static_cast<std::size_t>(i[0])).dims;
        std::vector<std::int64_t> shape(i.begin() + 2, i.end());
        if (!shape.empty() && !in.empty() && shape[0] == before[0]) shape[0] = in[0];
        std::int64_t from = 1, to = 1;
        for (std::int64_t size : in) from *= size;
        for (std::int64_t size : shape) to *= size;
        if (from != to) cannot("its flatten was planned for " + std::to_string(to / std::max<std::int64_t>(shape[0], 1)) +
                               " features per sample, these inputs give " + std::to_string(from / std::max<std::int64_t>(in[0], 1)));
        std::copy(shape.begin(), shape.end(), i.begin() + 2);
        dims(i[1]) = shape;
        break;
      }
      default:
        cannot("unknown op " + std::to_string(code));
    }
  }
  output_sizes.clear();
  for (const auto& value : values)
    if (value.external >= inputs) {
      const auto& d = value.dims;
      output_sizes.push_back(d.size() == 4 ? std::vector<std::int64_t>{d[0], d[3], d[1], d[2]} : d);
    }
  return payload;
}

}  // namespace

/// What a region that may be re-planned keeps: its payload and its static values' data.
struct region_recipe {
  region_payload payload;
  std::map<std::string, at::Tensor> data;
};

compiled_region XnnpackBackend::compile(const region_payload& payload, const torch_delegate::compile_context& context) {
  TORCH_CHECK(is_available(), "xnnpack: XNNPACK does not initialize on this CPU");
  const std::string method(context.method());
  auto data = [&](const std::string& key) { return context.named_data().tensor(key); };
  if (context.max_replans() == 0)  // packed weights are all it needs: the named data is released
    return {build_runtime(payload, method, data, [&](const std::string& key) { context.release_named_data(key); }), nullptr};
  // It may be compiled again for other shapes: it keeps the payload and the weights.
  auto recipe = std::make_shared<region_recipe>();
  recipe->payload = payload;
  for (const auto& value : payload.values)
    if (!value.key.empty()) recipe->data.emplace(value.key, data(value.key));
  return {build_runtime(payload, method, data, [](const std::string&) {}), std::move(recipe)};
}

compiled_region XnnpackBackend::replan(compiled_region& compiled, const torch_delegate::given_inputs& given) {
  TORCH_CHECK(compiled.recipe, "xnnpack: region ", compiled.state->method, " was compiled without what re-planning needs");
  const region_recipe& recipe = *compiled.recipe;
  return {build_runtime(for_inputs(recipe.payload, given, compiled.state->method), compiled.state->method,
                        [&](const std::string& key) { return recipe.data.at(key); }, [](const std::string&) {}),
          compiled.recipe};
}

std::vector<c10::IValue> XnnpackBackend::execute(compiled_region& region, torch_delegate::inputs args) {
  runtime_state& state = *region.state;
  TORCH_CHECK(args.size() == state.inputs, "xnnpack: region ", state.method, " takes ", state.inputs, " inputs, got ",
              args.size());
  std::lock_guard<std::mutex> lock(state.mutex);
  if (static_cast<std::size_t>(std::max(1, at::get_num_threads())) != state.threads) {
    TORCH_WARN_ONCE("xnnpack: region ", state.method, " runs on ", state.threads, " thread(s), the count when it was compiled; ",
                    "at::get_num_threads() is now ", at::get_num_threads(), ". Set the count before loading or lowering the "
                    "model (XNNPACK 2022 fixes a runtime's thread pool when it is created).");
  }
  state.staged.resize(state.inputs);
  state.outputs.resize(state.output_sizes.size());
  std::vector<at::Tensor> inputs;  // keeps what the runtime reads alive until it has run
  std::vector<xnn_external_value> externals;
  for (std::size_t i = 0; i < args.size(); ++i) {
    TORCH_CHECK(args[i].isTensor(), "xnnpack: region ", state.method, ": input ", i + 1, " is not a tensor");
    const at::Tensor& given = args[i].toTensor();
    TORCH_CHECK(given.scalar_type() == at::kFloat && given.device().is_cpu(), "xnnpack: region ", state.method, ": input ",
                i + 1, " must be a float CPU tensor, got ", given.scalar_type(), " on ", given.device());
    if (given.dim() == 4 && !given.is_contiguous(at::MemoryFormat::ChannelsLast))
      inputs.push_back(to_channels_last(given, state.staged[i]));
    else
      inputs.push_back(given.dim() == 4 ? given : given.contiguous());
    externals.push_back({static_cast<std::uint32_t>(i), inputs.back().data_ptr()});
  }
  std::vector<c10::IValue> outputs;
  for (std::size_t o = 0; o < state.output_sizes.size(); ++o) {
    at::Tensor& kept = state.outputs[o];
    // Reused only when nothing else holds it, the tensor nor (through a view) its storage.
    if (!kept.defined() || kept.use_count() != 1 || kept.storage().use_count() != 1) {
      const auto& sizes = state.output_sizes[o];
      kept = at::empty(sizes, at::TensorOptions(at::kFloat)
                                  .memory_format(sizes.size() == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
    }
    externals.push_back({static_cast<std::uint32_t>(state.inputs + o), kept.data_ptr()});
    outputs.emplace_back(kept);
  }
  const bool same = std::equal(externals.begin(), externals.end(), state.bound.begin(), state.bound.end(),
                               [](const xnn_external_value& e, const void* bound) { return e.data == bound; });
  if (!same) {
    check(xnn_setup_runtime(state.runtime, externals.size(), externals.data()), "xnn_setup_runtime");
    state.bound.clear();
    for (const xnn_external_value& e : externals) state.bound.push_back(e.data);
  }
  check(xnn_invoke_runtime(state.runtime), "xnn_invoke_runtime");
  return outputs;
}

}  // namespace xnnpack_delegate
