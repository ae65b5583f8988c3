// Partial lowering: delegate the regions of a method that a backend supports and leave the rest
// to TorchScript. Each region becomes a delegate unit (a method of a child module lowered to the
// backend, with debug handles of the original nodes); the method itself is rewritten to call
// the regions, and the result is a plain TorchScript module. The delegation report says, before
// lowering (a dry run) or after it, what was delegated and why the rest was not.
#pragma once

#include <torch_delegate/coverage.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/lower.hpp>

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
  /// Availability fallback: where the backend is not available (at load or at call time), each
  /// region runs its original TorchScript instead of raising "Backend is not available.".
  /// Off by default (strict: LibTorch's behaviour and texts).
  bool fallback_when_unavailable = false;
};

/// Why a node stays in TorchScript.
enum class kept_reason {
  unsupported_kind,      // the backend's supports() refuses it
  excluded_by_user,      // its kind is in partition_options::keep_kinds
  control_flow,          // prim::If / prim::Loop: regions never cross control flow (their bodies are partitioned)
  mutation_or_aliasing,  // it writes to a tensor, or a value it makes is written to elsewhere
  boundary_type,         // a value it takes or makes cannot cross into the backend's execute
  region_too_small,      // its region has fewer nodes than the minimum region size
  refused_by_backend,    // the backend's accepts_region refused the region it was in
  attribute_read,        // prim::GetAttr (self.weight): read in TorchScript, its value passed to the region
  result_tuple,          // the prim::TupleConstruct a method returns its results in, when the backend does not take it
};

/// "unsupported kind", "excluded by the user", ...
TORCH_DELEGATE_DECL std::string_view to_string(kept_reason reason);

/// One delegated region of a method.
struct region_report {
  std::string name;                // the region's method in the delegate child module, e.g. "forward_region_0"
  std::size_t node_count = 0;      // nodes, constants not counted
  std::vector<std::string> kinds;  // distinct node kinds, in order of first appearance
  std::string location;            // "model.py:12": the model's own line of its first node (see kept_node), or ""
  int depth = 0;                   // 0: the method's body; 1: inside an if/loop body; ...
  std::string submodule;           // the submodule all its nodes come from, by attribute path ("features.3.block"); "" for the top
};

/// One node that stays in TorchScript.
struct kept_node {
  std::string kind;
  kept_reason reason;
  std::string detail;    // e.g. the type that cannot cross, the region size, "outside the submodules to lower"
  std::string location;  // "model.py:12": the innermost line of the model's own source (not PyTorch's torch/nn/...), or ""
  int depth = 0;
  std::string submodule;  // the submodule it comes from, by attribute path ("features.3.block.2"); "" for the top
};

/// What partial lowering does (or did) with one method.
struct method_delegation {
  std::string method;
  std::vector<region_report> regions;
  std::vector<kept_node> kept;
  std::size_t delegated_nodes() const {
    std::size_t count = 0;
    for (const region_report& region : regions) count += region.node_count;
    return count;
  }
};

/// What partial lowering does (or did) with a module, per method.
struct delegation_report {
  std::string backend;
  std::string module;
  std::vector<method_delegation> methods;

  std::size_t region_count() const {
    std::size_t count = 0;
    for (const method_delegation& method : methods) count += method.regions.size();
    return count;
  }
  /// A readable report: per method, its regions, then each node kept in TorchScript and why.
  TORCH_DELEGATE_DECL std::string to_string() const;
};

namespace detail {

/// Lowers a module whose methods are the regions of every partitioned method to the backend
/// (lower<B>, each region with the options of the method it comes from, `method_of_region`,
/// with or without availability fallback): one lowered module, so named data is shared by all.
using lower_regions_function = std::function<torch::jit::Module(
    const torch::jit::Module& regions, const std::map<std::string, std::string>& method_of_region, bool fallback_when_unavailable)>;

/// Every method with compile options is one that partial lowering partitions.
TORCH_DELEGATE_DECL void check_option_methods(std::string_view backend, const std::vector<std::string>& option_methods,
                                              const partition_options& options);

/// The report of a partial lowering without lowering anything.
TORCH_DELEGATE_DECL delegation_report partition_report(const partition_backend& backend, const torch::jit::Module& module,
                                                       const partition_options& options);

/// Partially lowers `module` (not modified): a copy sharing its parameters, whose partitioned
/// methods call their regions in a child module lowered by `lower_regions`. The report is
/// stored with the module (delegation_report_of reads it, after save/load too).
TORCH_DELEGATE_DECL torch::jit::Module lower_partitioned(const partition_backend& backend, const torch::jit::Module& module,
                                                         const partition_options& options,
                                                         const lower_regions_function& lower_regions);

/// Partially lowers with a backend's lowering (lower_partially<B> and the Python package): each
/// region is compiled with the spec of the method it comes from in `spec_by_method` ({method:
/// spec}), or with default options where its method has none.
TORCH_DELEGATE_DECL torch::jit::Module lower_partially_with(const backend_lowering& lowering, const torch::jit::Module& module,
                                                            const partition_options& options,
                                                            const c10::impl::GenericDict& spec_by_method);

/// The partitioning half of B's lowering, or the diagnostic of a backend without supports().
template <class B>
const partition_backend& partition_backend_checked() {
  if constexpr (!backend_declares_support<B>) {
    detail::backend_does_not_declare_supports<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: partial lowering needs 'static bool supports(const torch::jit::Node*)' in the "
                  "backend: the one place that says which nodes it accepts (docs/partial-lowering.md).");
  }
  return lowering_of<B>::value.partition;
}

}  // namespace detail

/// The attribute of a partially lowered module that holds its delegation report (text).
inline constexpr const char* delegation_report_attribute = "_torch_delegate_report";
/// The attribute that holds the same report as data (modules partially lowered since 0.1.0's
/// Python package; older ones carry the text only).
inline constexpr const char* delegation_report_data_attribute = "_torch_delegate_report_data";

/// Dry run: what lower_partially<B> would delegate, and why the rest would stay in TorchScript.
template <class B>
delegation_report delegation_plan(const torch::jit::Module& module, const partition_options& options = {}) {
  return detail::partition_report(detail::partition_backend_checked<B>(), module, options);
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
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, method_options] : compile_options) spec.insert(method, encode_options(method_options));
  return detail::lower_partially_with(detail::lowering_of<B>::value, module, options, spec);
}

/// The delegation report a partially lowered module carries (as text); empty for any other module.
TORCH_DELEGATE_DECL std::string delegation_report_of(const torch::jit::Module& module);

/// The delegation report a partially lowered module carries, as data (after save and load too);
/// nullopt for any other module, or one partially lowered by a build that saved the text only.
TORCH_DELEGATE_DECL std::optional<delegation_report> delegation_report_data_of(const torch::jit::Module& module);

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition.ipp>
#endif
