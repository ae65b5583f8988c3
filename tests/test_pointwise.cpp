// The pointwise_fusion backend (backends/pointwise_fusion): every op against eager, on every
// kernel ISA this CPU runs, over shapes that broadcast, are empty, strided or span threads, with
// NaN, infinities and subnormals; random fused programs; its errors; its payload decoder; the
// profiler seeing its worker threads; a partially lowered feed-forward block.
#include "helpers.hpp"

#include "pointwise_fusion/pointwise_backend.hpp"

#include <torch_delegate/partition.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <random>
#include <set>

using namespace test_helpers;
using pointwise::PointwiseBackend;

namespace {

/// pointwise_fusion taking every region, one cheap node too (the backend itself leaves a lone add
/// or relu to eager).
struct FuseEverything : PointwiseBackend {
  static constexpr std::string_view name = "pointwise_fusion_every_region";
  static bool accepts_region(std::span<const torch::jit::Node* const>) { return true; }
};

/// Every node must be delegated, even a one-node region: a case cannot pass by staying in TorchScript.
torch::jit::Module fuse(const torch::jit::Module& module) {
  torch_delegate::partition_options options;
  options.require_full = true;
  options.min_region_size = 1;
  return torch_delegate::lower_partially<FuseEverything>(module, options);
}

/// Values with every special a float has, and ordinary ones around them.
at::Tensor special_values(at::IntArrayRef shape, std::uint64_t seed) {
  at::Tensor values = torch::randn(shape, at::TensorOptions(at::kFloat)) * 3;
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 100.0f, -100.0f, 1.0f};
  float* data = values.data_ptr<float>();
  std::mt19937_64 random(seed);
  for (std::int64_t i = 0; i < values.numel(); ++i)
    if (random() % 8 == 0) data[i] = specials[random() % std::size(specials)];
  return values;
}

struct kernel_isa_guard {
  std::string previous{pointwise::kernel_isa()};
  ~kernel_isa_guard() { pointwise::select_kernels(previous); }
};

std::vector<std::string> runnable_isas() {
  std::vector<std::string> isas;
  for (const char* isa : {"baseline", "avx2", "avx512"})
    if (pointwise::kernels_named(isa)) isas.emplace_back(isa);
  return isas;
}

void check_same(const c10::IValue& fused, const c10::IValue& eager, double rtol, double atol) {
  REQUIRE(fused.isTensor());
  const at::Tensor a = fused.toTensor(), b = eager.toTensor();
  REQUIRE((a.sizes() == b.sizes()));
  REQUIRE((a.scalar_type() == b.scalar_type()));
  if (a.scalar_type() == at::kBool) {
    CHECK(a.equal(b));
    return;
  }
  const bool close = at::allclose(a, b, rtol, atol, /*equal_nan=*/true);
  if (!close) {
    const at::Tensor difference = (a - b).abs().nan_to_num(0, 0, 0);
    const std::int64_t worst = difference.flatten().argmax().item<std::int64_t>();
    const std::string worst_text = "worst at " + std::to_string(worst) + ": fused " +
                                   std::to_string(a.flatten()[worst].item<float>()) + ", eager " +
                                   std::to_string(b.flatten()[worst].item<float>());
    INFO(worst_text);
    CHECK(close);
  }
}

struct op_case {
  const char* expression;  // of x (and y)
  double rtol = 1e-5, atol = 1e-6;
};

}  // namespace

