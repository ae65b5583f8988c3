// lower<B>: structure, outputs, untouched original, keyword args and defaults, save/load, the
// typed C++ path, and the demo backend.
#include "backends.hpp"
#include "helpers.hpp"

#include <functional>

#include <backend_with_compiler_demo/demo_backend.hpp>

#include <torch/csrc/jit/backends/backend_detail.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>

using namespace test_helpers;
using test_backends::TypedBackend;

namespace {
const char* const typed_source = R"(
def forward(self, x, h):
    return x + h

def pair(self, x, h, swap: bool):
    if swap:
        return x - h, x + h
    return x + h, x - h

def single(self, x):
    return (x * 2,)

def repeat(self, x, n: int) -> List[Tensor]:
    return [x for _ in range(n)]

def total(self, x, y, z) -> float:
    return float((x + y + z).sum())

def affine(self, x, alpha: float = 2.0, *, beta: int = 3):
    return x * alpha + beta
)";

torch_delegate::method_options<TypedBackend> all_typed_methods() {
  torch_delegate::method_options<TypedBackend> options;
  for (const char* method : {"forward", "pair", "single", "repeat", "total", "affine"})
    options[method].target = std::string("cpu");
  return options;
}
}  // namespace

TEST_CASE("lowered module has LibTorch's wrapper/lowered structure and attributes") {
  auto module = script(typed_source);
  auto lowered = torch_delegate::lower<TypedBackend>(module, all_typed_methods());
  const auto& wrapper = lowered.module();
  CHECK_CONTAINS(wrapper.type()->name()->qualifiedName(), "torch.jit.LoweredWrapper.td_test_typed.m");
  auto inner = wrapper.attr("__loweredModule__").toModule();
  CHECK_CONTAINS(inner.type()->name()->qualifiedName(), "torch.jit.LoweredModule.td_test_typed.m");
  for (const char* attribute : {"__processed_module", "__method_compile_spec", "__backend", "__handles"})
    CHECK_MESSAGE(inner.hasattr(attribute), attribute);
  CHECK(inner.attr("__backend").toObjectRef().type()->name()->qualifiedName() ==
        "__torch__.torch.classes.__backends__.td_test_typed");
  for (const char* method : {"__getstate__", "__setstate__", "forward", "pair"})
    CHECK_MESSAGE(inner.find_method(method).has_value(), method);
  // LibTorch's helpers __create_backend, __is_available and __create_backend_debug_info are
  // inlined into __setstate__: each method is compiled again by every torch::jit::load.
  for (const char* method : {"__create_backend", "__is_available", "__create_backend_debug_info"})
    CHECK_MESSAGE(!inner.find_method(method).has_value(), method);
  CHECK(inner.attr("__handles").toGenericDict().size() == 6);
}

