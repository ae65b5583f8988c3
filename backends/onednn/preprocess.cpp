// Preprocess: a region's graph -> payload version 3 (payload_records.hpp), one step per node
// through the op table's emitters (support.cpp), unfused (fusion.cpp decides at compile), weights
// as named data keyed by content with the BatchNorm after a convolution folded into its weight
// and bias. Built on the toolkit's payload builder, folding and pooling arguments.
#include "internal.hpp"

#include "toolkit/folding.hpp"
#include "toolkit/graph.hpp"
#include "toolkit/known_values.hpp"
#include "toolkit/payload_builder.hpp"
#include "toolkit/size_programs.hpp"
#include "toolkit/support_rules.hpp"

#include <ATen/ATen.h>

namespace onednn_delegate {

namespace tk = torch_delegate::toolkit;

/// The steps made so far, over the toolkit's value ids (numbered in definition order), folded
/// nodes and named data.
struct step_builder {
  tk::payload_builder base;
  std::vector<step_record> steps;

  std::int64_t define(const torch::jit::Value* value) { return base.next_id(value); }
  /// A step of `op` reading `inputs` and making `made` (defined after its inputs are read).
  step_record& add(const char* op, std::vector<std::int64_t> inputs, const torch::jit::Value* made) {
    step_record& step = steps.emplace_back();
    step.op = op;
    step.inputs = std::move(inputs);
    step.output = define(made);
    return step;
  }
  step_record& add_unary(const char* op, const torch::jit::Node* node) { return add(op, {base.id(node->input(0))}, node->output()); }
  /// A step making a value the graph does not name (its id returned through step.output).
  step_record& add_unnamed(const char* op, std::vector<std::int64_t> inputs) {
    step_record& step = steps.emplace_back();
    step.op = op;
    step.inputs = std::move(inputs);
    step.output = base.unnamed_id();
    return step;
  }
  const torch_delegate::method_to_lower& region() const { return base.region(); }
};

/// What `known` holds; when the region's graph does not determine it (a number or list made
/// outside the region reaches it as an input), the node's error says so.
template <class T>
T known_in_region(step_builder& builder, const torch::jit::Node* node, std::optional<T> known, const char* what) {
  if (!known)
    builder.base.reject(node, std::string(what) + " is not known at lowering inside this region (it comes from outside it)");
  return std::move(*known);
}

/// The program of a size list the graph computes (a view's), over the sizes of the values this
/// region holds; nothing where a size comes from elsewhere (the region then serves the example's
/// shapes only).
std::optional<std::vector<std::int64_t>> program_of(step_builder& builder, const torch::jit::Value* list) {
  return tk::size_list_program(list, [&](const torch::jit::Value* value) -> std::optional<std::int64_t> {
    return builder.base.has_id(value) ? std::optional<std::int64_t>(builder.base.id(value)) : std::nullopt;
  });
}

/// The program of `value`'s sizes without dimension `dropped` (-1: none), after `ones` leading ones.
std::vector<std::int64_t> sizes_program(std::int64_t value, std::size_t rank, std::int64_t dropped = -1, std::size_t ones = 0) {
  std::vector<tk::size_part> parts(ones, tk::size_part{-1, 1});
  for (std::size_t k = 0; k < rank; ++k)
    if (static_cast<std::int64_t>(k) != dropped) parts.push_back({value, static_cast<std::int64_t>(k)});
  return tk::size_list_program(parts);
}

/// A slice's check: the size of the sliced dimension it was made for.
std::vector<std::int64_t> sliced_size_program(std::int64_t size) { return tk::size_list_program({tk::size_part{-1, size}}); }

void emit_convolution(step_builder& builder, const torch::jit::Node* node) {
  const tk::folded_conv2d conv = tk::read_conv(builder.region(), node, builder.base.result_check(), builder.base.folded(), "onednn", true);
  step_record& step = builder.add("convolution", {builder.base.id(node->input(0))}, conv.output);
  step.convolution = convolution_parameters{conv.stride, conv.padding, conv.dilation, conv.groups};
  step.weight = builder.base.store_constant(conv.weight);
  step.bias = builder.base.store_constant(conv.bias);
}

// An LSTM's, GRU's or RNN's layers (supports_recurrent), a step each, the last making the node's output:
// each layer's weights side by side per direction, its biases (zeros without), in PyTorch's order.
void emit_recurrent(step_builder& builder, const torch::jit::Node* node) {
  const bool lstm = tk::is(node, "aten::lstm");
  const bool biases = tk::constant_is(node->input(3), true);
  const std::int64_t layers = *tk::known_int(node->input(4));
  const std::int64_t directions = tk::constant_is(node->input(7), true) ? 2 : 1;
  const bool batch_first = tk::constant_is(node->input(8), true);
  const torch::jit::Node* params = node->input(2)->node();
  std::vector<std::int64_t> states;  // none where they are zeros (is_zero_state)
  if (lstm) {
    for (const torch::jit::Value* state : node->input(1)->node()->inputs())
      if (!is_zero_state(state)) states.push_back(builder.base.id(state));
  } else if (!is_zero_state(node->input(1))) {
    states.push_back(builder.base.id(node->input(1)));
  }
  const std::size_t per = biases ? 4 : 2;
  std::int64_t x = builder.base.id(node->input(0));
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    std::vector<at::Tensor> weights, bias;
    std::int64_t hidden = 0;
    for (std::int64_t direction = 0; direction < directions; ++direction) {
      const std::size_t first = static_cast<std::size_t>(layer * directions + direction) * per;
      const at::Tensor on_input = builder.region().tensor_of(params->input(first));
      const at::Tensor on_state = builder.region().tensor_of(params->input(first + 1));
      hidden = on_state.size(1);
      weights.push_back(at::cat({on_input, on_state}, 1));
      bias.push_back(
          biases ? at::stack({builder.region().tensor_of(params->input(first + 2)), builder.region().tensor_of(params->input(first + 3))})
                 : at::zeros({2, on_state.size(0)}));
    }
    std::vector<std::int64_t> inputs{x};
    inputs.insert(inputs.end(), states.begin(), states.end());
    step_record& step = layer + 1 == layers ? builder.add("recurrent", std::move(inputs), node->output(0))
                                            : builder.add_unnamed("recurrent", std::move(inputs));
    const char* kind = lstm ? "lstm" : tk::is(node, "aten::gru") ? "gru" : tk::is(node, "aten::rnn_relu") ? "rnn_relu" : "rnn_tanh";
    step.recurrent = recurrent_parameters{kind, layer, layers, hidden, batch_first};
    step.weight = builder.base.store_constant(at::stack(weights).contiguous());
    step.bias = builder.base.store_constant(at::stack(bias).contiguous());
    x = step.output;
  }
}

