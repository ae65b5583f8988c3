// The onednn backend under concurrent calls of mixed shapes: one lowered CNN (its view's sizes
// computed from x.size(), so that a new batch computes them again) called from 4 threads, two at
// the lowering's shape, two through three other shapes. Each new shape is re-planned once
// (other_shapes::automatic; the framework keeps 2 re-planned handles, so handles are dropped and
// made again while others run, and the region's plan cache serves them), and every result is
// checked against TorchScript's. Run by meson test and, under ThreadSanitizer, by tools/sanitize
// (its test case alone, on one OpenMP thread: libgomp's workers synchronise in uninstrumented code).
#include "onednn_test_helpers.hpp"

#include <torch_delegate/partition.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <thread>

using namespace onednn_delegate;

TEST_CASE("onednn: 4 threads call one lowered CNN at mixed shapes, each new shape planned once, every result right") {
  const char* threads_variable = std::getenv("TD_ONEDNN_TEST_THREADS");
  at::set_num_threads(threads_variable ? std::atoi(threads_variable) : 2);
  torch::manual_seed(5);
  torch::jit::Module original("cnn");
  original.register_parameter("w1", torch::randn({8, 3, 3, 3}) * 0.3, false);
  original.register_parameter("b1", torch::randn({8}) * 0.1, false);
  original.register_parameter("w2", torch::randn({8, 8, 1, 1}) * 0.3, false);
  original.register_parameter("fc", torch::randn({5, 8}) * 0.3, false);
  original.register_parameter("fb", torch::randn({5}) * 0.1, false);
  original.define(R"(
def forward(self, x):
    y = torch.relu(torch.conv2d(x, self.w1, self.b1, [2, 2], [1, 1]))
    z = torch.conv2d(y, self.w2) + y
    b, c, h, w = z.size()
    p = torch.adaptive_avg_pool2d(z, [1, 1]).view(b, c)
    return torch.linear(p, self.fc, self.fb)
)");
  original.eval();
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {torch::rand({1, 3, 16, 16})};
  options.max_replans = 2;  // fewer than the shapes: handles dropped and re-planned while others run
  REQUIRE(options.on_other_shapes == torch_delegate::other_shapes::automatic);  // the default
  REQUIRE(torch_delegate::delegation_plan<OnednnBackend>(original, options).methods.at(0).regions.size() == 1);
  torch::jit::Module lowered = torch_delegate::lower_partially<OnednnBackend>(original, options);

  const std::vector<std::vector<std::int64_t>> sizes{{1, 3, 16, 16}, {2, 3, 16, 16}, {1, 3, 20, 12}, {3, 3, 9, 9}};
  std::vector<at::Tensor> inputs, wanted;
  for (int k = 0; k < 8; ++k) {
    inputs.push_back(torch::rand(sizes[static_cast<std::size_t>(k) % sizes.size()]));
    wanted.push_back(torch::jit::Module(original).forward({inputs.back()}).toTensor());
  }
  constexpr int threads = 4, calls = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      torch::jit::Module module = lowered;  // a handle to the same module object
      for (int i = 0; i < calls; ++i) {
        // Threads 0 and 1 call at the lowering's shape; 2 and 3 go through all four.
        const std::size_t k = t < 2 ? static_cast<std::size_t>(4 * (i % 2)) : static_cast<std::size_t>(t + i) % inputs.size();
        const at::Tensor y = module.forward({inputs[k]}).toTensor();
        // To float32 rounding of three sums in a chain (the 3x3 convolution's 27 products, the
        // 1x1's 8, the linear's 8), as equal_to_rounding bounds it (no doctest macro in a thread).
        const double largest = std::max(wanted[k].abs().max().item<double>(), 1.0);
        const double difference = y.sizes() == wanted[k].sizes() ? (y - wanted[k]).abs().max().item<double>() : 1e30;
        if (!(difference <= 3 * 27 * largest / (1 << 24))) wrong.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  CHECK(wrong.load() == 0);
}