TEST_CASE("lowered methods keep schemas and give the original's outputs") {
  auto module = script(typed_source);
  auto lowered = torch_delegate::lower<TypedBackend>(module, all_typed_methods());
  auto& m = lowered.module();
  const at::Tensor x = torch::rand({2, 3}), h = torch::rand({2, 3}), z = torch::rand({3});

  CHECK(m.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));

  SUBCASE("tuple result") {
    for (bool swap : {false, true}) {
      auto got = m.run_method("pair", x, h, swap).toTuple()->elements();
      auto want = module.run_method("pair", x, h, swap).toTuple()->elements();
      REQUIRE(got.size() == 2);
      CHECK(got[0].toTensor().allclose(want[0].toTensor()));
      CHECK(got[1].toTensor().allclose(want[1].toTensor()));
    }
  }
  SUBCASE("one-element tuple result stays a tuple") {
    auto got = m.run_method("single", x);
    REQUIRE(got.isTuple());
    REQUIRE(got.toTupleRef().elements().size() == 1);
    CHECK(got.toTupleRef().elements()[0].toTensor().allclose(x * 2));
  }
  SUBCASE("list result") {
    auto got = m.run_method("repeat", x, 3).toTensorVector();
    REQUIRE(got.size() == 3);
    CHECK(got[2].equal(x));
  }
  SUBCASE("scalar result") {
    CHECK(m.run_method("total", x, h, z).toDouble() ==
          doctest::Approx(module.run_method("total", x, h, z).toDouble()).epsilon(1e-6));
  }
  SUBCASE("schemas are the original's, keyword-only and defaults included") {
    for (const char* name : {"forward", "pair", "affine", "repeat"}) {
      const auto& original = module.get_method(name).function().getSchema();
      const auto& generated = m.get_method(name).function().getSchema();
      CHECK(original.arguments().size() == generated.arguments().size());
      for (std::size_t i = 1; i < original.arguments().size(); ++i) {
        CHECK(original.arguments()[i].name() == generated.arguments()[i].name());
        CHECK(original.arguments()[i].type()->annotation_str() == generated.arguments()[i].type()->annotation_str());
        CHECK(original.arguments()[i].kwarg_only() == generated.arguments()[i].kwarg_only());
        CHECK(original.arguments()[i].default_value().has_value() == generated.arguments()[i].default_value().has_value());
      }
      CHECK(original.returns()[0].type()->annotation_str() == generated.returns()[0].type()->annotation_str());
    }
  }
  SUBCASE("keyword arguments and defaults work") {
    auto method = m.get_method("affine");
    CHECK(method({x}).toTensor().allclose(x * 2.0 + 3));
    CHECK(method({x, 0.5}).toTensor().allclose(x * 0.5 + 3));
    CHECK(method({x}, {{"beta", 7}}).toTensor().allclose(x * 2.0 + 7));
    CHECK(method({x}, {{"alpha", 1.5}, {"beta", -1}}).toTensor().allclose(x * 1.5 - 1));
    // Through TorchScript too: a caller module using keywords on the lowered module.
    torch::jit::Module caller("caller");
    caller.register_module("inner", m);
    caller.define(R"(
def forward(self, x):
    return self.inner.affine(x, beta=10) + self.inner.affine(x, 1.0)
)");
    CHECK(caller.forward({x}).toTensor().allclose((x * 2.0 + 10) + (x + 3)));
  }
}

TEST_CASE("lowering leaves the original module untouched") {
  auto module = script(typed_source);
  const auto before_type = module.type();
  const auto before_methods = module.get_methods().size();
  const std::string before_code = module.get_method("forward").graph()->toString();
  auto lowered = torch_delegate::lower<TypedBackend>(module, all_typed_methods());
  CHECK(module.type() == before_type);
  CHECK(module.get_methods().size() == before_methods);
  CHECK(module.get_method("forward").graph()->toString() == before_code);
  CHECK_FALSE(module.hasattr("__loweredModule__"));
  const at::Tensor x = torch::ones({2}), h = torch::ones({2});
  CHECK(module.forward({x, h}).toTensor().equal(x + h));
}

TEST_CASE("save and load: equal outputs, handles rebuilt by compile, options unchanged") {
  auto module = script(typed_source);
  auto options = all_typed_methods();
  options["forward"].scale = 3.0;
  options["forward"].repeat = 4;
  auto lowered = torch_delegate::lower<TypedBackend>(module, options);
  const std::string path = temp_path("typed.pt");
  lowered.save(path);
  const auto spec_before = lowered.module().attr("__loweredModule__").toModule().attr("__method_compile_spec");

  std::size_t compiled_before = 0;
  {
    std::lock_guard<std::mutex> lock(test_backends::compiled_mutex);
    compiled_before = test_backends::compiled_log.size();
  }
  auto loaded = torch_delegate::load<TypedBackend>(path);
  {
    std::lock_guard<std::mutex> lock(test_backends::compiled_mutex);
    REQUIRE(test_backends::compiled_log.size() == compiled_before + 6);  // one compile per method on load
    bool saw_forward = false;
    for (std::size_t i = compiled_before; i < test_backends::compiled_log.size(); ++i) {
      const auto& compiled = test_backends::compiled_log[i];
      CHECK(compiled.options.target.value() == "cpu");
      if (compiled.method == "forward") {
        saw_forward = true;
        CHECK(compiled.options.scale == 3.0);
        CHECK(compiled.options.repeat == 4);
        CHECK(compiled.options.fast == false);
      }
    }
    CHECK(saw_forward);
  }
  const auto loaded_inner = loaded.module().attr("__loweredModule__").toModule();
  // __setstate__ made the backend object and LibTorch's BackendDebugInfo again.
  CHECK(loaded_inner.attr("__backend").toObjectRef().type()->name()->qualifiedName() ==
        "__torch__.torch.classes.__backends__.td_test_typed");
  CHECK(loaded_inner.attr("__backend_debug_info").toObjectRef().type()->name()->qualifiedName() ==
        "__torch__.torch.classes.backendutils.BackendDebugInfo");
  const auto spec_after = loaded_inner.attr("__method_compile_spec");
  CHECK(spec_after.toGenericDict().size() == spec_before.toGenericDict().size());
  for (const auto& entry : spec_before.toGenericDict()) {
    auto method_after = spec_after.toGenericDict().at(entry.key()).toGenericDict();
    for (const auto& option : entry.value().toGenericDict())
      CHECK(method_after.at(option.key()) == option.value());
  }
  const at::Tensor x = torch::rand({3}), h = torch::rand({3});
  CHECK(loaded.forward({x, h}).toTensor().allclose((x + h) * 3.0));
  CHECK(loaded.module().run_method("affine", x).toTensor().allclose(x * 2.0 + 3));
  // Saved again after loading: still loads and runs.
  loaded.save(path);
  CHECK(torch_delegate::load<TypedBackend>(path).forward({x, h}).toTensor().allclose((x + h) * 3.0));
  std::filesystem::remove(path);
}

