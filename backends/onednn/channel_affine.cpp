// The kernel of channel_affine.hpp.
#include "channel_affine.hpp"

#include <immintrin.h>

#include <algorithm>

namespace onednn_delegate::channel_affine {

namespace {

bool wide() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

__attribute__((target("avx512f"))) void avx512(const float* in, std::int64_t in_stride, float* out, std::int64_t channels,
                                               const float* scale, const float* shift, bool relu, std::int64_t first,
                                               std::int64_t last) {
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t p = first; p < last; ++p) {
    const float* x = in + p * in_stride;
    float* y = out + p * channels;
    for (std::int64_t c = 0; c < channels; c += 16) {
      const auto mask = static_cast<__mmask16>(channels - c >= 16 ? 0xFFFF : (1u << (channels - c)) - 1);
      const __m512 value = _mm512_maskz_loadu_ps(mask, x + c), factor = _mm512_maskz_loadu_ps(mask, scale + c);
      __m512 v = shift ? _mm512_fmadd_ps(value, factor, _mm512_maskz_loadu_ps(mask, shift + c)) : _mm512_mul_ps(value, factor);
      if (relu) v = _mm512_mask_max_ps(v, 0xFFFF, v, zero);  // masked: GCC 12's unmasked form trips -Wmaybe-uninitialized
      _mm512_mask_storeu_ps(y + c, mask, v);
    }
  }
}

}  // namespace

void apply_portable(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale,
                    const float* shift, bool relu, std::int64_t first, std::int64_t last) {
  for (std::int64_t p = first; p < last; ++p)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float product = in[p * in_stride + c] * scale[c];
      const float v = shift ? product + shift[c] : product;
      out[p * channels + c] = relu ? std::max(0.f, v) : v;
    }
}

void apply(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale, const float* shift,
           bool relu, std::int64_t first, std::int64_t last) {
  (wide() ? avx512 : apply_portable)(in, in_stride, out, channels, scale, shift, relu, first, last);
}

const char* kernel_name() { return wide() ? "channel_affine:avx512" : "channel_affine:cpp"; }

}  // namespace onednn_delegate::channel_affine
