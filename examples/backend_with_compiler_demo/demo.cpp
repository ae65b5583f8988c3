// The demo: lower a scripted module to backend_with_compiler_demo, save it, load it, run it.
#include "demo_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

#include <torch/script.h>

#include <filesystem>
#include <iostream>

int main(int argc, char** argv) {
  torch::jit::Module module("m");
  module.define(R"(
    def forward(self, x, h):
        return self.accum(x, h) - h

    def accum(self, x, h):
        return x + h
  )");

  auto lowered = torch_delegate::lower<demo::DemoBackend>(module, {{"forward", {}}, {"accum", {}}});

  const std::string path = argc > 1 ? argv[1] : (std::filesystem::temp_directory_path() / "demo_lowered.pt").string();
  lowered.save(path);
  auto loaded = torch_delegate::load<demo::DemoBackend>(path);

  const at::Tensor x = torch::arange(6, torch::kFloat).reshape({2, 3});
  const at::Tensor h = torch::full({3}, 0.5);
  const at::Tensor expected = module.forward({x, h}).toTensor();
  const at::Tensor through_torchscript = loaded.forward({x, h}).toTensor();
  const at::Tensor through_cpp = loaded.method<at::Tensor(at::Tensor, at::Tensor)>("accum")(x, h);

  std::cout << "lowered module: " << loaded.module().type()->name()->qualifiedName() << "\n"
            << "saved to and loaded from " << path << "\n"
            << "forward(x, h) on the backend:\n" << through_torchscript << "\n"
            << "accum(x, h) through the typed C++ path:\n" << through_cpp << "\n";
  const bool ok = through_torchscript.equal(expected) && through_cpp.equal(x + h);
  std::cout << (ok ? "matches the original module" : "MISMATCH with the original module") << "\n";
  return ok ? 0 : 1;
}
