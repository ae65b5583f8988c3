// Debugging a lowered model: coverage before lowering, a run-time failure that points at the
// model's source, and a profile of the delegated instructions. docs/debugging.md shows its output.
#include <backend_with_compiler_demo/demo_backend.hpp>

#include <torch_delegate/torch_delegate.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/script.h>

#include <iostream>

int main() {
  torch::jit::Module adder("Adder");
  adder.define("def forward(self, x, h):\n    return x + h\n");
  torch::jit::Module model("Model");
  model.register_module("adder", adder);
  model.define(R"(
    def forward(self, x, h):
        return self.adder.forward(x, h) - h

    def scaled(self, x, h):
        return self.adder.forward(x, h) * h
  )");

  // [coverage]
  auto report = torch_delegate::coverage<demo::DemoBackend>(model, {"forward", "scaled"});
  std::cout << report.to_string();
  // [coverage]

  auto lowered = torch_delegate::lower<demo::DemoBackend>(model);  // "forward" only

  // [failure]
  try {
    lowered.forward({torch::rand({2, 4}), torch::rand({13, 9})});
  } catch (const std::exception& error) {
    std::cout << error.what() << "\n";
  }
  // [failure]

  // [profile]
  using namespace torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  prepareProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  enableProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  lowered.forward({torch::rand({256, 256}), torch::rand({256})});
  auto profile = disableProfiler();
  for (const auto& event : profile->events())
    if (event.backend() == demo::DemoBackend::name)
      std::cout << event.name() << "  debug handle " << event.debugHandle() << "  " << event.durationUs() << " us\n";
  // [profile]
  return report.fully_supported() ? 1 : 0;  // "scaled" multiplies: the report must say so
}
