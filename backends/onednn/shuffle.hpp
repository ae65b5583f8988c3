// ShuffleNet's channel shuffle as one copy: cat(a, b) along the channels, seen as [N, 2, C, H, W],
// transposed to [N, C, 2, H, W], made contiguous and seen as [N, 2C, H, W] again (torchvision's
// channel_shuffle with 2 groups), so channel j of the result is a's channel j / 2 when j is even
// and b's when it is odd. oneDNN would make it four copies (the cat's two reorders and its concat,
// the transposed copy) and a fifth where the next block's chunk splits 58 channels off a blocked
// layout; this kernel writes the result, or each of its two halves as a tensor of its own, in one
// pass, in the channel-blocked layout the convolutions around it use (build_layout.cpp).
// No LibTorch here: tests/onednn_kernels.cpp compares it with the definition.
#pragma once

#include <cstdint>

namespace onednn_delegate::shuffle {

/// The tensors' geometry: `a` and `b` are [batch, channels, H, W] with H * W = pixels, in the
/// channel-blocked layout of `block` (8: nChw8c; 16: nChw16c), its last block padded; the result
/// in that of `out_block` (0: `block`). nhwc is the blocked layout whose one block is all the
/// channels, each pixel a batch: {batch * H * W, channels, 1, channels, count}.
struct geometry {
  std::int64_t batch = 1, channels = 0, pixels = 0, block = 8, out_block = 0;
  std::int64_t result_block() const { return out_block ? out_block : block; }
};

/// Channels [first, first + count) of the shuffle of cat(a, b) (of 2 * channels), written to
/// `out`, a [batch, count, H, W] tensor in the layout of `result_block()` (its padding lanes set
/// to 0). Runs its output blocks `begin` to `end` (of batch * ceil(count / result_block()),
/// batch-major): callers split them between threads. first + count <= 2 * channels.
void interleave(const float* a, const float* b, const geometry& g, std::int64_t first, std::int64_t count, float* out,
                std::int64_t begin, std::int64_t end);

/// How many output blocks interleave() runs for `count` channels.
inline std::int64_t output_blocks(const geometry& g, std::int64_t count) {
  return g.batch * ((count + g.result_block() - 1) / g.result_block());
}

}  // namespace onednn_delegate::shuffle
