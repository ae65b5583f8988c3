// The region pass of partial lowering: Graph -> regions (and the report of every node that stays
// in TorchScript, with its reason). A pure pass: it reads a canonical graph (canonical_graph.hpp)
// and changes nothing; extraction and the rewrite are partition_extract.hpp's and
// partition_rewrite.hpp's. Tested on graphs alone (tests/test_partition_regions.cpp, "region pass").
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/report.hpp>

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// One region: a run of nodes of one block (constants aside) in program order. The nodes between
/// them that stay in TorchScript have no effects and none of the run's later nodes uses what they
/// make, so the region, called where its first node was, is acyclic with respect to the nodes
/// left outside: any path between two of its nodes stays inside it.
struct region {
  std::vector<torch::jit::Node*> nodes;
  // Attribute reads among the nodes, and kept nodes computed from attributes and constants
  // alone (a parameter's clamp and exp): moved before the region's call.
  std::vector<torch::jit::Node*> hoisted;
  std::vector<torch::jit::Value*> inputs;   // made outside, constants excepted, in order of first use
  std::vector<torch::jit::Value*> outputs;  // made inside, used outside
  int depth = 0;
  /// Channels-last backends: the uses of its outputs, by TorchScript nodes that run faster on
  /// NCHW (a convolution left to ATen), that get a conversion to contiguous (place_conversions).
  std::vector<torch::jit::Use> to_contiguous;
};

/// The regions of `graph` (a method's canonical graph) that `backend` takes under `options`, in
/// program order; every node that stays in TorchScript is added to `report` with its reason.
/// Regions whose inputs and outputs no execute signature of the backend takes, or that its
/// accepts_region refuses, are dissolved into kept nodes. `taken`: nodes an earlier backend of a
/// priority list took (lowering to several backends); they end runs as a kept node does, and are
/// not reported. Each kept node's per_backend is this backend's reason alone. `kept_nodes`: if
/// given, gets the node of each entry added to `report.kept`, in the same order (lowering to
/// several backends pairs each backend's reasons for one node). `computed`: nodes shape folding
/// will compute at lowering (computed_at_lowering); those that make a tensor are kept with
/// kept_reason::computed_at_lowering.
TORCH_DELEGATE_DECL std::vector<region> form_regions(const backend_lowering& backend, const partition_options& options,
                                                     const std::shared_ptr<torch::jit::Graph>& graph,
                                                     const std::string& method, method_delegation& report,
                                                     const std::unordered_set<const torch::jit::Node*>* taken = nullptr,
                                                     std::vector<const torch::jit::Node*>* kept_nodes = nullptr,
                                                     const std::unordered_set<const torch::jit::Node*>* computed = nullptr);

/// Whether `value` is an attribute read (a prim::GetAttr) of a type a region can hold as a
/// constant: a number, a bool, a string, or a list of ints, floats or bools (ConvNeXt's
/// `Permute.dims`). A backend that owns its parameters takes these as it takes its weights.
TORCH_DELEGATE_INTERNAL bool owned_attribute(const torch::jit::Value* value);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/regions.ipp>
#endif
