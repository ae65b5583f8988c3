// onednn's steps as compile holds them, and the two decisions made on them without LibTorch or a
// shape: which steps fuse into which (fusion.cpp) and where each value lives in a call's buffer
// (placement.cpp). Internal (not installed); the unit tests (tests/onednn_unit.cpp) call both.
#pragma once

#include "payload_records.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onednn_delegate {

/// The op of a step, as compile decodes step_record::op.
// Every step kind with its name in a payload (and in the debug query), in payload order, and the
// builder that plans it (builders.hpp, build_*.cpp): the enum, the names and the builders' table
// are all made from this one list, so they cannot disagree.
#define ONEDNN_STEP_KINDS(X)                                                          \
  X(convolution, "convolution", convolution)                                          \
  X(relu, "relu", eltwise)                                                            \
  X(add, "add", add)                                                                  \
  X(max_pool2d, "max_pool2d", max_pool)                                               \
  X(global_avg_pool2d, "adaptive_avg_pool2d", global_avg_pool)                        \
  X(activation, "activation", eltwise)                                                \
  X(mul, "mul", mul)                                                                  \
  X(cat, "cat", cat)                                                                  \
  X(permute, "permute", permute)                                                      \
  X(layer_norm, "layer_norm", layer_norm)                                             \
  X(linear, "linear", linear)                                                         \
  X(scale, "scale", scale)                                                            \
  X(flatten, "flatten", flatten)                                                      \
  /* payload version 3 */                                                             \
  X(reshape, "reshape", reshape)                                                      \
  X(slice, "slice", slice)                                                            \
  X(contiguous, "contiguous", contiguous)                                             \
  X(matmul, "matmul", matmul)                                                         \
  X(softmax, "softmax", softmax)                                                      \
  X(scale_by, "scale_by", eltwise)                                                    \
  /* F.normalize(x, dim=-1); an older build refuses it ("unknown op 'normalize'") */  \
  X(normalize, "normalize", normalize)                                                \
  /* video models' poolings; an older build refuses them */                           \
  X(max_pool3d, "max_pool3d", max_pool)                                               \
  X(global_avg_pool3d, "adaptive_avg_pool3d", global_avg_pool)                        \
  /* transposed convolutions (a decoder's upsampling); an older build refuses them */ \
  X(deconvolution, "deconvolution", deconvolution)                                    \
  /* payload version 6: one layer of an LSTM or GRU */                                \
  X(recurrent, "recurrent", recurrent)                                                \
  /* payload version 5: amax, max over a dimension (a text CNN's max over time) */    \
  X(reduce, "reduce", reduce)                                                         \
  X(resample, "resample", resample)

#define ONEDNN_STEP_KIND_ENUMERATOR(kind, name, builder) kind,
enum class step_kind { ONEDNN_STEP_KINDS(ONEDNN_STEP_KIND_ENUMERATOR) };
#undef ONEDNN_STEP_KIND_ENUMERATOR

#define ONEDNN_STEP_KIND_NAME(kind, name, builder) std::string_view(name),
inline constexpr std::array step_names{ONEDNN_STEP_KINDS(ONEDNN_STEP_KIND_NAME)};
#undef ONEDNN_STEP_KIND_NAME

/// Its name in a payload (and in the debug query); step_kind_named: the reverse, nullopt when unknown.
std::string_view name_of(step_kind kind);
std::optional<step_kind> step_kind_named(std::string_view name);

/// What fusion.cpp decided for one step.
struct step_fusion {
  /// A convolution or an add: the relu step that alone reads what it makes, run with it in every
  /// form the planner falls back to (a post-op, or ATen's relu_ after ATen's conv2d).
  std::optional<std::size_t> relu;
  /// A convolution, a linear or a matmul: the steps after it it takes as post-ops while oneDNN
  /// accepts them (activations and scale_by; after a convolution, an add of a value made before
  /// it), in order. When oneDNN refuses them they run after it as steps of their own.
  std::vector<std::size_t> post_ops;
  /// A matmul: the scale_by step whose value it alone reads, as its first operand (a scaled
  /// query, Swin's `q * d ** -0.5`): it reads that step's input and scales its product instead,
  /// the factor its first post-op ((s q) k = s (q k)).
  std::optional<std::size_t> scaled_first;
  /// A mul: the convolution without groups that alone reads its product, as its input. Where it
  /// is 1x1 and the shapes allow (x of [1, C, H, W] times s of [1, C, 1, 1]: the planner's
  /// mul_into_weights), the product is not made and the convolution reads x with its weights
  /// scaled by s.
  std::optional<std::size_t> scales_weights_of;
  /// A cat: the latest cat after it whose parts begin with its parts (DenseNet's growing cats), the
  /// end of its chain, whose buffer the chain's cats view (the planner's cat_chain).
  std::optional<std::size_t> chain_end;
  /// Run as a part of another step (a folded relu, a post-op, a matmul's scaled operand): the
  /// planner skips it.
  bool absorbed = false;
};

/// A step as compile keeps it: its record, its kind, the sizes of its weight (convolution:
/// [O, I / groups, kh, kw]; linear: [O, I]; layer_norm: [C]; scale: the factor's) and its fusion.
struct compiled_step {
  step_record record;
  step_kind kind = step_kind::relu;
  std::vector<std::int64_t> weight_sizes;
  step_fusion fusion;
};

/// A compiled region's steps and what they read and return: what the planner plans.
struct region_steps {
  std::vector<compiled_step> steps;
  std::int64_t inputs = 0;  // value ids 0..inputs-1
  std::int64_t values = 0;
  std::vector<std::int64_t> outputs;
  std::string method;       // errors and the debug query name it
};

/// Decides every fusion of a region in one pass over its steps (`values` value ids, `outputs` the
/// ones it returns, never fused away): first each relu into the convolution or add before it,
/// then each convolution's, linear's and matmul's post-ops, then each matmul's scaled first
/// operand; last the candidates the planner completes with shapes (scales_weights_of,
/// chain_end). Deterministic: a function of the steps alone.
std::vector<step_fusion> decide_fusions(const std::vector<compiled_step>& steps, std::int64_t values,
                                        const std::vector<std::int64_t>& outputs);

/// The value a step leaves when it has run with its folded relu (the relu's output) or alone.
std::int64_t finished_value(const std::vector<compiled_step>& steps, std::size_t index);

/// A value to place in a call's buffer: its size, and the first and last call (indices into the
/// plan's calls) that touch it. Size 0: not in the buffer (an input, a constant, a view).
struct buffer_slot {
  std::size_t bytes = 0;
  std::size_t first_use = 0, last_use = 0;
};
/// Where each slot lives: its offset (0 for slots not in the buffer), and the bytes they take.
struct buffer_layout {
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
};
/// Every slot's size rounded up to this, and each offset a multiple of it (oneDNN's kernels read
/// 64-byte lines; at::empty's data is 64-byte aligned).
inline constexpr std::size_t buffer_alignment = 64;
/// Places the slots in one buffer: two share bytes only when their lives (first to last use) do
/// not overlap. Largest first, each at the lowest offset that fits.
buffer_layout lay_out_buffer(const std::vector<buffer_slot>& slots);

}  // namespace onednn_delegate
