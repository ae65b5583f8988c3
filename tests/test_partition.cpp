// Partial lowering (lower_partially<B>, delegation_plan<B>): regions per block, what stays in
// TorchScript and why, equal outputs over several graph shapes and random graphs, save/load,
// shared parameters, the knobs.
#include "backends.hpp"
#include "helpers.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/report_format.hpp>
#include <torch_delegate/detail/regions.hpp>

#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <thread>
#include <cstdio>
#include <random>
#include <set>
#include <sstream>

using namespace test_helpers;
using demo::DemoBackend;

namespace {

/// Runs each region's own graph (generic execute: any boundary type); supports add, sub, mul.
struct ReferenceBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_reference";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::aten::sub || node->kind() == c10::aten::mul ||
           node->kind() == c10::prim::Constant;
  }
};

/// ReferenceBackend that re-plans (other_shapes::replan): each replan counted, with the shapes asked for.
struct ReplanningBackend : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_replanning";
  static inline std::atomic<int> replans{0};
  static inline std::vector<std::int64_t> last_sizes;
  test_backends::graph_handle replan(test_backends::graph_handle& compiled, const torch_delegate::given_inputs& given) {
    ++replans;
    if (given.at(0)->sizes.at(0) == 13) throw std::runtime_error("no plan for 13 rows");
    last_sizes = given.at(0)->sizes;
    return compiled;
  }
};

/// Refuses any region that multiplies (its own check on a whole candidate region).
struct NoMulRegions : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_no_mul_regions";
  static bool accepts_region(std::span<const torch::jit::Node* const> region) {
    return std::none_of(region.begin(), region.end(), [](const torch::jit::Node* node) { return node->kind() == c10::aten::mul; });
  }
};

/// Takes regions of add and sub, but its preprocess rejects sub (as a compiler that finds a
/// problem only when it compiles the region).
struct RejectsSubInPreprocess : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_rejects_sub";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() == c10::aten::sub) method.reject(node, "sub is not compiled here.");
    return ReferenceBackend::preprocess(method);
  }
};

/// Typed options (a required target, a scale) and typed signatures; takes regions of adds.
struct TypedOptionsAdd : test_backends::TypedBackend {
  static constexpr std::string_view name = "td_partition_typed_options";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};

/// Availability from test_backends::toggle_available; counts its execute calls.
inline std::atomic<int> fallback_add_calls{0};
struct FallbackAdd {
  static constexpr std::string_view name = "td_partition_fallback";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return test_backends::toggle_available.load(); }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) {
    ++fallback_add_calls;
    return x + h;
  }
};

/// Sets toggle_available for a scope.
struct availability {
  explicit availability(bool value) : before(test_backends::toggle_available.exchange(value)) {}
  ~availability() { test_backends::toggle_available = before; }
  bool before;
};

/// Convolutions and what surrounds them (generic execute: any boundary type).
struct ConvLikeBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_conv_like";
  static bool supports(const torch::jit::Node* node) {
    static const std::set<std::string> kinds{"aten::conv2d", "aten::relu", "aten::relu_", "aten::clamp", "aten::add", "aten::mean", "aten::sigmoid", "aten::gt_", "aten::gt", "aten::add_",
                                             "aten::mul", "aten::view", "prim::ListConstruct", "prim::Constant"};
    return kinds.count(node->kind().toQualString()) > 0;
  }
};

/// The same without prim::ListConstruct: conv's lists must be constants to join a region.
struct ConvOnlyBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_conv_only";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::conv2d || node->kind() == c10::aten::relu || node->kind() == c10::prim::Constant;
  }
};

/// ConvLikeBackend whose regions own their parameters (as xnnpack's and onednn's do).
struct OwningConvLikeBackend : ConvLikeBackend {
  static constexpr std::string_view name = "td_partition_owning_conv_like";
  static constexpr bool owns_parameters = true;
};

/// A typed conv: execute(x, weight, optional bias).
inline std::atomic<int> typed_conv_calls{0};
struct TypedConv {
  static constexpr std::string_view name = "td_partition_typed_conv";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::conv2d || node->kind() == c10::prim::Constant;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
    ++typed_conv_calls;
    return at::conv2d(x, weight, bias ? *bias : at::Tensor(), 1, 1);
  }
};

/// A typed conv whose bias must be a Tensor: a region with an Optional[Tensor] bias is refused.
struct TypedConvTensorBias : TypedConv {
  static constexpr std::string_view name = "td_partition_typed_conv_tensor_bias";
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    return at::conv2d(x, weight, bias, 1, 1);
  }
};

/// Typed signatures only: (Tensor, Tensor) -> Tensor among them, nothing for three Tensors.
struct TypedAdd : test_backends::TypedBackend {
  static constexpr std::string_view name = "td_partition_typed";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};

/// Lowers partially, checks the outputs equal the original's for a few inputs, and returns the
/// lowered module.
template <class Backend = DemoBackend>
torch::jit::Module lowered_equal(torch::jit::Module module, const torch_delegate::partition_options& options = {},
                                 int inputs = 2) {
  torch::jit::Module lowered = torch_delegate::lower_partially<Backend>(module, options);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<c10::IValue> arguments;
    for (int i = 0; i < inputs; ++i) arguments.emplace_back(torch::randn({3, 4}));
    const at::Tensor expected = module.forward(arguments).toTensor();
    const at::Tensor got = lowered.forward(arguments).toTensor();
    CHECK(got.allclose(expected, 1e-5, 1e-6));
  }
  return lowered;
}

std::size_t count_kind(const torch::jit::Module& module, const std::string& kind) {
  std::size_t count = 0;
  auto graph = module.get_method("forward").graph();
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : block->nodes()) {
      count += node->kind().toQualString() == kind;
      for (torch::jit::Block* nested : node->blocks()) blocks.push_back(nested);
    }
  }
  return count;
}

/// Parent.forward = encoder.forward(x, h) + h; Encoder.forward = block.forward(x, h) - x;
/// Inner.forward = `block_body` (the submodules of a model, by path: "encoder", "encoder.block").
torch::jit::Module nested_modules(const std::string& block_body) {
  torch::jit::Module inner("Inner");
  inner.define("def forward(self, x, h):\n    return " + block_body + "\n");
  torch::jit::Module encoder("Encoder");
  encoder.register_module("block", inner);
  encoder.define("def forward(self, x, h):\n    return self.block.forward(x, h) - x\n");
  torch::jit::Module parent("Parent");
  parent.register_module("encoder", encoder);
  parent.define("def forward(self, x, h):\n    return self.encoder.forward(x, h) + h\n");
  return parent;
}

}  // namespace

TEST_CASE("partial lowering: an unsupported node between two regions") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = torch.relu(a)
    return b - h
)");
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
  REQUIRE(plan.methods.size() == 1);
  CHECK(plan.methods[0].regions.size() == 2);
  REQUIRE(plan.methods[0].kept.size() == 1);
  CHECK(plan.methods[0].kept[0].kind == "aten::relu");
  CHECK(plan.methods[0].kept[0].reason == torch_delegate::kept_reason::unsupported_kind);
  CHECK(plan.methods[0].kept[0].location == "<string>:4");

  const auto lowered = lowered_equal(module);
  CHECK(count_kind(lowered, "prim::CallMethod") == 2);
  CHECK(count_kind(lowered, "aten::relu") == 1);
  CHECK(count_kind(lowered, "aten::add") == 0);
  CHECK(torch_delegate::delegation_report_of(lowered) ==
        "delegation of __torch__.m to backend 'backend_with_compiler_demo'\n"
        "  forward: 2 regions, 2 nodes delegated, 1 kept in TorchScript\n"
        "    region forward_region_0: 1 nodes (aten::add) at <string>:3\n"
        "    region forward_region_1: 1 nodes (aten::sub) at <string>:5\n"
        "    kept aten::relu: unsupported kind at <string>:4\n");
}

TEST_CASE("partial lowering: canonicalization folds a wrapper's branch on a constant flag (as F.relu's inplace)") {
  // Inlined, helper's `if inplace:` is a prim::If on a constant; constant propagation removes it,
  // so the add joins the sub in one region instead of stopping at control flow.
  const auto module = script(R"(
def helper(self, x, h, inplace: bool = False):
    if inplace:
        return x.add_(h)
    return x + h

def forward(self, x, h):
    return self.helper(x, h) - h
)");
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::add", "aten::sub"});
  CHECK(plan.methods[0].kept.empty());
  lowered_equal(module);
}

TEST_CASE("partial lowering: a run goes on past an unsupported node that it does not depend on") {
  SUBCASE("independent of the relu: one region of both adds, called before the relu") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    r = torch.relu(x)
    c = a - h
    return r + c
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 2);  // add, sub | (relu) | the last add uses r
    CHECK(plan.methods[0].regions[0].node_count == 2);
    CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::add", "aten::sub"});
    const auto lowered = lowered_equal(module);
    CHECK(count_kind(lowered, "prim::CallMethod") == 2);
  }
  SUBCASE("a node with side effects stops the run (print)") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    print("between")
    c = x - h
    return a * c
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    CHECK(plan.methods[0].regions.size() == 2);
    lowered_equal(module);
  }
  SUBCASE("a node that writes stops the run") {
    const auto module = script(R"(
def forward(self, x, h):
    y = x * 1.0
    a = x + h
    y.add_(h)
    c = x - h
    return a * c + y
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    REQUIRE(plan.methods[0].regions.size() >= 2);
    CHECK(plan.methods[0].regions[0].node_count == 1);
    lowered_equal(module);
  }
  SUBCASE("with fallback: the passed node runs after the region's if") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    r = torch.relu(x)
    c = a - h
    return r * c
)");
    torch_delegate::partition_options options;
    options.fallback_when_unavailable = true;
    lowered_equal(module, options);
  }
}

