// Definitions for detail/tuning.hpp, the policy: the measured and replayed deciders, the method's
// check of a measured lowering, choose_order, and a measured lowering through the timing cache.
// (The clock and the cache in front of it: tuning_timing.ipp.)
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/report_format.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

#include <torch/csrc/jit/serialization/pickle.h>

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
  if (compared.verdict == separation::not_separable) {
    text << "not separable: of " << compared.rounds << " rounds, " << compared.first_wins << " faster " << first << " and "
         << compared.second_wins << " faster " << second << " by more than " << margin << " %, sign test p = " << compared.p_value;
    return text.str();
  }
  const bool first_won = compared.verdict == separation::first_faster;
  text << "faster " << (first_won ? first : second) << ": " << (first_won ? compared.first_wins : compared.second_wins) << " of "
       << compared.rounds << " rounds by more than " << margin << " % (" << (first_won ? compared.second_wins : compared.first_wins)
       << " the other way), sign test p = " << compared.p_value;
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
// its backend and as TorchScript (in rounds, until they separate: region_rule) and goes to its
// backend where that is faster beyond the spread, stays in TorchScript where it is slower beyond
// it; where the two do not separate, its gain is not established: with a min_gain it stays
// (gain below the minimum, offered to the next backend), with min_gain 0 the rules decide (to its
// backend: the list's order). The report says which. Then the winners that save least stay in TorchScript while, together,
// they save less than min_gain of the method (one region saving too little alone counts; many
// small ones that add up, as ShuffleNetV2's branches, are delegated). A region that cannot be
// timed (in an if or loop body) goes by the rules, as do the regions of a method without example
// inputs.
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
    const std::string backend_name(candidates.backend.name());
    std::vector<std::size_t> winners;  // faster on the backend, beyond the spread
    for (std::size_t i = 0; i < candidates.regions.size(); ++i) {
      region_report& candidate = candidates.reports[i];
      timing_.progress("timing", "region " + std::to_string(i + 1) + " of " + std::to_string(candidates.regions.size()) + " on " +
                                     backend_name + " (" + std::to_string(candidate.node_count) + " nodes)");
      if (!values_) values_ = example_values(*module_, graph_, *inputs_);  // once per method, when needed
      const std::optional<region_timing> timing = timing_.region_ms(
          {candidates.backend, *module_, candidates.method, candidates.regions[i], candidate.name, *values_, spec_by_method});
      if (!timing) continue;
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
          // No gain beyond the spread: with a min_gain, none worth a boundary; without, the rules.
          if (options_.min_gain > 0)
            decisions[i] = {false, kept_reason::gain_below_minimum,
                            timing_text(candidate) + "; " + evidence + ": no gain beyond the spread (min_gain)"};
          else
            candidate.decision = evidence + "; delegated, as the list's order says";
          break;
      }
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
      // One region, measured faster beyond the spread against its own TorchScript: that was the
      // method's comparison already (what the check finds, regions fast alone and slow together,
      // takes two).
      if (entry->regions.size() == 1 && entry->regions[0].decision.rfind("faster on ", 0) == 0) break;
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

// "onednn, xnnpack": the names of `backends`, in order.
inline std::string order_text(const backend_list& backends) {
  std::string text;
  for (const backend_lowering* backend : backends) text += (text.empty() ? "" : ", ") + std::string(backend->name());
  return text;
}

// What share of their TorchScript time a lowering's regions save, by their own times (each
// region's two times are paired, taken side by side; two regions' are not, and on a loaded machine
// the TorchScript time of one can be twice the other's: shares compare, milliseconds do not), or
// nullopt when one was not measured or none was delegated.
inline std::optional<double> measured_saving(const torch::jit::Module& lowered) {
  const std::optional<delegation_report> report = delegation_report_data_of(lowered);
  if (!report) return std::nullopt;
  double saved = 0, spent = 0;
  for (const method_delegation& method : report->methods)
    for (const region_report& region : method.regions) {
      if (region.backend_ms < 0 || region.torchscript_ms <= 0) return std::nullopt;
      saved += 1.0 - region.backend_ms / region.torchscript_ms;
      spent += 1.0;
    }
  if (spent == 0) return std::nullopt;
  return saved / spent;
}

