// What onednn takes: a support table (op kind -> rule), the activations it runs as eltwise
// primitives, which regions are worth a call, and availability. docs/onednn.md has the table.
#include "internal.hpp"

#include "common/clamp_range.hpp"

#include <torch_delegate/node_queries.hpp>

#include <ATen/Context.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

namespace onednn_delegate {

using torch_delegate::constant_is;
using torch_delegate::constant_of;
using torch_delegate::known_at_lowering;
using torch_delegate::known_sizes;

bool is(const torch::jit::Node* node, const char* kind) { return node->kind() == c10::Symbol::fromQualString(kind); }

bool float_4d_or_unknown(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor) return false;
  if (tensor->scalarType() && *tensor->scalarType() != c10::ScalarType::Float) return false;
  return !tensor->dim() || *tensor->dim() == 4;
}

std::optional<std::vector<std::int64_t>> float_sizes(const torch::jit::Value* value) {
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (!tensor || (tensor->scalarType() && *tensor->scalarType() != c10::ScalarType::Float)) return std::nullopt;
  auto sizes = known_sizes(value);
  if (!sizes || sizes->empty() || sizes->size() > 6) return std::nullopt;
  return sizes;
}

std::optional<activation_parameters> activation_of(const torch::jit::Node* node) {
  if (is(node, "aten::sigmoid")) return activation_parameters{"sigmoid"};
  if (is(node, "aten::silu")) return activation_parameters{"silu"};
  if (is(node, "aten::hardswish")) return activation_parameters{"hardswish"};
  if (is(node, "aten::hardsigmoid")) return activation_parameters{"hardsigmoid"};
  if (is(node, "aten::gelu") && node->inputs().size() == 2) {
    const auto approximate = constant_of(node->input(1));
    if (approximate && approximate->isString() && approximate->toStringRef() == "none") return activation_parameters{"gelu_erf"};
    if (approximate && approximate->isString() && approximate->toStringRef() == "tanh") return activation_parameters{"gelu_tanh"};
  }
  if (is(node, "aten::relu")) return std::nullopt;  // a step of its own (fusion.cpp folds it)
  if (const auto range = cnn_common::clamp_range(node); range && range->first <= range->second)
    return activation_parameters{"clip", range->first, range->second};
  return std::nullopt;
}

