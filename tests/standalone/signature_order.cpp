// Saved modules do not depend on the order of a backend's execute_signatures. Three builds of
// one backend (same name, different lists), chosen at run time so that one program stands for
// three builds of the backend; a process registers only the one its mode names:
//   1: (Tensor) -> Tensor, (Tensor, Tensor) -> Tensor, (Tensor) -> Tuple[Tensor]   "save <path>"
//   2: the same three, reversed                                                     "load <path>"
//   3: the second one removed                                                       "missing <path>"
// Build 2 must load and run what build 1 saved; build 3 must fail with torch-delegate's
// "incompatible payload" error naming the missing signature.
#include <torch_delegate/torch_delegate.hpp>

#include <torch/script.h>

#include <iostream>

template <int Order>
struct OrderBackend {
  static constexpr std::string_view name = "td_signature_order";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }

  using execute_signatures = std::conditional_t<
      Order == 1,
      torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, at::Tensor), std::tuple<at::Tensor>(at::Tensor)>,
      std::conditional_t<Order == 2,
                         torch_delegate::signatures<std::tuple<at::Tensor>(at::Tensor), at::Tensor(at::Tensor, at::Tensor),
                                                    at::Tensor(at::Tensor)>,
                         torch_delegate::signatures<at::Tensor(at::Tensor), std::tuple<at::Tensor>(at::Tensor)>>>;
  static at::Tensor execute(std::string&, const at::Tensor& x) { return x * 2; }                     // double
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return x + h; }  // add
  static std::tuple<at::Tensor> execute(std::string&, torch_delegate::returning<std::tuple<at::Tensor>>, const at::Tensor& x) {
    return {x * 3};  // triple
  }
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: signature_order save|load|missing <path>\n";
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  if (mode == "save") torch_delegate::register_backend<OrderBackend<1>>();
  else if (mode == "load") torch_delegate::register_backend<OrderBackend<2>>();
  else torch_delegate::register_backend<OrderBackend<3>>();
  const at::Tensor x = torch::full({2}, 5.0), h = torch::full({2}, 1.0);
  if (mode == "save") {
    torch::jit::Module module("m");
    module.define(R"(
def double(self, x):
    return x * 2
def forward(self, x, h):
    return x + h
def triple(self, x) -> Tuple[Tensor]:
    return (x * 3,)
)");
    torch_delegate::lower<OrderBackend<1>>(module, {{"double", {}}, {"forward", {}}, {"triple", {}}}).save(path);
    return 0;
  }
  try {
    torch::jit::Module loaded = torch_delegate::load(path);
    const bool ok = loaded.get_method("double")({x}).toTensor().equal(x * 2) &&
                    loaded.forward({x, h}).toTensor().equal(x + h) &&
                    loaded.get_method("triple")({x}).toTupleRef().elements()[0].toTensor().equal(x * 3);
    std::cout << (ok ? "loaded and ran with the signatures in another order\n" : "WRONG RESULTS\n");
    return mode == "load" && ok ? 0 : 1;
  } catch (const c10::Error& error) {
    const std::string text = error.what_without_backtrace();
    std::cout << text << "\n";
    const std::string expected =
        "torch-delegate: backend 'td_signature_order': incompatible payload: the module '" + path +
        "' was lowered for execute(Tensor, Tensor) -> Tensor, which this build of the backend does not have; it has:";
    const bool named = text.rfind(expected, 0) == 0 && text.find("\n    execute(Tensor) -> Tensor") != std::string::npos &&
                       text.find("\n    execute(Tensor) -> Tuple[Tensor]") != std::string::npos;
    return mode == "missing" && named ? 0 : 1;
  }
}
