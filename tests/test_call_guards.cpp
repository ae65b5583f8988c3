// The checks every call of execute passes, whatever its route (issue 37): a tensor with no
// elements for a backend that does not declare runs_empty_tensors, and autograd that a backend
// would drop (grad mode on, an argument that requires grad, an output without history).
#include "helpers.hpp"

#include <torch_delegate/torch_delegate.hpp>

#include <cstdio>

#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>

using namespace test_helpers;

namespace call_guard_tests {

/// Runs its own "kernel": the result has no autograd history. Does not run empty tensors.
struct DetachingBackend {
  static constexpr std::string_view name = "td_test_detaching";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor),
                                                        std::tuple<at::Tensor, at::Tensor>(std::vector<at::Tensor>)>;
  static inline int calls = 0;
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) {
    ++calls;
    return (x + h).detach();
  }
  static std::tuple<at::Tensor, at::Tensor> execute(std::string&, const std::vector<at::Tensor>& xs) {
    ++calls;
    return {xs.at(0).detach(), xs.at(0) * 2};
  }
};

/// The same kernel through the generic execute, declaring that it runs empty tensors.
struct GenericDetachingBackend {
  static constexpr std::string_view name = "td_test_generic_detaching";
  static constexpr bool runs_empty_tensors = true;
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static std::vector<c10::IValue> execute(std::string&, torch_delegate::inputs inputs) {
    return {(inputs[0].toTensor() + inputs[1].toTensor()).detach()};
  }
};

/// Runs ATen operators: autograd records them, so a gradient is not lost.
struct AtenBackend {
  static constexpr std::string_view name = "td_test_aten_autograd";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return x * h; }
};

inline const std::string autograd_message =
    "autograd: argument 1 ('x') requires grad and grad mode is on, but output 1 comes back from backend "
    "'td_test_detaching' without autograd history (the backend runs outside autograd): its gradient would be silently "
    "lost. Call the model under torch.no_grad() or torch.inference_mode() (C++: torch::NoGradGuard or "
    "c10::InferenceMode), or lower it with fallback_when_unavailable=True or on_other_shapes=\"torchscript\" so that such calls run in "
    "TorchScript";

}  // namespace call_guard_tests

using call_guard_tests::AtenBackend;
using call_guard_tests::DetachingBackend;
using call_guard_tests::GenericDetachingBackend;

TEST_CASE("autograd: a backend that drops the gradient is refused on every route, with the way out") {
  auto lowered = torch_delegate::lower<DetachingBackend>(script(forward_source));
  const at::Tensor x = torch::ones({3}).requires_grad_(), h = torch::ones({3});
  const std::string context = "torch-delegate: backend 'td_test_detaching', method 'forward': ";
  SUBCASE("through TorchScript") {
    CHECK_CONTAINS(error_of([&] { lowered.forward({x, h}); }), context + call_guard_tests::autograd_message);
  }
  SUBCASE("through the typed C++ call") {
    auto forward = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");
    CHECK(error_of([&] { forward(x, h); }) == context + call_guard_tests::autograd_message);
  }
  SUBCASE("the second argument, after save and load") {
    lowered.save(temp_path("call_guards_detaching.pt"));
    auto loaded = torch_delegate::load<DetachingBackend>(temp_path("call_guards_detaching.pt"));
    CHECK_CONTAINS(error_of([&] { loaded.forward({h, x}); }), "autograd: argument 2 ('h') requires grad");
    std::remove(temp_path("call_guards_detaching.pt").c_str());
  }
  SUBCASE("the ways out the message names run it") {
    {
      torch::NoGradGuard no_grad;
      CHECK(lowered.forward({x, h}).toTensor().equal(torch::full({3}, 2.0)));
    }
    {
      c10::InferenceMode inference;
      CHECK(lowered.forward({x, h}).toTensor().equal(torch::full({3}, 2.0)));
    }
  }
  SUBCASE("nothing asks for a gradient: it runs") {
    CHECK(lowered.forward({h, h}).toTensor().equal(torch::full({3}, 2.0)));
  }
}

TEST_CASE("autograd: a tensor list argument counts, and every output is checked") {
  auto lowered = torch_delegate::lower<DetachingBackend>(script("def forward(self, xs: List[Tensor]):\n    return xs[0], xs[0] * 2\n"));
  const at::Tensor x = torch::ones({2}).requires_grad_();
  CHECK_CONTAINS(error_of([&] { lowered.forward({c10::List<at::Tensor>({torch::ones({2}), x})}); }),
                 "autograd: argument 1 ('xs') element 1 requires grad and grad mode is on, but output 1 comes back");
}

TEST_CASE("autograd: the generic execute is checked too; a backend running ATen keeps the gradient") {
  const at::Tensor x = torch::ones({3}).requires_grad_(), h = torch::full({3}, 3.0);
  auto generic = torch_delegate::lower<GenericDetachingBackend>(script(forward_source));
  CHECK_CONTAINS(error_of([&] { generic.forward({x, h}); }),
                 "method 'forward': autograd: argument 1 ('x') requires grad and grad mode is on, but output 1 comes back "
                 "from backend 'td_test_generic_detaching' without autograd history");
  auto aten = torch_delegate::lower<AtenBackend>(script("def forward(self, x, h):\n    return x * h\n"));
  at::Tensor y = aten.forward({x, h}).toTensor();
  REQUIRE(y.requires_grad());
  y.sum().backward();
  CHECK(x.grad().equal(h));
}

TEST_CASE("empty tensors: refused before execute unless the backend runs them") {
  auto lowered = torch_delegate::lower<DetachingBackend>(script(forward_source));
  DetachingBackend::calls = 0;
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({2, 0, 3}), torch::ones({3})}); }),
        "torch-delegate: backend 'td_test_detaching', method 'forward': argument 1 ('x') is empty (Float [2, 0, 3]): "
        "backend 'td_test_detaching' does not run tensors with no elements. Skip empty inputs before the call, or lower "
        "with fallback_when_unavailable=True or on_other_shapes=\"torchscript\" (C++: partition_options::fallback_when_unavailable, "
        "other_shapes::torchscript) so that TorchScript runs them");
  auto forward = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  CHECK_CONTAINS(error_of([&] { forward(torch::ones({1}), torch::empty({0})); }), "argument 2 ('h') is empty (Float [0])");
  CHECK(DetachingBackend::calls == 0);  // the backend never saw them
  // A backend that declares runs_empty_tensors gets them.
  auto generic = torch_delegate::lower<GenericDetachingBackend>(script(forward_source));
  CHECK(generic.forward({torch::ones({0, 4}), torch::ones({4})}).toTensor().sizes() == at::IntArrayRef({0, 4}));
}

TEST_CASE("autograd: a region's method is told apart by its name, in modules saved by any build") {
  using torch_delegate::detail::names::is_region_method;
  using torch_delegate::detail::names::region_method;
  CHECK(is_region_method(region_method("forward", 0)));
  CHECK(is_region_method(region_method("encode", 12)));
  CHECK_FALSE(is_region_method("forward"));
  CHECK_FALSE(is_region_method("forward_region_"));
  CHECK_FALSE(is_region_method("_region_3"));
  CHECK_FALSE(is_region_method("forward_region_1a"));
}