TEST_CASE("partial lowering: a diamond and a region feeding two consumers") {
  SUBCASE("diamond, all supported: one region") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = a - x
    c = a + h
    return b + c
)");
    const auto lowered = lowered_equal(module);
    CHECK(count_kind(lowered, "prim::CallMethod") == 1);
  }
  SUBCASE("a region's output read by an unsupported node and by the next region") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    m = a * x
    return a - m
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    CHECK(plan.methods[0].regions.size() == 2);
    lowered_equal(module);
  }
  SUBCASE("a region with two outputs") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = x - h
    return a * b
)");
    const auto lowered = lowered_equal(module);
    CHECK(count_kind(lowered, "prim::TupleUnpack") == 1);
  }
}

TEST_CASE("partial lowering: regions inside if and loop bodies, never across them") {
  const auto module = script(R"(
def forward(self, x, h):
    y = x + h
    if bool(x.sum() > 0.0):
        y = y - h + x
    else:
        y = y + h
    for _ in range(3):
        y = y + x
    return y
)");
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
  std::set<int> depths;
  for (const auto& region : plan.methods[0].regions) depths.insert(region.depth);
  CHECK(depths == std::set<int>{0, 1});
  bool kept_if = false, kept_loop = false;
  for (const auto& kept : plan.methods[0].kept) {
    kept_if |= kept.kind == "prim::If" && kept.reason == torch_delegate::kept_reason::control_flow;
    kept_loop |= kept.kind == "prim::Loop" && kept.reason == torch_delegate::kept_reason::control_flow;
  }
  CHECK(kept_if);
  CHECK(kept_loop);
  lowered_equal(module);
}

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
  for (const auto& kept : plan.methods[0].kept) CHECK(kept.reason == torch_delegate::kept_reason::attribute_read);
  torch::jit::Module lowered = torch_delegate::lower_partially<ConvLikeBackend>(module);
  const at::Tensor x = torch::randn({1, 3, 6, 6});
  CHECK(lowered.forward({x}).toTensor().allclose(module.forward({x}).toTensor()));
}

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

TEST_CASE("partial lowering: a method's own if on what a submodule returned is the method's, not the submodule's") {
  torch::jit::Module gate("Gate");
  gate.define("def forward(self, x):\n    return bool(x.sum() > 0)\n");
  torch::jit::Module parent("GatedParent");
  parent.register_module("gate", gate);
  parent.define(R"(
def forward(self, x, y):
    if self.gate.forward(x):
        x.add_(y * 2.0 + 1.0)
    return x
)");
  const auto plan = torch_delegate::delegation_plan<ConvLikeBackend>(parent);
  for (const auto& node : plan.methods[0].kept)
    if (node.kind == "prim::If" || node.kind == "aten::add_") CHECK(node.submodule.empty());
  REQUIRE(plan.methods[0].regions.size() == 2);
  CHECK(plan.methods[0].regions[0].submodule == "gate");  // the gate's comparison
  CHECK(plan.methods[0].regions[1].submodule.empty());    // the mul and add in the method's own if
  CHECK(plan.methods[0].regions[1].depth == 1);
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

TEST_CASE("partial lowering: each region and kept node names the submodule it comes from") {
  torch::jit::Module parent = nested_modules("torch.relu(x) + h");
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(parent);
  REQUIRE(plan.methods[0].kept.size() == 1);
  CHECK(plan.methods[0].kept[0].kind == "aten::relu");
  CHECK(plan.methods[0].kept[0].submodule == "encoder.block");
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].submodule.empty());  // the block's add, the encoder's sub, the parent's add
  torch_delegate::partition_options options;
  options.lower_submodules = {"encoder"};
  const auto inner = torch_delegate::delegation_plan<DemoBackend>(parent, options);
  REQUIRE(inner.methods[0].regions.size() == 1);
  CHECK(inner.methods[0].regions[0].submodule == "encoder");
  CHECK(inner.to_string().find("    kept aten::relu: unsupported kind in encoder.block at <string>:2\n") != std::string::npos);
  CHECK(inner.to_string().find("region forward_region_0: 2 nodes (aten::add, aten::sub) in encoder at <string>:2\n") !=
        std::string::npos);
}

TEST_CASE("partial lowering: which source files are PyTorch's own") {
  using torch_delegate::detail::is_pytorch_source;
  CHECK(is_pytorch_source("/usr/lib/python3/dist-packages/torch/nn/modules/conv.py:459"));
  CHECK(is_pytorch_source("/venv/lib/python3.11/site-packages/torch/nn/functional.py:1457"));
  CHECK(is_pytorch_source("/home/me/pytorch/torch/nn/modules/activation.py:294"));
  CHECK(!is_pytorch_source("/usr/lib/python3/dist-packages/torchvision/models/mobilenetv2.py:64"));
  CHECK(!is_pytorch_source("/home/me/torch_models/model.py:12"));
  CHECK(!is_pytorch_source("model.py:3"));
}

TEST_CASE("partial lowering: the backend refuses a whole candidate region") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = a * h
    m = torch.relu(b)
    return m - x
)");
  const auto plan = torch_delegate::delegation_plan<NoMulRegions>(module);
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::sub"});
  std::size_t refused = 0;
  for (const auto& kept : plan.methods[0].kept)
    refused += kept.reason == torch_delegate::kept_reason::refused_by_backend && kept.detail == "2-node region";
  CHECK(refused == 2);
  lowered_equal<NoMulRegions>(module);
}

TEST_CASE("partial lowering: a preprocess rejection in a region points at the model's line") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = torch.relu(a)
    c = b - h
    return c
)");
  const std::string error = error_of([&] { torch_delegate::lower_partially<RejectsSubInPreprocess>(module); });
  CHECK_CONTAINS(error, "sub is not compiled here. Source code: ");
  CHECK_CONTAINS(error, "line 5");
  CHECK_CONTAINS(error, "    c = b - h\n        ~~~~~ <--- HERE");
}

TEST_CASE("partial lowering: each region is compiled with its method's typed options") {
  auto module = script(R"(
def forward(self, x, h):
    a = x + h
    return torch.relu(a)

def encode(self, x, h):
    b = torch.relu(x)
    return b + h
)");
  torch_delegate::partition_options options;
  options.methods = {"forward", "encode"};
  test_backends::typed_options forward_options;
  forward_options.target = std::string("cpu");
  forward_options.scale = 3.0;
  test_backends::typed_options encode_options;
  encode_options.target = std::string("cpu");
  encode_options.scale = -1.0;
  auto lowered = torch_delegate::lower_partially<TypedOptionsAdd>(module, options,
                                                                  {{"forward", forward_options}, {"encode", encode_options}});
  const at::Tensor x = torch::randn({4}), h = torch::randn({4});
  CHECK(lowered.forward({x, h}).toTensor().allclose(torch::relu((x + h) * 3.0)));  // the backend scales its result
  CHECK(lowered.get_method("encode")({x, h}).toTensor().allclose((torch::relu(x) + h) * -1.0));
  // After save and load the regions compile with the same options.
  const std::string path = temp_path("typed_options_partial.pt");
  lowered.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  CHECK(loaded.forward({x, h}).toTensor().allclose(torch::relu((x + h) * 3.0)));
  std::remove(path.c_str());

  // A required option not given: the error names the region and the option.
  CHECK(error_of([&] { torch_delegate::lower_partially<TypedOptionsAdd>(module, options); }) ==
        "torch-delegate: backend 'td_partition_typed_options', method 'forward_region_0': missing required option 'target' (str)");
  // Options for a method that is not partitioned.
  options.methods = {"forward"};
  CHECK(error_of([&] { torch_delegate::lower_partially<TypedOptionsAdd>(module, options, {{"encode", encode_options}}); }) ==
        "torch-delegate: backend 'td_partition_typed_options', method 'encode': compile options are given for a method that "
        "is not partitioned (partition_options::methods: forward)");
}

