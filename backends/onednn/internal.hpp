// onednn's internal declarations with LibTorch (not installed): the op table and emitters, the
// payload's decoding, what a call runs with, and the region's plan store (a bounded plan-per-shape
// cache). plan.hpp has the plan context, builders.hpp the builders (no LibTorch). Everything is in one unity TU (meson.build).
#pragma once

#include "onednn_backend.hpp"
#include "builders.hpp"

#include "toolkit/op_table.hpp"
#include "toolkit/plan_cache.hpp"

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace onednn_delegate {

// support.cpp: the op table (support rule and preprocess emitter per node kind) and the
// activations onednn runs as eltwise steps.
struct step_builder;  // preprocess.cpp
/// The table supports() asks and preprocess dispatches through (the two cannot disagree).
const torch_delegate::toolkit::op_table<step_builder>& onednn_ops();
/// The activation oneDNN runs as an eltwise step (relu is a step of its own), nullopt for another node.
std::optional<activation_parameters> activation_of(const torch::jit::Node* node);
/// The sizes a view or reshape makes, when they are known at lowering (a -1 resolved), or nothing.
std::optional<std::vector<std::int64_t>> reshape_sizes(const torch::jit::Node* node);
/// What chunk(x, chunks, dim) makes: the dimension (not negative) and each part's (start, length).
struct chunk_split {
  std::int64_t dim = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> parts;
};
/// A chunk's parts when its sizes are known and its only reader is the prim::ListUnpack of all of them.
std::optional<chunk_split> chunk_parts(const torch::jit::Node* node);
/// Whether a tensor of sizes `from` broadcasts to `to` without growing `to` (numpy's rule, from the
/// last dimension: each of `from`'s is `to`'s or 1; fewer dimensions count as leading ones).
bool broadcasts_to(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to);
/// F.normalize(x, dim=-1) as TorchScript runs it, `x / x.norm(2, [-1], True).clamp_min(eps).expand_as(x)`,
/// ending in the div `node`: eps when it is (x a float tensor of known sizes, each of norm,
/// clamp_min and expand_as read by the next alone), else nothing.
std::optional<double> normalize_eps(const torch::jit::Node* node);
/// The four nodes of the F.normalize pattern (normalize_eps) that `node` is one of: div,
/// expand_as, clamp_min, norm; nothing when it is in none.
std::optional<std::array<const torch::jit::Node*, 4>> normalize_nodes(const torch::jit::Node* node);
/// An amax's or max.dim's dimensions, not negative, sorted, distinct, within its input's known rank,
/// leaving at least one unless kept; nullopt where they are not that or not known at lowering.
std::optional<std::vector<std::int64_t>> reduced_dims(const torch::jit::Node* node);
void emit_reduce(step_builder& builder, const torch::jit::Node* node);
/// upsample_nearest2d or upsample_bilinear2d as a resampling's parameters: whole scales, or fixed
/// sizes; nullopt where it is not one onednn computes as PyTorch does.
std::optional<resampling_parameters> resampling_of(const torch::jit::Node* node);
void emit_resample(step_builder& builder, const torch::jit::Node* node);
/// lstm.input and gru.input (an nn.LSTM's or nn.GRU's call, as lowering spells it) that onednn
/// runs: float input of rank 3 and states of known sizes, weights known at lowering, eval mode,
/// the states it returns read by nothing.
bool supports_recurrent(const torch::jit::Node* node);
/// Whether `value` is `input.new_zeros(sizes)` (or a trace's float `torch.zeros(sizes)` on the
/// CPU): a recurrent layer's initial state when the call gives none (the layer's step then reads
/// no state).
bool is_zero_state(const torch::jit::Value* value);
void emit_recurrent(step_builder& builder, const torch::jit::Node* node);

// preprocess.cpp: the emitters the table names (each adds the node's step to the builder).
void emit_convolution(step_builder& builder, const torch::jit::Node* node);
void emit_deconvolution(step_builder& builder, const torch::jit::Node* node);
void emit_batch_norm(step_builder& builder, const torch::jit::Node* node);
void emit_relu(step_builder& builder, const torch::jit::Node* node);
void emit_add(step_builder& builder, const torch::jit::Node* node);
void emit_max_pool(step_builder& builder, const torch::jit::Node* node);
void emit_avg_pool(step_builder& builder, const torch::jit::Node* node);
void emit_adaptive_avg_pool(step_builder& builder, const torch::jit::Node* node);
void emit_activation(step_builder& builder, const torch::jit::Node* node);
void emit_permute(step_builder& builder, const torch::jit::Node* node);
void emit_layer_norm(step_builder& builder, const torch::jit::Node* node);
void emit_flatten(step_builder& builder, const torch::jit::Node* node);
void emit_dropout(step_builder& builder, const torch::jit::Node* node);
void emit_linear(step_builder& builder, const torch::jit::Node* node);
void emit_mul(step_builder& builder, const torch::jit::Node* node);
void emit_cat(step_builder& builder, const torch::jit::Node* node);
void emit_div(step_builder& builder, const torch::jit::Node* node);
void emit_reshape(step_builder& builder, const torch::jit::Node* node);
void emit_transpose(step_builder& builder, const torch::jit::Node* node);
void emit_contiguous(step_builder& builder, const torch::jit::Node* node);
void emit_unpack(step_builder& builder, const torch::jit::Node* node);
void emit_select(step_builder& builder, const torch::jit::Node* node);
void emit_matmul(step_builder& builder, const torch::jit::Node* node);
void emit_softmax(step_builder& builder, const torch::jit::Node* node);
void emit_mean(step_builder& builder, const torch::jit::Node* node);
void emit_nothing(step_builder& builder, const torch::jit::Node* node);

/// The payload checked and decoded (runtime.cpp): the steps with their kinds and fusions.
std::vector<compiled_step> decode_steps(const region_payload& payload, std::string_view method);
/// A version 1 payload (positional ints) as version 6's records (payload.cpp).
region_payload upgrade_format1(const c10::IValue& value);
/// A version 2 payload (typed steps without version 3's fields) as version 6 (payload.cpp).
region_payload upgrade_format2(const c10::IValue& value);
/// A version 3 payload (without size programs) as version 6 (payload.cpp).
region_payload upgrade_format3(const c10::IValue& value);
/// A version 4 payload (without reductions) as version 6 (payload.cpp).
region_payload upgrade_format4(const c10::IValue& value);
/// A version 5 payload (without recurrent layers) as version 6 (payload.cpp).
region_payload upgrade_format5(const c10::IValue& value);
/// Whether `value` is a version 1 (version 3, 4, 5) payload's tuple.
bool is_format1(const c10::IValue& value);
bool is_format3(const c10::IValue& value);
bool is_format4(const c10::IValue& value);
bool is_format5(const c10::IValue& value);

/// What one call of a plan runs with: the buffer its activations and scratchpad live in, and each
/// primitive's arguments bound to it (made once, reused by later calls; inputs rebound per call).
struct call_context {
  at::Tensor buffer;
  std::vector<dnnl::memory> memory;  // per slot
  std::vector<std::unordered_map<int, dnnl::memory>> arguments;  // per call
  call_context(const execution_plan& plan, std::size_t inputs);
};

/// A plan in the cache, with the call contexts no call is using (a call takes one, or makes one,
/// and gives it back).
struct runnable_plan {
  std::shared_ptr<const execution_plan> plan;
  mutable std::mutex idle_mutex;
  mutable std::vector<std::unique_ptr<call_context>> idle;
};

/// What a plan is made for: the input shapes, and the thread count (OpenMP's, the calling thread's:
/// torch.set_num_threads) it was made under. oneDNN fixes a primitive's split among threads when it
/// makes it, so a plan made for one thread runs on one thread whatever the count later: a module
/// loaded (or first called) at one thread and then given two would otherwise keep one.
struct plan_key {
  torch_delegate::toolkit::input_shapes shapes;
  int threads = 1;
  bool operator==(const plan_key&) const = default;
};

/// The thread count plans are made and looked up for: omp_get_max_threads() of the calling thread.
int planning_threads();

/// A region's plans, the last OnednnBackend::max_plans (input shapes, thread count) pairs (least
/// recently used out), and the weights new plans reorder from (the dense tensors until the first
/// plan is made). Planning runs under the cache's lock.
struct plan_store {
  torch_delegate::toolkit::plan_cache<runnable_plan, plan_key> plans{OnednnBackend::max_plans};
  weight_store weights;
  std::vector<at::Tensor> dense;  // what the first plan reads, dropped once it is made
  /// A recurrent layer's weights in oneDNN's order (weight_store::weights and ::iteration view
  /// them): every plan reorders from them, as oneDNN's layout for them may depend on the shapes.
  std::vector<at::Tensor> recurrent;
};

}  // namespace onednn_delegate
