// Definitions for detail/archive_check.hpp.
#pragma once

#include <torch_delegate/detail/archive_check.hpp>
#include <torch_delegate/impl/crc32.ipp>

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace torch_delegate::detail {

namespace archive {

// The zip format's records (PKWARE's APPNOTE.TXT), as PyTorchStreamWriter (miniz) writes them:
// each record stored (tensors) or deflated (code), with a data descriptor after its data, then
// the central directory, a ZIP64 end record and its locator, and the end record.
inline constexpr std::uint32_t local_header_signature = 0x04034b50;
inline constexpr std::uint32_t central_header_signature = 0x02014b50;
inline constexpr std::uint32_t descriptor_signature = 0x08074b50;
inline constexpr std::uint32_t end_signature = 0x06054b50;
inline constexpr std::uint32_t zip64_end_signature = 0x06064b50;
inline constexpr std::uint32_t zip64_locator_signature = 0x07064b50;
inline constexpr std::size_t local_header_size = 30, central_header_size = 46, end_size = 22, zip64_end_size = 56,
                             zip64_locator_size = 20;
inline constexpr std::uint16_t flag_data_descriptor = 1u << 3;
inline constexpr std::uint32_t in_zip64_field = 0xFFFFFFFFu;

inline std::uint64_t little_endian(const unsigned char* at, int bytes) {
  std::uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | at[i];
  return value;
}
inline std::uint16_t u16(const unsigned char* at) { return static_cast<std::uint16_t>(little_endian(at, 2)); }
inline std::uint32_t u32(const unsigned char* at) { return static_cast<std::uint32_t>(little_endian(at, 4)); }
inline std::uint64_t u64(const unsigned char* at) { return little_endian(at, 8); }

inline std::string hex32(std::uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
  return text;
}

// A record's name as the archive spells it, with any byte that would garble a message escaped.
inline std::string printable(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

[[noreturn]] inline void refuse(const std::string& label, const std::string& what) {
  throw c10::Error("torch-delegate: " + label + ": " + what + "; refusing to load it", "");
}

// One record, as the central directory describes it (ZIP64 fields resolved).
struct record {
  std::string_view name;
  std::uint16_t flags = 0, method = 0, time = 0, date = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0, local_offset = 0;
};

// The extra field with header id `id` in a header's extra data: {its data, its length}, or
// {nullptr, 0} when there is none (or the extra data is malformed).
inline std::pair<const unsigned char*, std::size_t> extra_field(const unsigned char* extra, std::size_t length,
                                                               std::uint16_t id) {
  while (length >= 4) {
    const std::uint16_t field_id = u16(extra), field_length = u16(extra + 2);
    if (field_length > length - 4) break;
    if (field_id == id) return {extra + 4, field_length};
    extra += 4 + field_length;
    length -= 4 + field_length;
  }
  return {nullptr, 0};
}

// Replaces each field whose header value is 0xFFFFFFFF by its 64-bit value from the ZIP64 extra
// field (id 1), which holds them in the order given. False when one is left unresolved.
inline bool resolve_zip64(const unsigned char* extra, std::size_t length, std::uint64_t* fields[], std::size_t count) {
  const auto [zip64, zip64_length] = extra_field(extra, length, 1);
  std::size_t at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (*fields[i] != in_zip64_field) continue;
    if (zip64 == nullptr || zip64_length - at < 8) return false;
    *fields[i] = u64(zip64 + at);
    at += 8;
  }
  return true;
}

// LibTorch's reader over the bytes being checked: it inflates deflated records (its own miniz,
// so that checking needs no zlib) for their CRC.
struct bytes_reader final : caffe2::serialize::ReadAdapterInterface {
  bytes_reader(const unsigned char* bytes, std::size_t length) : bytes(bytes), length(length) {}
  std::size_t size() const override { return length; }
  std::size_t read(std::uint64_t position, void* buffer, std::size_t count, const char*) const override {
    if (position >= length) return 0;
    count = std::min<std::uint64_t>(count, length - position);
    std::memcpy(buffer, bytes + position, count);
    return count;
  }
  const unsigned char* bytes;
  std::size_t length;
};

// The CRC32 of a deflated record's inflated data.
inline std::uint32_t inflated_crc(const std::string& label, const record& entry, const unsigned char* data,
                                  std::size_t size, std::unique_ptr<caffe2::serialize::PyTorchStreamReader>& reader) {
  const std::string name = printable(entry.name);
  try {
    if (!reader)
      reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<bytes_reader>(data, size));
    // LibTorch's reader names records without the archive's top folder.
    const std::size_t slash = entry.name.find('/');
    auto [inflated, length] = reader->getRecord(std::string(entry.name.substr(slash == std::string_view::npos ? 0 : slash + 1)));
    if (length != entry.size)
      refuse(label, "record '" + name + "' is damaged: it inflates to " + std::to_string(length) +
                        " bytes, the archive says " + std::to_string(entry.size));
    return crc32(0, inflated.get(), length);
  } catch (const c10::Error& error) {
    const std::string text = error.what_without_backtrace();
    if (text.rfind("torch-delegate: ", 0) == 0) throw;
    refuse(label, "record '" + name + "' is damaged: it does not inflate (LibTorch's reader says: " + text + ")");
  }
}

// The local header, data descriptor and data of one record, against its central directory entry.
inline void check_record(const std::string& label, const unsigned char* data, std::size_t size, const record& entry,
                         std::uint64_t directory_offset,
                         std::unique_ptr<caffe2::serialize::PyTorchStreamReader>& reader) {
  const std::string name = printable(entry.name);
  const std::string damaged = "record '" + name + "' is damaged: ";
  const std::uint64_t at = entry.local_offset;
  if (at > directory_offset || directory_offset - at < local_header_size || u32(data + at) != local_header_signature)
    refuse(label, damaged + "there is no local header at byte " + std::to_string(at) +
                      ", where the central directory says it starts");
  const unsigned char* local = data + at;
  const std::uint16_t name_length = u16(local + 26), extra_length = u16(local + 28);
  const std::uint64_t data_start = at + local_header_size + name_length + extra_length;
  if (data_start > directory_offset)
    refuse(label, damaged + "its local header (at byte " + std::to_string(at) + ") runs into the central directory");
  const std::string_view local_name(reinterpret_cast<const char*>(local + local_header_size), name_length);
  const std::string header = "its local header (at byte " + std::to_string(at) + ") says ";
  if (local_name != entry.name)
    refuse(label, damaged + "its local header (at byte " + std::to_string(at) + ") names it '" + printable(local_name) + "'");
  const auto compare = [&](const char* field, std::uint64_t local_value, std::uint64_t central_value, bool hex) {
    if (local_value == central_value) return;
    const auto text = [&](std::uint64_t value) { return hex ? hex32(static_cast<std::uint32_t>(value)) : std::to_string(value); };
    refuse(label, damaged + header + "its " + field + " is " + text(local_value) + ", the central directory says " +
                      text(central_value));
  };
  compare("compression method", u16(local + 8), entry.method, false);
  compare("general purpose flags", u16(local + 6), entry.flags, true);
  compare("modification time", u16(local + 10), entry.time, true);
  compare("modification date", u16(local + 12), entry.date, true);
  const unsigned char* local_extra = local + local_header_size + name_length;
  if (!(entry.flags & flag_data_descriptor)) {
    std::uint64_t compressed = u32(local + 18), uncompressed = u32(local + 22);
    std::uint64_t* fields[] = {&uncompressed, &compressed};
    if (!resolve_zip64(local_extra, extra_length, fields, 2))
      refuse(label, damaged + header + "its sizes are in a zip64 extra field, which it lacks");
    compare("CRC32", u32(local + 14), entry.crc, true);
    compare("compressed size", compressed, entry.compressed, false);
    compare("size", uncompressed, entry.size, false);
  }
  if (entry.compressed > directory_offset - data_start)
    refuse(label, damaged + "its " + std::to_string(entry.compressed) + " bytes at byte " + std::to_string(data_start) +
                      " run into the central directory (at byte " + std::to_string(directory_offset) + ")");
  const std::uint64_t data_end = data_start + entry.compressed;
  if (entry.flags & flag_data_descriptor) {
    // The CRC and sizes follow the data (the writer knew them only then); the signature is optional.
    const bool signed_descriptor = directory_offset - data_end >= 4 && u32(data + data_end) == descriptor_signature;
    const std::uint64_t fields = data_end + (signed_descriptor ? 4 : 0);
    // Its sizes take 8 bytes each where the local header has a ZIP64 extra field (APPNOTE 4.3.9.2).
    const int width = extra_field(local_extra, extra_length, 1).first != nullptr ? 8 : 4;
    if (directory_offset - data_end < (signed_descriptor ? 4u : 0u) + 4u + 2u * width)
      refuse(label, damaged + "its data descriptor (at byte " + std::to_string(data_end) + ") runs into the central directory");
    const std::string descriptor = "its data descriptor (at byte " + std::to_string(data_end) + ") says ";
    const auto compare_descriptor = [&](const char* field, std::uint64_t value, std::uint64_t central_value, bool hex) {
      if (value == central_value) return;
      const auto text = [&](std::uint64_t v) { return hex ? hex32(static_cast<std::uint32_t>(v)) : std::to_string(v); };
      refuse(label, damaged + descriptor + "its " + field + " is " + text(value) + ", the central directory says " +
                        text(central_value));
    };
    compare_descriptor("CRC32", u32(data + fields), entry.crc, true);
    compare_descriptor("compressed size", little_endian(data + fields + 4, width), entry.compressed, false);
    compare_descriptor("size", little_endian(data + fields + 4 + width, width), entry.size, false);
  }
  std::uint32_t actual = 0;
  if (entry.method == 0) {
    if (entry.compressed != entry.size)
      refuse(label, damaged + "it is stored uncompressed, but the central directory gives it " +
                        std::to_string(entry.compressed) + " bytes stored and " + std::to_string(entry.size) + " bytes of data");
    actual = crc32(0, data + data_start, entry.compressed);
  } else if (entry.method == 8) {
    // Deflate expands at most 1032 to 1; LibTorch's reader allocates the size the archive gives
    // before inflating, so a damaged size must not reach it.
    if (entry.size / 1032 > entry.compressed + 1)
      refuse(label, damaged + "the central directory says its " + std::to_string(entry.compressed) +
                        " deflated bytes inflate to " + std::to_string(entry.size) + ", more than deflate can");
    actual = inflated_crc(label, entry, data, size, reader);
  } else {
    refuse(label, "record '" + name + "' is compressed with method " + std::to_string(entry.method) +
                      ", which LibTorch cannot read (it reads 0, stored, and 8, deflated)");
  }
  if (actual != entry.crc)
    refuse(label, damaged + "the CRC32 of its " + std::to_string(entry.size) + " bytes is " + hex32(actual) +
                      ", the archive says " + hex32(entry.crc) + " (the file was changed after it was saved)");
}

}  // namespace archive

