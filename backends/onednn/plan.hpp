// onednn's plans without LibTorch: the oneDNN vocabulary, a plan (its primitives, its slots and
// their places in a call's buffer), the weights plans reorder from, and the plan context the
// builders (builders.hpp, one per op family in build_*.cpp; those with an ATen fallback include
// LibTorch there) plan a region's steps with.
// Internal (not installed).
#pragma once

#include "gemm.hpp"
#include "plan_implementation.hpp"
#include "shuffle.hpp"
#include "steps.hpp"
#include "winograd.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace onednn_delegate {

using dims = dnnl::memory::dims;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
inline constexpr auto f32 = dnnl::memory::data_type::f32;
inline constexpr std::size_t no_slot = static_cast<std::size_t>(-1);

const dnnl::engine& cpu_engine();
/// The row-major (contiguous) layout of `sizes`: how tensors enter and leave a region.
md dense(const dims& sizes);
/// The layout `image` (one of a 4-d tensor's or weight's: nchw, nhwc, nChw8c, nChw16c, oihw,
/// goihw) for a tensor of `rank` dimensions: its 3-d counterpart for a 5-d tensor (ncdhw, ndhwc,
/// nCdhw8c, nCdhw16c, oidhw; goidhw for a grouped weight, of 6), its 1-d one for a 3-d tensor
/// (ncw, nwc, nCw8c, nCw16c, oiw; goiw, of 4), else `image` itself.
tag of_rank(tag image, std::size_t rank);
/// md(sizes, f32, of_rank(image, sizes.size())).
md in_layout(const dims& sizes, tag image);
/// A convolution's dense weights [O, I / groups, (kt,) kh, kw] as oneDNN reads them: oihw (oidhw,
/// oiw), or goihw (goidhw, goiw) over [groups, O / groups, ...] when grouped.
md plain_weights(const std::vector<std::int64_t>& weight, std::int64_t groups);
/// A transposed convolution's weights as PyTorch holds them, [I, O / groups, kh, kw], as oneDNN's
/// deconvolution reads them: iohw over [O, I, kh, kw], or giohw over [groups, O / groups, I / groups,
/// kh, kw] when grouped.
md deconvolution_weights(const std::vector<std::int64_t>& weight, std::int64_t groups);
/// Where our GEMM's weights are packed: [panels, I, 16] (gemm.hpp; a linear's and a 1x1
/// convolution's, build_gemm.cpp).
md packed_weights_desc(std::int64_t outputs, std::int64_t features);
/// A primitive's attributes: a user scratchpad (in the call's buffer) and `post_ops`.
dnnl::primitive_attr attributes(const dnnl::post_ops& post_ops = {});
/// oneDNN's eltwise operations for a relu or an activation step, in order (hardsigmoid is two).
std::vector<std::tuple<dnnl::algorithm, float, float>> eltwise_chain(const compiled_step& step);

/// Whether oneDNN's implementation name is a reference kernel (runtime.cpp; onednn_backend.hpp
/// declares it for users).
bool is_reference(std::string_view implementation);
/// Throws the planner's error, "onednn: region <method>: <why>" (runtime.cpp: a c10::Error).
[[noreturn]] void fail_planning(std::string_view method, const std::string& why);
/// `given` reordered into a new memory of layout `want`, now (at planning: weights; planner.cpp).
dnnl::memory reordered_now(dnnl::memory given, const md& want);

