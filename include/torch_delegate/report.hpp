// The delegation report: what partial lowering delegates (regions) and what stays in TorchScript
// (kept nodes, each with its reason), per method. delegation_plan<B> makes one before lowering;
// a partially lowered module carries one (as text and as data, report_format.hpp).
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/names.hpp>

#include <torch/csrc/jit/api/module.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// Why a node stays in TorchScript.
enum class kept_reason {
  unsupported_kind,      // the backend's supports() refuses it
  excluded_by_user,      // its kind is in partition_options::keep_kinds, or its submodule in keep_submodules
  outside_selection,     // partition_options::lower_submodules is given and its submodule is not among them
  control_flow,          // prim::If / prim::Loop: regions never cross control flow (their bodies are partitioned)
  mutation_or_aliasing,  // it writes to a tensor, or a value it makes is written to elsewhere
  boundary_type,         // a value it takes or makes cannot cross into the backend's execute
  region_too_small,      // its region has fewer nodes than the minimum region size
  refused_by_backend,    // the backend's accepts_region refused the region it was in
  attribute_read,        // prim::GetAttr (self.weight): read in TorchScript, its value passed to the region
  result_tuple,          // the prim::TupleConstruct a method returns its results in, when the backend does not take it
  slower_on_backend,     // measured with example inputs, its region ran slower on the backend than in TorchScript
  gain_below_minimum,    // measured faster on the backend, but among the regions that together save less than partition_options::min_gain
  not_separable,         // measured on a backend choose_order put first, it was not faster beyond the spread: left to the list's order
  computed_at_lowering,  // a tensor computed from the example inputs' shapes alone: shape folding computes it once, at lowering
};

/// The readable label of a reason: "unsupported kind", "excluded by the user", ... (the text of
/// reports; saved reports use stable tokens instead, report_format.hpp).
TORCH_DELEGATE_DECL std::string_view to_string(kept_reason reason);

/// One delegated region of a method.
struct region_report {
  std::string name;                // the region's method in the delegate child module, e.g. "forward_region_0"
  std::size_t node_count = 0;      // nodes, constants not counted
  std::vector<std::string> kinds;  // distinct node kinds, in order of first appearance
  std::string location;            // "model.py:12": the model's own line of its first node (see kept_node), or ""
  int depth = 0;                   // 0: the method's body; 1: inside an if/loop body; ...
  std::string submodule;           // the submodule all its nodes come from, by attribute path ("features.3.block"); "" for the top
  /// The layout conversions placed at its boundary, for a backend whose regions work in
  /// channels-last (B::channels_last): "input 0 (method argument x): to channels_last on entry",
  /// "output 0: to contiguous before aten::conv2d at model.py:12". None between two regions.
  std::vector<std::string> conversions;
  /// The backend that runs it (lowering to several backends: the first in the list that supports
  /// its nodes and, when measured, runs them faster than TorchScript).
  std::string backend;
  /// Measured with example inputs (partition_options::measure): the median time of one call of
  /// the region on its backend and as TorchScript, in milliseconds; -1 when not measured.
  double backend_ms = -1;
  double torchscript_ms = -1;
  /// Measured: how the times decided, e.g. "faster on onednn: 12 of 12 rounds by more than 3 %
  /// (sign test p = 0.0005)", or "not separable: of 12 rounds, ...; delegated, as the list's order says"; "(cached)"
  /// at its end when it came from the timing cache. "" when not measured.
  std::string decision;

  bool operator==(const region_report&) const = default;
};

/// One backend's reason for not taking a node (lowering to several backends, each backend of
/// the list gives one).
struct backend_reason {
  std::string backend;
  kept_reason reason;
  std::string detail;

  bool operator==(const backend_reason&) const = default;
};