TORCH_DELEGATE_DECL void check_archive_bytes(const std::string& label, const unsigned char* data, std::size_t size) {
  using namespace archive;
  // The end record is the last thing in the file but for its comment (up to 65535 bytes).
  std::optional<std::size_t> end;
  if (size >= end_size) {
    const std::size_t lowest = size - end_size > 0xFFFF ? size - end_size - 0xFFFF : 0;
    for (std::size_t at = size - end_size + 1; at-- > lowest;) {
      if (u32(data + at) == end_signature && at + end_size + u16(data + at + 20) == size) {
        end = at;
        break;
      }
    }
  }
  if (!end)
    refuse(label, "not a zip archive, or one cut short: it has no end-of-central-directory record (a saved module ends "
                  "with one)");
  std::uint64_t records = u16(data + *end + 10), directory_size = u32(data + *end + 12),
                directory_offset = u32(data + *end + 16);
  // The central directory ends where the records that describe it begin.
  std::uint64_t directory_limit = *end;
  if (*end >= zip64_locator_size && u32(data + *end - zip64_locator_size) == zip64_locator_signature) {
    // ZIP64 (PyTorchStreamWriter always writes it): a locator just before the end record points
    // at the ZIP64 end record, whose 64-bit fields hold what the end record's fields may not.
    const std::uint64_t locator = *end - zip64_locator_size, at = u64(data + locator + 8);
    if (at > locator || locator - at < zip64_end_size || u32(data + at) != zip64_end_signature)
      refuse(label, "the zip64 end-of-central-directory locator (at byte " + std::to_string(locator) +
                        ") points at byte " + std::to_string(at) +
                        ", where there is no zip64 end-of-central-directory record: the file is damaged");
    const std::uint64_t records64 = u64(data + at + 32), size64 = u64(data + at + 40), offset64 = u64(data + at + 48);
    const auto agree = [&](const char* field, std::uint64_t value, std::uint64_t sentinel, std::uint64_t value64) {
      if (value != sentinel && value != value64)
        refuse(label, std::string("the end-of-central-directory record says the central directory's ") + field + " is " +
                          std::to_string(value) + ", the zip64 end record says " + std::to_string(value64) +
                          ": the file is damaged");
    };
    agree("record count", records, 0xFFFF, records64);
    agree("size", directory_size, in_zip64_field, size64);
    agree("offset", directory_offset, in_zip64_field, offset64);
    records = records64;
    directory_size = size64;
    directory_offset = offset64;
    directory_limit = at;
  } else if (records == 0xFFFF || directory_size == in_zip64_field || directory_offset == in_zip64_field) {
    refuse(label, "the end-of-central-directory record leaves its fields to a zip64 end record, which is missing: the "
                  "file is damaged");
  }
  if (directory_offset > directory_limit || directory_limit - directory_offset != directory_size)
    refuse(label, "the central directory is damaged: the end record places it at byte " + std::to_string(directory_offset) +
                      " with " + std::to_string(directory_size) + " bytes, but it must end at byte " +
                      std::to_string(directory_limit) + ", where the end records start");

  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;  // made for the first deflated record
  std::uint64_t at = directory_offset;
  const std::uint64_t stop = directory_offset + directory_size;
  for (std::uint64_t index = 0; index < records; ++index) {
    const std::string entry_at = "entry " + std::to_string(index) + " (at byte " + std::to_string(at) + ")";
    if (stop - at < central_header_size || u32(data + at) != central_header_signature)
      refuse(label, "the central directory is damaged: " + entry_at + " is not a central directory header; the end "
                    "record says it holds " + std::to_string(records) + " records");
    const unsigned char* header = data + at;
    const std::uint16_t name_length = u16(header + 28), extra_length = u16(header + 30), comment_length = u16(header + 32);
    if (stop - at - central_header_size < std::uint64_t{name_length} + extra_length + comment_length)
      refuse(label, "the central directory is damaged: " + entry_at + " runs past its end");
    record entry;
    entry.name = std::string_view(reinterpret_cast<const char*>(header + central_header_size), name_length);
    entry.flags = u16(header + 8);
    entry.method = u16(header + 10);
    entry.time = u16(header + 12);
    entry.date = u16(header + 14);
    entry.crc = u32(header + 16);
    entry.compressed = u32(header + 20);
    entry.size = u32(header + 24);
    entry.local_offset = u32(header + 42);
    std::uint64_t* fields[] = {&entry.size, &entry.compressed, &entry.local_offset};
    if (!resolve_zip64(header + central_header_size + name_length, extra_length, fields, 3))
      refuse(label, "the central directory is damaged: " + entry_at + ", record '" + printable(entry.name) +
                        "', says its sizes or offset are in a zip64 extra field, which it lacks");
    check_record(label, data, size, entry, directory_offset, reader);
    at += central_header_size + name_length + extra_length + comment_length;
  }
  if (at != stop)
    refuse(label, "the central directory is damaged: its " + std::to_string(records) + " records take " +
                      std::to_string(at - directory_offset) + " bytes, the end record says " + std::to_string(directory_size));
}

