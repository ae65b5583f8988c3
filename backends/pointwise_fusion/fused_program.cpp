// Encoder and decoder of the pointwise_fusion payload (fused_program.hpp).
#include "fused_program.hpp"

#include <array>
#include <cmath>
#include <stdexcept>

namespace pointwise {

namespace {

void append_number(std::string& text, float value) {
  std::array<char, 32> buffer{};
  auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);  // shortest round trip
  text.append(buffer.data(), end);
}

class line_reader {
 public:
  line_reader(std::string_view line, std::size_t number) : rest_(line), number_(number) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw std::invalid_argument("pointwise_fusion payload, line " + std::to_string(number_) + ": " + std::string(what));
  }
  std::string_view word() {
    while (!rest_.empty() && rest_.front() == ' ') rest_.remove_prefix(1);
    const std::size_t end = rest_.find(' ');
    const std::string_view word = rest_.substr(0, end);
    rest_.remove_prefix(end == std::string_view::npos ? rest_.size() : end);
    return word;
  }
  bool done() {
    while (!rest_.empty() && rest_.front() == ' ') rest_.remove_prefix(1);
    return rest_.empty();
  }
  std::uint32_t count(std::string_view what, std::uint32_t limit) {
    const std::string_view text = word();
    std::uint32_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value > limit)
      fail("expected " + std::string(what) + " (a number from 0 to " + std::to_string(limit) + "), got '" +
           std::string(text) + "'");
    return value;
  }
  float number(std::string_view what) {
    const std::string_view text = word();
    float value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
      fail("expected " + std::string(what) + " (a number), got '" + std::string(text) + "'");
    return value;
  }

 private:
  std::string_view rest_;
  std::size_t number_;
};

constexpr std::uint32_t max_slots = 1u << 20;

}  // namespace

std::string encode(const fused_program& program) {
  std::string text = "pointwise_fusion " + std::to_string(fused_program::format_version) + "\n";
  text += "inputs " + std::to_string(program.input_count) + "\n";
  std::size_t next_constant = 0, next_step = 0;
  // Constants and steps interleave in slot order.
  for (std::uint32_t slot = program.input_count; slot < program.slot_count; ++slot) {
    if (next_constant < program.constants.size() && program.constants[next_constant].slot == slot) {
      text += "const " + std::to_string(slot) + " ";
      append_number(text, program.constants[next_constant++].value);
    } else {
      const step& s = program.steps[next_step];
      text += std::string(op_name(s.code)) + " " + std::to_string(s.dst) + " ";
      append_number(text, s.imm);
      text += " " + program.step_kinds[next_step++];
      const std::uint32_t operands[3] = {s.a, s.b, s.c};
      for (int i = 0; i < arity(s.code); ++i) text += " " + std::to_string(operands[i]);
    }
    text += "\n";
  }
  text += "outputs";
  for (const fused_program::output& output : program.outputs)
    text += " " + std::to_string(output.slot) + (output.is_bool ? ":bool" : "");
  text += "\n";
  return text;
}

