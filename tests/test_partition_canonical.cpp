// Partial lowering on the canonical graph: mutation that can be observed, in-place ops made
// out-of-place, constant lists folded, frozen modules.
#include "partition_backends.hpp"

using namespace test_helpers;
using namespace partition_backends;

TEST_CASE("partial lowering: a mutation that can be observed keeps its node in TorchScript") {
  SUBCASE("a write to the method's argument: the caller sees it") {
    auto module = script(R"(
def forward(self, x):
    x.relu_()
    return x * 2.0
)");
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    REQUIRE(!plan.methods[0].kept.empty());
    CHECK(plan.methods[0].kept[0].kind == "aten::relu_");
    CHECK(plan.methods[0].kept[0].reason == torch_delegate::kept_reason::mutation_or_aliasing);
    CHECK(plan.methods[0].kept[0].detail == "writes to its input");
    torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
    const at::Tensor x = torch::randn({3});
    at::Tensor x_lowered = x.clone(), x_original = x.clone();
    CHECK(lowered.forward({x_lowered}).toTensor().allclose(module.forward({x_original}).toTensor()));
    CHECK(x_lowered.equal(x_original));  // the write happened in both
    CHECK(x_lowered.equal(x.relu()));
  }
  SUBCASE("a write through a view that is read later: removing it would change the result") {
    const auto module = script(R"(
def forward(self, x):
    y = x * 2.0
    z = y.view([-1])
    y.relu_()
    return z + 1.0
)");
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    bool kept = false;
    for (const auto& node : plan.methods[0].kept)
      kept |= node.kind == "aten::relu_" && node.reason == torch_delegate::kept_reason::mutation_or_aliasing;
    CHECK(kept);
    lowered_equal<ConvLikeBackend>(module, {}, 1);
  }
}

TEST_CASE("partial lowering: an in-place op whose out-of-place form computes something else stays, with its reason") {
  SUBCASE("a comparison in place keeps the tensor's dtype; out of place it makes a bool tensor") {
    auto module = script(R"(
def forward(self, x):
    m = torch.sigmoid(x)
    m.gt_(0.5)
    return m + 1.0
)");
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    bool kept = false;
    for (const auto& node : plan.methods[0].kept)
      kept |= node.kind == "aten::gt_" && node.reason == torch_delegate::kept_reason::mutation_or_aliasing;
    CHECK(kept);
    torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
    const at::Tensor x = torch::randn({3, 4});
    const at::Tensor got = lowered.forward({x}).toTensor(), expected = module.forward({x}).toTensor();
    CHECK(static_cast<int>(got.scalar_type()) == static_cast<int>(expected.scalar_type()));
    CHECK(got.equal(expected));
  }
  SUBCASE("an add in place cannot broadcast its target; out of place it can") {
    auto module = script(R"(
def forward(self, x, w):
    y = x * 1.0
    y.add_(w)
    return y
)");
    torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
    const at::Tensor x = torch::randn({2, 1}), w = torch::randn({2, 3});
    CHECK_THROWS(module.forward({x, w}));
    CHECK_THROWS(lowered.forward({x, w}));
    const at::Tensor same = torch::randn({2, 3});
    CHECK(lowered.forward({x.expand({2, 3}).contiguous(), same}).toTensor().allclose(
        module.forward({x.expand({2, 3}).contiguous(), same}).toTensor()));
  }
}

TEST_CASE("partial lowering: a residual add in place of two tensors of one dtype becomes out-of-place (ResNet's out += identity)") {
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::randn({3, 3, 3, 3}), false);
  module.define(R"(
def forward(self, x):
    out = torch.conv2d(x, self.weight, None, [1, 1], [1, 1], [1, 1], 1)
    out.relu_()
    out += x
    return torch.relu(out)
)");
  const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::conv2d", "aten::relu", "aten::add"});
  REQUIRE(!plan.methods[0].kept.empty());  // the weight's read, at least: the loop checks something
  for (const auto& kept : plan.methods[0].kept) CHECK(kept.reason == torch_delegate::kept_reason::attribute_read);
  torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
  const at::Tensor x = torch::randn({1, 3, 6, 6});
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
}

