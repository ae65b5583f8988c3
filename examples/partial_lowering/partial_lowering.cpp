// Partial lowering: the demo backend (add and sub only) takes the regions of a method it
// supports; relu and the weight read stay in TorchScript. The delegation report before lowering
// (a dry run) and after save and load; the outputs equal the original's.
#include <backend_with_compiler_demo/demo_backend.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <torch/script.h>

#include <iostream>

int main() {
  torch::jit::Module model("Model");
  model.register_parameter("bias", torch::randn({4}), /*requires_grad=*/false);
  model.define(R"(
def forward(self, x, h):
    a = x + h - self.bias
    b = torch.relu(a)
    return b + x - h
)");

  // [partial]
  torch_delegate::partition_options options;  // "forward", regions of any size
  torch_delegate::delegation_report plan = torch_delegate::delegation_plan<demo::DemoBackend>(model, options);
  std::cout << "--- output: plan ---\n" << plan.to_string() << "--- end output ---\n";

  torch::jit::Module lowered = torch_delegate::lower_partially<demo::DemoBackend>(model, options);
  lowered.save("partially_lowered.pt");  // a plain TorchScript module
  torch::jit::Module loaded = torch::jit::load("partially_lowered.pt");
  std::cout << "--- output: loaded ---\n" << torch_delegate::delegation_report_of(loaded) << "--- end output ---\n";
  // [partial]

  const at::Tensor x = torch::randn({2, 4}), h = torch::randn({2, 4});
  const bool equal = loaded.forward({x, h}).toTensor().allclose(model.forward({x, h}).toTensor());
  std::cout << (equal ? "partial_lowering: same outputs as the original" : "MISMATCH") << "\n";
  return equal ? 0 : 1;
}
