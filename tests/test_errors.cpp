// The bad-input table of docs/errors.md: one test per row, with the exact message users match.
#include "backends.hpp"
#include "helpers.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>


using namespace test_helpers;
using test_backends::TypedBackend;

namespace {

torch_delegate::lowered_module<demo::DemoBackend> demo_lowered() {
  return torch_delegate::lower<demo::DemoBackend>(script(forward_source));
}

/// Calls LibTorch's execute(handle, inputs) of a lowered module directly, as other generated
/// code (LibTorch's own codegen) would.
c10::IValue raw_execute(const torch::jit::Module& wrapper, std::vector<c10::IValue> inputs) {
  auto inner = wrapper.attr("__loweredModule__").toModule();
  auto backend = inner.attr("__backend").toObject();
  c10::impl::GenericList list(c10::AnyType::get());
  for (auto& input : inputs) list.push_back(std::move(input));
  torch::jit::Stack stack{backend, inner.attr("__handles").toGenericDict().at("forward"), list};
  backend->type()->getMethod("execute").run(stack);
  return stack.back();
}

c10::IValue processed_of(const torch::jit::Module& wrapper) {
  return wrapper.attr("__loweredModule__").toModule().attr("__processed_module");
}

c10::impl::GenericDict forward_spec() {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  return spec;
}

/// compile() of the demo backend on a (tampered) processed module.
void compile_processed(const c10::IValue& processed) {
  auto owner = torch_delegate::detail::make_backend_instance<demo::DemoBackend>();
  torch_delegate::detail::compile_all(owner, processed, forward_spec(), true);
}

c10::IValue with_top(const c10::IValue& processed, std::size_t index, c10::IValue value) {
  auto elements = processed.toTupleRef().elements().vec();
  elements.at(index) = std::move(value);
  return c10::ivalue::Tuple::create(std::move(elements));
}
}  // namespace

TEST_CASE("row: wrong number of arguments") {
  auto lowered = demo_lowered();
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1})}); }), "forward() is missing value for argument 'h'");
  CHECK(error_of([&] { raw_execute(lowered.module(), {torch::ones({1})}); }) ==
        "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': expected 2 arguments, got 1");
}

TEST_CASE("row: wrong argument type") {
  auto lowered = demo_lowered();
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({1}), 3}); }),
                 "Expected a value of type 'Tensor' for argument 'h' but instead found type 'int'");
  CHECK(error_of([&] { raw_execute(lowered.module(), {torch::ones({1}), 3}); }) ==
        "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': argument 2 ('h') expects Tensor, got int");
}

TEST_CASE("row: the demo given non-float or non-broadcastable tensors") {
  auto lowered = demo_lowered();
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({2}, torch::kInt), torch::ones({2})}); }),
                 "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': in execute: "
                 "backend_with_compiler_demo: aten::add expects float tensors, the first operand is Int");
  CHECK_CONTAINS(error_of([&] { lowered.forward({torch::ones({2, 4}), torch::ones({13, 9})}); }),
                 "backend_with_compiler_demo: aten::add: shapes [2, 4] and [13, 9] are not broadcastable");
}

TEST_CASE("backends_needed reads the backends a saved module delegates to, without loading it") {
  // The load error for an unregistered backend is tested in a process that never registers
  // it: tests/standalone/shared_library_registration.cpp, mode "unregistered".
  const std::string path = temp_path("needed.pt");
  demo_lowered().save(path);
  CHECK(torch_delegate::backends_needed(path) == std::vector<std::string>{"backend_with_compiler_demo"});
  CHECK_NOTHROW(torch_delegate::load(path));
  std::filesystem::remove(path);
}

