// Partial lowering's guards: availability fallback (strict and fallback, partial and whole-method),
// what the region's kept TorchScript path needs defined, and shape folding's check of the
// arguments (what a method computes from its example inputs' shapes alone, computed at lowering).
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

namespace {

// Swin's shifted-window attention in small: padding to whole windows, and a mask built from the
// padded size alone (new_zeros, slice writes, masked_fill) that a region adds to scores.
const char* const windowed_source = R"(
def forward(self, x):
    B, H, W, C = x.shape
    pad_r = (4 - W % 4) % 4
    pad_b = (4 - H % 4) % 4
    y = torch.constant_pad_nd(x, [0, 0, 0, pad_r, 0, pad_b])
    _, pH, pW, _ = y.shape
    mask = y.new_zeros((pH, pW))
    count = 0
    for h in ((0, -4), (-4, -2), (-2, pH)):
        for w in ((0, -4), (-4, -2), (-2, pW)):
            mask[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    mask = mask.view(pH // 4, 4, pW // 4, 4).permute(0, 2, 1, 3).reshape(-1, 16)
    mask = mask.unsqueeze(1) - mask.unsqueeze(2)
    mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
    a = y.view(B, pH // 4, 4, pW // 4, 4, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, C)
    scores = torch.matmul(a, a.transpose(1, 2))
    return scores.view(B, -1, 16, 16) + mask
)";

// The top-level if shape folding puts around a method, or nullptr.
torch::jit::Node* specialization_of(const torch::jit::Module& lowered) {
  auto graph = lowered.get_method("forward").graph();
  torch::jit::Node* found = nullptr;
  for (torch::jit::Node* node : graph->nodes())
    if (node->kind() == c10::prim::If && node->outputs().size() == graph->outputs().size()) found = node;
  return found;
}

std::size_t count_in(torch::jit::Block* block, const std::string& kind) {
  std::size_t count = 0;
  for (torch::jit::Node* node : block->nodes()) {
    count += node->kind().toQualString() == kind;
    for (torch::jit::Block* nested : node->blocks()) count += count_in(nested, kind);
  }
  return count;
}

}  // namespace

TEST_CASE("shape folding: what a method computes from its arguments' shapes alone is computed at lowering") {
  auto module = script(windowed_source);
  const at::Tensor x = torch::randn({2, 6, 7, 3});
  for (const auto mode : {torch_delegate::other_shapes::error, torch_delegate::other_shapes::torchscript}) {
    CAPTURE(static_cast<int>(mode));
    torch_delegate::partition_options options;
    options.example_inputs["forward"] = {x};
    options.on_other_shapes = mode;
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    lowered.get_method("forward").graph()->lint();
    CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
    // if <x is Float [2, 6, 7, 3]>: <the region's call with the mask a constant> else: <as it was>
    torch::jit::Node* specialized = specialization_of(lowered);
    REQUIRE(specialized != nullptr);
    CHECK(count_in(specialized->blocks()[0], "aten::masked_fill") == 0);
    CHECK(count_in(specialized->blocks()[0], "aten::new_zeros") == 0);
    CHECK(count_in(specialized->blocks()[0], "prim::CallMethod") == 1);
    CHECK(count_in(specialized->blocks()[1], "aten::masked_fill") == 2);
    // Saved and loaded: the constants with it.
    const std::string path = temp_path("shape_folding.pt");
    lowered.save(path);
    CHECK(torch::jit::load(path).forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
    std::remove(path.c_str());
    // Other values of the same shape: the same mask, computed from the shape only.
    const at::Tensor other_values = torch::randn({2, 6, 7, 3});
    CHECK(lowered.forward({other_values}).toTensor().allclose(module.forward({other_values}).toTensor()));
    // Another shape runs the method as it was: the region's TorchScript, or its input-spec error.
    const at::Tensor other_shape = torch::randn({1, 9, 5, 3});
    if (mode == torch_delegate::other_shapes::torchscript)
      CHECK(lowered.forward({other_shape}).toTensor().allclose(module.forward({other_shape}).toTensor()));
    else {
      CHECK_THROWS_WITH(lowered.forward({other_shape}), doctest::Contains("its input spec when the method was lowered"));
      CHECK_THROWS_WITH(lowered.forward({other_shape}), doctest::Contains("To serve other shapes, lower with on_other_shapes="));
    }
  }
  SUBCASE("fold_shapes = false leaves the method as partitioned") {
    torch_delegate::partition_options options;
    options.example_inputs["forward"] = {x};
    options.fold_shapes = false;
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    CHECK(specialization_of(lowered) == nullptr);
    CHECK(count_kind(lowered, "aten::masked_fill") == 2);
    CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  }
  SUBCASE("without example inputs nothing is folded") {
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, {});
    CHECK(specialization_of(lowered) == nullptr);
  }
}

TEST_CASE("shape folding: a tensor it computes at lowering stays out of regions, and the report says so") {
  // ReferenceBackend takes subs: without folding, the mask's `mask.unsqueeze(1) - mask.unsqueeze(2)`
  // would be a region computed on every call, and what reads it could not fold.
  auto module = script(windowed_source);
  const at::Tensor x = torch::randn({2, 6, 7, 3});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  const auto computed = [](const torch_delegate::method_delegation& method) {
    std::vector<std::string> kinds;
    for (const auto& kept : method.kept)
      if (kept.reason == torch_delegate::kept_reason::computed_at_lowering) kinds.push_back(kept.kind);
    return kinds;
  };
  torch::jit::Module lowered = torch_delegate::lower_partially<ReferenceBackend>(module, options);
  const auto report = torch_delegate::delegation_report_data_of(lowered);
  REQUIRE(report);
  const std::vector<std::string> kinds = computed(report->methods[0]);
  CHECK(std::count(kinds.begin(), kinds.end(), "aten::sub") == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), "aten::masked_fill") == 2);
  CHECK_CONTAINS(report->to_string(), "kept aten::masked_fill: computed at lowering (from the example inputs' shapes)");
  torch::jit::Node* specialized = specialization_of(lowered);
  REQUIRE(specialized != nullptr);
  CHECK(count_in(specialized->blocks()[0], "aten::masked_fill") == 0);
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  // A plan says the same; without folding the sub is delegated.
  CHECK(computed(torch_delegate::delegation_plan<ReferenceBackend>(module, options).methods[0]) == kinds);
  options.fold_shapes = false;
  CHECK(computed(torch_delegate::delegation_plan<ReferenceBackend>(module, options).methods[0]).empty());
}