/// Whether the runtime switch `variable` (TD_ONEDNN_WINOGRAD, ...: the table in switches.cpp) is
/// set to "0"; its value, else its default. A name the table lacks is an error.
bool switched_off(const char* variable);
std::string switch_value(const char* variable);
/// Declares the table (switches.cpp) to torch-delegate, once per process.
void declare_runtime_switches();
/// Whether plans may run AVX2 kernels of ours (build_winograd.cpp): the CPU has AVX2 and FMA,
/// oneDNN is not capped below AVX2 (ONEDNN_MAX_CPU_ISA), and `switch_variable` is not "0" (null:
/// no switch asked).
bool own_avx2_kernels_allowed(const char* switch_variable);
/// Whether oneDNN runs AVX-512 kernels here (its effective ISA, after ONEDNN_MAX_CPU_ISA, is
/// avx512_core or above): its blocked layout is then nChw16c, and a vector holds 16 floats.
bool onednn_runs_avx512();
/// Whether a region's convolutions run in nhwc, oneDNN's layout for its AVX-512 depthwise
/// (brdgmm_dw) and 1x1 (brgconv_1x1) kernels, rather than in the layout each would pick alone:
/// where oneDNN runs AVX-512 and the region has a grouped convolution whose groups are not whole
/// blocks of 16 channels (depthwise ones, RegNet-Y-400MF's groups of 8), which oneDNN runs in nhwc
/// or nChw8c, not in the nChw16c of the dense convolutions around them: a reorder at each switch.
/// TD_ONEDNN_NHWC=0 turns it off; docs/onednn.md "Which kernels a plan runs".
bool channels_last_region(const region_steps& region);
/// Whether linears run as oneDNN's matmul rather than its inner product (build_linear.cpp): where
/// oneDNN runs AVX-512 (its brg matmul reaches 424 GFLOP/s on ViT-B/16's 197 x 768 x 3072, where
/// the inner product reaches 324), unless TD_ONEDNN_LINEAR_MATMUL is 0. Fixed for the process: the
/// weight store holds a linear's weights as [I, O] then (runtime.cpp), [O, I] otherwise.
bool linear_as_matmul();
/// Whether a convolution's residual add may be a sum post-op written over the residual, where no
/// step reads it after (build_convolution.cpp), rather than a binary post-op: unless
/// TD_ONEDNN_SUM is 0.
bool sum_post_op_enabled();
/// Whether a wide direct convolution of a channel-blocked region may run on oneDNN's brgconv in
/// nhwc, between a reorder in and one back to nChw16c (brgconv_between_reorders, build_convolution.cpp), rather
/// than on the older direct kernel in nChw16c: unless TD_ONEDNN_BRGCONV is 0.
bool brgconv_between_reorders_enabled();
/// Whether a wide convolution with a residual add may run on brgconv in nhwc over a copy of the
/// residual (brgconv_with_residual, build_convolution.cpp): unless TD_ONEDNN_BRGCONV_RESIDUAL is 0.
bool brgconv_with_residual_enabled();
/// Whether growing cats become views of one buffer (cat_chain, build_layout.cpp; TD_ONEDNN_CAT_CHAIN=0: oneDNN's concats).
bool cat_chain_enabled();
/// Whether a region's dense results are written by their primitives straight into the tensors the
/// call returns (no copy at the end). TD_ONEDNN_DIRECT_OUTPUTS=0 turns it off.
bool direct_outputs_enabled();
/// Whether plans run linears of 6 rows and more, with no post-op or a lone ReLU or erf GELU, on
/// our GEMM (gemm.hpp, build_gemm.cpp) rather than oneDNN's inner product: on AVX2 with FMA, oneDNN not capped below AVX2 and not running AVX-512 (there its
/// brgemm matmul is faster), and TD_ONEDNN_GEMM not 0.
bool own_gemm_enabled();
/// Whether plans run 1x1 convolutions (stride 1, no padding, no groups, whole blocks of 8
/// channels) on our GEMM in nChw8c (pointwise_conv_on_own_gemm, builders.hpp) rather than oneDNN's
/// jit_1x1 kernel: where own_gemm_enabled(), and TD_ONEDNN_GEMM_1X1 not 0.
bool own_pointwise_conv_enabled();
/// Whether a 1x1 convolution of `pixels` pixels an image, `features` channels in and `outputs` out
/// runs on our GEMM (where own_pointwise_conv_enabled()): where it was faster than oneDNN's AVX2
/// kernel (bench/linear_ab.py; docs/performance.md "1x1 convolutions on the GEMM"): maps of 6 to
/// 64 pixels with 96 channels or more in and out (0.71-0.88x its time), up to 14 x 14 with 256 or
/// more (0.92-0.97x). With fewer channels, or on larger maps, oneDNN's was as fast or faster
/// (1.00-2.0x ours at 24 to 64 channels, 1.02x at 512 channels on 28 x 28).
bool gemm_1x1_pays(std::int64_t pixels, std::int64_t features, std::int64_t outputs);
/// Below this many multiply-adds (or values read), a convolution, pooling, elementwise step or
/// linear on our GEMM runs on the calling thread: a squeeze-excitation's one-pixel convolutions
/// took 6-8 us on 2 threads and 2-4 us on one on an AVX-512 EPYC (oneDNN's OpenMP fork and join),
/// and its pooling and multiply likewise (docs/onednn.md).
inline constexpr std::int64_t one_thread_work = 256 * 1024;
/// Whether plans run LSTM and GRU layers as oneDNN's matmul over the whole sequence and our
/// recurrence kernel (recurrence.hpp) rather than oneDNN's RNN primitive: the CPU has AVX2 and FMA,
/// oneDNN is not capped below AVX2, and TD_ONEDNN_RECURRENCE is not 0.
bool own_recurrence_enabled();
/// Whether plans run SiLU on our kernel (silu.hpp, build_eltwise.cpp) rather than oneDNN's swish:
/// on AVX2 with FMA, oneDNN not capped below AVX2 and not running AVX-512 (there its swish post-op
/// is faster: EfficientNet-B0 6.2-6.4 ms against 6.6-6.7), and TD_ONEDNN_SILU not 0.
bool own_silu_enabled();
/// Whether `step` is a SiLU that runs on our kernel (own_silu_enabled()).
bool runs_own_silu(const compiled_step& step);