TEST_CASE("partial lowering: an in-place op on a fresh tensor becomes out-of-place (it no longer keeps its producer)") {
  // As ReLU6(inplace=True) after a conv in MobileNetV2 (hardtanh_ on the conv's output; its test
  // on torchvision's model is tests/python/test_torchvision.py).
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::randn({4, 3, 3, 3}), false);
  module.define(R"(
def forward(self, x):
    y = torch.conv2d(x, self.weight, None, [1, 1], [1, 1], [1, 1], 1)
    y.clamp_(0.0, 6.0)
    return y + 1.0
)");
  const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::conv2d", "aten::clamp", "aten::add"});
  REQUIRE(plan.methods[0].kept.size() == 1);  // the weight's read
  CHECK(plan.methods[0].kept[0].reason == torch_delegate::kept_reason::attribute_read);
  torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
}

TEST_CASE("partial lowering: constant int[] arguments are folded; a list stays inside its region") {
  SUBCASE("conv's stride, padding and dilation lists are constants of the canonical graph") {
    torch::jit::Module module("m");
    module.register_parameter("weight", torch::randn({4, 3, 3, 3}), false);
    module.define(R"(
def forward(self, x):
    return torch.relu(torch.conv2d(x, self.weight, None, [2, 2], [1, 1], [1, 1], 1))
)");
    const auto plan = torch_delegate::delegation_plan<ConvOnlyBackend>(module);  // takes no ListConstruct
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::conv2d", "aten::relu"});
    torch::jit::Module lowered = torch_delegate::lower_partially<ConvOnlyBackend>(module);
    const at::Tensor x = torch::randn({1, 3, 9, 9});
    CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
  }
  SUBCASE("a list built from a run-time int, used only inside the region, does not end it") {
    const auto module = script(R"(
def forward(self, x):
    n = x.size(0)
    y = x.view([n, -1])
    return torch.relu(y) * 2.0
)");
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds ==
          std::vector<std::string>{"prim::ListConstruct", "aten::view", "aten::relu", "aten::mul"});
    for (const auto& kept : plan.methods[0].kept) CHECK(kept.reason != torch_delegate::kept_reason::boundary_type);
    lowered_equal<ConvLikeBackend>(module, {}, 1);
  }
  SUBCASE("a list that leaves the region keeps its maker in TorchScript, and cuts the region there") {
    auto module = script(R"(
def forward(self, x):
    n = x.size(0)
    a = torch.relu(x)
    shape = [n, -1]
    b = a.view(shape) * 2.0
    return b + x.reshape(shape)
)");
    // The list is read outside (reshape): its maker stays, and so the view that reads it.
    const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
    std::vector<std::string> kept;
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::boundary_type) kept.push_back(node.kind + ": " + node.detail);
    CHECK(kept == std::vector<std::string>{"prim::ListConstruct: List[int] output", "aten::view: List[int] input"});
    REQUIRE(plan.methods[0].regions.size() == 3);  // relu | mul | the last add
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::relu"});
    CHECK(plan.methods[0].regions[1].kinds == std::vector<std::string>{"aten::mul"});
    lowered_equal<ConvLikeBackend>(module, {}, 1);
  }
}

TEST_CASE("partial lowering: a frozen module (inlined call stacks whose functions are gone)") {
  torch::jit::Module parent = nested_modules("x + h - x");
  parent.eval();
  const torch::jit::Module frozen = torch::jit::freeze(parent);
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(frozen);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].node_count == 4);
  CHECK(plan.methods[0].regions[0].submodule.empty());  // the parent's add is in it
  const auto lowered = lowered_equal(frozen);
  const auto report = torch_delegate::delegation_report_data_of(lowered);
  REQUIRE(report);
  CHECK(report->methods[0].regions[0].node_count == 4);
}