TEST_CASE("partial lowering: knobs") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = a - h
    m = b * x
    return m + x
)");
  SUBCASE("minimum region size") {
    torch_delegate::partition_options options;
    options.min_region_size = 2;
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module, options);
    CHECK(plan.methods[0].regions.size() == 1);
    bool too_small = false;
    for (const auto& kept : plan.methods[0].kept)
      too_small |= kept.kind == "aten::add" && kept.reason == torch_delegate::kept_reason::region_too_small &&
                   kept.detail == "1 node < 2";
    CHECK(too_small);
    lowered_equal(module, options);
  }
  SUBCASE("kinds kept in TorchScript") {
    torch_delegate::partition_options options;
    options.keep_kinds = {"aten::sub"};
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module, options);
    CHECK(plan.methods[0].regions.size() == 2);
    bool excluded = false;
    for (const auto& kept : plan.methods[0].kept)
      excluded |= kept.kind == "aten::sub" && kept.reason == torch_delegate::kept_reason::excluded_by_user;
    CHECK(excluded);
    lowered_equal(module, options);
  }
  SUBCASE("submodules kept in TorchScript, by path") {
    torch::jit::Module parent = nested_modules("x + h");
    CHECK(torch_delegate::delegation_plan<DemoBackend>(parent).methods[0].regions.size() == 1);
    torch_delegate::partition_options options;
    options.keep_submodules = {"encoder.block"};
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(parent, options);
    REQUIRE(plan.methods[0].kept.size() == 1);
    CHECK(plan.methods[0].kept[0].kind == "aten::add");
    CHECK(plan.methods[0].kept[0].detail == "in submodule encoder.block");
    CHECK(plan.methods[0].regions.size() == 1);  // encoder's sub and the parent's add
    lowered_equal(parent, options);
    options.keep_submodules = {"encoder"};
    CHECK(torch_delegate::delegation_plan<DemoBackend>(parent, options).methods[0].kept.size() == 2);
  }
  SUBCASE("submodules lowered alone (selective lowering), by path") {
    torch::jit::Module parent = nested_modules("x + h - x");
    torch_delegate::partition_options options;
    options.lower_submodules = {"encoder.block"};
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(parent, options);
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].node_count == 2);  // the block's add and sub
    REQUIRE(plan.methods[0].kept.size() == 2);           // the encoder's sub, the parent's add
    for (const auto& kept : plan.methods[0].kept) {
      CHECK(kept.reason == torch_delegate::kept_reason::outside_selection);
      CHECK(kept.detail.empty());
    }
    const auto lowered = lowered_equal(parent, options);
    CHECK(count_kind(lowered, "aten::add") == 1);
    CHECK(count_kind(lowered, "aten::sub") == 1);
    // require_full applies to the selected submodules only.
    options.require_full = true;
    lowered_equal(parent, options);
    options.lower_submodules = {"encoder"};  // its block included: 3 nodes in one region
    CHECK(torch_delegate::delegation_plan<DemoBackend>(parent, options).methods[0].regions[0].node_count == 3);
    // A submodule with an unsupported node cannot be lowered completely.
    torch::jit::Module relu_block("ReluBlock");
    relu_block.define("def forward(self, x, h):\n    return torch.relu(x) + h\n");
    parent.register_module("activation", relu_block);
    parent.define("def activate(self, x, h):\n    return self.activation.forward(x, h) * h\n");
    options.methods = {"activate"};
    options.lower_submodules = {"activation"};
    CHECK(error_of([&] { torch_delegate::lower_partially<DemoBackend>(parent, options); }) ==
          "torch-delegate: backend 'backend_with_compiler_demo', method 'activate': require_full: 1 node(s) would stay in "
          "TorchScript, the first aten::relu (unsupported kind) at <string>:2");
  }
  SUBCASE("a submodule path that does not exist") {
    torch::jit::Module parent = nested_modules("x + h");
    torch_delegate::partition_options options;
    options.keep_submodules = {"encodr"};
    CHECK(error_of([&] { torch_delegate::delegation_plan<DemoBackend>(parent, options); }) ==
          "torch-delegate: backend 'backend_with_compiler_demo': keep_submodules: 'encodr' is not a submodule of "
          "__torch__.Parent (its submodules: encoder, encoder.block)");
    options.keep_submodules.clear();
    options.lower_submodules = {"encoder.blok"};
    CHECK(error_of([&] { torch_delegate::lower_partially<DemoBackend>(parent, options); }) ==
          "torch-delegate: backend 'backend_with_compiler_demo': lower_submodules: 'encoder.blok' is not a submodule of "
          "__torch__.Parent (its submodules: encoder, encoder.block)");
  }
  SUBCASE("require full") {
    torch_delegate::partition_options options;
    options.require_full = true;
    CHECK(error_of([&] { torch_delegate::lower_partially<DemoBackend>(module, options); }) ==
          "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': require_full: 1 node(s) would stay in "
          "TorchScript, the first aten::mul (unsupported kind) at <string>:5");
  }
  SUBCASE("require full: attribute reads stay in TorchScript and do not count") {
    torch::jit::Module weighted("Weighted");
    weighted.register_parameter("bias", torch::randn({4}), false);
    weighted.define("def forward(self, x, h):\n    return x + h - self.bias\n");
    torch_delegate::partition_options options;
    options.require_full = true;
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(weighted, options);
    REQUIRE(plan.methods[0].kept.size() == 1);
    CHECK(plan.methods[0].kept[0].reason == torch_delegate::kept_reason::attribute_read);
    CHECK(plan.methods[0].kept[0].detail == "self.bias");
    auto lowered = torch_delegate::lower_partially<DemoBackend>(weighted, options);
    const at::Tensor x = torch::randn({2, 4}), h = torch::randn({2, 4});
    CHECK(lowered.forward({x, h}).toTensor().allclose(weighted.forward({x, h}).toTensor()));
  }
  SUBCASE("a method that does not exist") {
    torch_delegate::partition_options options;
    options.methods = {"encode"};
    CHECK(error_of([&] { torch_delegate::delegation_plan<DemoBackend>(module, options); })
              .find("'encode'") != std::string::npos);
  }
}

TEST_CASE("partial lowering: the original is untouched, parameters are shared, save and load") {
  torch::jit::Module module("m");
  module.register_parameter("w", torch::randn({3, 4}), false);
  module.define(R"(
def forward(self, x, h):
    a = x + self.w
    b = torch.relu(a)
    return b - h + self.w
)");
  // Weight reads do not split regions: they stay in TorchScript and pass the weight in.
  const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
  CHECK(plan.methods[0].regions.size() == 2);
  const std::string original_graph = module.get_method("forward").graph()->toString();
  const auto lowered = lowered_equal(module);
  CHECK(module.get_method("forward").graph()->toString() == original_graph);
  CHECK(count_kind(module, "prim::CallMethod") == 0);
  CHECK(lowered.attr("w").toTensor().data_ptr() == module.attr("w").toTensor().data_ptr());
  CHECK(lowered.get_method("forward").function().getSchema().arguments()[1].name() == "x");
  // An unannotated argument's inferred Tensor becomes an explicit Tensor: LibTorch checks a call's
  // Tensor arguments cheaply only against that one (bench: BM_call_region_ours).
  CHECK(module.get_method("forward").function().getSchema().arguments()[1].type()->expectRef<c10::TensorType>().isInferredType());
  CHECK(!lowered.get_method("forward").function().getSchema().arguments()[1].type()->expectRef<c10::TensorType>().isInferredType());

  const std::string path = temp_path("partial.pt");
  lowered.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  const at::Tensor x = torch::randn({3, 4}), h = torch::randn({3, 4});
  CHECK(loaded.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));
  CHECK(torch_delegate::delegation_report_of(loaded) == torch_delegate::delegation_report_of(lowered));
  // The report as data survives save and load, field by field.
  CHECK(!torch_delegate::delegation_report_data_of(module));
  const std::optional<torch_delegate::delegation_report> data = torch_delegate::delegation_report_data_of(loaded);
  REQUIRE(data);
  CHECK(data->to_string() == plan.to_string());
  CHECK(data->backend == plan.backend);
  REQUIRE(data->methods.size() == 1);
  REQUIRE(data->methods[0].regions.size() == plan.methods[0].regions.size());
  for (std::size_t i = 0; i < plan.methods[0].regions.size(); ++i) {
    CHECK(data->methods[0].regions[i].kinds == plan.methods[0].regions[i].kinds);
    CHECK(data->methods[0].regions[i].node_count == plan.methods[0].regions[i].node_count);
  }
  REQUIRE(data->methods[0].kept.size() == plan.methods[0].kept.size());
  for (std::size_t i = 0; i < plan.methods[0].kept.size(); ++i) {
    CHECK(data->methods[0].kept[i].reason == plan.methods[0].kept[i].reason);
    CHECK(data->methods[0].kept[i].detail == plan.methods[0].kept[i].detail);
  }
  std::remove(path.c_str());
}

TEST_CASE("partial lowering: a registered backend's lowering is found by name, process-wide") {
  torch_delegate::register_backend<DemoBackend>();
  const torch_delegate::detail::backend_lowering* found = torch_delegate::detail::find_lowering(DemoBackend::name);
  REQUIRE(found);
  CHECK(found == &torch_delegate::detail::record_of<DemoBackend>);
  CHECK(found->partitions());
  CHECK(!torch_delegate::detail::find_lowering("td_never_registered"));
  const auto published = torch_delegate::detail::published_lowerings();
  CHECK(std::is_sorted(published.begin(), published.end(), [](auto a, auto b) { return a->name() < b->name(); }));
  CHECK(contains(error_of([] { torch_delegate::detail::lowering_named("td_never_registered", "who"); }),
                 "who: no torch-delegate backend named 'td_never_registered' is registered in this process (registered: "));
  // Lowering through the table is lowering with lower<B>.
  torch::jit::Module module("m");
  module.define("def forward(self, x, h):\n    return x + h - h\n");
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", found->default_spec());
  torch::jit::Module lowered = torch_delegate::detail::lower_methods(*found, module, spec, false, nullptr);
  const at::Tensor x = torch::randn({3}), h = torch::randn({3});
  CHECK(lowered.forward({x, h}).toTensor().allclose(x));
}

/// Writes random TorchScript programs over two (3, 4) tensors x and h: add/sub (delegated),
/// mul/tanh (kept), each reading earlier values (chains, diamonds, fan-out), `if` and `for`
/// blocks with statements of their own, and int values (`a.size(0)`) that feed additions.
struct random_program {
  explicit random_program(std::mt19937& generator) : random(generator) {}
  std::mt19937& random;
  std::ostringstream source;
  int counter = 0;

  std::string fresh() { return "v" + std::to_string(counter++); }
  const std::string& pick(const std::vector<std::string>& values) { return values[random() % values.size()]; }
  void line(int indent, const std::string& text) { source << std::string(4 * indent, ' ') << text << "\n"; }

  std::string operation(const std::vector<std::string>& values) {
    const std::string a = pick(values), b = pick(values);
    switch (random() % 6) {
      case 0: case 1: return a + " + " + b;
      case 2: return a + " - " + b;
      case 3: return a + " * " + b;
      case 4: return "torch.tanh(" + a + ")";
      default: return a + " + " + b + " * 2.0";
    }
  }

  void statements(std::vector<std::string>& values, int indent, int count, int depth) {
    for (int i = 0; i < count; ++i) {
      const unsigned choice = random() % 10;
      if (depth < 2 && choice == 0) {  // if/else: each branch computes the target its own way
        const std::string target = fresh();
        line(indent, "if bool(" + pick(values) + ".sum() > 0):");
        for (int branch = 0; branch < 2; ++branch) {
          if (branch == 1) line(indent, "else:");
          std::vector<std::string> inner = values;
          statements(inner, indent + 1, 1 + static_cast<int>(random() % 3), depth + 1);
          line(indent + 1, target + " = " + inner.back());
        }
        values.push_back(target);
      } else if (depth < 2 && choice == 1) {  // a loop with a loop-carried value
        const std::string carried = fresh();
        line(indent, carried + " = " + pick(values));
        line(indent, "for _ in range(" + std::to_string(1 + random() % 3) + "):");
        std::vector<std::string> inner = values;
        inner.push_back(carried);
        statements(inner, indent + 1, 1 + static_cast<int>(random() % 3), depth + 1);
        line(indent + 1, carried + " = " + carried + " - " + inner.back());
        values.push_back(carried);
      } else if (choice == 2) {  // an int value crossing into a region
        const std::string size = fresh(), sum = fresh();
        line(indent, size + " = " + pick(values) + ".size(0)");
        line(indent, sum + " = " + pick(values) + " + " + size);
        values.push_back(sum);
      } else {
        const std::string target = fresh();
        line(indent, target + " = " + operation(values));
        values.push_back(target);
      }
    }
  }

