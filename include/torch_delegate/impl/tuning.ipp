// Definitions for detail/tuning.hpp, the policy: the measured and replayed deciders and the
// method's check of a measured lowering. (choose_order and a measured lowering through the timing
// cache: tuning_lowering.ipp; the clock and the cache in front of it: tuning_timing.ipp.)
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <unordered_set>

namespace torch_delegate::detail {

// "0.0412 ms on xnnpack, 0.0275 ms in TorchScript"
inline std::string timing_text(const region_report& region) {
  std::ostringstream text;
  text.precision(3);
  text << region.backend_ms << " ms on " << region.backend << ", " << region.torchscript_ms << " ms in TorchScript";
  return text.str();
}

// "faster on onednn: 12 of 12 rounds by more than 3 %, sign test p = 0.00049": how `compared`
// decided between `first` and `second` ("on onednn", "in TorchScript"), for a report.
inline std::string verdict_text(const paired_comparison& compared, const sampling_rule& rule, const std::string& first,
                                const std::string& second) {
  std::ostringstream text;
  text.precision(2);
  const double margin = 100 * rule.margin;
  if (not_timed_at_all(compared)) return "not measured: too little of measure_time_limit_s was left";
  if (compared.out_of_time) {
    text << "not separable when measure_time_limit_s was spent: of " << compared.rounds << " rounds, " << compared.first_wins
         << " faster " << first << " and " << compared.second_wins << " faster " << second << " by more than " << margin << " %";
    return text.str();
  }
  if (compared.verdict == separation::not_separable) {
    text << "not separable: of " << compared.rounds << " rounds, " << compared.first_wins << " faster " << first << " and "
         << compared.second_wins << " faster " << second << " by more than " << margin << " %, sign test p = " << compared.p_value;
    return text.str();
  }
  const bool first_won = compared.verdict == separation::first_faster;
  text << "faster " << (first_won ? first : second) << ": " << (first_won ? compared.first_wins : compared.second_wins) << " of "
       << compared.rounds << " rounds by more than " << margin << " % (" << (first_won ? compared.second_wins : compared.first_wins)
       << " the other way), " << (separated_early(compared, rule) ? "t test on the log ratios" : "sign test") << " p = "
       << compared.p_value;
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
        candidate.decision = earlier->decision;
        continue;
      }
      region_decision& kept = decisions[i];
      kept = {false, kept_reason::slower_on_backend, "not delegated in the replayed plan"};
      // A region the replayed report kept as slower, as gaining too little or as not separable
      // on this backend (measured, or dropped by the method's check) keeps that reason and its
      // figures. A kept node without per-backend reasons (made by hand) counts for any.
      auto measured = [](kept_reason r) {
        return r == kept_reason::slower_on_backend || r == kept_reason::gain_below_minimum || r == kept_reason::not_separable;
      };
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
// its backend and as TorchScript (in rounds, until they separate: region_rule) and goes to its
// backend where that is faster beyond the spread, stays in TorchScript where it is slower beyond
// it; where the two do not separate, the timing decides nothing and the rules do: the region goes
// to its backend, as the list's order says (and as an unmeasured lowering gives it). The report
// says which. Then the winners (faster beyond the spread) that save least stay in TorchScript
// while, together, they save less than min_gain of the method (one region saving too little alone
// counts; many small ones that add up, as ShuffleNetV2's branches, are delegated). A region that cannot be
// timed (in an if or loop body) goes by the rules, as do the regions of a method without example
// inputs. In an order choose_order tries with a backend put first (`promoted`, decider_for), the
// list's order is still what decides a region that does not separate: the promoted backend does
// not take it, nor does a backend the list gives after it when the promoted one refused one of
// its nodes (kept_reason::not_separable); the backends listed before it do.
class measured_decider final : public region_decider {
 public:
  measured_decider(const partition_options& options, const std::vector<c10::impl::GenericDict>* specs, timing_source& timing,
                   const promotion* promoted)
      : options_(options), specs_(specs), timing_(timing), promoted_(promoted) {}

  void begin_method(const torch::jit::Module& module, const std::string& method,
                    const std::shared_ptr<torch::jit::Graph>& graph) override {
    module_ = &module;
    graph_ = graph;
    const auto examples = options_.example_inputs.find(method);
    inputs_ = examples == options_.example_inputs.end() ? nullptr : &examples->second;
    values_.reset();
    whole_ms_ = -1;
    refused_.clear();
  }

