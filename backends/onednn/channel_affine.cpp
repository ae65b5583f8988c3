// The kernel of channel_affine.hpp.
#include "channel_affine.hpp"

#include <immintrin.h>

#include <algorithm>

namespace onednn_delegate::channel_affine {

namespace {

__attribute__((target("avx512f"))) void avx512(const float* in, std::int64_t in_stride, float* out, std::int64_t channels,
                                               const float* scale, const float* shift, bool relu, std::int64_t first,
                                               std::int64_t last) {
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t p = first; p < last; ++p) {
    const float* x = in + p * in_stride;
    float* y = out + p * channels;
    for (std::int64_t c = 0; c < channels; c += 16) {
      const auto mask = static_cast<__mmask16>(channels - c >= 16 ? 0xFFFF : (1u << (channels - c)) - 1);
      __m512 v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + c), _mm512_maskz_loadu_ps(mask, scale + c),
                                 _mm512_maskz_loadu_ps(mask, shift + c));
      if (relu) v = _mm512_mask_max_ps(v, 0xFFFF, v, zero);  // masked: GCC 12's unmasked form trips -Wmaybe-uninitialized
      _mm512_mask_storeu_ps(y + c, mask, v);
    }
  }
}

__attribute__((target("avx2,fma"))) void avx2(const float* in, std::int64_t in_stride, float* out, std::int64_t channels,
                                              const float* scale, const float* shift, bool relu, std::int64_t first,
                                              std::int64_t last) {
  const __m256 zero = _mm256_setzero_ps();
  for (std::int64_t p = first; p < last; ++p) {
    const float* x = in + p * in_stride;
    float* y = out + p * channels;
    std::int64_t c = 0;
    for (; c + 8 <= channels; c += 8) {
      __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(scale + c), _mm256_loadu_ps(shift + c));
      if (relu) v = _mm256_max_ps(v, zero);
      _mm256_storeu_ps(y + c, v);
    }
    for (; c < channels; ++c) y[c] = relu ? std::max(0.f, x[c] * scale[c] + shift[c]) : x[c] * scale[c] + shift[c];
  }
}

void plain(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale, const float* shift,
           bool relu, std::int64_t first, std::int64_t last) {
  for (std::int64_t p = first; p < last; ++p)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float v = in[p * in_stride + c] * scale[c] + shift[c];
      out[p * channels + c] = relu ? std::max(0.f, v) : v;
    }
}

enum class isa { avx512, avx2, any };

isa runs() {
  static const isa chosen = __builtin_cpu_supports("avx512f")                                     ? isa::avx512
                            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? isa::avx2
                                                                                                   : isa::any;
  return chosen;
}

}  // namespace

void apply(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale, const float* shift,
           bool relu, std::int64_t first, std::int64_t last) {
  switch (runs()) {
    case isa::avx512: return avx512(in, in_stride, out, channels, scale, shift, relu, first, last);
    case isa::avx2: return avx2(in, in_stride, out, channels, scale, shift, relu, first, last);
    case isa::any: return plain(in, in_stride, out, channels, scale, shift, relu, first, last);
  }
}

const char* kernel_name() {
  switch (runs()) {
    case isa::avx512: return "channel_affine:avx512";
    case isa::avx2: return "channel_affine:avx2";
    case isa::any: break;
  }
  return "channel_affine:any";
}

}  // namespace onednn_delegate::channel_affine
