// Definitions for detail/tuning.hpp, the lowering as a whole: choose_order (the orders of a
// priority list lowered, pruned and compared two at a time) and a measured lowering through the
// timing cache (its key, its payload, the replay of a cached lowering). The deciders and the
// method's check it builds on: tuning.ipp.
#pragma once

#include <torch_delegate/detail/tuning.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/partition_rewrite.hpp>
#include <torch_delegate/impl/tuning.ipp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>

#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <optional>
#include <sstream>

namespace torch_delegate::detail {

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
