// Definitions for detail/partition_assign.hpp: the regions of each method, backend by backend.
#pragma once

#include <torch_delegate/detail/partition_assign.hpp>
#include <torch_delegate/detail/canonical_graph.hpp>
#include <torch_delegate/detail/locations.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/partition_extract.hpp>
#include <torch_delegate/detail/partition_layouts.hpp>
#include <torch_delegate/detail/shape_folding.hpp>
#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace torch_delegate::detail {

// require_full: attribute reads and the nodes outside lower_submodules may stay in TorchScript.
// The nodes of `report` that may not.
inline std::vector<const kept_node*> kept_against_full(const method_delegation& report) {
  std::vector<const kept_node*> kept;
  // The tuple that packs a method's results, whichever backend's reason is the primary one (a
  // backend that supports prim::TupleConstruct may have got further with it).
  auto result_tuple = [](const kept_node& node) {
    return node.reason == kept_reason::result_tuple ||
           std::any_of(node.per_backend.begin(), node.per_backend.end(),
                       [](const backend_reason& each) { return each.reason == kept_reason::result_tuple; });
  };
  for (const kept_node& node : report.kept)
    if (node.reason != kept_reason::attribute_read && !result_tuple(node) && node.reason != kept_reason::outside_selection)
      kept.push_back(&node);
  return kept;
}

inline void check_full(const partition_options& options, const backend_lowering& backend, const method_delegation& report) {
  if (!options.require_full) return;
  const std::vector<const kept_node*> kept = kept_against_full(report);
  if (kept.empty()) return;
  const kept_node& first = *kept.front();
  fail({backend.name(), report.method},
       "require_full: " + std::to_string(kept.size()) + " node(s) would stay in TorchScript, the first " + first.kind +
           " (" + std::string(to_string(first.reason)) + (first.detail.empty() ? "" : ": " + first.detail) + ")" +
           (first.location.empty() ? "" : " at " + first.location));
}

TORCH_DELEGATE_INTERNAL std::vector<partitioned_method> partition_methods(const backend_list& backends,
                                                                          const torch::jit::Module& module,
                                                                          const partition_options& options,
                                                                          region_decider& decider) {
  const backend_lowering& first = *backends.front();
  const bool owns_parameters = std::any_of(backends.begin(), backends.end(),
                                           [](const backend_lowering* backend) { return backend->partition.owns_parameters; });
  std::vector<partitioned_method> partitioned;
  for (const std::string& method : options.methods) {
    const auto examples = options.example_inputs.find(method);
    const auto takes = [&](const torch::jit::Node* node) {
      return std::any_of(backends.begin(), backends.end(),
                         [&](const backend_lowering* backend) { return backend->partition.supports && backend->partition.supports(node); });
    };
    lowering_conditions conditions;
    std::shared_ptr<torch::jit::Graph> graph =
        canonical_graph(module, method, examples == options.example_inputs.end() ? nullptr : &examples->second, first.name(),
                        owns_parameters, takes, &conditions);
    partitioned_method p{method, graph, {}, {}, method_delegation{method, {}, {}, conditions.decided}, conditions};
    // What shape folding will compute at lowering stays out of regions.
    std::unordered_set<const torch::jit::Node*> computed;
    if (options.fold_shapes && examples != options.example_inputs.end()) computed = computed_at_lowering(graph, min_folded_nodes);
    decider.begin_method(module, method, graph);
    std::unordered_set<const torch::jit::Node*> taken;
    // Each backend's reasons for each node it did not take, in the list's order: a node no
    // backend takes is reported (by the last pass) with all of them.
    std::unordered_map<const torch::jit::Node*, std::vector<backend_reason>> reasons_of;
    std::vector<const torch::jit::Node*> last_kept;  // the node of each of the last pass's kept entries
    for (std::size_t k = 0; k < backends.size(); ++k) {
      method_delegation pass{method, {}, {}, {}};
      std::vector<const torch::jit::Node*> kept_nodes;  // the node of each entry of pass.kept
      std::vector<region> regions =
          form_regions(*backends[k], options, graph, method, pass, backends.size() > 1 ? &taken : nullptr, &kept_nodes,
                       computed.empty() ? nullptr : &computed);
      const std::string backend_name(backends[k]->name());
      candidate_regions candidates{*backends[k], k, method, regions, pass.regions};
      const std::vector<region_decision> decisions = decider.decide(candidates);
      TORCH_INTERNAL_ASSERT(decisions.size() == regions.size(), "a region decider gave ", decisions.size(),
                            " decisions for ", regions.size(), " regions");
      for (std::size_t i = 0; i < regions.size(); ++i) {
        if (decisions[i].delegated) continue;
        const region_decision& kept = decisions[i];
        for (const torch::jit::Node* node : regions[i].nodes) {
          model_location where = locate_in_model(node);
          pass.kept.push_back({node->kind().toQualString(), kept.reason, kept.detail, std::move(where.line), regions[i].depth,
                               std::move(where.submodule), {{backend_name, kept.reason, kept.detail}}});
          kept_nodes.push_back(node);
        }
      }
      for (std::size_t n = 0; n < pass.kept.size(); ++n) {
        std::vector<backend_reason>& reasons = reasons_of[kept_nodes[n]];
        if (reasons.empty() || reasons.back().backend != backend_name)  // once per backend
          reasons.push_back({backend_name, pass.kept[n].reason, pass.kept[n].detail});
      }
      for (std::size_t i = 0; i < regions.size(); ++i) {
        if (!decisions[i].delegated) continue;
        pass.regions[i].name = names::region_method(method, p.entry.regions.size());  // numbered across backends
        taken.insert(regions[i].nodes.begin(), regions[i].nodes.end());
        p.entry.regions.push_back(std::move(pass.regions[i]));
        p.regions.push_back(std::move(regions[i]));
        p.backend_of.push_back(k);
      }
      if (k + 1 == backends.size()) {
        p.entry.kept = std::move(pass.kept);
        last_kept = std::move(kept_nodes);
      }
    }
    // The last pass's kept nodes are those no backend took; every backend gave each a reason.
    for (std::size_t n = 0; n < p.entry.kept.size(); ++n) {
      kept_node& node = p.entry.kept[n];
      std::vector<backend_reason>& reasons = reasons_of.at(last_kept[n]);
      if (!reasons.empty()) node.per_backend = std::move(reasons);  // (a node is kept once per pass)
      if (const backend_reason* primary = primary_reason(node.per_backend)) {
        node.reason = primary->reason;
        node.detail = primary->detail;
      }
    }
    for (std::size_t k = 0; k < backends.size(); ++k)
      if (backends[k]->partition.channels_last) place_conversions(*backends[k], p.regions, p.entry, p.backend_of, k);
    if (owns_parameters) {
      std::vector<region> owning;
      for (std::size_t i = 0; i < p.regions.size(); ++i)
        if (backends[p.backend_of[i]]->partition.owns_parameters) owning.push_back(p.regions[i]);
      drop_owned_reads(owning, graph, p.entry);
    }
    check_full(options, first, p.entry);
    // Without a region the method stays as written: nothing was specialized.
    if (p.regions.empty()) {
      p.entry.decided.clear();
      p.conditions = {};
    }
    partitioned.push_back(std::move(p));
  }
  return partitioned;
}

}  // namespace torch_delegate::detail