TEST_CASE("typed C++ path calls execute directly and checks the signature") {
  auto module = script(typed_source);
  auto lowered = torch_delegate::lower<TypedBackend>(module, all_typed_methods());
  const at::Tensor x = torch::rand({2}), h = torch::rand({2});
  auto forward = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  CHECK(forward(x, h).allclose(x + h));
  auto pair = lowered.method<std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor, bool)>("pair");
  auto [sum, difference] = pair(x, h, false);
  CHECK(sum.allclose(x + h));
  CHECK(difference.allclose(x - h));
  CHECK_CONTAINS(error_of([&] { lowered.method<at::Tensor(at::Tensor, double, std::int64_t)>("forward"); }),
                 "torch-delegate: backend 'td_test_typed', method 'forward': requested as (Tensor, float, int) -> Tensor "
                 "but compiled for execute(Tensor, Tensor) -> Tensor");
  CHECK_CONTAINS(error_of([&] { lowered.method<at::Tensor(at::Tensor, at::Tensor)>("missing"); }),
                 "method 'missing': the lowered module has no such method; it has: ");
}

TEST_CASE("generic execute handles any signature; typed path packs through it") {
  auto module = script(R"(
def forward(self, x, h):
    return x * h + 1.0, x - h
)");
  auto lowered = torch_delegate::lower<test_backends::GenericBackend>(module);
  const at::Tensor x = torch::rand({4}), h = torch::rand({4});
  auto got = lowered.forward({x, h}).toTupleRef().elements();
  CHECK(got[0].toTensor().allclose(x * h + 1.0));
  CHECK(got[1].toTensor().allclose(x - h));
  auto typed = lowered.method<std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor)>("forward");
  CHECK(std::get<0>(typed(x, h)).allclose(x * h + 1.0));
}

TEST_CASE("a generic execute returning the wrong number of outputs is reported") {
  auto lowered = torch_delegate::lower<test_backends::MiscountingBackend>(script("def forward(self, x):\n    return x\n"));
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1})}); }),
                 "torch-delegate: backend 'td_test_miscounting', method 'forward': execute returned 2 outputs, the method "
                 "returns 1");
  CHECK_CONTAINS(error_of([&] { lowered.method<at::Tensor(at::Tensor)>("forward")(torch::ones({1})); }),
                 "execute returned 2 outputs, the method returns 1");
}

TEST_CASE("no matching execute signature: the error lists the schema and every signature") {
  auto module = script(R"(
def forward(self, x, s: str):
    return x
)");
  torch_delegate::method_options<TypedBackend> options;
  options["forward"].target = std::string("cpu");
  const std::string error = error_of([&] { torch_delegate::lower<TypedBackend>(module, options); });
  CHECK_CONTAINS(error, "torch-delegate: backend 'td_test_typed', method 'forward': no execute signature matches the method.\n"
                        "  method:    forward(Tensor x, str s) -> Tensor\n"
                        "  available:\n"
                        "    execute(Tensor, Tensor) -> Tensor\n"
                        "    execute(Tensor, Tensor, bool) -> Tuple[Tensor, Tensor]\n"
                        "    execute(Tensor) -> Tuple[Tensor]\n"
                        "    execute(Tensor, int) -> List[Tensor]\n"
                        "    execute(Tensor, Tensor, Tensor) -> float\n"
                        "    execute(Tensor, float, int) -> Tensor");
}

