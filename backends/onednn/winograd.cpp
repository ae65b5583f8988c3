// The Winograd kernels of winograd.hpp: the weight transform (at planning, in double), the input
// and output transforms (winograd_tiles.ipp, compiled for AVX2 and FMA and for AVX-512 whatever
// the build's flags: a plan uses them only where cpu_supported(), the AVX-512 ones only on nChw16c
// where avx512_supported()), and the direct reference the unit tests compare with.
#include "winograd.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace onednn_delegate::winograd {

bool cpu_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}

namespace {

// G for F(4x4, 3x3) (6 x 3) and F(2x2, 3x3) (4 x 3).
constexpr double g4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                             {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6},  {0, 0, 1}};
constexpr double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

/// Where (n, 8-channel group, y, x) starts in the geometry's layout, for a tensor of `channels`
/// channels and height x width: nhwc (channels_last), nChw8c (layout_block 8) or nChw16c (16, the
/// group's 8 channels one half of a 16-channel block); with frames, n is a clip's frame, in ndhwc,
/// nCdhw8c or nCdhw16c (a block's plane per frame, the frames of a clip one after another).
inline std::size_t position(const geometry& g, std::int64_t channels, std::int64_t n, std::int64_t group, std::int64_t y,
                            std::int64_t x, std::int64_t height, std::int64_t width) {
  if (g.channels_last) return static_cast<std::size_t>(((n * height + y) * width + x) * channels + group * 8);
  const std::int64_t block = group * 8 / g.layout_block, lane = group * 8 % g.layout_block;
  const std::int64_t clip = n / g.frames, frame = n % g.frames;
  const std::int64_t plane = (clip * (channels / g.layout_block) + block) * g.frames + frame;
  return static_cast<std::size_t>(((plane * height + y) * width + x) * g.layout_block + lane);
}

}  // namespace

void transform_weights(const geometry& g, const float* weights, float* transformed) {
  const int alpha = g.alpha();
  const auto at = [&](int i, int a) { return g.m == 4 ? g4[i][a] : g2[i][a]; };
  for (std::int64_t k = 0; k < g.k; ++k)
    for (std::int64_t c = 0; c < g.c; ++c) {
      const float* w = weights + (k * g.c + c) * 9;
      double temp[6][3];  // G g
      for (int i = 0; i < alpha; ++i)
        for (int b = 0; b < 3; ++b) temp[i][b] = at(i, 0) * w[b] + at(i, 1) * w[3 + b] + at(i, 2) * w[6 + b];
      for (int i = 0; i < alpha; ++i)
        for (int j = 0; j < alpha; ++j) {
          const double u = temp[i][0] * at(j, 0) + temp[i][1] * at(j, 1) + temp[i][2] * at(j, 2);
          transformed[(static_cast<std::size_t>(i * alpha + j) * g.c + c) * g.k + k] = static_cast<float>(u);
        }
    }
}

// The transforms, once per ISA (winograd_tiles.ipp): AVX2 and FMA, and AVX-512 for nChw16c, where
// a vector holds a whole block (ResNet-50's transforms took about 9 % of its time at 8 lanes).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace avx2 {
namespace {
using vec = __m256;
inline vec load(const float* at) { return _mm256_loadu_ps(at); }
inline void store(float* at, vec v) { _mm256_storeu_ps(at, v); }
inline vec zero() { return _mm256_setzero_ps(); }
inline vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
inline vec sub(vec a, vec b) { return _mm256_sub_ps(a, b); }
inline vec fma_(float a, vec b, vec c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c); }
inline vec fnma_(float a, vec b, vec c) { return _mm256_fnmadd_ps(_mm256_set1_ps(a), b, c); }
inline vec clip(vec v, float low, float high) { return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(low)), _mm256_set1_ps(high)); }
#include "winograd_tiles.ipp"
}  // namespace

void transform_input(const geometry& g, const float* src, float* transformed, std::int64_t item) {
  const std::int64_t groups = g.c / 8;
  if (g.m == 4)
    input_tile<4>(g, src, transformed, item / groups, item % groups);
  else
    input_tile<2>(g, src, transformed, item / groups, item % groups);
}

void transform_output(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                      const float* residual, float* dst, std::int64_t item) {
  const std::int64_t groups = g.k / 8;
  if (g.m == 4)
    output_tile<4>(g, products, bias, ops, residual, dst, item / groups, item % groups);
  else
    output_tile<2>(g, products, bias, ops, residual, dst, item / groups, item % groups);
}
}  // namespace avx2

