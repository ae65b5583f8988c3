// pointwise_fusion's runtime: compile (payload -> program, checked) and execute (shapes, checks,
// one fused pass over at::parallel_for's threads).
#include "pointwise_backend.hpp"

#include <torch_delegate/preprocess.hpp>
#include <torch_delegate/profiling.hpp>
#include <torch_delegate/runtime_switches.hpp>

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
// The backend's runtime switches (docs/runtime-switches.md), declared when its code is loaded.
// kernel_dispatch.cpp, which has no LibTorch, reads POINTWISE_FUSION_ISA once.
constexpr std::array<torch_delegate::runtime_switch, 1> pointwise_switches{{
    {"POINTWISE_FUSION_ISA", "avx512", "the highest kernel set to pick: avx512, avx2 or baseline (the CPU's best at or below it)"},
}};
const bool pointwise_switches_declared = (torch_delegate::declare_runtime_switches("pointwise_fusion", pointwise_switches), true);
}  // namespace

// ---------------------------------------------------------------------------------------------
// compile: payload -> program, checked
// ---------------------------------------------------------------------------------------------

namespace {

/// Fills region.parts and region.part_of: kernel steps joined by the values one makes and another
/// reads (not by the inputs or constants they share) form a part. One part: parts stays empty.
void split_into_parts(compiled_region& region) {
  const std::vector<step>& steps = region.kernel_steps;
  const std::uint32_t slot_count = region.program.slot_count, input_count = region.program.input_count;
  disjoint_sets joined(steps.size());
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> maker(slot_count, none);
  for (std::size_t index = 0; index < steps.size(); ++index) {
    const step& s = steps[index];
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i)
      if (maker[operands[i]] != none) joined.join(index, maker[operands[i]]);
    maker[s.dst] = index;
  }
  std::vector<std::int32_t> part_of_root(steps.size(), -1);
  std::int32_t count = 0;
  std::vector<std::int32_t> part_of_step(steps.size());
  for (std::size_t index = 0; index < steps.size(); ++index) {
    std::int32_t& part = part_of_root[joined.find(index)];
    if (part < 0) part = count++;
    part_of_step[index] = part;
  }
  region.part_of.assign(slot_count, -1);
  for (std::size_t index = 0; index < steps.size(); ++index) region.part_of[steps[index].dst] = part_of_step[index];
  if (count <= 1) return;
  region.parts.resize(static_cast<std::size_t>(count));
  for (compiled_region::part& part : region.parts) part.last_use.assign(slot_count, 0);
  std::vector<std::vector<bool>> reads(region.parts.size(), std::vector<bool>(input_count, false));
  for (std::size_t index = 0; index < steps.size(); ++index) {
    const std::size_t p = static_cast<std::size_t>(part_of_step[index]);
    compiled_region::part& part = region.parts[p];
    const step& s = steps[index];
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i) {
      part.last_use[operands[i]] = static_cast<std::uint32_t>(part.steps.size());
      if (operands[i] < input_count && !reads[p][operands[i]]) {
        reads[p][operands[i]] = true;
        part.inputs.push_back(operands[i]);
      }
    }
    part.steps.push_back(s);
  }
}

}  // namespace

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
  split_into_parts(region);
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
  if (one_shape)
    for (const step& s : program.steps) shapes[s.dst] = at::DimVector(*common);
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
  }
  // The shape a pass over `steps` iterates: every step's, broadcast (a value of a smaller shape
  // is computed over the larger one and read back below).
  const auto iteration_shape_of = [&](const std::vector<step>& steps) {
    if (one_shape) return at::DimVector(*common);
    at::DimVector shape;
    for (const step& s : steps) {
      const at::DimVector& own = shapes[s.dst];
      if (own == shape) continue;
      try {
        shape = at::infer_size_dimvector(shape, own);
      } catch (const c10::Error&) {
        std::int64_t id = 0;  // the step that makes the value (its place in program.steps)
        while (program.steps[static_cast<std::size_t>(id)].dst != s.dst) ++id;
        fail_at(id + 1, program.step_kinds[static_cast<std::size_t>(id)] + " makes a value of shape " + shape_text(own) +
                            " in a chain of steps over shape " + shape_text(shape) +
                            ", and the two do not broadcast: one fused loop cannot run both (keep these nodes in "
                            "TorchScript: partition_options' keep_kinds or keep_submodules)");
      }
    }
    return shape;
  };

  c10::SmallVector<at::Tensor, 4> full(program.outputs.size());  // per output made here: its tensor
  // One pass: `steps` (the whole region, or a part of it) over `iteration_shape`.
  const auto run_pass = [&](const std::vector<step>& steps, const std::vector<std::uint32_t>& last_use,
                            const at::DimVector& iteration_shape, std::int32_t part) {
    const std::int64_t numel = c10::multiply_integers(iteration_shape);
    // Streamed inputs cover the whole iteration range, contiguously.
    c10::SmallVector<at::Tensor, 4> streamed(program.input_count);
    const auto stream = [&](std::uint32_t i) {
      if (!tensors[i].defined()) return;
      streamed[i] = tensors[i];
      if (!(streamed[i].sizes().equals(iteration_shape) && streamed[i].is_contiguous()))
        streamed[i] = streamed[i].expand(iteration_shape).contiguous();  // broadcast or strided: one copy
      slots[i].base = streamed[i].data_ptr();
    };
    if (part < 0) {
      for (std::uint32_t i = 0; i < program.input_count; ++i) stream(i);
    } else {
      for (const std::uint32_t i : region.parts[static_cast<std::size_t>(part)].inputs) stream(i);
    }

    // Outputs: a tensor of the iteration shape per returned step; written by the loop directly.
    for (std::size_t o = 0; o < program.outputs.size(); ++o) {
      const fused_program::output& output = program.outputs[o];
      slot_binding& slot = slots[output.slot];
      if (output.slot < program.input_count || slot.kind != slot_kind::scratch) continue;  // an input, or returned twice
      if (part >= 0 && region.part_of[output.slot] != part) continue;                      // another part's
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
    for (std::size_t index = 0; index < steps.size(); ++index) {
      const step& s = steps[index];
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
        if (!repeated && operand >= program.input_count && slots[operand].kind == slot_kind::scratch && last_use[operand] == index)
          free_buffers.push_back(slots[operand].scratch);  // after dst took its buffer: dst never aliases an operand
      }
    }

    if (numel > 0) {
      const kernel_call call{steps.data(), steps.size(), slots.data(), slots.size(), scratch_count};
      const kernel_function run = selected_kernels().run;
      // A chunk is worth a thread when it holds ~64 K operations (ATen's grain is 32 K elements per op).
      const std::int64_t grain = std::max<std::int64_t>(2048, 65536 / static_cast<std::int64_t>(steps.size() + 1));
      torch_delegate::parallel_for(0, numel, grain, [&](std::int64_t begin, std::int64_t end) {
        torch_delegate::instruction_timer timer(0);  // the region's work, per thread, in the profiler
        run(call, begin, end);
      });
    }
  };

  // One pass over every step, unless the region's parts (chains that pass each other nothing) have
  // shapes that differ: then a pass per part, each over its own shape (not a broadcast of all).
  bool per_part = false;
  c10::SmallVector<at::DimVector, 4> part_shapes;
  if (!one_shape && !region.parts.empty()) {
    for (const compiled_region::part& part : region.parts) {
      part_shapes.push_back(iteration_shape_of(part.steps));
      per_part = per_part || part_shapes.back() != part_shapes.front();
    }
  }
  if (per_part) {
    for (std::size_t p = 0; p < region.parts.size(); ++p)
      run_pass(region.parts[p].steps, region.parts[p].last_use, part_shapes[p], static_cast<std::int32_t>(p));
  } else {
    run_pass(region.kernel_steps, region.last_use, part_shapes.empty() ? iteration_shape_of(region.kernel_steps) : part_shapes.front(),
             -1);
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
      const std::size_t extra = static_cast<std::size_t>(result.dim()) - shape.size();
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
