// Partial lowering: delegate the regions of a method that a backend supports and leave the rest
// to TorchScript. Each region becomes a delegate unit (a method of a child module lowered to the
// backend, with debug handles of the original nodes); the method itself is rewritten to call
// the regions, and the result is a plain TorchScript module. The delegation report says, before
// lowering (a dry run) or after it, what was delegated and why the rest was not.
#pragma once

#include <torch_delegate/coverage.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/lower.hpp>
#include <torch_delegate/report.hpp>

#include <torch/csrc/jit/api/module.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// What a call of a region does when its tensors do not have the dtypes and sizes recorded from
/// the example inputs (partition_options::example_inputs).
enum class other_shapes {
  error,        // the input-spec error, naming the region, the argument, the expected and the given
  torchscript,  // the region's own TorchScript runs instead (a check of sizes and dtypes per call)
  replan,       // the backend compiles the region again for the new shapes (B::replan, opt-in), and
                // keeps up to partition_options::max_replans such shapes per region
  automatic     // replan for each region whose backend can (every shipped backend), error for the others
};

/// How far a measured lowering is (partition_options::progress): one update as each region is
/// timed and as each lowering of choose_order starts and is checked, a last one when it is done.
struct progress_update {
  /// "timing" (a candidate region on its backend against TorchScript), "checking" (a lowered
  /// method whole, against the original), "choosing" (choose_order's lowerings, side by side),
  /// "cached" (the decisions came from the timing cache: nothing timed) or "done".
  std::string stage;
  /// What is being done, for a person: "order 2 of 3 (onednn first): region 4 of 9 on onednn".
  std::string detail;
  /// The lowerings done and to do (choose_order makes several; their number may grow when one
  /// mixes backends): a progress bar's position and length.
  std::size_t step = 0;
  std::size_t steps = 1;
  /// Seconds since the lowering started.
  double elapsed_s = 0;
};

