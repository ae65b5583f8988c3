// onednn's payload (payload version 6): what preprocess writes and compile reads, as Boost.Hana
// structs saved as tuples of their fields. Each step names its op, the value ids it reads and the
// one it makes, and its parameters in the record of its op family; no positional integers.
// Version 3 added the fields after `bias` (the views and attention's steps), version 4 the size
// programs, version 5 the reductions and resamplings, version 6 the recurrent layers; versions 5, 4,
// 3, 2 (without them) and 1 (positional ints per op, doubles as bit patterns) are still read:
// payload.cpp converts them.
#pragma once

#include <boost/hana/adapt_struct.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onednn_delegate {

/// A convolution's geometry (the weight's sizes come with the weight).
struct convolution_parameters {
  std::vector<std::int64_t> stride, padding, dilation;  // two each: height, width (3-d: three, time first)
  std::int64_t groups = 1;
};
/// A max_pool2d's (max_pool3d's) window (PyTorch's meaning of each).
struct pooling_parameters {
  std::vector<std::int64_t> kernel, stride, padding;  // two each (max_pool3d: three)
  bool ceil_mode = false;
};
/// An activation oneDNN runs as an eltwise: "sigmoid", "silu", "hardswish", "hardsigmoid",
/// "gelu_erf", "gelu_tanh" or "clip" (hardtanh, relu6, clamp: between low and high).
struct activation_parameters {
  std::string kind;
  double low = 0, high = 0;
};
/// A flatten's dimensions (negative: from the end).
struct flatten_parameters {
  std::int64_t start_dim = 0, end_dim = -1;
};

/// A reduction over dimensions (not negative) of its input: "max" (amax, max over a dimension's
/// values), keeping them as ones or not.
struct reduction_parameters {
  std::string kind;
  std::vector<std::int64_t> dims;
  bool keepdim = false;
};

/// An upsampling of a 4-d tensor's height and width: "nearest" or "bilinear" (align_corners False),
/// by whole `scales` (the output's size the input's times them) or to fixed `sizes`.
struct resampling_parameters {
  std::string mode;
  std::vector<std::int64_t> scales;
  std::vector<std::int64_t> sizes;
};

/// One layer of an nn.LSTM, nn.GRU or nn.RNN ("lstm", "gru", "rnn_tanh", "rnn_relu": PyTorch's
/// formulas, its gates in PyTorch's order): layer `layer` of `layers`, `hidden` features a direction, over [batch, time, features]
/// when `batch_first`, else [time, batch, features]. Its weight is [directions, gates * hidden,
/// features + hidden] (weight_ih and weight_hh side by side, each direction's), its bias
/// [directions, 2, gates * hidden] (bias_ih, bias_hh; zeros without biases). It reads the layer's
/// input and the initial states, [layers * directions, batch, hidden] each (h, then c for an LSTM;
/// none: zeros), and makes the output sequence, [.., .., directions * hidden].
struct recurrent_parameters {
  std::string kind;
  std::int64_t layer = 0, layers = 1, hidden = 0;
  bool batch_first = false;
};
/// The gates of a recurrent layer of kind `kind`: 4 (lstm), 3 (gru), 1 (rnn_tanh, rnn_relu), 0
/// for a kind this build does not know.
inline std::int64_t recurrent_gates(const std::string& kind) {
  return kind == "lstm" ? 4 : kind == "gru" ? 3 : kind == "rnn_tanh" || kind == "rnn_relu" ? 1 : 0;
}

/// A slice of one dimension: `length` indices from `start` (a chunk's part).
struct slice_parameters {
  std::int64_t dim = 0, start = 0, length = 0;
};