// A transposed convolution: its parameters as conv_transpose2d takes them, its weight as PyTorch's
// [I, O / groups, kh, kw], a zero bias where it has none.
void emit_deconvolution(step_builder& builder, const torch::jit::Node* node) {
  const at::Tensor weight = builder.region().argument<at::Tensor>(node, "weight").contiguous();
  const auto bias = builder.region().argument<std::optional<at::Tensor>>(node, "bias");
  const std::int64_t groups = *tk::known_int(node->input(6));
  step_record& step = builder.add_unary("deconvolution", node);
  step.convolution = convolution_parameters{*tk::constant_ints(node->input(3)), *tk::constant_ints(node->input(4)),
                                            *tk::constant_ints(node->input(7)), groups};
  if (!tk::constant_ints_all(node->input(5), 0)) step.output_padding = *tk::constant_ints(node->input(5));
  step.weight = builder.base.store_constant(weight);
  step.bias = builder.base.store_constant(bias ? bias->contiguous() : at::zeros({weight.size(1) * groups}));
}

// amax or max.dim (its values; support.cpp took it where nothing reads its indices).
void emit_reduce(step_builder& builder, const torch::jit::Node* node) {
  const std::optional<std::vector<std::int64_t>> dims = reduced_dims(node);
  if (!dims) builder.base.reject(node, "a max over dimensions not known at lowering");
  step_record& step = builder.add("reduce", {builder.base.id(node->input(0))}, node->output(0));
  step.reduction = reduction_parameters{"max", *dims, tk::constant_of(node->input(2))->toBool()};
}

// F.interpolate's nearest or bilinear upsampling (support.cpp's resampling_of took it).
void emit_resample(step_builder& builder, const torch::jit::Node* node) {
  const std::optional<resampling_parameters> resampling = resampling_of(node);
  if (!resampling) builder.base.reject(node, "an upsampling whose sizes or factors are not known at lowering");
  step_record& step = builder.add_unary("resample", node);
  step.resampling = *resampling;
  // Sizes computed from the region's values' sizes: their program, run again for other shapes.
  if (!resampling->sizes.empty() && !tk::constant_ints(node->input(1))) {
    step.size_program = program_of(builder, node->input(1));
    if (!step.size_program) builder.base.reject(node, "an upsampling to sizes the region cannot compute again for other shapes");
  }
}