/// Whether plans run eligible convolutions as Winograd (build_winograd.cpp): on AVX2 with FMA,
/// oneDNN not capped below AVX2, and TD_ONEDNN_WINOGRAD not 0 (in nChw16c, and F(4x4, 3x3) only,
/// where oneDNN runs AVX-512).
bool winograd_enabled();
/// A convolution's Winograd geometry when it is one (3x3, stride 1, no dilation, one group,
/// padding up to 2, channels in and out multiples of 8 (16 on AVX-512) and at least 16, an output
/// at least 4x4): F(4x4, 3x3) where the output's smaller side is at least 12, else F(2x2, 3x3)
/// (not on AVX-512). A 3-d convolution of a 1x3x3 or kt x 3 x 3 kernel (kt odd, padded by kt / 2,
/// stride 1 in time): on each frame, a product per temporal tap.
struct winograd_choice {
  winograd::geometry g;
  /// A 3-d convolution's temporal taps (its kernel's kt; 1 for 2-d and 1x3x3): output frame t sums
  /// the products of input frame t + tap - kt / 2 with each tap's transformed weights.
  std::int64_t taps = 1;
};
std::optional<winograd_choice> winograd_eligible(const std::vector<std::int64_t>& weight, const convolution_parameters& c,
                                                 const dims& input, const dims& output);

/// One primitive call of a plan: the primitive and which slot each of its arguments reads.
struct plan_call {
  dnnl::primitive primitive;
  std::vector<std::pair<int, std::size_t>> arguments;  // (DNNL_ARG_*, slot)
  md scratchpad;                                       // empty when it needs none
  /// Instead of a primitive: a step run by ATen (only where oneDNN had nothing but a reference
  /// kernel for it), given the call's arguments.
  std::function<void(const std::unordered_map<int, dnnl::memory>&)> host;
  /// Made and run on the calling thread alone (small_step): a step so small that waking the other
  /// threads costs more than they save.
  bool one_thread = false;
};

/// OpenMP's thread count for this thread set to `n` while it lives: oneDNN reads it when it makes a
/// primitive (its kernels' split) and when it runs one (plan_call::one_thread).
class thread_count {
 public:
  explicit thread_count([[maybe_unused]] int n) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    omp_set_num_threads(n);
#endif
  }
  ~thread_count() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  thread_count(const thread_count&) = delete;
  thread_count& operator=(const thread_count&) = delete;

 private:
  int saved_ = 1;
};