TEST_CASE("pointwise_fusion: every op equals eager on every kernel ISA, for specials, shapes and strides") {
  // Stated tolerances (docs/pointwise-fusion.md): rtol 1e-5 / atol 1e-6; pow with a general
  // exponent (e^(e ln x)) rtol 1e-4.
  const op_case cases[] = {
      {"x + y"}, {"x - y"}, {"x * y"}, {"x / y"}, {"x + 2.5"}, {"x - 1.5"}, {"3.0 - x"}, {"x * 0.25"}, {"x / 3.0"},
      {"torch.add(x, y, alpha=2.0)"}, {"torch.sub(x, y, alpha=0.5)"}, {"torch.rsub(x, y)"}, {"-x"},
      {"torch.abs(x)"}, {"torch.relu(x)"}, {"torch.sigmoid(x)"}, {"torch.tanh(x)"}, {"torch.exp(x)"},
      {"torch.log(x)"}, {"torch.sqrt(x)"}, {"torch.rsqrt(x)"}, {"torch.reciprocal(x)"},
      {"torch.pow(x, 2.0)"}, {"torch.pow(x, 3.0)"}, {"torch.pow(x, 0.5)"}, {"torch.pow(x, -0.5)"},
      {"torch.pow(x, -1.0)"}, {"torch.pow(x, -2.0)"}, {"torch.pow(x, 0.0)"}, {"torch.pow(x, 1.0)"},
      {"torch.pow(x, 2.5)", 1e-4}, {"torch.pow(x, 4.0)", 1e-4}, {"torch.pow(x, -3.0)", 1e-4}, {"torch.pow(x, 2)"},
      {"torch.clamp(x, -1.0, 1.0)"}, {"torch.clamp(x, min=0.5)"}, {"torch.clamp(x, max=0.5)"},
      {"torch.clamp_min(x, 0.2)"}, {"torch.clamp_max(x, 0.2)"}, {"torch.minimum(x, y)"}, {"torch.maximum(x, y)"},
      {"torch.gelu(x)"}, {"torch.gelu(x, approximate='tanh')"}, {"torch.silu(x)"},
      {"x > y"}, {"x < y"}, {"x >= 0.0"}, {"x <= y"}, {"x == y"}, {"x != y"},
      {"torch.where(x > y, x, y)"}, {"torch.where(x < 0.5, 1.0, x)"}, {"torch.where(x > 0.0, y, -1.0)"},
  };
  struct shape_case {
    const char* name;
    std::vector<std::int64_t> x, y;
    bool strided_x = false;
  };
  const shape_case shapes[] = {
      {"equal, 3 x 700 (not a multiple of the block)", {3, 700}, {3, 700}},
      {"empty", {0}, {0}},
      {"one element", {1}, {1}},
      {"y broadcast along rows", {4, 300}, {300}},
      {"y a size-1 column", {5, 17}, {5, 1}},
      {"y 0-dim", {40}, {}},
      {"x transposed (strided)", {9, 33}, {9, 33}, true},
  };
  const kernel_isa_guard restore;
  const std::vector<std::string> isas = runnable_isas();
  CHECK(isas.front() == "baseline");
  for (const op_case& op : cases) {
    const torch::jit::Module module = script("def forward(self, x, y):\n    return " + std::string(op.expression) + "\n");
    const torch::jit::Module fused = fuse(module);
    for (const shape_case& shape : shapes) {
      at::Tensor x = special_values(shape.x, 1), y = special_values(shape.y, 2);
      if (shape.strided_x) x = special_values({shape.x[1], shape.x[0]}, 3).t();
      const c10::IValue eager = module.get_method("forward")({x, y});
      for (const std::string& isa : isas) {
        const std::string where = std::string(op.expression) + ", " + shape.name + ", " + isa;
        INFO(where);
        REQUIRE(pointwise::select_kernels(isa));
        check_same(fused.get_method("forward")({x, y}), eager, op.rtol, op.atol);
      }
    }
  }
}

TEST_CASE("pointwise_fusion: a large input on two threads equals eager") {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const torch::jit::Module module =
      script("def forward(self, x, h):\n    return torch.gelu(x * h + 1.0, approximate='tanh') - torch.sigmoid(h)\n");
  const at::Tensor x = special_values({1 << 20}, 4), h = special_values({1 << 20}, 5);
  check_same(fuse(module).get_method("forward")({x, h}), module.get_method("forward")({x, h}), 1e-5, 1e-6);
  at::set_num_threads(threads);
}