TEST_CASE("row: a truncated or foreign file") {
  const std::string path = temp_path("truncated.pt");
  demo_lowered().save(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  const std::string cut = "torch-delegate: " + path + ": not a zip archive, or one cut short: it has no "
                          "end-of-central-directory record (a saved module ends with one); refusing to load it";
  CHECK(error_of([&] { torch_delegate::load(path); }) == cut);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a model at all";
  CHECK(error_of([&] { torch_delegate::load(path); }) == cut);
  // Unchecked (load_options::verify = false), LibTorch's reader says so in its words.
  CHECK_CONTAINS(error_of([&] { torch_delegate::load(path, {.verify = false}); }), "as a saved TorchScript module");
  std::filesystem::remove(path);
}

TEST_CASE("row: keep_freed_memory given too few or too many bytes") {
  // Only refusals here: an accepted call would change this test process's allocator for good
  // (test_package.py's KeepFreedMemory runs the accepted one in a process of its own).
  const std::string allowed =
      "torch_delegate::keep_freed_memory: bytes must be 33554432 (32 MiB) to 2147483647 (glibc's mallopt takes an int), given ";
  CHECK(error_of([] { torch_delegate::keep_freed_memory(0); }) == allowed + "0");
  CHECK(error_of([] { torch_delegate::keep_freed_memory(torch_delegate::min_kept_memory - 1); }) == allowed + "33554431");
  CHECK(error_of([] { torch_delegate::keep_freed_memory(std::size_t{1} << 31); }) == allowed + "2147483648");
}

TEST_CASE("row: a corrupted, foreign or differently versioned payload") {
  const c10::IValue processed = processed_of(demo_lowered().module());
  CHECK_NOTHROW(compile_processed(processed));
  const std::string prefix = "torch-delegate: backend 'backend_with_compiler_demo', method 'forward': ";
  CHECK(error_of([&] { compile_processed(c10::IValue(std::string("garbage"))); }) ==
        prefix + "the processed module is not a valid torch-delegate payload: expected a 4-tuple stamped by "
                 "torch-delegate, got str");
  CHECK(error_of([&] { compile_processed(with_top(processed, 0, std::string("other_backend"))); }) ==
        prefix + "incompatible payload: it was made for backend 'other_backend'");
  CHECK(error_of([&] { compile_processed(with_top(processed, 1, 99)); }) ==
        prefix + "incompatible payload: it has torch-delegate format version 99, this build reads versions 1 to 2");
  CHECK(error_of([&] { compile_processed(with_top(processed, 1, 0)); }) ==
        prefix + "incompatible payload: it has torch-delegate format version 0, this build reads versions 1 to 2");
  CHECK(error_of([&] { compile_processed(with_top(processed, 2, 7)); }) ==
        prefix + "incompatible payload: it was made by payload version 7 of backend 'backend_with_compiler_demo', "
                 "this build of the backend reads versions 1 to 1. Lower the model again with this build, or load "
                 "it with a build that reads version 7.");
  CHECK(error_of([&] { compile_processed(with_top(processed, 1, std::string("x"))); }) ==
        prefix + "the processed module is not a valid torch-delegate payload: expected (str, int, int, Dict), got "
                 "Tuple[str, str, int, Dict[str, Any]]");
  // A payload the backend's own decoder rejects (here: a truncated instruction list).
  auto methods = processed.toTupleRef().elements()[3].toGenericDict().copy();
  auto entry = methods.at("forward").toTupleRef().elements().vec();
  entry[3] = std::string("inputs 2\nadd 2 0\n");
  methods.insert_or_assign("forward", c10::ivalue::Tuple::create(entry));
  const std::string rejected = error_of([&] { compile_processed(with_top(processed, 3, methods)); });
  CHECK_CONTAINS(rejected, "backend_with_compiler_demo: cannot parse payload line 2 'add 2 0': expected "
                           "'<op> <out> <a> <b> <alpha> <handle>'");
  CHECK_CONTAINS(rejected, "(torch-delegate: backend 'backend_with_compiler_demo', method 'forward': in compile)");
}

TEST_CASE("regressions found by fuzzing the demo payload decoder") {
  // tests/fuzz/regressions/fuzz_demo_payload/alpha_slot_holds_a_tensor.txt: alpha read from an
  // input tensor made toScalar() throw a non-c10 exception.
  CHECK_CONTAINS(error_of([] { demo::DemoBackend::compile("inputs 2\nconst 1 2.5\nadd 2 2 1 1 3\nret 2 0\n"); }),
                 "payload reads slot 2 before anything writes it");
  CHECK_CONTAINS(error_of([] { demo::DemoBackend::compile("inputs 2\nadd 2 3 1 0 3\nret 2\n"); }),
                 "payload reads slot 3 before anything writes it");
  demo::program tensor_alpha = demo::DemoBackend::compile("inputs 2\nadd 2 0 1 1 3\nret 2\n");
  const std::vector<c10::IValue> inputs{torch::ones({2}), torch::ones({2})};
  CHECK_CONTAINS(error_of([&] { demo::DemoBackend::execute(tensor_alpha, torch_delegate::inputs(inputs)); }),
                 "backend_with_compiler_demo: aten::add: alpha must be a number");
  // huge_input_count.txt: an input count of 11111111111 allocated that many slots.
  CHECK_CONTAINS(error_of([] { demo::DemoBackend::compile("inputs 11111111111\nret 0\n"); }),
                 "expected an input count from 0 to 1000000");
  // huge_constant.txt: a constant beyond float's range saturates to inf (like ATen) instead of
  // throwing from inside ATen's scalar conversion.
  demo::program huge = demo::DemoBackend::compile("inputs 1\nconst 1 1e300\nadd 2 0 1 1 3\nret 2\n");
  const std::vector<c10::IValue> one{torch::ones({2})};
  CHECK(std::isinf(demo::DemoBackend::execute(huge, torch_delegate::inputs(one))[0].toTensor()[0].item<float>()));
}

namespace {
/// Reads payload versions 2 and 3, writes 3.
struct VersionedBackend : test_backends::ToggleBackend {
  static constexpr std::string_view name = "td_test_versioned";
  static constexpr std::int64_t payload_version = 3;
  static constexpr std::int64_t oldest_payload_version = 2;
  static inline std::int64_t compiled_version = 0;
  static inline std::string compiled_method;
  static std::string compile(const std::string& payload, const torch_delegate::compile_context& context) {
    compiled_version = context.payload_version();
    compiled_method = context.method();
    return payload;
  }
};
}  // namespace

TEST_CASE("versioned payloads: a backend declares the versions it reads") {
  auto lowered = torch_delegate::lower<VersionedBackend>(script(forward_source));
  CHECK(VersionedBackend::compiled_version == 3);
  CHECK(VersionedBackend::compiled_method == "forward");
  const c10::IValue processed = processed_of(lowered.module());
  CHECK(processed.toTupleRef().elements()[2].toInt() == 3);
  auto compile = [](const c10::IValue& p) {
    auto owner = torch_delegate::detail::make_backend_instance<VersionedBackend>();
    torch_delegate::detail::compile_all(owner, p, forward_spec(), true);
  };
  CHECK_NOTHROW(compile(with_top(processed, 2, 2)));
  CHECK(VersionedBackend::compiled_version == 2);
  CHECK_CONTAINS(error_of([&] { compile(with_top(processed, 2, 1)); }),
                 "incompatible payload: it was made by payload version 1 of backend 'td_test_versioned', this build of "
                 "the backend reads versions 2 to 3.");
  CHECK_CONTAINS(error_of([&] { compile(with_top(processed, 2, 4)); }), "reads versions 2 to 3");
}

TEST_CASE("row: options naming a missing method") {
  torch_delegate::method_options<TypedBackend> options;
  options["backward"].target = std::string("cpu");
  CHECK_CONTAINS(error_of([&] { torch_delegate::lower<TypedBackend>(script(forward_source), options); }),
                 "torch-delegate: backend 'td_test_typed', method 'backward': the module (__torch__.m) has no method "
                 "'backward' to lower; its methods are: forward");
}

namespace {
struct BadName : test_backends::ToggleBackend {
  static constexpr std::string_view name = "my-backend";
};
}  // namespace

TEST_CASE("row: a backend name that is not an identifier") {
  CHECK(error_of([] { torch_delegate::register_runtime<BadName>(); }) ==
        "torch-delegate: backend 'my-backend': a backend name must be an identifier (letters, digits, '_'; not starting "
        "with a digit): it names a TorchBind class and operators.");
}

TEST_CASE("the payload format is extensible: fields appended by a newer build are ignored") {
  const c10::IValue processed = processed_of(demo_lowered().module());
  // A newer build appends an optional field to the top tuple, to a method entry and to the debug table.
  auto methods = processed.toTupleRef().elements()[3].toGenericDict().copy();
  auto entry = methods.at("forward").toTupleRef().elements().vec();
  auto debug = entry[4].toTupleRef().elements().vec();
  debug.emplace_back(std::string("a later debug field"));
  entry[4] = c10::ivalue::Tuple::create(debug);
  entry.emplace_back(c10::IValue());  // input specs (optional since issue 14): none
  entry.emplace_back(std::int64_t{42});
  methods.insert_or_assign("forward", c10::ivalue::Tuple::create(entry));
  auto top = processed.toTupleRef().elements().vec();
  top[3] = methods;
  top.emplace_back(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  CHECK_NOTHROW(compile_processed(c10::ivalue::Tuple::create(top)));
  // Fewer fields than format 1 has is still an error, never a crash.
  auto short_entry = std::vector<c10::IValue>(entry.begin(), entry.begin() + 4);
  methods.insert_or_assign("forward", c10::ivalue::Tuple::create(short_entry));
  CHECK_CONTAINS(error_of([&] { compile_processed(with_top(processed, 3, methods)); }), "malformed method entry");
}