  std::string write() {
    std::vector<std::string> values{"x", "h"};
    line(0, "def forward(self, x, h):");
    statements(values, 1, 3 + static_cast<int>(random() % 12), 0);
    line(1, "return " + values.back() + " + " + values[values.size() / 2]);
    return source.str();
  }
};

TEST_CASE("partial lowering: random graphs give the original's outputs") {
  std::mt19937 random(12345);
  for (int trial = 0; trial < 30; ++trial) {
    const std::string source = random_program(random).write();
    CAPTURE(source);
    torch_delegate::partition_options options;
    options.fallback_when_unavailable = trial % 3 == 0;  // the rewrite with an if per region
    lowered_equal(script(source), options);
    lowered_equal<ReferenceBackend>(script(source), options);  // ints cross into its regions
  }
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

TEST_CASE("report format: versions 1 to 6 read back; anything else is nullopt, never a crash") {
  using namespace torch_delegate::detail;
  using torch_delegate::kept_reason;
  const torch_delegate::delegation_report report{
      "a, b", "__torch__.M",
      {{"forward",
        {{"forward_region_0", 3, {"aten::add", "aten::mul"}, "model.py:3", 0, "encoder",
          {"input 0 (method argument x): to channels_last on entry", "output 0: to contiguous before aten::conv2d"},
          "b", 1.5, 2.25}},
        {{"aten::relu", kept_reason::slower_on_backend, "0.5 ms on a, 0.25 ms in TorchScript", "model.py:4", 1, "encoder.block",
          {{"a", kept_reason::slower_on_backend, "0.5 ms on a, 0.25 ms in TorchScript"}, {"b", kept_reason::unsupported_kind, ""}}},
         {"aten::sub", kept_reason::outside_selection, "", "model.py:5", 0, "",
          {{"a", kept_reason::outside_selection, ""}, {"b", kept_reason::outside_selection, ""}}},
         {"aten::mul", kept_reason::control_flow, "", "", 0, ""}}}}};  // per_backend empty: made by hand
  const c10::IValue saved = encode_report(report);
  CHECK(saved.toTupleRef().elements()[0].toInt() == report_format_version);
  CHECK(report_format_version == 6);
  CHECK(decode_report(saved) == report);
  // The reason is saved as its token, not its label.
  const auto kept = saved.toTupleRef().elements()[3].toListRef()[0].toTupleRef().elements()[2].toListRef();
  CHECK(kept[1].toTupleRef().elements()[1].toStringRef() == "outside_selection");
  for (int r = 0; r <= static_cast<int>(kept_reason::gain_below_minimum); ++r)
    CHECK(reason_of_token(token_of(static_cast<kept_reason>(r))) == static_cast<kept_reason>(r));

  auto old_format = [](std::int64_t version, const std::string& reason, const std::string& detail, std::int64_t nodes = 2) {
    std::vector<c10::IValue> region{std::string("forward_region_0"), nodes, c10::List<std::string>({"aten::add"}),
                                    std::string("m.py:2"), std::int64_t{0}};
    std::vector<c10::IValue> kept{std::string("aten::sub"), reason, detail, std::string("m.py:3"), std::int64_t{0}};
    if (version >= 2) {
      region.emplace_back(std::string("block"));
      kept.emplace_back(std::string("block"));
    }
    c10::impl::GenericList regions(region_data_type(version)), kept_nodes(kept_data_type(version));
    regions.push_back(c10::ivalue::Tuple::create(region));
    kept_nodes.push_back(c10::ivalue::Tuple::create(kept));
    c10::impl::GenericList methods(method_data_type(version));
    methods.push_back(c10::ivalue::Tuple::create({std::string("forward"), regions, kept_nodes}));
    return c10::IValue(c10::ivalue::Tuple::create({version, std::string("b"), std::string("M"), methods}));
  };
  SUBCASE("version 1 (4619e82): labels, no submodules") {
    const auto read = decode_report(old_format(1, "mutation or aliasing", "writes to its input"));
    REQUIRE(read);
    CHECK(read->methods[0].kept[0].reason == kept_reason::mutation_or_aliasing);
    CHECK(read->methods[0].kept[0].per_backend ==
          std::vector<torch_delegate::backend_reason>{{"b", kept_reason::mutation_or_aliasing, "writes to its input"}});
    CHECK(read->methods[0].kept[0].submodule.empty());
    CHECK(read->methods[0].regions[0].node_count == 2);
    // Selective lowering's kept nodes were "excluded by the user" with a detail.
    const auto selective = decode_report(old_format(1, "excluded by the user", "outside the submodules to lower"));
    REQUIRE(selective);
    CHECK(selective->methods[0].kept[0].reason == kept_reason::outside_selection);
    CHECK(selective->methods[0].kept[0].detail.empty());
  }
  SUBCASE("version 5 (before per-backend reasons): the one reason saved, as the last backend's") {
    std::vector<c10::IValue> region{std::string("forward_region_0"), std::int64_t{2}, c10::List<std::string>({"aten::add"}),
                                    std::string("m.py:2"), std::int64_t{0}, std::string(""), c10::List<std::string>(),
                                    std::string("x"), 0.5, 0.75};
    std::vector<c10::IValue> kept{std::string("aten::relu"), std::string("unsupported_kind"), std::string(""),
                                  std::string("m.py:3"), std::int64_t{0}, std::string("")};
    c10::impl::GenericList regions(region_data_type(5)), kept_nodes(kept_data_type(5));
    regions.push_back(c10::ivalue::Tuple::create(region));
    kept_nodes.push_back(c10::ivalue::Tuple::create(kept));
    c10::impl::GenericList methods(method_data_type(5));
    methods.push_back(c10::ivalue::Tuple::create({std::string("forward"), regions, kept_nodes}));
    const auto read = decode_report(c10::ivalue::Tuple::create({std::int64_t{5}, std::string("x, y"), std::string("M"), methods}));
    REQUIRE(read);
    CHECK(read->methods[0].kept[0].reason == kept_reason::unsupported_kind);
    CHECK(read->methods[0].kept[0].per_backend ==
          std::vector<torch_delegate::backend_reason>{{"y", kept_reason::unsupported_kind, ""}});
    CHECK(read->methods[0].regions[0].backend_ms == 0.5);
    // Its text is the one line it had.
    CHECK(contains(read->to_string(), "    kept aten::relu: unsupported kind at m.py:3\n"));
  }
  SUBCASE("version 4: a region's backend is the report's, not measured") {
    std::vector<c10::IValue> region{std::string("forward_region_0"), std::int64_t{2}, c10::List<std::string>({"aten::add"}),
                                    std::string("m.py:2"), std::int64_t{0}, std::string(""), c10::List<std::string>()};
    c10::impl::GenericList regions(region_data_type(4)), kept_nodes(kept_data_type(4));
    regions.push_back(c10::ivalue::Tuple::create(region));
    c10::impl::GenericList methods(method_data_type(4));
    methods.push_back(c10::ivalue::Tuple::create({std::string("forward"), regions, kept_nodes}));
    const auto read = decode_report(c10::ivalue::Tuple::create({std::int64_t{4}, std::string("b"), std::string("M"), methods}));
    REQUIRE(read);
    CHECK(read->methods[0].regions[0].backend == "b");
    CHECK(read->methods[0].regions[0].backend_ms == -1);
  }
  SUBCASE("version 3: tokens, no conversions") {
    const auto read = decode_report(old_format(3, "mutation_or_aliasing", "writes to its input"));
    REQUIRE(read);
    CHECK(read->methods[0].kept[0].reason == kept_reason::mutation_or_aliasing);
    CHECK(read->methods[0].regions[0].submodule == "block");
    CHECK(read->methods[0].regions[0].conversions.empty());
  }
  SUBCASE("version 2: labels and submodules") {
    const auto read = decode_report(old_format(2, "boundary type", "List[int] output"));
    REQUIRE(read);
    CHECK(read->methods[0].kept[0].reason == kept_reason::boundary_type);
    CHECK(read->methods[0].kept[0].submodule == "block");
    CHECK(read->methods[0].regions[0].submodule == "block");
  }
  SUBCASE("what is not a report") {
    CHECK(!decode_report(old_format(1, "a label no build wrote", "")));
    CHECK(!decode_report(old_format(2, "unsupported_kind", "")));  // a token in a version that saved labels
    CHECK(!decode_report(c10::IValue()));
    CHECK(!decode_report(c10::ivalue::Tuple::create({std::int64_t{4}, std::string("b"), std::string("M")})));
    CHECK(!decode_report(c10::ivalue::Tuple::create({std::int64_t{99}, std::string("b"), std::string("M"), c10::IValue()})));
    CHECK(!decode_report(c10::ivalue::Tuple::create({std::string("3")})));
    CHECK(!decode_report(old_format(2, "boundary type", "", -1)));  // a negative node count
    // Version 6: a per-backend reason this build does not know, or not a (str, str, str).
    auto with_per_backend = [&](c10::IValue entry) {
      c10::IValue value = encode_report(report);
      auto kept = value.toTupleRef().elements()[3].toListRef()[0].toTupleRef().elements()[2].toList();
      auto fields = kept.get(0).toTupleRef().elements().vec();
      auto list = fields[6].toList();
      list.set(0, std::move(entry));
      return value;
    };
    CHECK(!decode_report(with_per_backend(c10::ivalue::Tuple::create({std::string("a"), std::string("faster_elsewhere"), std::string("")}))));
    CHECK(!decode_report(with_per_backend(c10::ivalue::Tuple::create({std::string("a"), std::int64_t{1}, std::string("")}))));
    CHECK(decode_report(with_per_backend(c10::ivalue::Tuple::create({std::string("a"), std::string("boundary_type"), std::string("")}))));
  }
}

TEST_CASE("region pass: a graph alone, without a module, cloning or rewriting") {
  // The pass reads a graph (here parsed from IR) and a backend's partition record; it changes
  // nothing and needs no module.
  const torch_delegate::detail::backend_lowering& backend = torch_delegate::detail::record_of<ConvLikeBackend>;
  auto regions_of = [&](const std::string& ir, torch_delegate::method_delegation& report) {
    auto graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(ir, graph.get());
    const std::string before = graph->toString();
    auto regions = torch_delegate::detail::form_regions(backend, {}, graph, "forward", report);
    CHECK(graph->toString() == before);  // pure: the graph is as it was
    std::vector<std::vector<std::string>> kinds;
    for (const auto& region : regions) {
      kinds.emplace_back();
      for (const torch::jit::Node* node : region.nodes) kinds.back().push_back(node->kind().toQualString());
    }
    return std::make_pair(kinds, regions.size() ? regions[0].inputs.size() : 0);
  };
  SUBCASE("a run passes an unsupported node it does not depend on") {
    torch_delegate::method_delegation report{"forward", {}, {}};
    const auto [kinds, inputs] = regions_of(R"IR(
graph(%self : Tensor, %x : Tensor, %h : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::add(%x, %h, %one)
  %r : Tensor = aten::tanh(%x)
  %c : Tensor = aten::mul(%a, %h)
  %d : Tensor = aten::add(%r, %c, %one)
  return (%d)
)IR", report);
    CHECK(kinds == std::vector<std::vector<std::string>>{{"aten::add", "aten::mul"}, {"aten::add"}});
    CHECK(inputs == 2);  // x, h: the constant is copied into the region
    REQUIRE(report.kept.size() == 1);
    CHECK(report.kept[0].kind == "aten::tanh");
    CHECK(report.kept[0].reason == torch_delegate::kept_reason::unsupported_kind);
  }
  SUBCASE("a list read outside the run cuts it at its maker") {
    torch_delegate::method_delegation report{"forward", {}, {}};
    const auto [kinds, inputs] = regions_of(R"IR(
graph(%self : Tensor, %x : Tensor, %n : int):
  %m1 : int = prim::Constant[value=-1]()
  %a : Tensor = aten::relu(%x)
  %shape : int[] = prim::ListConstruct(%n, %m1)
  %b : Tensor = aten::view(%a, %shape)
  %c : Tensor = aten::reshape(%x, %shape)
  %d : Tensor = aten::mul(%b, %c)
  return (%d)
)IR", report);
    CHECK(kinds == std::vector<std::vector<std::string>>{{"aten::relu"}, {"aten::mul"}});
    std::vector<std::string> boundary;
    for (const auto& kept : report.kept)
      if (kept.reason == torch_delegate::kept_reason::boundary_type) boundary.push_back(kept.kind + ": " + kept.detail);
    CHECK(boundary == std::vector<std::string>{"prim::ListConstruct: List[int] output", "aten::view: List[int] input"});
  }
  SUBCASE("regions never cross a block; the bodies are partitioned on their own") {
    torch_delegate::method_delegation report{"forward", {}, {}};
    const auto [kinds, inputs] = regions_of(R"IR(
graph(%self : Tensor, %x : Tensor, %flag : bool):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %y : Tensor = prim::If(%flag)
    block0():
      %b : Tensor = aten::add(%a, %x, %one)
      %c : Tensor = aten::mul(%b, %b)
      -> (%c)
    block1():
      -> (%a)
  %d : Tensor = aten::relu(%y)
  return (%d)
)IR", report);
    CHECK(kinds == std::vector<std::vector<std::string>>{{"aten::relu"}, {"aten::add", "aten::mul"}, {"aten::relu"}});
    REQUIRE(report.kept.size() == 1);
    CHECK(report.kept[0].reason == torch_delegate::kept_reason::control_flow);
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

namespace {
/// ReferenceBackend that takes only adds (the first of a priority list in the tests below).
struct AddsOnly : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_adds_only";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};
}  // namespace

TEST_CASE("several backends: each node goes to the first backend in the list that takes it") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = torch.relu(a)
    c = b * x - h
    d = c + x
    return torch.sigmoid(d)
)");
  const at::Tensor x = torch::randn({4}), h = torch::randn({4});
  const at::Tensor want = torch::jit::Module(module).forward({x, h}).toTensor();
  auto regions_of = [](const torch_delegate::delegation_report& report) {
    std::vector<std::pair<std::string, std::vector<std::string>>> regions;
    for (const auto& region : report.methods.at(0).regions) regions.emplace_back(region.backend, region.kinds);
    return regions;
  };

  SUBCASE("in priority order; one child per backend; the report names each region's backend") {
    const auto plan = torch_delegate::delegation_plan<AddsOnly, ReferenceBackend>(module);
    CHECK(plan.backend == "td_partition_adds_only, td_partition_reference");
    using kinds = std::vector<std::string>;
    CHECK(regions_of(plan) == std::vector<std::pair<std::string, kinds>>{
                                  {"td_partition_adds_only", kinds{"aten::add"}},
                                  {"td_partition_adds_only", kinds{"aten::add"}},
                                  {"td_partition_reference", kinds{"aten::mul", "aten::sub"}}});
    // Nodes no backend takes are kept, with each backend's reason.
    std::set<std::string> kept;
    for (const auto& node : plan.methods[0].kept) kept.insert(node.kind);
    CHECK(kept == std::set<std::string>{"aten::relu", "aten::sigmoid"});
    CHECK(plan.methods[0].regions[2].name == "forward_region_2");  // numbered across backends

    auto lowered = torch_delegate::lower_partially<AddsOnly, ReferenceBackend>(module);
    CHECK(lowered.forward({x, h}).toTensor().allclose(want));
    CHECK(lowered.hasattr("__delegate"));
    CHECK(lowered.hasattr("__delegate_td_partition_reference"));
    CHECK(torch_delegate::delegation_report_data_of(lowered) == plan);
    const std::string text = torch_delegate::delegation_report_of(lowered);
    CHECK(text.find("to backends td_partition_adds_only, td_partition_reference") != std::string::npos);
    CHECK(text.find("(aten::mul, aten::sub) on td_partition_reference") != std::string::npos);

    const std::string path = temp_path("two_backends.pt");
    lowered.save(path);
    CHECK(torch_delegate::backends_needed(path) ==
          std::vector<std::string>{"td_partition_adds_only", "td_partition_reference"});
    auto loaded = torch::jit::load(path);
    CHECK(loaded.forward({x, h}).toTensor().allclose(want));
    CHECK(torch_delegate::delegation_report_data_of(loaded) == plan);
    std::remove(path.c_str());
  }
  SUBCASE("the other order: the first backend takes all it supports") {
    const auto plan = torch_delegate::delegation_plan<ReferenceBackend, AddsOnly>(module);
    for (const auto& region : plan.methods[0].regions) CHECK(region.backend == "td_partition_reference");
    auto lowered = torch_delegate::lower_partially<ReferenceBackend, AddsOnly>(module);
    CHECK(lowered.forward({x, h}).toTensor().allclose(want));
    CHECK(!lowered.hasattr("__delegate_td_partition_adds_only"));  // no region: no child
  }
  SUBCASE("a region the first backend refuses goes to the next") {
    const auto plan = torch_delegate::delegation_plan<NoMulRegions, AddsOnly>(module);
    using kinds = std::vector<std::string>;
    // NoMulRegions refuses the mul/sub/add run; AddsOnly takes its add.
    CHECK(regions_of(plan) == std::vector<std::pair<std::string, kinds>>{
                                  {"td_partition_no_mul_regions", kinds{"aten::add"}},
                                  {"td_partition_adds_only", kinds{"aten::add"}}});
    // The mul: refused with its region by the first, not supported by the second. Its primary
    // reason is the first's, which got further with it.
    bool refused_then_unsupported = false;
    for (const auto& node : plan.methods[0].kept)
      refused_then_unsupported |=
          node.kind == "aten::mul" && node.reason == torch_delegate::kept_reason::refused_by_backend &&
          node.per_backend == std::vector<torch_delegate::backend_reason>{
                                  {"td_partition_no_mul_regions", torch_delegate::kept_reason::refused_by_backend, "3-node region"},
                                  {"td_partition_adds_only", torch_delegate::kept_reason::unsupported_kind, ""}};
    CHECK(refused_then_unsupported);
    CHECK(torch_delegate::lower_partially<NoMulRegions, AddsOnly>(module).forward({x, h}).toTensor().allclose(want));
  }
  SUBCASE("with fallback, an unavailable backend's regions run in TorchScript; the other still delegates") {
    torch_delegate::partition_options options;
    options.fallback_when_unavailable = true;
    auto lowered = torch_delegate::lower_partially<FallbackAdd, ReferenceBackend>(module, options);
    const std::string path = temp_path("two_backends_fallback.pt");
    lowered.save(path);
    fallback_add_calls = 0;
    {
      availability off(false);
      auto loaded = torch::jit::load(path);
      CHECK(loaded.forward({x, h}).toTensor().allclose(want));
      CHECK(fallback_add_calls == 0);
      CHECK(!loaded.attr("__delegate").toModule().run_method("td_is_available").toBool());
      CHECK(loaded.attr("__delegate_td_partition_reference").toModule().run_method("td_is_available").toBool());
    }
    auto loaded = torch::jit::load(path);
    CHECK(loaded.forward({x, h}).toTensor().allclose(want));
    CHECK(fallback_add_calls == 2);
    std::remove(path.c_str());
  }
  SUBCASE("each backend keeps its own compile options") {
    test_backends::typed_options scaled;
    scaled.target = std::string("cpu");
    scaled.scale = 2.0;  // TypedOptionsAdd scales its result: both adds doubled
    auto lowered = torch_delegate::lower_partially<TypedOptionsAdd, ReferenceBackend>(module, {}, {{"forward", scaled}}, {});
    const at::Tensor c = torch::relu((x + h) * 2.0) * x - h;
    CHECK(lowered.forward({x, h}).toTensor().allclose(torch::sigmoid((c + x) * 2.0)));
    // Its required option missing: the error names it and the backend.
    CHECK_THROWS_WITH((torch_delegate::lower_partially<TypedOptionsAdd, ReferenceBackend>(module)),
                      doctest::Contains("backend 'td_partition_typed_options', method 'forward_region_0': missing required option 'target'"));
  }
  SUBCASE("errors: a backend listed twice") {
    CHECK_THROWS_WITH((torch_delegate::lower_partially<ReferenceBackend, ReferenceBackend>(module)),
                      doctest::Contains("the backend is listed twice in the priority list (td_partition_reference, "
                                        "td_partition_reference)"));
  }
}

namespace {
/// Takes multiplications, in regions of 2 nodes or more (a third reason for the tests below).
struct MulsInPairs : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_muls_in_pairs";
  static constexpr std::size_t min_region_size = 2;
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::mul || node->kind() == c10::prim::Constant;
  }
};
/// The same in regions of 3 nodes or more.
struct MulsInThrees : MulsInPairs {
  static constexpr std::string_view name = "td_partition_muls_in_threes";
  static constexpr std::size_t min_region_size = 3;
};
}  // namespace