TORCH_DELEGATE_INTERNAL void check_archive_file(const std::string& path) {
  const auto cannot = [&](const std::string& why) {
    throw c10::Error("torch-delegate: cannot read '" + path + "' as a saved TorchScript module: " + why, "");
  };
  // Mapped, not read: the CRC is the only pass over the data, and the page cache serves it
  // without a copy (torch::jit::load reads the file again, from the cache).
  struct file {
    int descriptor = -1;
    void* mapped = MAP_FAILED;
    std::size_t size = 0;
    ~file() {
      if (mapped != MAP_FAILED) ::munmap(mapped, size);
      if (descriptor >= 0) ::close(descriptor);
    }
  } opened;
  opened.descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (opened.descriptor < 0) cannot(std::string("cannot open it: ") + std::strerror(errno));
  struct stat status {};
  if (::fstat(opened.descriptor, &status) != 0) cannot(std::string("cannot stat it: ") + std::strerror(errno));
  if (S_ISDIR(status.st_mode)) cannot("it is a directory");
  opened.size = static_cast<std::size_t>(status.st_size);
  if (opened.size == 0 || !S_ISREG(status.st_mode)) check_archive_bytes(path, nullptr, 0);  // refused: no end record
  opened.mapped = ::mmap(nullptr, opened.size, PROT_READ, MAP_PRIVATE, opened.descriptor, 0);
  if (opened.mapped == MAP_FAILED) cannot(std::string("cannot map it: ") + std::strerror(errno));
  ::madvise(opened.mapped, opened.size, MADV_SEQUENTIAL);
  check_archive_bytes(path, static_cast<const unsigned char*>(opened.mapped), opened.size);
}

}  // namespace torch_delegate::detail
