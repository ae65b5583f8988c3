// pointwise_fusion's host side (supports, preprocess: a region's graph -> a fused program) and
// runtime side (compile: payload -> program; execute: shapes, checks, one fused pass).
#include "pointwise_backend.hpp"

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

namespace {

// ---------------------------------------------------------------------------------------------
// What it fuses
// ---------------------------------------------------------------------------------------------

enum class node_class { unary, binary, scaled, power, clamp, gelu, comparison, where, none };

node_class class_of(c10::Symbol kind) {
  using namespace c10;
  static const std::map<Symbol, node_class> classes{
      {aten::neg, node_class::unary},       {aten::abs, node_class::unary},     {aten::relu, node_class::unary},
      {aten::sigmoid, node_class::unary},   {aten::tanh, node_class::unary},    {aten::exp, node_class::unary},
      {aten::log, node_class::unary},       {aten::sqrt, node_class::unary},    {aten::rsqrt, node_class::unary},
      {aten::reciprocal, node_class::unary}, {aten::silu, node_class::unary},
      {aten::mul, node_class::binary},      {aten::div, node_class::binary},
      {aten::minimum, node_class::binary},  {aten::maximum, node_class::binary},
      {aten::clamp_min, node_class::binary}, {aten::clamp_max, node_class::binary},
      {aten::add, node_class::scaled},      {aten::sub, node_class::scaled},    {aten::rsub, node_class::scaled},
      {aten::pow, node_class::power},       {aten::clamp, node_class::clamp},   {aten::gelu, node_class::gelu},
      {aten::lt, node_class::comparison},   {aten::le, node_class::comparison}, {aten::gt, node_class::comparison},
      {aten::ge, node_class::comparison},   {aten::eq, node_class::comparison}, {aten::ne, node_class::comparison},
      {aten::where, node_class::where},
  };
  const auto found = classes.find(kind);
  return found == classes.end() ? node_class::none : found->second;
}

bool is_number_type(const c10::TypePtr& type) {
  const c10::TypeKind kind = type->kind();
  return kind == c10::TypeKind::FloatType || kind == c10::TypeKind::IntType || kind == c10::TypeKind::BoolType ||
         kind == c10::TypeKind::NumberType;
}
bool is_tensor(const torch::jit::Value* value) { return value->type()->kind() == c10::TypeKind::TensorType; }

std::optional<double> constant_number(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  if (!constant) return std::nullopt;
  // A traced model holds its Python numbers as 0-dim tensor constants (`Double() = {0.5}`): with
  // a float tensor they compute as the number does (a 0-dim operand does not promote the dtype).
  if (constant->isTensor()) {
    const at::Tensor& tensor = constant->toTensor();
    if (tensor.dim() != 0 || tensor.is_complex() || !tensor.device().is_cpu()) return std::nullopt;
    return tensor.item<double>();
  }
  if (!(constant->isDouble() || constant->isInt() || constant->isBool())) return std::nullopt;
  return constant->isBool() ? double(constant->toBool()) : constant->toScalar().toDouble();
}
bool is_none_constant(const torch::jit::Value* value) {
  const std::optional<c10::IValue> constant = torch::jit::toIValue(value);
  return constant && constant->isNone();
}
bool makes_bool(const torch::jit::Value* value) { return class_of(value->node()->kind()) == node_class::comparison; }

/// An operand the fused loop can read: a tensor or a number (constant or not).
/// A tensor constant is readable only as the number it holds (0-dim, as tracing makes them).
bool readable(const torch::jit::Value* value) {
  if (is_tensor(value)) return value->node()->kind() != c10::prim::Constant || constant_number(value).has_value();
  return is_number_type(value->type());
}

}  // namespace

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

bool PointwiseBackend::accepts_region(std::span<const torch::jit::Node* const> region) {
  std::size_t nodes = 0;
  const torch::jit::Node* only = nullptr;
  for (const torch::jit::Node* node : region)
    if (node->kind() != c10::prim::Constant) {
      ++nodes;
      only = node;
    }
  if (nodes != 1) return nodes > 1;
  using namespace c10;
  static const std::set<Symbol> worth_a_call{aten::gelu, aten::silu, aten::sigmoid, aten::tanh,
                                             aten::exp,  aten::log,  aten::pow};
  return worth_a_call.count(only->kind()) > 0;
}

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

