// The onednn backend: preprocess (a region's graph -> steps over value ids, weights as named data
// with BatchNorm folded into convolutions), compile (the steps checked, the weights kept for the
// plans) and execute (a plan per input shape: oneDNN primitives with fused post-ops over one
// buffer; inputs read in place, outputs reordered into dense tensors).
#include "onednn_backend.hpp"

#include "toolkit/folding.hpp"
#include "toolkit/fused_activation.hpp"

#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/named_data.hpp>
#include <torch_delegate/node_queries.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <c10/core/InferenceMode.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace onednn_delegate {

/// A step as execute runs it: the record, and a convolution's weight sizes [O, I / groups, kh, kw]
/// (the weights themselves are in the plan cache).
struct compiled_step {
  step_record record;
  std::vector<std::int64_t> weight_sizes;
};

namespace {

enum op : std::int64_t {
  convolution = 0, relu = 1, add = 2, max_pool2d = 3, global_avg_pool2d = 4,
  eltwise = 5,  // {input, output, kind, low, high}: kind an eltwise_kind, low and high a clip's bounds (double bits)
  mul = 6,      // {a, b, output}: b of a's shape, or [N, C, 1, 1] (broadcast over H and W)
  cat = 7,      // {inputs..., output}: along the channels
  permute = 8,  // {input, output, dims...}: torch.permute's dims (a view: no copy)
  layer_norm = 9,  // {input, output, eps (double bits)}, weight and bias: over the last dimension
  linear = 10,     // {input, output}, weight [O, I] and bias: over the last dimension, any rank
  scale = 11,      // {input, output}, weight: times a constant tensor (broadcast, numpy's rules)
  flatten = 12,    // {input, output, start_dim, end_dim}: a view of the row-major layout
};
enum eltwise_kind : std::int64_t { sigmoid = 0, silu = 1, hardswish = 2, hardsigmoid = 3, clip = 4, gelu_erf = 5, gelu_tanh = 6 };

/// The activation oneDNN runs as an eltwise step (relu is a step, or a flag, of its own): its kind
/// and, for a clip (hardtanh, relu6, clamp), its bounds; nullopt for another node.
struct activation {
  eltwise_kind kind;
  double low = 0, high = 0;
};
std::optional<activation> activation_of(const torch::jit::Node* node);

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

/// A float tensor (or one of unknown dtype) of known sizes, rank 1 to 6.
std::optional<std::vector<std::int64_t>> float_sizes(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor || (tensor->scalarType() && *tensor->scalarType() != c10::ScalarType::Float)) return std::nullopt;
  auto sizes = known_sizes(value);
  if (!sizes || sizes->empty() || sizes->size() > 6) return std::nullopt;
  return sizes;
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
    // Two float tensors of one shape (no broadcasting): both sizes must be known.
    if (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))) return false;
    const auto a = float_sizes(node->input(0)), b = float_sizes(node->input(1));
    return a && b && *a == *b;
  }
  if (is(node, "aten::max_pool2d"))  // oneDNN's pooling has no dilation
    return node->inputs().size() == 6 && all_equal(constant_of(node->input(4)), 1) && float_4d_or_unknown(node->input(0));
  if (is(node, "aten::adaptive_avg_pool2d")) {
    const auto size = constant_of(node->input(1));
    return size && size->isIntList() && size->toIntVector() == std::vector<std::int64_t>{1, 1} &&
           float_4d_or_unknown(node->input(0));
  }
  if (activation_of(node)) return float_4d_or_unknown(node->input(0)) || float_sizes(node->input(0)).has_value();
  if (is(node, "aten::permute"))  // dims known at lowering (a constant, or a module's attribute: ConvNeXt's Permute)
    return float_sizes(node->input(0)) && known_at_lowering(node->input(1));
  if (is(node, "aten::layer_norm")) {  // over the last dimension, weight and bias known at lowering
    const auto shape = constant_of(node->input(1));
    const auto sizes = float_sizes(node->input(0));
    return node->inputs().size() == 6 && sizes && shape && shape->isIntList() &&
           shape->toIntVector() == std::vector<std::int64_t>{sizes->back()} && known_at_lowering(node->input(2)) &&
           known_at_lowering(node->input(3)) && constant_of(node->input(4)).has_value();
  }
  if (is(node, "aten::flatten"))
    return node->inputs().size() == 3 && float_sizes(node->input(0)) && constant_of(node->input(1)) && constant_of(node->input(2));
  if (is(node, "aten::dropout"))  // eval mode: the identity
    return node->inputs().size() == 3 && constant_is(node->input(2), false) && float_sizes(node->input(0));
  if (is(node, "aten::linear"))
    return node->inputs().size() == 3 && float_sizes(node->input(0)) && known_at_lowering(node->input(1)) &&
           known_at_lowering(node->input(2));
  if (is(node, "aten::mul") && node->inputs().size() == 2) {
    // Times a tensor known at lowering (a layer scale), broadcast to the other operand's shape.
    for (int side = 0; side < 2; ++side) {
      const torch::jit::Value* constant = node->input(1 - side);
      const auto sizes = float_sizes(node->input(side));
      if (!sizes || constant->type()->kind() != c10::TypeKind::TensorType || !known_at_lowering(constant)) continue;
      const auto by = known_sizes(constant);
      if (!by || by->size() > sizes->size()) continue;
      bool fits = true;
      for (std::size_t k = 0; k < by->size(); ++k) {
        const std::int64_t b = (*by)[by->size() - 1 - k], a = (*sizes)[sizes->size() - 1 - k];
        fits = fits && (b == a || b == 1);
      }
      if (fits) return true;
    }
  }
  if (is(node, "aten::mul")) {
    // Two 4-d float tensors of known sizes: one shape, or one of them [N, C, 1, 1] (a squeeze-excitation's scale).
    if (node->inputs().size() != 2 || node->input(1)->type()->kind() != c10::TypeKind::TensorType) return false;
    const auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
    if (!a || !b || a->size() != 4 || b->size() != 4 || !float_4d_or_unknown(node->input(0)) || !float_4d_or_unknown(node->input(1)))
      return false;
    auto scale_of = [](const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& s) {
      return s[0] == x[0] && s[1] == x[1] && s[2] == 1 && s[3] == 1;
    };
    return *a == *b || scale_of(*a, *b) || scale_of(*b, *a);
  }
  if (is(node, "aten::cat")) {  // 4-d float tensors along the channels, listed in the region
    const torch::jit::Node* list = node->input(0)->node();
    if (node->inputs().size() != 2 || list->kind() != c10::prim::ListConstruct || node->input(0)->uses().size() != 1) return false;
    const auto dim = constant_of(node->input(1));
    if (!dim || !dim->isInt() || dim->toInt() != 1) return false;
    return std::all_of(list->inputs().begin(), list->inputs().end(), [](const torch::jit::Value* v) {
      const auto sizes = known_sizes(v);
      return sizes && sizes->size() == 4 && float_4d_or_unknown(v);
    });
  }
  if (node->kind() == c10::prim::ListConstruct)  // the tensors of a cat it takes
    return node->output()->uses().size() == 1 && supports(node->output()->uses()[0].user);
  return false;
}

namespace {

std::optional<activation> activation_of(const torch::jit::Node* node) {
  if (is(node, "aten::sigmoid")) return activation{sigmoid};
  if (is(node, "aten::silu")) return activation{silu};
  if (is(node, "aten::hardswish")) return activation{hardswish};
  if (is(node, "aten::hardsigmoid")) return activation{hardsigmoid};
  if (is(node, "aten::gelu") && node->inputs().size() == 2) {
    const auto approximate = constant_of(node->input(1));
    if (approximate && approximate->isString() && approximate->toStringRef() == "none") return activation{gelu_erf};
    if (approximate && approximate->isString() && approximate->toStringRef() == "tanh") return activation{gelu_tanh};
  }
  if (is(node, "aten::relu")) return std::nullopt;  // a step (or a flag) of its own
  if (const auto range = torch_delegate::toolkit::clamp_range(node); range && range->first <= range->second)
    return activation{clip, range->first, range->second};
  return std::nullopt;
}

}  // namespace

