// Traced models' spellings in the canonical graph: torch.jit.trace records a convolution as
// aten::_convolution (transposed, output_padding and cuDNN flags), which the canonical graph
// rewrites to the conv1d / conv2d / conv_transpose2d ... a scripted model calls, where the flags
// say the two are the same; and it forgets the sizes a trace recorded in its tensors' types.
// (torchvision's traced models, end to end: tests/python/test_traced.py.)
#include "backends.hpp"
#include "helpers.hpp"

#include <torch_delegate/node_queries.hpp>
#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace test_helpers;

namespace {

/// The convolutions a scripted model spells, and relu (generic execute: runs each region's graph).
struct TracedConvBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_traced_conv";
  static bool supports(const torch::jit::Node* node) {
    static const std::set<std::string> kinds{"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose2d",
                                             "aten::relu", "prim::Constant"};
    return kinds.count(node->kind().toQualString()) > 0;
  }
};

/// A module whose forward calls `call` (a torch._convolution or torch.convolution as a trace
/// records it) on x with its parameters `weight` and `bias` (of `bias_size` elements), then relu.
torch::jit::Module traced_style(const std::string& call, std::vector<std::int64_t> weight_sizes, std::int64_t bias_size) {
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::randn(weight_sizes), false);
  module.register_parameter("bias", torch::randn({bias_size}), false);
  module.define("def forward(self, x):\n    return torch.relu(" + call + ")\n");
  return module;
}

/// The kinds of the nodes of `module`'s canonical graph (the graph partial lowering partitions:
/// its regions' and its kept nodes'), sorted; constants and attribute reads left out.
std::vector<std::string> canonical_kinds(const torch::jit::Module& module) {
  const auto plan = torch_delegate::delegation_plan<TracedConvBackend>(module);
  std::vector<std::string> kinds;
  for (const auto& region : plan.methods[0].regions) kinds.insert(kinds.end(), region.kinds.begin(), region.kinds.end());
  for (const auto& kept : plan.methods[0].kept)
    if (kept.reason != torch_delegate::kept_reason::attribute_read) kinds.push_back(kept.kind);
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

/// Plans `module` to TracedConvBackend and checks that the lowered module computes what the original does on x.
torch_delegate::delegation_report plan_and_run(torch::jit::Module module, const at::Tensor& x) {
  auto plan = torch_delegate::delegation_plan<TracedConvBackend>(module);
  torch::jit::Module lowered = torch_delegate::lower_partially<TracedConvBackend>(module);
  const at::Tensor expected = module.forward({x}).toTensor();
  const at::Tensor given = lowered.forward({x}).toTensor();
  CHECK(given.sizes() == expected.sizes());
  CHECK(given.allclose(expected, 1e-5, 1e-6));
  return plan;
}

}  // namespace

TEST_CASE("traced graphs: aten::_convolution becomes the convolution a scripted model calls") {
  SUBCASE("non-transposed, output_padding zero: conv2d, in one region with the relu after it") {
    // The arguments of nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1) as a trace records them.
    const auto module = traced_style(
        "torch._convolution(x, self.weight, self.bias, [2, 2], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)",
        {4, 3, 3, 3}, 4);
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::conv2d", "aten::relu"});
    const auto plan = plan_and_run(module, torch::randn({1, 3, 9, 9}));
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::conv2d", "aten::relu"});
  }
  SUBCASE("transposed: conv_transpose2d, its output_padding and dilation in their places") {
    // conv_transpose2d takes (..., padding, output_padding, groups, dilation): another order.
    const auto module = traced_style(
        "torch._convolution(x, self.weight, self.bias, [2, 2], [1, 1], [1, 1], True, [1, 1], 1, False, False, True, True)",
        {3, 4, 3, 3}, 4);
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::conv_transpose2d", "aten::relu"});
    const auto plan = plan_and_run(module, torch::randn({1, 3, 5, 5}));
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::conv_transpose2d", "aten::relu"});
  }
  SUBCASE("one spatial dimension (the length of stride): conv1d; the 12-argument overload too") {
    const auto module =
        traced_style("torch._convolution(x, self.weight, self.bias, [1], [2], [2], False, [0], 2, False, False, True)", {4, 2, 3}, 4);
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::conv1d", "aten::relu"});
    plan_and_run(module, torch::randn({1, 4, 11}));
  }
  SUBCASE("aten::convolution, the public form with the same flags: conv2d") {
    const auto module =
        traced_style("torch.convolution(x, self.weight, self.bias, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)", {4, 3, 1, 1}, 4);
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::conv2d", "aten::relu"});
    plan_and_run(module, torch::randn({2, 3, 4, 4}));
  }
  SUBCASE("the rewritten node keeps the traced one's source line") {
    const auto module = traced_style(
        "torch._convolution(x, self.weight, self.bias, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, False, False, True, True)",
        {4, 3, 1, 1}, 4);
    const auto plan = torch_delegate::delegation_plan<TracedConvBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].kinds.front() == "aten::conv2d");  // the region's first node, whose line it gives
    CHECK(plan.methods[0].regions[0].location == "<string>:2");
  }
}

