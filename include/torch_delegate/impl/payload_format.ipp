// Definitions for payload_format.hpp.
#pragma once

#include <torch_delegate/payload_format.hpp>

#include <algorithm>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL c10::IValue encode_debug_info(const method_debug_info& debug) {
  c10::impl::GenericDict locations(c10::IntType::get(), c10::AnyType::get());
  for (const auto& [handle, where] : debug.locations) {
    c10::List<std::string> frames;
    for (const auto& frame : where.call_stack) frames.push_back(frame);
    locations.insert(handle, c10::ivalue::Tuple::create({where.node_kind, where.file_line, frames, where.source}));
  }
  c10::Dict<std::int64_t, c10::List<std::int64_t>> instructions;
  for (const auto& [instruction, handles] : debug.instruction_handles)
    instructions.insert(instruction, c10::List<std::int64_t>(handles));
  return c10::ivalue::Tuple::create({c10::IValue(locations), c10::IValue(instructions)});
}

TORCH_DELEGATE_DECL std::shared_ptr<method_debug_info> decode_debug_info(const c10::IValue& value) {
  auto malformed = [] { throw c10::Error("malformed debug information", ""); };
  if (!value.isTuple()) malformed();
  const std::vector<c10::IValue> parts = value.toTupleRef().elements().vec();
  if (parts.size() < 2 || !parts[0].isGenericDict() || !parts[1].isGenericDict()) malformed();
  auto debug = std::make_shared<method_debug_info>();
  for (const auto& entry : parts[0].toGenericDict()) {
    if (!entry.key().isInt() || !entry.value().isTuple()) malformed();
    const std::vector<c10::IValue> fields = entry.value().toTupleRef().elements().vec();
    if (fields.size() < 4 || !fields[0].isString() || !fields[1].isString() || !fields[2].isList() || !fields[3].isString())
      malformed();
    debug_location where{fields[0].toStringRef(), fields[1].toStringRef(), {}, fields[3].toStringRef()};
    for (const c10::IValue& frame : fields[2].toListRef()) {
      if (!frame.isString()) malformed();
      where.call_stack.push_back(frame.toStringRef());
    }
    debug->locations.emplace(entry.key().toInt(), std::move(where));
  }
  for (const auto& entry : parts[1].toGenericDict()) {
    if (!entry.key().isInt() || !entry.value().isList()) malformed();
    std::vector<std::int64_t> handles;
    for (const c10::IValue& handle : entry.value().toListRef()) {
      if (!handle.isInt()) malformed();
      handles.push_back(handle.toInt());
    }
    debug->instruction_handles.emplace(entry.key().toInt(), std::move(handles));
  }
  return debug;
}

TORCH_DELEGATE_INTERNAL c10::IValue encode_method_record(const method_record& record) {
  c10::List<std::string> argument_names;
  for (const std::string& name : record.argument_names) argument_names.push_back(name);
  std::vector<c10::IValue> fields{c10::IValue(record.signature), c10::IValue(argument_names),
                                  c10::IValue(record.output_count), record.payload,
                                  encode_debug_info(record.debug ? *record.debug : method_debug_info{})};
  if (!record.input_specs.empty()) {  // appended only when declared: older readers ignore it
    c10::impl::GenericList specs(c10::OptionalType::create(
        c10::TupleType::create({c10::ListType::ofInts(), c10::IntType::get()})));
    for (const std::optional<tensor_spec>& spec : record.input_specs)
      specs.push_back(spec ? c10::IValue(c10::ivalue::Tuple::create(
                                 {c10::IValue(c10::List<std::int64_t>(spec->sizes)),
                                  c10::IValue(static_cast<std::int64_t>(spec->dtype))}))
                           : c10::IValue());
    fields.emplace_back(std::move(specs));
    // Memory formats: a field of their own, appended only when one is not contiguous (readers
    // before it ignore it; a payload without it has contiguous specs).
    const bool laid_out = std::any_of(record.input_specs.begin(), record.input_specs.end(), [](const auto& spec) {
      return spec && spec->memory_format != c10::MemoryFormat::Contiguous;
    });
    if (laid_out || record.max_replans > 0) {
      c10::List<std::int64_t> formats;
      for (const std::optional<tensor_spec>& spec : record.input_specs)
        formats.push_back(spec && spec->memory_format ? static_cast<std::int64_t>(*spec->memory_format) : -1);
      fields.emplace_back(std::move(formats));
    }
    if (record.max_replans > 0) fields.emplace_back(record.max_replans);
  }
  return c10::ivalue::Tuple::create(std::move(fields));
}

