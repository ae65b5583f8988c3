// libFuzzer target: the demo backend's payload decoder (compile) and, for payloads it accepts,
// execute on small float tensors. Every input must give a program or a c10::Error, never a crash.
#include <backend_with_compiler_demo/demo_backend.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  try {
    demo::program program = demo::DemoBackend::compile(payload);
    if (program.input_count > 4 || program.slot_count > 256) return 0;
    std::vector<c10::IValue> inputs;
    for (std::int64_t i = 0; i < program.input_count; ++i) inputs.emplace_back(at::ones({2, 1 + i % 2}));
    demo::DemoBackend::execute(program, torch_delegate::inputs(inputs));
  } catch (const c10::Error&) {
  }
  return 0;
}