TEST_CASE("several backends: a node no backend takes is kept with each backend's reason, in data, text and saved report") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    b = a * h
    return torch.relu(b)
)");
  using torch_delegate::backend_reason;
  using torch_delegate::kept_reason;
  auto kept_of = [](const torch_delegate::delegation_report& report, const std::string& kind) {
    for (const auto& node : report.methods.at(0).kept)
      if (node.kind == kind) return node;
    FAIL("no kept " << kind);
    return torch_delegate::kept_node{};
  };

  SUBCASE("three backends, three reasons for the mul; one reason, on one line, where all agree") {
    // no_mul_regions: the add and the mul make a region it refuses; adds_only takes the add and
    // does not support the mul; muls_in_pairs gets the mul alone, a region too small.
    const auto plan = torch_delegate::delegation_plan<NoMulRegions, AddsOnly, MulsInPairs>(module);
    const torch_delegate::kept_node mul = kept_of(plan, "aten::mul");
    CHECK(mul.per_backend == std::vector<backend_reason>{
                                 {"td_partition_no_mul_regions", kept_reason::refused_by_backend, "2-node region"},
                                 {"td_partition_adds_only", kept_reason::unsupported_kind, ""},
                                 {"td_partition_muls_in_pairs", kept_reason::region_too_small, "1 node < 2"}});
    // The primary reason: the backend that got furthest (a refused region is further than a
    // region too small or an unsupported kind).
    CHECK(mul.reason == kept_reason::refused_by_backend);
    CHECK(mul.detail == "2-node region");
    const torch_delegate::kept_node relu = kept_of(plan, "aten::relu");
    CHECK(relu.reason == kept_reason::unsupported_kind);
    CHECK(relu.per_backend == std::vector<backend_reason>{{"td_partition_no_mul_regions", kept_reason::unsupported_kind, ""},
                                                          {"td_partition_adds_only", kept_reason::unsupported_kind, ""},
                                                          {"td_partition_muls_in_pairs", kept_reason::unsupported_kind, ""}});
    CHECK(plan.to_string() ==
          "delegation of __torch__.m to backends td_partition_no_mul_regions, td_partition_adds_only, td_partition_muls_in_pairs\n"
          "  forward: 1 region, 1 nodes delegated, 2 kept in TorchScript\n"
          "    region forward_region_0: 1 nodes (aten::add) on td_partition_adds_only at <string>:3\n"
          "    kept aten::relu: unsupported kind at <string>:5\n"
          "    kept aten::mul at <string>:4:\n"
          "      td_partition_no_mul_regions: refused by the backend (2-node region)\n"
          "      td_partition_adds_only: unsupported kind\n"
          "      td_partition_muls_in_pairs: region too small (1 node < 2)\n");

    // Lowered, saved and loaded: the same report, as data and as text.
    auto lowered = torch_delegate::lower_partially<NoMulRegions, AddsOnly, MulsInPairs>(module);
    CHECK(torch_delegate::delegation_report_data_of(lowered) == plan);
    const std::string path = temp_path("three_reasons.pt");
    lowered.save(path);
    auto loaded = torch::jit::load(path);
    CHECK(torch_delegate::delegation_report_data_of(loaded) == plan);
    CHECK(torch_delegate::delegation_report_of(loaded) == plan.to_string());
    std::remove(path.c_str());
    const at::Tensor x = torch::randn({4}), h = torch::randn({4});
    CHECK(loaded.forward({x, h}).toTensor().allclose(torch::jit::Module(module).forward({x, h}).toTensor()));
  }
  SUBCASE("the primary reason is the furthest, wherever its backend is in the list") {
    // adds_only first: the mul is unsupported there; no_mul_regions then refuses it alone.
    const auto plan = torch_delegate::delegation_plan<AddsOnly, NoMulRegions>(module);
    const torch_delegate::kept_node mul = kept_of(plan, "aten::mul");
    CHECK(mul.per_backend == std::vector<backend_reason>{
                                 {"td_partition_adds_only", kept_reason::unsupported_kind, ""},
                                 {"td_partition_no_mul_regions", kept_reason::refused_by_backend, "1-node region"}});
    CHECK(mul.reason == kept_reason::refused_by_backend);
    CHECK(mul.detail == "1-node region");
  }
  SUBCASE("backends that got as far: the first's is the primary") {
    const auto plan = torch_delegate::delegation_plan<MulsInPairs, MulsInThrees>(module);
    const torch_delegate::kept_node mul = kept_of(plan, "aten::mul");
    CHECK(mul.per_backend == std::vector<backend_reason>{
                                 {"td_partition_muls_in_pairs", kept_reason::region_too_small, "1 node < 2"},
                                 {"td_partition_muls_in_threes", kept_reason::region_too_small, "1 node < 3"}});
    CHECK(mul.detail == "1 node < 2");
    CHECK(contains(plan.to_string(), "    kept aten::mul at <string>:4:\n"
                                     "      td_partition_muls_in_pairs: region too small (1 node < 2)\n"
                                     "      td_partition_muls_in_threes: region too small (1 node < 3)\n"));
  }
  SUBCASE("one backend: its reason, once, on one line (as before several backends)") {
    const auto plan = torch_delegate::delegation_plan<MulsInPairs>(module);
    const torch_delegate::kept_node mul = kept_of(plan, "aten::mul");
    CHECK(mul.per_backend ==
          std::vector<backend_reason>{{"td_partition_muls_in_pairs", kept_reason::region_too_small, "1 node < 2"}});
    CHECK(contains(plan.to_string(), "    kept aten::mul: region too small (1 node < 2) at <string>:4\n"));
  }
  SUBCASE("require_full names the first node by its primary reason") {
    torch_delegate::partition_options options;
    options.require_full = true;
    CHECK_THROWS_WITH((torch_delegate::lower_partially<AddsOnly, NoMulRegions>(module, options)),
                      doctest::Contains("require_full: 2 node(s) would stay in TorchScript, the first aten::relu (unsupported kind)"));
    CHECK_THROWS_WITH((torch_delegate::delegation_plan<AddsOnly, NoMulRegions, MulsInPairs>(
                          script("def forward(self, x, h):\n    return (x + h) * h\n"), options)),
                      doctest::Contains("the first aten::mul (refused by the backend: 1-node region) at <string>:2"));
  }
}