/// One step: its op ("convolution", "relu", "add", "max_pool2d", "adaptive_avg_pool2d",
/// "activation", "mul", "cat", "permute", "layer_norm", "linear", "scale", "flatten"; since
/// version 3 "reshape", "slice", "contiguous", "matmul", "softmax", "scale_by"; then "normalize",
/// "max_pool3d", "adaptive_avg_pool3d", and convolutions with three values of each: 3-d; then
/// "deconvolution", a transposed convolution: its convolution parameters as conv_transpose2d's,
/// no output padding, its weight [I, O / groups, kh, kw] as PyTorch's; since version 5 "reduce"
/// and "resample"; since version 6 "recurrent", and deconvolutions of 1 and 3 spatial dimensions
/// and with output padding),
/// the value ids it
/// reads (mul: the full-shape operand first; cat: in order; matmul: the left operand first) and
/// the one it makes, the parameters of its family (absent for the others), and the named-data
/// keys of its weight and bias (convolution, linear, layer_norm; scale: its factor as the weight).
/// A transpose is a permute. A linear whose bias is computed in the call (Swin V2's, its keys'
/// part zeroed in every call) reads it as its second input, its bias key empty; a build before
/// that refuses such a payload at compile ("a linear that reads 2 values").
struct step_record {
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
  // version 3
  std::optional<std::vector<std::int64_t>> reshape_sizes;  // reshape: the sizes it makes (all known)
  std::optional<slice_parameters> slice;
  std::optional<std::int64_t> softmax_dim;                  // softmax: the dimension (not negative)
  std::optional<double> factor;                             // scale_by: times this number; normalize: the least norm (eps)
  // version 4
  /// How the step's sizes follow from the sizes of the region's values (toolkit/size_programs.hpp),
  /// so that a plan for other input shapes computes them again. A reshape: its sizes (reshape_sizes
  /// holds them at the example's shapes). A resample to sizes (since version 6): the output's height
  /// and width, where they are computed from the region's values' sizes (`size=skip.shape[2:]`;
  /// resampling's sizes hold them at the example's shapes). A slice: one size, the size of the sliced dimension it was
  /// made for (a chunk's part), or none (any size). Another step: the trailing sizes of its input it
  /// was made for (an adaptive pool's fixed windows: the spatial sizes), which a plan checks.
  /// Absent: a reshape or slice holds only the example's sizes, and its region serves the
  /// example's shapes (the input specs) alone; another step serves any.
  std::optional<std::vector<std::int64_t>> size_program;
  // version 5
  std::optional<reduction_parameters> reduction;    // "reduce": what it computes over which dimensions
  std::optional<resampling_parameters> resampling;  // "resample": F.interpolate's mode and sizes
  // version 6
  std::optional<recurrent_parameters> recurrent;  // "recurrent": one layer of an LSTM or GRU
  /// "deconvolution": PyTorch's output_padding, one a spatial dimension (absent: none).
  std::optional<std::vector<std::int64_t>> output_padding;
};

/// The payload of a region: how many inputs it takes (value ids 0..inputs-1), how many values it
/// has, its steps in order (unfused: fusion is decided at compile, fusion.cpp), the value ids it returns.
struct region_payload {
  std::int64_t inputs = 0;
  std::int64_t values = 0;
  std::vector<step_record> steps;
  std::vector<std::int64_t> outputs;
};

}  // namespace onednn_delegate

BOOST_HANA_ADAPT_STRUCT(onednn_delegate::convolution_parameters, stride, padding, dilation, groups);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::pooling_parameters, kernel, stride, padding, ceil_mode);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::activation_parameters, kind, low, high);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::flatten_parameters, start_dim, end_dim);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::slice_parameters, dim, start, length);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::reduction_parameters, kind, dims, keepdim);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::resampling_parameters, mode, scales, sizes);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::recurrent_parameters, kind, layer, layers, hidden, batch_first);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::step_record, op, inputs, output, convolution, pooling, activation, permute_dims, flatten,
                        layer_norm_eps, weight, bias, reshape_sizes, slice, softmax_dim, factor, size_program, reduction, resampling,
                        recurrent, output_padding);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::region_payload, inputs, values, steps, outputs);
