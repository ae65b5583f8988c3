// Definitions for detail/timing_cache.hpp.
#pragma once

#include <torch_delegate/detail/timing_cache.hpp>
#include <torch_delegate/runtime_switches.hpp>
#include <torch_delegate/detail/archive_check.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/version.hpp>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>


namespace torch_delegate::detail {

TORCH_DELEGATE_DECL std::string key_digest(std::string_view text) {
  std::uint64_t a = 14695981039346656037ull, b = 0x9e3779b97f4a7c15ull;
  for (const char c : text) {
    a = (a ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    b = (b ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    b ^= b >> 29;
  }
  char digits[33];
  std::snprintf(digits, sizeof digits, "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return digits;
}

TORCH_DELEGATE_DECL std::string code_build_id(const void* address) {
  Dl_info info{};
  if (!address || dladdr(address, &info) == 0 || !info.dli_fbase) return "";
  struct search {
    const void* base;
    std::string id;
  } found{info.dli_fbase, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* data) {
        auto& wanted = *static_cast<search*>(data);
        bool ours = false;  // the object whose first loaded segment starts at dladdr's base
        for (int k = 0; k < object->dlpi_phnum && !ours; ++k)
          ours = object->dlpi_phdr[k].p_type == PT_LOAD &&
                 reinterpret_cast<const void*>(object->dlpi_addr + object->dlpi_phdr[k].p_vaddr - object->dlpi_phdr[k].p_offset) ==
                     wanted.base;
        if (!ours) return 0;
        for (int k = 0; k < object->dlpi_phnum; ++k) {
          const ElfW(Phdr)& segment = object->dlpi_phdr[k];
          if (segment.p_type != PT_NOTE) continue;
          const auto* at = reinterpret_cast<const unsigned char*>(object->dlpi_addr + segment.p_vaddr);
          const unsigned char* const end = at + segment.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
            const unsigned char* name = at + sizeof(ElfW(Nhdr));
            const unsigned char* desc = name + ((note->n_namesz + 3) & ~3u);
            if (desc + note->n_descsz > end) break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              static constexpr char hex[] = "0123456789abcdef";
              for (std::size_t i = 0; i < note->n_descsz; ++i) wanted.id += {hex[desc[i] >> 4], hex[desc[i] & 15]};
              return 1;
            }
            at = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;  // ours, without a build ID
      },
      &found);
  if (!found.id.empty()) return found.id;
  struct stat status{};
  if (!info.dli_fname || ::stat(info.dli_fname, &status) != 0) return info.dli_fname ? info.dli_fname : "";
  return std::string(info.dli_fname) + "@" + std::to_string(status.st_size) + "@" + std::to_string(status.st_mtim.tv_sec) + "." +
         std::to_string(status.st_mtim.tv_nsec);
}

TORCH_DELEGATE_DECL std::string machine_fingerprint() {
  std::ostringstream out;
  std::string model;
  {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; model.empty() && std::getline(cpuinfo, line);)
      if (line.rfind("model name", 0) == 0) model = line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1);
  }
  out << "cpu:" << model << ";isa:";
#if defined(__x86_64__) || defined(__i386__)
#define TORCH_DELEGATE_ISA(name) \
  if (__builtin_cpu_supports(name)) out << name << ",";
  TORCH_DELEGATE_ISA("sse4.2")
  TORCH_DELEGATE_ISA("avx")
  TORCH_DELEGATE_ISA("avx2")
  TORCH_DELEGATE_ISA("fma")
  TORCH_DELEGATE_ISA("avx512f")
  TORCH_DELEGATE_ISA("avx512bw")
  TORCH_DELEGATE_ISA("avx512vl")
  TORCH_DELEGATE_ISA("avx512vnni")
#undef TORCH_DELEGATE_ISA
#endif
  out << ";threads:" << at::get_num_threads() << ";torch:" << TORCH_VERSION << ";torch_delegate:" << library_version()
      << ";env:";
  // Every declared switch that changes the kernels, where it is set (runtime_switches.hpp: the
  // engines' caps, and each loaded backend's table).
  std::vector<std::string> settings;
  for (const known_switch& each : runtime_switches())
    if (each.declared.changes_kernels && each.value) settings.push_back(std::string(each.declared.name) + "=" + *each.value);
  std::sort(settings.begin(), settings.end());
  for (const std::string& setting : settings) out << setting << ";";
  return out.str();
}

TORCH_DELEGATE_DECL std::string timing_cache_directory(const partition_options& options) {
  if (!options.timing_cache) return {};
  if (!options.timing_cache_dir.empty()) return options.timing_cache_dir;
  const auto given = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  if (given("TORCH_DELEGATE_TIMING_CACHE") == "0") return {};
  if (!given("TORCH_DELEGATE_CACHE_DIR").empty()) return given("TORCH_DELEGATE_CACHE_DIR");
  if (!given("XDG_CACHE_HOME").empty()) return given("XDG_CACHE_HOME") + "/torch_delegate";
  if (!given("HOME").empty()) return given("HOME") + "/.cache/torch_delegate";
  return {};
}

TORCH_DELEGATE_INTERNAL void warn_cache_once(const std::string& path, const std::string& what) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(path).second) return;
  }
  TORCH_WARN("torch-delegate: the timing cache ", path, ": ", what);
}

// "kind \t key \t payload": what a line's CRC covers.
inline std::string entry_text(std::string_view kind, const std::string& key, const std::string& payload) {
  std::string text;
  text.append(kind).append("\t").append(key).append("\t").append(payload);
  return text;
}

inline std::string crc_text(const std::string& text) {
  char digits[9];
  std::snprintf(digits, sizeof digits, "%08x", static_cast<unsigned>(crc32(0, text.data(), text.size())));
  return digits;
}

