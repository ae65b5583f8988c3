// Region extraction: a region of a method's graph as a method of its own (the delegate child's),
// with the parameters a backend owns taken in as constants.
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/report.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_delegate::detail {

/// The values a region's graph holds as constants instead of taking them as inputs.
using owned_inputs = std::unordered_map<const torch::jit::Value*, c10::IValue>;

/// The inputs of a region that its backend owns, taken out of `formed.inputs`: the parameters,
/// buffers and attributes the method reads from `self` (a prim::GetAttr chain) whose value is a
/// tensor (detached: a constant has no autograd history), None (a Conv2d's absent bias) or an
/// owned_attribute (a number, a string, a list of numbers, copied: lists are mutable). The region's
/// graph holds them as constants and its call does not pass them.
TORCH_DELEGATE_INTERNAL owned_inputs take_owned_inputs(const torch::jit::Module& module, region& formed);

/// A region as a method of the delegate child: (self, input_0, ...) -> output or a tuple of them.
/// `owned`: inputs the backend takes as constants (take_owned_inputs).
TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> region_graph(const region& formed, const c10::TypePtr& self_type,
                                                                       const owned_inputs& owned);

/// Adds `formed` to `child` as its method `name` (region_graph), typed as written: its schema
/// says Tensor, not the shapes recorded from example inputs (those are the region's input specs,
/// checked with their own error).
TORCH_DELEGATE_INTERNAL void add_region_method(torch::jit::Module& child, const std::string& name, const region& formed,
                                               const owned_inputs& owned);

/// A backend that owns its parameters takes the attribute reads its regions use as constants
/// (take_owned_inputs): those reads leave the method, so they are not "kept in TorchScript". Drops
/// from the report each attribute read whose value only `regions` read (a submodule read counts
/// when only such reads read it).
TORCH_DELEGATE_INTERNAL void drop_owned_reads(const std::vector<region>& regions, const std::shared_ptr<torch::jit::Graph>& graph,
                                              method_delegation& entry);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition_extract.ipp>
#endif
