// libFuzzer target: the reader of `__processed_module` (payload_format.hpp) on valid payloads
// mutated by the input: any node replaced by any value, tuples truncated or extended, entries
// added. Reading gives a record or a c10::Error, never a crash; a record that reads is
// re-encoded and must read back the same.
#include <torch_delegate/payload_format.hpp>

#include "fuzz_values.hpp"

namespace {
using namespace torch_delegate::detail;
using fuzz_values::any_value;
using fuzz_values::mutate;

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