#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif

namespace avx512 {
namespace {
using vec = __m512;
inline vec load(const float* at) { return _mm512_loadu_ps(at); }
inline void store(float* at, vec v) { _mm512_storeu_ps(at, v); }
inline vec zero() { return _mm512_setzero_ps(); }
inline vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
inline vec sub(vec a, vec b) { return _mm512_sub_ps(a, b); }
inline vec fma_(float a, vec b, vec c) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c); }
inline vec fnma_(float a, vec b, vec c) { return _mm512_fnmadd_ps(_mm512_set1_ps(a), b, c); }
// The masked forms with every lane set: GCC 12's unmasked ones pass _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports.
inline vec clip(vec v, float low, float high) {
  const vec raised = _mm512_mask_max_ps(v, 0xFFFF, v, _mm512_set1_ps(low));
  return _mm512_mask_min_ps(raised, 0xFFFF, raised, _mm512_set1_ps(high));
}
#include "winograd_tiles.ipp"
}  // namespace

/// Items [first, last): where an item starts an nChw16c block (16 channels in nhwc) and the next
/// is its second half, both at once (16 lanes); any other on AVX2's kernel (a range given an odd
/// boundary).
void transform_input(const geometry& g, const float* src, float* transformed, std::int64_t first, std::int64_t last) {
  const std::int64_t groups = g.c / 8;
  for (std::int64_t item = first; item < last;) {
    const std::int64_t tile = item / groups, group = item % groups;
    if (group % 2 == 0 && item + 1 < last) {
      g.m == 4 ? input_tile<4>(g, src, transformed, tile, group) : input_tile<2>(g, src, transformed, tile, group);
      item += 2;
    } else {
      avx2::transform_input(g, src, transformed, item++);
    }
  }
}

void transform_output(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                      const float* residual, float* dst, std::int64_t first, std::int64_t last) {
  const std::int64_t groups = g.k / 8;
  for (std::int64_t item = first; item < last;) {
    const std::int64_t tile = item / groups, group = item % groups;
    if (group % 2 == 0 && item + 1 < last) {
      g.m == 4 ? output_tile<4>(g, products, bias, ops, residual, dst, tile, group)
               : output_tile<2>(g, products, bias, ops, residual, dst, tile, group);
      item += 2;
    } else {
      avx2::transform_output(g, products, bias, ops, residual, dst, item++);
    }
  }
}
}  // namespace avx512

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

bool avx512_supported() {
  static const bool supported = cpu_supported() && __builtin_cpu_supports("avx512f");
  return supported;
}

void transform_input(const geometry& g, const float* src, float* transformed, std::int64_t first, std::int64_t last) {
  if (g.layout_block == 16 && avx512_supported()) return avx512::transform_input(g, src, transformed, first, last);
  for (std::int64_t item = first; item < last; ++item) avx2::transform_input(g, src, transformed, item);
}

void transform_output(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                      const float* residual, float* dst, std::int64_t first, std::int64_t last) {
  if (g.layout_block == 16 && avx512_supported()) return avx512::transform_output(g, products, bias, ops, residual, dst, first, last);
  for (std::int64_t item = first; item < last; ++item) avx2::transform_output(g, products, bias, ops, residual, dst, item);
}

void reference_convolution(const geometry& g, const float* src, const float* weights, const float* bias,
                           const std::vector<epilogue_op>& ops, const float* residual, float* dst) {
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t k = 0; k < g.k; ++k)
      for (std::int64_t y = 0; y < g.oh; ++y)
        for (std::int64_t x = 0; x < g.ow; ++x) {
          double sum = bias[k];
          for (std::int64_t c = 0; c < g.c; ++c)
            for (int a = 0; a < 3; ++a)
              for (int b = 0; b < 3; ++b) {
                const std::int64_t iy = y + a - g.pad_top, ix = x + b - g.pad_left;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                sum += static_cast<double>(src[position(g, g.c, n, c / 8, iy, ix, g.h, g.w) + c % 8]) * weights[(k * g.c + c) * 9 + a * 3 + b];
              }
          const std::size_t at = position(g, g.k, n, k / 8, y, x, g.oh, g.ow) + static_cast<std::size_t>(k % 8);
          auto value = static_cast<float>(sum);
          for (const epilogue_op& op : ops) value = op.kind == epilogue_op::add ? value + residual[at] : std::min(std::max(value, op.low), op.high);
          dst[at] = value;
        }
}

}  // namespace onednn_delegate::winograd