TORCH_DELEGATE_INTERNAL c10::IValue encode_processed(std::string_view backend, std::int64_t payload_version,
                                    c10::impl::GenericDict methods, const named_data_store& named_data) {
  if (named_data.empty())
    return c10::ivalue::Tuple::create({c10::IValue(std::string(backend)), c10::IValue(std::int64_t{1}),
                                       c10::IValue(payload_version), c10::IValue(std::move(methods))});
  c10::impl::GenericDict table(c10::StringType::get(), c10::TupleType::create({c10::TensorType::get(), c10::IntType::get()}));
  for (const auto& [key, entry] : named_data.entries())
    table.insert(key, c10::ivalue::Tuple::create({c10::IValue(entry.data), c10::IValue(entry.alignment)}));
  return c10::ivalue::Tuple::create({c10::IValue(std::string(backend)), c10::IValue(std::int64_t{2}),
                                     c10::IValue(payload_version), c10::IValue(std::move(methods)), c10::IValue(std::move(table))});
}

/// The named-data table of a checked format-2 payload; None for format 1.
inline c10::IValue named_data_table(const c10::IValue& processed, std::string_view backend) {
  // Anything malformed above the table is read_processed's to report, per method.
  if (!processed.isTuple() || processed.toTupleRef().elements().size() < 4) return {};
  // Copied out: GCC -O2 warns about reading a 5th element through TupleElements (see above).
  const std::vector<c10::IValue> top = processed.toTupleRef().elements().vec();
  // Format 1 has no table; a format this build does not read is read_processed's to report.
  if (!top[1].isInt() || top[1].toInt() < 2 || top[1].toInt() > processed_format_version) return {};
  if (top.size() < 5 || !top[4].isGenericDict())
    fail_processed(backend, {}, "format 2 needs a named-data table Dict[str, Tuple[Tensor, int]] as 5th field");
  return top[4];
}

TORCH_DELEGATE_DECL std::shared_ptr<named_data_map> read_named_data(const c10::IValue& processed, std::string_view backend) {
  auto map = std::make_shared<named_data_map>(std::string(backend));
  const c10::IValue table = named_data_table(processed, backend);
  if (table.isNone()) return map;
  for (const auto& item : table.toGenericDict()) {
    const c10::IValue& value = item.value();
    if (!item.key().isString() || !value.isTuple() || value.toTupleRef().elements().size() < 2)
      fail_processed(backend, {}, "malformed named-data entry");
    const std::string& key = item.key().toStringRef();
    const c10::IValue data = value.toTupleRef().elements()[0];
    const c10::IValue alignment = value.toTupleRef().elements()[1];
    if (!data.isTensor() || !alignment.isInt()) fail_processed(backend, {}, "malformed named-data entry '" + key + "'");
    if (alignment.toInt() == 0) {  // released after compile where it was saved: see below
      map->erase(key);
      continue;
    }
    const at::Tensor& tensor = data.toTensor();
    if (!valid_named_data_alignment(alignment.toInt()) || tensor.device().type() != c10::DeviceType::CPU || !tensor.is_contiguous())
      fail_processed(backend, {}, "malformed named-data entry '" + key + "'");
    map->insert(key, named_data_entry{tensor, alignment.toInt()});
  }
  return map;
}

TORCH_DELEGATE_INTERNAL void release_named_data_in(const c10::IValue& processed, const std::string& key) {
  const c10::IValue table = named_data_table(processed, "");
  if (table.isNone()) return;
  c10::impl::GenericDict dict = table.toGenericDict();
  if (!dict.contains(key)) return;
  dict.insert_or_assign(key, c10::ivalue::Tuple::create({c10::IValue(at::Tensor()), c10::IValue(std::int64_t{0})}));
}

TORCH_DELEGATE_DECL std::vector<std::string> released_named_data(const c10::IValue& processed) {
  std::vector<std::string> released;
  if (!processed.isTuple() || processed.toTupleRef().elements().size() < 5) return released;
  const c10::IValue table = processed.toTupleRef().elements().vec()[4];
  if (!table.isGenericDict()) return released;
  for (const auto& item : table.toGenericDict())
    if (item.value().isTuple() && item.value().toTupleRef().elements().size() >= 2 &&
        item.value().toTupleRef().elements()[1].isInt() && item.value().toTupleRef().elements()[1].toInt() == 0)
      released.push_back(item.key().toStringRef());
  std::sort(released.begin(), released.end());
  return released;
}

