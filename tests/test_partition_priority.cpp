// Partial lowering to a priority list of backends: each node to the first backend that takes it,
// and a node no backend takes reported with every backend's reason.
#include "partition_backends.hpp"
#include <torch_delegate/report_format.hpp>

using namespace test_helpers;
using namespace partition_backends;

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
    REQUIRE(!plan.methods[0].regions.empty());
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
