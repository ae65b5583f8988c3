// The backend toolkit (backends/toolkit): graph reading, support rules, fused activations, the
// op table, typed payload records and the availability helpers, on graphs parsed from IR text.
#include "toolkit/availability.hpp"
#include "toolkit/fused_activation.hpp"
#include "toolkit/graph.hpp"
#include "toolkit/known_values.hpp"
#include "toolkit/size_programs.hpp"
#include "toolkit/op_table.hpp"
#include "toolkit/payload_record.hpp"
#include "toolkit/support_rules.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <boost/hana/adapt_struct.hpp>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace toolkit_test {

/// A record as a backend declares one: its last field appended in a later version.
struct pool_record {
  std::int64_t input = 0, output = 0;
  double scale = 1.0;
  bool ceil_mode = false;
  std::int64_t added_later = 7;
  static constexpr std::size_t oldest_fields = 4;
};
struct list_record {
  std::int64_t output = 0;
  std::vector<std::int64_t> inputs;
};

}  // namespace toolkit_test

BOOST_HANA_ADAPT_STRUCT(toolkit_test::pool_record, input, output, scale, ceil_mode, added_later);
BOOST_HANA_ADAPT_STRUCT(toolkit_test::list_record, output, inputs);

namespace {

namespace toolkit = torch_delegate::toolkit;

std::shared_ptr<torch::jit::Graph> parse(const std::string& ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

/// The first node of `kind` in `graph`.
const torch::jit::Node* first(const torch::jit::Graph& graph, const char* kind) {
  for (const torch::jit::Node* node : graph.nodes())
    if (toolkit::is(node, kind)) return node;
  FAIL("no " << kind << " in the graph");
  return nullptr;
}

const char* const conv_graph = R"IR(
graph(%self : Tensor, %x : Float(1, 3, 8, 8), %w : Float(4, 3, 3, 3)):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %low : float = prim::Constant[value=-0.5]()
  %ones : int[] = prim::ListConstruct(%one, %one)
  %zeros : int[] = prim::ListConstruct(%zero, %zero)
  %one_by_one : int[] = prim::Constant[value=[1, 1]]()
  %y : Float(1, 4, 6, 6) = aten::conv2d(%x, %w, %none, %ones, %zeros, %ones, %one)
  %z : Float(1, 4, 6, 6) = aten::hardtanh(%y, %low, %one)
  %p : Float(1, 4, 1, 1) = aten::adaptive_avg_pool2d(%z, %one_by_one)
  %r : (Tensor, Tensor) = prim::TupleConstruct(%z, %p)
  return (%r)
)IR";

}  // namespace

TEST_CASE("toolkit graph reading: predicates, constants, float and rank checks, a region's inputs and results") {
  auto graph = parse(conv_graph);
  const torch::jit::Node* conv = first(*graph, "aten::conv2d");
  CHECK(toolkit::is_any(conv, {"aten::linear", "aten::conv2d"}));
  CHECK_FALSE(toolkit::is(conv, "aten::linear"));
  CHECK(toolkit::constant_int(conv->input(6)) == 1);
  CHECK_FALSE(toolkit::constant_int(conv->input(1)));
  CHECK(toolkit::constant_double(first(*graph, "aten::hardtanh")->input(1)) == -0.5);
  CHECK(toolkit::is_float_of_rank_or_unknown(conv->input(0), 4));
  CHECK_FALSE(toolkit::is_float_of_rank_or_unknown(conv->input(0), 2));
  CHECK(toolkit::float_sizes(conv->input(0)) == std::vector<std::int64_t>{1, 3, 8, 8});
  CHECK(toolkit::rank_is_or_unknown(conv->input(0), {2, 4}));
  CHECK(toolkit::region_inputs(*graph).size() == 2);
  const auto results = toolkit::region_results(*graph);
  REQUIRE(results.size() == 2);
  CHECK(toolkit::is(results[1]->node(), "aten::adaptive_avg_pool2d"));
  CHECK(toolkit::is_results_tuple(first(*graph, "prim::TupleConstruct")));
  CHECK(toolkit::only_reader(conv->output()) == first(*graph, "aten::hardtanh"));
}