/// A depthwise convolution step (groups = channels) over the 4-d (5-d) value `input` with `weight`
/// [C, 1, kh, kw] ([C, 1, kt, kh, kw]) and `bias` [C]: how a BatchNorm that is not folded and an
/// avg_pool2d run.
void emit_depthwise(step_builder& builder, const torch::jit::Value* input, const torch::jit::Value* made, const at::Tensor& weight,
                    const at::Tensor& bias, std::vector<std::int64_t> stride, std::vector<std::int64_t> padding) {
  step_record& step = builder.add("convolution", {builder.base.id(input)}, made);
  std::vector<std::int64_t> dilation(stride.size(), 1);
  step.convolution = convolution_parameters{std::move(stride), std::move(padding), std::move(dilation), weight.size(0)};
  step.weight = builder.base.store_constant(weight.contiguous());
  step.bias = builder.base.store_constant(bias.contiguous());
}

// Those after a convolution are folded into it (read_conv2d); the others (DenseNet's, after a
// cat) are y = x * scale + shift per channel: a depthwise 1x1 convolution.
void emit_batch_norm(step_builder& builder, const torch::jit::Node* node) {
  const auto [scale, shift] = tk::batch_norm_affine(builder.region(), node, "onednn");
  // Its input's rank; 4 when not known (support.cpp took such a one only after a conv2d).
  const auto type = node->input(0)->type()->cast<c10::TensorType>();
  const std::size_t rank = type && type->dim() ? *type->dim() : 4;
  if (rank < 3 || rank > 5) builder.base.reject(node, "a batch_norm of a " + std::to_string(rank) + "-d input (expected 3-d to 5-d)");
  const std::size_t spatial = rank - 2;
  std::vector<std::int64_t> weight(spatial + 2, 1);
  weight[0] = scale.size(0);
  emit_depthwise(builder, node->input(0), node->output(), scale.reshape(weight), shift, std::vector<std::int64_t>(spatial, 1),
                 std::vector<std::int64_t>(spatial, 0));
}

/// The mean of each `kernel` window of `node`'s input (4-d or 5-d, its channels known at
/// lowering): a depthwise convolution of weights 1 / (kh * kw) (1 / (kt * kh * kw)); avg_pool2d's,
/// avg_pool3d's and the fixed-window adaptive pool's.
void emit_window_mean(step_builder& builder, const torch::jit::Node* node, const std::vector<std::int64_t>& kernel,
                      std::vector<std::int64_t> stride, std::vector<std::int64_t> padding) {
  const std::int64_t channels = (*tk::float_sizes(node->input(0)))[1];
  std::vector<std::int64_t> sizes{channels, 1};
  std::int64_t window = 1;
  for (const std::int64_t k : kernel) sizes.push_back(k), window *= k;
  const at::Tensor weight = at::full(sizes, 1.0 / static_cast<double>(window));
  emit_depthwise(builder, node->input(0), node->output(), weight, at::zeros({channels}), std::move(stride), std::move(padding));
}

// support.cpp took only the avg_pool2d (avg_pool3d) whose sums agree with the depthwise
// convolution's: no ceil_mode, no divisor, padding none or counted.
void emit_avg_pool(step_builder& builder, const torch::jit::Node* node) {
  const tk::pool_arguments read = tk::read_pool(builder.region(), node, "onednn");
  emit_window_mean(builder, node, read.kernel, read.stride, read.padding);
}

void emit_relu(step_builder& builder, const torch::jit::Node* node) { builder.add_unary("relu", node); }

void emit_add(step_builder& builder, const torch::jit::Node* node) {
  if (tk::known_value(node->output())) return;  // a number known at lowering
  // The full-shape operand first: oneDNN broadcasts the second (supports_add took one of them
  // broadcasting onto the other).
  const auto a = tk::known_sizes(node->input(0)), b = tk::known_sizes(node->input(1));
  bool swap = false;
  for (std::size_t k = 0; a && b && k < a->size() && k < b->size(); ++k) swap = swap || (*a)[k] < (*b)[k];
  builder.add("add", {builder.base.id(node->input(swap ? 1 : 0)), builder.base.id(node->input(swap ? 0 : 1))}, node->output());
}