  std::vector<region_decision> decide(candidate_regions& candidates) override {
    std::vector<region_decision> decisions(candidates.regions.size());
    if (!inputs_) return decisions;
    const c10::impl::GenericDict none(c10::StringType::get(), c10::AnyType::get());
    const c10::impl::GenericDict& spec_by_method = specs_ ? (*specs_)[candidates.position] : none;
    const std::string backend_name(candidates.backend.name());
    std::vector<std::size_t> winners;  // faster on the backend, beyond the spread
    for (std::size_t i = 0; i < candidates.regions.size(); ++i) {
      region_report& candidate = candidates.reports[i];
      timing_.progress("timing", "region " + std::to_string(i + 1) + " of " + std::to_string(candidates.regions.size()) + " on " +
                                     backend_name + " (" + std::to_string(candidate.node_count) + " nodes)");
      if (!values_) values_ = example_values(*module_, graph_, *inputs_);  // once per method, when needed
      const region_to_time what{candidates.backend, *module_, candidates.method, candidates.regions[i], candidate.name, *values_,
                                spec_by_method};
      if (const std::optional<std::string> why = not_faster_than_the_list(what)) {
        decisions[i] = {false, kept_reason::not_separable, *why};
        continue;  // its time in TorchScript would decide nothing
      }
      const std::optional<region_timing> timing = timing_.region_ms(what);
      if (!timing) continue;
      if (not_timed_at_all(timing->compared)) {
        // Nothing timed (the time limit was spent before it): the rules decide, no times reported.
        const std::string evidence = verdict_text(timing->compared, region_rule, "on " + backend_name, "in TorchScript");
        if (const std::optional<std::string> why = not_by_the_list(backend_name, candidates.regions[i]))
          decisions[i] = {false, kept_reason::not_separable, evidence + "; " + *why};
        else
          candidate.decision = evidence + "; delegated, as the list's order says";
        continue;
      }
      candidate.backend_ms = timing->backend_ms;
      candidate.torchscript_ms = timing->torchscript_ms;
      const std::string evidence =
          verdict_text(timing->compared, region_rule, "on " + backend_name, "in TorchScript") + (timing->cached ? " (cached)" : "");
      switch (timing->compared.verdict) {
        case separation::first_faster:
          candidate.decision = evidence;
          winners.push_back(i);
          break;
        case separation::second_faster:
          decisions[i] = {false, kept_reason::slower_on_backend, timing_text(candidate) + "; " + evidence};
          break;
        case separation::not_separable:
          // The timing decides nothing: the rules do (the list's order gives the region to this
          // backend, as an unmeasured lowering would). min_gain weighs measured gains only.
          if (const std::optional<std::string> why = not_by_the_list(backend_name, candidates.regions[i]))
            decisions[i] = {false, kept_reason::not_separable, timing_text(candidate) + "; " + evidence + "; " + *why};
          else
            candidate.decision = evidence + "; delegated, as the list's order says";
          break;
      }
    }
    if (options_.min_gain > 0 && !winners.empty()) keep_least_gains(candidates, winners, decisions);
    return decisions;
  }

 private:
  // Why the promoted backend does not take `what`'s region: it is not faster on it beyond the
  // spread than the first backend listed before it that supports each of its nodes (the one the
  // list's order offers them to first), the region lowered alone on each. Timed before the region
  // against TorchScript, which then decides nothing: the promoted backend's regions inside the
  // list's own partition (DenseNet-121's 63 dense layers on xnnpack, each faster than
  // TorchScript, timed against it for 22 s, then onednn's fill-in regions and the two orders
  // compared, to lose to onednn's one region) are timed against short calls and leave that
  // partition as it is. nullopt where it may take it (TorchScript decides), or where nothing listed
  // before it runs the region (or lowers it alone).
  std::optional<std::string> not_faster_than_the_list(const region_to_time& what) {
    if (!promoted_ || what.backend.name() != promoted_->backend) return std::nullopt;
    for (const auto& [before, spec] : promoted_->listed_before) {
      const auto supports = before->partition.supports;
      if (!supports || !std::all_of(what.formed.nodes.begin(), what.formed.nodes.end(),
                                    [&](const torch::jit::Node* node) { return supports(node); }))
        continue;
      const std::optional<region_timing> against = timing_.region_against(what, *before, spec);
      if (!against || against->compared.verdict == separation::first_faster) return std::nullopt;
      refused_.insert(what.formed.nodes.begin(), what.formed.nodes.end());
      const std::string mine = "on " + promoted_->backend, theirs = "on " + std::string(before->name());
      std::ostringstream text;
      text.precision(3);
      if (not_timed_at_all(against->compared)) {
        text << "not taken: " << promoted_->backend << ", put first by choose_order, takes only regions measured faster than on "
             << before->name() << ", which the list's order offers it to first; "
             << verdict_text(against->compared, region_rule, mine, theirs);
        return text.str();
      }
      text << "not taken: " << promoted_->backend << ", put first by choose_order, is not faster on it beyond the spread than "
           << before->name() << ", which the list's order offers it to first (" << against->backend_ms << " ms against "
           << against->torchscript_ms << "; " << verdict_text(against->compared, region_rule, mine, theirs)
           << (against->cached ? ", cached" : "") << ")";
      return text.str();
    }
    return std::nullopt;
  }

