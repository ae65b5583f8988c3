// Tuning: the policy that measures, beside the deterministic pass it steers. Partitioning decides
// by each backend's rules (partition_assign.hpp: rule_decider); with partition_options::measure,
// this module decides instead, by timing each candidate region on its backend and as TorchScript
// (measured decisions, min_gain), then checks each lowered method whole (the regions of least gain
// taken out while it is slower than the original) and, with choose_order, compares the orders of
// a priority list. partition_options::replay repeats an earlier report's decisions, timing
// nothing. Every time it reads comes from a timing_source, and decides only where the rounds of
// the two paths separate (timing_statistics.hpp); the timing cache (timing_cache.hpp) keeps the
// verdicts between lowerings.
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/order_screen.hpp>
#include <torch_delegate/detail/partition_assign.hpp>
#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/detail/timing_blocks.hpp>
#include <torch_delegate/detail/timing_cache.hpp>
#include <torch_delegate/detail/timing_statistics.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace torch_delegate {
struct partition_options;
struct progress_update;
}  // namespace torch_delegate

namespace torch_delegate::detail {

/// A region's two times, in ms (one call on its backend, one as TorchScript: medians), and what
/// their rounds say (first: the backend, second: TorchScript).
struct region_timing {
  double backend_ms;
  double torchscript_ms;
  paired_comparison compared;
  bool cached = false;  // from the timing cache or an alike region of this lowering: nothing timed
};

/// The rules measured decisions follow (timing_statistics.hpp): regions, and whole methods (the
/// method's check and choose_order, whose calls are longer and steadier).
inline constexpr sampling_rule region_rule{0.03, 0.01, 8, 40, 3.0};
inline constexpr sampling_rule method_rule{0.03, 0.01, 8, 30, 12.0, 4, 4.0, 36.0};

/// What a partition's regions save, by their own times: `share`, the mean share of their
/// TorchScript time (each region's two times are paired, taken side by side; two regions' are
/// not, and on a loaded machine the TorchScript time of one can be twice the other's: shares
/// compare, milliseconds do not), and `ms`, the sum (off by a few times on a loaded machine,
/// never by tens).
struct partition_saving {
  double share = 0;
  double ms = 0;
};

/// The saving of a partition, or nullopt when a region was not measured or none was delegated.
inline std::optional<partition_saving> measured_saving(const std::vector<method_delegation>& methods) {
  partition_saving saving;
  std::size_t regions = 0;
  for (const method_delegation& method : methods)
    for (const region_report& region : method.regions) {
      if (region.backend_ms < 0 || region.torchscript_ms <= 0) return std::nullopt;
      saving.share += 1.0 - region.backend_ms / region.torchscript_ms;
      saving.ms += region.torchscript_ms - region.backend_ms;
      ++regions;
    }
  if (regions == 0) return std::nullopt;
  saving.share /= static_cast<double>(regions);
  return saving;
}

/// An order whose regions save less than this share of the milliseconds the best so far saves is
/// not compared: a share is not weighed by time, and one small region that saves 98 % (ConvNeXt-T's
/// classifier, on xnnpack alone, the body left in TorchScript) passes its bar.
inline constexpr double least_ms_share = 0.1;

/// Why choose_order does not compare a partition (`methods`) with the best so far: its regions
/// save less than half `best_share` of their TorchScript time (it cannot win by the method's
/// noise), or less than least_ms_share of `best_ms` milliseconds, where `best_share` and
/// `best_ms` are the most any partition built so far saves (measured_saving); nullopt where
/// neither (or where its regions were not all measured).
inline std::optional<std::string> saves_too_little(const std::vector<method_delegation>& methods, double best_share,
                                                   double best_ms) {
  const std::optional<partition_saving> saving = measured_saving(methods);
  if (!saving) return std::nullopt;
  std::ostringstream why;
  why.setf(std::ios::fixed);
  why.precision(2);
  if (saving->share < 0.5 * best_share) {
    why << "not compared: its regions save " << std::lround(100 * saving->share)
        << " % of their TorchScript time, less than half the most a partition built so far saves ("
        << std::lround(100 * best_share) << " %)";
    return why.str();
  }
  if (saving->ms < least_ms_share * best_ms) {
    why << "not compared: its regions save " << saving->ms << " ms, less than " << std::lround(100 * least_ms_share)
        << " % of the most a partition built so far saves (" << best_ms << " ms)";
    return why.str();
  }
  return std::nullopt;
}

/// A region measured faster on its backend: its two times, in ms.
struct region_times {
  double torchscript_ms;
  double backend_ms;
};

/// What min_gain keeps in TorchScript: the first `kept` regions (least saving first), which
/// together save `saved_together` ms, less than min_gain of `method_ms`.
struct min_gain_verdict {
  std::size_t kept = 0;
  double saved_together = 0;
  double method_ms = 0;  // the method's time the share is of
};

/// min_gain's rule over `by_saving` (regions measured faster, least saving first): they stay in
/// TorchScript while together they save less than `min_gain` of the method's time. That time
/// (`method_ms`, the original method timed whole) and a region's are taken at different moments,
/// so the method never counts as shorter than a region's TorchScript time (on a loaded machine a
/// region once "saved 99 %" of a method timed in a quiet moment).
inline min_gain_verdict least_gains(const std::vector<region_times>& by_saving, double method_ms, double min_gain) {
  min_gain_verdict verdict;
  verdict.method_ms = method_ms;
  for (const region_times& region : by_saving) verdict.method_ms = std::max(verdict.method_ms, region.torchscript_ms);
  for (const region_times& region : by_saving) {
    const double saved = region.torchscript_ms - region.backend_ms;
    if (verdict.saved_together + saved >= min_gain * verdict.method_ms) break;
    verdict.saved_together += saved;
    ++verdict.kept;
  }
  return verdict;
}

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

/// Where measured decisions get their times. clock_timing times now, in this process;
/// cached_timing puts the timing cache and the regions already timed in front of it.
struct timing_source {
  virtual ~timing_source() = default;
  /// A region on its backend (lowered alone, as lowering would lower it) and as TorchScript, in
  /// rounds until they separate (region_rule); nothing when a value it takes is not known (a
  /// region in an if or loop body).
  virtual std::optional<region_timing> region_ms(const region_to_time& what) = 0;
  /// One call of the original `method` of `module` on its example `inputs` (the fastest of a few):
  /// what min_gain is a share of; below 0 where the time limit leaves no room for it.
  virtual double method_ms(const torch::jit::Module& module, const std::string& method,
                           const std::vector<c10::IValue>& inputs) = 0;
  /// The region of `what` on its backend (first: backend_ms) and on `other`, compiled with
  /// `other_spec` (second: torchscript_ms), lowered alone and timed side by side in rounds until
  /// they separate (region_rule); nothing when a value it takes is not known or `other` cannot
  /// lower it alone. What choose_order's promoted backend must beat (decider_for).
  virtual std::optional<region_timing> region_against(const region_to_time&, const backend_lowering&,
                                                      const c10::impl::GenericDict&) {
    return std::nullopt;
  }
  /// `method` of two modules timed side by side in rounds until they separate (method_rule).
  virtual paired_comparison compare_methods(const torch::jit::Module& first, const torch::jit::Module& second,
                                            const std::string& method, const std::vector<c10::IValue>& inputs) = 0;
  /// Whether the lowering's measure_time_limit_s is spent: then nothing more is timed (each
  /// comparison returns at once, not separable and out_of_time).
  virtual bool out_of_time() const { return false; }
  /// The seconds left of measure_time_limit_s (infinity without a limit).
  virtual double seconds_left() const { return std::numeric_limits<double>::infinity(); }
  /// Ends the measuring, as the limit does (something would not fit in what is left of it).
  virtual void give_up() {}
  /// How far the lowering is (partition_options::progress): `stage` and what is being done.
  virtual void progress(std::string_view, const std::string&) {}
  /// The lowering `step` of `steps` (choose_order's) starts: `what` prefixes the updates.
  virtual void lowering_step(std::size_t, std::size_t, const std::string&) {}
};

/// Times with the steady clock, in this process, without gradients. A region between
/// TorchScript ops that compute, whose calls are shorter than long_call_ms
/// (timed_between_neighbours), is timed between two TorchScript calls and charged for what it
/// costs the call after it; any other in blocks of calls of one kind (the fastest of
/// calls_per_block, after one dropped where drops_first_call). Each round times both
/// paths, the order alternating. A method: one warm-up call, then the fastest of up to 5 (fewer
/// once they have taken 2 s, at least 2); methods side by side: per round a block of each, as a
/// region's. With a time limit (`limit` started), a comparison is begun only where its first 2
/// rounds fit before the deadline, its rounds stop there, and one asked for after it times nothing:
/// not separable, out_of_time.
struct clock_timing final : timing_source {
  /// The lowering's measure_time_limit_s (none unless started).
  time_limit limit;
  bool out_of_time() const override { return limit.spent(); }
  double seconds_left() const override { return limit.seconds_left(); }
  void give_up() override { limit.give_up(); }
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> region_ms(const region_to_time& what) override;
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> region_against(const region_to_time& what, const backend_lowering& other,
                                                                      const c10::impl::GenericDict& other_spec) override;
  TORCH_DELEGATE_INTERNAL double method_ms(const torch::jit::Module& module, const std::string& method,
                                           const std::vector<c10::IValue>& inputs) override;
  TORCH_DELEGATE_INTERNAL paired_comparison compare_methods(const torch::jit::Module& first, const torch::jit::Module& second,
                                                            const std::string& method,
                                                            const std::vector<c10::IValue>& inputs) override;

