// LibTorch 1.13's own backend test scenarios (test/cpp/jit/test_backend.cpp), re-expressed
// against torch-delegate backends: the demo compiler and LibTorch's test_backend /
// test_backend_unavailable written with torch-delegate (tests/libtorch_scenarios). Each runs
// through LibTorch's codegen_backend_module (what torch._C._jit_to_backend calls) and, where
// the scenario allows, through lower<B>.
#include "helpers.hpp"

#include "backend_with_compiler_demo/demo_backend.hpp"
#include "libtorch_scenarios/test_backend.hpp"

#include <torch/csrc/jit/backends/backend_detail.h>
#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import.h>

#include <sstream>

using namespace test_helpers;
using libtorch_scenarios::AvailableTestBackend;
using libtorch_scenarios::UnavailableTestBackend;

namespace {

/// LibTorch's tests pass {"": ""} per method to backends without options.
c10::impl::GenericDict placeholder_spec(const std::vector<std::string>& methods = {"forward"}) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const std::string& method : methods) {
    c10::impl::GenericDict placeholder(c10::StringType::get(), c10::AnyType::get());
    placeholder.insert("", "");
    spec.insert(method, placeholder);
  }
  return spec;
}

/// What torch._C._jit_to_backend does: LibTorch's own codegen over our registered preprocess.
torch::jit::Module libtorch_codegen(const std::string& backend, const torch::jit::Module& module,
                                    const c10::impl::GenericDict& spec) {
  return torch::jit::detail::codegen_backend_module(backend, module, spec,
                                                    c10::DictType::create(c10::StringType::get(), c10::AnyType::get()));
}

/// A lowering function: LibTorch's codegen or lower<B>, for the same scenario.
using lowering = std::function<torch::jit::Module(const torch::jit::Module&)>;

template <class B>
std::vector<std::pair<std::string, lowering>> both_lowerings(const c10::impl::GenericDict& spec = placeholder_spec()) {
  torch_delegate::register_backend<B>();
  return {{"codegen_backend_module", [spec](const torch::jit::Module& m) { return libtorch_codegen(std::string(B::name), m, spec); }},
          {"lower<B>", [spec](const torch::jit::Module& m) { return torch_delegate::lower<B>(m, spec).module(); }}};
}

torch::jit::Module three_methods() {
  return script(R"(
def forward(self, x, h):
    return self.accum(x, h), self.sub_accum(x, h)

def accum(self, x, h):
    return x + h

def sub_accum(self, x, h):
    return x - h
)");
}

std::vector<c10::IValue> two_scalars(double a = 2.0, double b = 1.0) { return {a * torch::ones({}), b * torch::ones({})}; }

torch::jit::mobile::Module mobile_round_trip(const torch::jit::Module& module, bool debug_info = false) {
  std::stringstream stream;
  module._save_for_mobile(stream, {}, debug_info);
  return torch::jit::_load_for_mobile(stream);
}

torch::jit::Module jit_round_trip(const torch::jit::Module& module) {
  std::stringstream stream;
  module.save(stream);
  return torch::jit::load(stream);
}

}  // namespace

TEST_CASE("LibTorch scenario ToBackend: a 3-method module, each method typed (same arguments, different results)") {
  auto module = three_methods();
  const auto expected = module.forward(two_scalars()).toTupleRef().elements().vec();
  for (const auto& [how, lower] : both_lowerings<AvailableTestBackend>(placeholder_spec({"forward", "accum", "sub_accum"}))) {
    INFO(how);
    auto lowered = lower(module);
    auto result = lowered.forward(two_scalars()).toTupleRef().elements().vec();
    CHECK(result[0].toTensor().equal(expected[0].toTensor()));
    CHECK(result[1].toTensor().equal(expected[1].toTensor()));
    CHECK(lowered.get_method("accum")(two_scalars()).toTensor().equal(torch::full({}, 3.0)));
    CHECK(lowered.get_method("sub_accum")(two_scalars()).toTensor().equal(torch::full({}, 1.0)));
    auto loaded = jit_round_trip(lowered);
    CHECK(loaded.get_method("accum")(two_scalars()).toTensor().equal(torch::full({}, 3.0)));
    CHECK(loaded.forward(two_scalars()).toTupleRef().elements()[1].toTensor().equal(expected[1].toTensor()));
  }
}