  // Why the list's order does not give `formed`, not separable on `backend`, to it in an order
  // with a promoted backend (the decider's comment), or nullopt where it does.
  std::optional<std::string> not_by_the_list(const std::string& backend, const region& formed) {
    if (!promoted_) return std::nullopt;
    if (backend == promoted_->backend) {
      refused_.insert(formed.nodes.begin(), formed.nodes.end());
      return "not taken: " + backend + ", put first by choose_order, takes only regions it runs faster beyond the spread";
    }
    if (promoted_->listed_after.count(backend) &&
        std::any_of(formed.nodes.begin(), formed.nodes.end(), [&](const torch::jit::Node* node) { return refused_.count(node); }))
      return "not taken: the list's order gives it to " + promoted_->backend + " before " + backend +
             ", which did not take it when put first by choose_order";
    return std::nullopt;
  }

  // min_gain (least_gains): the winners that save least, kept while together they save less than
  // min_gain of the method (timed whole once per method, when needed).
  void keep_least_gains(const candidate_regions& candidates, std::vector<std::size_t>& winners,
                        std::vector<region_decision>& decisions) {
    const std::string& method = candidates.method;
    if (whole_ms_ < 0) whole_ms_ = timing_.method_ms(*module_, method, *inputs_);
    if (whole_ms_ < 0) return;  // no room for it in the time limit: the winners go to their backend
    auto saved = [&](std::size_t i) { return candidates.reports[i].torchscript_ms - candidates.reports[i].backend_ms; };
    std::stable_sort(winners.begin(), winners.end(), [&](std::size_t a, std::size_t b) { return saved(a) < saved(b); });
    std::vector<region_times> times;
    for (const std::size_t i : winners) times.push_back({candidates.reports[i].torchscript_ms, candidates.reports[i].backend_ms});
    const min_gain_verdict verdict = least_gains(times, whole_ms_, options_.min_gain);
    const std::size_t least = verdict.kept;
    const double together = verdict.saved_together, whole_ms = verdict.method_ms;
    for (std::size_t w = 0; w < least; ++w) {
      const std::size_t i = winners[w];
      std::ostringstream text;
      text.precision(3);
      text << timing_text(candidates.reports[i]) << ": saves " << saved(i) << " ms";
      if (least > 1) text << "; the " << least << " regions that save least save " << together << " ms together";
      text << ", less than " << 100 * options_.min_gain << " % of " << method << " (" << whole_ms << " ms, min_gain)";
      decisions[i] = {false, kept_reason::gain_below_minimum, text.str()};
    }
  }

  const partition_options& options_;
  const std::vector<c10::impl::GenericDict>* specs_;  // nullptr: default options (a plan)
  timing_source& timing_;
  const promotion* promoted_;                         // an order of choose_order: its promoted backend
  std::unordered_set<const torch::jit::Node*> refused_;  // nodes of the current method the promoted backend did not take
  const torch::jit::Module* module_ = nullptr;        // the current method's
  std::shared_ptr<torch::jit::Graph> graph_;
  const std::vector<c10::IValue>* inputs_ = nullptr;  // its example inputs; nullptr: not measured
  std::optional<example_value_map> values_;           // example_values, computed once, when needed
  double whole_ms_ = -1;                              // the original method's time, measured once, when needed
};

TORCH_DELEGATE_INTERNAL std::unique_ptr<region_decider> decider_for(const partition_options& options,
                                                                    const std::vector<c10::impl::GenericDict>* specs,
                                                                    timing_source& timing, const promotion* promoted) {
  if (options.replay) return std::make_unique<replaying_decider>(*options.replay);
  if (options.measure) return std::make_unique<measured_decider>(options, specs, timing, promoted);
  return std::make_unique<rule_decider>();
}

// The method's check of a measured partition. Regions are timed one at a time; what counts is
// the method, where they also pay for what their neighbours leave behind (and the neighbours for
// them). Each method with example inputs is timed whole, original against lowered (method_rule);
// while the lowered one is slower beyond the spread, the delegated regions of the smallest
// measured gain (half of them, at least one) are taken out and the module is lowered again,
// replaying the rest. A region taken out is kept with kept_reason::slower_on_backend and both
// methods' times.
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
      // One measured region: its rounds against its own TorchScript (faster beyond the spread, or
      // not separable and delegated by the list's order) were the method's comparison already.
      // What the check finds, regions fast alone and slow together, takes two; timing the method
      // again would only draw the same comparison's noise once more (on a loaded machine, 8 to
      // 16 rounds of the whole model).
      if (entry->regions.size() == 1 && entry->regions[0].backend_ms >= 0 && entry->regions[0].torchscript_ms >= 0) break;
      if (timing.out_of_time()) {
        timing.progress("checking", method + " whole: not checked, measure_time_limit_s was spent");
        break;
      }
      timing.progress("checking", method + " whole, lowered (" + std::to_string(entry->regions.size()) +
                                      " regions) against the original");
      const paired_comparison compared = timing.compare_methods(module, lowered, method, arguments);
      if (compared.verdict != separation::first_faster) break;  // not slower beyond the spread
      const double original_ms = compared.first_ms, lowered_ms = compared.second_ms;
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
      const std::string evidence = verdict_text(compared, method_rule, "as TorchScript", "lowered");
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
        detail << "; the method " << evidence;
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

}  // namespace torch_delegate::detail