/// What a region runs for one set of input shapes: its primitives in order, each slot's memory
/// descriptor and place in one per-call buffer, and the reordered weights (read-only once made:
/// calls may run concurrently, each with its own buffer).
struct execution_plan {
  std::vector<md> slots;
  std::vector<std::size_t> aliases;      // per slot: the slot whose bytes it views, or no_slot
  std::vector<std::size_t> alias_offsets;  // per slot: where in those bytes its view starts (a cat's part)
  std::vector<std::size_t> offsets;      // into the call's buffer (inputs and constants: unused)
  std::vector<buffer_slot> lives;        // per slot: what placement was given (bytes 0: not in the buffer)
  std::vector<dnnl::memory> constants;   // per slot: the weights and biases, else empty
  std::vector<plan_call> calls;
  std::size_t buffer_bytes = 0;          // activations, then the largest scratchpad
  std::size_t scratchpad_offset = 0;
  std::vector<std::size_t> outputs;      // slots read out, in order
  std::vector<dims> output_dims;
  std::vector<dnnl::primitive> output_reorders;  // slot -> a dense (row-major) tensor; empty where the output is direct
  // Per slot: the output whose returned tensor holds its bytes (a direct output and the views of
  // it; bound each call, as the inputs are), or no_slot: such a slot is not in the call's buffer.
  std::vector<std::size_t> in_output;
  std::vector<plan_implementation> implementations;  // per call, then per output reorder: the debug query
};

/// Per step with weights, where a new plan reads them from: the dense named data until the first
/// plan is made, then the last plan's reordered copies (oneDNN reorders from one layout to
/// another), so a region holds its weights once per plan.
struct weight_store {
  std::vector<dnnl::memory> weights, biases;  // per step (empty for a step without weights)
  std::vector<dnnl::memory> iteration;        // per step: a recurrent layer's weights on its state (else empty)
  /// Per step: a recurrent layer's weights as our recurrence kernel reads them (recurrence.hpp;
  /// empty for other steps): the state's weights packed in panels per direction, each gate's bias
  /// on the input ([directions * gates * hidden]), a GRU's new gate's bias on the state
  /// ([directions * hidden]).
  struct recurrence_weights {
    dnnl::memory packed, input_bias, new_gate_bias;
  };
  std::vector<recurrence_weights> recurrence;
  /// Until the first plan is made, the entries view the named data's tensors (released then);
  /// after, they are plans' own copies, which a later plan shares where it takes the same layout
  /// (plan_context::constant): the plans of one region hold a layout's weights once.
  bool views_named_data = true;
};

/// What the planner decides for one plan and later steps read (each decision's writer and readers
/// named): shape-dependent, so made while planning, unlike the structural ones of step_fusion.
struct plan_decisions {
  /// A convolution whose input is a squeeze-excitation's product x * s that it alone reads
  /// (step_fusion::scales_weights_of) and whose shapes allow it: the product is not made, the
  /// convolution reads x and, each call, weights scaled by s. Convolution step -> (mul step, s's
  /// slot). Written by mul_into_weights (build_eltwise.cpp); read by the convolution's builders
  /// (emit_conv, make_scaled_input for the paths that read the product as it is).
  std::unordered_map<std::size_t, std::pair<std::size_t, std::size_t>> scaled_input;
  /// A cat chain's parts (cat_chain, build_layout.cpp): value id -> (the chain's buffer slot, its
  /// first channel there).
  std::unordered_map<std::int64_t, std::pair<std::size_t, std::int64_t>> chain_parts;
  /// A cat chain's buffer slot -> how many of its first channels hold parts. A cat that would
  /// copy a part below that (a sibling of a cat with the same first parts) is no chain's, and no
  /// sum post-op writes over a chain's buffer (overwritable, build_convolution.cpp): its bytes are
  /// parts later cats read.
  std::unordered_map<std::size_t, std::int64_t> chain_filled;
};

/// What a builder (builders.hpp) plans with: the region's steps, a slot per value (value ids are
/// slots 0..values-1; reorders, views and constants add slots after them), the calls in order with
/// each slot's first and last use, the constants (weights reordered into the layout their
/// primitive picked), and the decisions later steps read. make_plan() runs each step's builder
/// (the table in builders.hpp) and places the slots in one per-call buffer (placement.cpp).
class plan_context {
 public:
  plan_context(const region_steps& region, weight_store& store, const std::vector<std::vector<std::int64_t>>& shapes);
  plan_context(const plan_context&) = delete;
  plan_context& operator=(const plan_context&) = delete;