// The partition of a lowering, to tell two that are the same: each region's backend, kinds, size
// and place.
inline std::string partition_signature(const torch::jit::Module& lowered) {
  std::ostringstream text;
  if (const std::optional<delegation_report> report = delegation_report_data_of(lowered))
    for (const method_delegation& method : report->methods) {
      text << method.method << ":";
      for (const region_report& region : method.regions) {
        text << region.backend << "/" << region.node_count << "/" << region.location << "/" << region.depth << "/";
        for (const std::string& kind : region.kinds) text << kind << ",";
        text << ";";
      }
    }
  return text.str();
}

TORCH_DELEGATE_INTERNAL torch::jit::Module tune_lowered(const backend_list& backends, const torch::jit::Module& module,
                                                        const partition_options& options,
                                                        const std::vector<c10::impl::GenericDict>& specs,
                                                        timing_source& timing, torch::jit::Module lowered) {
  if (!options.measure || options.replay || options.example_inputs.empty()) return lowered;
  const bool choosing = options.choose_order && backends.size() > 1;
  std::size_t steps = choosing ? backends.size() : 1;
  timing.lowering_step(0, steps, choosing ? "lowering 1 of " + std::to_string(steps) + " (" + order_text(backends) + ")" : "");
  lowered = checked_whole(backends, module, options, specs, timing, std::move(lowered));
  if (!choosing) return lowered;
  // The list's order against each other backend first (the rest in the list's order), and each
  // backend alone where that gave other backends regions too. Each is partitioned by measured
  // decisions (regions alike to ones already timed, the same backend, graph and shapes, are not
  // timed again), then: the same partition as an earlier lowering is dropped; one whose regions
  // save, by their own times, less than half the share of their TorchScript time that the best
  // of the others saves is dropped (it cannot win by the method's noise); the rest are checked
  // whole and compared.
  struct candidate {
    torch::jit::Module lowered;
    std::string order;
    bool kept;
  };
  std::vector<candidate> candidates{{std::move(lowered), order_text(backends), true}};
  std::vector<std::string> signatures{partition_signature(candidates[0].lowered)};
  double best_saving = measured_saving(candidates[0].lowered).value_or(0.0);
  auto lower_and_check = [&](const backend_list& order, const std::vector<c10::impl::GenericDict>& order_specs) {
    timing.lowering_step(candidates.size(), steps,
                         "lowering " + std::to_string(candidates.size() + 1) + " of " + std::to_string(steps) + " (" +
                             order_text(order) + ")");
    torch::jit::Module made = lower_partitioned(order, module, options, order_specs, *decider_for(options, &order_specs, timing));
    const std::string signature = partition_signature(made);
    const std::optional<double> saving = measured_saving(made);
    const auto same = std::find(signatures.begin(), signatures.end(), signature);
    const bool repeated = same != signatures.end(), saves_little = saving && *saving < 0.5 * best_saving;
    const bool kept = !repeated && !saves_little;
    if (repeated)
      timing.progress("choosing", "not compared: the same partition as (" +
                                      candidates[static_cast<std::size_t>(same - signatures.begin())].order + ")");
    else if (saves_little)
      timing.progress("choosing", "not compared: its regions save " + std::to_string(static_cast<int>(100 * *saving)) +
                                      " % of their TorchScript time, less than half of the best so far (" +
                                      std::to_string(static_cast<int>(100 * best_saving)) + " %)");
    signatures.push_back(signature);
    if (kept) {
      made = checked_whole(order, module, options, order_specs, timing, std::move(made));
      if (saving) best_saving = std::max(best_saving, *saving);
    }
    candidates.push_back({std::move(made), order_text(order), kept});
  };
  for (std::size_t first = 1; first < backends.size(); ++first) {
    backend_list order{backends[first]};
    std::vector<c10::impl::GenericDict> order_specs{specs[first]};
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (k != first) {
        order.push_back(backends[k]);
        order_specs.push_back(specs[k]);
      }
    lower_and_check(order, order_specs);
  }
  // Each backend alone, where its lowering first in the list gave regions to others too: regions
  // measured faster one by one can be slower together (ShuffleNetV2 on AVX2: onednn's branches
  // beside xnnpack's, one backend's threads waiting while the other's OpenMP threads spin down).
  const std::size_t orders = candidates.size();  // candidate k has backends[k] first
  std::vector<std::size_t> mixed;
  for (std::size_t k = 0; k < orders; ++k) {
    const std::optional<delegation_report> report = delegation_report_data_of(candidates[k].lowered);
    if (!report || !candidates[k].kept) continue;
    if (std::any_of(report->methods.begin(), report->methods.end(), [&](const method_delegation& method) {
          return std::any_of(method.regions.begin(), method.regions.end(),
                             [&](const region_report& region) { return region.backend != backends[k]->name(); });
        }))
      mixed.push_back(k);
  }
  steps += mixed.size();
  for (const std::size_t k : mixed) lower_and_check({backends[k]}, {specs[k]});
  // Side by side, two at a time: a lowering replaces the best so far only where it is faster
  // beyond the spread in a method and slower beyond it in none (method_rule), so that where they
  // do not separate the list's order stays, whatever the noise.
  timing.lowering_step(steps, steps, "");
  std::size_t best = 0;
  for (std::size_t k = 1; k < candidates.size(); ++k) {
    if (!candidates[k].kept) continue;
    bool faster = false, slower = false;
    for (const auto& [method, inputs] : options.example_inputs) {
      timing.progress("choosing", method + ": (" + candidates[k].order + ") against (" + candidates[best].order + ")");
      const paired_comparison compared = timing.compare_methods(candidates[best].lowered, candidates[k].lowered, method, inputs);
      timing.progress("choosing", method + ": " +
                                      verdict_text(compared, method_rule, "with (" + candidates[best].order + ")",
                                                   "with (" + candidates[k].order + ")"));
      faster |= compared.verdict == separation::second_faster;
      slower |= compared.verdict == separation::first_faster;
    }
    if (faster && !slower) best = k;
  }
  return std::move(candidates[best].lowered);
}

