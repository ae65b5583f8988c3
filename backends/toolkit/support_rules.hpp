// Support rules CNN backends share, and the normalisation of pooling arguments: the conv2d (and
// conv3d) form a backend can fold (weights known at lowering, numeric padding), an eval-mode
// BatchNorm, an adaptive average pool to 1x1 (1x1x1: a global pool) or to a size that divides its
// input's (a pool of fixed windows), and max/avg pooling's kernel, stride, padding and dilation
// read as one value per spatial dimension each (PyTorch accepts one for all, and an empty stride).
#pragma once

#include "graph.hpp"

#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_delegate::toolkit {

/// conv2d(input, weight, bias, stride, padding: int[], dilation, groups) with its weight and bias
/// known at lowering and numeric padding (padding='same' is the str overload, not this one).
/// The input's dtype and rank are the backend's own check.
inline bool conv2d_foldable(const torch::jit::Node* node) {
  return is(node, "aten::conv2d") && node->inputs().size() == 7 && is_list(node->input(4)) && known_at_lowering(node->input(1)) &&
         known_at_lowering(node->input(2));
}

/// conv2d_foldable, or the same form of conv1d (an audio model's [N, C, L]) or conv3d (a video
/// model's [N, C, T, H, W]).
inline bool conv_foldable(const torch::jit::Node* node) {
  return is_any(node, {"aten::conv1d", "aten::conv2d", "aten::conv3d"}) && node->inputs().size() == 7 && is_list(node->input(4)) &&
         known_at_lowering(node->input(1)) && known_at_lowering(node->input(2));
}

/// How many spatial dimensions a pooling or convolution node works on: 3 for the *3d ops, 1 for
/// conv1d, else 2.
inline std::size_t spatial_dims_of(const torch::jit::Node* node) {
  if (is(node, "aten::conv1d")) return 1;
  return is_any(node, {"aten::conv3d", "aten::max_pool3d", "aten::avg_pool3d", "aten::adaptive_avg_pool3d"}) ? 3 : 2;
}

/// batch_norm(input, weight, bias, running_mean, running_var, training=False, ...) with its
/// running statistics known at lowering.
inline bool batch_norm_eval(const torch::jit::Node* node) {
  return is(node, "aten::batch_norm") && node->inputs().size() == 9 && constant_is(node->input(5), false) &&
         known_at_lowering(node->input(3)) && known_at_lowering(node->input(4));
}

/// adaptive_avg_pool2d(input, [1, 1]), or adaptive_avg_pool3d(input, [1, 1, 1]): a global average pool.
inline bool adaptive_pool_to_one(const torch::jit::Node* node) {
  const bool three = is(node, "aten::adaptive_avg_pool3d");
  const auto size = three || is(node, "aten::adaptive_avg_pool2d") ? constant_ints(node->input(1)) : std::nullopt;
  return size && *size == std::vector<std::int64_t>(three ? 3 : 2, 1);
}

/// adaptive_avg_pool2d(input, [oh, ow]) whose input's height and width are known at lowering and
/// multiples of oh and ow (AlexNet's and VGG's pools to 6x6 and 7x7, often of a map that size):
/// its windows are then all {H / oh, W / ow} at that stride, an avg_pool2d without padding. The
/// window, or nullopt (another op, sizes unknown, an output size that does not divide them).
inline std::optional<std::vector<std::int64_t>> adaptive_pool_window(const torch::jit::Node* node) {
  const auto size = is(node, "aten::adaptive_avg_pool2d") ? constant_ints(node->input(1)) : std::nullopt;
  const auto sizes = size ? float_sizes(node->input(0)) : std::nullopt;
  if (!sizes || sizes->size() != 4 || size->size() != 2) return std::nullopt;
  std::vector<std::int64_t> window;
  for (std::size_t k = 0; k < 2; ++k) {
    const std::int64_t in = (*sizes)[k + 2], out = (*size)[k];
    if (out <= 0 || in <= 0 || in % out != 0) return std::nullopt;
    window.push_back(in / out);
  }
  return window;
}

/// The arguments of max_pool2d, avg_pool2d, max_pool3d or avg_pool3d, one value per spatial
/// dimension each (height, width; or time, height, width).
struct pool_arguments {
  std::vector<std::int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false;
};

/// `list` with `count` values: one value stands for all.
inline std::vector<std::int64_t> n_values(std::vector<std::int64_t> list, std::size_t count) {
  if (list.size() == 1) list.resize(count, list[0]);
  return list;
}

/// Reads a pooling node's arguments (max_pool2d, avg_pool2d, max_pool3d, avg_pool3d): one value
/// stands for all, an empty stride is the kernel size, and average pooling has dilation 1.
/// Rejects (naming `backend`) sizes that are not one per spatial dimension after that.
inline pool_arguments read_pool(const torch_delegate::method_to_lower& region, const torch::jit::Node* node, const std::string& backend) {
  const std::size_t n = spatial_dims_of(node);
  pool_arguments read;
  read.kernel = n_values(region.argument<std::vector<std::int64_t>>(node, "kernel_size"), n);
  const auto stride = region.argument<std::vector<std::int64_t>>(node, "stride");
  read.stride = stride.empty() ? read.kernel : n_values(stride, n);
  read.padding = n_values(region.argument<std::vector<std::int64_t>>(node, "padding"), n);
  read.dilation = is_any(node, {"aten::max_pool2d", "aten::max_pool3d"})
                      ? n_values(region.argument<std::vector<std::int64_t>>(node, "dilation"), n)
                      : std::vector<std::int64_t>(n, 1);
  read.ceil_mode = region.argument<bool>(node, "ceil_mode");
  if (read.kernel.size() != n || read.stride.size() != n || read.padding.size() != n || read.dilation.size() != n)
    region.reject(node, backend + ": " + node->kind().toUnqualString() + " with one or " + (n == 3 ? "three" : "two") +
                            " values each for kernel_size, stride, padding and dilation");
  return read;
}

/// The output size of a pooling or convolution window along one dimension, PyTorch's rule:
/// floor((size + before + after - dilation * (kernel - 1) - 1) / stride) + 1, or in ceil mode
/// rounded up, less one when the last window would start in the padding after the input.
/// (Below 1 when the input is too small for the window: the caller says so.)
inline std::int64_t window_output_size(std::int64_t size, std::int64_t before, std::int64_t after, std::int64_t kernel,
                                       std::int64_t stride, std::int64_t dilation, bool ceil_mode = false) {
  const std::int64_t span = size + before + after - dilation * (kernel - 1) - 1;
  if (!ceil_mode) return span / stride + 1;
  std::int64_t out = (span + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + before) --out;
  return out;
}

}  // namespace torch_delegate::toolkit