/// One node that stays in TorchScript.
struct kept_node {
  std::string kind;
  /// Why it stays: with several backends, the reason of the backend that got furthest with it
  /// (primary_reason: a region refused or measured slower says more than an unsupported kind),
  /// the first of the list among those that got as far. per_backend has every backend's.
  kept_reason reason;
  std::string detail;    // e.g. the type that cannot cross, the region size, the submodule kept
  std::string location;  // "model.py:12": the innermost line of the model's own source (not PyTorch's torch/nn/...), or ""
  int depth = 0;
  std::string submodule;  // the submodule it comes from, by attribute path ("features.3.block.2"); "" for the top
  /// Each backend's reason, in the list's order (one entry with one backend). Read from a report
  /// saved before format 6: the one reason saved then, as the last backend's (the backend whose
  /// reason those builds reported). Empty in a kept_node made by hand.
  std::vector<backend_reason> per_backend = {};

  bool operator==(const kept_node&) const = default;
};

/// How far a backend got with a node it did not take, to choose a kept node's primary reason:
/// reasons that are no backend's (attribute reads, control flow, the user's choices) 0; the
/// backend does not support it 1; supported but excluded by the user or written to 2-3; in a run
/// whose boundary types or size fail 4-5; in a region the backend refused 6, measured slower 7,
/// measured neither faster nor slower on a backend choose_order put first 8, faster but gaining
/// too little 9.
TORCH_DELEGATE_DECL int progress_of(kept_reason reason);

/// The entry of `per_backend` that got furthest (progress_of), the first of those that got as
/// far; nullptr for an empty list.
TORCH_DELEGATE_DECL const backend_reason* primary_reason(const std::vector<backend_reason>& per_backend);

/// A condition of the method's control flow that lowering decided (partitioning.md, "Conditions
/// decided at lowering"): the method runs specialized for it behind a check at its entry.
struct decided_condition {
  std::string test;      // "src_mask is None", "src.is_nested", "torch.is_autocast_enabled()"
  std::string value;     // "True", "False", "cpu"
  std::string basis;     // "the example", "the process at lowering", "no argument requires grad; the backends own the parameters"
  std::string location;  // the model's line that tests it, as kept_node::location

  bool operator==(const decided_condition&) const = default;
};

/// What partial lowering does (or did) with one method.
struct method_delegation {
  std::string method;
  std::vector<region_report> regions;
  std::vector<kept_node> kept;
  /// The conditions lowering decided (none: the method runs as written around its regions).
  std::vector<decided_condition> decided = {};
  std::size_t delegated_nodes() const {
    std::size_t count = 0;
    for (const region_report& region : regions) count += region.node_count;
    return count;
  }
  bool operator==(const method_delegation&) const = default;
};

/// What partial lowering does (or did) with a module, per method.
struct delegation_report {
  std::string backend;  // the backend, or the backends in priority order: "xnnpack, pointwise_fusion"
  std::string module;
  std::vector<method_delegation> methods;

  std::size_t region_count() const {
    std::size_t count = 0;
    for (const method_delegation& method : methods) count += method.regions.size();
    return count;
  }
  /// A readable report: per method, its regions, then each node kept in TorchScript and why.
  TORCH_DELEGATE_DECL std::string to_string() const;
  bool operator==(const delegation_report&) const = default;
};

/// The attribute of a partially lowered module that holds its delegation report (text).
inline constexpr const char* delegation_report_attribute = detail::names::report_attribute;
/// The attribute that holds the same report as data (report_format.hpp; modules partially
/// lowered since 0.1.0's Python package; older ones carry the text only).
inline constexpr const char* delegation_report_data_attribute = detail::names::report_data_attribute;

/// The delegation report a partially lowered module carries (as text); empty for any other module.
TORCH_DELEGATE_DECL std::string delegation_report_of(const torch::jit::Module& module);

/// The delegation report a partially lowered module carries, as data (after save and load too);
/// nullopt for any other module, one partially lowered by a build that saved the text only, or
/// one whose saved report this build cannot read (a newer format).
TORCH_DELEGATE_DECL std::optional<delegation_report> delegation_report_data_of(const torch::jit::Module& module);

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/report.ipp>
#endif
#include <torch_delegate/report_format.hpp>  // delegation_report_data_of is the format's decoder
