// The runtime of backend_with_compiler_demo: parse the instruction text, run it.
#pragma once

#include <ATen/ATen.h>
#include <torch_delegate/profiling.hpp>
#include <ATen/ExpandUtils.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace demo {

namespace detail {
[[noreturn]] inline void fail(const std::string& message) {
  throw c10::Error("backend_with_compiler_demo: " + message, "");
}

inline std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

/// double -> float, saturating to +-inf like IEEE arithmetic would (a plain cast of an
/// out-of-range double is undefined behaviour).
inline float to_float(double d) {
  if (std::isfinite(d) && std::abs(d) > std::numeric_limits<float>::max()) return d > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(d);
}

/// a + sign * alpha * b over whole float tensors (or numbers), broadcasting like ATen.
inline c10::IValue add_or_subtract(const instruction& op, const c10::IValue& a, const c10::IValue& b, double alpha) {
  const double factor = op.op == "sub" ? -alpha : alpha;
  if (!a.isTensor() && !b.isTensor()) return a.toScalar().toDouble() + factor * b.toScalar().toDouble();
  auto as_float_tensor = [&](const c10::IValue& value, const char* which) {
    if (!value.isTensor()) return at::full({}, to_float(value.toScalar().toDouble()), at::kFloat);
    const at::Tensor& tensor = value.toTensor();
    if (tensor.scalar_type() != at::kFloat)
      torch_delegate::raise_at(op.debug_handle, "backend_with_compiler_demo: aten::" + op.op + " expects float tensors, " +
                                                    which + " is " + std::string(c10::toString(tensor.scalar_type())));
    return tensor;
  };
  at::Tensor left = as_float_tensor(a, "the first operand");
  at::Tensor right = as_float_tensor(b, "the second operand");
  std::vector<int64_t> shape;
  try {
    shape = at::infer_size(left.sizes(), right.sizes());
  } catch (const c10::Error&) {
    torch_delegate::raise_at(op.debug_handle, "backend_with_compiler_demo: aten::" + op.op + ": shapes " +
                                                  shape_text(left.sizes()) + " and " + shape_text(right.sizes()) +
                                                  " are not broadcastable");
  }
  at::Tensor l = left.expand(shape).contiguous();
  at::Tensor r = right.expand(shape).contiguous();
  at::Tensor out = at::empty(shape, left.options());
  const float* lp = l.data_ptr<float>();
  const float* rp = r.data_ptr<float>();
  float* op_out = out.data_ptr<float>();
  const float f = to_float(factor);
  for (int64_t i = 0, n = out.numel(); i < n; ++i) op_out[i] = lp[i] + f * rp[i];
  return out;
}
}  // namespace detail