/// The knobs of one partial lowering.
struct partition_options {
  /// The methods to partition.
  std::vector<std::string> methods{"forward"};
  /// The smallest region worth a backend call, in nodes (constants not counted). 0: the
  /// backend's own `min_region_size`, or 1.
  std::size_t min_region_size = 0;
  /// Node kinds to keep in TorchScript although the backend supports them, e.g. "aten::mul".
  std::set<std::string> keep_kinds;
  /// Submodules (by attribute path from the module, e.g. "encoder.block1") whose nodes stay in
  /// TorchScript, with everything they call.
  std::set<std::string> keep_submodules;
  /// Selective lowering (LibTorch's `_jit_to_backend_selective`, here in C++): when not empty,
  /// only the nodes of these submodules (by attribute path, with everything they call) are
  /// delegated; the rest of the module stays in TorchScript. With `require_full`, every node of
  /// these submodules must be delegated.
  std::set<std::string> lower_submodules;
  /// Every node must be delegated (attribute reads aside: they stay in TorchScript and pass their
  /// value in; so does the tuple a method returns its results in, if the backend does not take
  /// it): an error naming the first node that would stay in TorchScript, instead of a partial
  /// lowering.
  bool require_full = false;
  /// Example inputs, per method (Torch-TensorRT records shapes the same way): the method is run
  /// once on them, in TorchScript, while lowering. Every tensor its graph makes then has a
  /// complete type (dtype, sizes, strides) that supports(), accepts_region() and preprocess see,
  /// and each region's tensor inputs get input specs (dtype, sizes, memory format) that are saved
  /// with it: a call with another shape is an error that names the region, the argument, the
  /// expected and the given shape (lowered_module.md, "Input specs").
  std::map<std::string, std::vector<c10::IValue>> example_inputs;
  /// With example inputs: what a call with other dtypes or sizes does (other_shapes). By default a
  /// region whose backend re-plans serves any shape it can plan; another's is refused.
  other_shapes on_other_shapes = other_shapes::automatic;
  /// With other_shapes::replan (or automatic, for a backend that re-plans): how many other shapes
  /// each region keeps compiled (the least recently used is dropped beyond it, and compiled again
  /// if it comes back).
  std::size_t max_replans = 4;
  /// With example inputs: the sizes each tensor argument of a method will take, per method, one
  /// entry per argument in order (nullopt: not declared). Each example input is its range's
  /// typical shape. At lowering the lowered method runs at the ranges' ends (every declared
  /// argument at its `min`, then at its `max`) and is compared with the original method: a region
  /// that cannot plan an end, or a result further than 1e-3 of the largest magnitude from the
  /// original's, is an error that names the end. The plans made there are kept (a first call at
  /// an end plans nothing). Calls within the ranges are re-planned, whatever on_other_shapes says;
  /// a call outside them is an error under other_shapes::error (a check at the method's entry,
  /// saved with it) and is served as on_other_shapes says otherwise (other_shapes::torchscript is
  /// refused: a declared range is served by the backends). docs/onednn.md, "Other shapes".
  std::map<std::string, std::vector<std::optional<shape_range>>> shape_ranges;
  /// With example inputs: time each candidate region on its backend and as TorchScript, in this
  /// process, on the values the example inputs give it (between TorchScript calls where it has
  /// computing neighbours, in blocks otherwise; medians), and delegate it only where the backend
  /// is faster beyond the spread (where the two do not separate, the list's order decides); the
  /// report gives both times. A region a backend loses is offered to the next backend of a
  /// priority list. Lowering then times each method whole, original against lowered, and takes
  /// out the regions of least gain while the lowered one is slower beyond the spread
  /// (docs/partial-lowering.md, "When a timing decides"). Off by default: lowering then compiles each region twice, and its decisions depend
  /// on the machine (`replay` repeats them).
  bool measure = false;
  /// With measure: a share of the method's time (the original method, timed whole on the example
  /// inputs). The regions faster on a backend that save least stay in TorchScript
  /// (kept_reason::gain_below_minimum) while, together, they save less than this: a gain below
  /// the run-to-run noise of the method is not measurable, and each boundary costs something the
  /// region's timing does not see. Many small regions that add up are delegated. 0 delegates
  /// every region that is faster. A region whose times do not separate from TorchScript's has
  /// no measured gain: the list's order decides it, whatever this is.
  double min_gain = 0.01;
  /// With measure and several backends (lowering only, not a plan): the list's order is also
  /// tried against each other backend first (the rest in the list's order; the backend put first
  /// takes only regions faster on it beyond the spread, than TorchScript and than the first
  /// backend listed before it that runs the region, else kept_reason::not_separable), and, where
  /// the fastest gives regions to more than one backend, against each of them alone. Each order
  /// is partitioned by measured decisions; one whose partition is the same as an earlier one's,
  /// or whose regions save too little beside the best so far, is not built; each built is timed
  /// whole against the best so far, side by side, and replaces it only when faster beyond the
  /// spread (so the list's own order stays where they do not separate); the fastest is then
  /// checked whole against the original (docs/partial-lowering.md, "Which backend goes first").
  /// Its report names the backends it was lowered with, in order.
  bool choose_order = false;
  /// With measure: the seconds a lowering (or a measured plan) may spend measuring, counted from
  /// its start; 0: no limit. A comparison is begun only where its first 2 rounds fit in what is
  /// left, and choose_order begins an order only where what is left is at least what an order
  /// took (either refusal ends the measuring); rounds under way stop at the limit (not
  /// separable). What is not measured goes by the list's order, as an unmeasured lowering gives
  /// it (its report says "not measured: too little of measure_time_limit_s was left"); once the
  /// measuring has ended, choose_order tries no further order and the method's check is not
  /// made. What was measured is kept in the timing cache, but not the lowering's decisions: the
  /// next lowering of the model reuses the verdicts and goes on from there
  /// (docs/partial-lowering.md, "The time limit").
  double measure_time_limit_s = 20.0;
  /// With measure: keep what was measured in the timing cache and reuse it (docs/partial-lowering.md,
  /// "The timing cache"): each region's verdict, keyed by its canonical graph, input shapes and
  /// dtypes, backend and payload version, CPU and thread count; and each lowering's decisions, so
  /// that measuring the same model again on the same machine times nothing. A cache file that is
  /// damaged or not ours is reported once and ignored. false: nothing is read or written.
  bool timing_cache = true;
  /// The timing cache's directory; "" (the default): $TORCH_DELEGATE_CACHE_DIR, else
  /// $XDG_CACHE_HOME/torch_delegate, else ~/.cache/torch_delegate. The default cache is off when
  /// $TORCH_DELEGATE_TIMING_CACHE is 0 (a directory given here is used whatever it says).
  std::string timing_cache_dir;
  /// With example inputs: each partitioned method is specialized to the example's argument shapes
  /// where that saves work (docs/partial-lowering.md, "Shape folding"): what it computes only from
  /// the sizes, dtypes and devices the arguments determine (padding amounts, window counts, Swin's
  /// attention mask) is computed once at lowering, behind one check of the arguments; a call with
  /// other shapes runs the method as it was. false: the method is rewritten only to call its regions.
  bool fold_shapes = true;
  /// With measure: called as the lowering goes (progress_update), on the lowering's thread.
  std::function<void(const progress_update&)> progress;
  /// The decisions of an earlier report (a measured plan, or a lowered module's report): a
  /// candidate region is delegated if and only if the report's method has a region of the same
  /// backend, kinds, node count, location and depth (its times are copied). Nothing is timed.
  std::optional<delegation_report> replay;
  /// Availability fallback: where the backend is not available (at load or at call time), each
  /// region runs its original TorchScript instead of raising "Backend is not available.".
  /// Off by default (strict: LibTorch's behaviour and texts).
  bool fallback_when_unavailable = false;
};