bool OnednnBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  return std::any_of(region.begin(), region.end(),
                     [](const torch::jit::Node* node) { return is(node, "aten::conv2d") || is(node, "aten::linear"); });
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
    const torch_delegate::toolkit::folded_conv2d conv = torch_delegate::toolkit::read_conv2d(
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
    if (const auto act = activation_of(node)) {
      const std::int64_t input = id(node->input(0));
      steps.push_back({eltwise,
                       {input, define(node->output()), act->kind, std::bit_cast<std::int64_t>(act->low),
                        std::bit_cast<std::int64_t>(act->high)},
                       "",
                       ""});
      return;
    }
    if (is(node, "aten::flatten")) {
      const std::int64_t input = id(node->input(0));
      steps.push_back({flatten,
                       {input, define(node->output()), region.argument<std::int64_t>(node, "start_dim"),
                        region.argument<std::int64_t>(node, "end_dim")},
                       "",
                       ""});
      return;
    }
    if (is(node, "aten::dropout")) {  // eval mode: the output is the input
      ids[node->output()] = id(node->input(0));
      return;
    }
    if (is(node, "aten::permute")) {
      const auto dims = region.argument<std::vector<std::int64_t>>(node, "dims");
      if (dims.size() != known_sizes(node->input(0))->size()) region.reject(node, "onednn: permute's dims do not match its input's rank");
      std::vector<std::int64_t> ints{id(node->input(0)), define(node->output())};
      ints.insert(ints.end(), dims.begin(), dims.end());
      steps.push_back({permute, std::move(ints), "", ""});
      return;
    }
    if (is(node, "aten::layer_norm")) {
      const std::int64_t channels = known_sizes(node->input(0))->back();
      const auto weight = region.argument<std::optional<at::Tensor>>(node, "weight");
      const auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
      const double eps = region.argument<double>(node, "eps");
      const std::int64_t input = id(node->input(0));
      steps.push_back({layer_norm,
                       {input, define(node->output()), std::bit_cast<std::int64_t>(eps)},
                       constant(weight ? *weight : at::ones({channels})),
                       constant(bias ? *bias : at::zeros({channels}))});
      return;
    }
    if (is(node, "aten::linear")) {
      const at::Tensor weight = region.argument<at::Tensor>(node, "weight");
      const auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
      if (weight.dim() != 2) region.reject(node, "onednn: a linear's weight must be 2-d");
      const std::int64_t input = id(node->input(0));
      steps.push_back({linear, {input, define(node->output())}, constant(weight), constant(bias ? *bias : at::zeros({weight.size(0)}))});
      return;
    }
    if (is(node, "aten::mul") && (known_at_lowering(node->input(0)) || known_at_lowering(node->input(1))) &&
        !(known_at_lowering(node->input(0)) && known_at_lowering(node->input(1)))) {
      const int side = known_at_lowering(node->input(1)) ? 0 : 1;
      const at::Tensor by = region.argument<at::Tensor>(node, side == 0 ? "other" : "self");
      const std::int64_t input = id(node->input(side));
      steps.push_back({scale, {input, define(node->output())}, constant(by), ""});
      return;
    }
    if (is(node, "aten::mul")) {  // the full-shape operand first: oneDNN broadcasts the second
      const auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
      const bool swap = a && b && (*a)[2] == 1 && (*a)[3] == 1 && ((*b)[2] != 1 || (*b)[3] != 1);
      const std::int64_t x = id(node->input(swap ? 1 : 0)), scale = id(node->input(swap ? 0 : 1));
      steps.push_back({mul, {x, scale, define(node->output())}, "", ""});
      return;
    }
    if (node->kind() == c10::prim::ListConstruct) return;  // read by its cat
    if (is(node, "aten::cat")) {
      std::vector<std::int64_t> ints;
      for (const torch::jit::Value* input : node->input(0)->node()->inputs()) ints.push_back(id(input));
      ints.push_back(define(node->output()));
      steps.push_back({cat, std::move(ints), "", ""});
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
// runtime: oneDNN's own primitives, planned per input shape

bool is_reference(std::string_view implementation) {
  // oneDNN names an implementation "<kernel>:<isa or 'any'>", some with a prefix ("x64:gemm:jit");
  // its reference kernels are "ref:any", "ref_<variant>:any" (and "gemm:ref" off x64): plain C++
  // loops, 10-100x slower than the JIT ones a plan can nearly always get in another layout.
  for (std::size_t begin = 0; begin <= implementation.size();) {
    const std::size_t end = std::min(implementation.find(':', begin), implementation.size());
    if (implementation.substr(begin, end - begin).starts_with("ref")) return true;
    begin = end + 1;
  }
  // Tests walk the fallback order by naming more kernels "reference" (read once per process).
  static const std::vector<std::string> also = [] {
    std::vector<std::string> names;
    const char* given = std::getenv("TD_ONEDNN_TREAT_AS_REFERENCE");
    for (std::string_view rest = given ? given : ""; !rest.empty();) {
      const std::size_t comma = std::min(rest.find(','), rest.size());
      if (comma > 0) names.emplace_back(rest.substr(0, comma));
      rest.remove_prefix(std::min(comma + 1, rest.size()));
    }
    return names;
  }();
  return std::any_of(also.begin(), also.end(), [&](const std::string& name) { return implementation.find(name) != std::string_view::npos; });
}

namespace {

using dims = dnnl::memory::dims;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
constexpr auto f32 = dnnl::memory::data_type::f32;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const char* op_name(std::int64_t op) {
  static const char* const names[] = {"convolution", "relu",  "add",        "max_pool2d", "adaptive_avg_pool2d", "activation",
                                      "mul",         "cat",   "permute",    "layer_norm", "linear",              "scale", "flatten"};
  return op >= 0 && op < static_cast<std::int64_t>(std::size(names)) ? names[op] : "?";
}

/// Per op: how many ints its record has (a cat: any number from 2), and how many of them (first)
/// are value ids (a cat: all); of those, the last is the value it makes.
constexpr std::int64_t record_sizes[] = {10, 2, 4, 9, 2, 5, 3, -1, -1, 3, 2, 2, 4}, record_ids[] = {2, 2, 3, 2, 2, 2, 3, -1, 2, 2, 2, 2, 2};
std::size_t ids_in(const step_record& record) {
  return record.op == cat ? record.ints.size() : static_cast<std::size_t>(record_ids[record.op]);
}
/// Whether a step reads weights from named data (then compile keeps them for the plans).
bool has_weights(std::int64_t op) { return op == convolution || op == layer_norm || op == linear || op == scale; }

/// The row-major (contiguous) layout of `sizes`: how tensors enter and leave a region.
md dense(const dims& sizes) {
  dims strides(sizes.size(), 1);
  for (std::size_t k = sizes.size(); k-- > 1;) strides[k - 1] = strides[k] * std::max<std::int64_t>(sizes[k], 1);
  return md(sizes, f32, strides);
}
std::int64_t made_by(const step_record& record) { return record.ints[ids_in(record) - 1]; }

/// oneDNN's eltwise operations for a relu or an activation step, in order (hardsigmoid is two).
std::vector<std::tuple<dnnl::algorithm, float, float>> eltwise_chain(const step_record& record) {
  using dnnl::algorithm;
  if (record.op == relu) return {{algorithm::eltwise_relu, 0.f, 0.f}};
  switch (record.ints[2]) {
    case sigmoid: return {{algorithm::eltwise_logistic, 0.f, 0.f}};
    case silu: return {{algorithm::eltwise_swish, 1.f, 0.f}};
    case hardswish: return {{algorithm::eltwise_hardswish, 0.f, 0.f}};
    case hardsigmoid: return {{algorithm::eltwise_linear, 1.f / 6, 0.5f}, {algorithm::eltwise_clip, 0.f, 1.f}};
    case gelu_erf: return {{algorithm::eltwise_gelu_erf, 0.f, 0.f}};
    case gelu_tanh: return {{algorithm::eltwise_gelu_tanh, 0.f, 0.f}};
    default: {
      const auto bound = [](std::int64_t bits) {
        const double value = std::bit_cast<double>(bits);
        return static_cast<float>(std::clamp(value, -double(std::numeric_limits<float>::max()), double(std::numeric_limits<float>::max())));
      };
      return {{algorithm::eltwise_clip, bound(record.ints[3]), bound(record.ints[4])}};
    }
  }
}

}  // namespace

/// One primitive call of a plan: the primitive and which slot each of its arguments reads.
struct plan_call {
  dnnl::primitive primitive;
  std::vector<std::pair<int, std::size_t>> arguments;  // (DNNL_ARG_*, slot)
  md scratchpad;                                       // empty when it needs none
  /// Instead of a primitive: a step run by ATen (only where oneDNN had nothing but a reference
  /// kernel for it), given the call's arguments.
  std::function<void(const std::unordered_map<int, dnnl::memory>&)> host;
};

struct call_context;

/// What a region runs for one set of input shapes: its primitives in order, each slot's memory
/// descriptor and place in one per-call buffer, and the reordered weights (read-only: calls may
/// run concurrently, each with its own buffer).
struct execution_plan {
  std::vector<md> slots;
  std::vector<std::size_t> aliases;      // per slot: the slot whose bytes it views, or -1
  std::vector<std::size_t> offsets;      // into the call's buffer (inputs and constants: unused)
  std::vector<dnnl::memory> constants;   // per slot: the weights and biases, else empty
  std::vector<plan_call> calls;
  std::size_t buffer_bytes = 0;          // activations, then the largest scratchpad
  std::size_t scratchpad_offset = 0;
  std::vector<std::size_t> outputs;      // slots read out, in order
  std::vector<dims> output_dims;
  std::vector<dnnl::primitive> output_reorders;  // slot -> a dense (row-major) tensor
  std::vector<plan_implementation> implementations;  // per call, then per output reorder: the debug query
  // Contexts no call is using (a call takes one, or makes one, and gives it back).
  mutable std::mutex idle_mutex;
  mutable std::vector<std::unique_ptr<call_context>> idle;
};

/// What one call of a plan runs with: the buffer its activations and scratchpad live in, and each
/// primitive's arguments bound to it (made once, reused by later calls; inputs rebound per call).
struct call_context {
  at::Tensor buffer;
  std::vector<dnnl::memory> memory;  // per slot
  std::vector<std::unordered_map<int, dnnl::memory>> arguments;  // per call

  explicit call_context(const execution_plan& plan, std::size_t inputs)
      : buffer(at::empty({static_cast<std::int64_t>(plan.buffer_bytes)}, at::kByte)), memory(plan.slots.size()) {
    auto* base = static_cast<std::uint8_t*>(buffer.data_ptr());
    for (std::size_t slot = 0; slot < plan.slots.size(); ++slot) {
      if (slot < inputs)
        memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), DNNL_MEMORY_NONE);
      else if (plan.constants[slot])
        memory[slot] = plan.constants[slot];
      else if (plan.aliases[slot] != static_cast<std::size_t>(-1) && plan.aliases[slot] < inputs)
        memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), DNNL_MEMORY_NONE);  // a view of an input: bound per call
      else if (plan.aliases[slot] != static_cast<std::size_t>(-1))
        memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), base + plan.offsets[plan.aliases[slot]]);
      else
        memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), base + plan.offsets[slot]);
    }
    for (const plan_call& call : plan.calls) {
      auto& bound = arguments.emplace_back();
      for (const auto& [argument, slot] : call.arguments) bound.emplace(argument, memory[slot]);
      if (call.scratchpad.get_size() > 0)
        bound.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(call.scratchpad, cpu_engine(), base + plan.scratchpad_offset));
    }
  }
};

