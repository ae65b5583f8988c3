// The integrity check of a saved module's zip archive, made before LibTorch reads it: every
// record's data against the CRC32 the archive stores for it, and the zip structure around it (the
// central directory, its ZIP64 records, each local header and data descriptor).
//
// Why: torch::jit::save (PyTorchStreamWriter) stores each record with its CRC32, but LibTorch 1.13's
// reader never compares them (its miniz is built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), so a
// file whose weights were changed after saving loads and runs with the changed weights. One check,
// used by every load route (torch_delegate::load, check_loadable, Python's load, the command line).
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_delegate::detail {

/// zlib's CRC-32 (reflected polynomial 0xEDB88320, inverted before and after) of `size` bytes,
/// continuing from `crc` (0 to start): crc32(crc32(0, a), b) is the CRC32 of a followed by b.
/// Carry-less multiplication (PCLMULQDQ) where the CPU has it, 8 table lookups per 8 bytes otherwise.
TORCH_DELEGATE_DECL std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t size);

/// The same CRC, always by the tables (the reference the fast path is tested against).
TORCH_DELEGATE_DECL std::uint32_t crc32_by_tables(std::uint32_t crc, const void* data, std::size_t size);

/// Checks the zip archive held in `data`, `label` naming it in errors (its path); throws
/// c10::Error "torch-delegate: <label>: ...; refusing to load it" naming the damaged record or the
/// damaged structure.
TORCH_DELEGATE_DECL void check_archive_bytes(const std::string& label, const unsigned char* data, std::size_t size);

/// check_archive_bytes on the file at `path`, mapped into memory; a file that cannot be opened is
/// "torch-delegate: cannot read '<path>' as a saved TorchScript module: ...".
TORCH_DELEGATE_INTERNAL void check_archive_file(const std::string& path);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/archive_check.ipp>
#endif
