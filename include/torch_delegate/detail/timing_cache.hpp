// The timing cache (partition_options::timing_cache): what measured partitioning measured, kept on
// disk and reused, as TensorRT keeps its timing cache. This header owns the cache file's format:
//
//   <directory>/timings-1.txt, text, appended to:
//     line 1: "torch-delegate timing cache, format 1"
//     then one entry a line: kind \t key \t payload \t crc
//       kind:    "region" (one region's verdict) or "lowering" (one lowering's decisions)
//       key:     32 hex digits, the digest of what the entry depends on (region_key, lowering_key
//                in tuning.hpp: the graph, shapes and dtypes, backend and payload version, the
//                machine: machine_fingerprint)
//       payload: region: "backend_ms torchscript_ms verdict rounds backend_wins torchscript_wins p"
//                lowering: the delegation report (report_format.hpp) pickled, in hex
//       crc:     8 hex digits, CRC32 of "kind \t key \t payload"
//   The last entry of a key wins. A line whose CRC does not match, or that does not parse, is
//   ignored; a file whose first line is not the header is not ours: it is neither read nor
//   written. Each is reported once per process (a warning naming the file and what is wrong).
//   Writers append one whole line under an exclusive flock, readers read under a shared one: two
//   processes lowering at once interleave whole lines, never parts of them.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// 32 hex digits: a 128-bit digest of `text` (two 64-bit FNV-1a hashes of different bases).
TORCH_DELEGATE_DECL std::string key_digest(std::string_view text);

/// What makes a time on this machine: the CPU's model and vector ISA, LibTorch's intra-op thread
/// count, LibTorch's and torch-delegate's versions, and the settings that change which kernels
/// run (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY and every TD_* variable).
TORCH_DELEGATE_DECL std::string machine_fingerprint();

/// Which build of a backend's code a time was taken with: the GNU build ID (hex) of the loaded
/// object (a backend's shared library, or the program itself) that holds `address`; when that
/// object carries none, its path, size and modification time; "" when no object holds it. A
/// backend rebuilt with other kernels gets another one, so its cached times are not reused.
TORCH_DELEGATE_DECL std::string code_build_id(const void* address);

/// The cache directory partition_options ask for: timing_cache_dir if given, else
/// $TORCH_DELEGATE_CACHE_DIR, $XDG_CACHE_HOME/torch_delegate, ~/.cache/torch_delegate; "" when the
/// cache is off (timing_cache false, or the default one with $TORCH_DELEGATE_TIMING_CACHE=0).
TORCH_DELEGATE_DECL std::string timing_cache_directory(const partition_options& options);

/// One cache file (see above), read once when first needed.
class timing_cache_file {
 public:
  static constexpr std::string_view header = "torch-delegate timing cache, format 1";
  static constexpr std::string_view file_name = "timings-1.txt";

  /// The size past which reading the file compacts it (compact()).
  static constexpr std::size_t default_max_bytes = std::size_t{16} << 20;

  /// The cache in `directory` (created when first written); `max_bytes`: compact()'s bound.
  explicit timing_cache_file(std::string directory, std::size_t max_bytes = default_max_bytes)
      : directory_(std::move(directory)), path_(directory_ + "/" + std::string(file_name)), max_bytes_(max_bytes) {}

  /// The payload of the last entry of `kind` and `key`, if any.
  TORCH_DELEGATE_DECL std::optional<std::string> find(std::string_view kind, const std::string& key);
  /// Appends an entry (and keeps it for find). A file that is not ours, or that cannot be
  /// written, is reported once and left alone.
  TORCH_DELEGATE_DECL void store(std::string_view kind, const std::string& key, const std::string& payload);

  const std::string& path() const { return path_; }
  /// Lines ignored when the file was read (damaged), and whether it was refused as not ours.
  std::size_t damaged_lines() const { return damaged_; }
  bool foreign() const { return foreign_; }

 private:
  void load();
  /// Rewrites the file, under an exclusive lock, with each key's last entry only, in the order
  /// they were written, the oldest dropped while it would be over half of max_bytes (a cache
  /// only grows by appends: an entry written again, or one of a model long gone, stays
  /// otherwise). Into a file beside it, then renamed over it: a reader sees the old file or the
  /// new one, never a part. An entry another process appends to the old file while this one
  /// compacts is lost, and measured again when needed.
  void compact();

  std::string directory_, path_;
  std::size_t max_bytes_ = default_max_bytes;
  bool loaded_ = false, foreign_ = false;
  std::size_t damaged_ = 0;
  std::unordered_map<std::string, std::string> entries_;  // kind + '\t' + key -> payload
};

/// A problem with the cache at `path`, as a warning, once per path and process.
TORCH_DELEGATE_INTERNAL void warn_cache_once(const std::string& path, const std::string& what);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/timing_cache.ipp>
#endif
