// A per-channel scale and shift (and a ReLU) over nhwc pixels whose channels are a part of a wider
// tensor's (or a scale alone over dense ones: a squeeze-excitation's multiply, build_eltwise.cpp):
// DenseNet's batch norm (a 1x1 depthwise convolution here) of a cat that is a view of the channels
// of a buffer its block's cats share (build_layout.cpp, cat_chain), which oneDNN 2.6's JIT kernels
// do not read (a strided source: its reference kernel). An AVX-512 variant, compiled
// for it whatever the build's flags (plans make such views only in channels-last regions, which
// are AVX-512's), and a plain loop elsewhere. No LibTorch here: tests/onednn_kernels.cpp compares
// both with a loop in double.
#pragma once

#include <cstdint>

namespace onednn_delegate::channel_affine {

/// For pixels [first, last): out[p * channels + c] = in[p * in_stride + c] * scale[c] + shift[c],
/// then max(0, .) when relu; in_stride >= channels (the wider tensor's channels). A null shift is
/// no shift (a squeeze-excitation's multiply); in == out is allowed when in_stride == channels.
void apply(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale, const float* shift,
           bool relu, std::int64_t first, std::int64_t last);

/// apply() as a plain loop: what it runs on a CPU without AVX-512.
void apply_portable(const float* in, std::int64_t in_stride, float* out, std::int64_t channels, const float* scale,
                    const float* shift, bool relu, std::int64_t first, std::int64_t last);

/// The kernel apply() runs on this CPU: "channel_affine:avx512" or "channel_affine:cpp" (the debug query).
const char* kernel_name();

}  // namespace onednn_delegate::channel_affine
