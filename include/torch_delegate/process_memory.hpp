// What a process that runs lowered models can ask of the C library's memory allocator. glibc's
// malloc gives freed memory back to the kernel (it trims its heap, and unmaps large blocks);
// ATen allocates large tensors in every call of a model's TorchScript parts, and each call then
// faults that memory in again, page by page. keep_freed_memory turns that off for the process.
// docs/performance.md ("What the allocator costs") has the measurements.
#pragma once

#include <c10/util/Exception.h>

#include <climits>
#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace torch_delegate {

/// The least keep_freed_memory accepts: glibc's own largest mmap threshold (32 MiB). Below it,
/// glibc would trim and unmap more often than it does with its defaults, not less.
inline constexpr std::size_t min_kept_memory = std::size_t{32} << 20;

/// What keep_freed_memory keeps when not told: 1 GiB.
inline constexpr std::size_t default_kept_memory = std::size_t{1} << 30;

/// Tells glibc's malloc to keep the memory this process frees, up to `bytes`, instead of giving
/// it back to the kernel: a block smaller than `bytes` comes from the heap, not from a mapping
/// of its own, and the heap is trimmed only when more than `bytes` lie free at its top. A
/// partially lowered model's TorchScript parts allocate large tensors in every call; with
/// glibc's defaults each call can fault them in again (Swin V2-T lowered to onednn, in a fresh
/// process: 2.2x slower, over 5,000 page faults a call; docs/performance.md).
///
/// Process-wide and not undone: call it once, early (a program's main, a server's start). The
/// process keeps up to `bytes` more memory resident than it otherwise would. Returns true when
/// glibc took both settings; false, changing nothing, where the C library is not glibc or
/// refuses them. A preloaded allocator (tcmalloc, jemalloc) keeps or returns memory by its own
/// rules, which this does not change. Throws c10::Error when `bytes` is below min_kept_memory or
/// above INT_MAX (glibc's mallopt takes an int).
inline bool keep_freed_memory(std::size_t bytes = default_kept_memory) {
  TORCH_CHECK(bytes >= min_kept_memory && bytes <= static_cast<std::size_t>(INT_MAX),
              "torch_delegate::keep_freed_memory: bytes must be ", min_kept_memory, " (32 MiB) to ", INT_MAX,
              " (glibc's mallopt takes an int), given ", bytes);
#if defined(__GLIBC__)
  // The mmap threshold first: the trim threshold alone would also freeze the mmap threshold at
  // its 128 KiB start, and every large block would get a mapping of its own.
  const int value = static_cast<int>(bytes);
  return mallopt(M_MMAP_THRESHOLD, value) == 1 && mallopt(M_TRIM_THRESHOLD, value) == 1;
#else
  return false;
#endif
}

}  // namespace torch_delegate