TEST_CASE("typed C++ calls: same arguments, different results, through returning<R>") {
  auto lowered = torch_delegate::lower<AvailableTestBackend>(three_methods(), placeholder_spec({"forward", "accum"}));
  const at::Tensor x = torch::full({2}, 5.0), h = torch::full({2}, 2.0);
  auto [sum, difference] = lowered.method<std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor)>("forward")(x, h);
  CHECK(sum.equal(x + h));
  CHECK(difference.equal(x - h));
  CHECK(lowered.method<at::Tensor(at::Tensor, at::Tensor)>("accum")(x, h).equal(x + h));
  CHECK(error_of([&] { lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward"); }) ==
        "torch-delegate: backend 'test_backend', method 'forward': requested as (Tensor, Tensor) -> Tensor but compiled "
        "for execute(Tensor, Tensor) -> Tuple[Tensor, Tensor]");
}

TEST_CASE("LibTorch scenario ToBackendNotAvailable: lowering warns, calls and loads throw 'Backend is not available.'") {
  auto module = three_methods();
  for (const auto& [how, lower] : both_lowerings<UnavailableTestBackend>()) {
    INFO(how);
    warning_capture warnings;
    torch::jit::Module lowered = lower(module);
    CHECK_CONTAINS(warnings.all(), "Backend [test_backend_unavailable] is not available.");
    CHECK_CONTAINS(error_of([&] { lowered.forward(two_scalars()); }), "Backend is not available.");
    std::stringstream saved;
    lowered.save(saved);  // saving works
    CHECK_CONTAINS(error_of([&] { torch::jit::load(saved); }), "Backend is not available.");
  }
}

TEST_CASE("LibTorch scenario TestCompiler (+ with string table): the demo in the JIT and the lite interpreter") {
  auto module = script("def forward(self, x, h):\n    return x + h\n");
  const at::Tensor expected = module.forward(two_scalars()).toTensor();
  for (bool string_table : {false, true}) {
    for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
      INFO(how, string_table);
      auto lowered = lower(module);
      CHECK(lowered.forward(two_scalars()).toTensor().equal(expected));
      torch::jit::setShouldUseFormatWithStringTable(string_table);
      auto mobile = mobile_round_trip(lowered);
      torch::jit::setShouldUseFormatWithStringTable(false);
      CHECK(mobile.forward(two_scalars()).toTensor().equal(expected));
    }
  }
}

TEST_CASE("LibTorch scenario TestCompilerNotSupport: the seed's rejection text, through both lowerings") {
  auto module = script("\ndef forward(self, x, h):\n    return x * h\n");
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    const std::string error = error_of([&] { lower(module); });
    CHECK_CONTAINS(error, "The node of aten::mul is not supported in this compiler. Source code: ");
    CHECK_CONTAINS(error, "File \"<string>\", line 3\n");
    CHECK_CONTAINS(error, "\ndef forward(self, x, h):\n    return x * h\n           ~~~~~ <--- HERE\n");
  }
}

namespace {
/// Two lowered modules as submodules of a scripted parent (TestComposite and the same-name case).
torch::jit::Module composite(const lowering& lower, bool same_name) {
  auto add = script("def forward(self, x, y):\n  return x + y\n", "m_add");
  auto sub = script("def forward(self, x, y):\n  return x - y\n", same_name ? "m_add" : "m_sub");
  torch::jit::Module parent("C");
  parent.register_module("Add", lower(add));
  parent.register_module("Sub", lower(sub));
  parent.define(same_name ? "def forward(self, a, b, s: int):\n  c = self.Add.forward(a, b)\n  d = self.Sub.forward(a, b)\n  y = s * (c * d)\n  return y\n"
                          : "def forward(self, x, y):\n  return self.Add.forward(x, y) * self.Sub.forward(x, y)\n");
  return parent;
}
}  // namespace

TEST_CASE("LibTorch scenario TestComposite: two lowered modules in a scripted parent, JIT vs lite interpreter") {
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    auto parent = composite(lower, false);
    const auto inputs = two_scalars(3.0, 1.0);
    CHECK(parent.forward(inputs).toTensor().equal(torch::full({}, 8.0)));
    CHECK(mobile_round_trip(parent).forward(inputs).toTensor().equal(torch::full({}, 8.0)));
  }
}

