// libFuzzer target: the reader of `__processed_module` (payload_format.hpp) on valid payloads
// mutated by the input: any node replaced by any value, tuples truncated or extended, entries
// added. Reading gives a record or a c10::Error, never a crash; a record that reads is
// re-encoded and must read back the same.
#include <torch_delegate/payload_format.hpp>

#include <fuzzer/FuzzedDataProvider.h>

namespace {
using namespace torch_delegate::detail;

c10::IValue any_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange(0, depth > 2 ? 4 : 7)) {
    case 0: return in.ConsumeIntegral<std::int64_t>();
    case 1: return in.ConsumeFloatingPoint<double>();
    case 2: return in.ConsumeBool();
    case 3: return in.ConsumeRandomLengthString(16);
    case 4: return c10::IValue();
    case 5: {
      std::vector<c10::IValue> elements;
      for (int n = in.ConsumeIntegralInRange(0, 5); n > 0; --n) elements.push_back(any_value(in, depth + 1));
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    case 6: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) list.push_back(any_value(in, depth + 1));
      return list;
    }
    default: {
      const bool int_keys = in.ConsumeBool();
      c10::impl::GenericDict dict(int_keys ? c10::TypePtr(c10::IntType::get()) : c10::TypePtr(c10::StringType::get()),
                                  c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) {
        c10::IValue key = int_keys ? c10::IValue(in.ConsumeIntegral<std::int64_t>()) : c10::IValue(in.ConsumeRandomLengthString(8));
        dict.insert_or_assign(std::move(key), any_value(in, depth + 1));
      }
      return dict;
    }
  }
}

/// A copy of `value` with one random change somewhere inside it.
c10::IValue mutate(const c10::IValue& value, FuzzedDataProvider& in, int depth) {
  if (depth > 6 || in.ConsumeIntegralInRange(0, 5) == 0) return any_value(in, depth);
  if (value.isTuple()) {
    std::vector<c10::IValue> elements = value.toTupleRef().elements().vec();
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0: if (!elements.empty()) elements.resize(in.ConsumeIntegralInRange<std::size_t>(0, elements.size() - 1)); break;
      case 1: elements.push_back(any_value(in, depth + 1)); break;
      default:
        if (!elements.empty()) {
          auto& chosen = elements[in.ConsumeIntegralInRange<std::size_t>(0, elements.size() - 1)];
          chosen = mutate(chosen, in, depth + 1);
        }
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict().copy();
    if (dict.empty() || in.ConsumeBool()) {
      try {
        dict.insert_or_assign(c10::IValue(in.ConsumeRandomLengthString(8)), any_value(in, depth + 1));
      } catch (const c10::Error&) {  // a str key in an int-keyed dict
      }
      return dict;
    }
    std::size_t index = in.ConsumeIntegralInRange<std::size_t>(0, dict.size() - 1);
    for (auto& entry : dict)
      if (index-- == 0) {
        dict.insert_or_assign(entry.key(), mutate(entry.value(), in, depth + 1));
        break;
      }
    return dict;
  }
  if (value.isList()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const c10::IValue& element : value.toListRef()) list.push_back(in.ConsumeBool() ? mutate(element, in, depth + 1) : element);
    return list;
  }
  return any_value(in, depth);
}

/// A valid payload with two methods, as lowering writes it.
c10::IValue valid_payload() {
  method_debug_info debug;
  debug.locations.emplace(3, torch_delegate::debug_location{"aten::add", "<string>:2", {"  called here:\n"}, "x + h"});
  debug.instruction_handles.emplace(0, std::vector<std::int64_t>{3});
  method_record forward{"(Tensor, Tensor) -> Tensor", {"x", "h"}, 1, c10::IValue(std::string("inputs 2\nret 0\n")),
                        std::make_shared<method_debug_info>(debug)};
  method_record accum{"(*) -> *", {"x"}, 2, c10::IValue(std::int64_t{7}), std::make_shared<method_debug_info>()};
  c10::impl::GenericDict methods(c10::StringType::get(), c10::AnyType::get());
  methods.insert("forward", encode_method_record(forward));
  methods.insert("accum", encode_method_record(accum));
  return encode_processed("fuzz", 1, methods);
}

bool same_record(const method_record& a, const method_record& b) {
  return a.signature == b.signature && a.argument_names == b.argument_names && a.output_count == b.output_count &&
         a.debug->locations.size() == b.debug->locations.size() && a.debug->instruction_handles == b.debug->instruction_handles;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const c10::IValue valid = valid_payload();
  FuzzedDataProvider in(data, size);
  const c10::IValue processed = in.ConsumeBool() ? mutate(valid, in, 0) : any_value(in, 0);
  const std::string method = in.ConsumeBool() ? "forward" : (in.ConsumeBool() ? "accum" : in.ConsumeRandomLengthString(8));
  try {
    decoded_method decoded = read_processed(processed, "fuzz", method, {1, 2});
    c10::impl::GenericDict methods(c10::StringType::get(), c10::AnyType::get());
    methods.insert(method, encode_method_record(decoded.record));
    decoded_method again = read_processed(encode_processed("fuzz", 1, methods), "fuzz", method, {1, 2});
    if (!same_record(decoded.record, again.record) || decoded.record.input_specs != again.record.input_specs)
      __builtin_trap();
  } catch (const c10::Error&) {
  }
  try {  // the named-data table (format 2): checked, or an error
    const auto named = read_named_data(processed, "fuzz");
    for (const std::string& key : named->keys()) (void)named->bytes(key);
    (void)released_named_data(processed);
  } catch (const c10::Error&) {
  }
  return 0;
}