TEST_CASE("shape folding: a padding of zero and a slice of a whole dimension copy nothing") {
  // At 8x8 the windows need no padding: constant_pad_nd by zero copies, which contiguous() of its
  // input does only where that is not contiguous.
  auto module = script(windowed_source);
  const at::Tensor x = torch::randn({2, 8, 8, 3});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
  torch::jit::Node* specialized = specialization_of(lowered);
  REQUIRE(specialized != nullptr);
  CHECK(count_in(specialized->blocks()[0], "aten::constant_pad_nd") == 0);
  CHECK(count_in(specialized->blocks()[1], "aten::constant_pad_nd") == 1);
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  const at::Tensor strided = torch::randn({2, 3, 8, 8}).permute({0, 2, 3, 1});  // the same sizes, not contiguous
  CHECK(lowered.forward({strided}).toTensor().allclose(module.forward({strided}).toTensor()));
  SUBCASE("a padding the method returns stays a copy") {
    auto returns_padding = script(std::string(windowed_source).replace(
        std::string(windowed_source).find("return scores"), std::string("return scores.view(B, -1, 16, 16) + mask").size(),
        "return scores.view(B, -1, 16, 16) + mask, y"));
    torch::jit::Module returning = torch_delegate::lower_partially<AddsOnly>(returns_padding, options);
    const at::Tensor padded = returning.forward({x}).toTupleRef().elements()[1].toTensor();
    CHECK(padded.equal(x));
    CHECK(padded.data_ptr() != x.data_ptr());
  }
  SUBCASE("a padding written to stays a copy: the argument is not written") {
    auto writes_padding = script(std::string(windowed_source).replace(
        std::string(windowed_source).find("    _, pH, pW, _"), 0, "    y[0:1, 0:1].add_(1.0)\n"));
    torch::jit::Module writing = torch_delegate::lower_partially<AddsOnly>(writes_padding, options);
    const at::Tensor before = x.clone();
    CHECK(writing.forward({x}).toTensor().allclose(writes_padding.forward({before.clone()}).toTensor()));
    CHECK(x.equal(before));
  }
}