/// The plans made so far, and per convolution step where a new plan reads its weight and bias
/// from: the dense named data until the first plan is made, then that plan's reordered copies
/// (oneDNN reorders from one layout to another), so a region holds its weights once per plan.
struct plan_cache {
  std::mutex mutex;
  std::map<std::vector<std::vector<std::int64_t>>, std::shared_ptr<const execution_plan>> plans;
  std::vector<dnnl::memory> weights, biases;  // per step (empty for a step without weights)
  std::vector<at::Tensor> dense;              // what the first plan reads, dropped once it is made
};

namespace {

constexpr std::size_t no_slot = static_cast<std::size_t>(-1);

/// Builds a plan: value ids are slots 0..values-1, reorders add slots after them.
class planner {
 public:
  planner(const compiled_region& region, plan_cache& cache, const std::vector<std::vector<std::int64_t>>& shapes)
      : region_(region), cache_(cache), slot_of_(static_cast<std::size_t>(region.values), no_slot) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      slot_of_[i] = add_slot(dense(dims(shapes[i])));
      shapes_ += (i ? ", " : "") + c10::str(c10::IntArrayRef(shapes[i]));
    }
    count_uses();
  }

  std::shared_ptr<const execution_plan> build() {
    const auto& steps = *region_.steps;
    const std::vector<std::vector<std::size_t>> fused = fusions();
    std::vector<bool> skipped(steps.size(), false);
    for (const auto& folded : fused)
      for (std::size_t k : folded) skipped[k] = true;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (skipped[i]) continue;
      try {
        run(i, fused[i]);  // a convolution or a linear that refuses its post-ops runs them after it
      } catch (const dnnl::error& error) {
        TORCH_CHECK(false, "onednn: region ", region_.method, ": step ", i, " (", op_name(steps[i].record.op),
                    ") on input ", describe(steps[i]), ": oneDNN refused it: ", error.what());
      }
    }
    for (std::int64_t index : region_.outputs) {
      const std::size_t slot = value(index);
      const dims d = plan_.slots[slot].dims();
      plan_.outputs.push_back(slot);
      plan_.output_dims.push_back(d);
      plan_.output_reorders.emplace_back(
          dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan_.slots[slot], cpu_engine(), dense(d))));
      record(plan_.output_reorders.back(), "output " + std::to_string(plan_.outputs.size() - 1));
      last_use_[root(slot)] = plan_.calls.size();  // read after the last call
    }
    place();
    for (const auto& [index, weights, bias] : own_weights_) {  // later plans reorder from these
      cache_.weights[index] = plan_.constants[weights];
      if (bias != no_slot) cache_.biases[index] = plan_.constants[bias];
    }
    cache_.dense.clear();
    return made_;
  }

 private:
  std::size_t add_slot(const md& desc, std::size_t alias_of = no_slot) {
    plan_.slots.push_back(desc);
    plan_.aliases.push_back(alias_of);
    plan_.constants.emplace_back();
    first_use_.push_back(plan_.calls.size());
    last_use_.push_back(plan_.calls.size());
    return plan_.slots.size() - 1;
  }
  std::size_t value(std::int64_t id) const {
    const std::size_t slot = slot_of_.at(static_cast<std::size_t>(id));
    TORCH_CHECK(slot != no_slot, "onednn: region ", region_.method, ": value ", id, " is read before it is made");
    return slot;
  }
  void define(std::int64_t id, const md& desc) { slot_of_.at(static_cast<std::size_t>(id)) = add_slot(desc); }
  /// The slot whose bytes `slot` reads (a permute's output reads its input's).
  std::size_t root(std::size_t slot) const { return plan_.aliases[slot] == no_slot ? slot : plan_.aliases[slot]; }

  std::string describe(const compiled_step& step) const {
    const std::size_t slot = slot_of_.at(static_cast<std::size_t>(step.record.ints[0]));
    if (slot == no_slot) return "?";
    std::string text = "[";
    for (auto d : plan_.slots[slot].dims()) text += (text.size() > 1 ? ", " : "") + std::to_string(d);
    return text + "]";
  }

  void count_uses() {
    uses_.assign(static_cast<std::size_t>(region_.values), 0);
    for (const compiled_step& step : *region_.steps) {
      const auto& p = step.record.ints;
      for (std::size_t k = 0; k + 1 < ids_in(step.record); ++k) ++uses_[static_cast<std::size_t>(p[k])];
    }
    for (std::int64_t index : region_.outputs) uses_[static_cast<std::size_t>(index)] += 2;  // never fused away
  }

  /// For each convolution or linear step, the steps after it folded into it as post-ops (in
  /// order): while the value made so far is read by one step alone and is no result, an activation
  /// of it, or (after a convolution) an add of it and a value made before the convolution (of two
  /// convolutions, the later one takes a residual's add).
  std::vector<std::vector<std::size_t>> fusions() const {
    const auto& steps = *region_.steps;
    std::vector<std::vector<std::size_t>> into(steps.size());
    std::vector<std::int64_t> made_at(static_cast<std::size_t>(region_.values), -1);  // inputs: -1
    std::vector<std::int64_t> reader(static_cast<std::size_t>(region_.values), -1);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto& r = steps[i].record;
      made_at[static_cast<std::size_t>(made_by(r))] = static_cast<std::int64_t>(i);
      for (std::size_t k = 0; k + 1 < ids_in(r); ++k) reader[static_cast<std::size_t>(r.ints[k])] = static_cast<std::int64_t>(i);
    }
    std::vector<bool> taken(steps.size(), false);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].record.op != convolution && steps[i].record.op != linear) continue;
      std::int64_t made = made_by(steps[i].record);
      while (uses_[static_cast<std::size_t>(made)] == 1) {
        const auto next = static_cast<std::size_t>(reader[static_cast<std::size_t>(made)]);
        const step_record& r = steps[next].record;
        if (taken[next]) break;
        if (r.op == add && steps[i].record.op == convolution) {
          const std::int64_t other = r.ints[0] == made ? r.ints[1] : r.ints[0];
          if (other == made || made_at[static_cast<std::size_t>(other)] >= static_cast<std::int64_t>(i)) break;
        } else if (r.op != relu && r.op != eltwise) {
          break;
        }
        into[i].push_back(next);
        taken[next] = true;
        made = made_by(r);
      }
    }
    return into;
  }

  /// `slot` in the layout `want`: itself, or a reordered copy (one per slot and layout).
  std::size_t as(std::size_t slot, const md& want) {
    if (plan_.slots[slot] == want) return slot;
    for (const auto& [from, to] : reordered_)
      if (from == slot && plan_.slots[to] == want) return to;
    const std::size_t to = add_slot(want);
    call(dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan_.slots[slot], cpu_engine(), want)),
         {{DNNL_ARG_FROM, slot}, {DNNL_ARG_TO, to}}, md());
    reordered_.emplace_back(slot, to);
    return to;
  }

  void call(dnnl::primitive primitive, std::vector<std::pair<int, std::size_t>> arguments, const md& scratchpad,
            std::function<void(const std::unordered_map<int, dnnl::memory>&)> host = {}, const char* host_kind = nullptr,
            const char* host_op = nullptr) {
    for (const auto& argument : arguments) {
      const std::size_t slot = root(argument.second);
      if (argument.first == DNNL_ARG_DST || argument.first == DNNL_ARG_TO) first_use_[slot] = std::min(first_use_[slot], plan_.calls.size());
      last_use_[slot] = plan_.calls.size();
    }
    scratchpad_bytes_ = std::max(scratchpad_bytes_, scratchpad.get_size());
    const std::string step = std::to_string(step_) + " " + op_name((*region_.steps)[step_].record.op);
    if (host)
      plan_.implementations.push_back({region_.method, shapes_, step, host_kind, host_op});
    else
      record(primitive, step);
    plan_.calls.push_back({std::move(primitive), std::move(arguments), scratchpad, std::move(host)});
  }

  /// Adds a primitive's kind and implementation to the plan's list (the debug query).
  void record(const dnnl::primitive& primitive, std::string step) {
    const char* implementation = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_desc_query(primitive.get_primitive_desc(), dnnl_query_impl_info_str, 0, &implementation),
                            "could not read a primitive's implementation");
    plan_.implementations.push_back({region_.method, shapes_, std::move(step),
                                     dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(primitive.get_kind())), implementation});
  }

  /// `given` (a weight or bias, in any layout) reordered into `want`, as a constant slot.
  std::size_t constant(dnnl::memory given, const md& want) {
    if (given.get_desc().dims() != want.dims())  // the same bytes seen with other dims (a scale: leading ones)
      given = dnnl::memory(dense(want.dims()), cpu_engine(), given.get_data_handle());
    dnnl::memory reordered(want, cpu_engine());
    dnnl::stream stream(cpu_engine());
    dnnl::reorder(given, reordered).execute(stream, given, reordered);
    stream.wait();
    const std::size_t slot = add_slot(want);
    plan_.constants[slot] = reordered;
    return slot;
  }

  static dnnl::primitive_attr attributes(const dnnl::post_ops& post_ops = {}) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(post_ops);
    return attr;
  }

  void run(std::size_t index, const std::vector<std::size_t>& fused) {
    step_ = index;
    const compiled_step& step = (*region_.steps)[index];
    const auto& p = step.record.ints;
    switch (step.record.op) {
      case convolution: return conv(index, fused);
      case relu:
      case eltwise: {
        std::size_t in = value(p[0]);
        const auto chain = eltwise_chain(step.record);
        for (std::size_t k = 0; k < chain.size(); ++k) {
          const auto& [algorithm, alpha, beta] = chain[k];
          const dnnl::eltwise_forward::primitive_desc pd({dnnl::prop_kind::forward_inference, algorithm, plan_.slots[in], alpha, beta},
                                                         attributes(), cpu_engine());
          std::size_t out;
          if (k + 1 == chain.size()) {
            define(p[1], pd.dst_desc());
            out = value(p[1]);
          } else {
            out = add_slot(pd.dst_desc());
          }
          call(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, out}}, pd.scratchpad_desc());
          in = out;
        }
        return;
      }
      case mul: {
        const std::size_t a = value(p[0]), b = value(p[1]);
        const dims da = plan_.slots[a].dims(), db = plan_.slots[b].dims();
        for (std::size_t k = 0; k < da.size(); ++k)
          TORCH_CHECK(da.size() == db.size() && (db[k] == da[k] || db[k] == 1), "onednn: region ", region_.method, ": a mul of ",
                      c10::IntArrayRef(da), " and ", c10::IntArrayRef(db), " (the second must be of the first's shape or [N, C, 1, 1])");
        return binary(dnnl::algorithm::binary_mul, a, b, {}, p[2]);
      }
      case permute: {
        const std::size_t in = value(p[0]);
        const std::size_t rank = p.size() - 2;
        std::vector<int> order(rank);  // oneDNN's: input axis k becomes axis order[k]
        for (std::size_t k = 0; k < rank; ++k) {
          std::int64_t from = p[k + 2] < 0 ? p[k + 2] + static_cast<std::int64_t>(rank) : p[k + 2];
          TORCH_CHECK(from >= 0 && from < static_cast<std::int64_t>(rank), "onednn: region ", region_.method, ": permute's dims ",
                      c10::IntArrayRef(p).slice(2), " for a ", rank, "-d tensor");
          order[static_cast<std::size_t>(from)] = static_cast<int>(k);
        }
        TORCH_CHECK(plan_.slots[in].dims().size() == rank, "onednn: region ", region_.method, ": permute of ", rank,
                    " dims given a ", plan_.slots[in].dims().size(), "-d tensor");
        slot_of_.at(static_cast<std::size_t>(p[1])) = add_slot(plan_.slots[in].permute_axes(order), root(in));
        return;
      }
      case layer_norm: {
        const dims d = plan_.slots[value(p[0])].dims();
        const std::size_t in = as(value(p[0]), dense(d));  // the normalized (last) dimension innermost
        const float eps = static_cast<float>(std::bit_cast<double>(p[2]));
        const dnnl::layer_normalization_forward::primitive_desc pd(
            {dnnl::prop_kind::forward_inference, plan_.slots[in], eps, dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift},
            attributes(), cpu_engine());
        const md channels({d.back()}, f32, tag::a);
        const std::size_t gamma = constant(cache_.weights[index], channels), beta = constant(cache_.biases[index], channels);
        own_weights_.emplace_back(index, gamma, beta);
        define(p[1], pd.dst_desc());
        return call(dnnl::layer_normalization_forward(pd),
                    {{DNNL_ARG_SRC, in}, {DNNL_ARG_SCALE, gamma}, {DNNL_ARG_SHIFT, beta}, {DNNL_ARG_DST, value(p[1])}},
                    pd.scratchpad_desc());
      }
      case linear: return fully_connected(index, fused);
      case flatten: {
        const dims d = plan_.slots[value(p[0])].dims();
        const auto rank = static_cast<std::int64_t>(d.size());
        const std::int64_t start = p[2] < 0 ? p[2] + rank : p[2], end = p[3] < 0 ? p[3] + rank : p[3];
        TORCH_CHECK(start >= 0 && end < rank && start <= end, "onednn: region ", region_.method, ": flatten from ", p[2], " to ", p[3],
                    " of a ", rank, "-d tensor");
        dims shaped(d.begin(), d.begin() + start);
        std::int64_t merged = 1;
        for (std::int64_t k = start; k <= end; ++k) merged *= d[static_cast<std::size_t>(k)];
        shaped.push_back(merged);
        shaped.insert(shaped.end(), d.begin() + end + 1, d.end());
        const std::size_t in = as(value(p[0]), dense(d));
        slot_of_.at(static_cast<std::size_t>(p[1])) = add_slot(dense(shaped), root(in));
        return;
      }
      case scale: {
        const std::size_t in = value(p[0]);
        const dims d = plan_.slots[in].dims();
        const dims& by = step.weight_sizes;
        TORCH_CHECK(by.size() <= d.size(), "onednn: region ", region_.method, ": a scale of ", by.size(), " dims for a ",
                    d.size(), "-d tensor");
        dims padded(d.size() - by.size(), 1);  // numpy's broadcasting: leading ones
        padded.insert(padded.end(), by.begin(), by.end());
        for (std::size_t k = 0; k < d.size(); ++k)
          TORCH_CHECK(padded[k] == 1 || padded[k] == d[k], "onednn: region ", region_.method, ": a scale of sizes ",
                      c10::IntArrayRef(by), " does not broadcast to ", c10::IntArrayRef(d));
        const std::size_t factor = constant(cache_.weights[index], dense(padded));
        own_weights_.emplace_back(index, factor, no_slot);
        return binary(dnnl::algorithm::binary_mul, in, factor, {}, p[1]);
      }
      case cat: {
        // In the layouts the inputs have; where that is a reference kernel (channels that do not
        // fill a blocked layout's last block: ShuffleNetV2's 58), all of them in nhwc, else nchw.
        std::optional<dnnl::concat::primitive_desc> chosen;
        std::optional<tag> relaid;
        for (const std::optional<tag> layout : {std::optional<tag>(), std::optional<tag>(tag::nhwc), std::optional<tag>(tag::nchw)}) {
          std::vector<md> inputs;
          for (std::size_t k = 0; k + 1 < p.size(); ++k)
            inputs.push_back(layout ? md(plan_.slots[value(p[k])].dims(), f32, *layout) : plan_.slots[value(p[k])]);
          try {
            dnnl::concat::primitive_desc pd(1, inputs, cpu_engine(), attributes());
            const bool fast = !is_reference(pd.impl_info_str());
            if (!chosen || fast) chosen = pd, relaid = layout;
            if (fast) break;
          } catch (const dnnl::error&) {
          }
        }
        TORCH_CHECK(chosen.has_value(), "onednn: region ", region_.method, ": step ", index, " (cat): oneDNN refused it in every layout");
        std::vector<std::pair<int, std::size_t>> arguments;
        for (std::size_t k = 0; k + 1 < p.size(); ++k) {
          const std::size_t slot = value(p[k]);
          arguments.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k),
                                 relaid ? as(slot, md(plan_.slots[slot].dims(), f32, *relaid)) : slot);
        }
        define(p.back(), chosen->dst_desc());
        arguments.emplace_back(DNNL_ARG_DST, value(p.back()));
        return call(dnnl::concat(*chosen), std::move(arguments), chosen->scratchpad_desc());
      }
      case add: {
        dnnl::post_ops post_ops;
        if (p[3] & 1) post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        return binary(dnnl::algorithm::binary_add, value(p[0]), value(p[1]), post_ops, p[2]);
      }
      case max_pool2d: {
        const std::size_t in = value(p[0]);
        const dims d = plan_.slots[in].dims();
        const dims kernel{p[2], p[3]}, strides{p[4], p[5]}, left{p[6], p[7]};
        dims out_hw(2), right(2);
        for (std::size_t k = 0; k < 2; ++k) {
          const std::int64_t size = d[k + 2], span = size + 2 * left[k] - kernel[k];
          TORCH_CHECK(span >= 0, "onednn: region ", region_.method, ": max_pool2d's kernel ", kernel[k], " is larger than its padded input ", size + 2 * left[k]);
          std::int64_t o = (p[8] ? (span + strides[k] - 1) / strides[k] : span / strides[k]) + 1;
          if (p[8] && (o - 1) * strides[k] >= size + left[k]) --o;  // the last window starts in the input (PyTorch's rule)
          out_hw[k] = o;
          // Right padding that gives o windows: any in [exact, exact + stride - 1]; the symmetric one when it fits.
          const std::int64_t exact = (o - 1) * strides[k] + kernel[k] - size - left[k];
          right[k] = std::max<std::int64_t>(0, left[k] >= exact && left[k] < exact + strides[k] ? left[k] : exact);
        }
        const md out({d[0], d[1], out_hw[0], out_hw[1]}, f32, tag::any);
        const dnnl::pooling_forward::primitive_desc pd(
            {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, plan_.slots[in], out, strides, kernel, left, right},
            attributes(), cpu_engine());
        define(p[1], pd.dst_desc());
        return call(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, value(p[1])}}, pd.scratchpad_desc());
      }
      case global_avg_pool2d: {
        const std::size_t in = value(p[0]);
        const dims d = plan_.slots[in].dims();
        const md out({d[0], d[1], 1, 1}, f32, tag::any);
        const dnnl::pooling_forward::primitive_desc pd(
            {dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_exclude_padding, plan_.slots[in], out, {1, 1},
             {d[2], d[3]}, {0, 0}, {0, 0}},
            attributes(), cpu_engine());
        define(p[1], pd.dst_desc());
        return call(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, value(p[1])}}, pd.scratchpad_desc());
      }
    }
  }

  /// A convolution's primitive descriptor with the steps of `fused` as post-ops, its source in
  /// `src` (a layout, or tag::any), its destination (and a residual it adds) in `layout`, or when
  /// none is given in oneDNN's choice (with a residual: the residual's own layout); nullopt when
  /// oneDNN refuses it.
  struct conv_candidate {
    dnnl::convolution_forward::primitive_desc pd;
    std::vector<std::tuple<int, std::size_t, md>> addends;  // (post-op index, slot, the layout it is read in)
  };
  std::optional<conv_candidate> conv_desc(std::size_t index, const std::vector<std::size_t>& fused, const md& src,
                                          std::optional<tag> layout) const {
    const compiled_step& step = (*region_.steps)[index];
    const auto& p = step.record.ints;
    const dims d = plan_.slots[value(p[0])].dims();
    const std::vector<std::int64_t>& weight = step.weight_sizes;
    const std::int64_t groups = p[8], out_channels = weight[0], kh = weight[2], kw = weight[3];
    const std::int64_t oh = (d[2] + 2 * p[4] - p[6] * (kh - 1) - 1) / p[2] + 1, ow = (d[3] + 2 * p[5] - p[7] * (kw - 1) - 1) / p[3] + 1;
    const dims weight_dims = groups > 1 ? dims{groups, out_channels / groups, weight[1], kh, kw} : dims{out_channels, weight[1], kh, kw};
    dnnl::post_ops post_ops;
    int post_op_count = 0;
    auto append_relu = [&] {
      post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      ++post_op_count;
    };
    if (p[9]) append_relu();
    md out({d[0], out_channels, oh, ow}, f32, layout ? *layout : tag::any);
    conv_candidate made{{}, {}};
    std::int64_t result = p[1];
    for (std::size_t next : fused) {
      const step_record& r = (*region_.steps)[next].record;
      if (r.op == add) {
        const std::size_t other = value(r.ints[0] == result ? r.ints[1] : r.ints[0]);
        const md addend = layout ? md(plan_.slots[other].dims(), f32, *layout) : plan_.slots[other];
        out = addend;  // the sum is made in the residual's layout
        post_ops.append_binary(dnnl::algorithm::binary_add, addend);
        made.addends.emplace_back(post_op_count++, other, addend);
        if (r.ints[3] & 1) append_relu();
      } else {
        for (const auto& [algorithm, alpha, beta] : eltwise_chain(r)) {
          post_ops.append_eltwise(1.f, algorithm, alpha, beta);
          ++post_op_count;
        }
      }
      result = made_by(r);
    }
    try {
      made.pd = dnnl::convolution_forward::primitive_desc(
          {dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, md(weight_dims, f32, tag::any),
           md({out_channels}, f32, tag::x), out, {p[2], p[3]}, {p[6] - 1, p[7] - 1}, {p[4], p[5]}, {p[4], p[5]}},
          attributes(post_ops), cpu_engine());
    } catch (const dnnl::error&) {
      return std::nullopt;  // e.g. a residual in a layout its kernels do not write
    }
    return made;
  }

  /// A convolution, never on a reference kernel (is_reference). In order, the first that oneDNN
  /// runs with a JIT kernel: (1) with its post-ops fused, in the layout oneDNN picks or in its
  /// input's own (no reorder; preferred when both are fast); (2) alone, the fused steps after it as
  /// primitives of their own, the same two layouts; (3) alone, source and destination in each of
  /// nChw16c, nChw8c, nhwc, nchw (weights: oneDNN's pick); (4) ATen's conv2d on dense NCHW, as
  /// LibTorch runs it.
  /// A binary primitive of `a` and `b` (b of a's shape, or broadcast) making value `made`: in the
  /// layouts they have (b reordered to a's when of a's shape: oneDNN's fast path), or where that is
  /// a reference kernel (a broadcast scale in a blocked layout under SSE4.1), both in nhwc, nChw8c
  /// or nchw (dense for other ranks); if every one is a reference kernel, the first (the debug query
  /// shows it: docs/onednn.md).
  void binary(dnnl::algorithm algorithm, std::size_t a, std::size_t b, const dnnl::post_ops& post_ops, std::int64_t made) {
    const dims da = plan_.slots[a].dims(), db = plan_.slots[b].dims();
    std::vector<std::pair<md, md>> layouts{{plan_.slots[a], da == db ? plan_.slots[a] : plan_.slots[b]}};
    if (da.size() == 4)
      for (const tag layout : {tag::nhwc, tag::nChw8c, tag::nchw}) layouts.emplace_back(md(da, f32, layout), md(db, f32, layout));
    else
      layouts.emplace_back(dense(da), dense(db));
    std::optional<dnnl::binary::primitive_desc> chosen;
    std::pair<md, md> inputs;
    for (const auto& [x, y] : layouts) {
      try {
        dnnl::binary::primitive_desc pd({algorithm, x, y, md(da, f32, tag::any)}, attributes(post_ops), cpu_engine());
        const bool fast = !is_reference(pd.impl_info_str());
        if (!chosen || fast) chosen = pd, inputs = {x, y};
        if (fast) break;
      } catch (const dnnl::error&) {
      }
    }
    TORCH_CHECK(chosen.has_value(), "onednn: region ", region_.method, ": step ", step_, " (", op_name((*region_.steps)[step_].record.op),
                "): oneDNN refused it in every layout");
    const std::size_t x = as(a, inputs.first), y = as(b, inputs.second);
    define(made, chosen->dst_desc());
    call(dnnl::binary(*chosen), {{DNNL_ARG_SRC_0, x}, {DNNL_ARG_SRC_1, y}, {DNNL_ARG_DST, value(made)}}, chosen->scratchpad_desc());
  }

  void conv(std::size_t index, const std::vector<std::size_t>& fused) {
    const compiled_step& step = (*region_.steps)[index];
    const auto& p = step.record.ints;
    const std::size_t in = value(p[0]);
    const dims d = plan_.slots[in].dims();
    const std::vector<std::int64_t>& weight = step.weight_sizes;
    const std::int64_t groups = p[8], channels = weight[1] * groups, kh = weight[2], kw = weight[3];
    TORCH_CHECK(d[1] == channels, "onednn: region ", region_.method, ": a convolution of ", channels, " input channels given ",
                d[1], " (input ", describe(step), ")");
    const std::int64_t oh = (d[2] + 2 * p[4] - p[6] * (kh - 1) - 1) / p[2] + 1, ow = (d[3] + 2 * p[5] - p[7] * (kw - 1) - 1) / p[3] + 1;
    TORCH_CHECK(oh > 0 && ow > 0, "onednn: region ", region_.method, ": a convolution's input ", describe(step), " is smaller than its kernel");
    const auto fast = [](const std::optional<conv_candidate>& c) { return c && !is_reference(c->pd.impl_info_str()); };
    const std::vector<std::size_t> alone;
    for (const std::vector<std::size_t>* with : {&fused, &alone}) {
      if (with == &alone && fused.empty()) break;  // (1) was already alone
      std::optional<conv_candidate> chosen = conv_desc(index, *with, md(d, f32, tag::any), std::nullopt);
      if (!chosen || chosen->pd.src_desc() != plan_.slots[in]) {
        // The input's own layout saves a reorder, but not at the price of a GEMM-based kernel
        // (im2col and a matrix product: ShuffleNetV2's convolutions on its 58-channel plain
        // inputs ran 2x slower that way) where oneDNN's pick has a direct one.
        std::optional<conv_candidate> own = conv_desc(index, *with, plan_.slots[in], std::nullopt);
        const auto gemm = [](const std::optional<conv_candidate>& c) {
          return c && std::string_view(c->pd.impl_info_str()).find("gemm") != std::string_view::npos;
        };
        if (fast(own) && !(gemm(own) && fast(chosen) && !gemm(chosen))) chosen = std::move(own);
      }
      if (fast(chosen)) return emit_conv(index, *chosen, *with, fused);
    }
    for (const tag layout : {tag::nChw16c, tag::nChw8c, tag::nhwc, tag::nchw}) {
      std::optional<conv_candidate> candidate = conv_desc(index, alone, md(d, f32, layout), layout);
      if (fast(candidate)) return emit_conv(index, *candidate, alone, fused);
    }
    conv_in_aten(index, fused);
  }

  void emit_conv(std::size_t index, const conv_candidate& chosen, const std::vector<std::size_t>& with,
                 const std::vector<std::size_t>& fused) {
    const auto& p = (*region_.steps)[index].record.ints;
    const auto& pd = chosen.pd;
    const std::size_t src = as(value(p[0]), pd.src_desc());
    std::vector<std::pair<int, std::size_t>> addends;
    for (const auto& [post_op, slot, layout] : chosen.addends)
      addends.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1, as(slot, layout));
    const std::size_t weights = constant(cache_.weights[index], pd.weights_desc());
    const std::size_t bias = constant(cache_.biases[index], pd.bias_desc());
    own_weights_.emplace_back(index, weights, bias);
    const std::int64_t made = with.empty() ? p[1] : made_by((*region_.steps)[with.back()].record);
    define(made, pd.dst_desc());
    std::vector<std::pair<int, std::size_t>> arguments{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, value(made)}};
    arguments.insert(arguments.end(), addends.begin(), addends.end());
    call(dnnl::convolution_forward(pd), std::move(arguments), pd.scratchpad_desc());
    if (with.empty())
      for (std::size_t next : fused) run(next, {});
  }

  /// A convolution for which oneDNN offered only reference kernels, in every layout: ATen's conv2d
  /// on dense NCHW tensors (the weights kept dense in the plan), its fused steps after it.
  void conv_in_aten(std::size_t index, const std::vector<std::size_t>& fused) {
    const compiled_step& step = (*region_.steps)[index];
    const auto& p = step.record.ints;
    const dims d = plan_.slots[value(p[0])].dims();
    const std::vector<std::int64_t> weight = step.weight_sizes;
    const std::int64_t groups = p[8], out_channels = weight[0], kh = weight[2], kw = weight[3];
    const std::int64_t oh = (d[2] + 2 * p[4] - p[6] * (kh - 1) - 1) / p[2] + 1, ow = (d[3] + 2 * p[5] - p[7] * (kw - 1) - 1) / p[3] + 1;
    const dims weight_dims = groups > 1 ? dims{groups, out_channels / groups, weight[1], kh, kw} : dims{out_channels, weight[1], kh, kw};
    const std::size_t src = as(value(p[0]), dense(d));
    const std::size_t weights = constant(cache_.weights[index], md(weight_dims, f32, groups > 1 ? tag::goihw : tag::oihw));
    const std::size_t bias = constant(cache_.biases[index], md({out_channels}, f32, tag::x));
    own_weights_.emplace_back(index, weights, bias);
    const dims out{d[0], out_channels, oh, ow};
    define(p[1], dense(out));
    const dnnl::memory weight_memory = plan_.constants[weights], bias_memory = plan_.constants[bias];
    const std::vector<std::int64_t> stride{p[2], p[3]}, padding{p[4], p[5]}, dilation{p[6], p[7]};
    const bool then_relu = p[9] != 0;
    auto run_conv2d = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
      c10::InferenceMode inference;
      const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), d, at::kFloat);
      const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), weight, at::kFloat);
      const at::Tensor b = at::from_blob(bias_memory.get_data_handle(), {out_channels}, at::kFloat);
      at::Tensor y = at::conv2d(x, w, b, stride, padding, dilation, groups);
      if (then_relu) y.relu_();
      at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), out, at::kFloat).copy_(y);
    };
    call(dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, value(p[1])}}, md(), run_conv2d, "convolution", "aten::conv2d");
    for (std::size_t next : fused) run(next, {});
  }

  /// A linear over the last dimension: oneDNN's inner product on [rows, I] (the leading dimensions
  /// flattened, in row-major order), with the activations after it as post-ops.
  void fully_connected(std::size_t index, const std::vector<std::size_t>& fused) {
    const compiled_step& step = (*region_.steps)[index];
    const auto& p = step.record.ints;
    const dims d = plan_.slots[value(p[0])].dims();
    const std::int64_t outputs = step.weight_sizes[0], features = step.weight_sizes[1];
    TORCH_CHECK(d.back() == features, "onednn: region ", region_.method, ": a linear of ", features, " input features given ",
                c10::IntArrayRef(d));
    const std::size_t in = as(value(p[0]), dense(d));
    std::int64_t rows = 1;
    for (std::size_t k = 0; k + 1 < d.size(); ++k) rows *= d[k];
    const std::size_t flat = add_slot(plan_.slots[in].reshape({rows, features}), root(in));
    dims shaped(d.begin(), d.end() - 1);
    shaped.push_back(outputs);
    // Never a reference kernel: with its activations as post-ops, else alone (the activations
    // after it as primitives of their own), else ATen's linear.
    auto inner_product = [&](const std::vector<std::size_t>& with) -> std::optional<dnnl::inner_product_forward::primitive_desc> {
      dnnl::post_ops post_ops;
      for (std::size_t next : with)
        for (const auto& [algorithm, alpha, beta] : eltwise_chain((*region_.steps)[next].record))
          post_ops.append_eltwise(1.f, algorithm, alpha, beta);
      try {
        dnnl::inner_product_forward::primitive_desc pd(
            {dnnl::prop_kind::forward_inference, md({rows, features}, f32, tag::ab), md({outputs, features}, f32, tag::any),
             md({outputs}, f32, tag::a), md({rows, outputs}, f32, tag::ab)},
            attributes(post_ops), cpu_engine());
        if (!is_reference(pd.impl_info_str())) return pd;
      } catch (const dnnl::error&) {
      }
      return std::nullopt;
    };
    const std::vector<std::size_t> alone;
    for (const std::vector<std::size_t>* with : {&fused, &alone}) {
      if (with == &alone && fused.empty()) break;
      const auto pd = inner_product(*with);
      if (!pd) continue;
      const std::size_t weights = constant(cache_.weights[index], pd->weights_desc());
      const std::size_t bias = constant(cache_.biases[index], pd->bias_desc());
      own_weights_.emplace_back(index, weights, bias);
      const std::size_t out = add_slot(pd->dst_desc());
      const std::int64_t made = with->empty() ? p[1] : made_by((*region_.steps)[with->back()].record);
      slot_of_.at(static_cast<std::size_t>(made)) = add_slot(dense(shaped), out);
      call(dnnl::inner_product_forward(*pd),
           {{DNNL_ARG_SRC, flat}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, out}}, pd->scratchpad_desc());
      if (with->empty())
        for (std::size_t next : fused) run(next, {});
      return;
    }
    const std::size_t weights = constant(cache_.weights[index], md({outputs, features}, f32, tag::ab));
    const std::size_t bias = constant(cache_.biases[index], md({outputs}, f32, tag::a));
    own_weights_.emplace_back(index, weights, bias);
    define(p[1], dense(shaped));
    const dnnl::memory weight_memory = plan_.constants[weights], bias_memory = plan_.constants[bias];
    auto run_linear = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
      c10::InferenceMode inference;
      const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), {rows, features}, at::kFloat);
      const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), {outputs, features}, at::kFloat);
      const at::Tensor b = at::from_blob(bias_memory.get_data_handle(), {outputs}, at::kFloat);
      at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), {rows, outputs}, at::kFloat).copy_(at::linear(x, w, b));
    };
    call(dnnl::primitive(), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_DST, value(p[1])}}, md(), run_linear, "inner_product", "aten::linear");
    for (std::size_t next : fused) run(next, {});
  }

  /// Gives each activation slot an offset in one buffer: two slots share bytes only when their
  /// lives (first write to last read) do not overlap. Largest first, lowest offset that fits.
  void place() {
    const std::size_t inputs = static_cast<std::size_t>(region_.inputs);
    plan_.offsets.assign(plan_.slots.size(), 0);
    std::vector<std::size_t> order;
    for (std::size_t slot = 0; slot < plan_.slots.size(); ++slot)
      if (slot >= inputs && !plan_.constants[slot] && plan_.aliases[slot] == no_slot && plan_.slots[slot].get_size() > 0)
        order.push_back(slot);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return plan_.slots[a].get_size() > plan_.slots[b].get_size(); });
    constexpr std::size_t align = 64;
    std::vector<std::size_t> placed;
    std::size_t end = 0;
    for (std::size_t slot : order) {
      const std::size_t size = (plan_.slots[slot].get_size() + align - 1) / align * align;
      std::vector<std::pair<std::size_t, std::size_t>> busy;  // [begin, end) of slots alive at the same time
      for (std::size_t other : placed)
        if (!(last_use_[other] < first_use_[slot] || last_use_[slot] < first_use_[other]))
          busy.emplace_back(plan_.offsets[other], plan_.offsets[other] + (plan_.slots[other].get_size() + align - 1) / align * align);
      std::sort(busy.begin(), busy.end());
      std::size_t offset = 0;
      for (const auto& [begin, finish] : busy) {
        if (offset + size <= begin) break;
        offset = std::max(offset, finish);
      }
      plan_.offsets[slot] = offset;
      end = std::max(end, offset + size);
      placed.push_back(slot);
    }
    plan_.scratchpad_offset = end;
    plan_.buffer_bytes = end + scratchpad_bytes_;
  }

  const compiled_region& region_;
  plan_cache& cache_;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> own_weights_;  // (step, weight slot, bias slot)
  std::shared_ptr<execution_plan> made_ = std::make_shared<execution_plan>();
  execution_plan& plan_ = *made_;
  std::vector<std::size_t> slot_of_;  // value id -> slot
  std::vector<int> uses_;             // value id -> how many steps read it (+2 for a result)
  std::vector<std::size_t> first_use_, last_use_;  // slot -> first and last call index touching it
  std::vector<std::pair<std::size_t, std::size_t>> reordered_;
  std::size_t scratchpad_bytes_ = 0;
  std::size_t step_ = 0;  // the step being planned (the debug query names it)
  std::string shapes_;    // the input shapes, as the debug query prints them
};

}  // namespace

