// The xnnpack backend under concurrent calls: one lowered CNN called from 4 threads, each call's
// result checked against TorchScript; some threads call with other sizes, so that regions are
// re-planned (other_shapes::replan) while others run. XNNPACK runtimes are not re-entrant: each
// region runs one call at a time (a mutex per region), and the framework's cache of re-planned
// handles has its own lock. Run by meson test and, under ThreadSanitizer, by tools/sanitize
// (XNNPACK and pthreadpool are not instrumented: the check covers the backend's and the
// framework's own state: staging and output buffers, the bound pointers, the replan cache).
#include "helpers.hpp"

#include <torch_delegate/partition.hpp>
#include <xnnpack_backend.hpp>

#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <thread>

using namespace test_helpers;

namespace {

/// conv-BN-ReLU, a depthwise conv, a residual add, global pooling and a linear: one region.
torch::jit::Module small_cnn() {
  torch::manual_seed(3);
  torch::jit::Module module("cnn");
  module.register_parameter("w1", torch::randn({8, 3, 3, 3}) * 0.3, false);
  module.register_parameter("b1", torch::randn({8}) * 0.1, false);
  module.register_parameter("dw", torch::randn({8, 1, 3, 3}) * 0.3, false);
  module.register_parameter("fc", torch::randn({5, 8}) * 0.3, false);
  module.register_parameter("fb", torch::randn({5}) * 0.1, false);
  module.define(R"(
def forward(self, x):
    y = torch.relu(torch.conv2d(x, self.w1, self.b1, [2, 2], [1, 1]))
    z = torch.clamp(torch.conv2d(y, self.dw, None, [1, 1], [1, 1], [1, 1], 8), 0.0, 6.0) + y
    p = torch.flatten(torch.adaptive_avg_pool2d(z, [1, 1]), 1)
    return torch.linear(p, self.fc, self.fb)
)");
  module.eval();
  return module;
}

}  // namespace

TEST_CASE("xnnpack: 4 threads call one lowered CNN, some with other sizes (re-planned), every result right") {
  // TD_XNNPACK_THREADS: ATen's and the pool's thread count (2 by default). tools/sanitize sets 1:
  // libgomp and pthreadpool are not instrumented, so ThreadSanitizer cannot see how their
  // workers synchronise, and one thread starts none.
  const char* threads_variable = std::getenv("TD_XNNPACK_THREADS");
  at::set_num_threads(threads_variable ? std::atoi(threads_variable) : 2);
  const torch::jit::Module original = small_cnn();
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {torch::rand({1, 3, 16, 16})};
  options.on_other_shapes = torch_delegate::other_shapes::replan;
  options.max_replans = 2;
  REQUIRE(torch_delegate::delegation_plan<xnnpack_delegate::XnnpackBackend>(original, options).methods.at(0).regions.size() == 1);
  torch::jit::Module lowered = torch_delegate::lower_partially<xnnpack_delegate::XnnpackBackend>(original, options);

  // Inputs of 4 sizes (the recorded one and 3 others: more than max_replans, so plans are
  // dropped and made again while other threads run), their expected outputs computed first.
  const std::vector<std::vector<std::int64_t>> sizes{{1, 3, 16, 16}, {2, 3, 16, 16}, {1, 3, 20, 12}, {3, 3, 9, 9}};
  std::vector<at::Tensor> inputs, wanted;
  for (int k = 0; k < 8; ++k) {
    inputs.push_back(torch::rand(sizes[static_cast<std::size_t>(k) % sizes.size()]));
    wanted.push_back(torch::jit::Module(original).forward({inputs.back()}).toTensor());
  }
  constexpr int threads = 4;
  constexpr int calls = 150;
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      torch::jit::Module module = lowered;  // a handle to the same module object
      for (int i = 0; i < calls; ++i) {
        // Threads 0 and 1 call with the recorded size only; 2 and 3 go through all four sizes.
        const std::size_t k = t < 2 ? static_cast<std::size_t>(4 * (i % 2)) : static_cast<std::size_t>(t + i) % inputs.size();
        const at::Tensor y = module.forward({inputs[k]}).toTensor();
        if (!y.allclose(wanted[k], 1e-4, 1e-5)) wrong.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  CHECK(wrong.load() == 0);
}
