// The GEMM kernel of gemm.hpp.
#include "gemm.hpp"

#include "avx2_math.hpp"

#include <immintrin.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace onednn_delegate::gemm {

void pack_weights(const float* weights, std::int64_t outputs, std::int64_t features, float* packed) {
  const std::int64_t count = panels(outputs);
  std::fill_n(packed, count * features * panel_width, 0.f);
  for (std::int64_t o = 0; o < outputs; ++o) {
    float* column = packed + (o / panel_width) * features * panel_width + o % panel_width;
    const float* row = weights + o * features;
    for (std::int64_t k = 0; k < features; ++k) column[k * panel_width] = row[k];
  }
}

void unpack_weights(const float* packed, std::int64_t outputs, std::int64_t features, float* weights) {
  for (std::int64_t o = 0; o < outputs; ++o) {
    const float* column = packed + (o / panel_width) * features * panel_width + o % panel_width;
    float* row = weights + o * features;
    for (std::int64_t k = 0; k < features; ++k) row[k] = column[k * panel_width];
  }
}

namespace {

// The 16 outputs of one row: the low 8 at `at`, the high 8 `half` floats further (8 in a row-major
// matrix, H * W * 8 in nChw8c); `width` (1 to 16) of them, through a copy where it is not 16.
__attribute__((target("avx2,fma"), always_inline)) inline void store_row(float* at, std::int64_t half, __m256 low, __m256 high, std::int64_t width) {
  if (width == panel_width) {
    _mm256_storeu_ps(at, low);
    _mm256_storeu_ps(at + half, high);
    return;
  }
  alignas(32) float values[panel_width];
  _mm256_store_ps(values, low), _mm256_store_ps(values + 8, high);
  std::memcpy(at, values, static_cast<std::size_t>(std::min<std::int64_t>(width, 8)) * sizeof(float));
  if (width > 8) std::memcpy(at + half, values + 8, static_cast<std::size_t>(width - 8) * sizeof(float));
}

// The same row's `width` values read back (zeros past them).
__attribute__((target("avx2,fma"), always_inline)) inline void load_row(const float* at, std::int64_t half, __m256& low, __m256& high, std::int64_t width) {
  if (width == panel_width) {
    low = _mm256_loadu_ps(at), high = _mm256_loadu_ps(at + half);
    return;
  }
  alignas(32) float values[panel_width] = {};
  std::memcpy(values, at, static_cast<std::size_t>(std::min<std::int64_t>(width, 8)) * sizeof(float));
  if (width > 8) std::memcpy(values + 8, at + half, static_cast<std::size_t>(width - 8) * sizeof(float));
  low = _mm256_load_ps(values), high = _mm256_load_ps(values + 8);
}

// `low` and `high`: a clip's bounds (activation::clip), else unread.
template <activation A>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 finish(__m256 x, __m256 low, __m256 high) {
  if constexpr (A == activation::relu) return _mm256_max_ps(x, _mm256_setzero_ps());
  if constexpr (A == activation::gelu_erf) return avx2::gelu_erf8(x);
  if constexpr (A == activation::clip) return _mm256_min_ps(_mm256_max_ps(x, low), high);
  return x;
}

// Where a call's rows are: `in` and `out` (and `addend`) at its first row, its first feature and
// its panel's first output; their strides (gemm.hpp); how many features; the panel; the 16 biases.
struct rows_job {
  const float* in;
  strides in_strides;
  std::int64_t count;
  const float* panel;
  const float* start;
  const float* addend;  // read in out's strides; nullptr: none
  float* out;
  strides out_strides;
  std::int64_t width;
  float low, high;  // a clip's bounds
};

// R rows (1 to 6) of the job's input times `count` features of one panel: 2 vectors of 8 outputs a
// row, the panel's 16 values of feature k loaded once for all rows, each row's value broadcast
// (features in blocks of 8: the input's k-th at (k / 8) * block + k % 8). Each row starts from the
// 16 biases (plus the addend's row, where there is one) or, where Accumulate, from what `out`
// holds (the features before, a slice earlier); `width` (1 to 16) of the 16 outputs are written,
// through the activation A.
template <int R, activation A, bool Accumulate>
__attribute__((target("avx2,fma"))) void rows_times_panel(const rows_job& job) {
  const std::int64_t out_row = job.out_strides.row, half = job.out_strides.block;
  __m256 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
  c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm256_setzero_ps();
  const float* from = Accumulate ? job.out : job.addend;
  if (from != nullptr) {
    load_row(from, half, c0l, c0h, job.width);
    if constexpr (R > 1) load_row(from + out_row, half, c1l, c1h, job.width);
    if constexpr (R > 2) load_row(from + 2 * out_row, half, c2l, c2h, job.width);
    if constexpr (R > 3) load_row(from + 3 * out_row, half, c3l, c3h, job.width);
    if constexpr (R > 4) load_row(from + 4 * out_row, half, c4l, c4h, job.width);
    if constexpr (R > 5) load_row(from + 5 * out_row, half, c5l, c5h, job.width);
  }
  if (!Accumulate) {
    const __m256 low = _mm256_loadu_ps(job.start), high = _mm256_loadu_ps(job.start + 8);
    c0l = _mm256_add_ps(c0l, low), c0h = _mm256_add_ps(c0h, high);
    if constexpr (R > 1) c1l = _mm256_add_ps(c1l, low), c1h = _mm256_add_ps(c1h, high);
    if constexpr (R > 2) c2l = _mm256_add_ps(c2l, low), c2h = _mm256_add_ps(c2h, high);
    if constexpr (R > 3) c3l = _mm256_add_ps(c3l, low), c3h = _mm256_add_ps(c3h, high);
    if constexpr (R > 4) c4l = _mm256_add_ps(c4l, low), c4h = _mm256_add_ps(c4h, high);
    if constexpr (R > 5) c5l = _mm256_add_ps(c5l, low), c5h = _mm256_add_ps(c5h, high);
  }
  const std::int64_t in_row = job.in_strides.row, block = job.in_strides.block;
  const float* a0 = job.in;
  const float* a1 = job.in + (R > 1 ? in_row : 0);
  const float* a2 = job.in + (R > 2 ? 2 * in_row : 0);
  const float* a3 = job.in + (R > 3 ? 3 * in_row : 0);
  const float* a4 = job.in + (R > 4 ? 4 * in_row : 0);
  const float* a5 = job.in + (R > 5 ? 5 * in_row : 0);
  const float* panel = job.panel;
  // One feature: its place `at` in each row, its 16 weights `w` (a macro: a lambda would not take
  // the function's target attributes).
#define TD_GEMM_STEP(at, w)                                                                                            \
  do {                                                                                                                 \
    const __m256 wl = _mm256_loadu_ps(w), wh = _mm256_loadu_ps((w) + 8);                                               \
    __m256 a = _mm256_broadcast_ss(a0 + (at));                                                                         \
    c0l = _mm256_fmadd_ps(a, wl, c0l), c0h = _mm256_fmadd_ps(a, wh, c0h);                                              \
    if constexpr (R > 1) a = _mm256_broadcast_ss(a1 + (at)), c1l = _mm256_fmadd_ps(a, wl, c1l), c1h = _mm256_fmadd_ps(a, wh, c1h); \
    if constexpr (R > 2) a = _mm256_broadcast_ss(a2 + (at)), c2l = _mm256_fmadd_ps(a, wl, c2l), c2h = _mm256_fmadd_ps(a, wh, c2h); \
    if constexpr (R > 3) a = _mm256_broadcast_ss(a3 + (at)), c3l = _mm256_fmadd_ps(a, wl, c3l), c3h = _mm256_fmadd_ps(a, wh, c3h); \
    if constexpr (R > 4) a = _mm256_broadcast_ss(a4 + (at)), c4l = _mm256_fmadd_ps(a, wl, c4l), c4h = _mm256_fmadd_ps(a, wh, c4h); \
    if constexpr (R > 5) a = _mm256_broadcast_ss(a5 + (at)), c5l = _mm256_fmadd_ps(a, wl, c5l), c5h = _mm256_fmadd_ps(a, wh, c5h); \
  } while (false)
  const std::int64_t whole = job.count / 8 * 8;
  for (std::int64_t k = 0, at = 0; k < whole; k += 8, at += block) {
    const float* w = panel + k * panel_width;
    TD_GEMM_STEP(at, w);
    TD_GEMM_STEP(at + 1, w + 16);
    TD_GEMM_STEP(at + 2, w + 32);
    TD_GEMM_STEP(at + 3, w + 48);
    TD_GEMM_STEP(at + 4, w + 64);
    TD_GEMM_STEP(at + 5, w + 80);
    TD_GEMM_STEP(at + 6, w + 96);
    TD_GEMM_STEP(at + 7, w + 112);
  }
  for (std::int64_t k = whole; k < job.count; ++k) TD_GEMM_STEP(k / 8 * block + k % 8, panel + k * panel_width);
#undef TD_GEMM_STEP
  if constexpr (A != activation::none) {
    const __m256 lo = _mm256_set1_ps(job.low), hi = _mm256_set1_ps(job.high);
    c0l = finish<A>(c0l, lo, hi), c0h = finish<A>(c0h, lo, hi);
    if constexpr (R > 1) c1l = finish<A>(c1l, lo, hi), c1h = finish<A>(c1h, lo, hi);
    if constexpr (R > 2) c2l = finish<A>(c2l, lo, hi), c2h = finish<A>(c2h, lo, hi);
    if constexpr (R > 3) c3l = finish<A>(c3l, lo, hi), c3h = finish<A>(c3h, lo, hi);
    if constexpr (R > 4) c4l = finish<A>(c4l, lo, hi), c4h = finish<A>(c4h, lo, hi);
    if constexpr (R > 5) c5l = finish<A>(c5l, lo, hi), c5h = finish<A>(c5h, lo, hi);
  }
  // Named registers, not an array of them: an array would live in memory.
  store_row(job.out, half, c0l, c0h, job.width);
  if constexpr (R > 1) store_row(job.out + out_row, half, c1l, c1h, job.width);
  if constexpr (R > 2) store_row(job.out + 2 * out_row, half, c2l, c2h, job.width);
  if constexpr (R > 3) store_row(job.out + 3 * out_row, half, c3l, c3h, job.width);
  if constexpr (R > 4) store_row(job.out + 4 * out_row, half, c4l, c4h, job.width);
  if constexpr (R > 5) store_row(job.out + 5 * out_row, half, c5l, c5h, job.width);
}

using rows_kernel = void (*)(const rows_job&);
template <activation A, bool Accumulate>
constexpr rows_kernel by_rows[] = {nullptr,
                                   rows_times_panel<1, A, Accumulate>,
                                   rows_times_panel<2, A, Accumulate>,
                                   rows_times_panel<3, A, Accumulate>,
                                   rows_times_panel<4, A, Accumulate>,
                                   rows_times_panel<5, A, Accumulate>,
                                   rows_times_panel<6, A, Accumulate>};

template <bool Accumulate>
const rows_kernel* kernels_of(activation then) {
  switch (then) {
    case activation::relu: return by_rows<activation::relu, Accumulate>;
    case activation::gelu_erf: return by_rows<activation::gelu_erf, Accumulate>;
    case activation::clip: return by_rows<activation::clip, Accumulate>;
    case activation::none: break;
  }
  return by_rows<activation::none, Accumulate>;
}

const rows_kernel* kernels_for(activation then, bool accumulate) { return accumulate ? kernels_of<true>(then) : kernels_of<false>(then); }

}  // namespace