  /// `compared`, run under limit.within(`rule`), marked out_of_time where the limit stopped its
  /// rounds: not separable, stopped by a hard budget the deadline had cut below the rule's own.
  paired_comparison marked(paired_comparison compared, const sampling_rule& rule, const sampling_rule& cut) const {
    compared.out_of_time |= compared.verdict == separation::not_separable && compared.hard_stop &&
                            cut.hard_budget_s < rule.hard_budget_s;
    return compared;
  }
};

/// An IValue in a key: scalars and strings by value, containers element by element, tensors by
/// dtype, sizes and strides (never their data).
TORCH_DELEGATE_INTERNAL void describe_for_key(std::ostream& out, const c10::IValue& value);

/// What a region's timing depends on, as text for key_digest: the backend, its payload version
/// and the spec it is compiled with; the region's nodes, their constants and how they connect
/// (value names and attribute names left out: ResNet's alike blocks have one key); every tensor's
/// dtype, sizes and strides from the example values. (cached_timing adds the machine.)
TORCH_DELEGATE_INTERNAL std::string region_key(const region_to_time& what);

/// The timing cache and the regions already timed in this lowering, in front of `clock`: a
/// region alike to one timed before (region_key) gets its verdict without being timed, and a
/// method's original is timed once (method_ms; one cached_timing serves one lowering). Reports
/// progress to `progress` (when set). `file`: nullptr when the cache is off.
class cached_timing final : public timing_source {
 public:
  /// `original`: the module every lowering partitions a copy of, whose methods method_ms times
  /// (nullptr: the module it is given).
  TORCH_DELEGATE_INTERNAL cached_timing(timing_source& clock, timing_cache_file* file,
                                        std::function<void(const progress_update&)> progress,
                                        const torch::jit::Module* original = nullptr);
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> region_ms(const region_to_time& what) override;
  /// Cached as a region's timing is, under the region's key and the other backend's.
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> region_against(const region_to_time& what, const backend_lowering& other,
                                                                      const c10::impl::GenericDict& other_spec) override;
  TORCH_DELEGATE_INTERNAL double method_ms(const torch::jit::Module& module, const std::string& method,
                                           const std::vector<c10::IValue>& inputs) override;
  TORCH_DELEGATE_INTERNAL paired_comparison compare_methods(const torch::jit::Module& first, const torch::jit::Module& second,
                                                            const std::string& method,
                                                            const std::vector<c10::IValue>& inputs) override;
  /// The clock's; a true answer counts as cutting the lowering short (its caller skips something).
  bool out_of_time() const override {
    const bool spent = clock_.out_of_time();
    cut_short_ |= spent;
    return spent;
  }
  double seconds_left() const override { return clock_.seconds_left(); }
  void give_up() override {
    clock_.give_up();
    cut_short_ = true;
  }
  TORCH_DELEGATE_INTERNAL void progress(std::string_view stage, const std::string& detail) override;
  TORCH_DELEGATE_INTERNAL void lowering_step(std::size_t step, std::size_t steps, const std::string& what) override;
  /// The last update of a measured plan or lowering: "done", with the counts of timed() and reused().
  TORCH_DELEGATE_INTERNAL void done();
  timing_cache_file* file() const { return file_; }
  /// Regions timed, and regions whose verdict was reused (the cache, or an alike region).
  std::size_t timed() const { return timed_; }
  std::size_t reused() const { return reused_; }
  /// Whether the time limit cut a comparison short or made the lowering skip one (out_of_time):
  /// then the lowering's decisions are not kept in the cache (its verdicts are).
  bool cut_short() const { return cut_short_; }

