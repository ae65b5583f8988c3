// Partial lowering's report: submodules and source lines of regions and kept nodes, refusals by
// the backend, and the saved report format (versions 1 to 7).
#include "partition_backends.hpp"
#include <torch_delegate/report_format.hpp>

using namespace test_helpers;
using namespace partition_backends;

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
  std::size_t methods_own = 0;  // the method's if and add_, kept: both looked at
  for (const auto& node : plan.methods[0].kept)
    if (node.kind == "prim::If" || node.kind == "aten::add_") {
      ++methods_own;
      CHECK(node.submodule.empty());
    }
  CHECK(methods_own >= 2);
  REQUIRE(plan.methods[0].regions.size() == 2);
  CHECK(plan.methods[0].regions[0].submodule == "gate");  // the gate's comparison
  CHECK(plan.methods[0].regions[1].submodule.empty());    // the mul and add in the method's own if
  CHECK(plan.methods[0].regions[1].depth == 1);
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

  // The same refusal as a region_verdict that says why: the reason follows the region's size.
  const auto says_why = torch_delegate::delegation_plan<NoMulRegionsSaysWhy>(module);
  REQUIRE(says_why.methods[0].regions.size() == 1);
  refused = 0;
  for (const auto& kept : says_why.methods[0].kept)
    refused += kept.reason == torch_delegate::kept_reason::refused_by_backend && kept.detail == "2-node region: it multiplies";
  CHECK(refused == 2);
  CHECK_CONTAINS(says_why.to_string(), "refused by the backend (2-node region: it multiplies)");
  lowered_equal<NoMulRegionsSaysWhy>(module);
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

TEST_CASE("report format: versions 1 to 6 read back; anything else is nullopt, never a crash") {
  using namespace torch_delegate::detail;
  using torch_delegate::kept_reason;
  const torch_delegate::delegation_report report{
      "a, b",
      "__torch__.M",
      {{"forward",
        {{"forward_region_0",
          3,
          {"aten::add", "aten::mul"},
          "model.py:3",
          0,
          "encoder",
          {"input 0 (method argument x): to channels_last on entry", "output 0: to contiguous before aten::conv2d"},
          "b",
          1.5,
          2.25,
          "faster on b: 8 of 8 rounds by more than 3 % (0 the other way), sign test p = 0.0078"}},
        {{"aten::relu",
          kept_reason::slower_on_backend,
          "0.5 ms on a, 0.25 ms in TorchScript",
          "model.py:4",
          1,
          "encoder.block",
          {{"a", kept_reason::slower_on_backend, "0.5 ms on a, 0.25 ms in TorchScript"}, {"b", kept_reason::unsupported_kind, ""}}},
         {"aten::sub",
          kept_reason::outside_selection,
          "",
          "model.py:5",
          0,
          "",
          {{"a", kept_reason::outside_selection, ""}, {"b", kept_reason::outside_selection, ""}}},
         {"aten::mul", kept_reason::control_flow, "", "", 0, ""}},  // per_backend empty: made by hand
        {{"mask is None", "True", "the example", "model.py:2"}}}}};
  const c10::IValue saved = encode_report(report);
  CHECK(saved.toTupleRef().elements()[0].toInt() == report_format_version);
  CHECK(report_format_version == 8);
  CHECK(decode_report(saved) == report);
  CHECK(contains(report.to_string(), "    decided mask is None = True (the example) at model.py:2\n"));
  // The reason is saved as its token, not its label.
  const auto kept = saved.toTupleRef().elements()[3].toListRef()[0].toTupleRef().elements()[2].toListRef();
  CHECK(kept[1].toTupleRef().elements()[1].toStringRef() == "outside_selection");
  int reasons = 0;
  for (; token_of(static_cast<kept_reason>(reasons)) != "?"; ++reasons)
    CHECK(reason_of_token(token_of(static_cast<kept_reason>(reasons))) == static_cast<kept_reason>(reasons));
  CHECK(reasons == static_cast<int>(kept_reason::computed_at_lowering) + 1);  // every reason has a token

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
  SUBCASE("version 6 (before issue 40): measured regions without their decision") {
    std::vector<c10::IValue> region{std::string("forward_region_0"), std::int64_t{2}, c10::List<std::string>({"aten::add"}),
                                    std::string("m.py:2"), std::int64_t{0}, std::string(""), c10::List<std::string>(),
                                    std::string("x"), 0.5, 0.75};
    c10::impl::GenericList regions(region_data_type(6)), kept_nodes(kept_data_type(6));
    regions.push_back(c10::ivalue::Tuple::create(region));
    c10::impl::GenericList methods(method_data_type(6));
    methods.push_back(c10::ivalue::Tuple::create({std::string("forward"), regions, kept_nodes}));
    const auto read = decode_report(c10::ivalue::Tuple::create({std::int64_t{6}, std::string("x"), std::string("M"), methods}));
    REQUIRE(read);
    CHECK(read->methods[0].regions[0].backend_ms == 0.5);
    CHECK(read->methods[0].regions[0].decision.empty());
    CHECK(read->methods[0].decided.empty());  // before version 8: nothing decided
    CHECK(contains(read->to_string(), ": 0.5 ms on x, 0.75 ms in TorchScript\n"));
    // Version 7 writes the decision, and its text shows it.
    torch_delegate::delegation_report decided = *read;
    decided.methods[0].regions[0].decision = "not separable: of 40 rounds, 3 faster on x and 2 faster in TorchScript";
    CHECK(decode_report(encode_report(decided)) == decided);
    CHECK(contains(decided.to_string(), ": 0.5 ms on x, 0.75 ms in TorchScript (not separable: of 40 rounds, "));
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