TEST_CASE("toolkit support rules: conv2d with weights known at lowering, adaptive pool to 1x1, window sizes as PyTorch's") {
  auto graph = parse(conv_graph);
  // The weight is a graph input here (not a constant nor an attribute): not foldable.
  CHECK_FALSE(toolkit::conv2d_foldable(first(*graph, "aten::conv2d")));
  CHECK(toolkit::adaptive_pool_to_one(first(*graph, "aten::adaptive_avg_pool2d")));
  for (std::int64_t size : {5, 8, 13, 14}) {
    const at::Tensor pooled = at::max_pool2d(at::zeros({1, 1, size, size}), 3, 2, 1, 1, true);
    CHECK(toolkit::window_output_size(size, 1, 1, 3, 2, 1, true) == pooled.size(2));
    CHECK(toolkit::window_output_size(size, 1, 1, 3, 2, 1) == at::max_pool2d(at::zeros({1, 1, size, size}), 3, 2, 1).size(2));
  }
  CHECK(toolkit::n_values({3}, 2) == std::vector<std::int64_t>{3, 3});
  CHECK(toolkit::n_values({3}, 3) == std::vector<std::int64_t>{3, 3, 3});
  CHECK(toolkit::n_values({1, 3, 3}, 3) == std::vector<std::int64_t>{1, 3, 3});
}

TEST_CASE("toolkit support rules: an adaptive pool to a size that divides its input's is fixed windows") {
  auto graph = parse(R"IR(
graph(%self : Tensor, %x : Float(1, 4, 12, 14), %u : Tensor):
  %six_seven : int[] = prim::Constant[value=[6, 7]]()
  %twelve : int[] = prim::Constant[value=[12, 14]]()
  %five : int[] = prim::Constant[value=[5, 7]]()
  %a : Float(1, 4, 6, 7) = aten::adaptive_avg_pool2d(%x, %six_seven)
  %b : Float(1, 4, 12, 14) = aten::adaptive_avg_pool2d(%x, %twelve)
  %c : Float(1, 4, 5, 7) = aten::adaptive_avg_pool2d(%x, %five)
  %d : Tensor = aten::adaptive_avg_pool2d(%u, %six_seven)
  %r : (Tensor, Tensor, Tensor, Tensor) = prim::TupleConstruct(%a, %b, %c, %d)
  return (%r)
)IR");
  std::vector<const torch::jit::Node*> pools;
  for (const torch::jit::Node* node : graph->nodes())
    if (toolkit::is(node, "aten::adaptive_avg_pool2d")) pools.push_back(node);
  REQUIRE(pools.size() == 4);
  CHECK(toolkit::adaptive_pool_window(pools[0]) == std::vector<std::int64_t>{2, 2});
  CHECK(toolkit::adaptive_pool_window(pools[1]) == std::vector<std::int64_t>{1, 1});  // its own size: windows of one
  CHECK_FALSE(toolkit::adaptive_pool_window(pools[2]));  // 12 rows into 5: windows of 2 and 3 rows
  CHECK_FALSE(toolkit::adaptive_pool_window(pools[3]));  // sizes unknown
  CHECK_FALSE(toolkit::adaptive_pool_to_one(pools[0]));
  CHECK_FALSE(toolkit::adaptive_pool_window(first(*graph, "prim::TupleConstruct")));
}

TEST_CASE("toolkit fused activations: clamp ranges, activation kinds, and folding the one reader of an output") {
  auto graph = parse(conv_graph);
  const torch::jit::Node* hardtanh = first(*graph, "aten::hardtanh");
  CHECK(toolkit::clamp_range(hardtanh) == std::make_pair(-0.5, 1.0));
  CHECK_FALSE(toolkit::clamp_range(first(*graph, "aten::conv2d")));
  const auto act = toolkit::activation_of(hardtanh);
  REQUIRE(act);
  CHECK(act->kind == toolkit::activation_kind::clip);
  std::unordered_set<const torch::jit::Node*> folded;
  const torch::jit::Value* output = first(*graph, "aten::conv2d")->output();
  const auto range = toolkit::fold_following(output, [](const torch::jit::Value*) { return false; }, folded, toolkit::clamp_range);
  CHECK(range == std::make_pair(-0.5, 1.0));
  CHECK(output == hardtanh->output());
  CHECK(folded.count(hardtanh) == 1);
  // Not when two nodes read the output (the pool and the results' tuple).
  const torch::jit::Value* result = hardtanh->output();
  CHECK_FALSE(toolkit::fold_following(result, [](const torch::jit::Value*) { return true; }, folded, toolkit::clamp_range));
}

TEST_CASE("toolkit payload records: named fields over a payload's ints, read back, older versions with defaults") {
  const toolkit_test::pool_record record{3, 4, 0.25, true, 9};
  const std::vector<std::int64_t> ints = toolkit::record_ints(record);
  REQUIRE(ints.size() == 5);
  const auto back = toolkit::read_record<toolkit_test::pool_record>(ints);
  REQUIRE(back);
  CHECK(back->scale == 0.25);
  CHECK(back->ceil_mode);
  CHECK(back->added_later == 9);
  const auto older = toolkit::read_record<toolkit_test::pool_record>(std::span(ints).first(4));
  REQUIRE(older);
  CHECK(older->added_later == 7);
  CHECK_FALSE(toolkit::read_record<toolkit_test::pool_record>(std::span(ints).first(3)));
  CHECK(toolkit::field_names<toolkit_test::pool_record>() == "input, output, scale, ceil_mode, added_later");
  const auto list = toolkit::read_record<toolkit_test::list_record>(toolkit::record_ints(toolkit_test::list_record{5, {1, 2, 3}}));
  REQUIRE(list);
  CHECK(list->inputs == std::vector<std::int64_t>{1, 2, 3});
  CHECK_FALSE(toolkit::read_record<toolkit_test::list_record>(std::vector<std::int64_t>{}));
}

