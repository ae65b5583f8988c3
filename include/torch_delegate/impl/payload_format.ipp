// Definitions for payload_format.hpp.
#pragma once

#include <torch_delegate/payload_format.hpp>

namespace torch_delegate::detail {

TORCH_DELEGATE_DECL c10::IValue encode_debug_info(const method_debug_info& debug) {
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

TORCH_DELEGATE_DECL c10::IValue encode_method_record(const method_record& record) {
  c10::List<std::string> argument_names;
  for (const std::string& name : record.argument_names) argument_names.push_back(name);
  return c10::ivalue::Tuple::create({c10::IValue(record.signature), c10::IValue(argument_names),
                                     c10::IValue(record.output_count), record.payload,
                                     encode_debug_info(record.debug ? *record.debug : method_debug_info{})});
}

TORCH_DELEGATE_DECL c10::IValue encode_processed(std::string_view backend, std::int64_t payload_version,
                                    c10::impl::GenericDict methods) {
  return c10::ivalue::Tuple::create({c10::IValue(std::string(backend)), c10::IValue(processed_format_version),
                                     c10::IValue(payload_version), c10::IValue(std::move(methods))});
}

TORCH_DELEGATE_DECL decoded_method read_processed(const c10::IValue& processed, std::string_view backend, const std::string& method,
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
  return out;
}

}  // namespace torch_delegate::detail
