// Tuning: the policy that measures, beside the deterministic pass it steers. Partitioning decides
// by each backend's rules (partition_assign.hpp: rule_decider); with partition_options::measure,
// this module decides instead, by timing each candidate region on its backend and as TorchScript
// (measured decisions, min_gain), then checks each lowered method whole (the regions of least gain
// taken out while it is slower than the original) and, with choose_order, compares the orders of
// a priority list. partition_options::replay repeats an earlier report's decisions, timing
// nothing. Every time it reads comes from a timing_source: a cache of times (issue 40) is one more.
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/partition_assign.hpp>
#include <torch_delegate/detail/regions.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// A region's two times, in ms: one call on its backend, one as TorchScript.
struct region_timing {
  double backend_ms;
  double torchscript_ms;
};

/// The value of each top-level value of a method's graph, from a run on its example inputs.
using example_value_map = std::unordered_map<const torch::jit::Value*, c10::IValue>;

/// A candidate region to time, and what it is called with.
struct region_to_time {
  const backend_lowering& backend;
  const torch::jit::Module& module;  // the module being partitioned
  const std::string& method;
  const region& formed;
  const std::string& name;                      // its method's name in the delegate child
  const example_value_map& values;              // example_values of its method
  const c10::impl::GenericDict& spec_by_method;  // the backend's {method: spec} it is compiled with
};

/// Where measured decisions get their times. clock_timing times now, in this process; a cache of
/// earlier times (issue 40) is another source, in front of it.
struct timing_source {
  virtual ~timing_source() = default;
  /// A region on its backend (lowered alone, as lowering would lower it) and as TorchScript; nothing
  /// when a value it takes is not known (a region in an if or loop body).
  virtual std::optional<region_timing> region_ms(const region_to_time& what) = 0;
  /// One call of the original `method` of `module` on its example `inputs`: what min_gain is a
  /// share of.
  virtual double method_ms(const torch::jit::Module& module, const std::string& method,
                           const std::vector<c10::IValue>& inputs) = 0;
  /// One call of `method` of each of `modules`, timed side by side (the method's check and
  /// choose_order compare them).
  virtual std::vector<double> methods_ms(const std::vector<const torch::jit::Module*>& modules, const std::string& method,
                                         const std::vector<c10::IValue>& inputs) = 0;
};

/// Times with the steady clock, in this process, without gradients; medians. A region between
/// TorchScript ops that compute is timed between two TorchScript calls and charged for what it
/// costs the call after it; one with no such neighbour in blocks of calls of one kind (5 to 15
/// rounds, alternating). A method: two warm-up calls, then the median of 5; methods side by side:
/// interleaved blocks of 3 calls (the first dropped), 5 rounds.
struct clock_timing final : timing_source {
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> region_ms(const region_to_time& what) override;
  TORCH_DELEGATE_INTERNAL double method_ms(const torch::jit::Module& module, const std::string& method,
                                           const std::vector<c10::IValue>& inputs) override;
  TORCH_DELEGATE_INTERNAL std::vector<double> methods_ms(const std::vector<const torch::jit::Module*>& modules,
                                                         const std::string& method,
                                                         const std::vector<c10::IValue>& inputs) override;
};

/// Every value the top level of `graph` (a method's canonical graph) makes, as the method makes
/// it from `inputs` (its example inputs): what a measured region is called with.
TORCH_DELEGATE_INTERNAL example_value_map example_values(const torch::jit::Module& module,
                                                         const std::shared_ptr<torch::jit::Graph>& graph,
                                                         const std::vector<c10::IValue>& inputs);

/// The decider `options` ask for: an earlier report's decisions (options.replay), measured ones
/// (options.measure: timed by `timing`, each region compiled with its backend's entry of `specs`,
/// one {method: spec} per backend, or default options where `specs` is nullptr), or the rules
/// (rule_decider). `options` and `specs` must outlive it.
TORCH_DELEGATE_INTERNAL std::unique_ptr<region_decider> decider_for(const partition_options& options,
                                                                    const std::vector<c10::impl::GenericDict>* specs,
                                                                    timing_source& timing);

/// What a measured lowering does after it is lowered (`lowered`, by decider_for's measured
/// decisions): each method with example inputs is timed whole, original against lowered, and
/// while the lowered one is slower than 1.02x, the delegated regions of least measured gain (half
/// of them, at least one) are taken out (kept_reason::slower_on_backend, with both methods'
/// times) and the module lowered again, replaying the rest. With choose_order and several
/// backends, the list's order is compared with each other backend first and, where a lowering
/// mixes backends, with its first backend alone, each lowered and checked so; the fastest is kept
/// (the list's own unless another is faster by more than 2 %). `lowered` as it is when nothing
/// was measured (no measure, a replay, no example inputs).
TORCH_DELEGATE_INTERNAL torch::jit::Module tune_lowered(const backend_list& backends, const torch::jit::Module& module,
                                                        const partition_options& options,
                                                        const std::vector<c10::impl::GenericDict>& specs,
                                                        timing_source& timing, torch::jit::Module lowered);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/tuning.ipp>
#include <torch_delegate/impl/tuning_timing.ipp>
#endif
