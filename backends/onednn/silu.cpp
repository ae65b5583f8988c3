// The SiLU kernel of silu.hpp.
#include "silu.hpp"

#include "avx2_math.hpp"

#include <immintrin.h>

#include <cmath>

namespace onednn_delegate::silu {

namespace {

// x / (1 + exp(-x)) for 8 values (exp8: avx2_math.hpp). The reciprocal of 1 + exp(-x) by the
// CPU's estimate and one Newton step (a tiny one is flushed to 0: x = -88 and below give -0).
__attribute__((target("avx2,fma"))) inline __m256 silu8(__m256 x) {
  const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
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
