// Assignment: which backend of a priority list each region of a method goes to. Each backend's
// region pass runs in turn on what the earlier ones left (a node goes to the first backend that
// takes it), a region decider says which of its candidate regions each backend keeps, then the
// layout conversions are placed and every node left in TorchScript is reported with each
// backend's reason. Deterministic by default (rule_decider); the measured and replayed deciders
// are the tuning module's (detail/tuning.hpp).
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/lowering_conditions.hpp>
#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/report.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// One backend's candidate regions of one method, as its region pass formed them (form_regions).
struct candidate_regions {
  const backend_lowering& backend;
  std::size_t position;                 // the backend's place in the priority list
  const std::string& method;
  const std::vector<region>& regions;
  std::vector<region_report>& reports;  // one per region; a decider may fill in backend_ms and torchscript_ms
};

/// What a decider says of one candidate region: delegated, or kept in TorchScript and why.
struct region_decision {
  bool delegated = true;
  kept_reason reason = kept_reason::slower_on_backend;  // kept: the reason of each of its nodes
  std::string detail;                                    // kept: why, as the report gives it
};

// [region_decider]
/// Says which of a backend's candidate regions the backend gets. A region it does not get stays
/// in TorchScript for this backend, and is offered to the next backend of the list. Called for
/// each method in turn (begin_method), then per backend of the list in order (decide).
struct region_decider {
  virtual ~region_decider() = default;
  /// Before the candidates of `method` of `module` (the module being partitioned), whose
  /// canonical graph is `graph`: what a decider that runs the method needs.
  virtual void begin_method(const torch::jit::Module& module, const std::string& method,
                            const std::shared_ptr<torch::jit::Graph>& graph) = 0;
  /// One decision per candidate region, in order.
  virtual std::vector<region_decision> decide(candidate_regions& candidates) = 0;
};
// [region_decider]

/// The rules alone (the default): every candidate region goes to its backend, so each node goes
/// to the first backend in the list whose support and region checks take it.
struct rule_decider final : region_decider {
  void begin_method(const torch::jit::Module&, const std::string&, const std::shared_ptr<torch::jit::Graph>&) override {}
  std::vector<region_decision> decide(candidate_regions& candidates) override {
    return std::vector<region_decision>(candidates.regions.size());
  }
};

/// One partitioned method: its canonical graph, its regions (every backend's, in the order of
/// its report's) and its report; backend_of[i]: the position, in the list of backends, of the
/// backend region i goes to.
struct partitioned_method {
  std::string method;
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<region> regions;
  std::vector<std::size_t> backend_of;
  method_delegation entry;
  lowering_conditions conditions;  // what the graph was specialized for (empty: nothing)
};

/// What the plan and the lowering both do, per method of `options.methods` (the request checked
/// already: partition_checks.hpp): take its canonical graph, form each backend's regions in
/// priority order, keep those `decider` gives the backend, place the layout conversions, apply
/// require_full. A node every backend passes on is reported with every backend's reason
/// (kept_node::per_backend), its primary one the furthest (primary_reason).
TORCH_DELEGATE_INTERNAL std::vector<partitioned_method> partition_methods(const backend_list& backends,
                                                                          const torch::jit::Module& module,
                                                                          const partition_options& options,
                                                                          region_decider& decider);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition_assign.ipp>
#endif
