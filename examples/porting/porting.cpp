// The demo backend written both ways gives the same results: LibTorch's own interface
// (upstream_demo_backend.hpp) and torch-delegate (backend_with_compiler_demo/).
#include "upstream_demo_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>
#include <torch/script.h>

#include <iostream>

int main() {
  torch::jit::Module module("m");
  module.define(R"(
    def forward(self, x, h):
        return self.accum(x, h), torch.sub(x, h, alpha=2) + 1.0

    def accum(self, x, h):
        return x + h
  )");
  auto upstream = upstream_demo::lower(module, {"forward", "accum"});
  auto ours = torch_delegate::lower<demo::DemoBackend>(module, {{"forward", {}}, {"accum", {}}});
  bool ok = true;
  for (int i = 0; i < 5; ++i) {
    const at::Tensor x = torch::rand({3, 4}), h = torch::rand({4});
    auto a = upstream.forward({x, h}).toTupleRef().elements();
    auto b = ours.forward({x, h}).toTupleRef().elements();
    auto want = module.forward({x, h}).toTupleRef().elements();
    for (std::size_t k = 0; k < 2; ++k)
      ok = ok && a[k].toTensor().allclose(want[k].toTensor(), 1e-5, 1e-6) && b[k].toTensor().equal(a[k].toTensor());
  }
  std::cout << (ok ? "porting: upstream-style and torch-delegate demo backends agree" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