TEST_CASE("toolkit op table: one table answers supports() and dispatches preprocess") {
  struct builder {
    std::vector<std::string> emitted;
  };
  toolkit::op_table<builder> table;
  table.add({"aten::hardtanh", "aten::relu"}, [](const torch::jit::Node* node) { return toolkit::clamp_range(node).has_value(); },
            [](builder& b, const torch::jit::Node* node) { b.emitted.push_back(node->kind().toQualString()); });
  table.add("aten::conv2d", toolkit::conv2d_foldable, [](builder&, const torch::jit::Node*) {});
  auto graph = parse(conv_graph);
  CHECK(table.supports(first(*graph, "aten::hardtanh")));
  CHECK_FALSE(table.supports(first(*graph, "aten::conv2d")));  // listed, its rule refuses
  CHECK(table.lists(first(*graph, "aten::conv2d")));
  CHECK_FALSE(table.supports(first(*graph, "aten::adaptive_avg_pool2d")));
  builder b;
  CHECK(table.emit(b, first(*graph, "aten::hardtanh")));
  CHECK_FALSE(table.emit(b, first(*graph, "aten::adaptive_avg_pool2d")));
  CHECK(b.emitted == std::vector<std::string>{"aten::hardtanh"});
  CHECK(table.kinds() == std::vector<std::string>{"aten::hardtanh", "aten::relu", "aten::conv2d"});
}

TEST_CASE("toolkit availability: the probe unless the variable is set; comma-separated lists") {
  ::unsetenv("TD_TOOLKIT_TEST_UNAVAILABLE");
  int probes = 0;
  CHECK(toolkit::available_unless("TD_TOOLKIT_TEST_UNAVAILABLE", [&] { return ++probes > 0; }));
  ::setenv("TD_TOOLKIT_TEST_UNAVAILABLE", "1", 1);
  CHECK_FALSE(toolkit::available_unless("TD_TOOLKIT_TEST_UNAVAILABLE", [&] { return ++probes > 0; }));
  CHECK(probes == 1);  // not probed when the variable says unavailable
  ::setenv("TD_TOOLKIT_TEST_LIST", "ref,,jit:avx2,", 1);
  CHECK(toolkit::environment_list("TD_TOOLKIT_TEST_LIST") == std::vector<std::string>{"ref", "jit:avx2"});
  ::unsetenv("TD_TOOLKIT_TEST_UNAVAILABLE");
  ::unsetenv("TD_TOOLKIT_TEST_LIST");
  CHECK(toolkit::environment_list("TD_TOOLKIT_TEST_LIST").empty());
}

TEST_CASE("toolkit known values: sizes and what is computed from them, scripted and traced spellings") {
  // ShuffleNetV2's channel shuffle, scripted (aten::floordiv of ints) and traced (a number in a
  // 0-dim tensor: prim::NumToTensor, aten::floor_divide, aten::Int); a graph input is not known.
  auto graph = parse(R"IR(
graph(%self : Tensor, %x : Float(1, 16, 8, 8), %n : int):
  %two : int = prim::Constant[value=2]()
  %minus_one : int = prim::Constant[value=-1]()
  %sizes : int[] = aten::size(%x)
  %b : int, %c : int, %h : int, %w : int = prim::ListUnpack(%sizes)
  %half : int = aten::floordiv(%c, %two)
  %shape : int[] = prim::ListConstruct(%b, %two, %half, %h, %w)
  %last : int = aten::size(%x, %minus_one)
  %root : float = aten::sqrt(%half)
  %c_tensor : Tensor = prim::NumToTensor(%c)
  %half_tensor : Tensor = aten::floor_divide(%c_tensor, %two)
  %traced_half : int = aten::Int(%half_tensor)
  %unknown : int = aten::floordiv(%n, %two)
  %r : (int[], int, float, int, int) = prim::TupleConstruct(%shape, %last, %root, %traced_half, %unknown)
  return (%r)
)IR");
  const torch::jit::Node* results = first(*graph, "prim::TupleConstruct");
  CHECK(toolkit::known_ints(results->input(0)) == std::vector<std::int64_t>{1, 2, 8, 8, 8});
  CHECK(toolkit::known_int(results->input(1)) == 8);
  CHECK(toolkit::known_number(results->input(2)) == doctest::Approx(std::sqrt(8.0)));
  CHECK(toolkit::known_int(results->input(3)) == 8);
  CHECK_FALSE(toolkit::known_value(results->input(4)));  // from an input: known only at run time
  CHECK_FALSE(toolkit::known_value(first(*graph, "aten::size")->input(0)));  // a tensor is no number
}