TEST_CASE("pointwise_fusion: random fused programs equal eager") {
  // Chains over x, y, z with constants, shared subexpressions and several outputs.
  const char* unary[] = {"torch.relu({})", "torch.sigmoid({})", "torch.tanh({})", "torch.exp(torch.clamp({}, -5.0, 5.0))",
                         "torch.abs({})", "-{}", "torch.gelu({})", "torch.silu({})", "torch.pow({}, 2.0)",
                         "torch.sqrt(torch.abs({}) + 1.0)", "torch.log(torch.abs({}) + 0.5)", "torch.clamp({}, min=-0.5)"};
  const char* binary[] = {"{} + {}", "{} - {}", "{} * {}", "{} / (torch.abs({}) + 1.0)", "torch.maximum({}, {})",
                          "torch.minimum({}, {})", "torch.where({} > {}, {}, {})", "torch.add({}, {}, alpha=0.5)"};
  auto fill = [](std::string pattern, const std::vector<std::string>& arguments) {
    std::size_t next = 0;
    for (std::size_t at = pattern.find("{}"); at != std::string::npos; at = pattern.find("{}")) {
      pattern.replace(at, 2, arguments[next % arguments.size()]);
      ++next;
    }
    return pattern;
  };
  std::mt19937 random(20261124);
  for (int program = 0; program < 40; ++program) {
    std::vector<std::string> values{"x", "y", "z"};
    std::string body;
    const int length = 2 + static_cast<int>(random() % 9);
    for (int i = 0; i < length; ++i) {
      std::string expression;
      const std::string a = values[random() % values.size()], b = values[random() % values.size()];
      if (random() % 2)
        expression = fill(unary[random() % std::size(unary)], {a});
      else {
        const std::string pattern = binary[random() % std::size(binary)];
        expression = pattern.starts_with("torch.where") ? fill(pattern, {a, b, b, a}) : fill(pattern, {a, b});
      }
      if (random() % 3 == 0) expression = "(" + expression + ") * " + std::to_string(1 + random() % 4) + ".5";
      body += "    v" + std::to_string(i) + " = " + expression + "\n";
      values.push_back("v" + std::to_string(i));
    }
    const std::string returned = random() % 2 ? values.back() : "(" + values.back() + ", " + values[values.size() - 2] + ")";
    const std::string source = "def forward(self, x, y, z):\n" + body + "    return " + returned + "\n";
    INFO(source);
    const torch::jit::Module module = script(source);
    const torch::jit::Module fused = fuse(module);
    const std::int64_t n = 1 + static_cast<std::int64_t>(random() % 3000);
    const std::vector<c10::IValue> inputs{torch::randn({n}), torch::randn({n}), random() % 3 ? torch::randn({n}) : torch::randn({})};
    const c10::IValue eager = module.get_method("forward")(inputs);
    const c10::IValue result = fused.get_method("forward")(inputs);
    if (eager.isTuple()) {
      REQUIRE(result.isTuple());
      for (std::size_t i = 0; i < eager.toTupleRef().elements().size(); ++i)
        check_same(result.toTupleRef().elements()[i], eager.toTupleRef().elements()[i], 1e-4, 1e-5);
    } else {
      check_same(result, eager, 1e-4, 1e-5);
    }
  }
}

TEST_CASE("pointwise_fusion: bool inputs and outputs, numbers from TorchScript, a returned input") {
  const torch::jit::Module module = script(R"(
def forward(self, mask, x, y, n: float):
    s = x * n + y
    return torch.where(mask, s, y), s > n, x
)");
  const torch::jit::Module fused = fuse(module);
  const at::Tensor mask = torch::rand({6, 5}) > 0.5, x = torch::randn({6, 5}), y = torch::randn({5});
  const std::vector<c10::IValue> inputs{mask, x, y, 1.5};
  const auto eager = module.get_method("forward")(inputs).toTupleRef().elements();
  const auto result = fused.get_method("forward")(inputs).toTupleRef().elements();
  REQUIRE(result.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) check_same(result[i], eager[i], 1e-6, 1e-6);
  CHECK(result[2].toTensor().is_same(x));  // returned as given, like TorchScript
}