fused_program decode(std::string_view payload) {
  fused_program program;
  std::size_t line_number = 0;
  bool have_header = false, have_inputs = false, have_outputs = false;
  while (!payload.empty()) {
    const std::size_t end = payload.find('\n');
    const std::string_view line = payload.substr(0, end);
    payload.remove_prefix(end == std::string_view::npos ? payload.size() : end + 1);
    line_reader in(line, ++line_number);
    const std::string_view keyword = in.word();
    if (keyword.empty()) continue;
    if (!have_header) {
      if (keyword != "pointwise_fusion") in.fail("expected the header 'pointwise_fusion <version>', got '" + std::string(line) + "'");
      const std::uint32_t version = in.count("the format version", 1'000'000);
      if (version < 1 || version > fused_program::format_version)
        in.fail("format version " + std::to_string(version) + " is not one this build reads (1 to " +
                std::to_string(fused_program::format_version) + "): lower the model again with this build");
      have_header = true;
    } else if (have_outputs) {
      in.fail("nothing may follow 'outputs'");
    } else if (keyword == "inputs") {
      if (have_inputs) in.fail("'inputs' given twice");
      program.input_count = program.slot_count = in.count("the input count", max_slots);
      have_inputs = true;
    } else if (!have_inputs) {
      in.fail("expected 'inputs <count>' before '" + std::string(keyword) + "'");
    } else if (keyword == "const") {
      const std::uint32_t slot = in.count("the constant's slot", max_slots);
      if (slot != program.slot_count) in.fail("expected the next slot " + std::to_string(program.slot_count) + ", got " + std::to_string(slot));
      program.constants.push_back({slot, in.number("the constant's value")});
      ++program.slot_count;
    } else if (keyword == "outputs") {
      while (!in.done()) {
        std::string_view item = in.word();
        const bool is_bool = item.ends_with(":bool");
        if (is_bool) item.remove_suffix(5);
        std::uint32_t slot = 0;
        auto [last, error] = std::from_chars(item.data(), item.data() + item.size(), slot);
        if (item.empty() || error != std::errc() || last != item.data() + item.size() || slot >= program.slot_count)
          in.fail("expected an output slot below " + std::to_string(program.slot_count) + ", got '" + std::string(item) + "'");
        program.outputs.push_back({slot, is_bool});
      }
      if (program.outputs.empty()) in.fail("expected at least one output slot");
      have_outputs = true;
    } else {
      int code = 0;
      while (code < op_count && op_name(static_cast<op>(code)) != keyword) ++code;
      if (code == op_count) in.fail("unknown op '" + std::string(keyword) + "'");
      step s{static_cast<op>(code)};
      s.dst = in.count("the step's slot", max_slots);
      if (s.dst != program.slot_count) in.fail("expected the next slot " + std::to_string(program.slot_count) + ", got " + std::to_string(s.dst));
      s.imm = in.number("the step's immediate");
      const std::string_view kind = in.word();
      if (kind.empty()) in.fail("expected the node kind");
      std::uint32_t* operands[3] = {&s.a, &s.b, &s.c};
      for (int i = 0; i < arity(s.code); ++i) {
        *operands[i] = in.count("an operand slot", max_slots);
        if (*operands[i] >= s.dst) in.fail("operand slot " + std::to_string(*operands[i]) + " is not defined before slot " + std::to_string(s.dst));
      }
      program.steps.push_back(s);
      program.step_kinds.emplace_back(kind);
      ++program.slot_count;
    }
    if (!in.done()) in.fail("unexpected text at the end of the line");
  }
  if (!have_header) throw std::invalid_argument("pointwise_fusion payload: empty");
  if (!have_outputs) throw std::invalid_argument("pointwise_fusion payload: no 'outputs' line");
  return program;
}

std::vector<step> merge_affine_epilogues(const fused_program& program) {
  std::vector<std::uint32_t> readers(program.slot_count, 0);
  for (const step& s : program.steps) {
    const std::uint32_t operands[3] = {s.a, s.b, s.c};
    for (int i = 0; i < arity(s.code); ++i) ++readers[operands[i]];
  }
  for (const fused_program::output& output : program.outputs) ++readers[output.slot];
  std::vector<step> merged;
  merged.reserve(program.steps.size());
  for (const step& s : program.steps) {
    if (!merged.empty() && (s.code == op::mul_imm || s.code == op::add_imm)) {
      step& producer = merged.back();
      const bool only_reader = producer.dst == s.a && s.a >= program.input_count && readers[s.a] == 1;
      // mul after an add would need (v + shift) * scale: not this epilogue's order.
      const bool in_order = s.code == op::mul_imm ? !producer.scales && !producer.shifts : !producer.shifts;
      if (only_reader && in_order) {
        if (s.code == op::mul_imm) {
          producer.scales = true;
          producer.scale = s.imm;
        } else {
          producer.shifts = true;
          producer.shift = s.imm;
        }
        producer.dst = s.dst;
        continue;
      }
    }
    merged.push_back(s);
  }
  return merged;
}

}  // namespace pointwise