TORCH_DELEGATE_INTERNAL decoded_method read_processed(const c10::IValue& processed, std::string_view backend, const std::string& method,
                                     payload_versions versions) {
  if (!processed.isTuple() || processed.toTupleRef().elements().size() < 4)
    fail_processed(backend, method, "expected a 4-tuple stamped by torch-delegate, got " + processed.type()->annotation_str());
  const std::vector<c10::IValue> top = processed.toTupleRef().elements().vec();
  if (!top[0].isString() || !top[1].isInt() || !top[2].isInt() || !top[3].isGenericDict())
    fail_processed(backend, method, "expected (str, int, int, Dict), got " + processed.type()->annotation_str());
  const std::string& made_for = top[0].toStringRef();
  if (made_for != backend) fail_incompatible(backend, method, "it was made for backend '" + made_for + "'");
  const std::int64_t format = top[1].toInt();
  if (format < 1 || format > processed_format_version)
    fail_incompatible(backend, method, "it has torch-delegate format version " + std::to_string(format) +
                                           ", this build reads versions 1 to " + std::to_string(processed_format_version));
  const std::int64_t version = top[2].toInt();
  if (version < versions.oldest || version > versions.newest)
    fail_incompatible(backend, method, "it was made by payload version " + std::to_string(version) + " of backend '" +
                                           std::string(backend) + "', this build of the backend reads versions " +
                                           std::to_string(versions.oldest) + " to " + std::to_string(versions.newest) +
                                           ". Lower the model again with this build, or load it with a build that reads "
                                           "version " + std::to_string(version) + ".");
  auto methods = top[3].toGenericDict();
  auto found = methods.find(method);
  if (found == methods.end()) fail_processed(backend, method, "no payload for this method");
  const c10::IValue& entry = found->value();
  if (!entry.isTuple() || entry.toTupleRef().elements().size() < 5) fail_processed(backend, method, "malformed method entry");
  const std::vector<c10::IValue> fields = entry.toTupleRef().elements().vec();
  if (!fields[0].isString() || !is_string_list(fields[1]) || !fields[2].isInt() || !fields[4].isTuple())
    fail_processed(backend, method, "malformed method entry " + entry.type()->annotation_str());
  decoded_method out;
  out.record.signature = fields[0].toStringRef();
  for (const c10::IValue& name : fields[1].toListRef()) out.record.argument_names.push_back(name.toStringRef());
  out.record.output_count = fields[2].toInt();
  if (out.record.output_count < 0) fail_processed(backend, method, "negative output count");
  out.record.payload = fields[3];
  out.payload_version = version;
  try {
    out.record.debug = decode_debug_info(fields[4]);
  } catch (const c10::Error&) {
    fail_processed(backend, method, "malformed debug information");
  }
  if (fields.size() > 5 && !fields[5].isNone()) {
    auto malformed = [&] { fail_processed(backend, method, "malformed input specs"); };
    if (!fields[5].isList()) malformed();
    for (const c10::IValue& entry : fields[5].toListRef()) {
      if (entry.isNone()) {
        out.record.input_specs.emplace_back();
        continue;
      }
      if (!entry.isTuple() || entry.toTupleRef().elements().size() != 2) malformed();
      const c10::IValue sizes = entry.toTupleRef().elements()[0];
      const c10::IValue dtype = entry.toTupleRef().elements()[1];
      if (!sizes.isList() || !dtype.isInt() || dtype.toInt() < 0 ||
          dtype.toInt() >= static_cast<std::int64_t>(c10::ScalarType::NumOptions))
        malformed();
      tensor_spec spec{{}, static_cast<c10::ScalarType>(dtype.toInt())};
      for (const c10::IValue& size : sizes.toListRef()) {
        if (!size.isInt() || size.toInt() < -1) malformed();
        spec.sizes.push_back(size.toInt());
      }
      out.record.input_specs.emplace_back(std::move(spec));
    }
    if (out.record.input_specs.size() != out.record.argument_names.size()) malformed();
    if (fields.size() > 6) {
      if (!fields[6].isIntList() || fields[6].toIntList().size() != out.record.input_specs.size()) malformed();
      for (std::size_t i = 0; i < out.record.input_specs.size(); ++i) {
        const std::int64_t format = fields[6].toIntList().get(i);
        if (format != -1 && format != static_cast<std::int64_t>(c10::MemoryFormat::Contiguous) &&
            format != static_cast<std::int64_t>(c10::MemoryFormat::ChannelsLast))
          malformed();
        if (out.record.input_specs[i])
          out.record.input_specs[i]->memory_format =
              format == -1 ? std::nullopt : std::optional<c10::MemoryFormat>(static_cast<c10::MemoryFormat>(format));
      }
    }
    if (fields.size() > 7) {
      if (!fields[7].isInt() || fields[7].toInt() < 0) malformed();
      out.record.max_replans = fields[7].toInt();
    }
  }
  return out;
}

}  // namespace torch_delegate::detail