TEST_CASE("LibTorch scenarios TestCompositeWithSetStates and TestConsistencyOfCompositeWithSetStates") {
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    auto parent = composite(lower, true);
    const std::vector<c10::IValue> inputs{torch::ones({}), 3.0 * torch::ones({}), 3};
    const at::Tensor expected = parent.forward(inputs).toTensor();
    CHECK(expected.equal(torch::full({}, -24.0)));
    auto mobile = mobile_round_trip(parent);
    CHECK(mobile.forward(inputs).toTensor().equal(expected));
    // Through the full JIT and back to mobile: the same method names and the same results.
    std::stringstream saved;
    parent._save_for_mobile(saved);
    saved.seekg(0);
    auto reloaded = mobile_round_trip(torch::jit::load(saved));
    CHECK(reloaded.forward(inputs).toTensor().equal(expected));
    std::vector<std::string> names, reloaded_names;
    for (const auto& method : mobile.get_methods()) names.push_back(method.function().qualname().qualifiedName());
    for (const auto& method : reloaded.get_methods()) reloaded_names.push_back(method.function().qualname().qualifiedName());
    CHECK(names == reloaded_names);
  }
}

TEST_CASE("LibTorch scenario TestPrimDtype: prim::dtype in the lite interpreter") {
  auto module = script("def forward(self, x, y):\n  c = y.dtype\n  return c\n", "name");
  const auto inputs = two_scalars(3.0, 1.0);
  CHECK(module.forward(inputs).toInt() == mobile_round_trip(module).forward(inputs).toInt());
}

// -- the debug-info scenarios: a backend error symbolicated by the lite interpreter -------------

namespace {
const std::vector<c10::IValue> mismatched{torch::rand({2, 4}), torch::rand({13, 9})};

/// The error of a mobile call, its "Module hierarchy" line and where its traceback ends.
struct mobile_error {
  std::string text;
  std::string hierarchy;  // "top(m)::<unknown>...."
  std::string last_frame; // the source lines after the last "File ..." line
};

mobile_error mobile_error_of(torch::jit::mobile::Module& mobile) {
  mobile_error error;
  try {
    mobile.forward(mismatched);
    FAIL("expected an exception");
  } catch (const c10::BackendRuntimeException& e) {
    error.text = e.what_without_backtrace();
  }
  const std::string marker = "Module hierarchy:";
  if (auto at = error.text.find(marker); at != std::string::npos)
    error.hierarchy = error.text.substr(at + marker.size(), error.text.find('\n', at) - at - marker.size());
  if (auto at = error.text.rfind("  File \""); at != std::string::npos)
    error.last_frame = error.text.substr(error.text.find('\n', at) + 1);
  return error;
}

/// C(A0: A(x + y), B0: B(x + 2)) and variants, each with its hierarchy line as LibTorch 1.13 prints it.
torch::jit::Module module_c(bool two_levels) {
  auto a = script("def forward(self, x, y):\n  return x + y\n", "A");
  if (two_levels) {
    torch::jit::Module b("B");
    b.register_module("A0", a);
    b.define("def forward(self, x, y):\n  return self.A0.forward(x, y) + 2\n");
    torch::jit::Module c("C");
    c.register_module("B0", b);
    c.define("def forward(self, x, y):\n  return self.B0.forward(x, y) + 3\n");
    return c;
  }
  auto b = script("def forward(self, x):\n  return x + 2\n", "B");
  torch::jit::Module c("C");
  c.register_module("A0", a);
  c.register_module("B0", b);
  c.define("def forward(self, x, y):\n  return self.A0.forward(x, y) + self.B0.forward(x)\n");
  return c;
}

/// Lowers C's submodule A0 in place and remaps C's types, as LibTorch's selective lowering does.
void lower_submodule_in_place(torch::jit::Module& parent, const std::string& name, const lowering& lower) {
  torch::jit::Module original = parent.attr(name).toModule();
  torch::jit::Module lowered = lower(original);
  parent.type()->unsafeChangeAttributeType(name, lowered.type());
  parent.setattr(name, lowered._ivalue());
  auto remap = [&](c10::TypePtr type) { return type == original.type() ? lowered.type() : type; };
  for (auto* function : parent.type()->methods()) {
    parent.get_method(function->name()).graph()->remapTypes(remap);
    function->setSchema(function->getSchema().cloneWithRemappedTypes(remap));
  }
}
}  // namespace

