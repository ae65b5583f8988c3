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

__attribute__((target("avx2,fma"))) inline void store_row(float* out, __m256 low, __m256 high) {
  _mm256_storeu_ps(out, low);
  _mm256_storeu_ps(out + 8, high);
}

template <activation A>
__attribute__((target("avx2,fma"))) inline __m256 finish(__m256 x) {
  if constexpr (A == activation::relu) return _mm256_max_ps(x, _mm256_setzero_ps());
  if constexpr (A == activation::gelu_erf) return avx2::gelu_erf8(x);
  return x;
}

// R rows (1 to 6) of `in` (a row every `row_stride` floats) times `count` features of one panel:
// 2 vectors of 8 outputs a row, the panel's 16 values of feature k loaded once for all rows, each
// row's value broadcast. Each row starts from `start` (the panel's 16 biases) or, where
// Accumulate, from what `out` holds (the features before, a slice earlier); `width` (1 to 16) of
// the 16 outputs are written, through the activation A.
template <int R, activation A, bool Accumulate>
__attribute__((target("avx2,fma"))) void rows_times_panel(const float* in, std::int64_t row_stride, std::int64_t count,
                                                          const float* panel, const float* start, float* out, std::int64_t outputs,
                                                          std::int64_t width) {
  __m256 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
  c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm256_setzero_ps();
  if constexpr (Accumulate) {
    alignas(32) float prior[6][panel_width] = {};  // the last panel's rows, through a copy of their `width` outputs
    const float* from[6] = {};
    for (int row = 0; row < R; ++row) {
      from[row] = out + row * outputs;
      if (width != panel_width) {
        std::memcpy(prior[row], from[row], static_cast<std::size_t>(width) * sizeof(float));
        from[row] = prior[row];
      }
    }
    c0l = _mm256_loadu_ps(from[0]), c0h = _mm256_loadu_ps(from[0] + 8);
    if constexpr (R > 1) c1l = _mm256_loadu_ps(from[1]), c1h = _mm256_loadu_ps(from[1] + 8);
    if constexpr (R > 2) c2l = _mm256_loadu_ps(from[2]), c2h = _mm256_loadu_ps(from[2] + 8);
    if constexpr (R > 3) c3l = _mm256_loadu_ps(from[3]), c3h = _mm256_loadu_ps(from[3] + 8);
    if constexpr (R > 4) c4l = _mm256_loadu_ps(from[4]), c4h = _mm256_loadu_ps(from[4] + 8);
    if constexpr (R > 5) c5l = _mm256_loadu_ps(from[5]), c5h = _mm256_loadu_ps(from[5] + 8);
  } else {
    const __m256 low = _mm256_loadu_ps(start), high = _mm256_loadu_ps(start + 8);
    c0l = c1l = c2l = c3l = c4l = c5l = low;
    c0h = c1h = c2h = c3h = c4h = c5h = high;
  }
  const float* a0 = in;
  const float* a1 = in + (R > 1 ? row_stride : 0);
  const float* a2 = in + (R > 2 ? 2 * row_stride : 0);
  const float* a3 = in + (R > 3 ? 3 * row_stride : 0);
  const float* a4 = in + (R > 4 ? 4 * row_stride : 0);
  const float* a5 = in + (R > 5 ? 5 * row_stride : 0);
  for (std::int64_t k = 0; k < count; ++k) {
    const __m256 wl = _mm256_loadu_ps(panel + k * panel_width), wh = _mm256_loadu_ps(panel + k * panel_width + 8);
    __m256 a = _mm256_broadcast_ss(a0 + k);
    c0l = _mm256_fmadd_ps(a, wl, c0l), c0h = _mm256_fmadd_ps(a, wh, c0h);
    if constexpr (R > 1) a = _mm256_broadcast_ss(a1 + k), c1l = _mm256_fmadd_ps(a, wl, c1l), c1h = _mm256_fmadd_ps(a, wh, c1h);
    if constexpr (R > 2) a = _mm256_broadcast_ss(a2 + k), c2l = _mm256_fmadd_ps(a, wl, c2l), c2h = _mm256_fmadd_ps(a, wh, c2h);
    if constexpr (R > 3) a = _mm256_broadcast_ss(a3 + k), c3l = _mm256_fmadd_ps(a, wl, c3l), c3h = _mm256_fmadd_ps(a, wh, c3h);
    if constexpr (R > 4) a = _mm256_broadcast_ss(a4 + k), c4l = _mm256_fmadd_ps(a, wl, c4l), c4h = _mm256_fmadd_ps(a, wh, c4h);
    if constexpr (R > 5) a = _mm256_broadcast_ss(a5 + k), c5l = _mm256_fmadd_ps(a, wl, c5l), c5h = _mm256_fmadd_ps(a, wh, c5h);
  }
  if constexpr (A != activation::none) {
    c0l = finish<A>(c0l), c0h = finish<A>(c0h);
    if constexpr (R > 1) c1l = finish<A>(c1l), c1h = finish<A>(c1h);
    if constexpr (R > 2) c2l = finish<A>(c2l), c2h = finish<A>(c2h);
    if constexpr (R > 3) c3l = finish<A>(c3l), c3h = finish<A>(c3h);
    if constexpr (R > 4) c4l = finish<A>(c4l), c4h = finish<A>(c4h);
    if constexpr (R > 5) c5l = finish<A>(c5l), c5h = finish<A>(c5h);
  }
  if (width == panel_width) {  // named registers, not an array of them: an array would live in memory
    store_row(out, c0l, c0h);
    if constexpr (R > 1) store_row(out + outputs, c1l, c1h);
    if constexpr (R > 2) store_row(out + 2 * outputs, c2l, c2h);
    if constexpr (R > 3) store_row(out + 3 * outputs, c3l, c3h);
    if constexpr (R > 4) store_row(out + 4 * outputs, c4l, c4h);
    if constexpr (R > 5) store_row(out + 5 * outputs, c5l, c5h);
    return;
  }
  alignas(32) float last[6][panel_width];  // the last panel's first `width` outputs
  _mm256_store_ps(last[0], c0l), _mm256_store_ps(last[0] + 8, c0h);
  _mm256_store_ps(last[1], c1l), _mm256_store_ps(last[1] + 8, c1h);
  _mm256_store_ps(last[2], c2l), _mm256_store_ps(last[2] + 8, c2h);
  _mm256_store_ps(last[3], c3l), _mm256_store_ps(last[3] + 8, c3h);
  _mm256_store_ps(last[4], c4l), _mm256_store_ps(last[4] + 8, c4h);
  _mm256_store_ps(last[5], c5l), _mm256_store_ps(last[5] + 8, c5h);
  for (int row = 0; row < R; ++row) std::memcpy(out + row * outputs, last[row], static_cast<std::size_t>(width) * sizeof(float));
}

