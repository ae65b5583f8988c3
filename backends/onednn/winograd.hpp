// Winograd convolution, F(m x m, 3 x 3) with m = 4 or 2: a 3x3, stride-1 convolution as three calls
// of a plan — the input's tiles transformed (a kernel of ours), one batched matrix product per
// tile position (a oneDNN matmul primitive), the products transformed back with the bias, a
// residual add and activations fused (a kernel of ours). For F(4x4, 3x3) the products do 36
// multiplies per 16 outputs where a direct convolution does 144: 4x fewer (F(2x2, 3x3): 2.25x).
// The transforms are Lavin and Gray's ("Fast Algorithms for Convolutional Neural Networks", 2015),
// written out here. Activations are oneDNN's nChw8c or nChw16c (8 channels a vector, 16 on AVX-512),
// or nhwc (a channels-last region's: DenseNet's, whose per-channel batch norms run there); no LibTorch
// here: the unit tests (tests/onednn_kernels.cpp) check these kernels against a direct convolution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onednn_delegate::winograd {

/// A convolution's sizes as the Winograd kernels see them (batch n, channels in c and out k, both
/// multiples of layout_block; input h x w; output oh x ow; zero padding top and left; output tile
/// m; activations in nChw8c, or nChw16c when layout_block is 16, or in nhwc when channels_last,
/// where layout_block is only the vector: 16 runs the AVX-512 kernels). A 3-d convolution of a
/// 1x3x3 kernel is a 2-d one on each frame: n then counts clips x frames, `frames` the frames of a
/// clip, in nCdhw16c / nCdhw8c (a channel block's frames one after another) or ndhwc.
struct geometry {
  int m = 4;
  std::int64_t n = 1, c = 8, k = 8, h = 0, w = 0, oh = 0, ow = 0, pad_top = 1, pad_left = 1, layout_block = 8;
  std::int64_t frames = 1;
  bool channels_last = false;
  int alpha() const { return m + 2; }
  std::int64_t tiles_h() const { return (oh + m - 1) / m; }
  std::int64_t tiles_w() const { return (ow + m - 1) / m; }
  /// Tiles over the batch: the rows of each tile position's matrix product.
  std::int64_t tiles() const { return n * tiles_h() * tiles_w(); }
  /// alpha^2 matrices of tiles x c (the transformed input) and of tiles x k (the products).
  std::size_t input_floats() const { return static_cast<std::size_t>(alpha() * alpha() * tiles() * c); }
  std::size_t product_floats() const { return static_cast<std::size_t>(alpha() * alpha() * tiles() * k); }
};

/// Whether this CPU runs the kernels (AVX2 and FMA).
bool cpu_supported();

/// Whether it also runs their AVX-512 variant (16 lanes: nChw16c's blocks whole), which the
/// transforms take for layout_block 16.
bool avx512_supported();

/// [k, c, 3, 3] row-major weights -> alpha^2 matrices of c x k (row-major), G g G^T per pair.
void transform_weights(const geometry& g, const float* weights, float* transformed);

/// Input tiles [first, last) of the flat range tiles() x c/8 (tile-major): src in the geometry's layout ->
/// transformed, alpha^2 matrices of tiles() x c.
void transform_input(const geometry& g, const float* src, float* transformed, std::int64_t first, std::int64_t last);

/// What the output transform applies to each value after the bias, in order: clip to
/// [low, high] (a ReLU: 0, +inf), or add the residual (the destination's layout and shape).
struct epilogue_op {
  enum kind_t { clip, add } kind = clip;
  float low = 0.f, high = 0.f;
};

/// Output tiles [first, last) of the flat range tiles() x k/8: the products (alpha^2 matrices of
/// tiles() x k) -> dst in the geometry's layout, bias added, then `ops` (`residual` for an add).
void transform_output(const geometry& g, const float* products, const float* bias, const std::vector<epilogue_op>& ops,
                      const float* residual, float* dst, std::int64_t first, std::int64_t last);

/// A direct convolution on the same layouts (the geometry's in and out, [k, c, 3, 3] weights), the
/// reference the unit tests compare with.
void reference_convolution(const geometry& g, const float* src, const float* weights, const float* bias,
                           const std::vector<epilogue_op>& ops, const float* residual, float* dst);

}  // namespace onednn_delegate::winograd
