// Named data (ExecuTorch's NamedDataStore / NamedDataMap): data that preprocess produces once
// and every unit of a lowered module shares, typically packed weights. preprocess puts it in a
// named_data_store; lowering merges the stores of all units (one copy per key and lowered
// module) and saves it in the processed payload (payload_format.hpp); compile reads it through
// its compile_context as a named_data_map, without copies.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// The alignment (bytes) named data gets unless preprocess asks for another.
inline constexpr std::int64_t default_named_data_alignment = 16;

/// One piece of named data: a contiguous CPU tensor (bytes are a uint8 tensor) and the alignment
/// its data has when compile reads it.
struct named_data_entry {
  at::Tensor data;
  std::int64_t alignment = default_named_data_alignment;
};

/// What preprocess adds named data to (preprocess_result::named_data). A key names one piece of
/// data: adding a key again with the same content is a no-op, with other content an error.
class named_data_store {
 public:
  /// Stores `tensor` (a detached, contiguous CPU copy when it is not already one) under `key`.
  /// `alignment`: a power of two from 1 to 4096.
  TORCH_DELEGATE_DECL void add_tensor(const std::string& key, const at::Tensor& tensor,
                                      std::int64_t alignment = default_named_data_alignment);
  /// Stores a copy of `bytes` under `key`.
  TORCH_DELEGATE_DECL void add_bytes(const std::string& key, std::span<const std::byte> bytes,
                                     std::int64_t alignment = default_named_data_alignment);

  const std::map<std::string, named_data_entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  /// Bytes of data held (each key once).
  TORCH_DELEGATE_DECL std::int64_t bytes() const;

 private:
  std::map<std::string, named_data_entry> entries_;
};

/// A key derived from content: `prefix` + "-" + 16 hex digits of a 64-bit hash of the tensor's
/// dtype, shape and bytes. Units that pack the same weight get the same key, so it is stored once
/// (XNNPACK keys its packed weights by content the same way).
TORCH_DELEGATE_DECL std::string content_key(std::string_view prefix, const at::Tensor& tensor);

/// What compile reads: every piece of named data of the lowered module, read-only. The tensors
/// share their storage with the module's processed payload: do not write to them.
class named_data_map {
 public:
  named_data_map() = default;
  explicit named_data_map(std::string backend) : backend_(std::move(backend)) {}

  bool contains(std::string_view key) const { return entries_.find(key) != entries_.end(); }
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  /// The keys, sorted.
  TORCH_DELEGATE_DECL std::vector<std::string> keys() const;
  /// The tensor stored under `key`, its data aligned as preprocess asked; an error naming the key
  /// and the keys there are when there is none (or it was released).
  TORCH_DELEGATE_DECL const at::Tensor& tensor(std::string_view key) const;
  /// The bytes stored under `key` (of a tensor: its raw data).
  TORCH_DELEGATE_DECL std::span<const std::byte> bytes(std::string_view key) const;

  /// Adds an entry read from a payload (payload_format.hpp); realigns it when its data is not
  /// aligned as asked.
  TORCH_DELEGATE_DECL void insert(const std::string& key, named_data_entry entry);
  /// Drops the data of `key` (after compile, at a backend's request: compile_context).
  TORCH_DELEGATE_DECL void erase(const std::string& key);

 private:
  std::string backend_;
  std::map<std::string, named_data_entry, std::less<>> entries_;
  std::set<std::string> released_;
};

namespace detail {

/// Merges the named data of one unit into the lowered module's: a key stored once; the same key
/// with other content is an error naming both units. `owners` records which unit gave each key.
TORCH_DELEGATE_INTERNAL void merge_named_data(std::string_view backend, named_data_store& merged,
                                          std::map<std::string, std::string>& owners, const named_data_store& unit_data,
                                          const std::string& unit);

/// The one rule for an alignment of named data, when it is stored and when a saved one is read:
/// a power of two from 1 to 4096 bytes.
constexpr bool valid_named_data_alignment(std::int64_t alignment) {
  return alignment >= 1 && alignment <= 4096 && (alignment & (alignment - 1)) == 0;
}

/// "Float [1024, 1024] (4194304 bytes)".
TORCH_DELEGATE_INTERNAL std::string describe_named_data(const named_data_entry& entry);

}  // namespace detail
}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/named_data.ipp>
#endif