using rows_kernel = void (*)(const float*, std::int64_t, std::int64_t, const float*, const float*, float*, std::int64_t,
                             std::int64_t);
template <activation A, bool Accumulate>
constexpr rows_kernel by_rows[] = {nullptr,
                                   rows_times_panel<1, A, Accumulate>,
                                   rows_times_panel<2, A, Accumulate>,
                                   rows_times_panel<3, A, Accumulate>,
                                   rows_times_panel<4, A, Accumulate>,
                                   rows_times_panel<5, A, Accumulate>,
                                   rows_times_panel<6, A, Accumulate>};

const rows_kernel* kernels_for(activation then, bool accumulate) {
  if (accumulate)
    return then == activation::relu       ? by_rows<activation::relu, true>
           : then == activation::gelu_erf ? by_rows<activation::gelu_erf, true>
                                          : by_rows<activation::none, true>;
  return then == activation::relu       ? by_rows<activation::relu, false>
         : then == activation::gelu_erf ? by_rows<activation::gelu_erf, false>
                                        : by_rows<activation::none, false>;
}

}  // namespace

std::int64_t features_per_slice(std::int64_t features, std::int64_t l2_bytes) {
  // A feature takes 64 bytes of the panel and 24 of the 6 rows of input; 3/5 of the cache for them.
  const std::int64_t per_feature = panel_width * 4 + 6 * 4, budget = std::max<std::int64_t>(l2_bytes / 5 * 3, 1);
  if (features * per_feature <= budget || features <= 8) return std::max<std::int64_t>(features, 1);
  const std::int64_t slices = (features * per_feature + budget - 1) / budget;
  return ((features + slices - 1) / slices + 7) / 8 * 8;
}

std::int64_t l2_cache_bytes() {
  static const std::int64_t bytes = [] {
    if (const char* given = std::getenv("TD_ONEDNN_GEMM_L2_BYTES"); given && *given) {  // whole digits, 1 to 2^40
      char* end = nullptr;
      const long long value = std::strtoll(given, &end, 10);
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

void multiply(const float* in, std::int64_t features, const float* packed, const float* bias, float* out, std::int64_t outputs,
              std::int64_t first_row, std::int64_t last_row, std::int64_t first_panel, std::int64_t last_panel, activation then,
              std::int64_t slice) {
  if (slice <= 0) slice = std::max<std::int64_t>(features, 1);
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
        kernels[rows](in + row * features + from, features, count, panel + from * panel_width, start, out + row * outputs + first,
                      outputs, width);
      }
    }
  }
}

}  // namespace onednn_delegate::gemm
