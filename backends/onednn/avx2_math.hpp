// Vector functions the kernels of ours share (silu.cpp, gemm.cpp): AVX2 and FMA, compiled for
// them whatever the build's flags; only called where the CPU has them.
#pragma once

#include <immintrin.h>

namespace onednn_delegate::avx2 {

/// exp(t) for 8 values, t clamped to [-87, 88] (2^127 at most: no infinity; relative error below
/// 2e-7). As 2^n exp(r): n = round(t log2 e), by adding 1.5 * 2^23 + 127 so that the sum's low
/// bits hold n + 127 (the exponent field, once shifted); r = t - n ln 2 in two parts (Cody and
/// Waite); exp(r) by Cephes's minimax polynomial of degree 7 on |r| <= ln 2 / 2.
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 t) {
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
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
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(shifted), 23)));
}

/// GELU, x (1 + erf(x / sqrt 2)) / 2, for 8 values: erf by Abramowitz and Stegun's 7.1.26
/// (absolute error below 1.5e-7 in erf, so about 1e-7 |x| in the result, with float rounding
/// near 1.2e-7 |x|; the tests allow 3e-7 (1 + |x|)), with exp8.
__attribute__((target("avx2,fma"))) inline __m256 gelu_erf8(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
  const __m256 a = _mm256_andnot_ps(sign_bit, z);  // |z|
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(a, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 erf_abs = _mm256_fnmadd_ps(p, exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a))), _mm256_set1_ps(1.0f));
  const __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(sign_bit, z));  // erf(-z) = -erf(z)
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), erf));
}

}  // namespace onednn_delegate::avx2