std::vector<plan_implementation> plan_implementations(const torch::jit::Module& module) {
  std::vector<plan_implementation> listed;
  torch_delegate::for_each_compiled<OnednnBackend>(module, [&](const std::string&, const compiled_region& region) {
    std::lock_guard<std::mutex> lock(region.plans->mutex);  // plans are added under it
    for (const auto& [shapes, plan] : region.plans->plans)
      if (plan) listed.insert(listed.end(), plan->implementations.begin(), plan->implementations.end());
  });
  return listed;
}

compiled_region OnednnBackend::compile(const region_payload& payload, const torch_delegate::compile_context& context) {
  TORCH_CHECK(is_available(), "onednn: this LibTorch was built without oneDNN");
  auto steps = std::make_shared<std::vector<compiled_step>>();
  auto cache = std::make_shared<plan_cache>();
  std::vector<std::string> used;  // released: the cache keeps the tensors until the first plan has its copies
  for (const step_record& record : payload.steps) {
    TORCH_CHECK(record.op >= convolution && record.op <= flatten, "onednn: region ", context.method(), ": unknown step ", record.op,
                " (a payload from a newer onednn backend?)");
    const auto op = static_cast<std::size_t>(record.op);
    if (record.op == permute) {
      TORCH_CHECK(record.ints.size() >= 3 && record.ints.size() <= 8, "onednn: region ", context.method(), ": a permute step of ",
                  record.ints.size(), " values, expected its input, its output and 1 to 6 dims");
    } else if (record.op == cat) {
      TORCH_CHECK(record.ints.size() >= 2, "onednn: region ", context.method(), ": a cat step of ", record.ints.size(),
                  " values, expected its inputs and its output");
    } else {
      TORCH_CHECK(static_cast<std::int64_t>(record.ints.size()) == record_sizes[op], "onednn: region ", context.method(), ": step ",
                  record.op, " (", op_name(record.op), ") has ", record.ints.size(), " parameters, expected ", record_sizes[op]);
    }
    if (record.op == eltwise) TORCH_CHECK(record.ints[2] >= sigmoid && record.ints[2] <= gelu_tanh, "onednn: region ", context.method(),
                  ": unknown activation ", record.ints[2], " (a payload from a newer onednn backend?)");
    for (std::size_t k = 0; k < ids_in(record); ++k)
      TORCH_CHECK(record.ints[k] >= 0 && record.ints[k] < payload.values, "onednn: region ", context.method(), ": value ",
                  record.ints[k], " out of range [0, ", payload.values, ")");
    compiled_step step{record, {}};
    dnnl::memory weight_memory, bias_memory;
    if (has_weights(record.op) && record.op != convolution) {
      const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
      TORCH_CHECK(weight.scalar_type() == at::kFloat && weight.dim() >= 1 && (record.op != linear || weight.dim() == 2) &&
                      (record.op != layer_norm || weight.dim() == 1),
                  "onednn: region ", context.method(), ": a ", op_name(record.op), " with weight ", weight.sizes());
      step.weight_sizes = weight.sizes().vec();
      weight_memory = dnnl::memory(dense(dims(weight.sizes().begin(), weight.sizes().end())), cpu_engine(), weight.data_ptr());
      cache->dense.push_back(weight);
      used.push_back(record.weight);
      if (record.op != scale) {
        const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
        TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == weight.size(0), "onednn: region ",
                    context.method(), ": a ", op_name(record.op), " with weight ", weight.sizes(), " and bias ", bias.sizes());
        bias_memory = dnnl::memory(dense({bias.size(0)}), cpu_engine(), bias.data_ptr());
        cache->dense.push_back(bias);
        used.push_back(record.bias);
      }
    }
    if (record.op == convolution) {
      const auto& p = record.ints;
      const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
      const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
      TORCH_CHECK(weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && weight.dim() == 4 && bias.dim() == 1 &&
                      bias.size(0) == weight.size(0) && p[8] >= 1 && weight.size(0) % p[8] == 0 && p[2] > 0 && p[3] > 0 &&
                      p[6] > 0 && p[7] > 0,
                  "onednn: region ", context.method(), ": a convolution with weight ", weight.sizes(), ", bias ", bias.sizes(),
                  " and ", p[8], " groups");
      step.weight_sizes = weight.sizes().vec();
      const std::int64_t groups = p[8];
      const dims weight_dims = groups > 1 ? dims{groups, weight.size(0) / groups, weight.size(1), weight.size(2), weight.size(3)}
                                          : dims(weight.sizes().begin(), weight.sizes().end());
      weight_memory = dnnl::memory(md(weight_dims, f32, groups > 1 ? tag::goihw : tag::oihw), cpu_engine(), weight.data_ptr());
      bias_memory = dnnl::memory(md({bias.size(0)}, f32, tag::x), cpu_engine(), bias.data_ptr());
      cache->dense.push_back(weight);
      cache->dense.push_back(bias);
      used.push_back(record.weight);
      used.push_back(record.bias);
    }
    cache->weights.push_back(weight_memory);
    cache->biases.push_back(bias_memory);
    steps->push_back(std::move(step));
  }
  for (const std::string& key : used) context.release_named_data(key);
  for (std::int64_t index : payload.outputs)
    TORCH_CHECK(index >= payload.inputs && index < payload.values, "onednn: region ", context.method(), ": output value ",
                index, " out of range");
  return {std::move(steps), payload.inputs, payload.values, payload.outputs, std::string(context.method()), std::move(cache)};
}

