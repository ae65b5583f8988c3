// Partial lowering, its regions (lower_partially<B>, delegation_plan<B>): which nodes form a region,
// where runs stop and go on, blocks, the region pass alone on a graph, random graphs.
#include "partition_backends.hpp"

#include <torch_delegate/detail/regions.hpp>

#include <random>
#include <sstream>

using namespace test_helpers;
using namespace partition_backends;

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
  SUBCASE("a kept node computed from attributes alone moves before the region's call, its readers stay in the run") {
    // As Swin V2's logit scale, `clamp(self.logit_scale).exp()` after its queries' norm.
    torch::jit::Module module("m");
    module.register_parameter("w", torch::rand({3, 4}), false);
    module.define(R"(
def forward(self, x, h):
    a = x + h
    r = torch.relu(self.w)
    c = a - h
    return r + c
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 1);
    CHECK(plan.methods[0].regions[0].node_count == 3);  // add, sub, add
    bool relu_kept = false;
    for (const auto& node : plan.methods[0].kept) relu_kept |= node.kind == "aten::relu";
    CHECK(relu_kept);
    const at::Tensor x = torch::rand({3, 4}), h = torch::rand({3, 4});
    for (const bool fallback : {false, true}) {
      torch_delegate::partition_options options;
      options.fallback_when_unavailable = fallback;
      torch::jit::Module lowered = torch_delegate::lower_partially<DemoBackend>(module, options);
      CHECK(count_kind(lowered, "prim::CallMethod") == (fallback ? 2u : 1u));  // with fallback, is_available() too
      CHECK(lowered.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));
      // The relu runs before the call that reads it.
      bool relu_seen = false, call_after_relu = false;
      for (const torch::jit::Node* node : lowered.get_method("forward").graph()->nodes()) {
        relu_seen |= node->kind() == c10::Symbol::fromQualString("aten::relu");
        call_after_relu |= relu_seen && (node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::If);
      }
      CHECK(call_after_relu);
    }
  }
  SUBCASE("a reader of a hoisted node that reads nothing the run made starts a run of its own") {
    torch::jit::Module module("m");
    module.register_parameter("w", torch::rand({3, 4}), false);
    module.define(R"(
def forward(self, x, h):
    a = x + h
    r = torch.relu(self.w)
    s = r + r
    c = a - h
    return s + c
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 2);  // a | (relu) | s, c, s + c
    CHECK(plan.methods[0].regions[0].node_count == 1);
    CHECK(plan.methods[0].regions[1].node_count == 3);
    const at::Tensor x = torch::rand({3, 4}), h = torch::rand({3, 4});
    torch::jit::Module lowered = torch_delegate::lower_partially<DemoBackend>(module);
    CHECK(lowered.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));
  }
  SUBCASE("a kept node that reads the method's input still ends its readers' run (pointwise_fusion's regions are one iteration space)") {
    const auto module = script(R"(
def forward(self, x, h):
    a = x + h
    r = torch.relu(h)
    c = a - h
    return r + c
)");
    const auto plan = torch_delegate::delegation_plan<DemoBackend>(module);
    CHECK(plan.methods[0].regions.size() == 2);
    lowered_equal(module);
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
  SUBCASE("a number only a later run reads is not the earlier region's to compute (Swin's next layer's n = ws[0] * ws[1])") {
    auto module = script(R"(
def forward(self, x, k: int):
    a = x * 2.0
    n = k * 3
    r = torch.relu(a)
    return r + n
)");
    const auto plan = torch_delegate::delegation_plan<ReferenceBackend>(module);
    REQUIRE(plan.methods[0].regions.size() == 2);  // x * 2.0 | (relu) | r + n; k * 3 stays where it is
    CHECK(plan.methods[0].regions[0].node_count == 1);
    bool kept = false;
    for (const auto& node : plan.methods[0].kept)
      kept |= node.kind == "aten::mul" && node.reason == torch_delegate::kept_reason::boundary_type &&
              node.detail == "a number that only nodes outside the region read";
    CHECK(kept);
    torch::jit::Module lowered = torch_delegate::lower_partially<ReferenceBackend>(module);
    const at::Tensor x = torch::randn({3, 4});
    CHECK(lowered.forward({x, std::int64_t{5}}).toTensor().allclose(module.forward({x, std::int64_t{5}}).toTensor()));
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