TEST_CASE("partial lowering: an attribute the method assigns stays a read, and lowering leaves it as it was") {
  // torchvision's MultiScaleRoIAlign sets its scales on its first call: folded to their value at
  // lowering (None), the example run raised; run on example inputs, the lowered module kept the
  // example's scales, where the original's first call sets its own.
  torch::jit::Module module("m");
  module.register_attribute("scale", c10::OptionalType::create(c10::FloatType::get()), c10::IValue());
  module.define(R"(
def forward(self, x):
    if self.scale is None:
        self.scale = float(x.size(-1))
    scale = self.scale
    assert scale is not None, "scale should not be None"
    return torch.relu(x) * scale
)");
  const at::Tensor x = torch::randn({1, 3, 6, 6}), y = torch::randn({1, 3, 9, 9});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  options.on_other_shapes = torch_delegate::other_shapes::torchscript;
  SUBCASE("lowered") {
    torch::jit::Module lowered = torch_delegate::lower_partially<OwningConvLikeBackend>(module, options);
    CHECK(module.attr("scale").isNone());   // the user's module
    CHECK(lowered.attr("scale").isNone());  // the lowered one: its first call sets it
    const at::Tensor expected = module.clone().forward({y}).toTensor();  // a first call with y
    CHECK(lowered.forward({y}).toTensor().allclose(expected));
    CHECK(lowered.attr("scale").toDouble() == 9.0);
    torch::jit::Module reference = module.clone();
    reference.forward({y});
    CHECK(lowered.forward({x}).toTensor().allclose(reference.forward({x}).toTensor()));  // y's scale, as the original
    const std::string path = temp_path("assigned_attribute.pt");
    lowered.save(path);
    torch::jit::Module loaded = torch::jit::load(path);
    CHECK(loaded.forward({y}).toTensor().allclose(expected));
    std::remove(path.c_str());
  }
  SUBCASE("a plan") {
    const auto plan = torch_delegate::delegation_plan<OwningConvLikeBackend>(module, options);
    REQUIRE(plan.methods.size() == 1);
    CHECK(!plan.methods[0].regions.empty());
    CHECK(module.attr("scale").isNone());
  }
  SUBCASE("set before lowering: kept as it was") {
    module.setattr("scale", 2.0);
    torch::jit::Module lowered = torch_delegate::lower_partially<OwningConvLikeBackend>(module, options);
    CHECK(module.attr("scale").toDouble() == 2.0);
    CHECK(lowered.attr("scale").toDouble() == 2.0);
    CHECK(lowered.forward({y}).toTensor().allclose(module.forward({y}).toTensor()));
  }
}

TEST_CASE("partial lowering: a lookup of a constant key in a dict attribute folds (IntermediateLayerGetter)") {
  // torchvision's IntermediateLayerGetter, its loop over submodules unrolled: `if name in
  // self.return_layers: out[self.return_layers[name]] = x` after each one. Left, each if split the
  // backbone into a region per block (FasterRCNN's MobileNetV3: 21 regions, 7 folded).
  // A module with `return_layers` = {"b": "out"} and `forward` from `body`.
  const auto with_layers = [](const std::string& body) {
    torch::jit::Module made("m");
    c10::Dict<std::string, std::string> layers;
    layers.insert("b", "out");
    made.register_attribute("return_layers", c10::DictType::create(c10::StringType::get(), c10::StringType::get()), layers);
    made.define(R"(
def forward(self, x):
    out: Dict[str, Tensor] = {}
    y = torch.relu(x)
    if "a" in self.return_layers:
        out[self.return_layers["a"]] = y
)" + body);
    return made;
  };
  torch::jit::Module module = with_layers(R"(    z = torch.sigmoid(y)
    if "b" in self.return_layers:
        out[self.return_layers["b"]] = z
    return out
)");
  const at::Tensor x = torch::randn({1, 3, 6, 6});
  const auto plan = torch_delegate::delegation_plan<OwningConvLikeBackend>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::relu", "aten::sigmoid"});
  torch::jit::Module lowered = torch_delegate::lower_partially<OwningConvLikeBackend>(module);
  CHECK(count_kind(lowered, "aten::__contains__") == 0);
  const auto expected = module.forward({x}).toGenericDict(), got = lowered.forward({x}).toGenericDict();
  REQUIRE(got.size() == 1);
  CHECK(got.at("out").toTensor().allclose(expected.at("out").toTensor()));

  SUBCASE("a dict the method changes is not folded") {
    torch::jit::Module changing = with_layers(R"(    self.return_layers["a"] = "first"
    return out
)");
    torch::jit::Module changed = torch_delegate::lower_partially<OwningConvLikeBackend>(changing.clone());
    CHECK(count_kind(changed, "aten::__contains__") == 1);
    CHECK(changed.forward({x}).toGenericDict().size() == 0);
    CHECK(changed.forward({x}).toGenericDict().size() == 1);  // the first call added "a"
  }
}

