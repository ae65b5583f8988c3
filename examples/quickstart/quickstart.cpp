// Quickstart: a complete backend in one struct, lowered, saved, loaded and called.
// [quickstart]
#include <torch_delegate/torch_delegate.hpp>
#include <torch/script.h>

struct AddBackend {
  static constexpr std::string_view name = "quickstart_add";

  // Host side, ahead of time: accept methods that compute `x + h`, reject anything else.
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() != c10::aten::add && node->kind() != c10::prim::Constant)
        method.reject(node, "quickstart_add only adds.");
    return "add";
  }

  // Runtime side.
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }  // the Handle
  static at::Tensor execute(std::string& /*handle*/, const at::Tensor& x, const at::Tensor& h) { return x + h; }
};

int main() {
  torch::jit::Module module("m");
  module.define("def forward(self, x, h):\n    return x + h\n");

  auto lowered = torch_delegate::lower<AddBackend>(module);    // lowers "forward"
  lowered.save("quickstart.pt");                               // a plain TorchScript file
  auto loaded = torch_delegate::load<AddBackend>("quickstart.pt");

  at::Tensor x = torch::ones({2}), h = torch::ones({2});
  at::Tensor through_torchscript = loaded.forward({x, h}).toTensor();
  at::Tensor typed = loaded.method<at::Tensor(at::Tensor, at::Tensor)>("forward")(x, h);
  return through_torchscript.equal(x + h) && typed.equal(x + h) ? 0 : 1;
}
// [quickstart]
