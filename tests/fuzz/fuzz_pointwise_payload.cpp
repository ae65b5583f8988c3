// libFuzzer target: pointwise_fusion's payload decoder (examples/pointwise_fusion/fused_program.hpp)
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
  std::vector<std::vector<float>> streams(program.slot_count, std::vector<float>(elements, 0.5f));
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
  const pointwise::kernel_call call{program.steps.data(), program.steps.size(), slots.data(), slots.size(), program.slot_count};
  pointwise::isa_baseline::kernels.run(call, 0, elements);
  return 0;
}
