// Registration generated from the type, and the availability table (one test per cell).
#include "backends.hpp"
#include "helpers.hpp"

#include <c10/util/Logging.h>

using namespace test_helpers;
using test_backends::ToggleBackend;

namespace {

struct ForeignNamed : test_backends::ClashFirst {
  static constexpr std::string_view name = "td_test_foreign";
};

struct availability_guard {
  explicit availability_guard(bool available) { test_backends::toggle_available = available; }
  ~availability_guard() { test_backends::toggle_available = true; }
};

const std::string unavailable_warning =
    "Backend [td_test_toggle] is not available. Execution of this Module is still possible by saving and loading on a "
    "device where the backend is available.";
}  // namespace

TEST_CASE("registration creates LibTorch's custom class and preprocess entry") {
  CHECK_NOTHROW(torch_delegate::register_backend<test_backends::GenericBackend>());
  auto cls = torch::getCustomClass("__torch__.torch.classes.__backends__.td_test_generic");
  REQUIRE(cls);
  for (const char* method : {"is_available", "compile", "execute"}) CHECK_MESSAGE(cls->findMethod(method), method);
  CHECK(cls->getMethod("compile").getSchema().arguments().size() == 3);
  CHECK(toString(cls->getMethod("execute").getSchema()) == "execute(Any self, Any handle, Any[] input) -> Any[] output");
  CHECK(toString(cls->getMethod("compile").getSchema()) ==
        "compile(Any self, Any processed, Dict(str, Any) method_compile_spec) -> Dict(str, Any) handles");
  CHECK(toString(cls->getMethod("is_available").getSchema()) == "is_available(Any self) -> bool available");
  // The preprocess function is in LibTorch's registry: a second raw registration is refused.
  CHECK_THROWS(torch::jit::detail::registerBackendPreprocessFunction("td_test_generic", {}));
}

TEST_CASE("registering the same type twice is harmless") {
  CHECK_NOTHROW(torch_delegate::register_backend<test_backends::GenericBackend>());
  const auto* first = torch::getCustomClass("__torch__.torch.classes.__backends__.td_test_generic").get();
  CHECK_NOTHROW(torch_delegate::register_backend<test_backends::GenericBackend>());
  CHECK_NOTHROW(torch_delegate::register_runtime<test_backends::GenericBackend>());
  // Still the one class and the one preprocess entry, and lowering works.
  CHECK(torch::getCustomClass("__torch__.torch.classes.__backends__.td_test_generic").get() == first);
  CHECK_THROWS(torch::jit::detail::registerBackendPreprocessFunction("td_test_generic", {}));  // still registered
  auto lowered = torch_delegate::lower<test_backends::GenericBackend>(script(forward_source));
  CHECK(lowered.forward({torch::ones({1}), torch::ones({1})}).toTensor().item<float>() == 2.0f);
}

TEST_CASE("two different types with one name: a clear error, and the first keeps working") {
  CHECK_NOTHROW(torch_delegate::register_backend<test_backends::ClashFirst>());
  const std::string error = error_of([] { torch_delegate::register_backend<test_backends::ClashSecond>(); });
  CHECK(error == "torch-delegate: backend 'td_test_clash': two different types register this backend name: "
                 "'test_backends::ClashFirst' registered it first, 'test_backends::ClashSecond' tries again. Give each "
                 "backend type its own name.");
  CHECK_THROWS(torch_delegate::lower<test_backends::ClashSecond>(script(forward_source)));
  auto lowered = torch_delegate::lower<test_backends::ClashFirst>(script(forward_source));
  CHECK(lowered.forward({torch::ones({1}), torch::ones({1})}).toTensor().item<float>() == 2.0f);
}

TEST_CASE("a name taken by a non-torch-delegate TorchBind class is refused") {
  struct Foreign : torch::CustomClassHolder {};
  static auto foreign = torch::class_<Foreign>("__backends__", "td_test_foreign").def(torch::init<>());
  CHECK(error_of([] { torch_delegate::register_runtime<ForeignNamed>(); }) ==
        "torch-delegate: backend 'td_test_foreign': the name is already registered with LibTorch by a backend that is "
        "not this torch-delegate type (torch::jit::backend<T> or another library).");
}