namespace {
/// ReferenceBackend that takes 3 ms more per call: measured, it always loses to TorchScript.
struct SlowReference : ReferenceBackend {
  static constexpr std::string_view name = "td_partition_slow_reference";
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return ReferenceBackend::execute(handle, inputs);
  }
};
}  // namespace

TEST_CASE("measured partitioning: a region slower on its backend stays in TorchScript; a plan replays decisions") {
  const auto module = script(R"(
def forward(self, x, h):
    a = x * h + x
    b = torch.relu(a)
    return b - h
)");
  const at::Tensor x = torch::randn({8}), h = torch::randn({8});
  const at::Tensor want = torch::jit::Module(module).forward({x, h}).toTensor();
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x, h};
  options.measure = true;

  SUBCASE("slower: kept, with both times; the report says why") {
    const auto plan = torch_delegate::delegation_plan<SlowReference>(module, options);
    CHECK(plan.methods[0].regions.empty());
    std::size_t slower = 0;
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::slower_on_backend) {
        ++slower;
        CHECK(node.detail.find(" ms on td_partition_slow_reference, ") != std::string::npos);
        CHECK(node.detail.find(" ms in TorchScript") != std::string::npos);
      }
    CHECK(slower == 3);  // mul, add; sub (relu is not supported)
    CHECK(torch_delegate::lower_partially<SlowReference>(module, options).forward({x, h}).toTensor().allclose(want));
  }
  SUBCASE("with a priority list, the next backend gets what the first lost") {
    const auto plan = torch_delegate::delegation_plan<SlowReference, ReferenceBackend>(module, options);
    for (const auto& region : plan.methods[0].regions) {
      CHECK(region.backend == "td_partition_reference");
      CHECK(region.backend_ms >= 0);
      CHECK(region.backend_ms <= region.torchscript_ms);  // delegated only where faster
    }
  }
  SUBCASE("a node the first backend measured slower and the next does not support: both reasons; a replay keeps them") {
    const auto plan = torch_delegate::delegation_plan<SlowReference, AddsOnly>(module, options);
    const torch_delegate::kept_node* mul = nullptr;
    for (const auto& node : plan.methods[0].kept)
      if (node.kind == "aten::mul") mul = &node;
    REQUIRE(mul);
    REQUIRE(mul->per_backend.size() == 2);
    CHECK(mul->per_backend[0].backend == "td_partition_slow_reference");
    CHECK(mul->per_backend[0].reason == torch_delegate::kept_reason::slower_on_backend);
    CHECK(contains(mul->per_backend[0].detail, " ms on td_partition_slow_reference, "));
    CHECK(mul->per_backend[1] ==
          torch_delegate::backend_reason{"td_partition_adds_only", torch_delegate::kept_reason::unsupported_kind, ""});
    // Slower on a backend that supports it says more than unsupported on one that does not.
    CHECK(mul->reason == torch_delegate::kept_reason::slower_on_backend);
    CHECK(mul->detail == mul->per_backend[0].detail);
    CHECK(contains(plan.to_string(), "    kept aten::mul at <string>:3:\n"
                                     "      td_partition_slow_reference: slower on the backend (" +
                                         mul->detail + ")\n      td_partition_adds_only: unsupported kind\n"));
    // Replayed, the first backend's region keeps its own measured reason (not "not delegated in
    // the replayed plan").
    torch_delegate::partition_options again = options;
    again.measure = false;
    again.replay = plan;
    const auto replayed = torch_delegate::delegation_plan<SlowReference, AddsOnly>(module, again);
    bool same = false;
    for (const auto& node : replayed.methods[0].kept)
      if (node.kind == "aten::mul") same = node.per_backend == mul->per_backend && node.reason == mul->reason;
    CHECK(same);
  }
  SUBCASE("every measured region has both times, and is delegated only where its backend is faster") {
    const auto plan = torch_delegate::delegation_plan<ReferenceBackend>(module, options);
    for (const auto& region : plan.methods[0].regions) {
      CHECK(region.backend_ms >= 0);
      CHECK(region.backend_ms <= region.torchscript_ms);
    }
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::slower_on_backend) CHECK(!node.detail.empty());
  }
  SUBCASE("replay: the regions of an earlier report, nothing timed, whatever the backend's speed") {
    options.measure = false;
    const auto rule = torch_delegate::delegation_plan<SlowReference>(module, options);  // by the rules: delegated
    REQUIRE(rule.methods[0].regions.size() == 2);
    torch_delegate::delegation_report earlier = rule;
    earlier.methods[0].regions.erase(earlier.methods[0].regions.begin());  // the first region was "slower"
    earlier.methods[0].regions[0].backend_ms = 0.5;
    earlier.methods[0].regions[0].torchscript_ms = 0.75;
    options.replay = earlier;
    const auto replayed = torch_delegate::delegation_plan<SlowReference>(module, options);
    REQUIRE(replayed.methods[0].regions.size() == 1);
    CHECK(replayed.methods[0].regions[0].kinds == rule.methods[0].regions[1].kinds);
    CHECK(replayed.methods[0].regions[0].backend_ms == 0.5);
    bool dropped = false;
    for (const auto& node : replayed.methods[0].kept)
      dropped |= node.reason == torch_delegate::kept_reason::slower_on_backend && node.detail == "not delegated in the replayed plan";
    CHECK(dropped);
    auto lowered = torch_delegate::lower_partially<SlowReference>(module, options);
    CHECK(lowered.forward({x, h}).toTensor().allclose(want));
    const bool same_regions = torch_delegate::delegation_report_data_of(lowered)->methods[0].regions == replayed.methods[0].regions;
    CHECK(same_regions);
  }
}