std::vector<c10::IValue> OnednnBackend::execute(compiled_region& region, torch_delegate::inputs args) {
  TORCH_CHECK(static_cast<std::int64_t>(args.size()) == region.inputs, "onednn: region ", region.method, " takes ",
              region.inputs, " inputs, got ", args.size());
  std::vector<at::Tensor> given(args.size());
  std::vector<std::vector<std::int64_t>> shapes;
  for (std::size_t i = 0; i < args.size(); ++i) {
    TORCH_CHECK(args[i].isTensor(), "onednn: region ", region.method, ": input ", i + 1, " is not a tensor");
    const at::Tensor& tensor = args[i].toTensor();
    TORCH_CHECK(tensor.scalar_type() == at::kFloat && tensor.device().is_cpu() && tensor.dim() >= 1 && tensor.dim() <= 6 &&
                    tensor.layout() == at::kStrided,
                "onednn: region ", region.method, ": input ", i + 1, " must be a dense float CPU tensor of 1 to 6 dims, got ",
                tensor.dim(), "-d ", tensor.scalar_type(), " on ", tensor.device());
    given[i] = tensor.contiguous();
    shapes.push_back(tensor.sizes().vec());
  }
  std::shared_ptr<const execution_plan> plan;
  {
    std::lock_guard<std::mutex> lock(region.plans->mutex);
    auto& slot = region.plans->plans[shapes];
    if (!slot) slot = planner(region, *region.plans, shapes).build();  // under the lock: one plan per shape, weights reordered once
    plan = slot;
  }
  std::unique_ptr<call_context> context;
  {
    std::lock_guard<std::mutex> lock(plan->idle_mutex);
    if (!plan->idle.empty()) {
      context = std::move(plan->idle.back());
      plan->idle.pop_back();
    }
  }
  if (!context) context = std::make_unique<call_context>(*plan, given.size());
  for (std::size_t slot = 0; slot < plan->slots.size(); ++slot) {
    const std::size_t input = slot < given.size() ? slot : plan->aliases[slot];
    if (input < given.size()) context->memory[slot].set_data_handle(given[input].data_ptr());
  }
  const dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(cpu_engine());
  for (std::size_t k = 0; k < plan->calls.size(); ++k) {
    if (plan->calls[k].host) {
      stream.wait();  // ATen reads what the primitives before it wrote
      plan->calls[k].host(context->arguments[k]);
    } else {
      plan->calls[k].primitive.execute(stream, context->arguments[k]);
    }
  }
  const std::vector<dnnl::memory>& memory = context->memory;
  std::vector<c10::IValue> outputs;
  for (std::size_t k = 0; k < plan->outputs.size(); ++k) {
    at::Tensor out = at::empty(plan->output_dims[k], at::kFloat);
    dnnl::memory to(dense(plan->output_dims[k]), engine, out.data_ptr());
    plan->output_reorders[k].execute(stream, {{DNNL_ARG_FROM, memory[plan->outputs[k]]}, {DNNL_ARG_TO, to}});
    outputs.emplace_back(std::move(out));
  }
  stream.wait();
  std::lock_guard<std::mutex> lock(plan->idle_mutex);
  plan->idle.push_back(std::move(context));
  return outputs;
}

}  // namespace onednn_delegate