TEST_CASE("traced graphs: an aten::_convolution that no public convolution expresses stays as it is") {
  SUBCASE("non-transposed with a non-zero output_padding") {
    const auto module = traced_style(
        "torch._convolution(x, self.weight, self.bias, [1, 1], [0, 0], [1, 1], False, [1, 1], 1, False, False, True, True)",
        {4, 3, 3, 3}, 4);
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::_convolution", "aten::relu"});
    const auto plan = plan_and_run(module, torch::randn({1, 3, 6, 6}));
    bool kept = false;
    for (const auto& node : plan.methods[0].kept)
      if (node.kind == "aten::_convolution") kept = node.reason == torch_delegate::kept_reason::unsupported_kind;
    CHECK(kept);
  }
  SUBCASE("transposed or not unknown until run time") {
    torch::jit::Module module("m");
    module.register_parameter("weight", torch::randn({3, 3, 1, 1}), false);
    module.define(R"(
def forward(self, x, transposed: bool):
    return torch._convolution(x, self.weight, None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1, False, False, True, True)
)");
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::_convolution"});
  }
  SUBCASE("a stride whose length does not match the weight's rank") {
    // _convolution expands a one-element stride to the 4-d weight's two dimensions; conv1d would
    // refuse the weight. The weight's rank is known from the parameter, or from the constant of a
    // frozen module.
    torch::jit::Module module("m");
    module.register_parameter("weight", torch::randn({4, 3, 1, 1}), false);
    module.define(R"(
def forward(self, x):
    return torch._convolution(x, self.weight, None, [1], [0], [1], False, [0], 1, False, False, True, True)
)");
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::_convolution"});
    plan_and_run(module, torch::randn({1, 3, 4, 4}));
    module.eval();
    const torch::jit::Module frozen = torch::jit::freeze(module);
    CHECK(canonical_kinds(frozen) == std::vector<std::string>{"aten::_convolution"});
  }
  SUBCASE("a weight whose rank is not known at lowering (an argument)") {
    const auto module = script(R"(
def forward(self, x, w):
    return torch._convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, False, False, True, True)
)");
    CHECK(canonical_kinds(module) == std::vector<std::string>{"aten::_convolution"});
  }
}

namespace {

/// Takes relu; records the sizes its input had for the partitioner (empty: not known).
struct SizesSeenBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_traced_sizes_seen";
  static inline std::vector<std::int64_t> seen;
  static bool supports(const torch::jit::Node* node) {
    if (node->kind() != c10::aten::relu) return node->kind() == c10::prim::Constant;
    seen = torch_delegate::known_sizes(node->input(0)).value_or(std::vector<std::int64_t>{});
    return true;
  }
};

}  // namespace

TEST_CASE("traced graphs: the sizes a trace recorded in tensor types are forgotten; example inputs give them") {
  torch::jit::Module module("m");
  module.define("def forward(self, x):\n    return torch.relu(x)\n");
  // As torch.jit.trace leaves it: the argument's and every result's complete type of the trace.
  const auto graph = torch::jit::toGraphFunction(module.get_method("forward").function()).graph();
  const auto traced_type = c10::TensorType::create(torch::zeros({1, 3, 8, 8}));
  graph->inputs()[1]->setType(traced_type);
  for (torch::jit::Node* node : graph->nodes())
    if (node->kind() == c10::aten::relu) node->output()->setType(traced_type);
  SizesSeenBackend::seen = {0};
  torch_delegate::delegation_plan<SizesSeenBackend>(module);
  CHECK(SizesSeenBackend::seen.empty());  // not the trace's [1, 3, 8, 8]: another call may have other sizes
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {torch::zeros({2, 3, 5, 5})};
  torch_delegate::delegation_plan<SizesSeenBackend>(module, options);
  CHECK(SizesSeenBackend::seen == std::vector<std::int64_t>{2, 3, 5, 5});
}