// ---------------------------------------------------------------------------------------------
// compile: payload -> program, checked
// ---------------------------------------------------------------------------------------------

compiled_region PointwiseBackend::compile(const std::string& payload) {
  compiled_region region;
  try {
    region.program = decode(payload);
  } catch (const std::invalid_argument& error) {
    throw c10::Error(error.what(), "");
  }
  fused_program& program = region.program;
  // A constant operand of add, sub or mul becomes the step's immediate: the loop then reads one
  // block less per element (the payload keeps the plain op; this is compile's choice).
  std::vector<std::optional<float>> constant_of(program.slot_count);
  for (const fused_program::constant& constant : program.constants) constant_of[constant.slot] = constant.value;
  for (step& s : program.steps) {
    const std::optional<float> a = constant_of[s.a], b = arity(s.code) > 1 ? constant_of[s.b] : std::nullopt;
    if (a.has_value() == b.has_value()) continue;  // none, or both (TorchScript folds those)
    if (s.code == op::add || (s.code == op::add_scaled && b)) {
      const float k = s.code == op::add ? 1.0f : s.imm;
      s = step{op::add_imm, s.dst, b ? s.a : s.b, 0, 0, b ? k * *b : *a};
    } else if (s.code == op::sub && b) {
      s = step{op::add_imm, s.dst, s.a, 0, 0, -*b};
    } else if (s.code == op::mul) {
      s = step{op::mul_imm, s.dst, b ? s.a : s.b, 0, 0, b ? *b : *a};
    }
  }
  region.kernel_steps = merge_affine_epilogues(program);
  region.last_use.assign(program.slot_count, 0);
  for (std::size_t index = 0; index < region.kernel_steps.size(); ++index) {
    const step& s = region.kernel_steps[index];
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i) region.last_use[operands[i]] = static_cast<std::uint32_t>(index);
  }
  region.first_reader.assign(program.input_count, 0);
  region.only_compared.assign(program.input_count, true);
  for (std::size_t index = 0; index < program.steps.size(); ++index) {
    const step& s = program.steps[index];
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i) {
      if (operands[i] >= program.input_count) continue;
      if (region.first_reader[operands[i]] == 0) region.first_reader[operands[i]] = static_cast<std::int64_t>(index + 1);
      const bool compares = (s.code >= op::lt && s.code <= op::ne) || (s.code == op::where && i == 0);
      if (!compares) region.only_compared[operands[i]] = false;
    }
  }
  for (const fused_program::output& output : program.outputs)
    if (output.slot >= program.input_count &&
        std::any_of(program.constants.begin(), program.constants.end(),
                    [&](const fused_program::constant& constant) { return constant.slot == output.slot; }))
      throw c10::Error("pointwise_fusion payload: output slot " + std::to_string(output.slot) +
                           " is a constant; a region returns tensors its steps compute or its inputs",
                       "");
  return region;
}

// ---------------------------------------------------------------------------------------------
// execute
// ---------------------------------------------------------------------------------------------

namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream text;
  text << sizes;
  return text.str();
}

/// An error at a step (its id is its 1-based index), or at the region when no step is known.
[[noreturn]] void fail_at(std::int64_t step_id, const std::string& message) {
  if (step_id <= 0) throw c10::Error("pointwise_fusion: " + message, "");
  torch_delegate::raise_at(step_id, "pointwise_fusion: " + message);
}

}  // namespace

std::string_view kernel_isa() { return selected_kernels().isa; }