namespace {

using support_rule = bool (*)(const torch::jit::Node*);

bool all_equal(const std::optional<c10::IValue>& list, std::int64_t expected) {
  if (!list || !list->isIntList()) return false;
  const std::vector<std::int64_t> values = list->toIntVector();
  return std::all_of(values.begin(), values.end(), [&](std::int64_t v) { return v == expected; });
}

bool supports_conv2d(const torch::jit::Node* node) {  // numeric padding (padding='same' is the str overload), weights known
  return node->inputs().size() == 7 && node->input(4)->type()->kind() == c10::TypeKind::ListType &&
         known_at_lowering(node->input(1)) && known_at_lowering(node->input(2)) && float_4d_or_unknown(node->input(0));
}
bool supports_batch_norm(const torch::jit::Node* node) {  // folded into the convolution it follows (eval mode, statistics known)
  const torch::jit::Node* before = node->input(0)->node();
  return node->inputs().size() == 9 && constant_is(node->input(5), false) && known_at_lowering(node->input(1)) &&
         known_at_lowering(node->input(2)) && known_at_lowering(node->input(3)) && known_at_lowering(node->input(4)) &&
         is(before, "aten::conv2d") && node->input(0)->uses().size() == 1;
}
bool supports_relu(const torch::jit::Node* node) { return float_4d_or_unknown(node->input(0)); }
bool supports_add(const torch::jit::Node* node) {  // two float tensors of one shape (no broadcasting), sizes known
  if (node->inputs().size() != 3 || !constant_is(node->input(2), c10::IValue(std::int64_t{1}))) return false;
  const auto a = float_sizes(node->input(0)), b = float_sizes(node->input(1));
  return a && b && *a == *b;
}
bool supports_max_pool2d(const torch::jit::Node* node) {  // oneDNN's pooling has no dilation
  return node->inputs().size() == 6 && all_equal(constant_of(node->input(4)), 1) && float_4d_or_unknown(node->input(0));
}
bool supports_adaptive_avg_pool2d(const torch::jit::Node* node) {
  const auto size = constant_of(node->input(1));
  return size && size->isIntList() && size->toIntVector() == std::vector<std::int64_t>{1, 1} && float_4d_or_unknown(node->input(0));
}
bool supports_activation(const torch::jit::Node* node) {
  return activation_of(node) && (float_4d_or_unknown(node->input(0)) || float_sizes(node->input(0)).has_value());
}
bool supports_permute(const torch::jit::Node* node) {  // dims known at lowering (ConvNeXt's Permute reads self.dims)
  return float_sizes(node->input(0)) && known_at_lowering(node->input(1));
}
bool supports_layer_norm(const torch::jit::Node* node) {  // over the last dimension, weight and bias known
  const auto shape = constant_of(node->input(1));
  const auto sizes = float_sizes(node->input(0));
  return node->inputs().size() == 6 && sizes && shape && shape->isIntList() &&
         shape->toIntVector() == std::vector<std::int64_t>{sizes->back()} && known_at_lowering(node->input(2)) &&
         known_at_lowering(node->input(3)) && constant_of(node->input(4)).has_value();
}
bool supports_flatten(const torch::jit::Node* node) {
  return node->inputs().size() == 3 && float_sizes(node->input(0)) && constant_of(node->input(1)) && constant_of(node->input(2));
}
bool supports_dropout(const torch::jit::Node* node) {  // eval mode: the identity
  return node->inputs().size() == 3 && constant_is(node->input(2), false) && float_sizes(node->input(0));
}
bool supports_linear(const torch::jit::Node* node) {
  return node->inputs().size() == 3 && float_sizes(node->input(0)) && known_at_lowering(node->input(1)) && known_at_lowering(node->input(2));
}
bool supports_mul(const torch::jit::Node* node) {
  if (node->inputs().size() != 2) return false;
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
  // Two 4-d float tensors of known sizes: one shape, or one of them [N, C, 1, 1] (a squeeze-excitation's scale).
  if (node->input(1)->type()->kind() != c10::TypeKind::TensorType) return false;
  const auto a = known_sizes(node->input(0)), b = known_sizes(node->input(1));
  if (!a || !b || a->size() != 4 || b->size() != 4 || !float_4d_or_unknown(node->input(0)) || !float_4d_or_unknown(node->input(1)))
    return false;
  auto scale_of = [](const std::vector<std::int64_t>& x, const std::vector<std::int64_t>& s) {
    return s[0] == x[0] && s[1] == x[1] && s[2] == 1 && s[3] == 1;
  };
  return *a == *b || scale_of(*a, *b) || scale_of(*b, *a);
}
bool supports_cat(const torch::jit::Node* node) {  // 4-d float tensors along the channels, listed in the region
  const torch::jit::Node* list = node->input(0)->node();
  if (node->inputs().size() != 2 || list->kind() != c10::prim::ListConstruct || node->input(0)->uses().size() != 1) return false;
  const auto dim = constant_of(node->input(1));
  if (!dim || !dim->isInt() || dim->toInt() != 1) return false;
  return std::all_of(list->inputs().begin(), list->inputs().end(), [](const torch::jit::Value* v) {
    const auto sizes = known_sizes(v);
    return sizes && sizes->size() == 4 && float_4d_or_unknown(v);
  });
}
bool supports_list(const torch::jit::Node* node) {  // the tensors of a cat it takes
  return node->output()->uses().size() == 1 && OnednnBackend::supports(node->output()->uses()[0].user);
}

/// The support table: each op kind onednn takes, and the rule its node must meet.
const std::unordered_map<c10::Symbol, support_rule>& support_table() {
  static const std::unordered_map<c10::Symbol, support_rule> table = [] {
    std::unordered_map<c10::Symbol, support_rule> rules;
    const std::pair<const char*, support_rule> entries[] = {
        {"aten::conv2d", supports_conv2d},       {"aten::batch_norm", supports_batch_norm},
        {"aten::relu", supports_relu},           {"aten::relu_", supports_relu},
        {"aten::add", supports_add},             {"aten::max_pool2d", supports_max_pool2d},
        {"aten::adaptive_avg_pool2d", supports_adaptive_avg_pool2d},
        {"aten::sigmoid", supports_activation},  {"aten::silu", supports_activation},
        {"aten::hardswish", supports_activation}, {"aten::hardsigmoid", supports_activation},
        {"aten::gelu", supports_activation},     {"aten::relu6", supports_activation},
        {"aten::hardtanh", supports_activation}, {"aten::clamp", supports_activation},
        {"aten::permute", supports_permute},     {"aten::layer_norm", supports_layer_norm},
        {"aten::flatten", supports_flatten},     {"aten::dropout", supports_dropout},
        {"aten::linear", supports_linear},       {"aten::mul", supports_mul},
        {"aten::cat", supports_cat},             {"prim::ListConstruct", supports_list},
    };
    for (const auto& [kind, rule] : entries) rules.emplace(c10::Symbol::fromQualString(kind), rule);
    return rules;
  }();
  return table;
}

}  // namespace

bool OnednnBackend::supports(const torch::jit::Node* node) {
  const auto& table = support_table();
  const auto found = table.find(node->kind());
  return found != table.end() && found->second(node);
}

bool OnednnBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  return std::any_of(region.begin(), region.end(),
                     [](const torch::jit::Node* node) { return is(node, "aten::conv2d") || is(node, "aten::linear"); });
}

bool OnednnBackend::is_available() {
  // TD_ONEDNN_UNAVAILABLE: behave as a LibTorch built without oneDNN (the fallback's tests).
  static const bool available = std::getenv("TD_ONEDNN_UNAVAILABLE") == nullptr && at::hasMKLDNN();
  return available;
}

}  // namespace onednn_delegate