TEST_CASE("partial lowering: a new tensor that goes into a container joins a region, though a container's tensor is written") {
  // Alias analysis takes every tensor put into a container to alias every other once one of them
  // is written: RetinaNet's head convolutions, appended to lists, were each kept as "written to
  // later". A write to a new tensor writes what the region returns, a new tensor too.
  auto module = script(R"(
def forward(self, x):
    outs: List[Tensor] = []
    y = torch.relu(x)
    outs.append(y)
    z = x * 2.0
    outs.append(z)
    outs[1].add_(1.0)
    return outs
)");
  const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(module);
  std::size_t delegated = 0;
  for (const auto& formed : plan.methods[0].regions) delegated += formed.node_count;
  CHECK(delegated == 2);  // relu and mul
  for (const auto& kept : plan.methods[0].kept) CHECK(kept.kind != "aten::mul");
  torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
  const at::Tensor x = torch::randn({3, 4});
  const auto want = module.forward({x}).toList(), got = lowered.forward({x}).toList();
  REQUIRE(got.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(got.get(i).toTensor().allclose(want.get(i).toTensor()));

  SUBCASE("type_as returns its input itself: a write to its result is a write to the input") {
    // (makes_new_tensors leaves type_as out by name: its schema marks no alias.)
    auto aliasing = script(R"(
def forward(self, x, y):
    a = x * 1.0
    z = a.type_as(y)
    z.relu_()
    return a * 2.0
)");
    const at::Tensor y = torch::randn({3, 4});
    torch_delegate::partition_options options;
    options.example_inputs["forward"] = {x, y};
    options.fold_shapes = false;  // the method as partitioned, its nodes at the top level
    torch::jit::Module lowered_aliasing = torch_delegate::lower_partially<ConvLikeBackend>(aliasing, options);
    CHECK(lowered_aliasing.forward({x, y}).toTensor().equal(aliasing.forward({x, y}).toTensor()));  // relu(x) * 2
  }
  SUBCASE("in place on such a tensor, which nothing else reads: out-of-place") {
    // ResNet's `out += identity; out = relu_(out)` in a block IntermediateLayerGetter returns.
    auto block = script(R"(
def forward(self, x, identity):
    outs: List[Tensor] = []
    out = x * 2.0
    out += identity
    out = torch.relu_(out)
    outs.append(out)
    outs[0].mul_(3.0)
    return outs
)");
    // With example inputs: the add's two tensors then have one dtype (out_of_place_is_equivalent).
    const at::Tensor identity = torch::randn({3, 4});
    torch_delegate::partition_options options;
    options.example_inputs["forward"] = {x, identity};
    const auto block_plan = torch_delegate::delegation_plan<ConvLikeBackend>(block, options);
    for (const auto& kept : block_plan.methods[0].kept) {
      CHECK(kept.kind != "aten::add_");
      CHECK(kept.kind != "aten::relu_");
    }
    torch::jit::Module lowered_block = torch_delegate::lower_partially<ConvLikeBackend>(block, options);
    CHECK(lowered_block.forward({x, identity}).toList().get(0).toTensor().allclose(
        block.forward({x, identity}).toList().get(0).toTensor()));
  }
}