std::vector<c10::IValue> PointwiseBackend::execute(compiled_region& region, torch_delegate::inputs inputs) {
  const fused_program& program = region.program;
  if (inputs.size() != program.input_count)
    fail_at(0, "the fused region takes " + std::to_string(program.input_count) + " inputs, got " + std::to_string(inputs.size()));

  // Small vectors: a call on a few elements costs about what its allocations cost.
  c10::SmallVector<slot_binding, 16> slots(program.slot_count);
  c10::SmallVector<at::DimVector, 16> shapes(program.slot_count);
  c10::SmallVector<at::Tensor, 4> tensors(program.input_count);  // the inputs streamed (made contiguous if need be)

  // Inputs: float tensors (or bool ones where only compared), numbers.
  for (std::uint32_t i = 0; i < program.input_count; ++i) {
    const c10::IValue& value = inputs[i];
    const std::int64_t reader = region.first_reader[i];
    const auto reader_kind = [&] { return reader > 0 ? program.step_kinds[reader - 1] : std::string("the region"); };
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      if (!tensor.defined()) fail_at(reader, reader_kind() + ": input " + std::to_string(i + 1) + " is an undefined tensor");
      if (tensor.device().type() != c10::DeviceType::CPU)
        fail_at(reader, reader_kind() + " runs on the CPU; input " + std::to_string(i + 1) + " is on " + tensor.device().str());
      const bool is_bool = tensor.scalar_type() == at::kBool;
      if (tensor.scalar_type() != at::kFloat && !(is_bool && region.only_compared[i]))
        fail_at(reader, reader_kind() + " expects float32 tensors" + std::string(region.only_compared[i] ? " (or bool)" : "") +
                            "; input " + std::to_string(i + 1) + " is a " + std::string(c10::toString(tensor.scalar_type())) +
                            " tensor of shape " + shape_text(tensor.sizes()));
      shapes[i] = at::DimVector(tensor.sizes());
      if (tensor.numel() == 1 && !is_bool) {
        slots[i].kind = slot_kind::scalar;
        slots[i].scalar = tensor.data_ptr<float>()[0];
      } else {
        slots[i].kind = is_bool ? slot_kind::bool_input : slot_kind::float_stream;
        tensors[i] = tensor;
      }
    } else if (value.isDouble() || value.isInt() || value.isBool()) {
      slots[i].kind = slot_kind::scalar;
      slots[i].scalar = value.isBool() ? float(value.toBool()) : static_cast<float>(value.toScalar().toDouble());
    } else {
      fail_at(reader, reader_kind() + ": input " + std::to_string(i + 1) + " is a " + value.type()->annotation_str() +
                          "; expected a Tensor or a number");
    }
  }
  for (const fused_program::constant& constant : program.constants) {
    slots[constant.slot].kind = slot_kind::scalar;
    slots[constant.slot].scalar = constant.value;
  }

  // Shapes: each step broadcasts its operands, like the op it implements. When every tensor
  // input has one shape (the common case), so does every step.
  std::optional<at::IntArrayRef> common;
  bool uniform = true;
  for (std::uint32_t i = 0; i < program.input_count && uniform; ++i) {
    if (!inputs[i].isTensor()) continue;
    const at::IntArrayRef sizes = inputs[i].toTensor().sizes();
    if (!common) common = sizes;
    else uniform = sizes.equals(*common);
  }
  const bool one_shape = uniform && common.has_value();
  at::DimVector iteration_shape;
  if (one_shape) {
    iteration_shape = at::DimVector(*common);
    for (const step& s : program.steps) shapes[s.dst] = iteration_shape;
  }
  for (std::size_t index = 0; index < program.steps.size() && !one_shape; ++index) {
    const step& s = program.steps[index];
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    at::DimVector shape = shapes[operands[0]];
    for (int i = 1; i < arity(s.code); ++i) {
      const at::DimVector& other = shapes[operands[i]];
      if (other == shape) continue;
      try {
        shape = at::infer_size_dimvector(shape, other);
      } catch (const c10::Error&) {
        fail_at(static_cast<std::int64_t>(index + 1), program.step_kinds[index] + ": shapes " + shape_text(shape) + " and " +
                                                          shape_text(other) + " are not broadcastable");
      }
    }
    shapes[s.dst] = shape;
    if (shape != iteration_shape) iteration_shape = at::infer_size_dimvector(iteration_shape, shape);
  }
  const std::int64_t numel = c10::multiply_integers(iteration_shape);

  // Streamed inputs cover the whole iteration range, contiguously.
  for (std::uint32_t i = 0; i < program.input_count; ++i) {
    if (!tensors[i].defined()) continue;
    if (!(tensors[i].sizes().equals(iteration_shape) && tensors[i].is_contiguous()))
      tensors[i] = tensors[i].expand(iteration_shape).contiguous();  // broadcast or strided: one copy
    slots[i].base = tensors[i].data_ptr();
  }

  // Outputs: a tensor of the iteration shape per returned step; written by the loop directly.
  c10::SmallVector<at::Tensor, 4> full(program.outputs.size());
  for (std::size_t o = 0; o < program.outputs.size(); ++o) {
    const fused_program::output& output = program.outputs[o];
    slot_binding& slot = slots[output.slot];
    if (output.slot < program.input_count || slot.kind != slot_kind::scratch) continue;  // an input, or returned twice
    full[o] = at::empty(iteration_shape, at::TensorOptions(output.is_bool ? at::kBool : at::kFloat));
    slot.kind = output.is_bool ? slot_kind::bool_output : slot_kind::float_stream;
    slot.base = full[o].data_ptr();
  }

  // Block buffers: one per scalar / bool slot, and one per live intermediate, reused when it dies.
  std::uint32_t scratch_count = 0;
  c10::SmallVector<std::uint32_t, 16> free_buffers;
  for (slot_binding& slot : slots)
    if (slot.kind == slot_kind::scalar || slot.kind == slot_kind::bool_input || slot.kind == slot_kind::bool_output)
      slot.scratch = scratch_count++;
  for (std::size_t index = 0; index < region.kernel_steps.size(); ++index) {
    const step& s = region.kernel_steps[index];
    if (slots[s.dst].kind == slot_kind::scratch) {
      if (free_buffers.empty()) {
        slots[s.dst].scratch = scratch_count++;
      } else {
        slots[s.dst].scratch = free_buffers.back();
        free_buffers.pop_back();
      }
    }
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i) {
      const std::uint32_t operand = operands[i];
      const bool repeated = (i > 0 && operand == operands[0]) || (i > 1 && operand == operands[1]);
      if (!repeated && operand >= program.input_count && slots[operand].kind == slot_kind::scratch &&
          region.last_use[operand] == index)
        free_buffers.push_back(slots[operand].scratch);  // after dst took its buffer: dst never aliases an operand
    }
  }

  if (numel > 0) {
    const kernel_call call{region.kernel_steps.data(), region.kernel_steps.size(), slots.data(), slots.size(), scratch_count};
    const kernel_function run = selected_kernels().run;
    // A chunk is worth a thread when it holds ~64 K operations (ATen's grain is 32 K elements per op).
    const std::int64_t grain = std::max<std::int64_t>(2048, 65536 / static_cast<std::int64_t>(region.kernel_steps.size() + 1));
    torch_delegate::parallel_for(0, numel, grain, [&](std::int64_t begin, std::int64_t end) {
      torch_delegate::instruction_timer timer(0);  // the region's work, per thread, in the profiler
      run(call, begin, end);
    });
  }

  // Results in the order of `outputs`; a value of a smaller shape than the iteration (it
  // broadcast into a larger one) is read back from the first element along the broadcast dims.
  std::vector<c10::IValue> results;
  results.reserve(program.outputs.size());
  for (std::size_t o = 0; o < program.outputs.size(); ++o) {
    const std::uint32_t slot = program.outputs[o].slot;
    if (slot < program.input_count) {
      results.emplace_back(inputs[slot]);
      continue;
    }
    std::size_t first = o;  // returned twice: the same tensor, as TorchScript returns it
    if (!full[o].defined())
      for (first = 0; program.outputs[first].slot != slot; ++first) {
      }
    at::Tensor result = full[first];
    const at::DimVector& shape = shapes[slot];
    if (!result.sizes().equals(shape)) {
      const std::size_t extra = iteration_shape.size() - shape.size();
      for (std::size_t d = 0; d < extra; ++d) result = result.select(0, 0);
      for (std::size_t d = 0; d < shape.size(); ++d)
        if (shape[d] == 1) result = result.narrow(static_cast<std::int64_t>(d), 0, 1);
      result = result.contiguous();
    }
    results.emplace_back(std::move(result));
  }
  return results;
}

namespace {
template <std::size_t N>
at::Tensor execute_one(compiled_region& region, std::array<c10::IValue, N> arguments) {
  std::vector<c10::IValue> results = PointwiseBackend::execute(region, torch_delegate::inputs(arguments));
  if (results.size() != 1 || !results[0].isTensor())
    fail_at(0, "the fused region returns " + std::to_string(results.size()) + " values, not one tensor");
  return std::move(results[0]).toTensor();
}
}  // namespace

at::Tensor PointwiseBackend::execute(compiled_region& region, const at::Tensor& a) {
  return execute_one<1>(region, {a});
}
at::Tensor PointwiseBackend::execute(compiled_region& region, const at::Tensor& a, const at::Tensor& b) {
  return execute_one<2>(region, {a, b});
}
at::Tensor PointwiseBackend::execute(compiled_region& region, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  return execute_one<3>(region, {a, b, c});
}

}  // namespace pointwise
