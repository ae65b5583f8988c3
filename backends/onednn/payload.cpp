// onednn's payload on the way in: the caster that reads version 6 (payload_records.hpp), version 5
// (without recurrent layers), version 4 (without reductions), version 3 (without size programs) and
// version 2 (without version 3's steps) as version 6, and version 1
// (positional ints, converted here: a relu flagged on a convolution or an add becomes
// the relu step it was, fusion.cpp folds it again), and the checks compile runs on every record
// (a corrupted or foreign payload is an error, never a crash).
#include "internal.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <bit>

namespace onednn_delegate::format1 {
/// Version 1's step: an op code, then per op its value ids (inputs, then output) and parameters.
struct step {
  std::int64_t op = 0;
  std::vector<std::int64_t> ints;
  std::string weight, bias;
};
struct region {
  std::int64_t inputs = 0, values = 0;
  std::vector<step> steps;
  std::vector<std::int64_t> outputs;
};
}  // namespace onednn_delegate::format1

namespace onednn_delegate::format2 {
/// Version 2's step: version 3's without the fields version 3 added after `bias`.
struct step {
  std::string op;
  std::vector<std::int64_t> inputs;
  std::int64_t output = 0;
  std::optional<convolution_parameters> convolution;
  std::optional<pooling_parameters> pooling;
  std::optional<activation_parameters> activation;
  std::optional<std::vector<std::int64_t>> permute_dims;
  std::optional<flatten_parameters> flatten;
  std::optional<double> layer_norm_eps;
  std::string weight;
  std::string bias;
};
struct region {
  std::int64_t inputs = 0, values = 0;
  std::vector<step> steps;
  std::vector<std::int64_t> outputs;
};
}  // namespace onednn_delegate::format2

namespace onednn_delegate::format3 {
/// Version 3's step: version 4's without size_program.
struct step {
  std::string op;
  std::vector<std::int64_t> inputs;
  std::int64_t output = 0;
  std::optional<convolution_parameters> convolution;
  std::optional<pooling_parameters> pooling;
  std::optional<activation_parameters> activation;
  std::optional<std::vector<std::int64_t>> permute_dims;
  std::optional<flatten_parameters> flatten;
  std::optional<double> layer_norm_eps;
  std::string weight;
  std::string bias;
  std::optional<std::vector<std::int64_t>> reshape_sizes;
  std::optional<slice_parameters> slice;
  std::optional<std::int64_t> softmax_dim;
  std::optional<double> factor;
};
struct region {
  std::int64_t inputs = 0, values = 0;
  std::vector<step> steps;
  std::vector<std::int64_t> outputs;
};
}  // namespace onednn_delegate::format3

namespace onednn_delegate::format4 {
/// Version 4's step: version 5's without reduction.
struct step {
  std::string op;
  std::vector<std::int64_t> inputs;
  std::int64_t output = 0;
  std::optional<convolution_parameters> convolution;
  std::optional<pooling_parameters> pooling;
  std::optional<activation_parameters> activation;
  std::optional<std::vector<std::int64_t>> permute_dims;
  std::optional<flatten_parameters> flatten;
  std::optional<double> layer_norm_eps;
  std::string weight;
  std::string bias;
  std::optional<std::vector<std::int64_t>> reshape_sizes;
  std::optional<slice_parameters> slice;
  std::optional<std::int64_t> softmax_dim;
  std::optional<double> factor;
  std::optional<std::vector<std::int64_t>> size_program;
};
struct region {
  std::int64_t inputs = 0, values = 0;
  std::vector<step> steps;
  std::vector<std::int64_t> outputs;
};
}  // namespace onednn_delegate::format4

namespace onednn_delegate::format5 {
/// Version 5's step: version 6's without recurrent.
struct step : format4::step {
  std::optional<reduction_parameters> reduction;
  std::optional<resampling_parameters> resampling;
};
struct region {
  std::int64_t inputs = 0, values = 0;
  std::vector<step> steps;
  std::vector<std::int64_t> outputs;
};
}  // namespace onednn_delegate::format5

BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format1::step, op, ints, weight, bias);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format1::region, inputs, values, steps, outputs);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format2::step, op, inputs, output, convolution, pooling, activation, permute_dims,
                        flatten, layer_norm_eps, weight, bias);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format2::region, inputs, values, steps, outputs);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format3::step, op, inputs, output, convolution, pooling, activation, permute_dims,
                        flatten, layer_norm_eps, weight, bias, reshape_sizes, slice, softmax_dim, factor);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format3::region, inputs, values, steps, outputs);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format4::step, op, inputs, output, convolution, pooling, activation, permute_dims, flatten,
                        layer_norm_eps, weight, bias, reshape_sizes, slice, softmax_dim, factor, size_program);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format4::region, inputs, values, steps, outputs);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format5::step, op, inputs, output, convolution, pooling, activation, permute_dims, flatten,
                        layer_norm_eps, weight, bias, reshape_sizes, slice, softmax_dim, factor, size_program, reduction, resampling);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::format5::region, inputs, values, steps, outputs);

namespace onednn_delegate {

namespace {
using version6_caster = torch_delegate::ivalue_caster<torch_delegate::detail::hana_fields_t<region_payload>>;
using format5_caster = torch_delegate::ivalue_caster<format5::region>;
using format4_caster = torch_delegate::ivalue_caster<format4::region>;
using format3_caster = torch_delegate::ivalue_caster<format3::region>;
using format2_caster = torch_delegate::ivalue_caster<format2::region>;
using format1_caster = torch_delegate::ivalue_caster<format1::region>;

/// Version 1's parameter counts per op code (a cat: its inputs and output, 2 or more; a permute:
/// 3 to 8), and the activation kinds (version 1 codes them by their index here).
constexpr std::int64_t format1_sizes[] = {10, 2, 4, 9, 2, 5, 3, -1, -1, 3, 2, 2, 4};
constexpr const char* activation_kinds[] = {"sigmoid", "silu", "hardswish", "hardsigmoid", "clip", "gelu_erf", "gelu_tanh"};

[[noreturn]] void bad_payload(const std::string& why) { TORCH_CHECK(false, "onednn: ", why); }
}  // namespace

bool is_format1(const c10::IValue& value) {
  return !version6_caster::check(value) && !format5_caster::check(value) && !format4_caster::check(value) &&
         !format3_caster::check(value) && !format2_caster::check(value) && format1_caster::check(value);
}

bool is_format5(const c10::IValue& value) { return !version6_caster::check(value) && format5_caster::check(value); }

bool is_format4(const c10::IValue& value) {
  return !version6_caster::check(value) && !format5_caster::check(value) && format4_caster::check(value);
}

bool is_format3(const c10::IValue& value) {
  return !version6_caster::check(value) && !format5_caster::check(value) && !format4_caster::check(value) && format3_caster::check(value);
}

/// A version 5 payload as version 6: the same steps (it had no recurrent layers).
region_payload upgrade_format5(const c10::IValue& value) {
  format5::region old = format5_caster::load(value);
  region_payload payload{old.inputs, old.values, {}, std::move(old.outputs)};
  for (format5::step& step : old.steps)
    payload.steps.push_back({std::move(step.op),
                             std::move(step.inputs),
                             step.output,
                             std::move(step.convolution),
                             std::move(step.pooling),
                             std::move(step.activation),
                             std::move(step.permute_dims),
                             std::move(step.flatten),
                             step.layer_norm_eps,
                             std::move(step.weight),
                             std::move(step.bias),
                             std::move(step.reshape_sizes),
                             std::move(step.slice),
                             step.softmax_dim,
                             step.factor,
                             std::move(step.size_program),
                             std::move(step.reduction),
                             std::move(step.resampling),
                             std::nullopt,
                             std::nullopt});
  return payload;
}

/// A version 4 payload as version 6: the same steps (it had no reductions).
region_payload upgrade_format4(const c10::IValue& value) {
  format4::region old = format4_caster::load(value);
  region_payload payload{old.inputs, old.values, {}, std::move(old.outputs)};
  for (format4::step& step : old.steps)
    payload.steps.push_back({std::move(step.op),
                             std::move(step.inputs),
                             step.output,
                             std::move(step.convolution),
                             std::move(step.pooling),
                             std::move(step.activation),
                             std::move(step.permute_dims),
                             std::move(step.flatten),
                             step.layer_norm_eps,
                             std::move(step.weight),
                             std::move(step.bias),
                             std::move(step.reshape_sizes),
                             std::move(step.slice),
                             step.softmax_dim,
                             step.factor,
                             std::move(step.size_program),
                             std::nullopt,
                             std::nullopt,
                             std::nullopt,
                             std::nullopt});
  return payload;
}

/// A version 3 payload as version 6: the same steps, without size programs (each region serves
/// the shapes it was lowered for, as it did).
region_payload upgrade_format3(const c10::IValue& value) {
  format3::region old = format3_caster::load(value);
  region_payload payload{old.inputs, old.values, {}, std::move(old.outputs)};
  for (format3::step& step : old.steps)
    payload.steps.push_back({std::move(step.op),
                             std::move(step.inputs),
                             step.output,
                             std::move(step.convolution),
                             std::move(step.pooling),
                             std::move(step.activation),
                             std::move(step.permute_dims),
                             std::move(step.flatten),
                             step.layer_norm_eps,
                             std::move(step.weight),
                             std::move(step.bias),
                             std::move(step.reshape_sizes),
                             std::move(step.slice),
                             step.softmax_dim,
                             step.factor,
                             std::nullopt,
                             std::nullopt,
                             std::nullopt,
                             std::nullopt,
                             std::nullopt});
  return payload;
}

/// A version 2 payload as version 6: the same steps, the fields versions 3 and 4 added absent.
region_payload upgrade_format2(const c10::IValue& value) {
  format2::region old = format2_caster::load(value);
  region_payload payload{old.inputs, old.values, {}, std::move(old.outputs)};
  for (format2::step& step : old.steps) {
    step_record& record = payload.steps.emplace_back();
    record.op = std::move(step.op);
    record.inputs = std::move(step.inputs);
    record.output = step.output;
    record.convolution = std::move(step.convolution);
    record.pooling = std::move(step.pooling);
    record.activation = std::move(step.activation);
    record.permute_dims = std::move(step.permute_dims);
    record.flatten = std::move(step.flatten);
    record.layer_norm_eps = step.layer_norm_eps;
    record.weight = std::move(step.weight);
    record.bias = std::move(step.bias);
  }
  return payload;
}

region_payload upgrade_format1(const c10::IValue& value) {
  const format1::region old = format1_caster::load(value);
  region_payload payload{old.inputs, old.values, {}, old.outputs};
  const auto fresh = [&] { return payload.values++; };
  for (const format1::step& record : old.steps) {
    const std::int64_t op = record.op;
    const auto& p = record.ints;
    if (op < 0 || op >= static_cast<std::int64_t>(std::size(format1_sizes)))
      bad_payload("unknown step " + std::to_string(op) + " in a payload of version 1");
    const step_kind kind = static_cast<step_kind>(op);
    const std::int64_t expected = format1_sizes[op];
    const std::size_t size = p.size();
    const bool fits = kind == step_kind::cat ? size >= 2 : kind == step_kind::permute ? size >= 3 && size <= 8
                                                                                        : static_cast<std::int64_t>(size) == expected;
    if (!fits) bad_payload("a version 1 " + std::string(name_of(kind)) + " step of " + std::to_string(size) + " values");
    step_record step;
    step.op = name_of(kind);
    step.weight = record.weight;
    step.bias = record.bias;
    std::optional<std::int64_t> relu_to;  // a relu flagged on the step: the value it made
    switch (kind) {
      case step_kind::convolution:
        step.inputs = {p[0]};
        step.convolution = convolution_parameters{{p[2], p[3]}, {p[4], p[5]}, {p[6], p[7]}, p[8]};
        if (p[9]) relu_to = p[1];
        step.output = p[9] ? fresh() : p[1];
        break;
      case step_kind::add:
        step.inputs = {p[0], p[1]};
        if (p[3] & 1) relu_to = p[2];  // bit 2 (in place) was never read
        step.output = (p[3] & 1) ? fresh() : p[2];
        break;
      case step_kind::max_pool2d:
        step.inputs = {p[0]};
        step.output = p[1];
        step.pooling = pooling_parameters{{p[2], p[3]}, {p[4], p[5]}, {p[6], p[7]}, p[8] != 0};
        break;
      case step_kind::activation:
        if (p[2] < 0 || p[2] >= static_cast<std::int64_t>(std::size(activation_kinds)))
          bad_payload("unknown activation " + std::to_string(p[2]) + " in a payload of version 1");
        step.inputs = {p[0]};
        step.output = p[1];
        step.activation = activation_parameters{activation_kinds[p[2]], std::bit_cast<double>(p[3]), std::bit_cast<double>(p[4])};
        break;
      case step_kind::mul:
        step.inputs = {p[0], p[1]};
        step.output = p[2];
        break;
      case step_kind::cat:
        step.inputs.assign(p.begin(), p.end() - 1);
        step.output = p.back();
        break;
      case step_kind::permute:
        step.inputs = {p[0]};
        step.output = p[1];
        step.permute_dims = std::vector<std::int64_t>(p.begin() + 2, p.end());
        break;
      case step_kind::layer_norm:
        step.inputs = {p[0]};
        step.output = p[1];
        step.layer_norm_eps = std::bit_cast<double>(p[2]);
        break;
      case step_kind::flatten:
        step.inputs = {p[0]};
        step.output = p[1];
        step.flatten = flatten_parameters{p[2], p[3]};
        break;
      default:  // relu, adaptive_avg_pool2d, linear, scale: {input, output}
        step.inputs = {p[0]};
        step.output = p[1];
    }
    const std::int64_t made = step.output;
    payload.steps.push_back(std::move(step));
    if (relu_to) {
      step_record& relu = payload.steps.emplace_back();
      relu.op = "relu";
      relu.inputs = {made};
      relu.output = *relu_to;
    }
  }
  return payload;
}

std::vector<compiled_step> decode_steps(const region_payload& payload, std::string_view method) {
  const auto fail = [&](std::size_t index, const std::string& why) {
    TORCH_CHECK(false, "onednn: region ", method, ": step ", index, ": ", why);
  };
  // One value per spatial dimension (two; three for a 3-d step), none below `low`.
  const auto each = [](const std::vector<std::int64_t>& v, std::size_t count, std::int64_t low) {
    return v.size() == count && std::all_of(v.begin(), v.end(), [low](std::int64_t x) { return x >= low; });
  };
  std::vector<compiled_step> steps;
  for (std::size_t i = 0; i < payload.steps.size(); ++i) {
    const step_record& record = payload.steps[i];
    const std::optional<step_kind> kind = step_kind_named(record.op);
    if (!kind) fail(i, "unknown op '" + record.op + "' (a payload from a newer onednn backend?)");
    const std::size_t reads = record.inputs.size();
    // A linear reads its bias as a second value when it has no bias key (computed in the call).
    const bool two = *kind == step_kind::add || *kind == step_kind::mul || *kind == step_kind::matmul ||
                     (*kind == step_kind::linear && record.bias.empty());
    // A recurrent layer reads its input and its initial states, h (GRU), h and c (LSTM), or none (zeros).
    const std::size_t states = *kind != step_kind::recurrent || !record.recurrent ? 0 : record.recurrent->kind == "lstm" ? 2 : 1;
    if (*kind == step_kind::cat ? reads < 1 : reads != (two ? 2u : 1u) + states && !(states && reads == 1))
      fail(i, "a " + record.op + " that reads " + std::to_string(reads) + " values");
    for (const std::int64_t id : record.inputs)
      if (id < 0 || id >= payload.values) fail(i, "value " + std::to_string(id) + " out of range [0, " + std::to_string(payload.values) + ")");
    if (record.output < payload.inputs || record.output >= payload.values)
      fail(i, "it makes value " + std::to_string(record.output) + ", out of range [" + std::to_string(payload.inputs) + ", " +
                  std::to_string(payload.values) + ")");
    const auto& c = record.convolution;
    const auto& w = record.pooling;
    const std::size_t spatial = c && c->stride.size() >= 1 && c->stride.size() <= 3 ? c->stride.size() : 2;  // a convolution's: its weight's rank less 2
    const std::size_t window = *kind == step_kind::max_pool3d ? 3 : 2;
    const bool pooling = *kind == step_kind::max_pool2d || *kind == step_kind::max_pool3d;
    // A deconvolution's output padding: one a spatial dimension, each below its stride or its dilation (PyTorch's rule).
    const auto& out_pad = record.output_padding;
    const bool output_padding_fits =
        !out_pad || (c && out_pad->size() == c->stride.size() && c->dilation.size() == c->stride.size() && [&] {
          for (std::size_t k = 0; k < out_pad->size(); ++k)
            if ((*out_pad)[k] < 0 || ((*out_pad)[k] >= c->stride[k] && (*out_pad)[k] >= c->dilation[k])) return false;
          return true;
        }());
    const bool parameters_fit =
        *kind == step_kind::convolution || *kind == step_kind::deconvolution
            ? c && each(c->stride, spatial, 1) && each(c->padding, spatial, 0) && each(c->dilation, spatial, 1) && c->groups >= 1 &&
                  (*kind == step_kind::deconvolution ? output_padding_fits : !out_pad)
        : pooling                        ? w && each(w->kernel, window, 1) && each(w->stride, window, 1) && each(w->padding, window, 0)
        : *kind == step_kind::activation ? record.activation && std::find(std::begin(activation_kinds), std::end(activation_kinds),
                                                                          record.activation->kind) != std::end(activation_kinds)
        : *kind == step_kind::permute    ? record.permute_dims && !record.permute_dims->empty() && record.permute_dims->size() <= 6
        : *kind == step_kind::flatten    ? record.flatten.has_value()
        : *kind == step_kind::layer_norm ? record.layer_norm_eps.has_value()
        : *kind == step_kind::reshape
            ? record.reshape_sizes && !record.reshape_sizes->empty() && record.reshape_sizes->size() <= 6 &&
                  std::all_of(record.reshape_sizes->begin(), record.reshape_sizes->end(), [](std::int64_t size) { return size >= 0; })
        : *kind == step_kind::slice    ? record.slice && record.slice->dim >= 0 && record.slice->start >= 0 && record.slice->length >= 0
        : *kind == step_kind::softmax  ? record.softmax_dim && *record.softmax_dim >= 0
        : *kind == step_kind::scale_by ? record.factor.has_value()
        : *kind == step_kind::reduce   ? record.reduction && record.reduction->kind == "max" && !record.reduction->dims.empty() &&
                                           record.reduction->dims.size() <= 6 &&
                                           std::all_of(record.reduction->dims.begin(), record.reduction->dims.end(),
                                                       [](std::int64_t dim) { return dim >= 0 && dim < 6; })
        : *kind == step_kind::resample
            ? record.resampling && (record.resampling->mode == "nearest" || record.resampling->mode == "bilinear") &&
                  ((record.resampling->scales.size() == 2 && record.resampling->sizes.empty() &&
                    std::all_of(record.resampling->scales.begin(), record.resampling->scales.end(),
                                [](std::int64_t k) { return k >= 1; })) ||
                   (record.resampling->sizes.size() == 2 && record.resampling->scales.empty() &&
                    std::all_of(record.resampling->sizes.begin(), record.resampling->sizes.end(), [](std::int64_t k) { return k >= 1; })))
        : *kind == step_kind::recurrent
            ? record.recurrent && recurrent_gates(record.recurrent->kind) > 0 && record.recurrent->layers >= 1 &&
                  record.recurrent->layer >= 0 && record.recurrent->layer < record.recurrent->layers && record.recurrent->hidden >= 1
            : true;
    if (!parameters_fit) fail(i, "a " + record.op + " without its parameters");
    steps.push_back({record, *kind, {}, {}});
  }
  for (const std::int64_t index : payload.outputs)
    TORCH_CHECK(index >= payload.inputs && index < payload.values, "onednn: region ", method, ": output value ", index, " out of range");
  const std::vector<step_fusion> fusion = decide_fusions(steps, payload.values, payload.outputs);
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i].fusion = fusion[i];
  return steps;
}

}  // namespace onednn_delegate

