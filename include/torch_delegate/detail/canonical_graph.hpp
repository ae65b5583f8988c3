// The canonical graph of a method: what partial lowering partitions and coverage reports on (one
// graph for both). A pure pass over a copy: the module is not changed.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>

namespace torch_delegate::detail {

/// The method's graph with every call inlined, non-tensor constants and constant lists folded,
/// dead code removed, and in-place operators made out-of-place where nothing can observe the
/// write and both forms compute the same values (docs/partial-lowering.md, "How regions are formed").
TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> canonical_graph(const torch::jit::Module& module,
                                                                       const std::string& method);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/canonical_graph.ipp>
#endif