TEST_CASE("a result type that differs from the method's return type does not match") {
  auto module = script(R"(
def forward(self, x, h):
    return (x + h, x - h)
)");
  torch_delegate::method_options<TypedBackend> options;
  options["forward"].target = std::string("cpu");
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<TypedBackend>(module, options); }),
                 "method:    forward(Tensor x, Tensor h) -> Tuple[Tensor, Tensor]");
}

TEST_CASE("lowering a missing method names it and lists the module's methods") {
  auto module = script(typed_source);
  torch_delegate::method_options<TypedBackend> options;
  options["fwd"].target = std::string("cpu");
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<TypedBackend>(module, options); }),
                 "torch-delegate: backend 'td_test_typed', method 'fwd': the module (__torch__.m) has no method 'fwd' to "
                 "lower; its methods are: forward, pair, single, repeat, total, affine");
}

TEST_CASE("demo backend: whole tensors, broadcasting, alpha, save/load") {
  auto module = script(R"(
def forward(self, x, h):
    return self.accum(x, h), self.sub_accum(x, h)

def accum(self, x, h):
    return x + h

def sub_accum(self, x, h):
    return x - h

def with_alpha(self, x, h):
    return torch.sub(torch.add(x, h, alpha=2), h, alpha=3) + 1.5
)");
  torch_delegate::method_options<demo::DemoBackend> methods{{"forward", {}}, {"accum", {}}, {"with_alpha", {}}};
  auto lowered = torch_delegate::lower<demo::DemoBackend>(module, methods);
  const std::string path = temp_path("demo.pt");
  lowered.save(path);
  auto loaded = torch_delegate::load<demo::DemoBackend>(path);
  for (auto shapes : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{2, 3}, {2, 3}},
                      {{4, 1, 3}, {5, 1}}, {{}, {}}, {{7}, {}}}) {
    const at::Tensor x = torch::randn(shapes.first), h = torch::randn(shapes.second);
    for (auto* m : {&lowered.module(), &loaded.module()}) {
      auto got = m->forward({x, h}).toTupleRef().elements();
      auto want = module.forward({x, h}).toTupleRef().elements();
      CHECK(got[0].toTensor().allclose(want[0].toTensor()));
      CHECK(got[1].toTensor().allclose(want[1].toTensor()));
      CHECK(got[0].toTensor().sizes() == want[0].toTensor().sizes());
      // Our kernel and ATen round differently; compare with an absolute tolerance near zero.
      CHECK(m->run_method("with_alpha", x, h).toTensor().allclose(module.run_method("with_alpha", x, h).toTensor(), 1e-5, 1e-5));
    }
    CHECK(loaded.method<at::Tensor(at::Tensor, at::Tensor)>("accum")(x, h).allclose(x + h));
  }
  std::filesystem::remove(path);
}

TEST_CASE("demo backend: clear errors for unsupported nodes, dtypes and shapes") {
  auto module = script(R"(
def forward(self, x, h):
    return x * h
)");
  const std::string rejected = error_of([&] { torch_delegate::lower<demo::DemoBackend>(module); });
  CHECK_CONTAINS(rejected, "The node of aten::mul is not supported in this compiler.");
  CHECK_CONTAINS(rejected, "return x * h");
  CHECK_CONTAINS(rejected, "~~~~~ <--- HERE");

  auto adder = torch_delegate::lower<demo::DemoBackend>(script("def forward(self, x, h):\n    return x + h\n"));
  CHECK_CONTAINS(error_of([&] { adder.forward({torch::ones({2}, torch::kInt), torch::ones({2})}); }),
                 "expects float tensors, the first operand is Int");
  CHECK_CONTAINS(error_of([&] { adder.forward({torch::ones({2, 4}), torch::ones({13, 9})}); }),
                 "shapes [2, 4] and [13, 9] are not broadcastable");
  CHECK_CONTAINS(error_of([&] { adder.forward({torch::ones({2, 4}), torch::ones({13, 9})}); }),
                 "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': in execute");
}