bool torch_delegate::ivalue_caster<onednn_delegate::region_payload, void>::check(const c10::IValue& value) {
  return onednn_delegate::version6_caster::check(value) || onednn_delegate::format5_caster::check(value) ||
         onednn_delegate::format4_caster::check(value) || onednn_delegate::format3_caster::check(value) ||
         onednn_delegate::format2_caster::check(value) || onednn_delegate::format1_caster::check(value);
}

onednn_delegate::region_payload torch_delegate::ivalue_caster<onednn_delegate::region_payload, void>::load(const c10::IValue& value) {
  if (onednn_delegate::is_format1(value)) return onednn_delegate::upgrade_format1(value);
  if (onednn_delegate::is_format5(value)) return onednn_delegate::upgrade_format5(value);
  if (onednn_delegate::is_format4(value)) return onednn_delegate::upgrade_format4(value);
  if (onednn_delegate::is_format3(value)) return onednn_delegate::upgrade_format3(value);
  if (!onednn_delegate::version6_caster::check(value)) return onednn_delegate::upgrade_format2(value);
  auto [inputs, values, steps, outputs] = onednn_delegate::version6_caster::load(value);
  return {inputs, values, std::move(steps), std::move(outputs)};
}

c10::IValue torch_delegate::ivalue_caster<onednn_delegate::region_payload, void>::cast(onednn_delegate::region_payload payload) {
  return onednn_delegate::version6_caster::cast({payload.inputs, payload.values, std::move(payload.steps), std::move(payload.outputs)});
}
