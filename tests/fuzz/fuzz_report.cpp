// libFuzzer target: the reader of the saved delegation report (report_format.hpp) on valid
// reports of every version, mutated by the input (any node replaced by any value, tuples cut or
// extended, lists whose elements no longer have the list's type), and on arbitrary values.
// Reading gives a report or nullopt, never an exception or a crash; a report that reads is
// encoded again (the current version) and must read back the same.
#include <torch_delegate/report_format.hpp>

#include "fuzz_values.hpp"

namespace {
using namespace torch_delegate::detail;
using torch_delegate::kept_reason;

torch_delegate::delegation_report sample() {
  return {"fuzz",
          "__torch__.M",
          {{"forward",
            {{"forward_region_0", 3, {"aten::add", "aten::mul"}, "model.py:3", 0, "encoder",
              {"input 0 (method argument x): to channels_last on entry"}, "fuzz", 0.5, 0.75},
             {"forward_region_1", 1, {"aten::relu"}, "", 1, "", {}, "fuzz", -1, -1}},
            {{"aten::conv2d", kept_reason::region_too_small, "1 node < 2", "model.py:2", 0, "encoder.conv",
              {{"fuzz", kept_reason::region_too_small, "1 node < 2"}, {"other", kept_reason::unsupported_kind, ""}}},
             {"aten::sub", kept_reason::outside_selection, "", "model.py:5", 0, "", {{"fuzz", kept_reason::outside_selection, ""}}},
             {"prim::GetAttr", kept_reason::attribute_read, "self.w", "", 0, ""}}},
           {"encode", {}, {{"aten::add_", kept_reason::mutation_or_aliasing, "writes to its input", "m.py:9", 0, ""}}}}};
}

/// `report` as a build before version 6 reads it: each kept node's one reason, as the report's
/// last backend's.
torch_delegate::delegation_report one_reason_each(torch_delegate::delegation_report report) {
  for (auto& method : report.methods)
    for (auto& node : method.kept) node.per_backend = {{report.backend, node.reason, node.detail}};
  return report;
}

/// `current` written in an older version: without the regions' decisions (6), without the kept
/// nodes' per-backend reasons (5),
/// without the regions' backends and times (4), without conversions (3), labels instead of tokens
/// (2), without submodules (1).
c10::IValue older(const c10::IValue& current, std::int64_t version) {
  static const std::pair<std::string_view, std::string_view> labels[] = {
      {"unsupported_kind", "unsupported kind"}, {"outside_selection", "excluded by the user"},
      {"attribute_read", "attribute read"}, {"mutation_or_aliasing", "mutation or aliasing"},
      {"region_too_small", "region too small"}};
  c10::impl::GenericList methods(method_data_type(version));
  for (const c10::IValue& method : current.toTupleRef().elements()[3].toListRef()) {
    const auto& fields = method.toTupleRef().elements();
    c10::impl::GenericList regions(region_data_type(version)), kept(kept_data_type(version));
    for (const c10::IValue& region : fields[1].toListRef()) {
      std::vector<c10::IValue> r = region.toTupleRef().elements().vec();
      if (version < 7) r.pop_back();  // decision
      if (version < 5) r.resize(r.size() - 3);  // backend, backend_ms, torchscript_ms
      if (version < 4) r.pop_back();  // conversions
      if (version == 1) r.pop_back();  // submodule
      regions.push_back(c10::ivalue::Tuple::create(std::move(r)));
    }
    for (const c10::IValue& node : fields[2].toListRef()) {
      std::vector<c10::IValue> k = node.toTupleRef().elements().vec();
      k.pop_back();  // per_backend
      for (const auto& [token, label] : labels)
        if (version <= 2 && k[1].toStringRef() == token) {
          if (token == "outside_selection") k[2] = std::string("outside the submodules to lower");
          k[1] = std::string(label);
        }
      if (version == 1) k.pop_back();
      kept.push_back(c10::ivalue::Tuple::create(std::move(k)));
    }
    methods.push_back(c10::ivalue::Tuple::create({fields[0], regions, kept}));
  }
  const auto& top = current.toTupleRef().elements();
  return c10::ivalue::Tuple::create({version, top[1], top[2], methods});
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const torch_delegate::delegation_report report = sample();
  static const c10::IValue saved[] = {encode_report(report),          older(encode_report(report), 5),
                                      older(encode_report(report), 4), older(encode_report(report), 3),
                                      older(encode_report(report), 2), older(encode_report(report), 1)};
  static const bool checked = [] {  // the unmutated reports of every version read back as written
    const torch_delegate::delegation_report one_reason = one_reason_each(report);  // versions 1 to 5
    torch_delegate::delegation_report unmeasured = one_reason;  // versions 1 to 4: not measured
    for (auto& method : unmeasured.methods)
      for (auto& region : method.regions) region.backend_ms = region.torchscript_ms = -1;
    torch_delegate::delegation_report without_conversions = unmeasured;  // versions 1 to 3 have none
    for (auto& method : without_conversions.methods)
      for (auto& region : method.regions) region.conversions.clear();
    torch_delegate::delegation_report without_submodules = without_conversions;  // version 1 has none
    for (auto& method : without_submodules.methods) {
      for (auto& region : method.regions) region.submodule.clear();
      for (auto& node : method.kept) node.submodule.clear();
    }
    if (decode_report(saved[0]) != report || decode_report(saved[1]) != one_reason || decode_report(saved[2]) != unmeasured ||
        decode_report(saved[3]) != without_conversions || decode_report(saved[4]) != without_conversions ||
        decode_report(saved[5]) != without_submodules)
      __builtin_trap();
    return true;
  }();
  (void)checked;
  FuzzedDataProvider in(data, size);
  const std::size_t which = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  const c10::IValue value = which < 6 ? fuzz_values::mutate(saved[which], in, 0) : fuzz_values::any_value(in, 0);
  const std::optional<torch_delegate::delegation_report> read = decode_report(value);  // noexcept: a throw aborts
  if (read) {
    (void)read->to_string();
    if (decode_report(encode_report(*read)) != read) __builtin_trap();
  }
  return 0;
}
