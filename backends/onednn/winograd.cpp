// The Winograd kernels of winograd.hpp: the weight transform (at planning, in double), the input
// and output transforms (AVX2 and FMA, compiled for them whatever the build's flags: a plan uses
// them only where cpu_supported()), and the direct reference the unit tests compare with.
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

/// Where (n, 8-channel group, y, x) starts in nChw8c (layout_block 8) or nChw16c (16, the group's
/// 8 channels one half of a 16-channel block) of `channels` channels and height x width.
inline std::size_t blocked(std::int64_t layout_block, std::int64_t channels, std::int64_t n, std::int64_t group, std::int64_t y,
                           std::int64_t x, std::int64_t height, std::int64_t width) {
  const std::int64_t block = group * 8 / layout_block, lane = group * 8 % layout_block;
  return static_cast<std::size_t>((((n * (channels / layout_block) + block) * height + y) * width + x) * layout_block + lane);
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

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace {

using v8 = __m256;

inline v8 fma_(float a, v8 b, v8 c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c); }
inline v8 fnma_(float a, v8 b, v8 c) { return _mm256_fnmadd_ps(_mm256_set1_ps(a), b, c); }

/// B^T d for one column of `alpha` vectors (in[k * stride]), into out[k * stride].
template <int M>
inline void input_1d(const v8* in, int in_stride, v8* out, int out_stride) {
  if constexpr (M == 4) {
    const v8 d0 = in[0], d1 = in[in_stride], d2 = in[2 * in_stride], d3 = in[3 * in_stride], d4 = in[4 * in_stride],
             d5 = in[5 * in_stride];
    out[0] = fma_(4.f, d0, fnma_(5.f, d2, d4));
    out[out_stride] = fnma_(4.f, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));
    out[2 * out_stride] = fma_(4.f, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));
    out[3 * out_stride] = fma_(2.f, _mm256_sub_ps(d3, d1), _mm256_sub_ps(d4, d2));
    out[4 * out_stride] = fma_(2.f, _mm256_sub_ps(d1, d3), _mm256_sub_ps(d4, d2));
    out[5 * out_stride] = fma_(4.f, d1, fnma_(5.f, d3, d5));
  } else {
    const v8 d0 = in[0], d1 = in[in_stride], d2 = in[2 * in_stride], d3 = in[3 * in_stride];
    out[0] = _mm256_sub_ps(d0, d2);
    out[out_stride] = _mm256_add_ps(d1, d2);
    out[2 * out_stride] = _mm256_sub_ps(d2, d1);
    out[3 * out_stride] = _mm256_sub_ps(d1, d3);
  }
}

/// A^T m for one column of `alpha` vectors, into M vectors.
template <int M>
inline void output_1d(const v8* in, int in_stride, v8* out, int out_stride) {
  if constexpr (M == 4) {
    const v8 m0 = in[0], m1 = in[in_stride], m2 = in[2 * in_stride], m3 = in[3 * in_stride], m4 = in[4 * in_stride],
             m5 = in[5 * in_stride];
    const v8 sum12 = _mm256_add_ps(m1, m2), diff12 = _mm256_sub_ps(m1, m2), sum34 = _mm256_add_ps(m3, m4),
             diff34 = _mm256_sub_ps(m3, m4);
    out[0] = _mm256_add_ps(_mm256_add_ps(m0, sum12), sum34);
    out[out_stride] = fma_(2.f, diff34, diff12);
    out[2 * out_stride] = fma_(4.f, sum34, sum12);
    out[3 * out_stride] = _mm256_add_ps(fma_(8.f, diff34, diff12), m5);
  } else {
    const v8 m0 = in[0], m1 = in[in_stride], m2 = in[2 * in_stride], m3 = in[3 * in_stride];
    out[0] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
    out[out_stride] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
  }
}

