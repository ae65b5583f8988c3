// The rewrite of partial lowering: each backend's regions lowered in one delegate child, and each
// partitioned method of a copy of the module rewritten to call them (with the guards that keep a
// region's TorchScript path where fallback, other shapes, autograd or empty tensors need it).
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/partition_assign.hpp>
#include <torch_delegate/input_spec.hpp>

#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// The child holding every partitioned method's regions, lowered once to the backend (lower<B>'s
/// funnel, lower_methods): each region with the spec of the method it comes from
/// (`method_of_region`: region -> method) in `spec_by_method`, or the backend's defaults; one
/// lowered module, so named data is shared by all.
TORCH_DELEGATE_INTERNAL torch::jit::Module lower_regions(const backend_lowering& lowering, const torch::jit::Module& regions,
                                                         const std::map<std::string, std::string>& method_of_region,
                                                         const c10::impl::GenericDict& spec_by_method,
                                                         bool fallback_when_unavailable, const input_specs& recorded,
                                                         std::int64_t max_replans);

/// A module partitioned, not yet built: a copy of it with new class types that shares every
/// parameter, buffer and attribute value (the one build_partitioned rewrites), the original's
/// class name (the report's), and each partitioned method's regions and decisions
/// (partitioned_method::entry: what the report will say).
struct partitioned_module {
  torch::jit::Module copy;
  std::string module_name;
  std::vector<partitioned_method> methods;
};

/// lower_partitioned's first half: `module` (not modified) partitioned by `decider`. Nothing is
/// preprocessed or compiled (choose_order compares partitions before it builds them).
TORCH_DELEGATE_INTERNAL partitioned_module partition_module(const backend_list& backends, const torch::jit::Module& module,
                                                           const partition_options& options, region_decider& decider);

/// lower_partitioned's second half: each backend's regions of `planned` lowered in one child
/// (lower_regions, with that backend's `specs` entry) and each method rewritten to call them.
TORCH_DELEGATE_INTERNAL torch::jit::Module build_partitioned(const backend_list& backends, partitioned_module planned,
                                                            const partition_options& options,
                                                            const std::vector<c10::impl::GenericDict>& specs);

/// Partially lowers `module` (not modified; the request checked already) to a priority list of
/// backends, each candidate region given to its backend or not by `decider`: a copy sharing its
/// parameters, whose partitioned methods call their regions in one child per backend (the
/// first's `__delegate`, the others' `__delegate_<backend>`), each lowered by lower_regions with
/// that backend's `specs` entry. The report is stored with the module (delegation_report_of reads
/// it, after save/load too).
TORCH_DELEGATE_INTERNAL torch::jit::Module lower_partitioned(const backend_list& backends, const torch::jit::Module& module,
                                                             const partition_options& options,
                                                             const std::vector<c10::impl::GenericDict>& specs,
                                                             region_decider& decider);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition_rewrite.ipp>
#endif