TEST_CASE("pointwise_fusion: chains that pass each other nothing run each over its own shape") {
  // Side by side in the model, as ShuffleNetV2's branches at two resolutions: one region, three
  // chains. Before, the region broadcast every chain to one shape and failed on the first call
  // ("The size of tensor a (16) must match the size of tensor b (8)").
  const torch::jit::Module module = script(R"(
def forward(self, x, y, z, w):
    a = torch.sigmoid(x) * 2.0
    b = torch.tanh(y) + 1.0
    c = x * 3.0 + z
    d = torch.exp(w) - 1.0
    return a, b, c, d
)");
  const torch::jit::Module fused = fuse(module);
  for (const std::int64_t side : {16, 64}) {  // 64: each part spans threads
    CAPTURE(side);
    const at::Tensor x = torch::randn({2, 8, side, side}), y = torch::randn({2, 8, side / 2, side / 2}), z = torch::randn({side}),
                     w = torch::randn({8, 1, 1});
    const std::vector<c10::IValue> inputs{x, y, z, w};
    const auto eager = module.get_method("forward")(inputs).toTupleRef().elements();
    const auto result = fused.get_method("forward")(inputs).toTupleRef().elements();
    REQUIRE(result.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) check_same(result[i], eager[i], 1e-5, 1e-6);
  }
  // One input shape for all: one pass, as before.
  const at::Tensor x = torch::randn({4, 5});
  const std::vector<c10::IValue> same{x, x, x, x};
  const auto eager = module.get_method("forward")(same).toTupleRef().elements();
  const auto result = fused.get_method("forward")(same).toTupleRef().elements();
  for (std::size_t i = 0; i < 4; ++i) check_same(result[i], eager[i], 1e-5, 1e-6);
}

TEST_CASE("pointwise_fusion: one chain whose values do not broadcast to one shape: an error naming the step and the line") {
  // a [3] read by two steps that broadcast it to [4, 3] and [5, 3]: eager runs it, one loop cannot.
  const torch::jit::Module module = script(R"(
def forward(self, x, y, w):
    a = torch.sigmoid(x)
    b = a + y
    c = a * w
    return b, c
)");
  const torch::jit::Module fused = fuse(module);
  const std::vector<c10::IValue> inputs{torch::randn({3}), torch::randn({4, 1}), torch::randn({5, 1})};
  CHECK_NOTHROW(module.get_method("forward")(inputs));
  const std::string error = error_of([&] { fused.get_method("forward")(inputs); });
  CHECK_CONTAINS(error, "pointwise_fusion: aten::mul makes a value of shape [5, 3] in a chain of steps over shape [4, 3], "
                        "and the two do not broadcast: one fused loop cannot run both");
  CHECK_CONTAINS(error, "c = a * w");

  // With example inputs the sizes are known at lowering: pointwise_fusion refuses the region,
  // saying why, and the nodes run in TorchScript.
  torch_delegate::partition_options options;
  options.example_inputs = {{"forward", inputs}};
  const torch_delegate::delegation_report plan = torch_delegate::delegation_plan<PointwiseBackend>(module, options);
  INFO(plan.to_string());
  CHECK(plan.methods[0].regions.empty());
  CHECK_CONTAINS(plan.to_string(), "refused by the backend (3-node region: in one chain, aten::mul makes [5, 3] where others make "
                                   "[4, 3]: one loop cannot run shapes that do not broadcast to one)");
  const torch::jit::Module kept = torch_delegate::lower_partially<PointwiseBackend>(module, options);
  const auto eager = module.get_method("forward")(inputs).toTupleRef().elements();
  const auto result = kept.get_method("forward")(inputs).toTupleRef().elements();
  for (std::size_t i = 0; i < 2; ++i) check_same(result[i], eager[i], 1e-6, 1e-6);
}