// max_pool3d is a step of its own (an older build refuses it: "unknown op 'max_pool3d'").
void emit_max_pool(step_builder& builder, const torch::jit::Node* node) {
  const tk::pool_arguments read = tk::read_pool(builder.region(), node, "onednn");
  const char* op = tk::spatial_dims_of(node) == 3 ? "max_pool3d" : "max_pool2d";
  builder.add_unary(op, node).pooling = pooling_parameters{read.kernel, read.stride, read.padding, read.ceil_mode};
}

// To 1x1 (1x1x1): oneDNN's global average pooling. To a size that divides the input's: windows of
// {H / oh, W / ow} at that stride, as avg_pool2d (to the input's own size: windows of one, a copy).
void emit_adaptive_avg_pool(step_builder& builder, const torch::jit::Node* node) {
  if (tk::adaptive_pool_to_one(node)) {
    builder.add_unary(tk::spatial_dims_of(node) == 3 ? "adaptive_avg_pool3d" : "adaptive_avg_pool2d", node);
    return;
  }
  const std::vector<std::int64_t> window = *tk::adaptive_pool_window(node);
  emit_window_mean(builder, node, window, window, {0, 0});
  // Its windows are the adaptive pool's at this input size only: the step is made for it.
  const std::vector<std::int64_t> sizes = *tk::known_sizes(node->input(0));
  std::vector<tk::size_part> spatial;
  for (std::size_t k = 2; k < sizes.size(); ++k) spatial.push_back({-1, sizes[k]});
  builder.steps.back().size_program = tk::size_list_program(spatial);
}

void emit_activation(step_builder& builder, const torch::jit::Node* node) {
  builder.add_unary("activation", node).activation = activation_of(node).value();
}

void emit_permute(step_builder& builder, const torch::jit::Node* node) {
  const auto dims = builder.region().argument<std::vector<std::int64_t>>(node, "dims");
  if (dims.size() != tk::known_sizes(node->input(0))->size()) builder.base.reject(node, "permute's dims do not match its input's rank");
  builder.add_unary("permute", node).permute_dims = dims;
}

void emit_layer_norm(step_builder& builder, const torch::jit::Node* node) {
  const torch_delegate::method_to_lower& region = builder.region();
  const std::int64_t channels = tk::known_sizes(node->input(0))->back();
  const auto weight = region.argument<std::optional<at::Tensor>>(node, "weight");
  const auto bias = region.argument<std::optional<at::Tensor>>(node, "bias");
  step_record& step = builder.add_unary("layer_norm", node);
  step.layer_norm_eps = region.argument<double>(node, "eps");
  step.weight = builder.base.store_constant(weight ? *weight : at::ones({channels}));
  step.bias = builder.base.store_constant(bias ? *bias : at::zeros({channels}));
}

void emit_flatten(step_builder& builder, const torch::jit::Node* node) {
  const torch_delegate::method_to_lower& region = builder.region();
  builder.add_unary("flatten", node).flatten =
      flatten_parameters{region.argument<std::int64_t>(node, "start_dim"), region.argument<std::int64_t>(node, "end_dim")};
}

void emit_dropout(step_builder& builder, const torch::jit::Node* node) {  // eval mode: the output is the input
  builder.base.set_id(node->output(), builder.base.id(node->input(0)));
}

void emit_linear(step_builder& builder, const torch::jit::Node* node) {
  const at::Tensor weight = builder.region().argument<at::Tensor>(node, "weight");
  if (weight.dim() != 2) builder.base.reject(node, "a linear's weight must be 2-d");
  if (!tk::known_at_lowering(node->input(2))) {  // a bias computed in the call: the step's second input
    const auto sizes = tk::known_sizes(node->input(2));
    if (!sizes || *sizes != std::vector<std::int64_t>{weight.size(0)})
      builder.base.reject(node, "a linear's bias computed in the call must have the weight's " + std::to_string(weight.size(0)) +
                                    " output features");
    builder.add("linear", {builder.base.id(node->input(0)), builder.base.id(node->input(2))}, node->output()).weight =
        builder.base.store_constant(weight);
    return;
  }
  const auto bias = builder.region().argument<std::optional<at::Tensor>>(node, "bias");
  step_record& step = builder.add_unary("linear", node);
  step.weight = builder.base.store_constant(weight);
  step.bias = builder.base.store_constant(bias ? *bias : at::zeros({weight.size(0)}));
}