TEST_CASE("toolkit size programs: a view's sizes computed again for other shapes, scripted and traced spellings") {
  // `b, c, h, w = x.size(); x.view(b, 2, c // 2, h, w)`, and a traced `c // 2`; sizes from a value
  // the region does not hold (%n, %y) have no program.
  auto graph = parse(R"IR(
graph(%self : Tensor, %x : Float(1, 16, 8, 8), %y : Float(1, 4), %n : int):
  %two : int = prim::Constant[value=2]()
  %minus_one : int = prim::Constant[value=-1]()
  %sizes : int[] = aten::size(%x)
  %b : int, %c : int, %h : int, %w : int = prim::ListUnpack(%sizes)
  %half : int = aten::floordiv(%c, %two)
  %shape : int[] = prim::ListConstruct(%b, %two, %half, %h, %w)
  %last : int = aten::size(%x, %minus_one)
  %c_tensor : Tensor = prim::NumToTensor(%c)
  %half_tensor : Tensor = aten::floor_divide(%c_tensor, %two)
  %traced_half : int = aten::Int(%half_tensor)
  %traced : int[] = prim::ListConstruct(%b, %traced_half, %last, %minus_one)
  %from_input : int[] = prim::ListConstruct(%b, %n)
  %y_rows : int = aten::size(%y, %two)
  %from_y : int[] = prim::ListConstruct(%y_rows)
  %r : (int[], int[], int[], int[]) = prim::TupleConstruct(%shape, %traced, %from_input, %from_y)
  return (%r)
)IR");
  const torch::jit::Node* results = first(*graph, "prim::TupleConstruct");
  const torch::jit::Value* x = graph->inputs()[1];
  const auto ids = [&](const torch::jit::Value* value) -> std::optional<std::int64_t> {
    return value == x ? std::optional<std::int64_t>(0) : std::nullopt;  // the region holds x alone, as value 0
  };
  const auto run = [](const std::vector<std::int64_t>& program, std::vector<std::int64_t> x_sizes) {
    return toolkit::run_size_program(program, [&](std::int64_t value, std::int64_t dim) {
      REQUIRE(value == 0);
      return x_sizes.at(static_cast<std::size_t>(dim));
    });
  };
  const auto shape = toolkit::size_list_program(results->input(0), ids);
  REQUIRE(shape);
  CHECK(run(*shape, {1, 16, 8, 8}) == std::vector<std::int64_t>{1, 2, 8, 8, 8});  // the example's
  CHECK(run(*shape, {5, 24, 7, 9}) == std::vector<std::int64_t>{5, 2, 12, 7, 9});  // another batch, channels, size
  const auto traced = toolkit::size_list_program(results->input(1), ids);
  REQUIRE(traced);
  CHECK(run(*traced, {3, 32, 4, 6}) == std::vector<std::int64_t>{3, 16, 6, -1});  // -1 stays: the planner infers it
  CHECK_FALSE(toolkit::size_list_program(results->input(2), ids));  // %n: a number from outside the region
  CHECK_FALSE(toolkit::size_list_program(results->input(3), ids));  // %y: a tensor the region does not hold

  SUBCASE("sizes an emitter computes itself, and Python's floor division") {
    const auto parts = toolkit::size_list_program({{-1, 1}, {0, 2}, {0, 0}});
    CHECK(run(parts, {4, 5, 6}) == std::vector<std::int64_t>{1, 6, 4});
    using op = toolkit::size_op;
    const auto code = [](std::initializer_list<op> ops) {
      std::vector<std::int64_t> program{0, -7, 0, 2};  // push -7, push 2
      for (const op o : ops) program.push_back(static_cast<std::int64_t>(o));
      return program;
    };
    CHECK(run(code({op::floordiv, op::result}), {}) == std::vector<std::int64_t>{-4});  // -7 // 2, as Python
    CHECK(run(code({op::sub, op::result}), {}) == std::vector<std::int64_t>{-9});
  }
  SUBCASE("a malformed program is an error that says so") {
    CHECK_THROWS_WITH_AS(run({2}, {}), "a size program: an instruction without its operand", std::invalid_argument);
    CHECK_THROWS_WITH_AS(run({0, 1}, {}), "a size program: values left over", std::invalid_argument);
    CHECK_THROWS_WITH_AS(run({0, 1, 0, 0, 3, 6}, {}), "a size program: a division by zero", std::invalid_argument);
    CHECK_THROWS_WITH_AS(run({9}, {}), "a size program: unknown instruction 9", std::invalid_argument);
  }
}