namespace detail {

/// The report of a partial lowering without lowering anything.
TORCH_DELEGATE_DECL delegation_report partition_report(const backend_lowering& backend, const torch::jit::Module& module,
                                                       const partition_options& options);
/// The same for a priority list of backends.
TORCH_DELEGATE_DECL delegation_report partition_report_all(const backend_list& backends, const torch::jit::Module& module,
                                                           const partition_options& options);

/// Partially lowers with a backend's lowering (lower_partially<B> and the Python package): each
/// region is compiled with the spec of the method it comes from in `spec_by_method` ({method:
/// spec}), or with default options where its method has none.
TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with(const backend_lowering& lowering, const torch::jit::Module& module,
                                                            const partition_options& options,
                                                            const c10::impl::GenericDict& spec_by_method);
/// The same for a priority list of backends: `specs[k]` is backend k's {method: spec}.
TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with_all(const backend_list& backends, const torch::jit::Module& module,
                                                                const partition_options& options,
                                                                const std::vector<c10::impl::GenericDict>& specs);

template <class B>
c10::impl::GenericDict encoded_method_options(const method_options<B>& compile_options) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, options] : compile_options) spec.insert(method, encode_options(options));
  return spec;
}

/// The partitioning half of B's lowering, or the diagnostic of a backend without supports().
template <class B>
const backend_lowering& partition_backend_checked() {
  if constexpr (!backend_declares_support<B>) {
    detail::backend_does_not_declare_supports<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: partial lowering needs 'static bool supports(const torch::jit::Node*)' in the "
                  "backend: the one place that says which nodes it accepts (docs/partial-lowering.md).");
  }
  return record_of<B>;
}

}  // namespace detail

/// Dry run: what lower_partially<B> would delegate, and why the rest would stay in TorchScript.
template <class B>
delegation_report delegation_plan(const torch::jit::Module& module, const partition_options& options = {}) {
  const detail::backend_lowering& lowering = detail::partition_backend_checked<B>();
  register_backend<B>();  // a measured plan compiles and runs regions
  return detail::partition_report(lowering, module, options);
}

/// Dry run for a priority list of backends: what lower_partially<B1, B2, ...> would delegate, and
/// to which backend.
template <class B1, class B2, class... More>
delegation_report delegation_plan(const torch::jit::Module& module, const partition_options& options = {}) {
  const detail::backend_list backends{&detail::partition_backend_checked<B1>(), &detail::partition_backend_checked<B2>(),
                                      &detail::partition_backend_checked<More>()...};
  register_backend<B1>();
  register_backend<B2>();
  (register_backend<More>(), ...);
  return detail::partition_report_all(backends, module, options);
}

/// Delegates the regions of `options.methods` that B supports; the rest stays TorchScript. The
/// result is a plain TorchScript module (save, load, run anywhere B is registered). The original
/// module is not modified; the result shares its parameters. Each region of a method is compiled
/// with that method's entry in `compile_options` (default-constructed options where it has none;
/// a backend with required options must be given them).
template <class B>
torch::jit::Module lower_partially(const torch::jit::Module& module, const partition_options& options = {},
                                   const method_options<B>& compile_options = {}) {
  detail::partition_backend_checked<B>();
  register_backend<B>();
  return detail::lower_partially_with(detail::record_of<B>, module, options, detail::encoded_method_options<B>(compile_options));
}

/// Delegates to a priority list of backends: each node goes to the first of B1, B2, ... that
/// takes it (ONNX Runtime's list of execution providers, as types). One delegate child per
/// backend, each with its own named data; the report names each region's backend; with
/// fallback, a backend that is unavailable runs its regions in TorchScript while the others
/// still delegate. Each backend's regions are compiled with its entry of `compile_options`
/// (all given, or none: default options).
template <class B1, class B2, class... More>
torch::jit::Module lower_partially(const torch::jit::Module& module, const partition_options& options = {}) {
  return lower_partially<B1, B2, More...>(module, options, method_options<B1>{}, method_options<B2>{}, method_options<More>{}...);
}
template <class B1, class B2, class... More>
torch::jit::Module lower_partially(const torch::jit::Module& module, const partition_options& options,
                                   const method_options<B1>& first, const method_options<B2>& second,
                                   const method_options<More>&... more) {
  const detail::backend_list backends{&detail::partition_backend_checked<B1>(), &detail::partition_backend_checked<B2>(),
                                      &detail::partition_backend_checked<More>()...};
  register_backend<B1>();
  register_backend<B2>();
  (register_backend<More>(), ...);
  return detail::lower_partially_with_all(backends, module, options,
                                          {detail::encoded_method_options<B1>(first), detail::encoded_method_options<B2>(second),
                                           detail::encoded_method_options<More>(more)...});
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition.ipp>
#endif
