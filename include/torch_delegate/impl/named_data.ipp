// Definitions for named_data.hpp.
#pragma once

#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/named_data.hpp>

#include <ATen/ATen.h>

#include <cstring>
#include <sstream>

namespace torch_delegate {

namespace detail {

inline void check_alignment(std::string_view where, const std::string& key, std::int64_t alignment) {
  if (!valid_named_data_alignment(alignment))
    throw c10::Error(std::string(where) + ": the alignment of named data '" + key +
                         "' must be a power of two from 1 to 4096, got " + std::to_string(alignment),
                     "");
}

inline bool same_content(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto size = static_cast<std::size_t>(a.nbytes());
  return size == 0 || a.data_ptr() == b.data_ptr() || std::memcmp(a.data_ptr(), b.data_ptr(), size) == 0;
}

inline std::uint64_t fnv1a(std::uint64_t hash, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// A 64-bit hash of `size` bytes at the speed memory delivers them, for content keys of weights
// (FNV-1a, a byte at a time, took 14 ms of a 0.25 s lowering of MobileNetV2's 14 MB, and ran again
// for every region a measured lowering preprocesses). Four lanes take 8-byte words in turn, each
// lane `v = rotl(v + word * m2, 31) * m1` (the multiply-rotate round of xxHash64, written here),
// so the four multiply chains overlap; the lanes are merged with the length, and the last bytes
// that fill no 32-byte stride go through FNV-1a.
inline std::uint64_t content_hash(std::uint64_t seed, const void* data, std::size_t size) {
  constexpr std::uint64_t m1 = 0x9e3779b185ebca87ULL, m2 = 0xc2b2ae3d27d4eb4fULL;
  const auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint64_t lane[4] = {seed + m1 + m2, seed + m2, seed, seed - m1};
  std::size_t offset = 0;
  for (; offset + 32 <= size; offset += 32)
    for (int k = 0; k < 4; ++k) {
      std::uint64_t word;
      std::memcpy(&word, bytes + offset + 8 * k, sizeof word);
      lane[k] = rotl(lane[k] + word * m2, 31) * m1;
    }
  std::uint64_t hash = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  hash = (hash ^ static_cast<std::uint64_t>(size)) * m1;
  return fnv1a(hash, bytes + offset, size - offset);
}

TORCH_DELEGATE_INTERNAL std::string describe_named_data(const named_data_entry& entry) {
  std::ostringstream out;
  out << c10::toString(entry.data.scalar_type()) << " " << entry.data.sizes() << " (" << entry.data.nbytes() << " bytes)";
  return out.str();
}

TORCH_DELEGATE_INTERNAL void merge_named_data(std::string_view backend, named_data_store& merged,
                                          std::map<std::string, std::string>& owners, const named_data_store& unit_data,
                                          const std::string& unit) {
  for (const auto& [key, entry] : unit_data.entries()) {
    auto found = merged.entries().find(key);
    if (found != merged.entries().end() && !same_content(found->second.data, entry.data))
      fail({backend, unit}, "named data '" + key + "' is given with different content by unit '" + owners.at(key) +
                                "' (" + describe_named_data(found->second) + ") and unit '" + unit + "' (" +
                                describe_named_data(entry) +
                                "): a key names one piece of data. Use distinct keys, e.g. "
                                "torch_delegate::content_key(prefix, tensor)");
    merged.add_tensor(key, entry.data, entry.alignment);  // a new key, or the same content: its alignment
    owners.emplace(key, unit);
  }
}

}  // namespace detail

TORCH_DELEGATE_DECL void named_data_store::add_tensor(const std::string& key, const at::Tensor& tensor,
                                                      std::int64_t alignment) {
  detail::check_alignment("named_data_store::add_tensor", key, alignment);
  if (key.empty()) throw c10::Error("named_data_store::add_tensor: the key is empty", "");
  if (!tensor.defined()) throw c10::Error("named_data_store::add_tensor: the tensor for '" + key + "' is undefined", "");
  if (tensor.device().type() != c10::DeviceType::CPU)
    throw c10::Error("named_data_store::add_tensor: named data '" + key + "' must be a CPU tensor, got one on " +
                         tensor.device().str(),
                     "");
  // Its own contiguous storage, offset 0 and exactly its size: what is saved is what is stored.
  at::Tensor data = tensor.detach();
  if (!data.is_contiguous() || data.storage_offset() != 0 ||
      data.storage().nbytes() != static_cast<std::size_t>(data.nbytes()))
    data = data.contiguous().clone();
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    if (!detail::same_content(found->second.data, data))
      throw c10::Error("named_data_store: named data '" + key + "' is added twice with different content: " +
                           detail::describe_named_data(found->second) + ", then " +
                           detail::describe_named_data({data, alignment}),
                       "");
    found->second.alignment = std::max(found->second.alignment, alignment);
    return;
  }
  entries_.emplace(key, named_data_entry{std::move(data), alignment});
}

TORCH_DELEGATE_DECL void named_data_store::add_bytes(const std::string& key, std::span<const std::byte> bytes,
                                                     std::int64_t alignment) {
  at::Tensor data = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  add_tensor(key, data, alignment);
}

TORCH_DELEGATE_DECL std::int64_t named_data_store::bytes() const {
  std::int64_t total = 0;
  for (const auto& [key, entry] : entries_) total += static_cast<std::int64_t>(entry.data.nbytes());
  return total;
}

TORCH_DELEGATE_DECL std::string content_key(std::string_view prefix, const at::Tensor& tensor) {
  const at::Tensor data = tensor.detach().contiguous();
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const auto type = static_cast<std::int64_t>(data.scalar_type());
  hash = detail::fnv1a(hash, &type, sizeof type);
  for (std::int64_t size : data.sizes()) hash = detail::fnv1a(hash, &size, sizeof size);
  hash = detail::content_hash(hash, data.data_ptr(), static_cast<std::size_t>(data.nbytes()));
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(hash));
  return std::string(prefix) + "-" + digits;
}

