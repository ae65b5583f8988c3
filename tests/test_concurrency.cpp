// One lowered module called from 8 threads, 10 000 calls each, every result checked: through the
// TorchScript interpreter and through the typed C++ path. Also run under ThreadSanitizer by
// tools/sanitize (see docs/errors.md#thread-safety).
#include "helpers.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>

#include <atomic>
#include <thread>

using namespace test_helpers;

TEST_CASE("8 threads x 10k calls on one lowered module give the right results") {
  auto lowered = torch_delegate::lower<demo::DemoBackend>(script("def forward(self, x, h):\n    return x + h - h + h\n"));
  auto typed = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  constexpr int threads = 8;
  constexpr int calls = 10000;
  std::atomic<int> wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      torch::jit::Module module = lowered.module();  // a handle to the same module object
      for (int i = 0; i < calls; ++i) {
        const at::Tensor x = torch::full({2}, float(t)), h = torch::full({2}, float(i % 7));
        const at::Tensor y = (i % 2) ? typed(x, h) : module.forward({x, h}).toTensor();
        if (!y.equal(x + h)) wrong.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  CHECK(wrong.load() == 0);
}