  // The region.
  const region_steps& region() const { return region_; }
  const compiled_step& step(std::size_t index) const { return region_.steps[index]; }
  /// The value step `index` leaves when it has run with its folded relu (the relu's), or alone.
  std::int64_t finished(std::size_t index) const { return finished_value(region_.steps, index); }
  /// The steps that read value `id` (absorbed ones too), and the step that makes it (no_slot: a region input).
  const std::vector<std::size_t>& readers(std::int64_t id) const { return readers_.at(static_cast<std::size_t>(id)); }
  std::size_t producer(std::int64_t id) const { return producer_.at(static_cast<std::size_t>(id)); }
  bool is_output(std::int64_t id) const;
  /// The step being planned: the debug query and errors name it. naming_step: another one (a step
  /// a later one plans, as a mul made for a convolution) while it lives.
  std::size_t current_step() const { return step_; }
  class naming_step {
   public:
    naming_step(plan_context& context, std::size_t index) : context_(context), saved_(context.step_) { context.step_ = index; }
    ~naming_step() { context_.step_ = saved_; }
    naming_step(const naming_step&) = delete;
    naming_step& operator=(const naming_step&) = delete;

   private:
    plan_context& context_;
    std::size_t saved_;
  };
  /// Whether the region's convolutions try nhwc first (channels_last_region): decided once, before any step.
  bool channels_last() const { return channels_last_; }
  /// Marks a later step as planned by the current step's builder (a channel shuffle's): skipped.
  void mark_planned(std::size_t index) { planned_.at(index) = true; }

  // Sizes at this plan's shapes.
  /// Sizes of values not planned yet, given by the builder that asks (a cat's result before it is made).
  using known_dims = std::vector<std::pair<std::int64_t, dims>>;
  /// The sizes of value `id`: from `known`, else its slot's, else (a value whose step a post-op or
  /// a folded relu finished) its step's finished value's; nullopt for a value not planned yet.
  std::optional<dims> planned_dims(std::int64_t id, const known_dims& known = {}) const;
  /// Step `index`'s size program (step_record::size_program) run at this plan's shapes; nullopt
  /// for a step without one. A program that reads a size it cannot have is an error.
  std::optional<std::vector<std::int64_t>> program_sizes(std::size_t index, const known_dims& known = {}) const;
  /// Reshape `index`'s sizes at this plan's shapes (its program's, else the example's), a -1 resolved.
  dims reshape_sizes(std::size_t index, const known_dims& known = {}) const;

  // Slots.
  const md& slot(std::size_t index) const { return plan_.slots[index]; }
  /// Value `id`'s slot; value(): the same, an error when it is not made yet; slot_of(): no_slot then.
  std::size_t value(std::int64_t id) const;
  std::size_t slot_of(std::int64_t id) const { return slot_of_.at(static_cast<std::size_t>(id)); }
  /// Value `id` is a new slot of layout `desc`; bind(): it is the existing slot `slot` (a view).
  void define(std::int64_t id, const md& desc) { bind(id, add_slot(desc)); }
  void bind(std::int64_t id, std::size_t slot) { slot_of_.at(static_cast<std::size_t>(id)) = slot; }
  std::size_t add_slot(const md& desc, std::size_t alias_of = no_slot);
  /// A slot viewing the bytes of `of` (in place, at the same offset) as `desc`; view_at(): from
  /// `bytes` after where `of` starts (a layer's part of a recurrent state).
  std::size_t view(const md& desc, std::size_t of);
  std::size_t view_at(const md& desc, std::size_t of, std::size_t bytes);
  /// The slot whose bytes `index` views (no_slot: its own), where in them, and the slot that owns them.
  std::size_t alias_of(std::size_t index) const { return plan_.aliases[index]; }
  std::size_t alias_offset(std::size_t index) const { return plan_.alias_offsets[index]; }
  std::size_t root(std::size_t index) const { return plan_.aliases[index] == no_slot ? index : plan_.aliases[index]; }
  /// Whether any slot views `index`'s bytes.
  bool viewed(std::size_t index) const;
  /// Slot `part` becomes the bytes of `whole` from `offset` on (a cat made in place): `whole` lives
  /// from the first to the last use of either.
  void make_part(std::size_t part, std::size_t whole, std::size_t offset);
  /// A constant slot: `given` reordered into layout `want` now, or `given` itself where it is in
  /// that layout already and a plan's own (not the named data's: weight_store::views_named_data);
  /// constant_memory(): a slot's (empty for any but a constant).
  std::size_t constant(dnnl::memory given, const md& want);
  /// A constant slot holding `made` as it is (weights a kernel of ours packed).
  std::size_t constant_as_is(dnnl::memory made);
  const dnnl::memory& constant_memory(std::size_t index) const { return plan_.constants[index]; }
  /// `slot` in layout `want`: itself, or a reorder of it each call (made once per plan and layout).
  std::size_t as(std::size_t slot, const md& want);
  /// A new slot in layout `want`, a reorder of `slot` into it each call (as() without its cache:
  /// for a copy the plan writes over).
  std::size_t copy_as(std::size_t slot, const md& want);