TEST_CASE("demo backend: a corrupted payload is rejected by compile with the line") {
  CHECK_CONTAINS(error_of([] { demo::DemoBackend::compile("inputs 2\nmul 2 0 1 3 7\nret 2\n"); }),
                 "backend_with_compiler_demo: cannot parse payload line 2 'mul 2 0 1 3 7': unknown instruction 'mul'");
  CHECK_CONTAINS(error_of([] { demo::DemoBackend::compile("inputs 2\nret 5\n"); }),
                 "payload reads slot 5 before anything writes it");
}

TEST_CASE("LibTorch's codegen_backend_module accepts a torch-delegate backend") {
  torch_delegate::register_backend<demo::DemoBackend>();
  auto module = script(R"(
def forward(self, x, h):
    return x + h - h + h
)");
  c10::Dict<c10::IValue, c10::IValue> spec(c10::StringType::get(), c10::AnyType::get());
  c10::Dict<c10::IValue, c10::IValue> fake(c10::StringType::get(), c10::AnyType::get());
  fake.insert("", "");  // LibTorch's own tests pass this placeholder
  spec.insert("forward", fake);
  auto any_dict = c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  auto upstream = torch::jit::detail::codegen_backend_module("backend_with_compiler_demo", module, spec, any_dict);
  const at::Tensor x = torch::rand({3}), h = torch::rand({3});
  CHECK(upstream.forward({x, h}).toTensor().allclose(x + h));
  const std::string path = temp_path("upstream.pt");
  upstream.save(path);
  CHECK(torch::jit::load(path).forward({x, h}).toTensor().allclose(x + h));
  std::filesystem::remove(path);
}