/// A line's kind, key and payload, when it has its four fields, a 32-character key and a CRC that
/// matches (load() and compact() read lines alike).
struct cache_entry {
  std::string kind, key, payload;
};
inline std::optional<cache_entry> parse_entry(const std::string& line) {
  std::vector<std::string> fields;
  for (std::size_t start = 0;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  if (fields.size() != 4 || fields[1].size() != 32 || crc_text(entry_text(fields[0], fields[1], fields[2])) != fields[3])
    return std::nullopt;
  return cache_entry{std::move(fields[0]), std::move(fields[1]), std::move(fields[2])};
}

/// What is left to read of `fd`.
inline std::string read_rest(int fd) {
  std::string content;
  char buffer[65536];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) content.append(buffer, static_cast<std::size_t>(got));
  return content;
}

TORCH_DELEGATE_INTERNAL void timing_cache_file::load() {
  loaded_ = true;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // nothing cached yet
  std::string content;
  if (::flock(fd, LOCK_SH) == 0) {
    content = read_rest(fd);
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
  if (content.empty()) return;
  std::istringstream lines(content);
  std::string line;
  if (!std::getline(lines, line) || line != header) {
    foreign_ = true;
    warn_cache_once(path_, "its first line is not \"" + std::string(header) +
                               "\": it is not a torch-delegate timing cache of this format, and is neither read nor written "
                               "(remove it, or set timing_cache_dir to another directory)");
    return;
  }
  bool ended = content.back() == '\n';
  std::size_t total = 0;
  while (std::getline(lines, line)) {
    ++total;
    const bool last = lines.peek() == std::char_traits<char>::eof();
    std::optional<cache_entry> entry = parse_entry(line);
    if (!entry || (last && !ended)) {
      ++damaged_;
      continue;
    }
    entries_[entry->kind + "\t" + entry->key] = std::move(entry->payload);
  }
  if (damaged_ > 0)
    warn_cache_once(path_, std::to_string(damaged_) + " of its " + std::to_string(total) +
                               " entries are damaged (a CRC that does not match, or a line cut short) and are ignored; "
                               "they are measured again");
  // Over its bound, or mostly entries written again since: compacted.
  if (content.size() > max_bytes_ || (total >= 64 && total > 2 * entries_.size())) compact();
}

TORCH_DELEGATE_INTERNAL void timing_cache_file::compact() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX) != 0) {
    ::close(fd);
    return;
  }
  const std::string content = read_rest(fd);  // again, under the lock: another process may have appended since
  std::vector<std::pair<std::string, std::string>> lines;  // (kind + '\t' + key, the whole line), whole and undamaged
  std::unordered_map<std::string, std::size_t> last;       // kind + '\t' + key -> its last line
  std::istringstream in(content);
  std::string line;
  if (std::getline(in, line) && line == header) {
    while (std::getline(in, line)) {
      if (in.eof() && content.back() != '\n') break;  // cut short
      const std::optional<cache_entry> entry = parse_entry(line);
      if (!entry) continue;  // damaged: dropped
      last[entry->kind + "\t" + entry->key] = lines.size();
      lines.emplace_back(entry->kind + "\t" + entry->key, line);
    }
    std::vector<const std::string*> kept;
    std::size_t bytes = header.size() + 1;
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (last[lines[i].first] == i) {
        kept.push_back(&lines[i].second);
        bytes += lines[i].second.size() + 1;
      }
    std::size_t from = 0;
    for (; from < kept.size() && bytes > max_bytes_ / 2; ++from) bytes -= kept[from]->size() + 1;
    std::string text(header);
    text.append("\n");
    for (std::size_t i = from; i < kept.size(); ++i) text.append(*kept[i]).append("\n");
    const std::string temporary = path_ + ".compacting." + std::to_string(::getpid());
    const int out = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool written = out >= 0;
    for (std::size_t done = 0; written && done < text.size();) {
      const ssize_t n = ::write(out, text.data() + done, text.size() - done);
      written = n > 0;
      if (written) done += static_cast<std::size_t>(n);
    }
    if (out >= 0) written = ::close(out) == 0 && written;
    if (!written || ::rename(temporary.c_str(), path_.c_str()) != 0) ::unlink(temporary.c_str());
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
}

TORCH_DELEGATE_DECL std::optional<std::string> timing_cache_file::find(std::string_view kind, const std::string& key) {
  if (!loaded_) load();
  if (foreign_) return std::nullopt;
  const auto found = entries_.find(std::string(kind) + "\t" + key);
  if (found == entries_.end()) return std::nullopt;
  return found->second;
}

TORCH_DELEGATE_DECL void timing_cache_file::store(std::string_view kind, const std::string& key, const std::string& payload) {
  if (!loaded_) load();
  if (foreign_) return;
  TORCH_INTERNAL_ASSERT(payload.find_first_of("\t\n") == std::string::npos, "a timing cache payload with a tab or newline");
  entries_[std::string(kind) + "\t" + key] = payload;
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn_cache_once(path_, std::string("cannot be written (") + std::strerror(errno) + "): what is measured is not kept");
    return;
  }
  if (::flock(fd, LOCK_EX) == 0) {
    std::string text;
    struct stat status {};
    if (::fstat(fd, &status) == 0 && status.st_size == 0) text.append(header).append("\n");
    // Another process may have written the header line since this one read the file: only an
    // empty file gets one (under the lock).
    const std::string entry = entry_text(kind, key, payload);
    text.append(entry).append("\t").append(crc_text(entry)).append("\n");
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
}

}  // namespace torch_delegate::detail
