// Partial lowering, what crosses a region's boundary: non-Tensor values, typed signatures, owned
// parameters, an Optional[Tensor] bias, other shapes than the example inputs' (re-planned).
#include "partition_backends.hpp"

using namespace test_helpers;
using namespace partition_backends;

TEST_CASE("partial lowering: a non-Tensor boundary value crosses into a backend with a generic execute") {
  const auto module = script(R"(
def forward(self, x, h):
    n = x.size(0)
    return x + n - h
)");
  const auto plan = torch_delegate::delegation_plan<ReferenceBackend>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].node_count == 2);
  const auto lowered = lowered_equal<ReferenceBackend>(module);
  CHECK(count_kind(lowered, "aten::size") == 1);
  CHECK(count_kind(lowered, "prim::CallMethod") == 1);
}

TEST_CASE("partial lowering: a backend with only typed signatures takes only regions that match one") {
  const auto module = script(R"(
def forward(self, x, h, z):
    a = x + h
    b = torch.relu(a)
    return b + h + z
)");
  const auto plan = torch_delegate::delegation_plan<TypedAdd>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  bool refused = false;
  for (const auto& kept : plan.methods[0].kept)
    refused |= kept.reason == torch_delegate::kept_reason::boundary_type &&
               kept.detail == "no execute signature takes (Any self, Tensor input_0, Tensor input_1, Tensor input_2) -> Tensor";
  CHECK(refused);
}

TEST_CASE("partial lowering: a backend that owns its parameters takes list and number attributes as constants") {
  // ConvNeXt's Permute reads its dims from self.dims: a List[int] attribute, not a constant.
  torch::jit::Module module("m");
  module.register_attribute("shape", c10::ListType::ofInts(), c10::List<std::int64_t>({2, -1}));
  module.register_attribute("factor", c10::FloatType::get(), 3.0);
  module.define(R"(
def forward(self, x):
    return torch.relu(x).view(self.shape) * self.factor
)");
  const at::Tensor x = torch::randn({4, 3});
  const at::Tensor want = module.forward({x}).toTensor();
  SUBCASE("owning: one region; the lowered region keeps the values it was lowered with") {
    const auto plan = torch_delegate::delegation_plan<OwningConvLikeBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::relu", "aten::view", "aten::mul"});
    torch::jit::Module lowered = torch_delegate::lower_partially<OwningConvLikeBackend>(module);
    CHECK(lowered.forward({x}).toTensor().equal(want));
    lowered.setattr("shape", c10::List<std::int64_t>({3, -1}));  // the list was copied into the region
    lowered.setattr("factor", 5.0);
    CHECK(lowered.forward({x}).toTensor().equal(want));
  }
  SUBCASE("not owning: the List[int] attribute read is a boundary, named") {
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    std::vector<std::string> kept;
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::boundary_type) kept.push_back(node.kind + ": " + node.detail);
    CHECK(kept == std::vector<std::string>{"aten::view: List[int] input"});
  }
}