TORCH_DELEGATE_DECL std::vector<std::string> named_data_map::keys() const {
  std::vector<std::string> keys;
  for (const auto& entry : entries_) keys.push_back(entry.first);
  return keys;
}

TORCH_DELEGATE_DECL const at::Tensor& named_data_map::tensor(std::string_view key) const {
  auto found = entries_.find(key);
  if (found != entries_.end()) return found->second.data;
  const std::string known = detail::comma_separated(entries_, [](const auto& entry) { return "'" + entry.first + "'"; });
  const bool released = released_.count(std::string(key)) != 0;
  detail::fail({backend_, {}}, "no named data '" + std::string(key) + "'" +
                                   (released ? ": it was released after compile (compile_context::release_named_data)"
                                             : " in this lowered module") +
                                   "; it has " + (known.empty() ? std::string("none") : known));
}

TORCH_DELEGATE_DECL std::span<const std::byte> named_data_map::bytes(std::string_view key) const {
  const at::Tensor& data = tensor(key);
  return {static_cast<const std::byte*>(data.data_ptr()), static_cast<std::size_t>(data.nbytes())};
}

TORCH_DELEGATE_DECL void named_data_map::insert(const std::string& key, named_data_entry entry) {
  const auto address = reinterpret_cast<std::uintptr_t>(entry.data.data_ptr());
  if (entry.data.nbytes() > 0 && address % static_cast<std::uintptr_t>(entry.alignment) != 0) {
    // LibTorch's CPU allocator aligns storages to 64 bytes; a larger alignment needs a copy.
    const std::int64_t size = static_cast<std::int64_t>(entry.data.nbytes());
    at::Tensor buffer = at::empty({size + entry.alignment}, at::kByte);
    const auto base = reinterpret_cast<std::uintptr_t>(buffer.data_ptr());
    const std::int64_t offset =
        static_cast<std::int64_t>((entry.alignment - base % entry.alignment) % entry.alignment);
    // The buffer is 64-byte aligned, so the offset is a multiple of 64: of the element size too.
    at::Tensor aligned = at::empty({0}, entry.data.options())
                             .set_(buffer.storage(), offset / entry.data.element_size(), entry.data.sizes(),
                                   entry.data.strides());
    std::memcpy(aligned.data_ptr(), entry.data.data_ptr(), static_cast<std::size_t>(size));
    entry.data = aligned;
  }
  released_.erase(key);
  entries_.insert_or_assign(key, std::move(entry));
}

TORCH_DELEGATE_DECL void named_data_map::erase(const std::string& key) {
  if (entries_.erase(key) != 0) released_.insert(key);
}

}  // namespace torch_delegate