void emit_mul(step_builder& builder, const torch::jit::Node* node) {
  if (tk::known_value(node->output())) return;  // a number known at lowering
  if (!tk::is_tensor(node->input(1))) {  // times a number: attention's scale
    builder.add_unary("scale_by", node).factor = known_in_region(builder, node, tk::known_number(node->input(1)), "the factor");
    return;
  }
  const bool first_known = tk::known_at_lowering(node->input(0)), second_known = tk::known_at_lowering(node->input(1));
  if (first_known != second_known) {  // times a constant: a scale
    const int side = second_known ? 0 : 1;
    const at::Tensor by = builder.region().argument<at::Tensor>(node, side == 0 ? "other" : "self");
    builder.add("scale", {builder.base.id(node->input(side))}, node->output()).weight = builder.base.store_constant(by);
    return;
  }
  // The full-shape operand first: oneDNN broadcasts the second, given with as many dimensions
  // (leading ones: a reshape, a view).
  const auto a = tk::known_sizes(node->input(0)), b = tk::known_sizes(node->input(1));
  if (!a || !b) builder.base.reject(node, "a mul of two tensors needs their sizes");
  const bool swap = !broadcasts_to(*b, *a);
  const std::vector<std::int64_t>& full = swap ? *b : *a;
  std::vector<std::int64_t> by = swap ? *a : *b;
  std::int64_t second = builder.base.id(node->input(swap ? 0 : 1));
  if (by.size() < full.size()) {
    const std::size_t ones = full.size() - by.size(), rank = by.size();
    by.insert(by.begin(), ones, 1);
    step_record& widened = builder.add_unnamed("reshape", {second});
    widened.reshape_sizes = by;
    widened.size_program = sizes_program(second, rank, -1, ones);
    second = widened.output;
  }
  builder.add("mul", {builder.base.id(node->input(swap ? 1 : 0)), second}, node->output());
}

void emit_cat(step_builder& builder, const torch::jit::Node* node) {
  std::vector<std::int64_t> inputs;
  for (const torch::jit::Value* input : node->input(0)->node()->inputs()) inputs.push_back(builder.base.id(input));
  builder.add("cat", std::move(inputs), node->output());
}

void emit_div(step_builder& builder, const torch::jit::Node* node) {  // by a number: times its inverse
  if (tk::known_value(node->output())) return;  // a number known at lowering
  if (const std::optional<double> eps = normalize_eps(node)) {  // F.normalize(x, dim=-1): its norm, clamp_min, expand_as emit nothing
    builder.add_unary("normalize", node).factor = *eps;
    return;
  }
  builder.add_unary("scale_by", node).factor = 1.0 / known_in_region(builder, node, tk::known_number(node->input(1)), "the divisor");
}

void emit_reshape(step_builder& builder, const torch::jit::Node* node) {
  std::optional<std::vector<std::int64_t>> program = node->inputs().size() == 2 ? program_of(builder, node->input(1)) : std::nullopt;
  step_record& step = builder.add_unary("reshape", node);
  step.reshape_sizes = known_in_region(builder, node, reshape_sizes(node), "the sizes");
  step.size_program = std::move(program);
}

void emit_transpose(step_builder& builder, const torch::jit::Node* node) {  // a permute of two dimensions
  const auto rank = static_cast<std::int64_t>(tk::known_sizes(node->input(0))->size());
  std::int64_t a = known_in_region(builder, node, tk::known_int(node->input(1)), "dim0"),
               b = known_in_region(builder, node, tk::known_int(node->input(2)), "dim1");
  a = a < 0 ? a + rank : a, b = b < 0 ? b + rank : b;
  if (a < 0 || a >= rank || b < 0 || b >= rank) builder.base.reject(node, "a transpose's dimensions are out of range");
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (std::int64_t k = 0; k < rank; ++k) dims[static_cast<std::size_t>(k)] = k;
  std::swap(dims[static_cast<std::size_t>(a)], dims[static_cast<std::size_t>(b)]);
  builder.add_unary("permute", node).permute_dims = dims;
}

void emit_contiguous(step_builder& builder, const torch::jit::Node* node) { builder.add_unary("contiguous", node); }

void emit_unpack(step_builder& builder, const torch::jit::Node* node) {
  const torch::jit::Node* chunk = node->input(0)->node();
  if (!tk::is(chunk, "aten::chunk")) return;  // numbers known at lowering
  const chunk_split split = known_in_region(builder, chunk, chunk_parts(chunk), "the chunk's parts");
  const std::int64_t from = builder.base.id(chunk->input(0));
  const std::int64_t size = (*tk::known_sizes(chunk->input(0)))[static_cast<std::size_t>(split.dim)];
  for (std::size_t k = 0; k < split.parts.size(); ++k) {
    step_record& part = builder.add("slice", {from}, node->output(k));
    part.slice = slice_parameters{split.dim, split.parts[k].first, split.parts[k].second};
    part.size_program = sliced_size_program(size);  // the parts are of this size's chunks
  }
}