inline program DemoBackend::compile(const std::string& payload) {
  program parsed;
  std::istringstream lines(payload);
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    std::istringstream words(line);
    instruction op;
    if (!(words >> op.op)) continue;
    auto bad = [&](const std::string& why) {
      detail::fail("cannot parse payload line " + std::to_string(line_number) + " '" + line + "': " + why);
    };
    std::int64_t slot = 0;
    if (op.op == "inputs") {
      if (!(words >> parsed.input_count) || parsed.input_count < 0 || parsed.input_count > 1'000'000)
        bad("expected an input count from 0 to 1000000");
      parsed.slot_count = std::max(parsed.slot_count, parsed.input_count);
      continue;
    } else if (op.op == "const") {
      if (!(words >> slot >> op.value)) bad("expected 'const <slot> <number>'");
      op.slots = {slot};
    } else if (op.op == "add" || op.op == "sub") {
      std::int64_t a = 0, b = 0, alpha = 0;
      if (!(words >> slot >> a >> b >> alpha >> op.debug_handle)) bad("expected '<op> <out> <a> <b> <alpha> <handle>'");
      op.slots = {slot, a, b, alpha};
    } else if (op.op == "ret") {
      while (words >> slot) op.slots.push_back(slot);
      if (op.slots.empty()) bad("expected at least one slot");
    } else {
      bad("unknown instruction '" + op.op + "'");
    }
    for (std::int64_t s : op.slots)
      if (s < 0 || s > 1'000'000) bad("slot out of range");
    if (op.op != "ret") parsed.slot_count = std::max(parsed.slot_count, op.slots.front() + 1);  // the written slot
    parsed.instructions.push_back(std::move(op));
  }
  // Dataflow: every slot an instruction reads must have been written before (inputs first).
  std::vector<bool> written(parsed.slot_count, false);
  for (std::int64_t s = 0; s < parsed.input_count; ++s) written[s] = true;
  for (const instruction& op : parsed.instructions) {
    const std::size_t first_read = op.op == "ret" ? 0 : 1;
    for (std::size_t i = first_read; i < op.slots.size(); ++i)
      if (op.slots[i] >= parsed.slot_count || !written[op.slots[i]])
        detail::fail("payload reads slot " + std::to_string(op.slots[i]) + " before anything writes it");
    if (op.op != "ret") written[op.slots.front()] = true;
  }
  if (parsed.instructions.empty() || parsed.instructions.back().op != "ret") detail::fail("payload has no 'ret' instruction");
  return parsed;
}

namespace detail {
/// The debug handle of the first instruction that reads `slot` (-1 if none does): a bad input
/// is reported at the model's first use of it.
inline std::int64_t first_reader(const program& program, std::int64_t slot) {
  for (const instruction& op : program.instructions)
    if (op.op != "const" && op.op != "ret" &&
        std::find(op.slots.begin() + 1, op.slots.end(), slot) != op.slots.end())
      return op.debug_handle;
  return -1;
}
}  // namespace detail

inline std::vector<c10::IValue> DemoBackend::execute(program& program, torch_delegate::inputs inputs) {
  if (static_cast<std::int64_t>(inputs.size()) != program.input_count)
    detail::fail("expected " + std::to_string(program.input_count) + " inputs, got " + std::to_string(inputs.size()));
  std::vector<c10::IValue> slots(program.slot_count);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor()) {
      const std::string message = "backend_with_compiler_demo: input " + std::to_string(i + 1) + " must be a Tensor, got " +
                                  inputs[i].type()->annotation_str();
      const std::int64_t reader = detail::first_reader(program, static_cast<std::int64_t>(i));
      if (reader < 0) detail::fail(message);
      torch_delegate::raise_at(reader, message);
    }
    slots[i] = inputs[i];
  }
  for (const instruction& op : program.instructions) {
    if (op.op == "const") {
      slots[op.slots[0]] = op.value;
    } else if (op.op == "ret") {
      std::vector<c10::IValue> outputs;
      for (std::int64_t s : op.slots) outputs.push_back(slots[s]);
      return outputs;
    } else {
      torch_delegate::instruction_timer timer(op.debug_handle);  // an op in the PyTorch profiler
      const c10::IValue& alpha = slots[op.slots[3]];
      if (!alpha.isDouble() && !alpha.isInt())
        torch_delegate::raise_at(op.debug_handle, "backend_with_compiler_demo: aten::" + op.op + ": alpha must be a number");
      slots[op.slots[0]] = detail::add_or_subtract(op, slots[op.slots[1]], slots[op.slots[2]], alpha.toScalar().toDouble());
    }
  }
  detail::fail("program ended without 'ret'");
}

inline at::Tensor DemoBackend::execute(program& program, const at::Tensor& x, const at::Tensor& h) {
  const std::array<c10::IValue, 2> arguments{x, h};
  std::vector<c10::IValue> outputs = execute(program, torch_delegate::inputs(arguments));
  if (outputs.size() != 1 || !outputs[0].isTensor()) detail::fail("the method does not return one Tensor");
  return std::move(outputs[0]).toTensor();
}

}  // namespace demo