TEST_CASE("LibTorch debug-info scenarios: the lite interpreter symbolicates our backend errors like its own") {
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    SUBCASE("TestCompiler") {
      auto mobile = mobile_round_trip(lower(script("\ndef forward(self, x, h):\n    return x + h\n")), true);
      const mobile_error error = mobile_error_of(mobile);
      INFO(error.text);
      CHECK(error.hierarchy == "top(m)::<unknown>.__loweredModule__(m)::forward.aten::add");
      CHECK_CONTAINS(error.text, "aten::add: shapes [2, 4] and [13, 9] are not broadcastable");
      CHECK_CONTAINS(error.last_frame, "\ndef forward(self, x, h):\n    return x + h\n           ~~~~~ <--- HERE\n");
      if (how == "codegen_backend_module") {
        // LibTorch's own generated code, as LibTorch 1.13 prints it: upstream's expected text
        // plus the line of 12 spaces 1.13 prints after the first "<--- HERE".
        CHECK_CONTAINS(error.text,
                       "  Module hierarchy:top(m)::<unknown>.__loweredModule__(m)::forward.aten::add\n"
                       "Traceback of TorchScript (most recent call last):\n"
                       "  File \"<string>\", line 3, in <unknown>\n"
                       "\n"
                       "            def forward(self, x: Tensor, h: Tensor):\n"
                       "                return self.__loweredModule__.forward(x, h)\n"
                       "                       ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE\n"
                       "            \n"
                       "  File \"<string>\", line 5, in forward\n"
                       "                typed_inputs: List[Any] = [x, h, ]\n"
                       "                if self.__backend.is_available() :\n"
                       "                  _0, = self.__backend.execute(self.__handles[\"forward\"], typed_inputs)\n"
                       "                        ~~~~~~~~~~~~~~~~~~~~~~ <--- HERE\n"
                       "                  assert isinstance(_0, Tensor)\n"
                       "                  return _0\n"
                       "  File \"<string>\", line 3, in <unknown>\n"
                       "\n"
                       "def forward(self, x, h):\n"
                       "    return x + h\n"
                       "           ~~~~~ <--- HERE\n");
      }
    }
    SUBCASE("TestExceptionStackForCompilerWithModuleHierarchy") {
      auto mobile = mobile_round_trip(lower(module_c(false)), true);
      const mobile_error error = mobile_error_of(mobile);
      INFO(error.text);
      CHECK(error.hierarchy == "top(C)::<unknown>.__loweredModule__(C)::forward.A0(A)::forward.aten::add");
      CHECK_CONTAINS(error.text, "return self.A0.forward(x, y) + self.B0.forward(x)\n         ~~~~~~~~~~~~~~~ <--- HERE");
      CHECK_CONTAINS(error.last_frame, "def forward(self, x, y):\n  return x + y\n         ~~~~~ <--- HERE\n");
    }
    SUBCASE("TestExceptionStackForCompilerWithTwoLevelModuleHierarchy") {
      auto mobile = mobile_round_trip(lower(module_c(true)), true);
      const mobile_error error = mobile_error_of(mobile);
      INFO(error.text);
      CHECK(error.hierarchy == "top(C)::<unknown>.__loweredModule__(C)::forward.B0(B)::forward.A0(A)::forward.aten::add");
      CHECK_CONTAINS(error.text, "return self.B0.forward(x, y) + 3\n         ~~~~~~~~~~~~~~~ <--- HERE");
      CHECK_CONTAINS(error.text, "return self.A0.forward(x, y) + 2\n         ~~~~~~~~~~~~~~~ <--- HERE");
      CHECK_CONTAINS(error.last_frame, "\n  return x + y\n         ~~~~~ <--- HERE\n");
    }
    SUBCASE("TestExceptionStackForCompilerWithLoweredSubModule") {
      auto parent = module_c(false);
      lower_submodule_in_place(parent, "A0", lower);
      auto mobile = mobile_round_trip(parent, true);
      const mobile_error error = mobile_error_of(mobile);
      INFO(error.text);
      CHECK(error.hierarchy == "top(C)::<unknown>.A0(A)::forward.__loweredModule__(A)::forward.aten::add");
      CHECK_CONTAINS(error.last_frame, "\n  return x + y\n         ~~~~~ <--- HERE\n");
    }
    SUBCASE("TestExceptionStackForCompilerWithSelectiveLoweredSubModule") {
      auto aa = script("def forward(self, x, y):\n  return x + y\n", "AA");
      torch::jit::Module a("A");
      a.register_module("AA0", aa);
      a.define("def forward(self, x, y):\n  return self.AA0.forward(x, y) + 3\n");
      auto b = script("def forward(self, x):\n  return x + 2\n", "B");
      torch::jit::Module parent("C");
      parent.register_module("A0", a);
      parent.register_module("B0", b);
      parent.define("def forward(self, x, y):\n  return self.A0.forward(x, y) + self.B0.forward(x)\n");
      lower_submodule_in_place(parent, "A0", lower);
      auto mobile = mobile_round_trip(parent, true);
      const mobile_error error = mobile_error_of(mobile);
      INFO(error.text);
      CHECK(error.hierarchy == "top(C)::<unknown>.A0(A)::forward.__loweredModule__(A)::forward.AA0(AA)::forward.aten::add");
      CHECK_CONTAINS(error.text, "return self.AA0.forward(x, y) + 3\n         ~~~~~~~~~~~~~~~~ <--- HERE");
      CHECK_CONTAINS(error.last_frame, "\n  return x + y\n         ~~~~~ <--- HERE\n");
    }
  }
}

