// A tiny application built against an installed torch-delegate: a one-op backend, lowered and
// run both ways. consumer_cmake (and the subproject test) build it header-only, consumer_meson
// against the installed libtorch_delegate (separately compiled mode).
#include <torch_delegate/torch_delegate.hpp>
#include <torch/script.h>

#include <iostream>

struct SubtractBackend {
  static constexpr std::string_view name = "consumer_subtract";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return x - h; }
};

int main() {
  torch::jit::Module module("m");
  module.define("def forward(self, x, h):\n    return x - h\n");
  auto lowered = torch_delegate::lower<SubtractBackend>(module);
  const at::Tensor x = torch::rand({4}), h = torch::rand({4});
  const bool ok = lowered.forward({x, h}).toTensor().equal(x - h) &&
                  lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward")(x, h).equal(x - h);
  std::cout << (ok ? "consumer: ok" : "consumer: MISMATCH") << "\n";
  return ok ? 0 : 1;
}