TEST_CASE("pointwise_fusion: errors name the op and point at the model's line") {
  const torch::jit::Module fused = fuse(script(R"(
def forward(self, x, y):
    a = torch.relu(x)
    return a * y + 1.0
)"));
  const std::string dtype = error_of([&] { fused.get_method("forward")({torch::ones({3}), torch::ones({3}, at::kLong)}); });
  CHECK_CONTAINS(dtype, "pointwise_fusion: aten::mul expects float32 tensors; input 2 is a Long tensor of shape [3]");
  CHECK_CONTAINS(dtype, "return a * y + 1.0");
  CHECK_CONTAINS(dtype, "<string>:4");

  const std::string shape = error_of([&] { fused.get_method("forward")({torch::ones({2, 3}), torch::ones({4})}); });
  CHECK_CONTAINS(shape, "pointwise_fusion: aten::mul: shapes [2, 3] and [4] are not broadcastable");
  CHECK_CONTAINS(shape, "<string>:4");

  const std::string device = error_of([&] { fused.get_method("forward")({at::empty({3}, at::kMeta), torch::ones({3})}); });
  CHECK_CONTAINS(device, "pointwise_fusion: aten::relu runs on the CPU; input 1 is on meta");
  CHECK_CONTAINS(device, "a = torch.relu(x)");
}

TEST_CASE("pointwise_fusion: what it does not fuse stays in TorchScript, with the reason") {
  const torch::jit::Module module = script(R"(
def forward(self, x, y):
    a = x * y + 1.0
    b = torch.matmul(a, y)
    c = torch.div(a, y, rounding_mode='floor')
    return b + c * 2.0 - 1.0
)");
  const std::string report = torch_delegate::delegation_plan<PointwiseBackend>(module).to_string();
  INFO(report);
  CHECK_CONTAINS(report, "aten::matmul");
  CHECK_CONTAINS(report, "aten::div");
  CHECK_CONTAINS(report, "unsupported kind");
  const torch::jit::Module fused = torch_delegate::lower_partially<PointwiseBackend>(module);
  const at::Tensor x = torch::randn({4, 4}), y = torch::randn({4, 4});
  check_same(fused.get_method("forward")({x, y}), module.get_method("forward")({x, y}), 1e-5, 1e-5);
}

TEST_CASE("pointwise_fusion: a feed-forward block: the Linears stay in TorchScript, the pointwise chains are fused") {
  torch::jit::Module module("ffn");
  module.register_parameter("w1", torch::randn({64, 16}) * 0.1, false);
  module.register_parameter("b1", torch::randn({64}) * 0.1, false);
  module.register_parameter("w2", torch::randn({16, 64}) * 0.1, false);
  module.register_parameter("b2", torch::randn({16}) * 0.1, false);
  module.define(R"(
def forward(self, x):
    h = torch.linear(x, self.w1, self.b1)
    g = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
    return (x + torch.linear(g, self.w2, self.b2)) * 0.5
)");
  const torch_delegate::delegation_report plan = torch_delegate::delegation_plan<PointwiseBackend>(module);
  INFO(plan.to_string());
  REQUIRE(plan.methods.size() == 1);
  REQUIRE(plan.methods[0].regions.size() == 2);  // the GELU (8 nodes), the residual add and scale
  CHECK(plan.methods[0].regions[0].node_count == 8);
  CHECK(plan.methods[0].regions[1].node_count == 2);
  std::size_t linears = 0;
  for (const auto& kept : plan.methods[0].kept) linears += kept.kind == "aten::linear";
  CHECK(linears == 2);
  const torch::jit::Module fused = torch_delegate::lower_partially<PointwiseBackend>(module);
  const at::Tensor x = torch::randn({32, 16});
  check_same(fused.get_method("forward")({x}), module.get_method("forward")({x}), 1e-5, 1e-6);
}

TEST_CASE("pointwise_fusion: a lone transcendental op is fused, a lone cheap one is left to eager") {
  const torch::jit::Module module = script(R"(
def forward(self, x, w):
    h = torch.gelu(torch.matmul(x, w), approximate='tanh')
    return torch.relu(torch.matmul(h, w))
)");
  const torch_delegate::delegation_report plan = torch_delegate::delegation_plan<PointwiseBackend>(module);
  INFO(plan.to_string());
  REQUIRE(plan.methods[0].regions.size() == 1);
  CHECK(plan.methods[0].regions[0].kinds == std::vector<std::string>{"aten::gelu"});
  bool relu_refused = false;
  for (const auto& kept : plan.methods[0].kept)
    relu_refused |= kept.kind == "aten::relu" && kept.reason == torch_delegate::kept_reason::refused_by_backend;
  CHECK(relu_refused);
  const at::Tensor x = torch::randn({8, 8}), w = torch::randn({8, 8});
  check_same(torch_delegate::lower_partially<PointwiseBackend>(module).get_method("forward")({x, w}),
             module.get_method("forward")({x, w}), 1e-5, 1e-5);
}

TEST_CASE("pointwise_fusion: the profiler sees the fused region's work on every thread that ran it") {
  const torch::jit::Module fused = torch_delegate::lower_partially<PointwiseBackend>(
      script("def forward(self, x, h):\n    return torch.tanh(x * h) + h\n"));
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  using namespace torch::autograd::profiler;
  torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  prepareProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  enableProfiler(config, {torch::profiler::impl::ActivityType::CPU});
  const at::Tensor x = torch::randn({1 << 20}), h = torch::randn({1 << 20});
  fused.get_method("forward")({x, h});
  auto result = disableProfiler();
  at::set_num_threads(threads);
  std::set<std::uint64_t> event_threads;
  for (const auto& event : result->events()) {
    if (event.backend() != "pointwise_fusion") continue;
    event_threads.insert(event.startThreadId());
    CHECK_CONTAINS(event.name(), "aten::mul (<string>:2)");
    CHECK_CONTAINS(event.name(), "aten::tanh (<string>:2)");
  }
  CHECK(event_threads.size() == 2);
}

TEST_CASE("pointwise_fusion under LibTorch's legacy profiler: runs (instructions are not reported to it)") {
  // record_instruction reports to Kineto only; under the legacy profiler it used to crash or hang.
  const torch::jit::Module fused = torch_delegate::lower_partially<PointwiseBackend>(
      script("def forward(self, x):\n    return torch.relu(x * 2.0 + 1.0)\n"));
  const at::Tensor x = torch::randn({1 << 18});
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  {
    torch::autograd::profiler::RecordProfile guard(temp_path("legacy_trace.json"));
    CHECK(fused.get_method("forward")({x}).toTensor().equal(torch::relu(x * 2.0 + 1.0)));
  }
  at::set_num_threads(threads);
  std::filesystem::remove(temp_path("legacy_trace.json"));
}

TEST_CASE("pointwise_fusion payload: round trip, and a clear error for each malformed input") {
  pointwise::fused_program program;
  program.input_count = 2;
  program.constants.push_back({2, 0.1f});
  pointwise::step mul{pointwise::op::mul, 3, 0, 1};
  pointwise::step add{pointwise::op::add_scaled, 4, 3, 2};
  add.imm = -2.5f;
  program.steps = {mul, add};
  program.step_kinds = {"aten::mul", "aten::sub"};
  program.outputs = {{4, false}, {3, false}};
  program.slot_count = 5;
  const std::string text = pointwise::encode(program);
  CHECK(text == "pointwise_fusion 1\ninputs 2\nconst 2 0.1\nmul 3 0 aten::mul 0 1\nadd_scaled 4 -2.5 aten::sub 3 2\noutputs 4 3\n");
  CHECK(pointwise::encode(pointwise::decode(text)) == text);

  const std::pair<std::string, std::string> malformed[] = {
      {"", "pointwise_fusion payload: empty"},
      {"pointwise_fusion 2\n", "line 1: format version 2 is not one this build reads (1 to 1)"},
      {"demo 1\n", "line 1: expected the header 'pointwise_fusion <version>', got 'demo 1'"},
      {"pointwise_fusion 1\nmul 0 0 aten::mul 0 0\n", "line 2: expected 'inputs <count>' before 'mul'"},
      {"pointwise_fusion 1\ninputs 1\nfma 1 0 aten::mul 0\n", "line 3: unknown op 'fma'"},
      {"pointwise_fusion 1\ninputs 1\nmul 1 0 aten::mul 0 7\n", "line 3: operand slot 7 is not defined before slot 1"},
      {"pointwise_fusion 1\ninputs 1\nmul 2 0 aten::mul 0 0\n", "line 3: expected the next slot 1, got 2"},
      {"pointwise_fusion 1\ninputs 1\nneg 1 0 aten::neg 0 0\n", "line 3: unexpected text at the end of the line"},
      {"pointwise_fusion 1\ninputs 1\nneg 1 x aten::neg 0\n", "line 3: expected the step's immediate (a number), got 'x'"},
      {"pointwise_fusion 1\ninputs 1\noutputs 3\n", "line 3: expected an output slot below 1, got '3'"},
      {"pointwise_fusion 1\ninputs 1\noutputs 0\nneg 1 0 aten::neg 0\n", "line 4: nothing may follow 'outputs'"},
      {"pointwise_fusion 1\ninputs 1\nneg 1 0 aten::neg 0\n", "pointwise_fusion payload: no 'outputs' line"},
      {"pointwise_fusion 1\ninputs 99999999\n", "line 2: expected the input count (a number from 0 to 1048576), got '99999999'"},
  };
  for (const auto& [payload, message] : malformed) {
    INFO(payload);
    CHECK_CONTAINS(error_of([&] { pointwise::decode(payload); }), message);
  }
  // A constant cannot be returned: compile refuses it (the decoder only checks the syntax).
  CHECK_CONTAINS(error_of([] { PointwiseBackend::compile("pointwise_fusion 1\ninputs 1\nconst 1 2\noutputs 1\n"); }),
                 "output slot 1 is a constant");
}

TEST_CASE("pointwise_fusion compile: a multiply / add by a constant that only consumes the step before it becomes that step's epilogue") {
  // (x + h) * 2.0 - 1.0: add, mul_imm, add_imm -> one add with the epilogue * 2 + (-1).
  const pointwise::compiled_region chain = PointwiseBackend::compile(
      "pointwise_fusion 1\ninputs 2\nconst 2 2\nconst 3 1\nadd 4 0 aten::add 0 1\nmul 5 0 aten::mul 4 2\n"
      "sub 6 0 aten::sub 5 3\noutputs 6\n");
  REQUIRE(chain.program.steps.size() == 3);  // as decoded: errors name these
  REQUIRE(chain.kernel_steps.size() == 1);
  const pointwise::step& fused = chain.kernel_steps[0];
  CHECK(fused.code == pointwise::op::add);
  CHECK(fused.dst == 6);
  CHECK((fused.scales && fused.scale == 2.0f && fused.shifts && fused.shift == -1.0f));

  // Not merged: an intermediate read twice, one that is returned, an add before a multiply (the
  // epilogue multiplies first), and a first step (nothing before it).
  const pointwise::compiled_region twice = PointwiseBackend::compile(
      "pointwise_fusion 1\ninputs 2\nconst 2 2\nadd 3 0 aten::add 0 1\nmul 4 0 aten::mul 3 2\nmul 5 0 aten::mul 3 4\n"
      "outputs 5\n");
  CHECK(twice.kernel_steps.size() == 3);
  const pointwise::compiled_region returned = PointwiseBackend::compile(
      "pointwise_fusion 1\ninputs 2\nconst 2 2\nadd 3 0 aten::add 0 1\nmul 4 0 aten::mul 3 2\noutputs 4 3\n");
  CHECK(returned.kernel_steps.size() == 2);
  const pointwise::compiled_region shift_then_scale = PointwiseBackend::compile(
      "pointwise_fusion 1\ninputs 1\nconst 1 2\nneg 2 0 aten::neg 0\nadd 3 0 aten::add 2 1\nmul 4 0 aten::mul 3 1\n"
      "outputs 4\n");
  REQUIRE(shift_then_scale.kernel_steps.size() == 2);
  CHECK((shift_then_scale.kernel_steps[0].shifts && !shift_then_scale.kernel_steps[0].scales));
  CHECK(shift_then_scale.kernel_steps[1].code == pointwise::op::mul_imm);
  const pointwise::compiled_region first = PointwiseBackend::compile("pointwise_fusion 1\ninputs 1\nconst 1 2\nmul 2 0 aten::mul 0 1\noutputs 2\n");
  CHECK(first.kernel_steps.size() == 1);
  CHECK(!first.kernel_steps[0].scales);

  // Results: equal to eager on every ISA, specials included (multiplying by 2 and adding 1 is
  // exact here, so FMA's single rounding cannot differ), and the sign of zero survives an epilogue
  // that only scales or only shifts.
  const torch::jit::Module module = script(
      "def forward(self, x, h):\n    return (x + h) * 2.0 - 1.0, torch.neg(x) * 0.5, torch.neg(x) + 0.0, (x * h) - 3.0\n");
  const torch::jit::Module lowered = fuse(module);
  const kernel_isa_guard restore;
  const at::Tensor x = special_values({3, 700}, 7), h = special_values({3, 700}, 8);
  const auto eager = module.get_method("forward")({x, h}).toTuple()->elements();
  for (const std::string& isa : runnable_isas()) {
    INFO(isa);
    REQUIRE(pointwise::select_kernels(isa));
    const auto fused_results = lowered.get_method("forward")({x, h}).toTuple()->elements();
    REQUIRE(fused_results.size() == eager.size());
    for (std::size_t i = 0; i < 3; ++i) {
      INFO(i);
      const at::Tensor a = fused_results[i].toTensor(), b = eager[i].toTensor();
      CHECK(at::allclose(a, b, 0, 0, /*equal_nan=*/true));
      // The sign of every number (a NaN's sign is not one: ATen's and ours may differ).
      const at::Tensor sign_differs = (at::signbit(a) != at::signbit(b)).logical_and(a.isnan().logical_not());
      CHECK(sign_differs.sum().item<std::int64_t>() == 0);
    }
    check_same(fused_results[3], eager[3], 1e-5, 1e-6);  // one rounding with FMA, two eager
  }
}

TEST_CASE("pointwise_fusion: a module saved with payload format 1 keeps loading and giving the same results (tests/data)") {
  const torch::jit::Module loaded = torch::jit::load(std::string(TD_TEST_DATA_DIR) + "/pointwise_fusion_format1_by_e0f6b63.pt");
  const at::Tensor x = torch::linspace(-3, 3, 8).reshape({2, 4}), h = torch::tensor({0.5f, -0.25f, 0.0f});
  const at::Tensor w = torch::arange(12, torch::kFloat).reshape({3, 4}) / 10 - 0.5, b = torch::tensor({0.25f, -0.5f, 1.0f});
  const at::Tensor g = at::gelu(x, "tanh");
  const at::Tensor y = at::linear(g, w, b);
  const auto results = loaded.get_method("forward")({x, h}).toTupleRef().elements();
  REQUIRE(results.size() == 2);
  check_same(results[0], at::where(y > h, y, h) * 2.0 - at::sigmoid(h), 1e-5, 1e-5);
  check_same(results[1], y > h, 0, 0);
}