TEST_CASE("the full JIT keeps torch-delegate's text for the same error (backend, method, the model's source)") {
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    auto lowered = lower(module_c(false));
    const std::string error = error_of([&] { lowered.forward(mismatched); });
    CHECK_CONTAINS(error, "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': in execute: "
                          "backend_with_compiler_demo: aten::add: shapes [2, 4] and [13, 9] are not broadcastable");
    CHECK_CONTAINS(error, "entering submodule 'A0' (__torch__.A), method forward:");
    CHECK_CONTAINS(error, "return x + y\n");
  }
}

TEST_CASE("compile specs: a backend without options takes any per-method value and keeps it verbatim") {
  auto module = three_methods();
  c10::impl::GenericDict shapes(c10::StringType::get(), c10::AnyType::get());
  shapes.insert("input_shapes", "((1, 1, 320, 240), (1, 3))");
  shapes.insert("some_other_option", "True");
  for (const c10::IValue& value : {c10::IValue(shapes), c10::IValue(std::string()), c10::IValue(3)}) {
    c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
    spec.insert("accum", value);
    for (const auto& [how, lower] : both_lowerings<AvailableTestBackend>(spec)) {
      INFO(how, value);
      auto loaded = jit_round_trip(lower(module));
      CHECK(loaded.get_method("accum")(two_scalars()).toTensor().equal(torch::full({}, 3.0)));
      auto kept = loaded.attr("__loweredModule__").toModule().attr("__method_compile_spec").toGenericDict().at("accum");
      CHECK(kept == value);
    }
  }
}

TEST_CASE("the demo's bad-input errors reach LibTorch as BackendRuntimeException with a debug handle") {
  // (The demo's preprocess refuses a number that is not a constant, so a bad input that reaches
  // its execute is a tensor of a shape that does not broadcast.)
  auto module = script("def forward(self, x, h):\n    return x + h\n");
  for (const auto& [how, lower] : both_lowerings<demo::DemoBackend>()) {
    INFO(how);
    auto lowered = lower(module);
    const std::vector<c10::IValue> bad_inputs{torch::ones({2, 4}), torch::ones({13, 9})};
    auto mobile = mobile_round_trip(lowered, true);
    try {
      mobile.forward(bad_inputs);
      FAIL("expected an exception");
    } catch (c10::BackendRuntimeException& error) {
      CHECK(error.getDebugHandles().size() >= 2);  // the backend's, then the interpreter's frames
      const std::string text = error.what_without_backtrace();
      CHECK_CONTAINS(text, "backend_with_compiler_demo: aten::add: shapes [2, 4] and [13, 9] are not broadcastable");
      CHECK_CONTAINS(text, "Module hierarchy:top(m)::<unknown>.__loweredModule__(m)::forward.aten::add");
    }
  }
}
