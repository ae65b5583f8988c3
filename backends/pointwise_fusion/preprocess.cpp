// pointwise_fusion's preprocess: a region's graph -> a fused program (the payload).
#include "pointwise_backend.hpp"
#include "graph_rules.hpp"

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
using detail::is_tensor;
using detail::constant_number;
using detail::is_none_constant;

// ---------------------------------------------------------------------------------------------
// preprocess: the region's graph -> a fused program
// ---------------------------------------------------------------------------------------------

torch_delegate::preprocess_result<std::string> PointwiseBackend::preprocess(const torch_delegate::method_to_lower& region) {
  // Python's F.silu / F.gelu / F.relu inline as `if inplace: ... else: ...` on a constant: fold
  // those (a region from partial lowering is folded already; a whole method is not).
  std::shared_ptr<torch::jit::Graph> folded = region.graph();  // the unit's own copy, shared
  torch::jit::ConstantPropagationImmutableTypes(folded);
  torch::jit::EliminateDeadCode(folded);
  const torch::jit::Graph& graph = *region.graph();
  fused_program program;
  program.input_count = program.slot_count = static_cast<std::uint32_t>(graph.inputs().size() - 1);  // `self` aside
  std::unordered_map<const torch::jit::Value*, std::uint32_t> slot_of;
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) slot_of[graph.inputs()[i]] = static_cast<std::uint32_t>(i - 1);
  std::set<std::uint32_t> bool_slots;
  torch_delegate::preprocess_result<std::string> result;
  std::vector<std::int64_t>& all_handles = result.instruction_handles[0];  // instruction 0: the whole region

  std::map<float, std::uint32_t> constant_slots;
  auto constant_slot = [&](float value) {
    if (auto found = constant_slots.find(value); found != constant_slots.end() && !std::isnan(value)) return found->second;
    program.constants.push_back({program.slot_count, value});
    return constant_slots[value] = program.slot_count++;
  };
  auto operand = [&](const torch::jit::Node* node, std::size_t index) {
    const torch::jit::Value* value = node->input(index);
    if (auto found = slot_of.find(value); found != slot_of.end()) return found->second;
    if (std::optional<double> number = constant_number(value)) return constant_slot(static_cast<float>(*number));
    region.reject(node, "Its input " + value->debugName() + " is not computed in this region.");
  };
  auto emit = [&](const torch::jit::Node* node, op code, std::vector<std::uint32_t> operands, float imm = 0) {
    step s{code, program.slot_count};
    s.imm = imm;
    std::uint32_t* targets[3] = {&s.a, &s.b, &s.c};
    for (std::size_t i = 0; i < operands.size(); ++i) *targets[i] = operands[i];
    program.steps.push_back(s);
    program.step_kinds.emplace_back(node->kind().toQualString());
    const std::int64_t handle = region.debug_handle(node);
    result.instruction_handles[static_cast<std::int64_t>(program.steps.size())] = {handle};
    if (all_handles.empty() || all_handles.back() != handle) all_handles.push_back(handle);
    return program.slot_count++;
  };

  std::vector<const torch::jit::Value*> returned(graph.outputs().begin(), graph.outputs().end());
  for (const torch::jit::Node* node : graph.nodes()) {
    const c10::Symbol kind = node->kind();
    if (kind == c10::prim::Constant) continue;  // numbers become const slots where they are used
    if (kind == c10::prim::TupleConstruct && graph.outputs().size() == 1 && node->output() == graph.outputs()[0]) {
      returned.assign(node->inputs().begin(), node->inputs().end());
      continue;
    }
    if (!supports(node))
      region.reject(node, "pointwise_fusion does not fuse this " + std::string(kind.toQualString()) +
                              " (see docs/pointwise-fusion.md for the ops and operand types it fuses).");
    const node_class cls = class_of(kind);
    std::uint32_t out = 0;
    switch (cls) {
      case node_class::unary: {
        static const std::map<c10::Symbol, op> unary_ops{
            {c10::aten::neg, op::neg},         {c10::aten::abs, op::abs},   {c10::aten::relu, op::relu},
            {c10::aten::sigmoid, op::sigmoid}, {c10::aten::tanh, op::tanh}, {c10::aten::exp, op::exp},
            {c10::aten::log, op::log},         {c10::aten::sqrt, op::sqrt}, {c10::aten::rsqrt, op::rsqrt},
            {c10::aten::reciprocal, op::reciprocal}, {c10::aten::silu, op::silu}};
        out = emit(node, unary_ops.at(kind), {operand(node, 0)});
        break;
      }
      case node_class::binary: {
        static const std::map<c10::Symbol, op> binary_ops{
            {c10::aten::mul, op::mul},         {c10::aten::div, op::div},
            {c10::aten::minimum, op::minimum}, {c10::aten::maximum, op::maximum},
            {c10::aten::clamp_min, op::maximum}, {c10::aten::clamp_max, op::minimum}};
        out = emit(node, binary_ops.at(kind), {operand(node, 0), operand(node, 1)});
        break;
      }
      case node_class::comparison: {
        static const std::map<c10::Symbol, op> comparison_ops{{c10::aten::lt, op::lt}, {c10::aten::le, op::le},
                                                              {c10::aten::gt, op::gt}, {c10::aten::ge, op::ge},
                                                              {c10::aten::eq, op::eq}, {c10::aten::ne, op::ne}};
        out = emit(node, comparison_ops.at(kind), {operand(node, 0), operand(node, 1)});
        bool_slots.insert(out);
        break;
      }
      case node_class::scaled: {  // add: a + alpha b; sub: a - alpha b; rsub: b - alpha a
        const float alpha = static_cast<float>(*constant_number(node->input(2)));
        std::uint32_t a = operand(node, 0), b = operand(node, 1);
        if (kind == c10::aten::rsub) std::swap(a, b);
        if (alpha == 1.0f)
          out = emit(node, kind == c10::aten::add ? op::add : op::sub, {a, b});
        else
          out = emit(node, op::add_scaled, {a, b}, kind == c10::aten::add ? alpha : -alpha);
        break;
      }
      case node_class::power: {  // the special exponents ATen's pow computes without exp and log
        const double exponent = *constant_number(node->input(1));
        const std::uint32_t a = operand(node, 0);
        if (exponent == 1.0) out = emit(node, op::copy, {a});
        else if (exponent == 2.0) out = emit(node, op::square, {a});
        else if (exponent == 3.0) out = emit(node, op::cube, {a});
        else if (exponent == 0.5) out = emit(node, op::sqrt, {a});
        else if (exponent == -0.5) out = emit(node, op::rsqrt, {a});
        else if (exponent == -1.0) out = emit(node, op::reciprocal, {a});
        else if (exponent == -2.0) out = emit(node, op::reciprocal, {emit(node, op::square, {a})});
        else out = emit(node, op::pow, {a}, static_cast<float>(exponent));
        break;
      }
      case node_class::clamp: {  // min(max(x, lo), hi), like ATen
        out = operand(node, 0);
        if (!is_none_constant(node->input(1))) out = emit(node, op::maximum, {out, operand(node, 1)});
        if (!is_none_constant(node->input(2))) out = emit(node, op::minimum, {out, operand(node, 2)});
        break;
      }
      case node_class::gelu: {
        const bool tanh = torch::jit::toIValue(node->input(1))->toStringRef() == "tanh";
        out = emit(node, tanh ? op::gelu_tanh : op::gelu_erf, {operand(node, 0)});
        break;
      }
      case node_class::where:
        out = emit(node, op::where, {operand(node, 0), operand(node, 1), operand(node, 2)});
        break;
      case node_class::none:
        break;
    }
    slot_of[node->output()] = out;
  }
  for (const torch::jit::Value* value : returned) {
    if (!is_tensor(value))
      region.reject(graph.return_node(), "pointwise_fusion returns tensors only; this region returns a " +
                                             value->type()->annotation_str() + ".");
    const auto found = slot_of.find(value);
    if (found == slot_of.end()) region.reject(graph.return_node(), "Its output " + value->debugName() + " is not computed in this region.");
    program.outputs.push_back({found->second, bool_slots.count(found->second) > 0});
  }
  if (program.steps.empty()) region.reject(graph.return_node(), "pointwise_fusion found nothing to fuse in " + region.name() + ".");
  result.payload = encode(program);
  return result;
}

}  // namespace pointwise
