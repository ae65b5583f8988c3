// The SiLU kernel of silu.hpp.
#include "silu.hpp"

#include <immintrin.h>

#include <cmath>

namespace onednn_delegate::silu {

namespace {

// x / (1 + exp(-x)) for 8 values. exp(t), t = -x clamped to [-87, 88] (2^127 at most: no
// infinity), as 2^n exp(r): n = round(t log2 e), by adding 1.5 * 2^23 + 127 so that the sum's low
// bits hold n + 127 (the exponent field, once shifted); r = t - n ln 2 in two parts (Cody and
// Waite); exp(r) by Cephes's minimax polynomial of degree 7 on |r| <= ln 2 / 2. The reciprocal
// of 1 + exp(t) by the CPU's estimate and one Newton step (a tiny one is flushed to 0: x = -88 and
// below give -0).
__attribute__((target("avx2,fma"))) inline __m256 silu8(__m256 x) {
  const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f);
  const __m256 shifted = _mm256_fmadd_ps(t, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 n = _mm256_sub_ps(shifted, magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(shifted), 23)));
  const __m256 d = _mm256_add_ps(e, _mm256_set1_ps(1.0f));
  __m256 y = _mm256_rcp_ps(d);
  y = _mm256_mul_ps(y, _mm256_fnmadd_ps(d, y, _mm256_set1_ps(2.0f)));
  return _mm256_mul_ps(x, y);
}

}  // namespace

__attribute__((target("avx2,fma"))) void apply(const float* in, float* out, std::size_t count) {
  std::size_t i = 0;
  for (; i + 16 <= count; i += 16) {  // two vectors a turn: their chains overlap
    const __m256 a = _mm256_loadu_ps(in + i), b = _mm256_loadu_ps(in + i + 8);
    _mm256_storeu_ps(out + i, silu8(a));
    _mm256_storeu_ps(out + i + 8, silu8(b));
  }
  if (i + 8 <= count) {
    _mm256_storeu_ps(out + i, silu8(_mm256_loadu_ps(in + i)));
    i += 8;
  }
  if (i < count) {  // the last 1 to 7, through a vector of their own
    alignas(32) float tail[8] = {};
    for (std::size_t k = i; k < count; ++k) tail[k - i] = in[k];
    _mm256_store_ps(tail, silu8(_mm256_load_ps(tail)));
    for (std::size_t k = i; k < count; ++k) out[k] = tail[k - i];
  }
}

}  // namespace onednn_delegate::silu
