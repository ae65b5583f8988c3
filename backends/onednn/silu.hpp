// SiLU (x * sigmoid(x)) as a kernel of ours: oneDNN 2.6's swish, as an eltwise primitive or as a
// convolution's post-op, is slower (docs/performance.md, "SiLU": EfficientNet-B0 applies it to ~6
// million values a call). A convolution whose post-ops end in a SiLU runs without it, then this
// kernel (build_convolution.cpp); a SiLU step of its own runs on it too (build_eltwise.cpp).
// AVX2 and FMA, compiled for them whatever the build's flags: a plan uses it only where
// own_silu_enabled() (plan.hpp). No LibTorch here: tests/onednn_kernels.cpp compares it with
// x / (1 + exp(-x)) in double.
#pragma once

#include <cstddef>

namespace onednn_delegate::silu {

/// out[i] = in[i] / (1 + exp(-in[i])) for i < count (relative error below 3e-7; 0 where the
/// exponential overflows, x where it underflows; in == out allowed).
void apply(const float* in, float* out, std::size_t count);

}  // namespace onednn_delegate::silu