work_split split_work(std::int64_t rows, std::int64_t panels, std::int64_t threads) {
  rows = std::max<std::int64_t>(rows, 1), panels = std::max<std::int64_t>(panels, 1), threads = std::max<std::int64_t>(threads, 1);
  const std::int64_t most = (rows + 5) / 6;  // blocks of at least one 6-row step
  const auto blocks_of = [&](std::int64_t wanted) {
    const std::int64_t block_rows = ((rows + wanted - 1) / wanted + 5) / 6 * 6;
    return work_split{block_rows, (rows + block_rows - 1) / block_rows};  // none of them empty
  };
  const std::int64_t wanted = std::clamp<std::int64_t>((4 * threads + panels - 1) / panels, 1, most);
  for (std::int64_t more = wanted; more <= std::min(most, wanted + threads); ++more) {
    const work_split made = blocks_of(more);
    if (made.blocks * panels % threads == 0) return made;
  }
  return blocks_of(wanted);
}

std::int64_t features_per_slice(std::int64_t features, std::int64_t l2_bytes) {
  // A feature takes 64 bytes of the panel and 24 of the 6 rows of input; 3/5 of the cache for them.
  const std::int64_t per_feature = panel_width * 4 + 6 * 4, budget = std::max<std::int64_t>(l2_bytes / 5 * 3, 1);
  if (features * per_feature <= budget || features <= 8) return std::max<std::int64_t>(features, 1);
  const std::int64_t slices = (features * per_feature + budget - 1) / budget;
  return ((features + slices - 1) / slices + 7) / 8 * 8;
}

