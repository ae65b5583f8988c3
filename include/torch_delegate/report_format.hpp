// The delegation report as saved with a partially lowered module (the attribute
// `_torch_delegate_report_data`): this header owns that format, as payload_format.hpp owns the
// processed payload. Nothing else encodes or decodes it.
//
//   version 8: (8, backend, module, [(method, [region], [kept], [decided])])
//       region, kept: as 7
//       decided: (test, value, basis, location): a condition decided at lowering
//   version 7: as 8 without the decided conditions: (7, backend, module, [(method, [region], [kept])])
//       region: (name, node_count, [kind], location, depth, submodule, [conversion], backend,
//                backend_ms, torchscript_ms, decision)
//       kept:   (kind, reason token, detail, location, depth, submodule,
//                [(backend, reason token, detail)])
//     backend: the report's backends, ", "-separated in priority order; a region's, its own.
//     A kept node's reason and detail are its primary ones; the list has every backend's.
//   version 6: as 7 without the regions' decision (issue 40):
//       region: (name, node_count, [kind], location, depth, submodule, [conversion], backend,
//                backend_ms, torchscript_ms)
//       kept:   (kind, reason token, detail, location, depth, submodule,
//                [(backend, reason token, detail)])
//     backend: the report's backends, ", "-separated in priority order; a region's, its own.
//     A kept node's reason and detail are its primary ones; the list has every backend's.
//   version 5: as 6 without the kept nodes' per-backend reasons (a node no backend of a list
//     took was saved with the last backend's reason; read back as that backend's, the only
//     entry of kept_node::per_backend; before 5, the report's one backend's):
//       kept:   (kind, reason token, detail, location, depth, submodule)
//   version 4: as 5 without the regions' backend and times (a region's backend is the report's):
//       region: (name, node_count, [kind], location, depth, submodule, [conversion])
//       kept:   (kind, reason token, detail, location, depth, submodule)
//   version 3: as 4 without the regions' conversions:
//       region: (name, node_count, [kind], location, depth, submodule)
//       kept:   (kind, reason token, detail, location, depth, submodule)
//     reason tokens are stable identifiers ("unsupported_kind", "outside_selection", ...), never
//     the readable labels, so that rewording a label changes no saved report.
//   version 2 (issue 25): as 3, the reason saved as its label ("unsupported kind", ...).
//   version 1 (4619e82): as 2 without the submodule fields.
// Typed tuples (no Any): the report pickles, loads in the lite interpreter and reads back field
// by field. Decoding never throws and never crashes: anything it cannot read is nullopt (fuzzed:
// tests/fuzz/fuzz_report.cpp).
#pragma once

#include <ATen/core/ivalue.h>

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/report.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace torch_delegate::detail {

inline constexpr std::int64_t report_format_version = 8;

/// The stable token a reason is saved as: "unsupported_kind", ...
TORCH_DELEGATE_DECL std::string_view token_of(kept_reason reason);
/// The reason a token names; nullopt for a token this build does not know.
TORCH_DELEGATE_DECL std::optional<kept_reason> reason_of_token(std::string_view token);

/// The types of a saved report of `version` (1 to report_format_version) and of its parts.
TORCH_DELEGATE_INTERNAL c10::TypePtr report_data_type(std::int64_t version = report_format_version);
TORCH_DELEGATE_DECL c10::TypePtr method_data_type(std::int64_t version);
TORCH_DELEGATE_DECL c10::TypePtr region_data_type(std::int64_t version);
TORCH_DELEGATE_DECL c10::TypePtr kept_data_type(std::int64_t version);
TORCH_DELEGATE_INTERNAL c10::TypePtr backend_reason_data_type();

/// The report as data, in the current version.
TORCH_DELEGATE_DECL c10::IValue encode_report(const delegation_report& report);

/// A saved report of any version this build reads; nullopt for anything else.
TORCH_DELEGATE_DECL std::optional<delegation_report> decode_report(const c10::IValue& value) noexcept;

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/report_format.ipp>
#endif
