// onednn's builders: one free function per step family (build_*.cpp), each planning one step on
// a plan_context (plan.hpp): it picks its primitive's layouts, applies fusion.cpp's decisions and
// falls back where oneDNN has only a reference kernel. `builders` is the table make_plan()
// dispatches through, made from the same list as the step enum and its names (steps.hpp); below
// it, the few helpers one family lends another. A family's other helpers are its file's own.
// Internal (not installed).
#pragma once

#include "plan.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace onednn_delegate {

/// Plans step `index` of the context's region (its kind's builder, from the table).
using step_planner = void (*)(plan_context& p, std::size_t index);

// build_convolution.cpp
void convolution(plan_context& p, std::size_t index);
void deconvolution(plan_context& p, std::size_t index);  // a transposed convolution (build_deconvolution.cpp)
// build_recurrent.cpp
void recurrent(plan_context& p, std::size_t index);      // a layer of an LSTM or GRU on oneDNN's RNN primitives
void reduce(plan_context& p, std::size_t index);         // amax over dimensions (build_pooling.cpp)
void resample(plan_context& p, std::size_t index);       // F.interpolate, nearest or bilinear (build_pooling.cpp)
// build_eltwise.cpp: activations (relu, activation, scale_by), add, mul, scale, normalize
void eltwise(plan_context& p, std::size_t index);
void add(plan_context& p, std::size_t index);
void mul(plan_context& p, std::size_t index);
void scale(plan_context& p, std::size_t index);
void normalize(plan_context& p, std::size_t index);  // F.normalize(x, dim=-1), on a kernel of ours
// build_pooling.cpp
void max_pool(plan_context& p, std::size_t index);
void global_avg_pool(plan_context& p, std::size_t index);
// build_linear.cpp
void linear(plan_context& p, std::size_t index);
// build_layout.cpp: layer_norm, cat, and the views (permute, flatten, reshape, slice, contiguous)
void layer_norm(plan_context& p, std::size_t index);
void cat(plan_context& p, std::size_t index);
void permute(plan_context& p, std::size_t index);
void flatten(plan_context& p, std::size_t index);
void reshape(plan_context& p, std::size_t index);
void slice(plan_context& p, std::size_t index);
void contiguous(plan_context& p, std::size_t index);
// build_attention.cpp
void matmul(plan_context& p, std::size_t index);
void softmax(plan_context& p, std::size_t index);

/// Per step kind, its builder: the third column of ONEDNN_STEP_KINDS.
#define ONEDNN_STEP_KIND_BUILDER(kind, name, builder) step_planner{&builder},
inline constexpr std::array builders{ONEDNN_STEP_KINDS(ONEDNN_STEP_KIND_BUILDER)};
#undef ONEDNN_STEP_KIND_BUILDER
static_assert(builders.size() == step_names.size(), "onednn: a step kind without a builder, or a builder without a step kind");

// What one family lends another.
// build_convolution.cpp
/// Convolution `index`'s output sizes, from its input's slot and its parameters.
dims conv_output(const plan_context& p, std::size_t index);
/// Whether value `id` may be written over by convolution `conv` whose fused add (step `adder`)
/// reads it last: in bytes of this plan's own (no input's, no constant's, no cat chain's) that no
/// value read after `adder` or returned shares, and not the convolution's own input's.
bool overwritable(const plan_context& p, std::int64_t id, std::size_t adder, std::size_t conv);
// build_winograd.cpp
/// Convolution `index` as Winograd (winograd_enabled(), winograd_eligible()); false (nothing
/// planned) for any other.
bool winograd_convolution(plan_context& p, std::size_t index);
// build_gemm.cpp: linears and 1x1 convolutions on our GEMM
/// A 1x1 convolution on our GEMM (own_pointwise_conv_enabled(), gemm_1x1_pays): its input and
/// result in nChw8c, each image's pixels the GEMM's rows, its folded ReLU, or one residual add
/// (and the ReLU after it), or a lone ReLU or clip applied as it writes, a SiLU of ours after it.
/// False (nothing planned) for any other convolution or post-ops.
bool pointwise_conv_on_own_gemm(plan_context& p, std::size_t index);
/// Where the store holds step `index`'s weights packed (an earlier plan's, for our GEMM), them
/// unpacked into `plain` ([O, I] row-major), for oneDNN's kernels and ATen's.
void unpack_stored_weights(plan_context& p, std::size_t index, const md& plain);
/// The activation our GEMM applies for linear `index`'s post-ops: none, a lone ReLU or erf GELU;
/// nullopt for any other (oneDNN's inner product runs the linear, its post-ops fused).
std::optional<gemm::activation> own_gemm_activation(const plan_context& p, std::size_t index);
/// Linear `index` on our GEMM (own_gemm_enabled()): its input `flat` ([rows, I], dense), its
/// result dense with sizes `shaped`, the bias the store's or, where not no_slot, `given_bias`,
/// `then` applied as it writes (the post-op's value is the result).
void linear_on_own_gemm(plan_context& p, std::size_t index, std::size_t flat, std::int64_t rows, const dims& shaped, std::size_t given_bias,
                        gemm::activation then);
// build_eltwise.cpp
/// A convolution's or linear's post-op run as a step of its own after it (its builder, but a SiLU
/// on our kernel in place: the post-op alone reads its input).
void post_op_alone(plan_context& p, std::size_t index);
/// The product plan_decisions::scaled_input left unmade for convolution `index`, made after all
/// (a binary) for a path that reads its input as it is (ATen's conv2d).
void make_scaled_input(plan_context& p, std::size_t index);

}  // namespace onednn_delegate
