// pointwise_fusion: which nodes it fuses (supports) and which regions are worth a call.
#include "pointwise_backend.hpp"
#include "graph_rules.hpp"

#include <torch_delegate/node_queries.hpp>
#include <torch_delegate/preprocess.hpp>
#include <torch_delegate/profiling.hpp>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace pointwise {

using detail::node_class;
using detail::class_of;
using detail::is_number_type;
using detail::is_tensor;
using detail::constant_number;
using detail::is_none_constant;
using detail::makes_bool;
using detail::readable;

bool PointwiseBackend::supports(const torch::jit::Node* node) {
  const node_class cls = class_of(node->kind());
  if (cls == node_class::none) return false;
  if (node->outputs().size() != 1 || !is_tensor(node->output())) return false;
  const auto inputs = node->inputs();
  // Arithmetic on a comparison's bool result has bool semantics in eager (True + True is True):
  // only comparisons and where's condition take them.
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (makes_bool(inputs[i]) && cls != node_class::comparison && !(cls == node_class::where && i == 0)) return false;
  switch (cls) {
    case node_class::unary:
      return inputs.size() == 1 && is_tensor(inputs[0]);
    case node_class::binary:  // mul, div (not with a rounding mode), minimum, maximum, clamp_min / _max
    case node_class::comparison:
      return inputs.size() == 2 && is_tensor(inputs[0]) && readable(inputs[1]);
    case node_class::scaled:  // add / sub / rsub (self, other, alpha): a constant alpha
      return inputs.size() == 3 && is_tensor(inputs[0]) && readable(inputs[1]) && constant_number(inputs[2]);
    case node_class::power:  // pow(Tensor, constant exponent)
      return inputs.size() == 2 && is_tensor(inputs[0]) && constant_number(inputs[1]);
    case node_class::clamp: {  // clamp(Tensor, min?, max?) with numbers or constant None, not both None
      if (inputs.size() != 3 || !is_tensor(inputs[0])) return false;
      const bool min_none = is_none_constant(inputs[1]), max_none = is_none_constant(inputs[2]);
      if (min_none && max_none) return false;
      return (min_none || is_number_type(inputs[1]->type())) && (max_none || is_number_type(inputs[2]->type()));
    }
    case node_class::gelu: {
      if (inputs.size() != 2 || !is_tensor(inputs[0])) return false;
      const std::optional<c10::IValue> approximate = torch::jit::toIValue(inputs[1]);
      return approximate && approximate->isString() &&
             (approximate->toStringRef() == "none" || approximate->toStringRef() == "tanh");
    }
    case node_class::where:
      return inputs.size() == 3 && std::all_of(inputs.begin(), inputs.end(), readable) &&
             (is_tensor(inputs[1]) || is_tensor(inputs[2]) || is_tensor(inputs[0]));
    case node_class::none:
      return false;
  }
  return false;
}

namespace {

/// With the sizes example inputs give: the two shapes of one chain (nodes joined by the values one
/// makes and another reads) that do not broadcast to one, which one loop cannot run (execute's
/// error); nothing when every chain's do, or when a size is not known.
std::optional<std::string> unbroadcastable_chain(std::span<const torch::jit::Node* const> region) {
  std::unordered_map<const torch::jit::Node*, std::size_t> index;
  std::vector<const torch::jit::Node*> nodes;
  for (const torch::jit::Node* node : region)
    if (node->kind() != c10::prim::Constant) {
      index.emplace(node, nodes.size());
      nodes.push_back(node);
    }
  disjoint_sets joined(nodes.size());
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (const torch::jit::Value* input : nodes[k]->inputs())
      if (const auto maker = index.find(input->node()); maker != index.end()) joined.join(k, maker->second);
  std::map<std::size_t, std::vector<std::int64_t>> shape_of_chain;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const std::optional<std::vector<std::int64_t>> sizes = torch_delegate::known_sizes(nodes[k]->output());
    if (!sizes) return std::nullopt;
    const auto [entry, first] = shape_of_chain.emplace(joined.find(k), *sizes);
    if (first || entry->second == *sizes) continue;
    try {
      entry->second = at::infer_size(entry->second, *sizes);
    } catch (const c10::Error&) {
      std::ostringstream why;
      why << "in one chain, " << nodes[k]->kind().toQualString() << " makes " << c10::IntArrayRef(*sizes) << " where others make "
          << c10::IntArrayRef(entry->second) << ": one loop cannot run shapes that do not broadcast to one";
      return why.str();
    }
  }
  return std::nullopt;
}

}  // namespace

torch_delegate::region_verdict PointwiseBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  std::size_t nodes = 0;
  const torch::jit::Node* only = nullptr;
  for (const torch::jit::Node* node : region)
    if (node->kind() != c10::prim::Constant) {
      ++nodes;
      only = node;
    }
  if (nodes == 0) return false;
  if (nodes > 1) {
    if (const std::optional<std::string> clash = unbroadcastable_chain(region)) return torch_delegate::region_verdict::refuse(*clash);
    return true;
  }
  using namespace c10;
  static const std::set<Symbol> worth_a_call{aten::gelu, aten::silu, aten::sigmoid, aten::tanh,
                                             aten::exp,  aten::log,  aten::pow};
  if (worth_a_call.count(only->kind()) > 0) return true;
  return torch_delegate::region_verdict::refuse("a lone " + std::string(only->kind().toQualString()) +
                                                ": eager runs it as fast as a call would");
}

}  // namespace pointwise