TEST_CASE("partial lowering: an Optional[Tensor] (a Conv2d's bias) crosses into the region") {
  for (const bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    torch::jit::Module module("m");
    module.register_parameter("weight", torch::randn({4, 3, 3, 3}), false);
    module.register_attribute("bias", c10::OptionalType::create(c10::TensorType::get()),
                              with_bias ? c10::IValue(torch::randn({4})) : c10::IValue());
    module.define(R"(
def forward(self, x):
    return torch.relu(torch.conv2d(x, self.weight, self.bias, [1, 1], [1, 1], [1, 1], 1))
)");
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    REQUIRE(!plan.methods[0].kept.empty());  // the weight's read, at least: the loop checks something
    for (const auto& kept : plan.methods[0].kept) CHECK(kept.reason == torch_delegate::kept_reason::attribute_read);
    torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
    const at::Tensor x = torch::randn({1, 3, 6, 6});
    CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
    const std::string path = temp_path("optional_bias.pt");
    lowered.save(path);
    CHECK(torch::jit::load(path).forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
    std::remove(path.c_str());
  }
  SUBCASE("a typed execute takes it as std::optional<at::Tensor>; without one the region is refused, named") {
    torch::jit::Module module("m");
    module.register_parameter("weight", torch::randn({4, 3, 3, 3}), false);
    module.register_attribute("bias", c10::OptionalType::create(c10::TensorType::get()), c10::IValue(torch::randn({4})));
    module.define(R"(
def forward(self, x):
    return torch.conv2d(x, self.weight, self.bias, [1, 1], [1, 1], [1, 1], 1)
)");
    const auto plan = torch_delegate::delegation_plan<TypedConv>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    torch::jit::Module lowered = torch_delegate::lower_partially<TypedConv>(module);
    const at::Tensor x = torch::randn({1, 3, 6, 6});
    CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
    CHECK(typed_conv_calls.load() > 0);
    const auto refused = torch_delegate::delegation_plan<TypedConvTensorBias>(module);
    CHECK(refused.methods[0].regions.empty());
    bool named = false;
    for (const auto& kept : refused.methods[0].kept)
      named |= kept.kind == "aten::conv2d" && kept.reason == torch_delegate::kept_reason::boundary_type &&
               kept.detail ==
                   "no execute signature takes (Any self, Tensor input_0, Tensor input_1, Tensor? input_2) -> Tensor";
    CHECK(named);
  }
}

TEST_CASE("partial lowering: other shapes re-planned by the backend, a bounded cache per region") {
  const auto module = script("def forward(self, x, h):\n    return (x + h) * x\n");
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {torch::rand({2, 3}), torch::rand({2, 3})};
  options.on_other_shapes = torch_delegate::other_shapes::replan;
  options.max_replans = 2;
  auto lowered = torch_delegate::lower_partially<ReplanningBackend>(module, options);
  auto call = [&](std::int64_t rows) {
    const at::Tensor x = torch::rand({rows, 3}), h = torch::rand({rows, 3});
    CHECK(lowered.forward({x, h}).toTensor().allclose((x + h) * x));
  };
  ReplanningBackend::replans = 0;
  call(2);  // the recorded shape: no replan
  CHECK(ReplanningBackend::replans == 0);
  call(4);
  CHECK(ReplanningBackend::replans == 1);
  CHECK(ReplanningBackend::last_sizes == std::vector<std::int64_t>{4, 3});
  call(5);
  call(4);  // kept
  call(5);  // kept
  CHECK(ReplanningBackend::replans == 2);
  call(6);  // a third shape: the least recently used (4) is dropped
  call(5);
  CHECK(ReplanningBackend::replans == 3);
  call(4);  // planned again
  CHECK(ReplanningBackend::replans == 4);

  SUBCASE("saved and loaded: the bound and the re-planning come back") {
    std::stringstream file;
    lowered.save(file);
    auto loaded = torch::jit::load(file);
    ReplanningBackend::replans = 0;
    const at::Tensor x = torch::rand({7, 3});
    CHECK(loaded.forward({x, x}).toTensor().allclose((x + x) * x));
    CHECK(ReplanningBackend::replans == 1);
  }
  SUBCASE("a replan that fails names the backend, the region and the stage") {
    const at::Tensor x = torch::rand({13, 3});
    CHECK_THROWS_WITH(lowered.forward({x, x}), doctest::Contains("backend 'td_partition_replanning', method 'forward_region_0'"));
    CHECK_THROWS_WITH(lowered.forward({x, x}), doctest::Contains("replan threw: no plan for 13 rows"));
  }
  SUBCASE("without on_other_shapes = replan, another shape is the input-spec error") {
    options.on_other_shapes = torch_delegate::other_shapes::error;
    auto strict = torch_delegate::lower_partially<ReplanningBackend>(module, options);
    const at::Tensor x = torch::rand({4, 3});
    CHECK_THROWS_WITH(strict.forward({x, x}), doctest::Contains("must be Float [2, 3]"));
  }
  SUBCASE("a backend without replan is told so at lowering, with the alternatives") {
    CHECK_THROWS_WITH(torch_delegate::lower_partially<ReferenceBackend>(module, options),
                      doctest::Contains("on_other_shapes = replan: the backend does not re-plan regions"));
    options.max_replans = 0;
    CHECK_THROWS_WITH(torch_delegate::lower_partially<ReplanningBackend>(module, options),
                      doctest::Contains("max_replans = 0"));
  }
}