TEST_CASE("one host funnel: each check of a request runs on every route, with one text") {
  // The routes: lower<B> with a spec (lower_methods), LibTorch's registry (codegen_backend_module,
  // what Python's torch._C._jit_to_backend calls), and lowering by name (the Python package).
  torch_delegate::register_backend<test_backends::TypedBackend>();
  auto module = script(R"(
def forward(self, x, h):
    return x + h
)");
  auto any_dict = c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  using routes_t = std::vector<std::pair<std::string, std::function<void(const c10::impl::GenericDict&)>>>;
  const routes_t routes{
      {"lower<B>", [&](const c10::impl::GenericDict& spec) { torch_delegate::lower<test_backends::TypedBackend>(module, spec); }},
      {"codegen_backend_module",
       [&](const c10::impl::GenericDict& spec) { torch::jit::detail::codegen_backend_module("td_test_typed", module, spec, any_dict); }},
      {"by name", [&](const c10::impl::GenericDict& spec) {
         torch_delegate::detail::lower_methods(torch_delegate::detail::lowering_named("td_test_typed", "test"), module, spec, false);
       }}};
  c10::impl::GenericDict empty(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericDict missing_method(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericDict options(c10::StringType::get(), c10::AnyType::get());
  options.insert("scale", 2.0);
  missing_method.insert("encode", options);
  c10::impl::GenericDict missing_option(c10::StringType::get(), c10::AnyType::get());
  missing_option.insert("forward", options);  // no 'target'
  for (const auto& [route, lower] : routes) {
    CAPTURE(route);
    CHECK_CONTAINS(error_of([&] { lower(empty); }),
                   "backend 'td_test_typed': no method to lower: the method_compile_spec is empty");
    CHECK_CONTAINS(error_of([&] { lower(missing_method); }), "has no method 'encode' to lower");
    CHECK_CONTAINS(error_of([&] { lower(missing_option); }),
                   "backend 'td_test_typed', method 'forward': missing required option 'target' (str)");
  }
}

TEST_CASE("lite interpreter from C++: _save_for_mobile -> _load_for_mobile gives the full JIT's outputs") {
  // LibTorch's mobile exporter refuses keyword-only arguments in any module; positional
  // defaults are fine.
  std::string source = typed_source;
  source.replace(source.find("*, "), 3, "");
  auto module = script(source);
  auto lowered = torch_delegate::lower<TypedBackend>(module, all_typed_methods());
  const std::string path = temp_path("typed.ptl");
  lowered.module()._save_for_mobile(path, {}, /*save_mobile_debug_info=*/true);
  torch::jit::mobile::Module mobile = torch::jit::_load_for_mobile(path);
  const at::Tensor x = torch::rand({2, 3}), h = torch::rand({2, 3});
  CHECK(mobile.forward({x, h}).toTensor().allclose(lowered.forward({x, h}).toTensor()));
  auto pair = mobile.run_method("pair", x, h, true).toTupleRef().elements();
  CHECK(pair[0].toTensor().allclose(x - h));
  CHECK(mobile.run_method("affine", x, 0.5, 1).toTensor().allclose(x * 0.5 + 1));
  CHECK(mobile.run_method("repeat", x, 2).toListRef().size() == 2);
  std::filesystem::remove(path);
}

TEST_CASE("a second lowering of the same shape reuses the generated classes; modules stay independent") {
  auto options = all_typed_methods();
  auto first = torch_delegate::lower<TypedBackend>(script(typed_source), options);
  options["forward"].scale = 5.0;
  auto second = torch_delegate::lower<TypedBackend>(script(typed_source), options);
  CHECK(first.module().type() == second.module().type());
  const at::Tensor x = torch::ones({2}), h = torch::ones({2});
  CHECK(first.forward({x, h}).toTensor().allclose((x + h) * 1.0));
  CHECK(second.forward({x, h}).toTensor().allclose((x + h) * 5.0));
  torch_delegate::method_options<TypedBackend> fewer{{"forward", options["forward"]}};
  auto third = torch_delegate::lower<TypedBackend>(script(typed_source), fewer);
  CHECK(third.module().type() != first.module().type());
  CHECK_FALSE(third.module().find_method("pair").has_value());
}

TEST_CASE("the generated-class cache is bounded; evicted classes stay alive in their modules") {
  const std::string source = "def forward(self, x, h):\n    return x + h\n";
  auto oldest = torch_delegate::lower<demo::DemoBackend>(script(source, "cache_probe_0"));
  std::vector<torch_delegate::lowered_module<demo::DemoBackend>> newer;
  for (std::size_t i = 1; i <= torch_delegate::detail::lowered_types_cache_capacity; ++i)
    newer.push_back(torch_delegate::lower<demo::DemoBackend>(script(source, "cache_probe_" + std::to_string(i))));
  // The most recent class is still cached; the oldest was evicted and is generated again.
  CHECK(torch_delegate::lower<demo::DemoBackend>(script(source, "cache_probe_1")).module().type() ==
        newer.front().module().type());
  auto regenerated = torch_delegate::lower<demo::DemoBackend>(script(source, "cache_probe_0"));
  CHECK(regenerated.module().type() != oldest.module().type());
  // The evicted classes still run the module that uses them, also after save and load.
  const at::Tensor x = torch::ones({2}), h = torch::full({2}, 2.0);
  CHECK(oldest.forward({x, h}).toTensor().allclose(x + h));
  const std::string path = temp_path("evicted.pt");
  oldest.save(path);
  CHECK(torch_delegate::load<demo::DemoBackend>(path).forward({x, h}).toTensor().allclose(x + h));
  std::filesystem::remove(path);
}

TEST_CASE("preprocess may run passes on method.graph() in place (no node is read after it; ASan checks)") {
  auto module = script(R"(
def forward(self, x, h):
    a = 2 * 3
    y = x + h * a
    for i in range(3):
        y = y + float(i)
    unused = x * 5
    return torch.relu(y)
)");
  auto lowered = torch_delegate::lower<test_backends::PassesInPlaceBackend>(module);
  const at::Tensor x = torch::randn({4}), h = torch::randn({4});
  CHECK(lowered.forward({x, h}).toTensor().allclose(module.forward({x, h}).toTensor()));
  // The debug table was read before the passes: every original node kept its location.
  auto saved = temp_path("passes.pt");
  lowered.save(saved);
  CHECK(torch_delegate::load<test_backends::PassesInPlaceBackend>(saved).forward({x, h}).toTensor().allclose(
      module.forward({x, h}).toTensor()));
  std::filesystem::remove(saved);
}

TEST_CASE("rejecting a node without a source range (prim::GetAttr) names the attribute and the method") {
  torch::jit::Module module("m");
  module.register_parameter("weight", torch::ones({2}), false);
  module.define("def forward(self, x):\n    return x * self.weight\n");
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<test_backends::NoAttributesBackend>(module); }),
                 "Attributes are not supported. Source code: (none recorded for this node) the prim::GetAttr that reads "
                 "attribute 'weight' (self.weight) in method 'forward'");
}

