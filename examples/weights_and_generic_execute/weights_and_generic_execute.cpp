// A backend that packs a module's weight at preprocess (read through method.module()) and
// runs any signature with a generic execute; the lowered module is loaded back with
// torch_delegate::load, which checks that its backend is registered. Self-checking.
// docs/getting-started.md shows what it prints, the section between "--- output: prints ---"
// and "--- end output ---" (checked by tools/doc_snippets.py).
#include <torch_delegate/torch_delegate.hpp>
#include <torch/script.h>

#include <iostream>

// [backend]
struct ScaleBackend {
  static constexpr std::string_view name = "scale_by_weight";

  // Host side: accept `x * self.weight` only, and make the weight the payload. method.module()
  // is the module being lowered (read-only): its parameters, buffers and attributes.
  static at::Tensor preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() != c10::aten::mul && node->kind() != c10::prim::GetAttr)
        method.reject(node, "scale_by_weight only multiplies by self.weight.");
    return method.module().attr("weight").toTensor();
  }

  static bool is_available() { return true; }
  static at::Tensor compile(const at::Tensor& weight) { return weight.contiguous(); }  // the Handle

  // Generic execute: `inputs` is a std::span<const c10::IValue> holding the method's arguments
  // in order (any types, any count). Return one IValue per output of the method (one per
  // element when it returns a tuple).
  static std::vector<c10::IValue> execute(at::Tensor& weight, torch_delegate::inputs inputs) {
    if (inputs.size() != 1 || !inputs[0].isTensor())
      throw std::invalid_argument("scale_by_weight: expected one Tensor argument");
    return {inputs[0].toTensor() * weight};
  }
};
// [backend]

int main() {
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::full({3}, 2.0), /*requires_grad=*/false);
  module.define("def forward(self, x):\n    return x * self.weight\n");

  std::cout << "--- output: prints ---\n";
  // [load]
  torch_delegate::lower<ScaleBackend>(module).save("scale.pt");
  // Which backends a saved file needs, read without loading it:
  for (const std::string& backend : torch_delegate::backends_needed("scale.pt")) std::cout << backend << '\n';
  // Loads like torch::jit::load, after checking that each of them is registered here.
  torch::jit::Module loaded = torch_delegate::load("scale.pt");
  // [load]

  const at::Tensor x = torch::arange(3, at::kFloat);
  const bool same = loaded.forward({x}).toTensor().equal(module.forward({x}).toTensor());
  std::cout << (same ? "same as the original" : "DIFFERENT") << '\n';
  std::cout << "--- end output ---\n";
  return same ? 0 : 1;
}
