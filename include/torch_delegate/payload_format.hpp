// The processed payload: what lowering stores in a lowered module's `__processed_module` and
// compile reads back. This header owns the format: its structs, its encoder and its decoder.
//
//   (backend: str, format_version: int, payload_version: int,
//    methods: Dict[str, (signature: str, argument_names: List[str], output_count: int,
//                        payload: <the backend's payload>, debug_info: (locations, instructions),
//                        input_specs: List[Optional[Tuple[List[int], int]]],     <- optional
//                        memory_formats: List[int],   <- optional, when a spec is not contiguous
//                        max_replans: int)],          <- optional, when not 0 (other_shapes::replan)
//    named_data: Dict[str, (data: Tensor, alignment: int)])      <- format 2, only with named data
//
// Format 2 adds named data (named_data.hpp), shared by every method: a module without named data
// is still written as format 1, so builds that read only format 1 keep loading it; one with
// named data says format 2, and such a build refuses it with its versioned message instead of
// compiling methods whose data it would not hand over.
//
// Compatibility rules (tests/test_errors.cpp, tests/data): a reader accepts every format
// version from 1 to its own; a field added later is optional and appended at the end of its
// tuple, so an older payload (without it) reads with the field's default and an older reader
// ignores it. The format version changes only when a change cannot follow that rule. Every
// field is checked: a corrupted, truncated or foreign payload is an error, never a crash
// (fuzzed: tests/fuzz/fuzz_processed_payload.cpp).
#pragma once

#include <torch_delegate/debug.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/named_data.hpp>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/List.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// The newest format of `__processed_module` this build writes and reads (it reads 1 to this).
inline constexpr std::int64_t processed_format_version = 2;

namespace detail {

/// What the format stores for one lowered method.
struct method_record {
  std::string signature;                     // the execute signature's text, "(Tensor, Tensor) -> Tensor"
  std::vector<std::string> argument_names;   // the method's arguments, `self` excluded
  std::int64_t output_count = 1;             // entries in execute's output list
  c10::IValue payload;                       // the backend's payload, as preprocess made it
  std::shared_ptr<method_debug_info> debug;  // never null once decoded
  std::vector<std::optional<tensor_spec>> input_specs;  // added later: optional, empty when absent
  std::int64_t max_replans = 0;  // added later: other shapes it may be re-planned for at call time
};

/// The versions of a backend's payload that a build of it reads.
struct payload_versions {
  std::int64_t oldest;
  std::int64_t newest;
};

/// A method record read back, with the payload version it was written with.
struct decoded_method {
  method_record record;
  std::int64_t payload_version = 1;
};

// -- debug information: (Dict[int, (kind, file_line, List[str] call stack, source)],
//                         Dict[int, List[int]] instruction -> handles) -------------------------

TORCH_DELEGATE_INTERNAL c10::IValue encode_debug_info(const method_debug_info& debug);

/// Reads the debug table; throws c10::Error (never crashes) on anything malformed.
TORCH_DELEGATE_DECL std::shared_ptr<method_debug_info> decode_debug_info(const c10::IValue& value);

// -- the whole payload ------------------------------------------------------------------------

/// One method's entry.
TORCH_DELEGATE_INTERNAL c10::IValue encode_method_record(const method_record& record);

/// The whole `__processed_module` value: `methods` maps each method name to its encoded entry;
/// format 1 without named data, 2 with.
TORCH_DELEGATE_INTERNAL c10::IValue encode_processed(std::string_view backend, std::int64_t payload_version,
                                    c10::impl::GenericDict methods, const named_data_store& named_data = {});

/// The named data of a processed payload (empty for format 1), checked: a malformed table is
/// an error naming the backend, never a crash.
TORCH_DELEGATE_DECL std::shared_ptr<named_data_map> read_named_data(const c10::IValue& processed, std::string_view backend);

/// Replaces the data of `key` in a processed payload's named-data table by an empty tensor of
/// alignment 0 (released after compile): a module holding such a payload refuses to be saved.
TORCH_DELEGATE_INTERNAL void release_named_data_in(const c10::IValue& processed, const std::string& key);

/// The keys released from a processed payload, sorted.
TORCH_DELEGATE_DECL std::vector<std::string> released_named_data(const c10::IValue& processed);

[[noreturn]] inline void fail_processed(std::string_view backend, std::string_view method, const std::string& why) {
  fail({backend, method}, "the processed module is not a valid torch-delegate payload: " + why);
}

[[noreturn]] inline void fail_incompatible(std::string_view backend, std::string_view method, const std::string& why) {
  fail({backend, method}, "incompatible payload: " + why);
}

inline bool is_string_list(const c10::IValue& value) {
  if (!value.isList()) return false;
  for (const c10::IValue& element : value.toListRef())
    if (!element.isString()) return false;
  return true;
}

/// Reads one method of `__processed_module`, checking every field (see the rules above).
/// Fields are copied out of the tuples: c10's TupleElements keeps up to 3 elements inline, and
/// GCC -O2 warns (-Warray-bounds) about reading a 4th or 5th through it even after a size check.
TORCH_DELEGATE_INTERNAL decoded_method read_processed(const c10::IValue& processed, std::string_view backend, const std::string& method,
                                     payload_versions versions);

}  // namespace detail
}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/payload_format.ipp>
#endif
