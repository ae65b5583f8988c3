// Definitions for report_format.hpp: the saved delegation report, versions 1 to 7.
#pragma once

#include <torch_delegate/report_format.hpp>

#include <array>
#include <utility>

namespace torch_delegate::detail {

/// Each reason with its stable token. Never change a token: saved reports (version 3 on) hold them.
inline constexpr std::array<std::pair<kept_reason, std::string_view>, 14> reason_tokens{{
    {kept_reason::unsupported_kind, "unsupported_kind"},
    {kept_reason::excluded_by_user, "excluded_by_user"},
    {kept_reason::outside_selection, "outside_selection"},
    {kept_reason::control_flow, "control_flow"},
    {kept_reason::mutation_or_aliasing, "mutation_or_aliasing"},
    {kept_reason::boundary_type, "boundary_type"},
    {kept_reason::region_too_small, "region_too_small"},
    {kept_reason::refused_by_backend, "refused_by_backend"},
    {kept_reason::attribute_read, "attribute_read"},
    {kept_reason::result_tuple, "result_tuple"},
    {kept_reason::slower_on_backend, "slower_on_backend"},
    {kept_reason::gain_below_minimum, "gain_below_minimum"},
    {kept_reason::not_separable, "not_separable"},
    {kept_reason::computed_at_lowering, "computed_at_lowering"},
}};

/// The labels versions 1 and 2 saved, frozen here (the labels of to_string may change).
inline constexpr std::array<std::pair<kept_reason, std::string_view>, 9> legacy_reason_labels{{
    {kept_reason::unsupported_kind, "unsupported kind"},
    {kept_reason::excluded_by_user, "excluded by the user"},
    {kept_reason::control_flow, "control flow"},
    {kept_reason::mutation_or_aliasing, "mutation or aliasing"},
    {kept_reason::boundary_type, "boundary type"},
    {kept_reason::region_too_small, "region too small"},
    {kept_reason::refused_by_backend, "refused by the backend"},
    {kept_reason::attribute_read, "attribute read"},
    {kept_reason::result_tuple, "result tuple"},
}};
/// How versions 1 and 2 saved a node outside partition_options::lower_submodules: excluded by
/// the user, with this detail.
inline constexpr std::string_view legacy_outside_selection_detail = "outside the submodules to lower";

TORCH_DELEGATE_DECL std::string_view token_of(kept_reason reason) {
  for (const auto& [known, token] : reason_tokens)
    if (known == reason) return token;
  return "?";
}

TORCH_DELEGATE_DECL std::optional<kept_reason> reason_of_token(std::string_view token) {
  for (const auto& [reason, known] : reason_tokens)
    if (known == token) return reason;
  return std::nullopt;
}

TORCH_DELEGATE_DECL c10::TypePtr region_data_type(std::int64_t version) {
  std::vector<c10::TypePtr> fields{c10::StringType::get(), c10::IntType::get(), c10::ListType::ofStrings(),
                                   c10::StringType::get(), c10::IntType::get()};
  if (version >= 2) fields.push_back(c10::StringType::get());  // submodule
  if (version >= 4) fields.push_back(c10::ListType::ofStrings());  // conversions
  if (version >= 5) {
    fields.push_back(c10::StringType::get());  // backend
    fields.push_back(c10::FloatType::get());   // backend_ms
    fields.push_back(c10::FloatType::get());   // torchscript_ms
  }
  if (version >= 7) fields.push_back(c10::StringType::get());  // decision
  return c10::TupleType::create(std::move(fields));
}

TORCH_DELEGATE_INTERNAL c10::TypePtr backend_reason_data_type() {
  return c10::TupleType::create({c10::StringType::get(), c10::StringType::get(), c10::StringType::get()});
}

TORCH_DELEGATE_DECL c10::TypePtr kept_data_type(std::int64_t version) {
  std::vector<c10::TypePtr> fields{c10::StringType::get(), c10::StringType::get(), c10::StringType::get(),
                                   c10::StringType::get(), c10::IntType::get()};
  if (version >= 2) fields.push_back(c10::StringType::get());  // submodule
  if (version >= 6) fields.push_back(c10::ListType::create(backend_reason_data_type()));  // per_backend
  return c10::TupleType::create(std::move(fields));
}

/// The last name of a report's ", "-separated backends ("xnnpack, onednn": "onednn").
inline std::string last_backend(const std::string& backends) {
  const std::size_t comma = backends.rfind(", ");
  return comma == std::string::npos ? backends : backends.substr(comma + 2);
}

/// A decided condition: (test, value, basis, location).
inline c10::TypePtr decided_data_type() {
  return c10::TupleType::create({c10::StringType::get(), c10::StringType::get(), c10::StringType::get(), c10::StringType::get()});
}

TORCH_DELEGATE_DECL c10::TypePtr method_data_type(std::int64_t version) {
  if (version >= 8)
    return c10::TupleType::create({c10::StringType::get(), c10::ListType::create(region_data_type(version)),
                                   c10::ListType::create(kept_data_type(version)), c10::ListType::create(decided_data_type())});
  return c10::TupleType::create(
      {c10::StringType::get(), c10::ListType::create(region_data_type(version)), c10::ListType::create(kept_data_type(version))});
}

TORCH_DELEGATE_INTERNAL c10::TypePtr report_data_type(std::int64_t version) {
  return c10::TupleType::create(
      {c10::IntType::get(), c10::StringType::get(), c10::StringType::get(), c10::ListType::create(method_data_type(version))});
}

TORCH_DELEGATE_DECL c10::IValue encode_report(const delegation_report& report) {
  const std::int64_t version = report_format_version;
  c10::impl::GenericList methods(method_data_type(version));
  for (const method_delegation& method : report.methods) {
    c10::impl::GenericList regions(region_data_type(version));
    for (const region_report& region : method.regions)
      regions.push_back(c10::ivalue::Tuple::create({region.name, static_cast<std::int64_t>(region.node_count),
                                                    c10::List<std::string>(region.kinds), region.location,
                                                    static_cast<std::int64_t>(region.depth), region.submodule,
                                                    c10::List<std::string>(region.conversions), region.backend,
                                                    region.backend_ms, region.torchscript_ms, region.decision}));
    c10::impl::GenericList kept(kept_data_type(version));
    for (const kept_node& node : method.kept) {
      c10::impl::GenericList per_backend(backend_reason_data_type());
      for (const backend_reason& each : node.per_backend)
        per_backend.push_back(c10::ivalue::Tuple::create({each.backend, std::string(token_of(each.reason)), each.detail}));
      kept.push_back(c10::ivalue::Tuple::create({node.kind, std::string(token_of(node.reason)), node.detail, node.location,
                                                 static_cast<std::int64_t>(node.depth), node.submodule,
                                                 std::move(per_backend)}));
    }
    c10::impl::GenericList decided(decided_data_type());
    for (const decided_condition& condition : method.decided)
      decided.push_back(c10::ivalue::Tuple::create({condition.test, condition.value, condition.basis, condition.location}));
    methods.push_back(c10::ivalue::Tuple::create({method.method, std::move(regions), std::move(kept), std::move(decided)}));
  }
  return c10::ivalue::Tuple::create({version, report.backend, report.module, std::move(methods)});
}

/// Whether `value` is a tuple of `type`, by its elements: a container's static type may lie (a
/// List[Tuple[str, int]] can hold anything), so every level is checked on its own.
inline bool is_tuple_of(const c10::IValue& value, const c10::TypePtr& type) {
  return value.isTuple() && value.type()->isSubtypeOf(*type);
}

/// decode_report's work; may throw on what the type checks let through (it should not).
inline std::optional<delegation_report> decode_report_checked(const c10::IValue& value) {
  if (!value.isTuple()) return std::nullopt;
  const auto top = value.toTupleRef().elements().vec();
  if (top.size() != 4 || !top[0].isInt()) return std::nullopt;
  const std::int64_t version = top[0].toInt();
  if (version < 1 || version > report_format_version || !value.type()->isSubtypeOf(*report_data_type(version)))
    return std::nullopt;
  auto count = [](std::int64_t n) -> std::optional<std::size_t> {
    return n < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(n));
  };
  delegation_report report{top[1].toStringRef(), top[2].toStringRef(), {}};
  const c10::TypePtr method_type = method_data_type(version), region_type = region_data_type(version),
                     kept_type = kept_data_type(version);
  for (const c10::IValue& method_value : top[3].toListRef()) {
    if (!is_tuple_of(method_value, method_type)) return std::nullopt;
    const auto method = method_value.toTupleRef().elements().vec();
    method_delegation entry{method[0].toStringRef(), {}, {}, {}};
    for (const c10::IValue& region_value : method[1].toListRef()) {
      if (!is_tuple_of(region_value, region_type)) return std::nullopt;
      const auto region = region_value.toTupleRef().elements().vec();
      const std::optional<std::size_t> nodes = count(region[1].toInt());
      if (!nodes) return std::nullopt;
      region_report read;
      read.name = region[0].toStringRef();
      read.node_count = *nodes;
      read.location = region[3].toStringRef();
      read.depth = static_cast<int>(region[4].toInt());
      if (version >= 2) read.submodule = region[5].toStringRef();
      read.backend = report.backend;  // before version 5: the report's one backend
      if (version >= 5) {
        read.backend = region[7].toStringRef();
        read.backend_ms = region[8].toDouble();
        read.torchscript_ms = region[9].toDouble();
      }
      if (version >= 7) read.decision = region[10].toStringRef();
      for (const c10::IValue& kind : region[2].toListRef()) {
        if (!kind.isString()) return std::nullopt;
        read.kinds.push_back(kind.toStringRef());
      }
      if (version >= 4)
        for (const c10::IValue& conversion : region[6].toListRef()) {
          if (!conversion.isString()) return std::nullopt;
          read.conversions.push_back(conversion.toStringRef());
        }
      entry.regions.push_back(std::move(read));
    }
    for (const c10::IValue& kept_value : method[2].toListRef()) {
      if (!is_tuple_of(kept_value, kept_type)) return std::nullopt;
      const auto kept = kept_value.toTupleRef().elements().vec();
      const std::string& saved = kept[1].toStringRef();
      std::string detail = kept[2].toStringRef();
      std::optional<kept_reason> reason;
      if (version >= 3) {
        reason = reason_of_token(saved);
      } else {
        for (const auto& [known, label] : legacy_reason_labels)
          if (label == saved) reason = known;
        if (reason == kept_reason::excluded_by_user && detail == legacy_outside_selection_detail) {
          reason = kept_reason::outside_selection;
          detail.clear();
        }
      }
      if (!reason) return std::nullopt;  // written by a newer build with reasons this one does not know
      std::vector<backend_reason> per_backend;
      if (version >= 6) {
        for (const c10::IValue& each_value : kept[6].toListRef()) {
          if (!is_tuple_of(each_value, backend_reason_data_type())) return std::nullopt;
          const auto each = each_value.toTupleRef().elements().vec();
          const std::optional<kept_reason> each_reason = reason_of_token(each[1].toStringRef());
          if (!each_reason) return std::nullopt;
          per_backend.push_back({each[0].toStringRef(), *each_reason, each[2].toStringRef()});
        }
      } else {
        // Older builds saved one reason: the last backend's (before version 5, the only one's).
        per_backend.push_back({last_backend(report.backend), *reason, detail});
      }
      entry.kept.push_back({kept[0].toStringRef(), *reason, std::move(detail), kept[3].toStringRef(),
                            static_cast<int>(kept[4].toInt()), version >= 2 ? kept[5].toStringRef() : std::string(),
                            std::move(per_backend)});
    }
    if (version >= 8) {
      for (const c10::IValue& decided_value : method[3].toListRef()) {
        if (!is_tuple_of(decided_value, decided_data_type())) return std::nullopt;
        const auto decided = decided_value.toTupleRef().elements().vec();
        entry.decided.push_back({decided[0].toStringRef(), decided[1].toStringRef(), decided[2].toStringRef(), decided[3].toStringRef()});
      }
    }
    report.methods.push_back(std::move(entry));
  }
  return report;
}

TORCH_DELEGATE_DECL std::optional<delegation_report> decode_report(const c10::IValue& value) noexcept {
  try {
    return decode_report_checked(value);
  } catch (...) {
    return std::nullopt;  // unreachable for a value its type check accepts; never a crash
  }
}

}  // namespace torch_delegate::detail

namespace torch_delegate {

TORCH_DELEGATE_DECL std::optional<delegation_report> delegation_report_data_of(const torch::jit::Module& module) {
  if (!module.hasattr(delegation_report_data_attribute)) return std::nullopt;
  return detail::decode_report(module.attr(delegation_report_data_attribute));
}

}  // namespace torch_delegate
