// LibTorch's own test backends (torch/csrc/jit/backends/test_backend.cpp), written with
// torch-delegate: "test_backend" and "test_backend_unavailable". Each lowered method's handle
// is its name; `accum` adds, `sub_accum` subtracts, `forward` returns both. `accum` and
// `forward` take the same arguments and differ only in their result: the second overload names
// its result with torch_delegate::returning.
#pragma once

#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/preprocess.hpp>  // preprocess is defined here, in the header
#include <torch_delegate/runtime.hpp>

#include <ATen/ATen.h>

#include <string>
#include <tuple>

namespace libtorch_scenarios {

template <bool Available>
struct TestBackend {
  static constexpr std::string_view name = Available ? "test_backend" : "test_backend_unavailable";

  // Host side: the payload is the method's name (LibTorch's version keeps the whole module).
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }

  static bool is_available() { return Available; }
  static std::string compile(const std::string& method) { return method; }

  using execute_signatures =
      torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor),
                                 std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor)>;

  /// accum(x, h) = x + h, sub_accum(x, h) = x - h.
  static at::Tensor execute(std::string& method, const at::Tensor& x, const at::Tensor& h) {
    if (method == "accum") return x + h;
    if (method == "sub_accum") return x - h;
    throw c10::Error("test_backend: method '" + method + "' does not return one Tensor", "");
  }

  /// forward(x, h) = (x + h, x - h).
  static std::tuple<at::Tensor, at::Tensor> execute(std::string& method,
                                                    torch_delegate::returning<std::tuple<at::Tensor, at::Tensor>>,
                                                    const at::Tensor& x, const at::Tensor& h) {
    if (method != "forward") throw c10::Error("test_backend: method '" + method + "' does not return two Tensors", "");
    return {x + h, x - h};
  }
};

using AvailableTestBackend = TestBackend<true>;
using UnavailableTestBackend = TestBackend<false>;

}  // namespace libtorch_scenarios
