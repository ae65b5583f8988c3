// Definitions for detail/tuning.hpp, the policy: the measured and replayed deciders, the method's
// check of a measured lowering, and choose_order. (The clock: tuning_timing.ipp.)
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

namespace torch_delegate::detail {

// "0.0412 ms on xnnpack, 0.0275 ms in TorchScript"
inline std::string timing_text(const region_report& region) {
  std::ostringstream text;
  text.precision(3);
  text << region.backend_ms << " ms on " << region.backend << ", " << region.torchscript_ms << " ms in TorchScript";
  return text.str();
}

// The region of `replayed` (a method of an earlier report) that `candidate` is, or nullptr: the
// first one not matched yet (`matched`) with the same backend, kinds, node count, location and
// depth. Candidates come in program order, as the report's regions do: regions alike (the
// layers of a loop share a source line) pair up in order, and each is matched once.
inline const region_report* replayed_region(const method_delegation* replayed, const region_report& candidate,
                                            std::vector<bool>& matched) {
  if (!replayed) return nullptr;
  matched.resize(replayed->regions.size(), false);
  for (std::size_t i = 0; i < replayed->regions.size(); ++i) {
    const region_report& region = replayed->regions[i];
    if (!matched[i] && region.backend == candidate.backend && region.kinds == candidate.kinds &&
        region.node_count == candidate.node_count && region.location == candidate.location && region.depth == candidate.depth) {
      matched[i] = true;
      return &region;
    }
  }
  return nullptr;
}

// partition_options::replay: a candidate region goes to its backend if and only if the replayed
// report's method has it (replayed_region; its times are copied). Nothing is timed.
class replaying_decider final : public region_decider {
 public:
  explicit replaying_decider(const delegation_report& replay) : replay_(replay) {}

  void begin_method(const torch::jit::Module&, const std::string& method, const std::shared_ptr<torch::jit::Graph>&) override {
    replayed_ = nullptr;
    for (const method_delegation& earlier : replay_.methods)
      if (earlier.method == method) replayed_ = &earlier;
    matched_.clear();
  }

  std::vector<region_decision> decide(candidate_regions& candidates) override {
    std::vector<region_decision> decisions(candidates.regions.size());
    const std::string backend_name(candidates.backend.name());
    for (std::size_t i = 0; i < candidates.regions.size(); ++i) {
      region_report& candidate = candidates.reports[i];
      if (const region_report* earlier = replayed_region(replayed_, candidate, matched_)) {
        candidate.backend_ms = earlier->backend_ms;
        candidate.torchscript_ms = earlier->torchscript_ms;
        continue;
      }
      region_decision& kept = decisions[i];
      kept = {false, kept_reason::slower_on_backend, "not delegated in the replayed plan"};
      // A region the replayed report kept as slower or as gaining too little on this backend
      // (measured, or dropped by the method's check) keeps that reason and its figures. A kept
      // node without per-backend reasons (made by hand) counts for any.
      auto measured = [](kept_reason r) { return r == kept_reason::slower_on_backend || r == kept_reason::gain_below_minimum; };
      for (const kept_node& earlier : replayed_ ? replayed_->kept : std::vector<kept_node>{}) {
        if (candidate.kinds.empty() || earlier.kind != candidate.kinds.front() || earlier.location != candidate.location)
          continue;
        const backend_reason* own = nullptr;
        for (const backend_reason& each : earlier.per_backend)
          if (each.backend == backend_name && measured(each.reason)) own = &each;
        if (own || (earlier.per_backend.empty() && measured(earlier.reason))) {
          kept.detail = own ? own->detail : earlier.detail;
          kept.reason = own ? own->reason : earlier.reason;
          break;
        }
      }
    }
    return decisions;
  }

 private:
  const delegation_report& replay_;
  const method_delegation* replayed_ = nullptr;  // the replayed report's entry of the current method
  std::vector<bool> matched_;                    // its regions already paired with a candidate
};

// partition_options::measure: each candidate region of a method with example inputs is timed on
// its backend and as TorchScript and goes to its backend where that is faster; then the winners
// that save least stay in TorchScript while, together, they save less than min_gain of the method
// (one region saving too little alone counts; many small ones that add up, as ShuffleNetV2's
// branches, are delegated). A region that cannot be timed (in an if or loop body) goes by the
// rules, as do the regions of a method without example inputs.
class measured_decider final : public region_decider {
 public:
  measured_decider(const partition_options& options, const std::vector<c10::impl::GenericDict>* specs, timing_source& timing)
      : options_(options), specs_(specs), timing_(timing) {}

  void begin_method(const torch::jit::Module& module, const std::string& method,
                    const std::shared_ptr<torch::jit::Graph>& graph) override {
    module_ = &module;
    graph_ = graph;
    const auto examples = options_.example_inputs.find(method);
    inputs_ = examples == options_.example_inputs.end() ? nullptr : &examples->second;
    values_.reset();
    whole_ms_ = -1;
  }