TEST_CASE("raw_options: the backend reads its method's compile spec as given, any value, after save/load too") {
  auto module = script("def forward(self, x):\n    return x\n");
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", "abc");
  auto lowered = torch_delegate::lower<test_backends::RawSpecBackend>(module, spec);
  CHECK(lowered.forward({torch::zeros({1})}).toTensor().item<double>() == 7.0);  // "abc|abc"
  auto typed = torch_delegate::lower<test_backends::RawSpecBackend>(module, {{"forward", {c10::IValue(4)}}});
  CHECK(typed.forward({torch::zeros({1})}).toTensor().item<double>() == 7.0);  // "int|int"
  auto saved = temp_path("raw_spec.pt");
  typed.save(saved);
  auto loaded = torch_delegate::load<test_backends::RawSpecBackend>(saved);
  CHECK(loaded.forward({torch::zeros({1})}).toTensor().item<double>() == 7.0);
  CHECK(loaded.module().attr("__loweredModule__").toModule().attr("__method_compile_spec").toGenericDict().at("forward") ==
        c10::IValue(4));
  std::filesystem::remove(saved);
}

TEST_CASE("ignore_unknown_options: unknown keys are ignored with one warning naming them; known keys still checked") {
  auto module = script("def forward(self, x):\n    return x\n");
  c10::impl::GenericDict options(c10::StringType::get(), c10::AnyType::get());
  options.insert("target", "cpu");
  options.insert("scale", 3.0);
  options.insert("input_shapes", "((1, 1, 320, 240), (1, 3))");
  options.insert("some_other_option", "True");
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", options);
  warning_capture warnings;
  auto lowered = torch_delegate::lower<test_backends::LenientBackend>(module, spec);
  CHECK(lowered.forward({torch::ones({1})}).toTensor().item<double>() == 3.0);
  REQUIRE(warnings.messages.size() == 1);
  CHECK(warnings.messages[0] ==
        "torch-delegate: backend 'td_test_lenient', method 'forward': ignoring unknown option keys 'input_shapes', "
        "'some_other_option'; known keys: target, scale, repeat, fast");
  options.insert_or_assign("scale", "big");
  CHECK(error_of([&] { torch_delegate::lower<test_backends::LenientBackend>(module, spec); }) ==
        "torch-delegate: backend 'td_test_lenient', method 'forward': option 'scale' expects float, got str");
}

TEST_CASE("modules saved by earlier builds keep loading and give the same results (tests/data)") {
  const at::Tensor x = torch::arange(6, torch::kFloat).reshape({2, 3});
  const at::Tensor h = torch::full({3}, 0.5);
  // Saved by examples/backend_with_compiler_demo/demo.cpp at e3cbb93: forward = accum(x, h) - h.
  auto loaded = torch_delegate::load<demo::DemoBackend>(std::string(TD_TEST_DATA_DIR) + "/demo_lowered_by_e3cbb93.pt");
  CHECK(loaded.forward({x, h}).toTensor().equal(x));
  CHECK(loaded.module().get_method("accum")({x, h}).toTensor().equal(x + h));
  CHECK(loaded.method<at::Tensor(at::Tensor, at::Tensor)>("accum")(x, h).equal(x + h));
  // A scripted parent of two lowered modules, and a lite-interpreter file, from the same build.
  auto composite = torch_delegate::load(std::string(TD_TEST_DATA_DIR) + "/composite_lowered_by_e3cbb93.pt");
  CHECK(composite.forward({x, h}).toTensor().equal((x + h) * (x - h)));
  auto mobile = torch::jit::_load_for_mobile(std::string(TD_TEST_DATA_DIR) + "/demo_mobile_lowered_by_e3cbb93.ptl");
  CHECK(mobile.forward({x, h}).toTensor().equal(x + h));
  // Re-saved by this build, it loads again.
  const std::string path = temp_path("resaved.pt");
  loaded.save(path);
  CHECK(torch_delegate::load<demo::DemoBackend>(path).forward({x, h}).toTensor().equal(x));
  std::filesystem::remove(path);
}
