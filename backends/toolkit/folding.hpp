// Folding at preprocess: an eval-mode BatchNorm as a per-channel affine (scale, shift), and a 2-d
// (or 3-d) convolution read with the BatchNorm that alone reads its output folded into its weight
// and bias.
#pragma once

#include "graph.hpp"
#include "support_rules.hpp"

#include <torch_delegate/preprocess.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace torch_delegate::toolkit {

/// An eval-mode BatchNorm as y = x * scale + shift, per channel; `backend` names who rejects
/// one in training mode.
inline std::pair<at::Tensor, at::Tensor> batch_norm_affine(const torch_delegate::method_to_lower& region,
                                                           const torch::jit::Node* norm, const std::string& backend) {
  if (region.argument<bool>(norm, "training"))
    region.reject(norm, backend + ": batch_norm in training mode (call model.eval() before lowering)");
  const at::Tensor mean = region.argument<at::Tensor>(norm, "running_mean").to(at::kFloat);
  const at::Tensor var = region.argument<at::Tensor>(norm, "running_var").to(at::kFloat);
  const auto gamma = region.argument<std::optional<at::Tensor>>(norm, "weight");
  const auto beta = region.argument<std::optional<at::Tensor>>(norm, "bias");
  at::Tensor scale = (var + region.argument<double>(norm, "eps")).rsqrt();
  if (gamma) scale = scale * gamma->to(at::kFloat);
  at::Tensor shift = -mean * scale;
  if (beta) shift = shift + beta->to(at::kFloat);
  return {scale, shift};
}

/// A convolution as preprocess folds it: float weight [O, I/groups, kh, kw] (3-d: [O, I/groups,
/// kt, kh, kw]), bias (zeros when it has none), a stride, padding and dilation per spatial
/// dimension, and the value it makes (the BatchNorm's output when one was folded in).
struct folded_conv2d {
  at::Tensor weight;
  at::Tensor bias;
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups = 1;
  const torch::jit::Value* output = nullptr;
};

/// Reads `conv` (aten::conv2d; aten::conv1d and aten::conv3d too when `other_ranks`) and folds the
/// BatchNorm that is the only reader of its output (as its input), unless that output is one of
/// the region's results (`is_result`). A folded BatchNorm is added to `folded`: the caller skips it.
template <class IsResult>
folded_conv2d read_conv(const torch_delegate::method_to_lower& region, const torch::jit::Node* conv, IsResult is_result,
                        std::unordered_set<const torch::jit::Node*>& folded, const std::string& backend, bool other_ranks) {
  folded_conv2d read;
  read.weight = region.argument<at::Tensor>(conv, "weight").to(at::kFloat);
  const auto bias = region.argument<std::optional<at::Tensor>>(conv, "bias");
  read.stride = region.argument<std::vector<std::int64_t>>(conv, "stride");
  read.padding = region.argument<std::vector<std::int64_t>>(conv, "padding");
  read.dilation = region.argument<std::vector<std::int64_t>>(conv, "dilation");
  read.groups = region.argument<std::int64_t>(conv, "groups");
  const std::size_t n = other_ranks ? spatial_dims_of(conv) : 2;
  if (read.weight.dim() != static_cast<std::int64_t>(n + 2) || read.stride.size() != n || read.padding.size() != n ||
      read.dilation.size() != n)
    region.reject(conv, backend + (other_ranks ? ": only 1-d, 2-d and 3-d convolutions with a stride, padding and dilation per spatial dimension"
                                           : ": only 2-d convolutions with two strides, paddings and dilations"));
  read.bias = bias ? bias->to(at::kFloat) : at::zeros({read.weight.size(0)}, read.weight.options());
  read.output = conv->output();
  const torch::jit::Node* norm = only_reader(read.output, 0);
  if (norm && !is_result(read.output) && is(norm, "aten::batch_norm")) {
    const auto [scale, shift] = batch_norm_affine(region, norm, backend);
    std::vector<std::int64_t> per_output(n + 2, 1);
    per_output[0] = -1;
    read.weight = read.weight * scale.reshape(per_output);
    read.bias = read.bias * scale + shift;
    folded.insert(norm);
    read.output = norm->output();
  }
  return read;
}

/// read_conv for a 2-d convolution alone (aten::conv2d).
template <class IsResult>
folded_conv2d read_conv2d(const torch_delegate::method_to_lower& region, const torch::jit::Node* conv, IsResult is_result,
                          std::unordered_set<const torch::jit::Node*>& folded, const std::string& backend) {
  return read_conv(region, conv, is_result, folded, backend, false);
}

}  // namespace torch_delegate::toolkit