  std::vector<region_decision> decide(candidate_regions& candidates) override {
    std::vector<region_decision> decisions(candidates.regions.size());
    if (!inputs_) return decisions;
    const c10::impl::GenericDict none(c10::StringType::get(), c10::AnyType::get());
    const c10::impl::GenericDict& spec_by_method = specs_ ? (*specs_)[candidates.position] : none;
    std::vector<std::size_t> winners;  // faster on the backend
    for (std::size_t i = 0; i < candidates.regions.size(); ++i) {
      region_report& candidate = candidates.reports[i];
      if (!values_) values_ = example_values(*module_, graph_, *inputs_);  // once per method, when needed
      const std::optional<region_timing> timing = timing_.region_ms(
          {candidates.backend, *module_, candidates.method, candidates.regions[i], candidate.name, *values_, spec_by_method});
      if (!timing) continue;
      candidate.backend_ms = timing->backend_ms;
      candidate.torchscript_ms = timing->torchscript_ms;
      if (timing->backend_ms > timing->torchscript_ms)
        decisions[i] = {false, kept_reason::slower_on_backend, timing_text(candidate)};
      else
        winners.push_back(i);
    }
    if (options_.min_gain > 0 && !winners.empty()) keep_least_gains(candidates, winners, decisions);
    return decisions;
  }

 private:
  // min_gain: the winners that save least, kept while together they save less than min_gain of
  // the method (timed whole once per method, when needed).
  void keep_least_gains(const candidate_regions& candidates, std::vector<std::size_t>& winners,
                        std::vector<region_decision>& decisions) {
    const std::string& method = candidates.method;
    if (whole_ms_ < 0) whole_ms_ = timing_.method_ms(*module_, method, *inputs_);
    auto saved = [&](std::size_t i) { return candidates.reports[i].torchscript_ms - candidates.reports[i].backend_ms; };
    std::stable_sort(winners.begin(), winners.end(), [&](std::size_t a, std::size_t b) { return saved(a) < saved(b); });
    double together = 0;
    std::size_t least = 0;
    while (least < winners.size() && together + saved(winners[least]) < options_.min_gain * whole_ms_)
      together += saved(winners[least++]);
    for (std::size_t w = 0; w < least; ++w) {
      const std::size_t i = winners[w];
      std::ostringstream text;
      text.precision(3);
      text << timing_text(candidates.reports[i]) << ": saves " << saved(i) << " ms";
      if (least > 1) text << "; the " << least << " regions that save least save " << together << " ms together";
      text << ", less than " << 100 * options_.min_gain << " % of " << method << " (" << whole_ms_ << " ms, min_gain)";
      decisions[i] = {false, kept_reason::gain_below_minimum, text.str()};
    }
  }

  const partition_options& options_;
  const std::vector<c10::impl::GenericDict>* specs_;  // nullptr: default options (a plan)
  timing_source& timing_;
  const torch::jit::Module* module_ = nullptr;        // the current method's
  std::shared_ptr<torch::jit::Graph> graph_;
  const std::vector<c10::IValue>* inputs_ = nullptr;  // its example inputs; nullptr: not measured
  std::optional<example_value_map> values_;           // example_values, computed once, when needed
  double whole_ms_ = -1;                              // the original method's time, measured once, when needed
};

TORCH_DELEGATE_INTERNAL std::unique_ptr<region_decider> decider_for(const partition_options& options,
                                                                    const std::vector<c10::impl::GenericDict>* specs,
                                                                    timing_source& timing) {
  if (options.replay) return std::make_unique<replaying_decider>(*options.replay);
  if (options.measure) return std::make_unique<measured_decider>(options, specs, timing);
  return std::make_unique<rule_decider>();
}

// The method's check of a measured partition. Regions are timed one at a time; what counts is
// the method, where they also pay for what their neighbours leave behind (and the neighbours for
// them). Each method with example inputs is timed whole, original against lowered; while the
// lowered one is slower than 1.02x the original, the delegated regions of the smallest measured
// gain (half of them, at least one) are taken out and the module is lowered again, replaying
// the rest. A region taken out is kept with kept_reason::slower_on_backend and both methods'
// times.
inline torch::jit::Module checked_whole(const backend_list& backends, const torch::jit::Module& module,
                                        const partition_options& options, const std::vector<c10::impl::GenericDict>& specs,
                                        timing_source& timing, torch::jit::Module lowered) {
  std::optional<delegation_report> report = delegation_report_data_of(lowered);
  if (!report) return lowered;
  for (const auto& example : options.example_inputs) {
    const std::string& method = example.first;
    const std::vector<c10::IValue> arguments(example.second.begin(), example.second.end());
    for (std::size_t previous = std::numeric_limits<std::size_t>::max();;) {
      auto entry = std::find_if(report->methods.begin(), report->methods.end(),
                                [&](const method_delegation& m) { return m.method == method; });
      // Stop when nothing is left to take out, or when taking out did not reduce the regions.
      if (entry == report->methods.end() || entry->regions.empty() || entry->regions.size() >= previous) break;
      previous = entry->regions.size();
      const std::vector<double> medians = timing.methods_ms({&module, &lowered}, method, arguments);
      const double original_ms = medians[0], lowered_ms = medians[1];
      if (lowered_ms <= 1.02 * original_ms) break;
      // Smallest gain first; a region not measured (in an if or loop body) counts as no gain.
      std::vector<std::size_t> order(entry->regions.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      auto gain = [&](std::size_t i) {
        const region_report& r = entry->regions[i];
        return r.backend_ms > 0 && r.torchscript_ms >= 0 ? r.torchscript_ms / r.backend_ms : 1.0;
      };
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return gain(x) < gain(y); });
      const std::size_t dropped = std::max<std::size_t>(1, order.size() / 2);
      std::ostringstream why;
      why.precision(3);
      why << "slower in the method: " << method << " took " << lowered_ms << " ms lowered, " << original_ms
          << " ms as TorchScript; the regions of least measured gain are kept";
      std::vector<bool> drop(entry->regions.size(), false);
      for (std::size_t i = 0; i < dropped; ++i) drop[order[i]] = true;
      std::vector<region_report> remaining;
      for (std::size_t i = 0; i < entry->regions.size(); ++i) {
        region_report& r = entry->regions[i];
        if (!drop[i]) {
          remaining.push_back(std::move(r));
          continue;
        }
        std::ostringstream detail;
        detail.precision(3);
        detail << why.str();
        if (r.backend_ms >= 0) detail << " (alone: " << timing_text(r) << ")";
        entry->kept.push_back({r.kinds.empty() ? std::string() : r.kinds.front(), kept_reason::slower_on_backend, detail.str(),
                               r.location, r.depth, r.submodule, {{r.backend, kept_reason::slower_on_backend, detail.str()}}});
      }
      entry->regions = std::move(remaining);
      partition_options again = options;
      again.measure = false;
      again.replay = *report;
      lowered = lower_partitioned(backends, module, again, specs, *decider_for(again, &specs, timing));
      report = delegation_report_data_of(lowered);
      if (!report) break;
    }
  }
  return lowered;
}

