// Each case below breaks one backend requirement; check_diagnostics.py compiles every case in
// its own translation unit (this prelude + the case's block, up to the next '// case:' line) and
// checks that it fails and that the compiler says which requirement, naming the type: each of
// the case's '// expect:' lines must appear in that case's diagnostics. backend_concept.pass.cpp
// holds the fixed twin of each case, under the same '// case:' name.
#include <torch_delegate/torch_delegate.hpp>

// case: NoName
struct NoName {
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoName() { torch_delegate::register_runtime<NoName>(); }
// expect: backend_is_missing_name<NoName>
// expect: the backend needs a compile-time name: add 'static constexpr std::string_view name = "my_backend";'

// case: NoIsAvailable
struct NoIsAvailable {
  static constexpr std::string_view name = "no_is_available";
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoIsAvailable() { torch_delegate::register_runtime<NoIsAvailable>(); }
// expect: backend_is_missing_is_available<NoIsAvailable>
// expect: the backend is missing 'static bool is_available();'

// case: NoCompile
struct NoCompile {
  static constexpr std::string_view name = "no_compile";
  static bool is_available() { return true; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoCompile() { torch_delegate::register_runtime<NoCompile>(); }
// expect: backend_payload_type_cannot_be_deduced<NoCompile>
// expect: cannot find the backend's compile: expected 'Handle compile(const Payload&, const Options&)'

// case: VoidCompile
struct VoidCompile {
  static constexpr std::string_view name = "void_compile";
  static bool is_available() { return true; }
  static void compile(const std::string&) {}
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_VoidCompile() { torch_delegate::register_runtime<VoidCompile>(); }
// expect: backend_is_missing_compile<VoidCompile>
// expect: the backend's compile has the wrong shape

// case: NoExecute
struct NoExecute {
  static constexpr std::string_view name = "no_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
};
void use_NoExecute() { torch_delegate::register_runtime<NoExecute>(); }
// expect: backend_is_missing_execute<NoExecute>
// expect: the backend is missing execute: expected 'Result execute(Handle&, Args...)'

// case: OverloadedExecute
struct OverloadedExecute {
  static constexpr std::string_view name = "overloaded_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static at::Tensor execute(int&, const at::Tensor& x, double) { return x; }
};
void use_OverloadedExecute() { torch_delegate::register_runtime<OverloadedExecute>(); }
// expect: backend_execute_is_overloaded_without_execute_signatures<OverloadedExecute>
// expect: list them with 'using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor), ...>;'

// case: ListedButMissing
struct ListedButMissing {
  static constexpr std::string_view name = "listed_but_missing";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, at::Tensor)>;
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_ListedButMissing() { torch_delegate::register_runtime<ListedButMissing>(); }
// expect: backend_has_no_execute_overload_for_signature<ListedButMissing, at::Tensor(at::Tensor, at::Tensor)>
// expect: a signature listed in execute_signatures has no execute overload

// case: FloatArgument
struct FloatArgument {
  static constexpr std::string_view name = "float_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x, float) { return x; }
};
void use_FloatArgument() { torch_delegate::register_runtime<FloatArgument>(); }
// expect: unsupported argument or result type 'float'
// expect: Please use double instead.

// case: NoPreprocess
struct NoPreprocess {
  static constexpr std::string_view name = "no_preprocess";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoPreprocess() { torch_delegate::lower<NoPreprocess>(torch::jit::Module("m")); }
// expect: backend_is_missing_preprocess<NoPreprocess>
// expect: lower<B> needs the backend's host side

// case: UnreflectedOptions
struct PlainOptions {
  double scale = 1.0;
};
struct UnreflectedOptions {
  static constexpr std::string_view name = "unreflected_options";
  using options = PlainOptions;
  static bool is_available() { return true; }
  static int compile(const std::string&, const options&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_UnreflectedOptions() { torch_delegate::register_runtime<UnreflectedOptions>(); }
// expect: options_are_not_a_hana_struct<PlainOptions>
// expect: a backend's options type must be reflectable

// case: GenericExecuteReturnsTensors
struct GenericExecuteReturnsTensors {
  static constexpr std::string_view name = "generic_execute_returns_tensors";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static std::vector<at::Tensor> execute(int&, torch_delegate::inputs args) { return {args[0].toTensor()}; }
};
void use_GenericExecuteReturnsTensors() { torch_delegate::register_runtime<GenericExecuteReturnsTensors>(); }
// expect: backend_generic_execute_must_return_std_vector_of_ivalue<GenericExecuteReturnsTensors, std::vector<at::Tensor>
// expect: a generic execute, 'execute(Handle&, torch_delegate::inputs)', returns 'std::vector<c10::IValue>'

// case: NonConstReferenceArgument
struct NonConstReferenceArgument {
  static constexpr std::string_view name = "non_const_reference_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, at::Tensor& x) { return x; }
};
void use_NonConstReferenceArgument() { torch_delegate::register_runtime<NonConstReferenceArgument>(); }
// expect: backend_execute_takes_a_non_const_reference<NonConstReferenceArgument, at::Tensor(at::Tensor)>
// expect: execute takes an argument by non-const reference, which cannot bind to the arguments torch-delegate passes
// expect: take 'const at::Tensor&' or 'at::Tensor' by value

// case: PreprocessReturnsAnotherPayload
struct PreprocessReturnsAnotherPayload {
  static constexpr std::string_view name = "preprocess_returns_another_payload";
  static c10::IValue preprocess(const torch_delegate::method_to_lower&) { return {}; }  // LibTorch's habit
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PreprocessReturnsAnotherPayload() {
  torch_delegate::lower<PreprocessReturnsAnotherPayload>(torch::jit::Module("m"));
}
// expect: backend_preprocess_returns_a_different_payload_than_compile_takes<PreprocessReturnsAnotherPayload, c10::IValue, std::vector<double
// expect: the backend's preprocess returns a different type than its compile takes: the error above names the backend, then the type preprocess returns, then the Payload compile takes (torch_delegate::payload_t<B>)
// expect: Make them the same type, or return torch_delegate::preprocess_result<Payload>

// case: PreprocessResultOfAnotherPayload
struct PreprocessResultOfAnotherPayload {
  static constexpr std::string_view name = "preprocess_result_of_another_payload";
  torch_delegate::preprocess_result<std::vector<bool>> preprocess(const torch_delegate::method_to_lower&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PreprocessResultOfAnotherPayload() {
  torch_delegate::lower<PreprocessResultOfAnotherPayload>(torch::jit::Module("m"));
}
// expect: backend_preprocess_returns_a_different_payload_than_compile_takes<PreprocessResultOfAnotherPayload, torch_delegate::preprocess_result<std::vector<bool>
// expect: the backend's preprocess returns a different type than its compile takes: the error above names the backend, then the type preprocess returns, then the Payload compile takes (torch_delegate::payload_t<B>)
// expect: Make them the same type, or return torch_delegate::preprocess_result<Payload>

// case: LibTorchPreprocess
struct LibTorchPreprocess {
  static constexpr std::string_view name = "libtorch_preprocess";
  static c10::IValue preprocess(const torch::jit::Module&, const c10::Dict<c10::IValue, c10::IValue>&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_LibTorchPreprocess() { torch_delegate::lower<LibTorchPreprocess>(torch::jit::Module("m")); }
// expect: backend_preprocess_has_the_wrong_shape<LibTorchPreprocess>
// expect: the backend's preprocess cannot be called as lower<B> calls it

// case: PartitionWithoutSupports
#include <torch_delegate/partition.hpp>
struct PartitionWithoutSupports {
  static constexpr std::string_view name = "partition_without_supports";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PartitionWithoutSupports() { torch_delegate::lower_partially<PartitionWithoutSupports>(torch::jit::Module("m")); }
// expect: backend_does_not_declare_supports<PartitionWithoutSupports>
// expect: partial lowering needs 'static bool supports(const torch::jit::Node*)' in the backend

// case: ReplanOfAnotherShape
struct ReplanOfAnotherShape {
  static constexpr std::string_view name = "replan_of_another_shape";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static int replan(int&, const std::vector<at::Tensor>&) { return 0; }  // given_inputs, not tensors
};
void use_ReplanOfAnotherShape() { torch_delegate::lower<ReplanOfAnotherShape>(torch::jit::Module("m")); }
// expect: backend_replan_has_the_wrong_shape<ReplanOfAnotherShape>
// expect: the backend's replan cannot be called as torch-delegate calls it: expected 'Handle replan(Handle& compiled, const torch_delegate::given_inputs& given)'

// case: AcceptsRegionOfAnotherShape
#include <torch_delegate/partition.hpp>
struct AcceptsRegionOfAnotherShape {
  static constexpr std::string_view name = "accepts_region_of_another_shape";
  static bool supports(const torch::jit::Node*) { return true; }
  static bool accepts_region(const std::vector<torch::jit::Node*>&) { return true; }  // not the span partitioning passes
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_AcceptsRegionOfAnotherShape() { torch_delegate::lower_partially<AcceptsRegionOfAnotherShape>(torch::jit::Module("m")); }
// expect: backend_accepts_region_has_the_wrong_shape<AcceptsRegionOfAnotherShape>
// expect: the backend's accepts_region cannot be called as partitioning calls it: expected 'static bool accepts_region(std::span<const torch::jit::Node* const>)', or the same returning torch_delegate::region_verdict