template <int M>
void input_tiles(const geometry& g, const float* src, float* transformed, std::int64_t first, std::int64_t last) {
  constexpr int alpha = M + 2;
  const std::int64_t blocks = g.c / 8, tiles_w = g.tiles_w(), tiles_hw = g.tiles_h() * tiles_w, tiles = g.tiles();
  const v8 zero = _mm256_setzero_ps();
  for (std::int64_t item = first; item < last; ++item) {
    const std::int64_t tile = item / blocks, block = item % blocks;
    const std::int64_t n = tile / tiles_hw, ty = (tile % tiles_hw) / tiles_w, tx = tile % tiles_w;
    const std::int64_t y0 = ty * M - g.pad_top, x0 = tx * M - g.pad_left;
    v8 d[alpha][alpha], t[alpha][alpha], v[alpha][alpha];
    for (int i = 0; i < alpha; ++i) {
      const std::int64_t y = y0 + i;
      for (int j = 0; j < alpha; ++j) {
        const std::int64_t x = x0 + j;
        d[i][j] = (y >= 0 && y < g.h && x >= 0 && x < g.w) ? _mm256_loadu_ps(src + blocked(g.layout_block, g.c, n, block, y, x, g.h, g.w)) : zero;
      }
    }
    for (int j = 0; j < alpha; ++j) input_1d<M>(&d[0][j], alpha, &t[0][j], alpha);  // B^T d: down each column
    for (int i = 0; i < alpha; ++i) input_1d<M>(&t[i][0], 1, &v[i][0], 1);          // (B^T d) B: along each row
    for (int i = 0; i < alpha; ++i)
      for (int j = 0; j < alpha; ++j)
        _mm256_storeu_ps(transformed + (static_cast<std::size_t>(i * alpha + j) * tiles + tile) * g.c + block * 8, v[i][j]);
  }
}

template <int M>
void output_tiles(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                  const float* residual, float* dst, std::int64_t first, std::int64_t last) {
  constexpr int alpha = M + 2;
  const std::int64_t blocks = g.k / 8, tiles_w = g.tiles_w(), tiles_hw = g.tiles_h() * tiles_w, tiles = g.tiles();
  for (std::int64_t item = first; item < last; ++item) {
    const std::int64_t tile = item / blocks, block = item % blocks;
    const std::int64_t n = tile / tiles_hw, ty = (tile % tiles_hw) / tiles_w, tx = tile % tiles_w;
    v8 p[alpha][alpha], t[M][alpha], o[M][M];
    for (int i = 0; i < alpha; ++i)
      for (int j = 0; j < alpha; ++j)
        p[i][j] = _mm256_loadu_ps(products + (static_cast<std::size_t>(i * alpha + j) * tiles + tile) * g.k + block * 8);
    for (int j = 0; j < alpha; ++j) output_1d<M>(&p[0][j], alpha, &t[0][j], alpha);  // A^T p
    for (int i = 0; i < M; ++i) output_1d<M>(&t[i][0], 1, &o[i][0], 1);              // (A^T p) A
    const v8 b = _mm256_loadu_ps(bias + block * 8);
    for (int i = 0; i < M; ++i) {
      const std::int64_t y = ty * M + i;
      if (y >= g.oh) break;
      for (int j = 0; j < M; ++j) {
        const std::int64_t x = tx * M + j;
        if (x >= g.ow) break;
        const std::size_t at = blocked(g.layout_block, g.k, n, block, y, x, g.oh, g.ow);
        v8 value = _mm256_add_ps(o[i][j], b);
        for (const epilogue_op& op : ops)
          value = op.kind == epilogue_op::add
                      ? _mm256_add_ps(value, _mm256_loadu_ps(residual + at))
                      : _mm256_min_ps(_mm256_max_ps(value, _mm256_set1_ps(op.low)), _mm256_set1_ps(op.high));
        _mm256_storeu_ps(dst + at, value);
      }
    }
  }
}

}  // namespace

void transform_input(const geometry& g, const float* src, float* transformed, std::int64_t first, std::int64_t last) {
  if (g.m == 4)
    input_tiles<4>(g, src, transformed, first, last);
  else
    input_tiles<2>(g, src, transformed, first, last);
}

void transform_output(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                      const float* residual, float* dst, std::int64_t first, std::int64_t last) {
  if (g.m == 4)
    output_tiles<4>(g, products, bias, ops, residual, dst, first, last);
  else
    output_tiles<2>(g, products, bias, ops, residual, dst, first, last);
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

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
                sum += static_cast<double>(src[blocked(g.layout_block, g.c, n, c / 8, iy, ix, g.h, g.w) + c % 8]) * weights[(k * g.c + c) * 9 + a * 3 + b];
              }
          const std::size_t at = blocked(g.layout_block, g.k, n, k / 8, y, x, g.oh, g.ow) + static_cast<std::size_t>(k % 8);
          auto value = static_cast<float>(sum);
          for (const epilogue_op& op : ops) value = op.kind == epilogue_op::add ? value + residual[at] : std::min(std::max(value, op.low), op.high);
          dst[at] = value;
        }
}

}  // namespace onednn_delegate::winograd