namespace {
/// td_test_partition::slow_add: an add that takes 4 ms more in TorchScript and none on
/// SwitchingBackend (as an accelerator runs an op the CPU runs slowly).
thread_local bool on_switching_backend = false;
at::Tensor slow_add(const at::Tensor& a, const at::Tensor& b) {
  if (!on_switching_backend) std::this_thread::sleep_for(std::chrono::milliseconds(4));
  return a + b;
}
/// td_test_partition::sleepy: 10 ms in TorchScript (none on a backend: only SleepyTaker takes it).
at::Tensor sleepy(const at::Tensor& a) {
  if (!on_switching_backend) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return a * 2;
}
TORCH_LIBRARY(td_test_partition, m) {
  m.def("slow_add(Tensor a, Tensor b) -> Tensor", slow_add);
  m.def("sleepy(Tensor a) -> Tensor", sleepy);
}

/// A backend fast alone and slow in a method: each region runs slow_add at no cost, but a call
/// of another region than the last one pays 15 ms (as a device that reloads its program or its
/// weights when it switches regions). Timed alone, each region wins; in a method with two of
/// them, every call switches. Deterministic: sleeps, not speeds.
struct SwitchingBackend : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_switching";
  static inline thread_local const void* last = nullptr;
  static inline std::atomic<int> switches{0};
  static bool supports(const torch::jit::Node* node) {
    return node->kind().toQualString() == std::string("td_test_partition::slow_add") || node->kind() == c10::prim::Constant;
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    if (last != handle.function.get()) {
      last = handle.function.get();
      ++switches;
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    on_switching_backend = true;
    auto outputs = GenericBackend::execute(handle, inputs);
    on_switching_backend = false;
    return outputs;
  }
};

/// Resolves td_test_partition.<op> in TorchScript source (Module::define knows only torch.*).
struct CustomOpsResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                         const torch::jit::SourceRange& range) override {
    if (name == "td_test_partition") return std::make_shared<torch::jit::BuiltinModule>("td_test_partition");
    return torch::jit::nativeResolver()->resolveValue(name, function, range);
  }
  c10::TypePtr resolveType(const std::string&, const torch::jit::SourceRange&) override { return nullptr; }
};
}  // namespace

TEST_CASE("measured partitioning: the method decides last (regions fast alone, slower together, are taken out)") {
  torch::jit::Module module("m");
  module.define(R"(
def forward(self, x):
    a = td_test_partition.slow_add(x, x)
    b = torch.relu(a)
    c = td_test_partition.slow_add(b, x)
    return torch.relu(c)
)", std::make_shared<CustomOpsResolver>());
  const at::Tensor x = torch::randn({16});
  const at::Tensor want = torch::relu(torch::relu(x + x) + x);
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};

  SUBCASE("without measuring, both regions are delegated and every call switches") {
    auto lowered = torch_delegate::lower_partially<SwitchingBackend>(module, options);
    CHECK(torch_delegate::delegation_report_data_of(lowered)->methods[0].regions.size() == 2);
    SwitchingBackend::switches = 0;
    CHECK(lowered.forward({x}).toTensor().allclose(want));
    CHECK(lowered.forward({x}).toTensor().allclose(want));
    CHECK(SwitchingBackend::switches == 4);
  }
  SUBCASE("measured: each region wins alone (about 0 against 4 ms), so the plan delegates both") {
    options.measure = true;
    const auto plan = torch_delegate::delegation_plan<SwitchingBackend>(module, options);
    REQUIRE(plan.methods[0].regions.size() == 2);
    for (const auto& region : plan.methods[0].regions) CHECK(region.backend_ms < region.torchscript_ms);
  }
  SUBCASE("measured and lowered: the method (about 30 against 8 ms) takes one region out; the rest is faster") {
    options.measure = true;
    auto lowered = torch_delegate::lower_partially<SwitchingBackend>(module, options);
    const auto report = *torch_delegate::delegation_report_data_of(lowered);
    REQUIRE(report.methods[0].regions.size() == 1);
    std::size_t taken_out = 0;
    for (const auto& node : report.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::slower_on_backend) {
        ++taken_out;
        CHECK(node.kind == "td_test_partition::slow_add");
        CHECK(node.detail.find("slower in the method: forward took ") != std::string::npos);
        CHECK(node.detail.find(" ms as TorchScript; the regions of least measured gain are kept (alone: ") != std::string::npos);
      }
    CHECK(taken_out == 1);
    SwitchingBackend::switches = 0;
    CHECK(lowered.forward({x}).toTensor().allclose(want));
    CHECK(lowered.forward({x}).toTensor().allclose(want));
    CHECK(SwitchingBackend::switches <= 1);  // one region left: it switches at most once, from another module
    // Saved and loaded, the decision stays (nothing is timed at load).
    const std::string path = temp_path("method_check.pt");
    lowered.save(path);
    auto loaded = torch::jit::load(path);
    CHECK(torch_delegate::delegation_report_data_of(loaded)->methods[0].regions.size() == 1);
    CHECK(loaded.forward({x}).toTensor().allclose(want));
    std::remove(path.c_str());
  }
}

TEST_CASE("measured partitioning: a region that saves less than min_gain of its method stays in TorchScript") {
  // The region (slow_add) saves about 4 ms of a method of about 14 ms (sleepy stays in
  // TorchScript): about 29 %.
  torch::jit::Module module("m");
  module.define(R"(
def forward(self, x):
    a = td_test_partition.slow_add(x, x)
    return td_test_partition.sleepy(a)
)", std::make_shared<CustomOpsResolver>());
  const at::Tensor x = torch::randn({16});
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  options.measure = true;

  SUBCASE("min_gain 0.5: kept, with both times, the saving and the method's time") {
    options.min_gain = 0.5;
    const auto plan = torch_delegate::delegation_plan<SwitchingBackend>(module, options);
    CHECK(plan.methods[0].regions.empty());
    const auto kept_add = [](const torch_delegate::method_delegation& method) {
      const auto found = std::find_if(method.kept.begin(), method.kept.end(),
                                      [](const auto& node) { return node.kind == "td_test_partition::slow_add"; });
      REQUIRE(found != method.kept.end());
      return *found;
    };
    const auto node = kept_add(plan.methods[0]);
    CHECK(node.reason == torch_delegate::kept_reason::gain_below_minimum);
    CHECK(torch_delegate::to_string(node.reason) == "gain below the minimum");
    CHECK(node.detail.find(" ms on td_partition_switching, ") != std::string::npos);
    CHECK(node.detail.find(" ms in TorchScript: saves ") != std::string::npos);
    CHECK(node.detail.find(" ms, less than 50 % of forward (") != std::string::npos);
    CHECK(node.detail.find(" ms, min_gain)") != std::string::npos);
    // A replayed plan keeps the reason and its detail; the lowered module saves them.
    torch_delegate::partition_options replaying = options;
    replaying.replay = plan;
    auto lowered = torch_delegate::lower_partially<SwitchingBackend>(module, replaying);
    const auto report = *torch_delegate::delegation_report_data_of(lowered);
    CHECK(report.methods[0].regions.empty());
    CHECK(kept_add(report.methods[0]).reason == torch_delegate::kept_reason::gain_below_minimum);
    CHECK(kept_add(report.methods[0]).detail == node.detail);
    CHECK(lowered.forward({x}).toTensor().allclose((x + x) * 2));
  }
  SUBCASE("min_gain 0.1 (or 0): delegated") {
    for (double share : {0.1, 0.0}) {
      options.min_gain = share;
      const auto plan = torch_delegate::delegation_plan<SwitchingBackend>(module, options);
      REQUIRE(plan.methods[0].regions.size() == 1);
      CHECK(plan.methods[0].regions[0].backend_ms < plan.methods[0].regions[0].torchscript_ms);
    }
  }
  SUBCASE("regions that save little each, but much together, are delegated; the least while they add up to less") {
    torch::jit::Module two("m");
    two.define(R"(
def forward(self, x):
    a = td_test_partition.slow_add(x, x)
    b = td_test_partition.sleepy(a)
    return td_test_partition.slow_add(b, x)
)", std::make_shared<CustomOpsResolver>());
    // Two regions of about 4 ms each, in a method of about 18 ms.
    options.min_gain = 0.3;  // about 5.4 ms: one region alone is below, the two together are not
    auto plan = torch_delegate::delegation_plan<SwitchingBackend>(two, options);
    CHECK(plan.methods[0].regions.size() == 1);
    std::size_t below = 0;
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::gain_below_minimum) {
        ++below;
        CHECK(node.detail.find(" ms, less than 30 % of forward (") != std::string::npos);
        CHECK(node.detail.find("together") == std::string::npos);
      }
    CHECK(below == 1);
    options.min_gain = 0.6;  // about 10.8 ms: both together are below
    plan = torch_delegate::delegation_plan<SwitchingBackend>(two, options);
    CHECK(plan.methods[0].regions.empty());
    below = 0;
    for (const auto& node : plan.methods[0].kept)
      if (node.reason == torch_delegate::kept_reason::gain_below_minimum) {
        ++below;
        CHECK(node.detail.find(" ms; the 2 regions that save least save ") != std::string::npos);
        CHECK(node.detail.find(" ms together, less than 60 % of forward (") != std::string::npos);
      }
    CHECK(below == 2);
  }
  SUBCASE("a min_gain outside [0, 1) is an error") {
    for (double bad : {-0.1, 1.0, std::nan("")}) {
      options.min_gain = bad;
      CHECK_THROWS_WITH(torch_delegate::delegation_plan<SwitchingBackend>(module, options),
                        doctest::Contains("min_gain is a share of the method's time, in [0, 1) (0.01: 1 %); got "));
    }
  }
}

