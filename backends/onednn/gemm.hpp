// A linear's matrix product as a kernel of ours, for machines where oneDNN runs AVX2, not
// AVX-512: there oneDNN 2.6's inner product is its AVX2 sgemm, which packs the weights again in
// every call (docs/performance.md "Linears on a GEMM of ours"). The weights are packed once, when
// the plan is built, in panels of 16 outputs ([panels, features, 16], zero past the last output),
// and each call multiplies rows of the input by whole panels: 6 rows x 16 outputs a step, in 12
// AVX2 registers, the bias as the starting value. AVX2 and FMA, compiled for them whatever the
// build's flags: a plan uses it only where own_gemm_enabled() (plan.hpp). No LibTorch here:
// tests/onednn_kernels.cpp compares it with a product in double.
#pragma once

#include <cstdint>
#include <string>

namespace onednn_delegate::gemm {

/// The outputs of one panel.
constexpr std::int64_t panel_width = 16;

/// How many panels `outputs` outputs take.
constexpr std::int64_t panels(std::int64_t outputs) { return (outputs + panel_width - 1) / panel_width; }

/// Packs `weights` ([outputs, features], row-major: a linear's) into `packed`, which holds
/// panels(outputs) * features * 16 floats: packed[(p * features + k) * 16 + j] is
/// weights[p * 16 + j][k], 0 where p * 16 + j >= outputs.
void pack_weights(const float* weights, std::int64_t outputs, std::int64_t features, float* packed);

/// The inverse of pack_weights: `weights` ([outputs, features]) from `packed`.
void unpack_weights(const float* packed, std::int64_t outputs, std::int64_t features, float* weights);

/// An activation applied to each result as it is written (a linear's or a convolution's fused
/// one): a clip between bounds the call gives (ReLU6: 0 and 6).
enum class activation { none, relu, gelu_erf, clip };

/// Where element (r, k) of a matrix is: at r * row + (k / 8) * block + k % 8 floats from its
/// start. A row-major [rows, n] matrix is {n, 8}; one image of oneDNN's nChw8c layout, its H * W
/// pixels the rows and its channels the columns, is {8, H * W * 8} (a 1x1 convolution's input and
/// result).
struct strides {
  std::int64_t row;
  std::int64_t block;
};

/// out[r][o] = f(bias[o] + addend[r][o] + sum over k of in[r][k] * weights[o][k]), for the rows
/// [first_row, last_row) and the outputs of panels [first_panel, last_panel), `in`, `out` and
/// `addend` (nullptr: none; a residual, read in out's strides, and may be `out` itself) where the
/// strides say. In blocked strides (block != 8) `features` and `outputs` are whole blocks of 8.
/// `low` and `high` are the bounds of activation::clip. Otherwise as the row-major multiply below.
void multiply(const float* in, strides in_strides, std::int64_t features, const float* packed, const float* bias, const float* addend,
              float* out, strides out_strides, std::int64_t outputs, std::int64_t first_row, std::int64_t last_row,
              std::int64_t first_panel, std::int64_t last_panel, activation then = activation::none, std::int64_t slice = 0,
              float low = 0.f, float high = 0.f);

/// out[r][o] = f(bias[o] + sum over k of in[r][k] * weights[o][k]), f the activation `then`, for
/// the rows [first_row, last_row) and the outputs of panels [first_panel, last_panel). `in` is
/// [rows, features] and `out` [rows, outputs], row-major; `packed` as pack_weights made it;
/// `bias` [outputs]. Calls on disjoint rows or panels may run at the same time. GELU's erf is
/// Abramowitz and Stegun's 7.1.26 (avx2_math.hpp; the tests allow 3e-7 (1 + |x|)).
/// `slice` (0: all) is how many features each panel meets its rows with at a time, the results
/// of the features before read back from `out` (features_per_slice gives it).
void multiply(const float* in, std::int64_t features, const float* packed, const float* bias, float* out, std::int64_t outputs,
              std::int64_t first_row, std::int64_t last_row, std::int64_t first_panel, std::int64_t last_panel,
              activation then = activation::none, std::int64_t slice = 0);

/// How a product of `rows` rows and `panels` panels is cut into units of one panel and one block
/// of rows for `threads` threads: blocks of whole 6-row steps, at least 4 units a thread where
/// there are rows enough (each panel then meets its rows while it is in cache), and a number of
/// units the threads share evenly where a few more blocks make it so (13 panels on 2 threads:
/// 26 units, not 13, of which one thread would run 7).
struct work_split {
  std::int64_t block_rows;
  std::int64_t blocks;
};
work_split split_work(std::int64_t rows, std::int64_t panels, std::int64_t threads);

/// The features a panel meets its rows with at a time, for an L2 cache of `l2_bytes`: all of them
/// where the panel's share (64 bytes a feature) and 6 rows of input (24 bytes a feature) fit in
/// 3/5 of it, else the fewest equal slices that do, in multiples of 8 (a 3072-feature panel and
/// its rows take 264 KB: whole in a 1 MB or 512 KB L2, in 2 slices of 1536 in a 256 KB one).
std::int64_t features_per_slice(std::int64_t features, std::int64_t l2_bytes);
/// This CPU's L2 cache (a core's; sysconf), 256 KB where it does not say; TD_ONEDNN_GEMM_L2_BYTES
/// (whole bytes, at most 2^40; anything else is ignored) overrides it (the tests and
/// bench/linear_ab.py: a small cache's slices on any machine).
std::int64_t l2_cache_bytes();
/// The switch TD_ONEDNN_GEMM_L2_BYTES as given ("" when unset; switches.cpp).
std::string l2_bytes_switch();

}  // namespace onednn_delegate::gemm
