// Conditions decided at lowering: control flow whose condition lowering knows (an optional
// argument given or None, an argument's nested-ness, device or requires_grad, whether two tensors
// are the same one, autocast's state, a parameter's requires_grad where the backends own the
// parameters) is specialized for what the
// example inputs and the process showed, behind one check at the method's entry; a call for which
// the check fails runs the method as it was. PyTorch's fast-path checks (nn.TransformerEncoderLayer,
// nn.MultiheadAttention) are what this takes out of the way of regions. docs/partitioning.md,
// "Conditions decided at lowering".
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/report.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace torch_delegate::detail {

/// One check the specialized method makes at its entry: argument `argument` (an index into the
/// graph's inputs, self at 0) is None or not (`property` prim::Uninitialized stands for "is None"),
/// or one of its properties (prim::is_nested, prim::requires_grad, prim::device, ...) has `value`;
/// or, for an `argument` of 0, a process state (aten::is_autocast_enabled, ...) has `value`; or,
/// with `property` aten::__is__, whether the argument is the same tensor as argument `other`.
struct condition_check {
  std::size_t argument = 0;
  c10::Symbol property;
  c10::IValue value;
  std::size_t other = 0;
};

/// What lowering decided of a method: the checks, what the report says of them, and the method
/// as it was before (the else branch of the check).
struct lowering_conditions {
  std::vector<condition_check> checks;
  std::vector<decided_condition> decided;
  std::shared_ptr<torch::jit::Graph> general;
  bool empty() const { return decided.empty(); }
};

/// One round: each node of `graph` (in any block) whose value lowering knows is replaced by a
/// constant, and its check and report entry are added to `conditions` (the first round keeps a
/// copy of the graph as it was in `conditions.general`). `examples`: the method's example inputs;
/// `owns_parameters`: the backends own the parameters, so a tensor that is not an argument
/// requires no gradient once no argument does. Returns how many nodes it decided.
TORCH_DELEGATE_INTERNAL std::size_t decide_known_conditions(const std::shared_ptr<torch::jit::Graph>& graph,
                                                            const std::vector<c10::IValue>& examples, bool owns_parameters,
                                                            lowering_conditions& conditions);

/// What decided conditions leave, simplified: a prim::If whose branches hold no node and return the
/// same values (`is_grad_enabled() and <False>`) is replaced by those values, and all() or any() of
/// a list of constant bools by its value. Returns how many nodes.
TORCH_DELEGATE_INTERNAL std::size_t remove_uniform_ifs(torch::jit::Block* block);

/// `method_graph` (the specialized method, rewritten) as `if <checks hold>: <it> else: <general>`.
TORCH_DELEGATE_INTERNAL std::shared_ptr<torch::jit::Graph> guard_conditions(const std::shared_ptr<torch::jit::Graph>& method_graph,
                                                                            const lowering_conditions& conditions);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/lowering_conditions.ipp>
#endif