TORCH_DELEGATE_INTERNAL torch::jit::Module tune_lowered(const backend_list& backends, const torch::jit::Module& module,
                                                        const partition_options& options,
                                                        const std::vector<c10::impl::GenericDict>& specs,
                                                        timing_source& timing, torch::jit::Module lowered) {
  if (!options.measure || options.replay || options.example_inputs.empty()) return lowered;
  lowered = checked_whole(backends, module, options, specs, timing, std::move(lowered));
  if (!options.choose_order || backends.size() < 2) return lowered;
  // The list's order against each other backend first (the rest in the list's order), and each
  // backend alone where that gave other backends regions too: each measured and checked as above,
  // then all timed whole, side by side.
  std::vector<torch::jit::Module> candidates{std::move(lowered)};
  for (std::size_t first = 1; first < backends.size(); ++first) {
    backend_list order{backends[first]};
    std::vector<c10::impl::GenericDict> order_specs{specs[first]};
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (k != first) {
        order.push_back(backends[k]);
        order_specs.push_back(specs[k]);
      }
    candidates.push_back(checked_whole(order, module, options, order_specs, timing,
                                       lower_partitioned(order, module, options, order_specs,
                                                         *decider_for(options, &order_specs, timing))));
  }
  // Each backend alone, where its lowering first in the list gave regions to others too: regions
  // measured faster one by one can be slower together (ShuffleNetV2 on AVX2: onednn's branches
  // beside xnnpack's, one backend's threads waiting while the other's OpenMP threads spin down).
  const std::size_t orders = candidates.size();  // candidate k has backends[k] first
  for (std::size_t k = 0; k < orders; ++k) {
    const std::optional<delegation_report> report = delegation_report_data_of(candidates[k]);
    if (!report) continue;
    const bool mixed = std::any_of(report->methods.begin(), report->methods.end(), [&](const method_delegation& method) {
      return std::any_of(method.regions.begin(), method.regions.end(),
                         [&](const region_report& region) { return region.backend != backends[k]->name(); });
    });
    if (!mixed) continue;
    const backend_list alone{backends[k]};
    const std::vector<c10::impl::GenericDict> alone_specs{specs[k]};
    candidates.push_back(checked_whole(alone, module, options, alone_specs, timing,
                                       lower_partitioned(alone, module, options, alone_specs,
                                                         *decider_for(options, &alone_specs, timing))));
  }
  std::vector<const torch::jit::Module*> timed;
  for (const torch::jit::Module& candidate : candidates) timed.push_back(&candidate);
  std::vector<double> total(candidates.size(), 0.0);
  for (const auto& [method, inputs] : options.example_inputs) {
    const std::vector<double> medians = timing.methods_ms(timed, method, inputs);
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += medians[i];
  }
  // The list's own order unless another is faster by more than 2 %.
  const std::size_t fastest = static_cast<std::size_t>(std::min_element(total.begin(), total.end()) - total.begin());
  return std::move(candidates[total[0] <= 1.02 * total[fastest] ? 0 : fastest]);
}

}  // namespace torch_delegate::detail
