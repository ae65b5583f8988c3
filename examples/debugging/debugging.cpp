// Debugging a lowered model: coverage before lowering, a run-time failure that points at the
// model's source, and a profile of the delegated instructions. docs/debugging.md shows its
// output: each section between "--- output: <tag> ---" and "--- end output ---" lines is checked
// against the docs by tools/doc_snippets.py.
#include <backend_with_compiler_demo/demo_backend.hpp>

#include <torch_delegate/torch_delegate.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#include <torch/script.h>

#include <iostream>
#include <sstream>

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

  std::cout << "--- output: coverage ---\n";
  // [coverage]
  auto report = torch_delegate::coverage<demo::DemoBackend>(model, {"forward", "scaled"});
  std::cout << report.to_string();
  // [coverage]
  std::cout << "--- end output ---\n";

  auto lowered = torch_delegate::lower<demo::DemoBackend>(model);  // "forward" only

  bool failed = false;
  std::cout << "--- output: failure ---\n";
  // [failure]
  try {
    lowered.forward({torch::rand({2, 4}), torch::rand({13, 9})});
  } catch (const std::exception& error) {
    std::cout << error.what() << "\n";
    failed = true;
  }
  // [failure]
  std::cout << "--- end output ---\n";

  // The same failure in the lite interpreter, from a module saved with its debug info.
  bool failed_in_lite_interpreter = false;
  std::cout << "--- output: lite-interpreter ---\n";
  // [lite-interpreter]
  std::stringstream saved;
  lowered.module()._save_for_mobile(saved, {}, /*save_mobile_debug_info=*/true);
  auto mobile = torch::jit::_load_for_mobile(saved);
  try {
    mobile.forward({torch::rand({2, 4}), torch::rand({13, 9})});
  } catch (const c10::Error& error) {
    std::cout << error.what_without_backtrace() << "\n";
    failed_in_lite_interpreter = true;
  }
  // [lite-interpreter]
  std::cout << "--- end output ---\n";

  std::cout << "--- output: profile ---\n";
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
  std::cout << "--- end output ---\n";
  // Lowering "scaled" fails: preprocess rejects the aten::mul, pointing at the model's line.
  bool rejected = false;
  std::cout << "--- output: reject ---\n";
  try {
    torch_delegate::lower<demo::DemoBackend>(model, {{"scaled", {}}});
  } catch (const c10::Error& error) {
    std::cout << error.what_without_backtrace() << "\n";
    rejected = true;
  }
  std::cout << "--- end output ---\n";

  std::size_t instructions = 0;
  for (const auto& event : profile->events()) instructions += event.backend() == demo::DemoBackend::name;
  // "scaled" multiplies: the report must say so, and lowering it must fail; "forward" ran two
  // instructions under the profiler.
  return !report.fully_supported() && rejected && failed && failed_in_lite_interpreter && instructions == 2 ? 0 : 1;
}
