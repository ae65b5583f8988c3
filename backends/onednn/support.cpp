// What onednn takes: its op table (node kind -> support rule, and the preprocess emitter of
// preprocess.cpp), the activations it runs as eltwise primitives, and availability (which regions
// are worth a call: region_verdict.cpp). Built on the backend toolkit's graph reading and support rules.
// docs/onednn.md has the table.
#include "internal.hpp"

#include "toolkit/availability.hpp"
#include "toolkit/fused_activation.hpp"
#include "toolkit/graph.hpp"
#include "toolkit/known_values.hpp"
#include "toolkit/support_rules.hpp"

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <unordered_set>

namespace onednn_delegate {

namespace tk = torch_delegate::toolkit;

std::optional<activation_parameters> activation_of(const torch::jit::Node* node) {
  const auto read = tk::activation_of(node);
  if (!read) return std::nullopt;
  switch (read->kind) {
    case tk::activation_kind::relu: return std::nullopt;  // a step of its own (fusion.cpp folds it)
    case tk::activation_kind::clip:
      if (read->low > read->high) return std::nullopt;
      return activation_parameters{"clip", read->low, read->high};
    case tk::activation_kind::sigmoid: return activation_parameters{"sigmoid"};
    case tk::activation_kind::silu: return activation_parameters{"silu"};
    case tk::activation_kind::hardswish: return activation_parameters{"hardswish"};
    case tk::activation_kind::hardsigmoid: return activation_parameters{"hardsigmoid"};
    case tk::activation_kind::gelu_erf: return activation_parameters{"gelu_erf"};
    case tk::activation_kind::gelu_tanh: return activation_parameters{"gelu_tanh"};
  }
  return std::nullopt;
}

/// A view or reshape to sizes known at lowering (one of them may be -1).
std::optional<std::vector<std::int64_t>> reshape_sizes(const torch::jit::Node* node) {
  const auto from = tk::float_sizes(node->input(0));
  auto to = node->inputs().size() == 2 ? tk::known_ints(node->input(1)) : std::nullopt;
  if (!from || !to || to->empty() || to->size() > 6) return std::nullopt;
  std::int64_t count = 1, known = 1, unknown = -1;
  for (const std::int64_t size : *from) count *= size;
  for (std::size_t k = 0; k < to->size(); ++k) {
    if ((*to)[k] == -1 && unknown < 0)
      unknown = static_cast<std::int64_t>(k);
    else if ((*to)[k] < 0)
      return std::nullopt;
    else
      known *= (*to)[k];
  }
  if (unknown >= 0) {
    if (known == 0 || count % known) return std::nullopt;
    (*to)[static_cast<std::size_t>(unknown)] = count / known;
  } else if (known != count) {
    return std::nullopt;
  }
  return to;
}
/// The parts chunk(x, chunks, dim) makes, as (start, length) along `dim` (normalized), when its
/// only reader is the prim::ListUnpack of exactly those parts.
std::optional<chunk_split> chunk_parts(const torch::jit::Node* node) {
  if (node->inputs().size() != 3) return std::nullopt;
  const auto sizes = tk::float_sizes(node->input(0));
  const auto chunks = tk::known_int(node->input(1)), dim = tk::known_int(node->input(2));
  if (!sizes || !chunks || !dim || *chunks < 1 || node->output()->uses().size() != 1) return std::nullopt;
  const torch::jit::Node* unpack = node->output()->uses()[0].user;
  const auto rank = static_cast<std::int64_t>(sizes->size());
  const std::int64_t axis = *dim < 0 ? *dim + rank : *dim;
  if (!tk::is(unpack, "prim::ListUnpack") || axis < 0 || axis >= rank) return std::nullopt;
  const std::int64_t size = (*sizes)[static_cast<std::size_t>(axis)], each = (size + *chunks - 1) / *chunks;
  std::vector<std::pair<std::int64_t, std::int64_t>> parts;
  for (std::int64_t start = 0; start < size; start += each) parts.emplace_back(start, std::min(each, size - start));
  if (parts.size() != unpack->outputs().size()) return std::nullopt;
  return chunk_split{axis, std::move(parts)};
}
namespace {

/// A float tensor of rank 4, or one whose dtype or rank is not known (no example inputs).
bool float_4d_or_unknown(const torch::jit::Value* value) { return tk::is_float_of_rank_or_unknown(value, 4); }
/// A float tensor of the rank a 2-d or 3-d op (`node`: conv3d, max_pool3d, ...) reads, 4 or 5, or
/// one whose dtype or rank is not known.
bool float_of_op_rank_or_unknown(const torch::jit::Node* node) {
  return tk::is_float_of_rank_or_unknown(node->input(0), tk::spatial_dims_of(node) + 2);
}
/// Sizes known, of rank 4 or 5 (an image's or a video's [N, C, T, H, W]).
bool sizes_4d_or_5d(const torch::jit::Value* value) {
  const auto sizes = tk::float_sizes(value);
  return sizes && (sizes->size() == 4 || sizes->size() == 5);
}

// conv2d, conv1d (audio models: [N, C, L]) and conv3d (video models: [N, C, T, H, W]).
bool supports_conv(const torch::jit::Node* node) { return tk::conv_foldable(node) && float_of_op_rank_or_unknown(node); }
/// amax(x, dims, keepdim), or max(x, dim, keepdim) whose indices nothing reads, of a float tensor
/// of known sizes, over dimensions known at lowering, leaving at least one (a text CNN's max over
/// time).
bool supports_reduce_max(const torch::jit::Node* node) {
  if (node->inputs().size() != 3 || !tk::constant_of(node->input(2)).has_value()) return false;
  const bool amax = tk::is(node, "aten::amax");
  if (!amax && (node->outputs().size() != 2 || node->output(1)->hasUses())) return false;
  const auto sizes = tk::float_sizes(node->input(0));
  return sizes && !sizes->empty() && sizes->size() <= 6 && reduced_dims(node).has_value();
}

/// conv_transpose1d/2d/3d(input, weight, bias, stride, padding, output_padding, groups, dilation)
/// of a float input of 3 to 5 dimensions, its weight and bias known, its lists constants of one
/// value a spatial dimension (a U-Net's `ConvTranspose2d(c, c // 2, 2, stride=2)`; an output
/// padding, `ConvTranspose2d(c, c, 3, stride=2, padding=1, output_padding=1)`).
bool supports_conv_transpose(const torch::jit::Node* node) {
  if (node->inputs().size() != 8 || !tk::known_at_lowering(node->input(1)) || !tk::known_at_lowering(node->input(2))) return false;
  const std::size_t spatial = tk::is(node, "aten::conv_transpose1d") ? 1 : tk::is(node, "aten::conv_transpose3d") ? 3 : 2;
  for (const std::size_t list : {3, 4, 5, 7}) {
    const auto values = tk::constant_ints(node->input(list));
    if (!values || values->size() != spatial) return false;
  }
  const auto stride = *tk::constant_ints(node->input(3)), output_padding = *tk::constant_ints(node->input(5)),
             dilation = *tk::constant_ints(node->input(7));
  for (std::size_t k = 0; k < spatial; ++k)  // PyTorch's rule: below the stride or the dilation
    if (output_padding[k] < 0 || (output_padding[k] >= stride[k] && output_padding[k] >= dilation[k])) return false;
  const auto sizes = tk::known_sizes(node->input(1));
  const auto groups = tk::known_int(node->input(6));
  return groups && *groups >= 1 && sizes && sizes->size() == spatial + 2 && (*sizes)[0] % *groups == 0 &&
         tk::is_float_of_rank_or_unknown(node->input(0), spatial + 2);
}
// Eval mode, its statistics, weight and bias known: folded into the convolution it follows, or
// else (DenseNet's, after a cat) run as a depthwise 1x1 convolution of its per-channel scale and
// shift, whose ReLU fusion takes as a post-op.
bool supports_batch_norm(const torch::jit::Node* node) {
  if (!tk::batch_norm_eval(node) || !tk::known_at_lowering(node->input(1)) || !tk::known_at_lowering(node->input(2))) return false;
  const torch::jit::Node* producer = node->input(0)->node();
  if (tk::is_any(producer, {"aten::conv1d", "aten::conv2d", "aten::conv3d"}) && node->input(0)->uses().size() == 1) {
    if (supports_conv(producer)) return true;  // folded into it
    // After a convolution TorchScript keeps (padding='same'): a step of its own, of its input's
    // rank; without example inputs that is not known, and only an image's (4) is assumed.
    const auto type = node->input(0)->type()->cast<c10::TensorType>();
    if (type && type->dim()) return *type->dim() >= 3 && *type->dim() <= 5;
    return tk::is(producer, "aten::conv2d");
  }
  const auto sizes = tk::float_sizes(node->input(0));  // [N, C, L], [N, C, H, W] or [N, C, T, H, W]
  return sizes && sizes->size() >= 3 && sizes->size() <= 5;
}
// avg_pool2d (avg_pool3d) as a depthwise convolution of weights 1 / (kh * kw): without ceil_mode
// or a divisor override, and with no padding or the padding counted (then the two are the same
// sum); the sizes known at lowering.
bool supports_avg_pool(const torch::jit::Node* node) {
  if (node->inputs().size() != 7 || !tk::constant_is(node->input(4), false) || !node->input(6)->type()->cast<c10::NoneType>()) return false;
  if (!tk::constant_is(node->input(5), true) && !tk::constant_ints_all(node->input(3), 0)) return false;
  const auto sizes = tk::float_sizes(node->input(0));
  return sizes && sizes->size() == tk::spatial_dims_of(node) + 2;
}
bool supports_relu(const torch::jit::Node* node) {  // any rank with known sizes (a transformer's feed-forward [N, T, C])
  return float_4d_or_unknown(node->input(0)) || tk::float_sizes(node->input(0)).has_value();
}
/// Whether `by` broadcasts onto `sizes` without changing them: of the same rank, each size equal
/// or 1 (Swin's relative position bias [1, heads, N, N] onto the scores [windows, heads, N, N]).
bool broadcasts_onto(const std::vector<std::int64_t>& by, const std::vector<std::int64_t>& sizes) {
  if (by.size() != sizes.size()) return false;
  for (std::size_t k = 0; k < by.size(); ++k)
    if (by[k] != sizes[k] && by[k] != 1) return false;
  return true;
}
bool supports_add(const torch::jit::Node* node) {  // two float tensors, sizes known, made at run time: one shape, or one broadcast
  if (node->inputs().size() != 3 || !tk::constant_is(node->input(2), c10::IValue(std::int64_t{1}))) return false;
  // Not a weight (ViT's `x + self.pos_embedding`): an add step reads two values of the region.
  if (tk::known_at_lowering(node->input(0)) || tk::known_at_lowering(node->input(1))) return false;
  const auto a = tk::float_sizes(node->input(0)), b = tk::float_sizes(node->input(1));
  return a && b && (*a == *b || broadcasts_onto(*b, *a) || broadcasts_onto(*a, *b));
}
bool supports_max_pool(const torch::jit::Node* node) {  // 2-d or 3-d; oneDNN's pooling has no dilation
  return node->inputs().size() == 6 && tk::constant_ints_all(node->input(4), 1) && float_of_op_rank_or_unknown(node);
}
// adaptive_avg_pool2d to 1x1 (adaptive_avg_pool3d to 1x1x1: a global pooling), or to a size that
// divides its input's known one (emit_adaptive_avg_pool: fixed windows, as avg_pool2d).
bool supports_adaptive_avg_pool(const torch::jit::Node* node) {
  return (tk::adaptive_pool_to_one(node) && float_of_op_rank_or_unknown(node)) || tk::adaptive_pool_window(node).has_value();
}
bool supports_activation(const torch::jit::Node* node) {
  return activation_of(node) && (float_4d_or_unknown(node->input(0)) || tk::float_sizes(node->input(0)).has_value());
}
bool supports_permute(const torch::jit::Node* node) {  // dims known at lowering (ConvNeXt's Permute reads self.dims)
  return tk::float_sizes(node->input(0)) && tk::known_at_lowering(node->input(1));
}
bool supports_layer_norm(const torch::jit::Node* node) {  // over the last dimension, weight and bias known
  const auto shape = tk::constant_ints(node->input(1));
  const auto sizes = tk::float_sizes(node->input(0));
  return node->inputs().size() == 6 && sizes && shape && *shape == std::vector<std::int64_t>{sizes->back()} &&
         tk::known_at_lowering(node->input(2)) && tk::known_at_lowering(node->input(3)) && tk::constant_of(node->input(4)).has_value();
}
bool supports_flatten(const torch::jit::Node* node) {
  return node->inputs().size() == 3 && tk::float_sizes(node->input(0)) && tk::constant_of(node->input(1)) && tk::constant_of(node->input(2));
}
bool supports_dropout(const torch::jit::Node* node) {  // eval mode: the identity
  return node->inputs().size() == 3 && tk::constant_is(node->input(2), false) && tk::float_sizes(node->input(0));
}
/// A linear with known weights; its bias known too, or a 1-d float tensor computed in the call
/// (Swin V2's qkv bias, cloned and its keys' part zeroed in every call).
bool supports_linear(const torch::jit::Node* node) {
  if (node->inputs().size() != 3 || !tk::float_sizes(node->input(0)) || !tk::known_at_lowering(node->input(1))) return false;
  if (tk::known_at_lowering(node->input(2))) return true;
  const auto bias = tk::float_sizes(node->input(2));
  return bias && bias->size() == 1;
}
/// The one node that reads `node`'s output (once), or nullptr.
const torch::jit::Node* only_reader(const torch::jit::Node* node) {
  const auto& uses = node->output()->uses();
  return node->outputs().size() == 1 && uses.size() == 1 ? uses[0].user : nullptr;
}
/// A norm, clamp_min or expand_as of F.normalize: the pattern's div reads it.
bool supports_normalize_part(const torch::jit::Node* node) { return normalize_nodes(node).has_value(); }
bool supports_mul(const torch::jit::Node* node) {
  if (node->inputs().size() != 2) return false;
  // Times a tensor known at lowering (a layer scale), broadcast to the other operand's shape.
  for (int side = 0; side < 2; ++side) {
    const torch::jit::Value* constant = node->input(1 - side);
    const auto sizes = tk::float_sizes(node->input(side));
    if (!sizes || !tk::is_tensor(constant) || !tk::known_at_lowering(constant)) continue;
    const auto by = tk::known_sizes(constant);
    if (!by || by->size() > sizes->size()) continue;
    bool fits = true;
    for (std::size_t k = 0; k < by->size(); ++k) {
      const std::int64_t b = (*by)[by->size() - 1 - k], a = (*sizes)[sizes->size() - 1 - k];
      fits = fits && (b == a || b == 1);
    }
    if (fits) return true;
  }
  // Two float tensors of known sizes, one broadcast to the other's (a squeeze-excitation's
  // [N, C, 1, 1] scale; Swin V2's logit scale, [heads, 1, 1] computed in the call, times its
  // [windows, heads, n, n] attention).
  if (!tk::is_tensor(node->input(1))) return false;
  const auto a = tk::float_sizes(node->input(0)), b = tk::float_sizes(node->input(1));
  return a && b && (broadcasts_to(*b, *a) || broadcasts_to(*a, *b));
}
// Float tensors of 2 to 5 dimensions, one rank, along the channels (dimension 1), listed in the
// region (a text CNN's [N, C] features; an image's [N, C, H, W]).
bool supports_cat(const torch::jit::Node* node) {
  const torch::jit::Node* list = node->input(0)->node();
  if (node->inputs().size() != 2 || list->kind() != c10::prim::ListConstruct || node->input(0)->uses().size() != 1) return false;
  if (tk::constant_int(node->input(1)) != std::optional<std::int64_t>(1) || list->inputs().empty()) return false;
  const auto first = tk::known_sizes(list->input(0));
  return first && std::all_of(list->inputs().begin(), list->inputs().end(), [&](const torch::jit::Value* v) {
           const auto sizes = tk::known_sizes(v);
           return sizes && sizes->size() == first->size() && sizes->size() >= 2 && sizes->size() <= 5 &&
                  tk::is_float_of_rank_or_unknown(v, sizes->size());
         });
}
bool supports_list(const torch::jit::Node* node) {  // the tensors of a cat it takes
  return node->output()->uses().size() == 1 && OnednnBackend::supports(node->output()->uses()[0].user);
}

bool supports_known_scalar(const torch::jit::Node* node);

/// Whether the non-tensor `value`, known at lowering, is computed by nodes onednn takes alone
/// (constants aside), so that it is computed inside the region of the step that reads it: a
/// number some other node also reads (ViT's `h` in `torch._assert(h == ...)`) stays in
/// TorchScript, and so does the step that reads it. (While a number's readers are being checked,
/// their own numbers are taken as computable: the check would come back to the same nodes.)
bool computed_in_region(const torch::jit::Value* value) {
  thread_local int checking = 0;
  if (checking) return true;
  ++checking;
  bool inside = true;
  std::vector<const torch::jit::Value*> pending{value};
  while (inside && !pending.empty()) {
    const torch::jit::Node* node = pending.back()->node();
    pending.pop_back();
    if (node->kind() == c10::prim::Constant) continue;
    if (tk::is_any(node, {"aten::size", "aten::dim"})) {  // of a tensor: the region's or one it makes
      inside = supports_known_scalar(node);
      continue;
    }
    inside = supports_known_scalar(node);
    for (const torch::jit::Value* input : node->inputs()) pending.push_back(input);
  }
  --checking;
  return inside;
}
/// A number or list known at lowering (toolkit/known_values.hpp: sizes and what is computed from
/// them) that only steps onednn takes read: evaluated at preprocess, so it never leaves a region.
bool supports_known_scalar(const torch::jit::Node* node) {
  bool read = false;
  for (const torch::jit::Value* output : node->outputs()) {
    if (!tk::known_value(output)) return false;  // a tensor only as a traced graph's number (known_number_tensor)
    for (const torch::jit::Use& use : output->uses()) {
      // A reader in an `if`'s or a loop's block stays in TorchScript, and so must what it reads.
      if (use.user->owningBlock() != node->owningBlock() || !OnednnBackend::supports(use.user)) return false;
      read = true;
    }
  }
  return read;
}
bool supports_reshape(const torch::jit::Node* node) {
  return node->inputs().size() == 2 && reshape_sizes(node).has_value() && computed_in_region(node->input(1));
}
bool supports_transpose(const torch::jit::Node* node) {
  const auto sizes = tk::float_sizes(node->input(0));
  return node->inputs().size() == 3 && sizes && tk::known_int(node->input(1)) && tk::known_int(node->input(2)) &&
         computed_in_region(node->input(1)) && computed_in_region(node->input(2));
}
bool supports_contiguous(const torch::jit::Node* node) {  // into contiguous_format (0)
  return node->inputs().size() == 2 && tk::float_sizes(node->input(0)) && tk::known_int(node->input(1)) == std::optional<std::int64_t>(0) &&
         computed_in_region(node->input(1));
}
bool supports_chunk(const torch::jit::Node* node) {
  return chunk_parts(node).has_value() && computed_in_region(node->input(1)) && computed_in_region(node->input(2));
}
bool supports_select(const torch::jit::Node* node) {  // select(x, dim, index): a part of one dimension, that dimension dropped
  const auto sizes = tk::float_sizes(node->input(0));
  if (node->inputs().size() != 3 || !sizes || sizes->empty()) return false;
  const auto dim = tk::known_int(node->input(1)), index = tk::known_int(node->input(2));
  if (!dim || !index) return false;
  const auto rank = static_cast<std::int64_t>(sizes->size());
  const std::int64_t d = *dim < 0 ? *dim + rank : *dim;
  if (d < 0 || d >= rank) return false;
  const std::int64_t size = (*sizes)[static_cast<std::size_t>(d)];
  return *index >= -size && *index < size && computed_in_region(node->input(1)) && computed_in_region(node->input(2));
}
bool supports_unpack(const torch::jit::Node* node) {  // a chunk's parts, or numbers known at lowering
  const torch::jit::Node* from = node->input(0)->node();
  return tk::is(from, "aten::chunk") ? supports_chunk(from) : supports_known_scalar(node);
}
bool supports_matmul(const torch::jit::Node* node) {  // same batch sizes, no broadcasting
  const auto a = tk::float_sizes(node->input(0), 4), b = tk::float_sizes(node->input(1), 4);
  if (!a || !b || a->size() != b->size() || a->size() < 2 || (*a)[a->size() - 1] != (*b)[b->size() - 2]) return false;
  return std::equal(a->begin(), a->end() - 2, b->begin());
}
bool supports_softmax(const torch::jit::Node* node) {  // softmax(x, dim, dtype=None)
  return node->inputs().size() == 3 && tk::float_sizes(node->input(0)) && tk::known_int(node->input(1)) &&
         computed_in_region(node->input(1)) && node->input(2)->type()->kind() == c10::TypeKind::NoneType;
}
/// A tensor times or divided by a number known at lowering (attention's scale).
bool supports_scale_by(const torch::jit::Node* node) {
  return node->inputs().size() == 2 && tk::is_tensor(node->input(0)) && !tk::is_tensor(node->input(1)) &&
         tk::float_sizes(node->input(0)) && tk::known_number(node->input(1)) && computed_in_region(node->input(1)) &&
         (!tk::is(node, "aten::div") || *tk::known_number(node->input(1)) != 0);
}
/// mean(x, [2, 3], keepdim, dtype=None) of a 4-d float tensor, or over [2, 3, 4] of a 5-d one (S3D's
/// last): a global average pooling.
bool supports_mean(const torch::jit::Node* node) {
  if (node->inputs().size() != 4 || !sizes_4d_or_5d(node->input(0))) return false;
  const auto rank = static_cast<std::int64_t>(tk::float_sizes(node->input(0))->size());
  const auto dims = tk::constant_ints(node->input(1));
  if (!dims || static_cast<std::int64_t>(dims->size()) != rank - 2) return false;
  std::vector<std::int64_t> axes;
  for (const std::int64_t d : *dims) axes.push_back(d < 0 ? d + rank : d);
  std::sort(axes.begin(), axes.end());
  std::vector<std::int64_t> spatial;
  for (std::int64_t d = 2; d < rank; ++d) spatial.push_back(d);
  return axes == spatial && tk::constant_of(node->input(2)).has_value() && node->input(3)->type()->kind() == c10::TypeKind::NoneType;
}
bool supports_mul_any(const torch::jit::Node* node) { return supports_known_scalar(node) || supports_mul(node) || supports_scale_by(node); }
bool supports_div_any(const torch::jit::Node* node) {
  if (!tk::is_tensor(node->output())) return supports_known_scalar(node);
  return supports_scale_by(node) || normalize_eps(node).has_value();
}
bool supports_add_any(const torch::jit::Node* node) { return supports_known_scalar(node) || supports_add(node); }
bool supports_list_any(const torch::jit::Node* node) { return supports_known_scalar(node) || supports_list(node); }

}  // namespace

bool is_zero_state(const torch::jit::Value* value) {
  const torch::jit::Node* node = value->node();
  const auto none = [&](std::size_t k) { return node->input(k)->type()->kind() == c10::TypeKind::NoneType; };
  if (tk::is(node, "aten::new_zeros") && node->inputs().size() == 6)  // the rewritten call's: dtype, layout, device, pin_memory the input's
    return none(2) && none(3) && none(4) && none(5);
  // A trace's (nn.LSTM's forward traced): aten::zeros(size, dtype, layout, device, pin_memory) of
  // float32 (or the default), strided, on the CPU.
  if (!tk::is(node, "aten::zeros") || node->inputs().size() != 5) return false;
  const auto is = [&](std::size_t k, const c10::IValue& expected) { return none(k) || tk::constant_is(node->input(k), expected); };
  const auto device = tk::constant_of(node->input(3));
  return is(1, static_cast<std::int64_t>(at::kFloat)) && is(2, static_cast<std::int64_t>(at::kStrided)) && is(4, false) &&
         (none(3) || (device && device->isDevice() && device->toDevice().is_cpu()));
}

bool supports_zero_state(const torch::jit::Node* node) {
  // Read by recurrent layers alone (directly, or through an LSTM's list of states), which take it
  // as no state given: nothing is made.
  const torch::jit::Value* sizes = node->input(tk::is(node, "aten::new_zeros") ? 1 : 0);
  if (!is_zero_state(node->output()) || !tk::known_ints(sizes) || !computed_in_region(sizes)) return false;
  return std::all_of(node->output()->uses().begin(), node->output()->uses().end(), [](const torch::jit::Use& use) {
    const torch::jit::Node* user = use.user;
    if (user->kind() == c10::prim::ListConstruct && user->output()->uses().size() == 1) user = user->output()->uses()[0].user;
    return tk::is_any(user, {"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"}) && supports_recurrent(user);
  });
}

bool supports_recurrent(const torch::jit::Node* node) {
  // lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train, bidirectional,
  // batch_first), gru.input, rnn_tanh.input and rnn_relu.input(input, hx, params[], ...); not the
  // .data overloads (a PackedSequence's).
  const bool lstm = tk::is(node, "aten::lstm");
  // Where our recurrence kernel cannot run (no AVX2 and FMA, or oneDNN capped below AVX2), oneDNN's
  // RNN primitives run on its reference driver, slower than ATen's LSTM: 80 ms against TorchScript's
  // 36 for a 2-layer bidirectional LSTM over 300 steps at one thread (docs/onednn.md).
  if (!own_avx2_kernels_allowed(nullptr)) return false;
  const auto is_list = [](const torch::jit::Value* v) { return v->type()->kind() == c10::TypeKind::ListType; };
  if (node->inputs().size() != 9 || !is_list(node->input(2)) || lstm != is_list(node->input(1))) return false;
  for (std::size_t k = 1; k < node->outputs().size(); ++k)
    if (node->output(k)->hasUses()) return false;  // the final states: not made by a step
  const auto flag = [&](std::size_t k) -> std::optional<bool> {
    const auto known = tk::constant_of(node->input(k));
    return known && known->isBool() ? std::optional<bool>(known->toBool()) : std::nullopt;
  };
  const auto layers = tk::known_int(node->input(4));
  const auto biases = flag(3), train = flag(6), bidirectional = flag(7), batch_first = flag(8);
  if (!layers || *layers < 1 || !biases || train != std::optional<bool>(false) || !bidirectional || !batch_first) return false;
  const auto x = tk::float_sizes(node->input(0));
  const torch::jit::Node* params = node->input(2)->node();
  if (!x || x->size() != 3 || params->kind() != c10::prim::ListConstruct) return false;
  const std::int64_t directions = *bidirectional ? 2 : 1, gates = lstm ? 4 : tk::is(node, "aten::gru") ? 3 : 1;
  const std::size_t per = *biases ? 4 : 2;
  if (params->inputs().size() != static_cast<std::size_t>(*layers * directions) * per) return false;
  const auto on_state = tk::float_sizes(params->input(1));
  if (!on_state || on_state->size() != 2 || (*on_state)[0] != gates * (*on_state)[1]) return false;
  const std::int64_t hidden = (*on_state)[1];
  const auto has = [&](std::size_t k, const std::vector<std::int64_t>& sizes) {
    return tk::known_at_lowering(params->input(k)) && tk::float_sizes(params->input(k)) == std::optional<std::vector<std::int64_t>>(sizes);
  };
  for (std::int64_t layer = 0; layer < *layers; ++layer)
    for (std::int64_t direction = 0; direction < directions; ++direction) {
      const std::size_t first = static_cast<std::size_t>(layer * directions + direction) * per;
      const std::int64_t features = layer == 0 ? (*x)[2] : directions * hidden;
      if (!has(first, {gates * hidden, features}) || !has(first + 1, {gates * hidden, hidden})) return false;
      if (*biases && (!has(first + 2, {gates * hidden}) || !has(first + 3, {gates * hidden}))) return false;
    }
  std::vector<const torch::jit::Value*> states{node->input(1)};
  if (lstm) {
    const torch::jit::Node* list = node->input(1)->node();
    if (list->kind() != c10::prim::ListConstruct || list->inputs().size() != 2) return false;
    states = {list->input(0), list->input(1)};
  }
  // Both given, or both zeros (the call gave none).
  if (lstm && is_zero_state(states[0]) != is_zero_state(states[1])) return false;
  const std::vector<std::int64_t> state{*layers * directions, *batch_first ? (*x)[0] : (*x)[1], hidden};
  return std::all_of(states.begin(), states.end(), [&](const torch::jit::Value* v) { return tk::float_sizes(v) == std::optional(state); });
}

std::optional<std::vector<std::int64_t>> reduced_dims(const torch::jit::Node* node) {
  const auto sizes = tk::known_sizes(node->input(0));
  const auto keepdim = tk::constant_of(node->input(2));
  if (!sizes || !keepdim || !keepdim->isBool()) return std::nullopt;
  std::optional<std::vector<std::int64_t>> dims = tk::is(node, "aten::amax") ? tk::constant_ints(node->input(1)) : std::nullopt;
  if (!tk::is(node, "aten::amax"))
    if (const auto dim = tk::known_int(node->input(1))) dims = std::vector<std::int64_t>{*dim};
  const auto rank = static_cast<std::int64_t>(sizes->size());
  if (!dims || dims->empty()) return std::nullopt;  // amax over [] is over every dimension
  for (std::int64_t& dim : *dims) {
    if (dim < -rank || dim >= rank) return std::nullopt;
    if (dim < 0) dim += rank;
  }
  std::sort(dims->begin(), dims->end());
  if (std::adjacent_find(dims->begin(), dims->end()) != dims->end()) return std::nullopt;
  if (!keepdim->toBool() && static_cast<std::int64_t>(dims->size()) == rank) return std::nullopt;
  return dims;
}

std::optional<resampling_parameters> resampling_of(const torch::jit::Node* node) {
  // F.interpolate's: upsample_nearest2d.vec(input, output_size?, scale_factors?),
  // upsample_bilinear2d.vec(input, output_size?, align_corners, scale_factors?).
  const bool nearest = tk::is(node, "aten::upsample_nearest2d") && node->inputs().size() == 3;
  const bool bilinear = tk::is(node, "aten::upsample_bilinear2d") && node->inputs().size() == 4;
  if ((!nearest && !bilinear) || !float_4d_or_unknown(node->input(0))) return std::nullopt;
  if (bilinear && !tk::constant_is(node->input(2), false)) return std::nullopt;  // align_corners=True: another mapping
  const torch::jit::Value* scales = node->input(nearest ? 2 : 3);
  resampling_parameters made{nearest ? "nearest" : "bilinear", {}, {}};
  // Sizes: constants, or computed in the region from its values' sizes (`size=skip.shape[2:]`: the
  // step's size program computes them again for other shapes).
  if (const auto sizes = tk::known_ints(node->input(1)); sizes && scales->type()->kind() == c10::TypeKind::NoneType &&
                                                         (tk::constant_ints(node->input(1)) || computed_in_region(node->input(1)))) {
    if (sizes->size() != 2 || (*sizes)[0] < 1 || (*sizes)[1] < 1) return std::nullopt;
    made.sizes = *sizes;
    return made;
  }
  // A constant list, or a list construct of constants (`[scale_factor for _ in range(2)]` folded).
  std::vector<double> listed;
  if (const c10::optional<c10::IValue> factors = torch::jit::toIValue(scales); factors && factors->isDoubleList()) {
    listed = factors->toDoubleVector();
  } else if (scales->node()->kind() == c10::prim::ListConstruct) {
    for (const torch::jit::Value* element : scales->node()->inputs()) {
      const c10::optional<c10::IValue> factor = torch::jit::toIValue(element);
      if (!factor || !factor->isDouble()) return std::nullopt;
      listed.push_back(factor->toDouble());
    }
  } else {
    return std::nullopt;
  }
  if (node->input(1)->type()->kind() != c10::TypeKind::NoneType) return std::nullopt;
  for (const double factor : listed) {
    // Whole factors only: PyTorch maps a fractional one by the factor given, oneDNN by the sizes' ratio.
    if (factor < 1 || factor > 64 || factor != std::floor(factor)) return std::nullopt;
    made.scales.push_back(static_cast<std::int64_t>(factor));
  }
  if (made.scales.size() != 2) return std::nullopt;
  return made;
}

std::optional<std::array<const torch::jit::Node*, 4>> normalize_nodes(const torch::jit::Node* node) {
  const torch::jit::Node* div = node;
  for (int hops = 0; hops < 3 && div && !tk::is(div, "aten::div"); ++hops) div = only_reader(div);
  if (!div || !tk::is(div, "aten::div") || !normalize_eps(div)) return std::nullopt;
  const torch::jit::Node* expand = div->input(1)->node();
  const torch::jit::Node* clamp = expand->input(0)->node();
  return std::array<const torch::jit::Node*, 4>{div, expand, clamp, clamp->input(0)->node()};
}

bool broadcasts_to(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to) {
  if (from.size() > to.size()) return false;
  for (std::size_t k = 1; k <= from.size(); ++k)
    if (from[from.size() - k] != 1 && from[from.size() - k] != to[to.size() - k]) return false;
  return true;
}

std::optional<double> normalize_eps(const torch::jit::Node* node) {
  if (!tk::is(node, "aten::div") || node->inputs().size() != 2 || !tk::is_tensor(node->input(1))) return std::nullopt;
  const torch::jit::Value* x = node->input(0);
  const auto sizes = tk::float_sizes(x);
  const torch::jit::Node* expand = node->input(1)->node();
  if (!sizes || !tk::is(expand, "aten::expand_as") || expand->input(1) != x || expand->output()->uses().size() != 1) return std::nullopt;
  const torch::jit::Node* clamp = expand->input(0)->node();
  if (!tk::is(clamp, "aten::clamp_min") || clamp->inputs().size() != 2 || clamp->output()->uses().size() != 1) return std::nullopt;
  const std::optional<double> eps = tk::constant_double(clamp->input(1));
  const torch::jit::Node* norm = clamp->input(0)->node();
  // norm.ScalarOpt_dim(self, p, dim, keepdim): the 2-norm over the last dimension, kept.
  if (!eps || *eps < 0 || !tk::is(norm, "aten::norm") || norm->inputs().size() != 4 || norm->input(0) != x ||
      norm->output()->uses().size() != 1 || tk::constant_double(norm->input(1)) != std::optional<double>(2.0))
    return std::nullopt;
  const auto keepdim = tk::constant_of(norm->input(3));
  if (!keepdim || !keepdim->isBool() || !keepdim->toBool()) return std::nullopt;
  const auto dim = tk::known_ints(norm->input(2));  // [-1], a prim::ListConstruct the region computes
  if (!computed_in_region(norm->input(2))) return std::nullopt;
  const auto last = static_cast<std::int64_t>(sizes->size()) - 1;
  if (!dim || dim->size() != 1 || ((*dim)[0] != -1 && (*dim)[0] != last)) return std::nullopt;
  return eps;
}

const torch_delegate::toolkit::op_table<step_builder>& onednn_ops() {
  static const tk::op_table<step_builder> table = [] {
    tk::op_table<step_builder> ops;
    ops.add({"aten::conv1d", "aten::conv2d", "aten::conv3d"}, supports_conv, emit_convolution)
        .add({"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}, supports_conv_transpose, emit_deconvolution)
        .add({"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"}, supports_recurrent, emit_recurrent)
        .add({"aten::new_zeros", "aten::zeros"}, supports_zero_state, emit_nothing)  // a recurrent layer's initial state when none is given
        .add({"aten::amax", "aten::max"}, supports_reduce_max, emit_reduce)
        .add(
            {"aten::upsample_nearest2d", "aten::upsample_bilinear2d"},
            [](const torch::jit::Node* node) { return resampling_of(node).has_value(); }, emit_resample)
        .add("aten::batch_norm", supports_batch_norm, emit_batch_norm)
        .add({"aten::relu", "aten::relu_"}, supports_relu, emit_relu)
        .add("aten::add", supports_add_any, emit_add)
        .add({"aten::max_pool2d", "aten::max_pool3d"}, supports_max_pool, emit_max_pool)
        .add({"aten::avg_pool2d", "aten::avg_pool3d"}, supports_avg_pool, emit_avg_pool)
        .add({"aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d"}, supports_adaptive_avg_pool, emit_adaptive_avg_pool)
        .add({"aten::sigmoid", "aten::silu", "aten::hardswish", "aten::hardsigmoid", "aten::gelu", "aten::relu6", "aten::hardtanh",
              "aten::clamp"},
             supports_activation, emit_activation)
        .add("aten::permute", supports_permute, emit_permute)
        .add("aten::layer_norm", supports_layer_norm, emit_layer_norm)
        .add("aten::flatten", supports_flatten, emit_flatten)
        .add("aten::dropout", supports_dropout, emit_dropout)
        .add("aten::linear", supports_linear, emit_linear)
        .add("aten::mul", supports_mul_any, emit_mul)
        .add("aten::div", supports_div_any, emit_div)
        .add({"aten::norm", "aten::clamp_min", "aten::expand_as"}, supports_normalize_part, emit_nothing)  // read by the div
        .add("aten::cat", supports_cat, emit_cat)
        .add("prim::ListConstruct", supports_list_any, emit_nothing)  // read by its cat, or known at lowering
        // The views and attention (payload version 3), and the numbers their sizes are computed from.
        .add({"aten::view", "aten::reshape"}, supports_reshape, emit_reshape)
        .add("aten::transpose", supports_transpose, emit_transpose)
        .add("aten::contiguous", supports_contiguous, emit_contiguous)
        .add("aten::chunk", supports_chunk, emit_nothing)  // its prim::ListUnpack makes the parts
        .add("aten::select", supports_select, emit_select)
        .add("prim::ListUnpack", supports_unpack, emit_unpack)
        .add("aten::matmul", supports_matmul, emit_matmul)
        .add("aten::softmax", supports_softmax, emit_softmax)
        .add("aten::mean", supports_mean, emit_mean)
        .add({"aten::size", "aten::dim", "aten::floordiv", "aten::sub", "aten::__getitem__", "aten::len", "aten::Int", "aten::Float",
              "aten::list", "aten::slice", "aten::sqrt", "aten::neg", "prim::NumToTensor", "aten::floor_divide", "aten::pow",
              "aten::remainder"},
             supports_known_scalar, emit_nothing);
    return ops;
  }();
  return table;
}

bool OnednnBackend::supports(const torch::jit::Node* node) {
  // A step that makes a tensor from weights alone (Swin V2's `cpb_mlp(self.relative_coords_table)`:
  // Linears on a buffer) reads no value a region makes or takes: a computation on constants, left
  // to TorchScript. (A layer scale, `self.gamma * x`, reads one.)
  const auto tensor = [](const torch::jit::Value* v) { return tk::is_tensor(v); };
  const bool makes_tensor = std::any_of(node->outputs().begin(), node->outputs().end(), tensor);
  const bool reads_tensor = std::any_of(node->inputs().begin(), node->inputs().end(), tensor);
  if (makes_tensor && reads_tensor &&
      std::all_of(node->inputs().begin(), node->inputs().end(),
                  [&](const torch::jit::Value* v) { return !tensor(v) || tk::known_at_lowering(v); }))
    return false;
  return onednn_ops().supports(node);
}

bool OnednnBackend::is_available() {
  // TD_ONEDNN_UNAVAILABLE: behave as a LibTorch built without oneDNN (the fallback's tests).
  declare_runtime_switches();
  static const bool available = tk::available_unless("TD_ONEDNN_UNAVAILABLE", [] { return at::hasMKLDNN(); });
  return available;
}

}  // namespace onednn_delegate
