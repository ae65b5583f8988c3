// Definitions for detail/tuning.hpp, the lowering as a whole: choose_order (the orders of a
// priority list lowered, pruned and compared two at a time). The deciders and the method's check
// it builds on: tuning.ipp; a measured lowering through the timing cache: measured_lowering.ipp.
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/impl/partition_assign.ipp>
#include <torch_delegate/impl/tuning.ipp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_set>

namespace torch_delegate::detail {

// "onednn, xnnpack": the names of `backends`, in order.
inline std::string order_text(const backend_list& backends) {
  std::string text;
  for (const backend_lowering* backend : backends) text += (text.empty() ? "" : ", ") + std::string(backend->name());
  return text;
}

// A partition, to tell two that are the same: each region's backend, kinds, size and place.
inline std::string partition_signature(const std::vector<method_delegation>& methods) {
  std::ostringstream text;
  for (const method_delegation& method : methods) {
    text << method.method << ":";
    for (const region_report& region : method.regions) {
      text << region.backend << "/" << region.node_count << "/" << region.location << "/" << region.depth << "/";
      for (const std::string& kind : region.kinds) text << kind << ",";
      text << ";";
    }
  }
  return text.str();
}

inline std::vector<method_delegation> entries_of(const std::vector<partitioned_method>& methods) {
  std::vector<method_delegation> entries;
  for (const partitioned_method& method : methods) entries.push_back(method.entry);
  return entries;
}

// What refining an order that puts the backend named `backend` first would time, in `planned`
// (its partition by the rules), over the methods with example inputs: its distinct regions
// (region_key: alike ones are timed once), and their nodes' share of all its regions' nodes.
struct promoted_regions {
  std::size_t distinct = 0;
  double share = 0;
};
inline promoted_regions promoted_regions_in(const std::string& backend, const backend_list& order,
                                            const std::vector<c10::impl::GenericDict>& specs, const partitioned_module& planned,
                                            const partition_options& options) {
  std::set<std::string> keys;
  std::size_t distinct_nodes = 0, all_nodes = 0;
  for (const partitioned_method& method : planned.methods) {
    const auto examples = options.example_inputs.find(method.method);
    if (examples == options.example_inputs.end()) continue;
    std::optional<example_value_map> values;  // computed once per method, when needed
    for (std::size_t i = 0; i < method.regions.size(); ++i) {
      const std::size_t k = method.backend_of[i], nodes = method.entry.regions[i].node_count;
      all_nodes += nodes;
      if (order[k]->name() != backend) continue;
      if (!values) values = example_values(planned.copy, method.graph, examples->second);
      if (keys.insert(region_key({*order[k], planned.copy, method.method, method.regions[i], method.entry.regions[i].name, *values,
                                  specs[k]}))
              .second)
        distinct_nodes += nodes;
    }
  }
  return {keys.size(), all_nodes ? double(distinct_nodes) / double(all_nodes) : 0.0};
}

// Whether a partition gives regions to more than one backend.
inline bool mixes_backends(const std::vector<method_delegation>& methods) {
  std::set<std::string> used;
  for (const method_delegation& method : methods)
    for (const region_report& region : method.regions) used.insert(region.backend);
  return used.size() > 1;
}

TORCH_DELEGATE_INTERNAL torch::jit::Module tune_lowered(const backend_list& backends, const torch::jit::Module& module,
                                                        const partition_options& options,
                                                        const std::vector<c10::impl::GenericDict>& specs,
                                                        timing_source& timing, torch::jit::Module lowered,
                                                        double first_order_s) {
  if (!options.measure || options.replay || options.example_inputs.empty()) return lowered;
  if (!options.choose_order || backends.size() < 2) return checked_whole(backends, module, options, specs, timing, std::move(lowered));
  // The list's order (`lowered`), then each other backend first (the rest in the list's order),
  // each partitioned by measured decisions (regions alike to ones already timed, the same backend,
  // graph and shapes, are not timed again; the backend put first takes only regions faster on it
  // beyond the spread, as a region that does not separate goes by the list's order). A partition
  // the same as an earlier one is not built, nor one whose regions save, by their own times, less
  // than half the share of their TorchScript time that the best so far saves (it cannot win by
  // the method's noise), or less than least_ms_share of its milliseconds. Each one built is
  // compared side by side with the best so far. Where the fastest gives regions to several
  // backends, each of them alone is tried too: regions measured faster one by one can be slower
  // together (ShuffleNetV2 on AVX2: onednn's branches beside xnnpack's, one backend's threads
  // waiting while the other's OpenMP threads spin down). Only the fastest is then checked whole
  // against the original (checked_whole), to save a whole-method timing per order; a check that
  // takes regions out of it is not followed by a comparison with the others again.
  struct candidate {
    backend_list order;
    std::vector<c10::impl::GenericDict> specs;
    std::string text;
    torch::jit::Module lowered;
    std::vector<method_delegation> methods;  // its partition, as its report says
  };
  std::vector<candidate> candidates;
  std::vector<std::pair<std::string, std::string>> partitions;  // every partition made: signature, order
  double best_saving = 0, best_ms_saved = 0;
  std::size_t step = 1, steps = backends.size(), best = 0;
  // A partition worth building: not one made before, and not one that saves too little (a share
  // of its regions' time, or milliseconds). The list's order (`baseline`) is built already: it
  // only sets the bars.
  // The text of the order that made a partition of this signature already, or null.
  auto made_already = [&](const std::string& signature) -> const std::string* {
    const auto same = std::find_if(partitions.begin(), partitions.end(), [&](const auto& p) { return p.first == signature; });
    return same == partitions.end() ? nullptr : &same->second;
  };
  auto worth_building = [&](const std::vector<method_delegation>& methods, const std::string& text, bool baseline = false) {
    const std::string signature = partition_signature(methods);
    if (const std::string* same = made_already(signature)) {
      timing.progress("choosing", "not compared: the same partition as (" + *same + ")");
      return false;
    }
    partitions.emplace_back(signature, text);
    if (!baseline)
      if (const std::optional<std::string> why = saves_too_little(methods, best_saving, best_ms_saved)) {
        timing.progress("choosing", *why);
        return false;
      }
    if (const std::optional<partition_saving> saving = measured_saving(methods)) {
      best_saving = std::max(best_saving, saving->share);
      best_ms_saved = std::max(best_ms_saved, saving->ms);
    }
    return true;
  };
  // A lowering replaces the best so far only where it is faster beyond the spread in a method and
  // slower beyond it in none (method_rule), so that where they do not separate the list's order
  // stays, whatever the noise.
  auto compare_with_best = [&](std::size_t k) {
    bool faster = false, slower = false;
    for (const auto& [method, inputs] : options.example_inputs) {
      timing.progress("choosing", method + ": (" + candidates[k].text + ") against (" + candidates[best].text + ")");
      const paired_comparison compared = timing.compare_methods(candidates[best].lowered, candidates[k].lowered, method, inputs);
      timing.progress("choosing", method + ": " +
                                      verdict_text(compared, method_rule, "with (" + candidates[best].text + ")",
                                                   "with (" + candidates[k].text + ")"));
      faster |= compared.verdict == separation::second_faster;
      slower |= compared.verdict == separation::first_faster;
    }
    if (faster && !slower) best = k;
  };
  // An order is partitioned without require_full (its partition may keep what the list's order
  // delegated): one that keeps a node require_full forbids is not built.
  partition_options candidate_options = options;
  candidate_options.require_full = false;
  // The screen of an order with a backend put first (screen_min_regions): its partition by the
  // rules alone, built and compared with the best so far in each method. True (the order is not
  // refined) where the best is faster beyond the spread in a method and slower beyond it in none.
  // Not screened (screens): an order whose promoted backend has few and small distinct regions
  // there (refining them costs less than the screen), or whose partition by the rules is one
  // made already.
  auto screened_out = [&](const backend_list& order, const std::vector<c10::impl::GenericDict>& order_specs,
                          const std::string& text, const promotion& promoted) {
    partition_options rules_only = candidate_options;
    rules_only.measure = false;
    rule_decider rules;
    partitioned_module planned = partition_module(order, module, rules_only, rules);
    const promoted_regions refined = promoted_regions_in(promoted.backend, order, order_specs, planned, options);
    if (!screens(refined.distinct, refined.share)) return false;
    if (made_already(partition_signature(entries_of(planned.methods)))) return false;
    std::optional<torch::jit::Module> built;
    try {
      built = build_partitioned(order, std::move(planned), rules_only, order_specs);
    } catch (const c10::Error& error) {
      // The screen is a shortcut: a partition it cannot build leaves the order to be refined.
      timing.progress("choosing", "not screened: its partition by the rules alone did not build: " +
                                      std::string(error.what_without_backtrace()));
      return false;
    } catch (const std::exception& error) {
      timing.progress("choosing", "not screened: its partition by the rules alone did not build: " + std::string(error.what()));
      return false;
    }
    bool faster = false, slower = false;
    for (const auto& [method, inputs] : options.example_inputs) {
      timing.progress("choosing", method + ": screening (" + text + ") by the rules alone (" + promoted.backend + ": " +
                                      std::to_string(refined.distinct) + " distinct regions, " + std::to_string(std::lround(100 * refined.share)) +
                                      " % of the nodes) against (" + candidates[best].text + ")");
      const paired_comparison compared = timing.compare_methods(candidates[best].lowered, *built, method, inputs);
      timing.progress("choosing", method + ": " +
                                      verdict_text(compared, method_rule, "with (" + candidates[best].text + ")",
                                                   "with (" + text + ") by the rules alone"));
      faster |= compared.verdict == separation::second_faster;
      slower |= compared.verdict == separation::first_faster;
    }
    if (!slower || faster) return false;
    timing.progress("choosing", "not refined: by the rules alone it is slower than (" + candidates[best].text +
                                    ") beyond the spread; its regions are not timed");
    return true;
  };
  // An order tried: screened (one with a promoted backend), partitioned by measured decisions,
  // built where worth it and compared with the best so far.
  auto refine_order = [&](backend_list order, std::vector<c10::impl::GenericDict> order_specs, const std::string& text,
                          const promotion* promoted) {
    if (promoted && screened_out(order, order_specs, text, *promoted)) return;
    partitioned_module planned =
        partition_module(order, module, candidate_options, *decider_for(candidate_options, &order_specs, timing, promoted));
    std::vector<method_delegation> methods = entries_of(planned.methods);
    if (options.require_full)
      for (const method_delegation& method : methods)
        if (const std::vector<const kept_node*> kept = kept_against_full(method); !kept.empty()) {
          timing.progress("choosing", "not compared: it keeps " + std::to_string(kept.size()) + " node(s) of " + method.method +
                                          " in TorchScript, the first " + kept.front()->kind + " (" +
                                          std::string(to_string(kept.front()->reason)) + "), and require_full is set");
          return;
        }
    if (!worth_building(methods, text)) return;
    if (timing.out_of_time()) {  // it could not be compared with the best
      timing.progress("choosing", "not built: measure_time_limit_s was spent");
      return;
    }
    torch::jit::Module built = build_partitioned(order, std::move(planned), options, order_specs);
    candidates.push_back({std::move(order), std::move(order_specs), text, std::move(built), std::move(methods)});
    compare_with_best(candidates.size() - 1);
  };
  double longest_order_s = first_order_s;  // the longest an order took, for the time limit
  // `promoted`: the backend the order puts ahead of its place in the list (nullptr for one alone).
  auto try_order = [&](backend_list order, std::vector<c10::impl::GenericDict> order_specs, const promotion* promoted) {
    const std::string text = order_text(order);
    timing.lowering_step(step, steps, "lowering " + std::to_string(step + 1) + " of " + std::to_string(steps) + " (" + text + ")");
    ++step;
    if (timing.out_of_time()) {
      timing.progress("choosing", "not tried: measure_time_limit_s was spent");
      return;
    }
    // An order costs about what one before it did: one begun with less left overruns the limit.
    if (const double left = timing.seconds_left(); left < longest_order_s) {
      std::ostringstream why;
      why.precision(3);
      why << "not tried: less of measure_time_limit_s is left (" << left << " s) than an order took (" << longest_order_s << " s)";
      timing.progress("choosing", why.str());
      timing.give_up();
      return;
    }
    const auto began = std::chrono::steady_clock::now();
    refine_order(std::move(order), std::move(order_specs), text, promoted);
    longest_order_s =
        std::max(longest_order_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  };

  {
    const std::optional<delegation_report> report = delegation_report_data_of(lowered);
    std::vector<method_delegation> methods = report ? report->methods : std::vector<method_delegation>{};
    worth_building(methods, order_text(backends), true);
    candidates.push_back({backends, specs, order_text(backends), std::move(lowered), std::move(methods)});
  }
  for (std::size_t first = 1; first < backends.size(); ++first) {
    backend_list order{backends[first]};
    std::vector<c10::impl::GenericDict> order_specs{specs[first]};
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (k != first) {
        order.push_back(backends[k]);
        order_specs.push_back(specs[k]);
      }
    promotion promoted{std::string(backends[first]->name()), {}, {}};
    for (std::size_t k = first + 1; k < backends.size(); ++k) promoted.listed_after.insert(std::string(backends[k]->name()));
    for (std::size_t k = 0; k < first; ++k) promoted.listed_before.emplace_back(backends[k], specs[k]);
    try_order(std::move(order), std::move(order_specs), &promoted);
  }
  if (mixes_backends(candidates[best].methods)) {
    const std::vector<method_delegation> fastest = candidates[best].methods;
    std::vector<std::size_t> used;
    for (std::size_t k = 0; k < backends.size(); ++k)
      for (const method_delegation& method : fastest)
        if (std::any_of(method.regions.begin(), method.regions.end(),
                        [&](const region_report& region) { return region.backend == backends[k]->name(); })) {
          used.push_back(k);
          break;
        }
    steps += used.size();
    for (const std::size_t k : used) try_order({backends[k]}, {specs[k]}, nullptr);
  }
  timing.lowering_step(steps, steps, "");
  candidate& chosen = candidates[best];
  return checked_whole(chosen.order, module, options, chosen.specs, timing, std::move(chosen.lowered));
}

}  // namespace torch_delegate::detail
