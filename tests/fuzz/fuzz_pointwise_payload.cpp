// libFuzzer target: pointwise_fusion's payload decoder (backends/pointwise_fusion/fused_program.hpp)
// and its kernels on whatever decodes. Decoding gives a program or std::invalid_argument, never
// a crash; a program that decodes re-encodes to text that decodes to the same program; running
// it over a few elements (every slot in its own block buffer) reads and writes only its buffers.
// Plain C++: the three kernel builds are included here without their ISA flags.
#include "pointwise_fusion/fused_program.hpp"

#define POINTWISE_ISA baseline
#include "pointwise_fusion/kernels.cpp"
#undef POINTWISE_ISA
#define POINTWISE_ISA avx2
#include "pointwise_fusion/kernels.cpp"
#undef POINTWISE_ISA
#define POINTWISE_ISA avx512
#include "pointwise_fusion/kernels.cpp"
#undef POINTWISE_ISA

#include <bit>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pointwise::fused_program program;
  try {
    program = pointwise::decode(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string text = pointwise::encode(program);
  if (pointwise::encode(pointwise::decode(text)) != text) std::abort();
  if (program.slot_count > 4096) return 0;  // a valid but large program: the run below would be slow

  constexpr std::int64_t elements = 7;
  // Runs `steps` over fresh buffers: inputs and outputs in memory (float streams), every other
  // slot in its own block buffer; returns the output slots' values.
  const auto run = [&](const std::vector<pointwise::step>& steps) {
    std::vector<std::vector<float>> streams(program.slot_count, std::vector<float>(elements, 0.5f));
    for (std::uint32_t slot = 0; slot < program.input_count; ++slot)
      for (std::int64_t i = 0; i < elements; ++i) streams[slot][i] = 0.25f * float(i + 1) * float(slot % 5) - 0.75f;
    std::vector<pointwise::slot_binding> slots(program.slot_count);
    for (std::uint32_t slot = 0; slot < program.slot_count; ++slot) {
      slots[slot].kind = slot < program.input_count ? pointwise::slot_kind::float_stream : pointwise::slot_kind::scratch;
      slots[slot].scratch = slot;
      slots[slot].base = streams[slot].data();
    }
    for (const auto& constant : program.constants) {
      slots[constant.slot].kind = pointwise::slot_kind::scalar;
      slots[constant.slot].scalar = constant.value;
    }
    for (const auto& output : program.outputs)
      if (slots[output.slot].kind == pointwise::slot_kind::scratch) slots[output.slot].kind = pointwise::slot_kind::float_stream;
    const pointwise::kernel_call call{steps.data(), steps.size(), slots.data(), slots.size(), program.slot_count};
    pointwise::isa_baseline::kernels.run(call, 0, elements);
    std::vector<std::uint32_t> bits;
    for (const auto& output : program.outputs) {
      if (slots[output.slot].kind == pointwise::slot_kind::scalar) continue;  // compile refuses a returned constant
      for (float value : streams[output.slot]) bits.push_back(std::bit_cast<std::uint32_t>(value));
    }
    return bits;
  };
  // Compile's affine epilogues compute what the plain steps compute, bit for bit, on a build
  // without FMA (this one: the same multiply and add, in the same order, rounded the same way).
  const std::vector<pointwise::step> merged = pointwise::merge_affine_epilogues(program);
  if (merged.size() > program.steps.size()) std::abort();
  if (run(program.steps) != run(merged)) std::abort();
  return 0;
}
