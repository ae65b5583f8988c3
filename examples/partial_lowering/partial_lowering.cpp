// Partial lowering: the demo backend (add and sub only) takes the regions of a method it
// supports; relu and the weight read stay in TorchScript. The delegation report before lowering
// (a dry run) and after save and load; the outputs equal the original's. Then selective lowering
// (one submodule, by path), availability fallback (a backend whose device goes away), and the
// plan for two backends, where a node neither takes is reported with each one's reason.
#include <backend_with_compiler_demo/demo_backend.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <torch/script.h>

#include <algorithm>
#include <atomic>
#include <span>
#include <iostream>

// The demo backend on a device that can go away: is_available() turns false when unplugged.
std::atomic<bool> device_present{true};
struct UnpluggableDemo : demo::DemoBackend {
  static constexpr std::string_view name = "unpluggable_demo";
  static bool is_available() { return device_present.load(); }
};

// An accelerator that also runs relu, but is worth a call only for regions of 8 nodes or more
// (listed before the demo in a dry run; never compiled here).
struct BigRegionsAccelerator : demo::DemoBackend {
  static constexpr std::string_view name = "big_regions_accelerator";
  static constexpr std::size_t min_region_size = 8;
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::relu || demo::DemoBackend::supports(node);
  }
};

// [verdict]
// An accelerator that runs relu too, but not a region of relus alone: it says why in the report.
struct ReluWithCompany : demo::DemoBackend {
  static constexpr std::string_view name = "relu_with_company";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::relu || demo::DemoBackend::supports(node);
  }
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region) {
    if (std::all_of(region.begin(), region.end(), [](const torch::jit::Node* node) { return node->kind() == c10::aten::relu; }))
      return torch_delegate::region_verdict::refuse("relus alone: the call would cost what they save");
    return true;
  }
};
// [verdict]

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
  bool equal = loaded.forward({x, h}).toTensor().allclose(model.forward({x, h}).toTensor());

  torch::jit::Module encoder("Encoder");
  encoder.define("def forward(self, x, h):\n    return x + h - x\n");
  torch::jit::Module net("Net");
  net.register_module("encoder", encoder);
  net.define("def forward(self, x, h):\n    y = self.encoder.forward(x, h)\n    return y - h + x\n");
  // [selective]
  torch_delegate::partition_options only_encoder;
  only_encoder.lower_submodules = {"encoder"};  // LibTorch's selective lowering, by path
  only_encoder.require_full = true;             // ... and all of the encoder, or an error
  std::cout << "--- output: selective ---\n"
            << torch_delegate::delegation_plan<demo::DemoBackend>(net, only_encoder).to_string() << "--- end output ---\n";
  torch::jit::Module selective = torch_delegate::lower_partially<demo::DemoBackend>(net, only_encoder);
  // [selective]
  equal = equal && selective.forward({x, h}).toTensor().allclose(net.forward({x, h}).toTensor());

  // [several]
  const torch_delegate::delegation_report two = torch_delegate::delegation_plan<BigRegionsAccelerator, demo::DemoBackend>(model);
  std::cout << "--- output: several ---\n" << two.to_string() << "--- end output ---\n";
  // [several]
  const torch_delegate::kept_node& relu = two.methods.at(0).kept.back();
  equal = equal && relu.per_backend.size() == 2 && relu.reason == torch_delegate::kept_reason::region_too_small;

  // [fallback]
  torch_delegate::partition_options fallback;
  fallback.fallback_when_unavailable = true;
  torch::jit::Module resilient = torch_delegate::lower_partially<UnpluggableDemo>(model, fallback);
  at::Tensor in_backend = resilient.forward({x, h}).toTensor();  // the regions run in the backend
  device_present = false;                                         // the device goes away
  at::Tensor in_torchscript = resilient.forward({x, h}).toTensor();  // the original TorchScript runs
  // [fallback]
  equal = equal && in_backend.allclose(in_torchscript) && in_torchscript.allclose(model.forward({x, h}).toTensor());
  // Without fallback (the default), the same call raises LibTorch's error.
  device_present = true;
  torch::jit::Module strict = torch_delegate::lower_partially<UnpluggableDemo>(model);
  device_present = false;
  try {
    strict.forward({x, h});
    equal = false;
  } catch (const std::exception& error) {  // the interpreter's error, LibTorch's text in it
    const bool libtorch_text = std::string(error.what()).find("Backend is not available.") != std::string::npos;
    std::cout << "strict mode: " << (libtorch_text ? "Backend is not available." : error.what()) << "\n";
    equal = equal && libtorch_text;
  }

  // A relu between two matmuls (which the demo does not run): a region of one relu, refused.
  torch::jit::Module mlp("Mlp");
  mlp.define("def forward(self, x, w):\n    return torch.matmul(torch.relu(torch.matmul(x, w)), w) + x\n");
  std::cout << "--- output: verdict ---\n"
            << torch_delegate::delegation_plan<ReluWithCompany>(mlp).to_string() << "--- end output ---\n";

  std::cout << (equal ? "partial_lowering: same outputs as the original" : "MISMATCH") << "\n";
  return equal ? 0 : 1;
}