  // Calls.
  /// Appends a call: `primitive` on the slots `arguments` name, or `host` (a kernel of ours, or ATen)
  /// given them, named `host_kind` and `host_op` in the debug query.
  void call(dnnl::primitive primitive, std::vector<std::pair<int, std::size_t>> arguments, const md& scratchpad,
            std::function<void(const std::unordered_map<int, dnnl::memory>&)> host = {}, const char* host_kind = nullptr,
            const char* host_op = nullptr);

  // Weights and decisions.
  /// Where the plan reads weights from (weight_store), and a step's weights (and bias, or no_slot)
  /// that later plans reorder from once this one is made.
  weight_store& store() { return store_; }
  const weight_store& store() const { return store_; }
  void keep_weights(std::size_t index, std::size_t weights, std::size_t bias) { own_weights_.emplace_back(index, weights, bias); }
  plan_decisions& decisions() { return decisions_; }
  const plan_decisions& decisions() const { return decisions_; }

  /// "onednn: region <method>: <why>" (a c10::Error), and a step's input shape as errors print it.
  [[noreturn]] void refuse(const std::string& why) const;
  std::string describe(const compiled_step& step) const;

  /// Plans step `index` with its kind's builder (the table in builders.hpp), its calls on one
  /// thread where it is small (small_step); make_plan() calls it for every step not absorbed or
  /// planned ahead, a builder for a post-op it runs alone.
  void plan_step(std::size_t index);
  /// Plans every step in order, then the outputs and the buffer.
  std::shared_ptr<const execution_plan> build();

 private:
  void record(const dnnl::primitive& primitive, std::string label);
  /// Whether a step's multiply-adds (a convolution) or values read (a pooling, an elementwise step)
  /// are few enough that its calls run on one thread (plan_call::one_thread).
  bool small_step(std::size_t index) const;
  void place();

  const region_steps& region_;
  weight_store& store_;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> own_weights_;  // (step, weight slot, bias slot)
  std::shared_ptr<execution_plan> made_ = std::make_shared<execution_plan>();
  execution_plan& plan_ = *made_;
  std::vector<std::size_t> slot_of_;  // value id -> slot
  std::vector<std::size_t> first_use_, last_use_;  // slot -> first and last call index touching it
  std::vector<std::pair<std::size_t, std::size_t>> reordered_;
  std::vector<std::vector<std::size_t>> readers_;  // value id -> the steps that read it (absorbed ones too)
  std::vector<std::size_t> producer_;              // value id -> the step that makes it (no_slot: a region input)
  std::vector<bool> planned_;  // per step: planned ahead by the builder of a step before it (a channel shuffle's)
  std::size_t scratchpad_bytes_ = 0;
  std::size_t step_ = 0;
  std::string shapes_;  // the input shapes, as the debug query prints them
  bool channels_last_ = false;
  plan_decisions decisions_;
};

/// A plan of `region` for one set of input shapes (`shapes`, one per region input), reading its
/// weights from `store` (and leaving its own there for the next plan).
std::shared_ptr<const execution_plan> make_plan(const region_steps& region, weight_store& store,
                                                const std::vector<std::vector<std::int64_t>>& shapes);

}  // namespace onednn_delegate
