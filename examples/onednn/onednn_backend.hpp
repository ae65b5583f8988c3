// onednn: a CPU backend that runs CNN regions on oneDNN, the library LibTorch itself links, through
// ATen's oneDNN ("mkldnn") tensors: the ops torch.jit.optimize_for_inference uses, for a region of
// a scripted model instead of a whole frozen one. A region converts its inputs to oneDNN's blocked
// layout once, runs convolutions (BatchNorm folded at preprocess, weights reordered once at
// compile), ReLUs, adds and poolings there, and converts its outputs back. The regions own their
// parameters. With the xnnpack backend in a priority list and measured partitioning, each region
// goes to whichever is faster on the machine (docs/onednn.md).
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <boost/hana/adapt_struct.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onednn_delegate {

/// One step of a region: its op code, its value ids (inputs, then its output) and integer
/// parameters, and for a convolution the named-data keys of its weight and bias.
struct step_record {
  std::int64_t op = 0;
  std::vector<std::int64_t> ints;
  std::string weight;
  std::string bias;
};
/// The payload of a region (a Boost.Hana struct: saved as a tuple of its fields): how many
/// inputs it takes (value ids 0..inputs-1), how many values it has, its steps in order, and the
/// value ids it returns.
struct region_payload {
  std::int64_t inputs = 0;
  std::int64_t values = 0;
  std::vector<step_record> steps;
  std::vector<std::int64_t> outputs;
};

struct compiled_step;  // onednn_backend.cpp: a step with its folded weights
struct plan_cache;     // onednn_backend.cpp: the region's oneDNN primitives, per input shape

/// What compile makes of a region: its steps, and the plans execute makes on the first call with
/// each input shape (the primitives, their weights in the layout each picked, and where each
/// activation lives in one per-call buffer). Calls may run concurrently.
struct compiled_region {
  std::shared_ptr<const std::vector<compiled_step>> steps;
  std::int64_t inputs = 0;
  std::int64_t values = 0;
  std::vector<std::int64_t> outputs;
  std::string method;
  std::shared_ptr<plan_cache> plans;
};

// [struct]
struct OnednnBackend {
  static constexpr std::string_view name = "onednn";
  /// Regions take the parameters they read as constants: preprocess folds them.
  static constexpr bool owns_parameters = true;

  /// Float convolutions (BatchNorm after one folded in), relu, add, max_pool2d, adaptive_avg_pool2d.
  static bool supports(const torch::jit::Node* node);
  /// A region worth its two layout conversions: one with a convolution.
  static bool accepts_region(std::span<const torch::jit::Node* const> region);

  torch_delegate::preprocess_result<region_payload> preprocess(const torch_delegate::method_to_lower& region);

  /// Whether this LibTorch was built with oneDNN (at::hasMKLDNN()).
  bool is_available();
  compiled_region compile(const region_payload& payload, const torch_delegate::compile_context& context);
  std::vector<c10::IValue> execute(compiled_region& region, torch_delegate::inputs inputs);
};
// [struct]

}  // namespace onednn_delegate

BOOST_HANA_ADAPT_STRUCT(onednn_delegate::step_record, op, ints, weight, bias);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::region_payload, inputs, values, steps, outputs);
