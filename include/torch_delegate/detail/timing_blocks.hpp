// How clock_timing (tuning.hpp) times one path: in blocks of calls (the fastest of a few, a first
// call dropped where calls are short, fewer calls where they are long), and where a region is
// timed between stand-ins for its TorchScript neighbours instead. Pure helpers, no clock state.
#pragma once

#include <torch_delegate/detail/regions.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <string>
#include <unordered_set>

namespace torch_delegate::detail {

/// A block of calls of one path counts the fastest of its last timed_per_block calls: on a
/// shared machine another process delays a call by 2-4x when it takes a core from a thread the
/// others wait for, and never speeds one up (ResNet-50 lowered to onednn against xnnpack beside a
/// busy process, 45 against 61 ms: with 1 call a block, 7 of 30 rounds went the wrong way and the
/// sign test separated after 12 to 29 rounds; with the fastest of 3, after 8, its least:
/// bench/timing_blocks.py).
inline constexpr std::size_t timed_per_block = 3;
/// A block first makes one call it does not count (it pays for what the other path left behind:
/// threads still spinning, caches) where a call takes less than long_call_ms; a longer one
/// dwarfs that, and the fastest of 3 leaves out a first call it slowed. A region whose calls are
/// that long is timed in blocks even between TorchScript ops that compute (clock_timing).
inline constexpr double long_call_ms = 50.0;
inline bool drops_first_call(double call_ms) { return call_ms < long_call_ms; }

/// Whether a node computes on tensors (not a view, a size or an interpreter op): what leaves
/// ATen's OpenMP workers spinning, or waits for a backend's pool to sleep.
inline bool computes(const torch::jit::Node* node) {
  static const std::unordered_set<std::string> views{"aten::view", "aten::reshape", "aten::flatten", "aten::squeeze",
                                                     "aten::unsqueeze", "aten::transpose", "aten::permute", "aten::select",
                                                     "aten::slice", "aten::expand", "aten::t", "aten::detach",
                                                     "aten::size", "aten::dim", "aten::len", "aten::__getitem__"};
  if (node->kind().is_prim() || views.count(node->kind().toQualString())) return false;
  return std::any_of(node->outputs().begin(), node->outputs().end(),
                     [](const torch::jit::Value* value) { return value->type()->cast<c10::TensorType>() != nullptr; });
}

/// Whether a TorchScript node that computes makes `value`, through views (ConvNeXt-T's
/// classifier takes a permute of a layer_norm): a view runs no parallel work, its input's maker does.
inline bool made_by_computing(const torch::jit::Value* value) {
  for (int views = 0; views < 8; ++views) {
    const torch::jit::Node* maker = value->node();
    if (computes(maker)) return true;
    if (maker->kind().is_prim() || maker->inputs().empty() || !value->type()->cast<c10::TensorType>()) return false;
    value = maker->input(0);  // a view's tensor
  }
  return false;
}

/// Whether a TorchScript node that computes, outside `formed`, reads `value`, through views.
inline bool read_by_computing(const torch::jit::Value* value, const region& formed, int views = 0) {
  for (const torch::jit::Use& use : value->uses()) {
    if (std::find(formed.nodes.begin(), formed.nodes.end(), use.user) != formed.nodes.end()) continue;
    if (computes(use.user)) return true;
    if (views < 8 && !use.user->kind().is_prim() && use.offset == 0 && use.user->outputs().size() == 1 &&
        use.user->output()->type()->cast<c10::TensorType>() && read_by_computing(use.user->output(), formed, views + 1))
      return true;
  }
  return false;
}

/// Whether clock_timing times `formed` between stand-ins for its TorchScript neighbours, its
/// longer path taking `longest_call_ms` a call: where a TorchScript node that computes makes one
/// of its inputs or reads one of its outputs, directly or through views (then, in the method, it
/// runs right after or before ATen's parallel work), and its calls are shorter than long_call_ms.
/// Else in blocks of calls of one kind.
inline bool timed_between_neighbours(const region& formed, double longest_call_ms) {
  if (longest_call_ms >= long_call_ms) return false;
  for (const torch::jit::Value* input : formed.inputs)
    if (made_by_computing(input)) return true;
  for (const torch::jit::Value* output : formed.outputs)
    if (read_by_computing(output, formed)) return true;
  return false;
}

/// The wall time of `call()`, in ms: what every measurement of a partition is made of.
template <class F>
double elapsed_ms(F&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// A block makes fewer calls where calls are long: as many as fit in block_budget_ms, at least
/// one. A call that long is thousands of barriers, and a core lost for a time slice delays it
/// by a few percent, not 2-4x. Beside a busy process ATen's OpenMP ran ConvNeXt-T's body at
/// 2.4 s a call (60 ms on onednn): 3 calls a block made its one region's verdict cost 44 s, for
/// a gap of 40x.
inline constexpr double block_budget_ms = 1000.0;
/// The timed calls of each block of one comparison, from its longest call before the rounds:
/// the same for both paths (the fastest of 3 is lower than the fastest of 1, so the two paths'
/// blocks must take as many).
inline std::size_t calls_per_block(double longest_call_ms) {
  if (!(longest_call_ms > 0)) return timed_per_block;
  return static_cast<std::size_t>(std::min(std::ceil(block_budget_ms / longest_call_ms), double(timed_per_block)));
}

/// One block of calls of one path: a call dropped where `drop_first`, then the fastest of
/// `calls` calls (calls_per_block), in ms.
template <class F>
double fastest_in_block(F&& call, bool drop_first, std::size_t calls) {
  if (drop_first) call();
  double fastest = elapsed_ms(call);
  for (std::size_t k = 1; k < calls; ++k) fastest = std::min(fastest, elapsed_ms(call));
  return fastest;
}

}  // namespace torch_delegate::detail