TEST_CASE("shape folding: what it must not fold") {
  const at::Tensor x = torch::randn({2, 6, 7, 3});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  options.on_other_shapes = torch_delegate::other_shapes::torchscript;
  SUBCASE("a tensor the method returns (its caller may write to it): computed each call") {
    // The same method returning the mask too.
    auto module = script(std::string(windowed_source).replace(std::string(windowed_source).find("return scores"),
                                                           std::string("return scores.view(B, -1, 16, 16) + mask").size(),
                                                           "return scores.view(B, -1, 16, 16) + mask, mask"));
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    auto first = lowered.forward({x}).toTupleRef().elements();
    const at::Tensor mask = first[1].toTensor().clone();
    first[1].toTensor().add_(1000.0);  // the caller writes to what it got
    auto second = lowered.forward({x}).toTupleRef().elements();
    CHECK(second[1].toTensor().equal(mask));
    CHECK(second[0].toTensor().allclose(module.forward({x}).toTupleRef().elements()[0].toTensor()));
  }
  SUBCASE("a size that comes from a tensor's values (nonzero): computed each call") {
    auto module = script(R"(
def forward(self, x):
    n = torch.nonzero(x > 0).size(0)
    z = x.new_zeros((n + 1, 2))
    z[0:1, 0:1] = 1.0
    z[1:2, 0:1] = 2.0
    z[0:1, 1:2] = 3.0
    z[-1:, 1:2] = 4.0
    z = z.unsqueeze(0) - z.unsqueeze(1)
    z = z.masked_fill(z != 0, -1.0).masked_fill(z == 0, 1.0)
    w = z.sum() + float(n)
    return x + w
)");
    const at::Tensor y = torch::randn({2, 6, 7, 3});
    torch_delegate::partition_options by_values = options;
    by_values.example_inputs["forward"] = {y};
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, by_values);
    for (int i = 0; i < 3; ++i) {
      const at::Tensor same_shape = torch::randn({2, 6, 7, 3});
      CHECK(lowered.forward({same_shape}).toTensor().allclose(module.forward({same_shape}).toTensor()));
    }
  }
  // The windowed model (enough to fold) with `extra` before its return, returning `result` too.
  const auto with = [](const std::string& extra, const std::string& result) {
    std::string source = windowed_source;
    const std::string last = "    return scores.view(B, -1, 16, 16) + mask";
    source.replace(source.find(last), last.size(), extra + last + ", " + result);
    return script(source);
  };
  const auto second = [](torch::jit::Module& module, const at::Tensor& x) {
    return module.forward({x}).toTupleRef().elements()[1].toTensor();
  };
  SUBCASE("a folded write after the rest read what it writes: the rest reads it before") {
    auto module = with("    m = x.new_zeros((B, H, W, C))\n    z = x - m\n    m.fill_(1.0)\n", "z + (x - m) * 10.0");
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    CHECK(second(lowered, x).allclose(second(module, x)));
  }
  SUBCASE("random numbers (a generator's node): drawn each call") {
    auto module = with("    noise = x.new_zeros((4,)).normal_()\n", "noise");
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    CHECK_FALSE(second(lowered, x).equal(second(lowered, x)));
  }
  SUBCASE("a size from a boolean mask's index: computed each call") {
    auto module = with("    n = x[x > 0].size(0)\n    k = x.new_zeros((n, 2))\n", "k.sum(0) + float(n)");
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    for (int i = 0; i < 3; ++i) {
      const at::Tensor same_shape = torch::randn({2, 6, 7, 3});
      CHECK(second(lowered, same_shape).allclose(second(module, same_shape)));
    }
  }
  SUBCASE("the rank of a tensor unsqueezed in place later: read as it is then") {
    auto module = with("    t = x - 1.0\n    d = t.dim()\n    t.unsqueeze_(0)\n", "t.sum() * 0.0 + float(d)");
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    CHECK(second(lowered, x).item<double>() == 4.0);
    torch_delegate::partition_options unfolded = options;
    unfolded.fold_shapes = false;
    torch::jit::Module plain = torch_delegate::lower_partially<AddsOnly>(module, unfolded);
    CHECK(second(plain, x).item<double>() == 4.0);
  }
  SUBCASE("a folded tensor the rest writes to: computed each call") {
    auto module = script(std::string(windowed_source).replace(
        std::string(windowed_source).find("    scores ="), 0, "    mask[0:1].add_(x[0, 0, 0, 0])\n"));
    torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
    for (int i = 0; i < 3; ++i) {
      const at::Tensor same_shape = torch::randn({2, 6, 7, 3});
      CHECK(lowered.forward({same_shape}).toTensor().allclose(module.forward({same_shape}).toTensor()));
    }
  }
}

TEST_CASE("shape folding: a value of an Optional type folds to a constant of its own type") {
  // F.interpolate's `output_size: Optional[List[int]]`, an if's result: a constant typed int[]?
  // does not print, so the module did not save ("constant literal not supported for: int[]?";
  // torchvision's segmentation models, once their in-place activations were made out-of-place).
  auto module = script(R"(
def forward(self, x):
    h = x.size(2)
    w = x.size(3)
    a = h + w
    b = a * 2 - h
    c = b + w * 3
    d = c - a + b
    e = d * 2 - c
    f = e + a - b
    size: Optional[List[int]] = None
    if h > 0:
        size = [h * 2 + f - f, w * 2 + e - e]
    return torch.upsample_nearest2d(x + x, size, None)
)");
  const at::Tensor x = torch::randn({1, 2, 3, 5});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  torch::jit::Module lowered = torch_delegate::lower_partially<AddsOnly>(module, options);
  REQUIRE(specialization_of(lowered) != nullptr);
  CHECK(count_in(specialization_of(lowered)->blocks()[0], "aten::size") == 0);
  CHECK(lowered.forward({x}).toTensor().equal(module.forward({x}).toTensor()));
  const std::string path = temp_path("shape_folding_optional.pt");
  lowered.save(path);
  CHECK(torch::jit::load(path).forward({x}).toTensor().equal(module.forward({x}).toTensor()));
  std::remove(path.c_str());
}
