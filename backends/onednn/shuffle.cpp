// The channel shuffle of shuffle.hpp.
#include "shuffle.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>

namespace onednn_delegate::shuffle {

// An output block's lanes in groups of 8: lane 2i of a group is a's channel k0 + i and lane 2i + 1
// is b's, for i < 4. When those 4 channels are lanes of one block of a's (and so of b's: the two
// have one layout) and the 8 output lanes are all inside the result, a pixel is two 4-float
// loads and their interleaving (unpcklps, unpckhps); else each lane is read on its own (a group
// that starts at an odd k0 % 8 above 4, the padded last block).
void interleave(const float* a, const float* b, const geometry& g, std::int64_t first, std::int64_t count, float* out,
                std::int64_t begin, std::int64_t end) {
  const std::int64_t block = g.block, out_block = g.result_block(), pixels = g.pixels;
  const std::int64_t in_blocks = (g.channels + block - 1) / block, out_blocks = (count + out_block - 1) / out_block;
  const std::int64_t stride = pixels * block, out_stride = pixels * out_block;  // floats from one channel block to the next
  for (std::int64_t item = begin; item < end; ++item) {
    const std::int64_t n = item / out_blocks, ob = item % out_blocks;
    const float* const sources[2] = {a + n * in_blocks * stride, b + n * in_blocks * stride};
    float* const to = out + (n * out_blocks + ob) * out_stride;
    for (std::int64_t group = 0; group < out_block; group += 8) {
      const std::int64_t j0 = first + ob * out_block + group;  // the group's first channel of the shuffle
      const std::int64_t k0 = j0 / 2;
      const bool whole = j0 % 2 == 0 && k0 % block <= block - 4 && group + 8 <= out_block && (ob * out_block + group + 8) <= count;
      if (whole) {
        const std::int64_t at = (k0 / block) * stride + k0 % block;
        const float* pa = sources[0] + at;
        const float* pb = sources[1] + at;
        float* o = to + group;
        for (std::int64_t p = 0; p < pixels; ++p) {
          const __m128 x = _mm_loadu_ps(pa + p * block), y = _mm_loadu_ps(pb + p * block);
          _mm_storeu_ps(o + p * out_block, _mm_unpacklo_ps(x, y));
          _mm_storeu_ps(o + p * out_block + 4, _mm_unpackhi_ps(x, y));
        }
        continue;
      }
      const std::int64_t lanes = std::min<std::int64_t>(8, out_block - group);  // a block of nhwc's channels ends mid-group
      std::array<const float*, 8> from{};  // per lane: where its pixel 0 is read, or null (padding: 0)
      for (std::int64_t lane = 0; lane < lanes; ++lane) {
        const std::int64_t j = first + ob * out_block + group + lane;
        if (ob * out_block + group + lane >= count) continue;
        const std::int64_t k = j / 2;
        from[static_cast<std::size_t>(lane)] = sources[j % 2] + (k / block) * stride + k % block;
      }
      float* o = to + group;
      for (std::int64_t p = 0; p < pixels; ++p)
        for (std::int64_t lane = 0; lane < lanes; ++lane) {
          const float* source = from[static_cast<std::size_t>(lane)];
          o[p * out_block + lane] = source ? source[p * block] : 0.f;
        }
    }
  }
}

}  // namespace onednn_delegate::shuffle