// The version of the decision logic, in every lowering key: a change to how decisions are made
// must not reuse decisions made the old way.
inline constexpr int tuning_logic_version = 1;

// The delegation report as a cache payload (timing_cache.hpp): pickled, in hex.
inline std::string report_payload(const delegation_report& report) {
  const std::vector<char> bytes = torch::jit::pickle_save(encode_report(report));
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * bytes.size());
  for (const char byte : bytes) {
    const auto b = static_cast<unsigned char>(byte);
    text.push_back(digits[b >> 4]);
    text.push_back(digits[b & 15]);
  }
  return text;
}

inline std::optional<delegation_report> report_of_payload(const std::string& payload) {
  if (payload.size() % 2) return std::nullopt;
  std::vector<char> bytes(payload.size() / 2);
  const auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int high = nibble(payload[2 * i]), low = nibble(payload[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<char>(high * 16 + low);
  }
  try {
    return decode_report(torch::jit::pickle_load(bytes));
  } catch (const std::exception&) {
    return std::nullopt;  // the CRC matched, but not a report this build reads
  }
}

TORCH_DELEGATE_INTERNAL std::string lowering_key(const backend_list& backends, const torch::jit::Module& module,
                                                 const partition_options& options,
                                                 const std::vector<c10::impl::GenericDict>& specs) {
  std::ostringstream key;
  key << "lowering-key " << tuning_logic_version << ";backends:";
  for (std::size_t k = 0; k < backends.size(); ++k) {
    key << backends[k]->name() << "/" << backends[k]->payload_version() << ":";
    describe_for_key(key, c10::IValue(specs[k]));
    key << ",";
  }
  key << ";methods:";
  for (const std::string& method : options.methods) key << method << ",";
  key << ";min_region_size:" << options.min_region_size << ";keep_kinds:";
  for (const std::string& kind : options.keep_kinds) key << kind << ",";
  key << ";keep_submodules:";
  for (const std::string& name : options.keep_submodules) key << name << ",";
  key << ";lower_submodules:";
  for (const std::string& name : options.lower_submodules) key << name << ",";
  key << ";require_full:" << options.require_full << ";on_other_shapes:" << static_cast<int>(options.on_other_shapes)
      << ";max_replans:" << options.max_replans << ";min_gain:" << options.min_gain << ";choose_order:" << options.choose_order
      << ";fallback:" << options.fallback_when_unavailable;
  for (const auto& [method, inputs] : options.example_inputs) {
    key << ";method " << method << ":";
    for (const c10::IValue& input : inputs) {
      describe_for_key(key, input);
      key << ",";
    }
    key << canonical_graph(module, method)->toString(false);  // the graph; the shapes are above (no run)
  }
  // What the graph reads from the module: every attribute's value (tensors by dtype and sizes:
  // two widths of one architecture share their code, not their weights' shapes).
  key << ";attributes:";
  for (const auto& attribute : module.named_attributes(/*recurse=*/true)) {
    key << attribute.name << "=";
    if (attribute.value.isObject())
      key << attribute.value.type()->str();
    else
      describe_for_key(key, attribute.value);
    key << ",";
  }
  key << ";machine:" << machine_fingerprint();
  return key.str();
}

TORCH_DELEGATE_INTERNAL torch::jit::Module lower_measured(const backend_list& backends, const torch::jit::Module& module,
                                                          const partition_options& options,
                                                          const std::vector<c10::impl::GenericDict>& specs) {
  clock_timing clock;
  const std::string directory = timing_cache_directory(options);
  std::optional<timing_cache_file> file;
  if (!directory.empty()) file.emplace(directory);
  cached_timing timing(clock, file ? &*file : nullptr, options.progress);
  std::string digest;
  if (file) {
    digest = key_digest(lowering_key(backends, module, options, specs));
    if (const std::optional<std::string> payload = file->find("lowering", digest))
      if (const std::optional<delegation_report> cached = report_of_payload(*payload)) {
        // The backends in the order the cached lowering chose (its report names them).
        backend_list order;
        std::vector<c10::impl::GenericDict> order_specs;
        std::string names = cached->backend;
        for (std::size_t start = 0; start <= names.size();) {
          const std::size_t end = std::min(names.find(", ", start), names.size());
          const std::string name = names.substr(start, end - start);
          for (std::size_t k = 0; k < backends.size(); ++k)
            if (backends[k]->name() == name) {
              order.push_back(backends[k]);
              order_specs.push_back(specs[k]);
            }
          start = end + 2;
        }
        if (!order.empty()) {
          timing.lowering_step(0, 1, "");
          timing.progress("cached", "the decisions of an earlier measured lowering of this model, from " + file->path());
          partition_options again = options;
          again.measure = false;
          again.choose_order = false;
          again.replay = *cached;
          torch::jit::Module lowered = lower_partitioned(order, module, again, order_specs, *decider_for(again, &order_specs, timing));
          timing.progress("done", "");
          return lowered;
        }
      }
  }
  torch::jit::Module lowered = lower_partitioned(backends, module, options, specs, *decider_for(options, &specs, timing));
  lowered = tune_lowered(backends, module, options, specs, timing, std::move(lowered));
  if (file)
    if (const std::optional<delegation_report> report = delegation_report_data_of(lowered))
      file->store("lowering", digest, report_payload(*report));
  timing.progress("done", "regions timed: " + std::to_string(timing.timed()) +
                              "; verdicts reused (alike regions, the cache): " + std::to_string(timing.reused()));
  return lowered;
}

}  // namespace torch_delegate::detail
