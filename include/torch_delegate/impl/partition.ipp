// Definitions for partition.hpp: partial lowering from the top, one step per concern, each its
// own file. The request is checked once, before any work (partition_checks.hpp); each method's
// regions are formed backend by backend and given to a backend or not by a region decider
// (partition_assign.hpp: the rules by default; tuning.hpp: measured or replayed decisions);
// extracted as methods of a delegate child (partition_extract.hpp) with their input specs and
// layout conversions (partition_layouts.hpp); lowered, and the methods rewritten to call them
// (partition_rewrite.hpp); a measured lowering is then checked whole (tuning.hpp). The pure passes
// they build on: canonical_graph.hpp (the graph) and regions.hpp (its regions).
#pragma once

#include <torch_delegate/partition.hpp>
#include <torch_delegate/detail/partition_assign.hpp>
#include <torch_delegate/detail/partition_checks.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/detail/shape_ranges.hpp>
#include <torch_delegate/detail/tuning.hpp>

namespace torch_delegate::detail {

// Lowering runs the methods with example inputs (their types, their timings): what they assign
// (torchvision's MultiScaleRoIAlign sets its scales on the first call) is set back as it was,
// in the user's module and in the lowered one, however lowering ends.
class assigned_attributes_kept {
 public:
  assigned_attributes_kept(const torch::jit::Module& module, const partition_options& options) : module_(module) {
    std::vector<std::string> methods;
    for (const auto& example : options.example_inputs) methods.push_back(example.first);
    if (!methods.empty()) before_ = assigned_attributes(module, methods);
  }
  assigned_attributes_kept(const assigned_attributes_kept&) = delete;
  assigned_attributes_kept& operator=(const assigned_attributes_kept&) = delete;
  ~assigned_attributes_kept() {
    try {
      before_.restore(module_);
    } catch (const std::exception&) {  // a destructor: nothing to report to, the lowering's own error goes on
    }
  }

  torch::jit::Module restored(torch::jit::Module lowered) const {
    before_.restore(lowered);
    return lowered;
  }

 private:
  const torch::jit::Module& module_;
  attribute_snapshot before_;
};

TORCH_DELEGATE_DECL delegation_report partition_report_all(const backend_list& backends, const torch::jit::Module& module,
                                                           const partition_options& given) {
  const partition_options options = with_default_example_inputs(module, given);
  check_partition_request(backends, module, options, nullptr);
  const assigned_attributes_kept kept(module, options);
  clock_timing clock;  // a measured plan's times, the timing cache in front of them
  clock.limit.start(options.measure_time_limit_s);
  const std::string directory = options.measure && !options.replay ? timing_cache_directory(options) : std::string();
  std::optional<timing_cache_file> file;
  if (!directory.empty()) file.emplace(directory);
  cached_timing timing(clock, file ? &*file : nullptr, options.progress);
  const std::unique_ptr<region_decider> decider = decider_for(options, nullptr, timing);
  delegation_report report{names_of(backends), module.type()->name()->qualifiedName(), {}};
  for (partitioned_method& p : partition_methods(backends, module, options, *decider)) report.methods.push_back(std::move(p.entry));
  if (options.measure && !options.replay)  // as a lowering ends (a progress bar closes on it)
    timing.done();
  return report;
}

TORCH_DELEGATE_DECL delegation_report partition_report(const backend_lowering& backend, const torch::jit::Module& module,
                                                       const partition_options& options) {
  return partition_report_all({&backend}, module, options);
}

TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with_all(const backend_list& backends, const torch::jit::Module& module,
                                                                const partition_options& given,
                                                                const std::vector<c10::impl::GenericDict>& specs) {
  const partition_options options = with_default_example_inputs(module, given);
  check_partition_request(backends, module, options, &specs);
  const assigned_attributes_kept kept(module, options);
  torch::jit::Module lowered;
  if (options.measure && !options.replay) {
    lowered = lower_measured(backends, module, options, specs);
  } else {
    clock_timing timing;  // nothing is timed: the rules decide, or a replayed report
    lowered = lower_partitioned(backends, module, options, specs, *decider_for(options, &specs, timing));
  }
  if (!options.shape_ranges.empty()) {
    record_shape_ranges(lowered, options);
    check_at_range_ends(backends.front()->name(), module, lowered, options);
  }
  return kept.restored(std::move(lowered));
}

TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with(const backend_lowering& lowering, const torch::jit::Module& module,
                                                            const partition_options& options,
                                                            const c10::impl::GenericDict& spec_by_method) {
  return lower_partially_with_all({&lowering}, module, options, {spec_by_method});
}

}  // namespace torch_delegate::detail
