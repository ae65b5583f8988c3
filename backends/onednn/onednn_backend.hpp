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

#include "payload_records.hpp"
#include "plan_implementation.hpp"

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onednn_delegate {

struct region_steps;  // steps.hpp: the region's steps (fusions decided), value counts, results, method
struct plan_store;    // internal.hpp: the region's plans (a bounded cache, per input shape) and weights

/// What compile makes of a region: its steps (fusions decided), and the plans execute makes on the
/// first call with each input shape (the primitives, their weights in the layout each picked, and
/// where each activation lives in one per-call buffer), the last `max_plans` shapes kept. Calls may
/// run concurrently.
struct compiled_region {
  std::shared_ptr<const region_steps> region;
  std::shared_ptr<plan_store> plans;
};

/// Whether oneDNN's implementation name is a reference kernel: one of its ':'-separated parts
/// starts with "ref" ("ref:any", "ref_int8:any", "gemm:ref"), or it holds one of the names given
/// to treat_as_reference.
bool is_reference(std::string_view implementation);

/// Makes is_reference true for implementations whose name holds one of `kernels` (substrings:
/// "jit", "gemm"), for the plans made after the call; {} undoes it. For tests that walk the
/// fallbacks a plan takes around reference kernels (tests/onednn_test_hooks.cpp), not for
/// production: plans around kernels that are not slow are slower.
void treat_as_reference(std::vector<std::string> kernels);

/// The primitives of every plan made so far by the regions of `module` lowered to onednn (the
/// module itself, or its lowered children after a partial lowering), least recently used plan
/// first, each in call order. Python:
/// torch.ops.torch_delegate_onednn.plan_implementations(module) (register_onednn.cpp).
std::vector<plan_implementation> plan_implementations(const torch::jit::Module& module);

// [struct]
struct OnednnBackend {
  static constexpr std::string_view name = "onednn";
  /// Regions take the parameters they read as constants: preprocess folds them.
  static constexpr bool owns_parameters = true;
  /// Version 6: typed step records (payload_records.hpp) whose sizes are programs of the input
  /// shapes (a region plans other shapes), with reductions and resamplings (since 5) and recurrent
  /// layers (6); versions 5 and 4, 3 (the example's sizes only), 2 (without the views and
  /// attention's steps) and 1 (positional ints) are still read.
  static constexpr std::int64_t payload_version = 6;
  static constexpr std::int64_t oldest_payload_version = 1;
  /// The input shapes a region keeps plans for, least recently used dropped first (docs/onednn.md).
  static constexpr std::size_t max_plans = 16;

  /// Float convolutions (BatchNorm after one folded in), poolings, activations, add, mul, cat, and
  /// linear, layer_norm, GELU, permute, flatten (docs/onednn.md has the table).
  static bool supports(const torch::jit::Node* node);
  /// A region worth its layout conversions: one with a convolution or a linear.
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region);

  torch_delegate::preprocess_result<region_payload> preprocess(const torch_delegate::method_to_lower& region);

  /// Whether this LibTorch was built with oneDNN (at::hasMKLDNN(); TD_ONEDNN_UNAVAILABLE=1: no).
  bool is_available();
  compiled_region compile(const region_payload& payload, const torch_delegate::compile_context& context);
  /// The region for other input shapes (other_shapes::replan): the same steps, weights and plan
  /// cache, planned for `given` now. Where a step holds the example's sizes (a reshape or a chunk
  /// whose sizes come from outside the region, a payload before version 4), an error naming it.
  compiled_region replan(compiled_region& compiled, const torch_delegate::given_inputs& given);
  std::vector<c10::IValue> execute(compiled_region& region, torch_delegate::inputs inputs);
};
// [struct]

}  // namespace onednn_delegate

/// onednn's payload reads in every version: a version 3 tuple as the Boost.Hana struct it is, a
/// version 2 one (its steps without version 3's fields) and a version 1 one (positional ints)
/// converted on load (payload.cpp). Writes version 3.
template <>
struct torch_delegate::ivalue_caster<onednn_delegate::region_payload, void> {
  static constexpr auto name = ivalue_caster<detail::hana_fields_t<onednn_delegate::region_payload>>::name;
  static bool check(const c10::IValue& value);
  static onednn_delegate::region_payload load(const c10::IValue& value);
  static c10::IValue cast(onednn_delegate::region_payload payload);
};
