// Partial lowering's knobs and compile options: typed options per method, minimum size, kinds and
// submodules kept or lowered alone, require_full; the original untouched, save and load; a
// registered backend found by name.
#include "partition_backends.hpp"

using namespace test_helpers;
using namespace partition_backends;

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
  REQUIRE(!plan.methods[0].regions.empty());  // the loops below compare something
  REQUIRE(!plan.methods[0].kept.empty());
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
  // Against the module, not x: (x + h) - h is x only up to rounding, which fails allclose where an
  // element of x is near 0 (a flaky check before).
  CHECK(lowered.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));
}

TEST_CASE("partial lowering: example inputs take the method's defaults; too few name its arguments and their defaults") {
  // RAFT's forward(image1, image2, num_flow_updates=12): two images given, the default taken as a call
  // takes it (and nn.TransformerEncoder's forward(src, mask=None, src_key_padding_mask=None) with (x,)).
  auto module = test_helpers::script(R"(
def forward(self, x, y, updates: int = 12):
    return x + y * float(updates)
)");
  torch_delegate::partition_options options;
  options.example_inputs["forward"] = {torch::randn({2}), torch::randn({2})};
  const torch::jit::Module defaulted = torch_delegate::lower_partially<partition_backends::AddsOnly>(module, options);
  CHECK(defaulted.get_method("forward")({torch::ones({2}), torch::ones({2})}).toTensor().equal(torch::full({2}, 13.0)));
  CHECK(options.example_inputs["forward"].size() == 2);  // the caller's options are not changed
  options.example_inputs["forward"] = {torch::randn({2})};
  CHECK_THROWS_WITH(torch_delegate::lower_partially<partition_backends::AddsOnly>(module, options),
                    doctest::Contains("example_inputs: 1 given, the method takes 3 (x, y, updates=12): give one for "
                                      "each argument without a default"));
  options.example_inputs["forward"] = {torch::randn({2}), torch::randn({2}), std::int64_t{3}};
  CHECK(torch_delegate::lower_partially<partition_backends::AddsOnly>(module, options)
            .forward({torch::ones({2}), torch::ones({2}), std::int64_t{12}})
            .toTensor()
            .equal(torch::full({2}, 13.0)));
}