std::int64_t l2_cache_bytes() {
  static const std::int64_t bytes = [] {
    // The switch TD_ONEDNN_GEMM_L2_BYTES (switches.cpp): whole digits, 1 to 2^40.
    if (const std::string given = l2_bytes_switch(); !given.empty()) {
      char* end = nullptr;
      const long long value = std::strtoll(given.c_str(), &end, 10);
      if (*end == '\0' && value > 0) return std::min<std::int64_t>(value, std::int64_t{1} << 40);
    }
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long reported = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (reported > 0) return static_cast<std::int64_t>(reported);
#endif
    return std::int64_t{256} * 1024;
  }();
  return bytes;
}

void multiply(const float* in, strides in_strides, std::int64_t features, const float* packed, const float* bias, const float* addend,
              float* out, strides out_strides, std::int64_t outputs, std::int64_t first_row, std::int64_t last_row,
              std::int64_t first_panel, std::int64_t last_panel, activation then, std::int64_t slice, float low, float high) {
  if (slice <= 0) slice = std::max<std::int64_t>(features, 1);
  // Feature k's place in a row, and output o's (slices start at multiples of 8).
  const auto in_at = [&](std::int64_t k) { return k / 8 * in_strides.block + k % 8; };
  const auto out_at = [&](std::int64_t o) { return o / 8 * out_strides.block + o % 8; };
  for (std::int64_t p = first_panel; p < last_panel; ++p) {
    const std::int64_t first = p * panel_width, width = std::min(panel_width, outputs - first);
    alignas(32) float start[panel_width] = {};  // the panel's biases: the last panel's past `outputs` stay 0
    std::copy_n(bias + first, width, start);
    const float* panel = packed + p * features * panel_width;
    // A slice of the features at a time (all of them where they fit the L2 cache: features_per_slice),
    // every row against it, 6 at a time: the panel's slice (slice x 64 bytes) stays in cache.
    for (std::int64_t from = 0; from == 0 || from < features; from += slice) {
      const std::int64_t count = std::min(slice, features - from);
      const rows_kernel* kernels = kernels_for(from + count >= features ? then : activation::none, from > 0);
      for (std::int64_t row = first_row; row < last_row; row += 6) {
        const std::int64_t rows = std::min<std::int64_t>(6, last_row - row);
        const std::int64_t at = row * out_strides.row + out_at(first);
        kernels[rows]({in + row * in_strides.row + in_at(from), in_strides, count, panel + from * panel_width, start,
                       from == 0 && addend != nullptr ? addend + at : nullptr, out + at, out_strides, width, low, high});
      }
    }
  }
}

void multiply(const float* in, std::int64_t features, const float* packed, const float* bias, float* out, std::int64_t outputs,
              std::int64_t first_row, std::int64_t last_row, std::int64_t first_panel, std::int64_t last_panel, activation then,
              std::int64_t slice) {
  multiply(in, {features, 8}, features, packed, bias, nullptr, out, {outputs, 8}, outputs, first_row, last_row, first_panel, last_panel,
           then, slice);
}

}  // namespace onednn_delegate::gemm