/// select(x, dim, index): the slice [index, index + 1) along dim, then a view without dim.
void emit_select(step_builder& builder, const torch::jit::Node* node) {
  std::vector<std::int64_t> sizes = *tk::known_sizes(node->input(0));
  const auto rank = static_cast<std::int64_t>(sizes.size());
  std::int64_t dim = known_in_region(builder, node, tk::known_int(node->input(1)), "dim");
  dim = dim < 0 ? dim + rank : dim;
  std::int64_t index = known_in_region(builder, node, tk::known_int(node->input(2)), "index");
  index = index < 0 ? index + sizes[static_cast<std::size_t>(dim)] : index;
  const bool from_end = known_in_region(builder, node, tk::known_int(node->input(2)), "index") < 0;
  const std::int64_t source = builder.base.id(node->input(0));
  const std::int64_t part = builder.add_unnamed("slice", {source}).output;
  builder.steps.back().slice = slice_parameters{dim, index, 1};
  // x[:, 0] serves any size of that dimension; x[:, -1] the example's only (its index is from the end).
  builder.steps.back().size_program = from_end ? sliced_size_program(sizes[static_cast<std::size_t>(dim)]) : sizes_program(source, 0);
  sizes.erase(sizes.begin() + dim);
  step_record& view = builder.add("reshape", {part}, node->output());
  view.reshape_sizes = sizes;
  view.size_program = sizes_program(source, static_cast<std::size_t>(rank), dim);
}

void emit_matmul(step_builder& builder, const torch::jit::Node* node) {
  builder.add("matmul", {builder.base.id(node->input(0)), builder.base.id(node->input(1))}, node->output());
}

void emit_softmax(step_builder& builder, const torch::jit::Node* node) {
  const auto rank = static_cast<std::int64_t>(tk::known_sizes(node->input(0))->size());
  const std::int64_t dim = known_in_region(builder, node, tk::known_int(node->input(1)), "dim");
  builder.add_unary("softmax", node).softmax_dim = dim < 0 ? dim + rank : dim;
}

void emit_mean(step_builder& builder, const torch::jit::Node* node) {  // over H and W (T, H and W): a global average pooling
  const bool keepdim = known_in_region(builder, node, tk::known_value(node->input(2)), "keepdim").toBool();
  const std::vector<std::int64_t> sizes = *tk::known_sizes(node->input(0));
  const char* op = sizes.size() == 5 ? "adaptive_avg_pool3d" : "adaptive_avg_pool2d";
  if (keepdim) {
    builder.add_unary(op, node);
    return;
  }
  const std::int64_t pooled = builder.add_unnamed(op, {builder.base.id(node->input(0))}).output;
  step_record& view = builder.add("reshape", {pooled}, node->output());
  view.reshape_sizes = std::vector<std::int64_t>{sizes[0], sizes[1]};
  view.size_program = tk::size_list_program({tk::size_part{builder.base.id(node->input(0)), 0}, tk::size_part{builder.base.id(node->input(0)), 1}});
}

void emit_nothing(step_builder&, const torch::jit::Node*) {}

torch_delegate::preprocess_result<region_payload> OnednnBackend::preprocess(const torch_delegate::method_to_lower& region) {
  const torch::jit::Graph& graph = *region.graph();
  step_builder builder{tk::payload_builder(region, "onednn"), {}};
  for (const torch::jit::Value* input : tk::region_inputs(graph)) builder.define(input);
  const std::int64_t inputs = builder.base.ids_given();
  for (const torch::jit::Node* node : graph.nodes())
    if (!builder.base.skips(node) && !onednn_ops().emit(builder, node)) builder.base.reject_unsupported(node);
  region_payload payload{inputs, builder.base.ids_given(), std::move(builder.steps), {}};
  for (const torch::jit::Value* result : tk::region_results(graph)) {
    const std::int64_t index = builder.base.id(result);
    if (index < inputs) region.reject(result->node(), "onednn: a region that returns its input is not supported");
    payload.outputs.push_back(index);
  }
  return {std::move(payload), {}, builder.base.take_named_data()};
}

}  // namespace onednn_delegate
