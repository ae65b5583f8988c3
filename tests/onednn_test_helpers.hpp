// Helpers of the onednn backend's unit tests (onednn_unit.cpp, onednn_kernels.cpp): steps and
// payloads written by hand, a region compiled from them, the kernels a plan names.
#pragma once

#include "helpers.hpp"

#include <onednn/internal.hpp>

#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace onednn_test {

using namespace onednn_delegate;

inline compiled_step step_of(const char* op, std::vector<std::int64_t> inputs, std::int64_t output) {
  compiled_step step;
  step.record.op = op;
  step.record.inputs = std::move(inputs);
  step.record.output = output;
  step.kind = *step_kind_named(op);
  return step;
}

inline std::vector<step_fusion> fusions_of(const std::vector<compiled_step>& steps, std::int64_t values, std::vector<std::int64_t> outputs) {
  return decide_fusions(steps, values, outputs);
}

/// Whether `got` is `want` up to float32 rounding, for outputs that are `depth` reductions in a
/// chain, each a sum of `length` products (or one call with the chain's lengths summed) (a convolution's input channels × taps). Two programs
/// that sum the same terms in another order (oneDNN's blocked kernels, ATen's) differ by up to
/// about length · 2^-24 of the terms' magnitude per reduction (Higham's bound γ_n ≈ n·u): the
/// largest difference is compared with depth · length · 2^-24 of the largest |want|. An element-wise
/// relative tolerance is not a bound: an output near zero that is the difference of large terms
/// carries the terms' rounding, not its own.
inline bool equal_to_rounding(const at::Tensor& got, const at::Tensor& want, std::int64_t length, std::int64_t depth = 1) {
  if (got.sizes() != want.sizes()) return false;
  constexpr double unit_roundoff = 1.0 / (1 << 24);
  const double largest = want.abs().max().item<double>();
  const double difference = (got - want).abs().max().item<double>();
  const double bound = static_cast<double>(depth * length) * unit_roundoff * std::max(largest, 1.0);
  if (!(difference <= bound))
    MESSAGE("largest difference " << difference << " over the bound " << bound << " (" << depth << " sums of "
            << length << " terms, outputs up to " << largest << ")");
  return difference <= bound;
}

/// A region compiled from `payload`, its weights given as named data.
inline compiled_region compile_region(const region_payload& payload, const std::map<std::string, at::Tensor>& weights) {
  torch_delegate::named_data_map named("onednn");
  for (const auto& [key, tensor] : weights) named.insert(key, {tensor.contiguous(), 64});
  std::set<std::string> released;
  const auto context = torch_delegate::detail::compile_context_access::make("onednn", "forward", 2, &named, &released);
  OnednnBackend backend;
  return backend.compile(payload, context);
}

inline step_record record(const char* op, std::vector<std::int64_t> inputs, std::int64_t output) {
  step_record step;
  step.op = op;
  step.inputs = std::move(inputs);
  step.output = output;
  return step;
}

/// conv 3x3 (0 -> 1), relu (-> 2), conv 1x1 (-> 3), add of it and 2 (-> 4), relu (-> 5), permute
/// to NHWC (-> 6), flatten (-> 7): a residual block, then two views.
inline region_payload residual_payload(std::map<std::string, at::Tensor>& weights) {
  torch::manual_seed(5);
  weights = {{"w1", torch::randn({8, 4, 3, 3}) * 0.3}, {"b1", torch::randn({8}) * 0.1},
             {"w2", torch::randn({8, 8, 1, 1}) * 0.3}, {"b2", torch::randn({8}) * 0.1}};
  region_payload payload{1, 8, {}, {7}};
  step_record conv1 = record("convolution", {0}, 1), conv2 = record("convolution", {2}, 3);
  conv1.convolution = convolution_parameters{{1, 1}, {1, 1}, {1, 1}, 1};
  conv1.weight = "w1", conv1.bias = "b1";
  conv2.convolution = convolution_parameters{{1, 1}, {0, 0}, {1, 1}, 1};
  conv2.weight = "w2", conv2.bias = "b2";
  step_record permute = record("permute", {5}, 6), flatten = record("flatten", {6}, 7);
  permute.permute_dims = std::vector<std::int64_t>{0, 2, 3, 1};
  flatten.flatten = flatten_parameters{1, -1};
  payload.steps = {conv1, record("relu", {1}, 2), conv2, record("add", {3, 2}, 4), record("relu", {4}, 5), permute, flatten};
  return payload;
}

/// The terms the residual block sums into an output: 4 channels × 3 × 3, then 8, then the residual.
inline constexpr std::int64_t residual_terms = 4 * 9 + 8 + 1;

inline at::Tensor residual_reference(const at::Tensor& x, const std::map<std::string, at::Tensor>& w) {
  const at::Tensor y = at::relu(at::conv2d(x, w.at("w1"), w.at("b1"), 1, 1));
  return at::relu(at::conv2d(y, w.at("w2"), w.at("b2")) + y).permute({0, 2, 3, 1}).flatten(1);
}

/// Each call of a plan as "step: kind implementation" ("2 convolution: reorder jit:uni").
inline std::vector<std::string> kernels_of(const execution_plan& plan) {
  std::vector<std::string> kernels;
  for (const plan_implementation& each : plan.implementations) kernels.push_back(each.step + ": " + each.kind + " " + each.implementation);
  return kernels;
}

/// How many of `kernels` contain `part`.
inline std::ptrdiff_t count_named(const std::vector<std::string>& kernels, std::string_view part) {
  return std::count_if(kernels.begin(), kernels.end(), [&](const std::string& k) { return k.find(part) != std::string::npos; });
}

inline std::vector<std::string> kinds_of(const execution_plan& plan) {
  std::vector<std::string> kinds;
  for (const plan_implementation& each : plan.implementations) kinds.push_back(each.step + " " + each.kind);
  return kinds;
}


}  // namespace onednn_test