TEST_CASE("exceptions in preprocess, compile and execute name the backend, method and stage") {
  auto module = script(R"(
def forward(self, x, h):
    return x + h
def bad_preprocess(self, x, h):
    return x + h
def bad_compile(self, x, h):
    return x + h
)");
  using test_backends::ThrowingBackend;
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<ThrowingBackend>(module, {{"bad_preprocess", {}}}); }),
                 "torch-delegate: backend 'td_test_throwing', method 'bad_preprocess': preprocess threw: preprocess exploded");
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<ThrowingBackend>(module, {{"bad_compile", {}}}); }),
                 "torch-delegate: backend 'td_test_throwing', method 'bad_compile': compile threw: compile exploded");
  auto lowered = torch_delegate::lower<ThrowingBackend>(module);
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1}), torch::ones({1})}); }),
                 "torch-delegate: backend 'td_test_throwing', method 'forward': execute threw: execute exploded");
  CHECK_CONTAINS(error_of([&] { lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward")(torch::ones({1}), torch::ones({1})); }),
                 "execute exploded");
}

// -- the availability table -------------------------------------------------------------------------

TEST_CASE("availability: lower where available -> no warning, runs") {
  warning_capture warnings;
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  CHECK(warnings.messages.empty());
  CHECK(lowered.forward({torch::ones({1}), torch::ones({1})}).toTensor().item<float>() == 2.0f);
}

TEST_CASE("availability: lower where unavailable -> succeeds with LibTorch's warning") {
  availability_guard unavailable(false);
  warning_capture warnings;
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  REQUIRE(warnings.messages.size() == 1);
  CHECK(warnings.messages[0] == unavailable_warning);
}

TEST_CASE("availability: call a module lowered where unavailable -> 'Backend is not available.'") {
  availability_guard unavailable(false);
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1}), torch::ones({1})}); }), "Backend is not available.");
  CHECK_CONTAINS(error_of([&] { lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward"); }),
                 "Backend is not available.");
}

TEST_CASE("availability: lowered where unavailable, saved, loaded where available -> runs") {
  const std::string path = temp_path("toggle.pt");
  {
    availability_guard unavailable(false);
    torch_delegate::lower<ToggleBackend>(script(forward_source)).save(path);
  }
  auto loaded = torch_delegate::load<ToggleBackend>(path);
  CHECK(loaded.forward({torch::ones({1}), torch::ones({1})}).toTensor().item<float>() == 2.0f);
  std::filesystem::remove(path);
}

TEST_CASE("availability: load where unavailable -> 'Backend is not available.'") {
  const std::string path = temp_path("toggle2.pt");
  torch_delegate::lower<ToggleBackend>(script(forward_source)).save(path);
  availability_guard unavailable(false);
  CHECK_CONTAINS(error_of([&] { torch::jit::load(path); }), "Backend is not available.");
  CHECK_CONTAINS(error_of([&] { torch_delegate::load<ToggleBackend>(path); }), "Backend is not available.");
  CHECK_CONTAINS(error_of([&] { torch::jit::load(path); }),
                 "backend 'td_test_toggle' reports is_available() == false while this module loads");
  std::filesystem::remove(path);
}

TEST_CASE("availability: call after the backend became unavailable -> 'Backend is not available.'") {
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  auto typed = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  availability_guard unavailable(false);
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1}), torch::ones({1})}); }), "Backend is not available.");
  CHECK_CONTAINS(error_of([&] { typed(torch::ones({1}), torch::ones({1})); }), "Backend is not available.");
}

TEST_CASE("a lowered module cannot be cloned: the error says why and what to do") {
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  CHECK_CONTAINS(error_of([&] { lowered.module().clone(); }), "a lowered module cannot be deep-copied or cloned");
}

TEST_CASE("adopting a module that is not lowered to the backend is refused") {
  CHECK_CONTAINS(error_of([] { torch_delegate::lowered_module<ToggleBackend>(script(forward_source)); }),
                 "torch-delegate: backend 'td_test_toggle': the module (__torch__.m) is not a module lowered to this "
                 "backend: it has no __loweredModule__");
  auto other = torch_delegate::lower<test_backends::GenericBackend>(script(forward_source));
  CHECK_CONTAINS(error_of([&] { torch_delegate::lowered_module<ToggleBackend>(other.module()); }),
                 "its __backend is __torch__.torch.classes.__backends__.td_test_generic");
}

TEST_CASE("one invoker: the operator, LibTorch's __backend.execute and the typed C++ call give the same errors") {
  auto lowered = torch_delegate::lower<ToggleBackend>(script(forward_source));
  torch::jit::Module inner(lowered.module().attr("__loweredModule__").toObject());
  const c10::IValue handle = inner.attr("__handles").toGenericDict().at("forward");
  auto backend_execute = [&](std::vector<c10::IValue> inputs) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (auto& input : inputs) list.push_back(std::move(input));
    return inner.attr("__backend").toObject()->type()->getMethod("execute")({inner.attr("__backend"), handle, list});
  };
  auto typed = lowered.method<at::Tensor(at::Tensor, at::Tensor)>("forward");

  // The same result on every route.
  CHECK(lowered.forward({torch::ones({1}), torch::ones({1})}).toTensor().item<float>() == 2.0f);
  CHECK(backend_execute({torch::ones({1}), torch::ones({1})}).toListRef()[0].toTensor().item<float>() == 2.0f);
  CHECK(typed(torch::ones({1}), torch::ones({1})).item<float>() == 2.0f);

  // The same argument check, from the one invoker (the interpreter checks its own schema first).
  const std::string wrong_type =
      "torch-delegate: backend 'td_test_toggle', method 'forward': argument 2 ('h') expects Tensor, got int";
  CHECK(error_of([&] { backend_execute({torch::ones({1}), 3}); }) == wrong_type);
  CHECK(error_of([&] { backend_execute({torch::ones({1})}); }) ==
        "torch-delegate: backend 'td_test_toggle', method 'forward': expected 2 arguments, got 1");

  // The same availability policy, naming the method, on every route.
  availability_guard unavailable(false);
  const std::string not_available =
      "Backend is not available. (torch-delegate: backend 'td_test_toggle' reports is_available() == false when "
      "running method 'forward')";
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1}), torch::ones({1})}); }), not_available);
  CHECK(error_of([&] { backend_execute({torch::ones({1}), torch::ones({1})}); }) == not_available);
  CHECK(error_of([&] { typed(torch::ones({1}), torch::ones({1})); }) == not_available);
}
