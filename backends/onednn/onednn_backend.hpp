// onednn: a CPU backend that runs regions on oneDNN's own primitives (libdnnl-dev: the libdnnl.so.2
// LibTorch itself links). Preprocess folds BatchNorm into convolutions and stores weights as named
// data; on the first call with an input shape, execute plans the region: each step a oneDNN
// primitive in the layout oneDNN picks for it, the activations after a convolution or a linear (and a
// residual add after a convolution) fused into it as post-ops, weights reordered once, and every
// intermediate value placed in one buffer by lifetime. CNN bodies (convolutions, poolings,
// squeeze-excitation, cat) and transformer-style blocks (linear, layer_norm, GELU, permute) run
// there; regions own their parameters. With the xnnpack backend in a priority list and measured
// partitioning, each region goes to whichever is faster on the machine (docs/onednn.md).
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/api/module.h>
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
/// parameters, and for a convolution, linear, layer_norm or scale the named-data keys of its
/// weight and bias (onednn_backend.cpp lists the ops and their parameters).
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

/// One primitive of a plan, as the debug query lists it (docs/onednn.md#which-kernels-a-plan-runs).
struct plan_implementation {
  std::string method;          // the lowered method (a region of a partial lowering: its name)
  std::string shapes;          // the input shapes the plan was made for, e.g. "[1, 3, 96, 96]"
  std::string step;            // the region's step it runs, e.g. "4 convolution" ("output 0": a result's reorder)
  std::string kind;            // oneDNN's primitive kind (convolution, reorder, binary, ...); ATen's op for a step run there
  std::string implementation;  // oneDNN's impl_info_str (jit_1x1:avx2, brgconv:avx512_core, ref:any) or ATen's op ("aten::conv2d")
};

/// Whether oneDNN's implementation name is a reference kernel: one of its ':'-separated parts
/// starts with "ref" ("ref:any", "ref_int8:any", "gemm:ref"). TD_ONEDNN_TREAT_AS_REFERENCE, a
/// comma-separated list, names more (by substring): tests walk the fallbacks with it.
bool is_reference(std::string_view implementation);

/// The primitives of every plan made so far by the regions of `module` lowered to onednn (the
/// module itself, or its lowered children after a partial lowering), in call order. Python:
/// torch.ops.torch_delegate_onednn.plan_implementations(module) (register_onednn.cpp).
std::vector<plan_implementation> plan_implementations(const torch::jit::Module& module);

// [struct]
struct OnednnBackend {
  static constexpr std::string_view name = "onednn";
  /// Regions take the parameters they read as constants: preprocess folds them.
  static constexpr bool owns_parameters = true;

  /// Float convolutions (BatchNorm after one folded in), poolings, activations, add, mul, cat, and
  /// linear, layer_norm, GELU, permute, flatten (docs/onednn.md has the table).
  static bool supports(const torch::jit::Node* node);
  /// A region worth its layout conversions: one with a convolution or a linear.
  static bool accepts_region(std::span<const torch::jit::Node* const> region);

  torch_delegate::preprocess_result<region_payload> preprocess(const torch_delegate::method_to_lower& region);

  /// Whether this LibTorch was built with oneDNN (at::hasMKLDNN(); TD_ONEDNN_UNAVAILABLE=1: no).
  bool is_available();
  compiled_region compile(const region_payload& payload, const torch_delegate::compile_context& context);
  std::vector<c10::IValue> execute(compiled_region& region, torch_delegate::inputs inputs);
};
// [struct]

}  // namespace onednn_delegate

BOOST_HANA_ADAPT_STRUCT(onednn_delegate::step_record, op, ints, weight, bias);
BOOST_HANA_ADAPT_STRUCT(onednn_delegate::region_payload, inputs, values, steps, outputs);
