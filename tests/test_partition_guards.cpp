// Partial lowering's guards: availability fallback (strict and fallback, partial and whole-method)
// and what the region's kept TorchScript path needs defined.
#include "partition_backends.hpp"

using namespace test_helpers;
using namespace partition_backends;

TEST_CASE("partial lowering: with fallback, a folded constant list is defined before the region that reads it") {
  auto module = script(R"(
def forward(self, x):
    y = torch.relu(x)
    return y.mean([0, 1], True)
)");
  torch_delegate::partition_options options;
  options.fallback_when_unavailable = true;
  torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module, options);
  lowered.get_method("forward").graph()->lint();
  const at::Tensor x = torch::randn({3, 4});
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  const std::string path = temp_path("fallback_folded.pt");
  lowered.save(path);
  CHECK(torch::jit::load(path).forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  std::remove(path.c_str());
}

TEST_CASE("availability table: strict (default) and fallback, partial and whole-method") {
  // The seed's host/target availability table: whether the backend is available when lowering,
  // when loading and when calling. Each cell in both modes, for a partial lowering (relu stays in
  // TorchScript) and a whole-method one (require_full: the method is one region).
  enum class cell { call_unavailable, load_unavailable, lowered_unavailable_loaded_available, never_available };
  const auto partial = script(R"(
def forward(self, x, h):
    a = x + h
    return torch.relu(a) * 2.0
)");
  const auto whole = script(R"(
def forward(self, x, h):
    return x + h
)");
  const at::Tensor x = torch::randn({5}), h = torch::randn({5});
  const std::string path = temp_path("availability.pt");
  for (const bool fallback : {false, true})
    for (const bool whole_method : {false, true})
      for (const cell which : {cell::call_unavailable, cell::load_unavailable, cell::lowered_unavailable_loaded_available,
                               cell::never_available}) {
        CAPTURE(fallback);
        CAPTURE(whole_method);
        CAPTURE(static_cast<int>(which));
        torch::jit::Module module = whole_method ? whole : partial;
        const at::Tensor expected = module.forward({x, h}).toTensor();
        torch_delegate::partition_options options;
        options.fallback_when_unavailable = fallback;
        options.require_full = whole_method;
        const bool available_at_lowering = which == cell::call_unavailable || which == cell::load_unavailable;
        torch::jit::Module lowered = [&] {
          availability scope(available_at_lowering);
          return torch_delegate::lower_partially<FallbackAdd>(module, options);
        }();
        if (whole_method) CHECK(count_kind(lowered, "aten::add") == (fallback ? 1 : 0));  // only the else branch
        // What a call gives: the backend's result (ran_in_backend), the original's (fallback), or
        // LibTorch's error (strict).
        auto call = [&](torch::jit::Module& target, bool ran_in_backend) {
          if (!ran_in_backend && !fallback) {
            CHECK(error_of([&] { target.forward({x, h}); }).find("Backend is not available.") != std::string::npos);
            return;
          }
          const int calls = fallback_add_calls;
          CHECK(target.forward({x, h}).toTensor().allclose(expected));
          CHECK(fallback_add_calls == calls + (ran_in_backend ? 1 : 0));
        };
        switch (which) {
          case cell::call_unavailable: {
            call(lowered, true);
            availability off(false);
            call(lowered, false);
            break;
          }
          case cell::load_unavailable: {
            lowered.save(path);
            availability off(false);
            if (!fallback) {
              CHECK(error_of([&] { torch::jit::load(path); }).find("Backend is not available.") != std::string::npos);
              break;
            }
            torch::jit::Module loaded = torch::jit::load(path);
            call(loaded, false);
            // Available again later: the handles were never compiled, so the original keeps running.
            availability on(true);
            call(loaded, false);
            break;
          }
          case cell::lowered_unavailable_loaded_available: {
            lowered.save(path);
            availability on(true);
            torch::jit::Module loaded = torch::jit::load(path);
            call(loaded, true);
            break;
          }
          case cell::never_available: {
            availability off(false);
            call(lowered, false);
            break;
          }
        }
      }
  std::remove(path.c_str());
}
