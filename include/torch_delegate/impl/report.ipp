// Definitions for report.hpp: reasons' labels, the report's text, a module's report as text
// (as data: report_format.ipp, with the format's decoder).
#pragma once

#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/report.hpp>

#include <algorithm>
#include <sstream>

namespace torch_delegate {

TORCH_DELEGATE_DECL std::string_view to_string(kept_reason reason) {
  switch (reason) {
    case kept_reason::unsupported_kind: return "unsupported kind";
    case kept_reason::excluded_by_user: return "excluded by the user";
    case kept_reason::outside_selection: return "outside the submodules to lower";
    case kept_reason::control_flow: return "control flow";
    case kept_reason::mutation_or_aliasing: return "mutation or aliasing";
    case kept_reason::boundary_type: return "boundary type";
    case kept_reason::region_too_small: return "region too small";
    case kept_reason::refused_by_backend: return "refused by the backend";
    case kept_reason::attribute_read: return "attribute read";
    case kept_reason::result_tuple: return "result tuple";
    case kept_reason::slower_on_backend: return "slower on the backend";
    case kept_reason::gain_below_minimum: return "gain below the minimum";
    case kept_reason::not_separable: return "not separable";
    case kept_reason::computed_at_lowering: return "computed at lowering";
  }
  return "?";
}

TORCH_DELEGATE_DECL int progress_of(kept_reason reason) {
  switch (reason) {
    case kept_reason::attribute_read:
    case kept_reason::computed_at_lowering:
    case kept_reason::control_flow:
    case kept_reason::outside_selection: return 0;
    case kept_reason::unsupported_kind:
    case kept_reason::result_tuple: return 1;
    case kept_reason::excluded_by_user: return 2;
    case kept_reason::mutation_or_aliasing: return 3;
    case kept_reason::boundary_type: return 4;
    case kept_reason::region_too_small: return 5;
    case kept_reason::refused_by_backend: return 6;
    case kept_reason::slower_on_backend: return 7;
    case kept_reason::not_separable: return 8;
    case kept_reason::gain_below_minimum: return 9;
  }
  return 0;
}

TORCH_DELEGATE_DECL const backend_reason* primary_reason(const std::vector<backend_reason>& per_backend) {
  const backend_reason* furthest = nullptr;
  for (const backend_reason& each : per_backend)
    if (!furthest || progress_of(each.reason) > progress_of(furthest->reason)) furthest = &each;
  return furthest;
}

namespace detail {
/// Whether every backend gave `node` the same reason and detail as its primary one: then one line
/// says it (as with one backend).
inline bool one_reason(const kept_node& node) {
  return std::all_of(node.per_backend.begin(), node.per_backend.end(), [&](const backend_reason& each) {
    return each.reason == node.reason && each.detail == node.detail;
  });
}
}  // namespace detail

TORCH_DELEGATE_DECL std::string delegation_report::to_string() const {
  std::ostringstream out;
  const bool several = backend.find(", ") != std::string::npos;
  out << "delegation of " << module << (several ? " to backends " : " to backend '") << backend << (several ? "\n" : "'\n");
  for (const method_delegation& method : methods) {
    out << "  " << method.method << ": " << method.regions.size() << (method.regions.size() == 1 ? " region, " : " regions, ")
        << method.delegated_nodes() << " nodes delegated, " << method.kept.size() << " kept in TorchScript\n";
    // What the method was specialized for (checked at its entry; else it runs as written).
    for (const decided_condition& condition : method.decided)
      out << "    decided " << condition.test << " = " << condition.value << " (" << condition.basis << ")"
          << (condition.location.empty() ? "" : " at " + condition.location) << "\n";
    for (const region_report& region : method.regions) {
      out << "    region " << region.name << ": " << region.node_count << " nodes (";
      out << detail::comma_separated(region.kinds);
      out << ")" << (several ? " on " + region.backend : "") << (region.submodule.empty() ? "" : " in " + region.submodule)
          << (region.location.empty() ? "" : " at " + region.location);
      if (region.backend_ms >= 0 && region.torchscript_ms >= 0) {
        std::ostringstream timing;
        timing.precision(3);
        timing << ": " << region.backend_ms << " ms on " << region.backend << ", " << region.torchscript_ms << " ms in TorchScript";
        if (!region.decision.empty()) timing << " (" << region.decision << ")";
        out << timing.str();
      }
      out << "\n";
      for (const std::string& conversion : region.conversions) out << "      conversion: " << conversion << "\n";
    }
    for (const kept_node& node : method.kept) {
      const std::string where =
          (node.submodule.empty() ? "" : " in " + node.submodule) + (node.location.empty() ? "" : " at " + node.location);
      if (detail::one_reason(node)) {
        out << "    kept " << node.kind << ": " << torch_delegate::to_string(node.reason);
        if (!node.detail.empty()) out << " (" << node.detail << ")";
        out << where << "\n";
        continue;
      }
      // Backends that disagree: one line each, in the list's order (a detail may hold "; " or
      // ", ": one line per backend keeps each readable).
      out << "    kept " << node.kind << where << ":\n";
      for (const backend_reason& each : node.per_backend) {
        out << "      " << each.backend << ": " << torch_delegate::to_string(each.reason);
        if (!each.detail.empty()) out << " (" << each.detail << ")";
        out << "\n";
      }
    }
  }
  return out.str();
}

TORCH_DELEGATE_DECL std::string delegation_report_of(const torch::jit::Module& module) {
  if (!module.hasattr(delegation_report_attribute)) return {};
  const c10::IValue value = module.attr(delegation_report_attribute);
  return value.isString() ? value.toStringRef() : std::string();
}

}  // namespace torch_delegate
