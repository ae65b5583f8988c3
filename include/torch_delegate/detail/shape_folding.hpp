// Shape folding: a partitioned method's TorchScript that computes only from the sizes of the
// tensors it is called with (Swin's padding amounts, window counts and shifted-window attention
// mask) computed once at lowering, for the shapes the example inputs gave, behind one check of the
// method's arguments; any other call runs the method as it was.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <memory>
#include <unordered_set>

namespace torch_delegate::detail {

/// The fewest nodes shape folding must save for a method to be specialized (each specialized
/// method is twice its size in the saved module).
inline constexpr std::size_t min_folded_nodes = 16;

/// The nodes of `canonical` (a method's canonical graph, typed by an example run) that shape
/// folding will compute at lowering, by the same rules (none where fewer than `min_nodes` fold):
/// partitioning keeps those that make a tensor out of regions (kept_reason::computed_at_lowering).
TORCH_DELEGATE_INTERNAL std::unordered_set<const torch::jit::Node*> computed_at_lowering(
    const std::shared_ptr<torch::jit::Graph>& canonical, std::size_t min_nodes);

TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> fold_shapes(const std::shared_ptr<torch::jit::Graph>& graph,
                                                                       const std::unordered_set<const torch::jit::Node*>& same_either_way,
                                                                       std::size_t min_nodes);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/shape_folding.ipp>
#endif