 private:
  // The timing of `digest` (a region's key): known in this lowering, in the file, or time()'s.
  TORCH_DELEGATE_INTERNAL std::optional<region_timing> known_or_timed(const std::string& digest,
                                                                      const std::function<std::optional<region_timing>()>& time);
  timing_source& clock_;
  timing_cache_file* file_;
  std::function<void(const progress_update&)> callback_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t step_ = 0, steps_ = 1, timed_ = 0, reused_ = 0;
  mutable bool cut_short_ = false;  // set by out_of_time() too
  std::string what_;
  std::string fingerprint_;  // machine_fingerprint, once per lowering
  std::unordered_map<std::string, region_timing> known_;  // region_key digest -> timing
  const torch::jit::Module* original_;
  std::unordered_map<std::string, double> method_times_;  // method -> its original's time (method_ms)
};

/// Every value the top level of `graph` (a method's canonical graph) makes, as the method makes
/// it from `inputs` (its example inputs): what a measured region is called with.
TORCH_DELEGATE_INTERNAL example_value_map example_values(const torch::jit::Module& module,
                                                         const std::shared_ptr<torch::jit::Graph>& graph,
                                                         const std::vector<c10::IValue>& inputs);

/// The backend an order of choose_order puts ahead of its place in the priority list, and the
/// backends the list gives after it and before it (with the {method: spec} each is compiled with).
struct promotion {
  std::string backend;
  std::unordered_set<std::string> listed_after;
  std::vector<std::pair<const backend_lowering*, c10::impl::GenericDict>> listed_before;
};

/// The decider `options` ask for: an earlier report's decisions (options.replay), measured ones
/// (options.measure: timed by `timing`, each region compiled with its backend's entry of `specs`,
/// one {method: spec} per backend, or default options where `specs` is nullptr), or the rules
/// (rule_decider). `promoted` (an order of choose_order; nullptr for the list's own order): a
/// region that does not separate goes by the list's order, which offers it to the promoted
/// backend only after the backends before it, and to the backends after it only once the
/// promoted one has refused it. So the promoted backend takes a measured region only where it is
/// faster beyond the spread than the first backend listed before it that supports every node of
/// the region (which the list's order offers it to first; the region lowered alone on each,
/// timed first) and than TorchScript, and a backend listed after it does not take, by the list's order, a
/// region with a node the promoted one did not (both keep it: kept_reason::not_separable).
/// `options`, `specs` and `promoted` must outlive it.
TORCH_DELEGATE_INTERNAL std::unique_ptr<region_decider> decider_for(const partition_options& options,
                                                                    const std::vector<c10::impl::GenericDict>* specs,
                                                                    timing_source& timing, const promotion* promoted = nullptr);

/// What a measured lowering does after it is lowered (`lowered`, by decider_for's measured
/// decisions): each method with example inputs is timed whole, original against lowered, and
/// while the lowered one is slower beyond the spread (method_rule), the delegated regions of least
/// measured gain (half of them, at least one) are taken out (kept_reason::slower_on_backend, with
/// both methods' times) and the module lowered again, replaying the rest. With choose_order and
/// several backends, first the list's order is compared with each other backend first and, where
/// the fastest of them mixes backends, with each of its backends alone: each partitioned, built
/// only when its partition is new and saves enough, and compared with the best so far, which it
/// replaces only when faster beyond the spread (so the list's order stays where they do not
/// separate); then only the fastest is checked as above. `lowered` as it is when nothing was
/// measured (no measure, a replay, no example inputs). With a time limit, an order is begun only
/// where the time left is at least the longest an order took so far (`first_order_s`: the list's
/// order, `lowered`'s lowering).
TORCH_DELEGATE_INTERNAL torch::jit::Module tune_lowered(const backend_list& backends, const torch::jit::Module& module,
                                                        const partition_options& options,
                                                        const std::vector<c10::impl::GenericDict>& specs,
                                                        timing_source& timing, torch::jit::Module lowered,
                                                        double first_order_s = 0);

/// What a whole measured lowering depends on, as text for key_digest: the backends (names,
/// payload versions, specs), the options that change decisions, each method's code (its graph and,
/// once each, the graphs of the methods and functions it calls, not inlined) and its example
/// inputs' dtypes and sizes, every attribute of the module (tensors by dtype and sizes, other
/// values by value), and the machine.
TORCH_DELEGATE_INTERNAL std::string lowering_key(const backend_list& backends, const torch::jit::Module& module,
                                                 const partition_options& options,
                                                 const std::vector<c10::impl::GenericDict>& specs);

/// A measured lowering through the timing cache: its decisions replayed from the cache when a
/// lowering of the same key was measured before (nothing timed), else measured (tune_lowered)
/// and stored.
TORCH_DELEGATE_INTERNAL torch::jit::Module lower_measured(const backend_list& backends, const torch::jit::Module& module,
                                                          const partition_options& options,
                                                          const std::vector<c10::impl::GenericDict>& specs);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/tuning.ipp>
#include <torch_delegate/impl/tuning_lowering.ipp>
#include <torch_delegate/impl/measured_lowering.ipp>
#include <torch_delegate/impl/tuning_timing.ipp>
#include <torch_delegate/impl/cached_timing.ipp>
#include <torch_delegate/impl/timing_cache.ipp>
#include <torch_delegate/impl/timing_statistics.ipp>
#endif