namespace {
/// Two backends that run slow_add (4 ms in TorchScript): one in 3 ms, one at no cost.
struct SlowerAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_slower_adds";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    on_switching_backend = true;
    auto outputs = GenericBackend::execute(handle, inputs);
    on_switching_backend = false;
    return outputs;
  }
};
thread_local bool after_faster_adds = false;
struct FasterAdds : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_faster_adds";
  static bool supports(const torch::jit::Node* node) { return SwitchingBackend::supports(node); }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    on_switching_backend = true;
    auto outputs = GenericBackend::execute(handle, inputs);
    on_switching_backend = false;
    after_faster_adds = true;
    return outputs;
  }
};
/// Runs sleepy (10 ms in TorchScript) at no cost, but in 12 ms right after FasterAdds ran: as one
/// backend's threads wait while another's spin down. Each region is faster than TorchScript alone,
/// and both in one method (12 ms) are slower than SleepyTaker alone (4 ms: slow_add in TorchScript).
struct SleepyTaker : test_backends::GenericBackend {
  static constexpr std::string_view name = "td_partition_sleepy_taker";
  static bool supports(const torch::jit::Node* node) {
    return node->kind().toQualString() == std::string("td_test_partition::sleepy") || node->kind() == c10::prim::Constant;
  }
  static std::vector<c10::IValue> execute(test_backends::graph_handle& handle, torch_delegate::inputs inputs) {
    if (after_faster_adds) std::this_thread::sleep_for(std::chrono::milliseconds(12));
    after_faster_adds = false;
    on_switching_backend = true;
    auto outputs = GenericBackend::execute(handle, inputs);
    on_switching_backend = false;
    return outputs;
  }
};
}  // namespace

TEST_CASE("measured partitioning: choose_order keeps the fastest of the list's order, each other backend first, and each alone") {
  torch::jit::Module module("m");
  module.define(R"(
def forward(self, x):
    a = td_test_partition.slow_add(x, x)
    return torch.relu(a)
)", std::make_shared<CustomOpsResolver>());
  const at::Tensor x = torch::randn({16});
  const at::Tensor want = torch::relu(x + x);
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {x};
  options.measure = true;
  auto backend_of_region = [](const torch::jit::Module& lowered) {
    const auto report = *torch_delegate::delegation_report_data_of(lowered);
    REQUIRE(report.methods[0].regions.size() == 1);
    return report.methods[0].regions[0].backend;
  };

  SUBCASE("the list's order: the first backend pays (3 against 4 ms) and takes the region") {
    auto lowered = torch_delegate::lower_partially<SlowerAdds, FasterAdds>(module, options);
    CHECK(backend_of_region(lowered) == "td_partition_slower_adds");
    CHECK(torch_delegate::delegation_report_data_of(lowered)->backend == "td_partition_slower_adds, td_partition_faster_adds");
  }
  SUBCASE("choose_order: the other order is faster (0 against 3 ms) and is kept; the report names it") {
    options.choose_order = true;
    auto lowered = torch_delegate::lower_partially<SlowerAdds, FasterAdds>(module, options);
    CHECK(backend_of_region(lowered) == "td_partition_faster_adds");
    CHECK(torch_delegate::delegation_report_data_of(lowered)->backend == "td_partition_faster_adds, td_partition_slower_adds");
    CHECK(lowered.forward({x}).toTensor().allclose(want));
    // Saved and loaded, the order stays; replaying its report with the list's order repeats it.
    const std::string path = temp_path("choose_order.pt");
    lowered.save(path);
    auto loaded = torch::jit::load(path);
    CHECK(backend_of_region(loaded) == "td_partition_faster_adds");
    CHECK(loaded.forward({x}).toTensor().allclose(want));
    std::remove(path.c_str());
    torch_delegate::partition_options replaying;
    replaying.example_inputs = options.example_inputs;
    replaying.replay = *torch_delegate::delegation_report_data_of(lowered);
    CHECK(backend_of_region(torch_delegate::lower_partially<SlowerAdds, FasterAdds>(module, replaying)) == "td_partition_faster_adds");
  }
  SUBCASE("the list's order is kept when it is the fastest") {
    options.choose_order = true;
    auto lowered = torch_delegate::lower_partially<FasterAdds, SlowerAdds>(module, options);
    CHECK(backend_of_region(lowered) == "td_partition_faster_adds");
    CHECK(torch_delegate::delegation_report_data_of(lowered)->backend == "td_partition_faster_adds, td_partition_slower_adds");
  }
  SUBCASE("choose_order: one backend alone, when its regions beside the other's are slower together") {
    torch::jit::Module both("m");
    both.define(R"(
def forward(self, x):
    a = td_test_partition.slow_add(x, x)
    return td_test_partition.sleepy(a)
)", std::make_shared<CustomOpsResolver>());
    options.example_inputs["forward"] = {x};
    auto backends_of = [](const torch::jit::Module& lowered) {  // "backend: kinds; ..."
      std::string names;
      const auto report = *torch_delegate::delegation_report_data_of(lowered);
      for (const auto& region : report.methods[0].regions)
        names += (names.empty() ? "" : "; ") + region.backend + ": " + region.kinds.at(0);
      return names;
    };
    // The list's order: each region on its backend (0 + 12 ms against 4 + 10 in TorchScript).
    auto listed = torch_delegate::lower_partially<FasterAdds, SleepyTaker>(both, options);
    CHECK(backends_of(listed) == "td_partition_faster_adds: td_test_partition::slow_add; td_partition_sleepy_taker: td_test_partition::sleepy");
    options.choose_order = true;
    auto chosen = torch_delegate::lower_partially<FasterAdds, SleepyTaker>(both, options);
    CHECK(backends_of(chosen) == "td_partition_sleepy_taker: td_test_partition::sleepy");
    CHECK(torch_delegate::delegation_report_data_of(chosen)->backend == "td_partition_sleepy_taker");
    CHECK(chosen.forward({x}).toTensor().allclose((x + x) * 2));
  }
  SUBCASE("without measure, an error") {
    options.measure = false;
    options.choose_order = true;
    CHECK_THROWS_WITH((torch_delegate::lower_partially<SlowerAdds, FasterAdds>(module, options)),
                      doctest::Contains("choose_order compares measured lowerings: set measure (with example_inputs) too"));
  }
}

TEST_CASE("node queries: constants, values known at lowering, sizes from example inputs") {
  torch::jit::Module module("m");
  module.register_parameter("w", torch::ones({2, 3}), false);
  module.define(R"(
def forward(self, x):
    return torch.add(x, self.w, alpha=2)
)");
  auto graph = module.get_method("forward").graph()->copy();
  const torch::jit::Node* add = nullptr;
  for (const torch::jit::Node* node : graph->nodes())
    if (node->kind() == c10::aten::add) add = node;
  REQUIRE(add != nullptr);
  CHECK(torch_delegate::constant_is(add->input(2), c10::IValue(std::int64_t{2})));
  CHECK(!torch_delegate::constant_is(add->input(2), c10::IValue(std::int64_t{1})));
  CHECK(torch_delegate::constant_of(add->input(2))->toInt() == 2);
  CHECK(!torch_delegate::constant_of(add->input(0)));
  CHECK(!torch_delegate::known_at_lowering(add->input(0)));  // the method's argument
  CHECK(torch_delegate::known_at_lowering(add->input(1)));   // a parameter read
  CHECK(torch_delegate::known_at_lowering(add->input(2)));
  CHECK(!torch_delegate::known_sizes(add->input(0)));  // no example inputs: not known
  CHECK(!torch_delegate::known_sizes(add->input(2)));  // not a tensor
  add->input(0)->setType(c10::TensorType::create(torch::rand({2, 3})));
  CHECK(*torch_delegate::known_sizes(add->input(0)) == std::vector<std::int64_t>{2, 3});
}
