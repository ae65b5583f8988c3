// The must-compile twins of backend_concept.fail.cpp: the same backends, each fixed, under the
// same '// case:' names. check_diagnostics.py compiles every twin in its own translation unit
// (this prelude + the twin's block), so each must compile on its own.
#include <torch_delegate/torch_delegate.hpp>

// case: NoName
struct NoName {
  static constexpr std::string_view name = "no_name";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoName() { torch_delegate::register_runtime<NoName>(); }

// case: NoIsAvailable
struct NoIsAvailable {
  static constexpr std::string_view name = "no_is_available";
  bool is_available() const { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoIsAvailable() { torch_delegate::register_runtime<NoIsAvailable>(); }

// case: NoCompile
struct NoCompile {
  static constexpr std::string_view name = "no_compile";
  static bool is_available() { return true; }
  int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoCompile() { torch_delegate::register_runtime<NoCompile>(); }

// case: VoidCompile
struct VoidCompile {
  static constexpr std::string_view name = "void_compile";
  using payload = std::string;
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static int compile(const std::vector<std::int64_t>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_VoidCompile() { torch_delegate::register_runtime<VoidCompile>(); }

// case: NoExecute
struct NoExecute {
  static constexpr std::string_view name = "no_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  std::vector<c10::IValue> execute(int&, torch_delegate::inputs inputs) { return {inputs.begin(), inputs.end()}; }
};
void use_NoExecute() { torch_delegate::register_runtime<NoExecute>(); }

// case: OverloadedExecute
struct OverloadedExecute {
  static constexpr std::string_view name = "overloaded_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, double)>;
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static at::Tensor execute(int&, const at::Tensor& x, double) { return x; }
};
void use_OverloadedExecute() { torch_delegate::register_runtime<OverloadedExecute>(); }

// case: ListedButMissing
struct ListedButMissing {
  static constexpr std::string_view name = "listed_but_missing";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, at::Tensor)>;
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static at::Tensor execute(int&, const at::Tensor& x, const at::Tensor&) { return x; }
};
void use_ListedButMissing() { torch_delegate::register_runtime<ListedButMissing>(); }

// case: FloatArgument
struct FloatArgument {
  static constexpr std::string_view name = "float_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x, double) { return x; }
};
void use_FloatArgument() { torch_delegate::register_runtime<FloatArgument>(); }

// case: NoPreprocess
struct NoPreprocess {
  static constexpr std::string_view name = "no_preprocess";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NoPreprocess() { torch_delegate::lower<NoPreprocess>(torch::jit::Module("m")); }

// case: UnreflectedOptions
struct PlainOptions {
  double scale = 1.0;
};
BOOST_HANA_ADAPT_STRUCT(PlainOptions, scale);
struct UnreflectedOptions {
  static constexpr std::string_view name = "unreflected_options";
  using options = PlainOptions;
  static bool is_available() { return true; }
  static int compile(const std::string&, const options&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_UnreflectedOptions() { torch_delegate::register_runtime<UnreflectedOptions>(); }

// case: GenericExecuteReturnsTensors
struct GenericExecuteReturnsTensors {
  static constexpr std::string_view name = "generic_execute_returns_tensors";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static std::vector<c10::IValue> execute(int&, torch_delegate::inputs args) { return {args[0].toTensor()}; }
};
void use_GenericExecuteReturnsTensors() { torch_delegate::register_runtime<GenericExecuteReturnsTensors>(); }

// case: NonConstReferenceArgument
struct NonConstReferenceArgument {
  static constexpr std::string_view name = "non_const_reference_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_NonConstReferenceArgument() { torch_delegate::register_runtime<NonConstReferenceArgument>(); }

// case: PreprocessReturnsAnotherPayload
struct PreprocessReturnsAnotherPayload {
  static constexpr std::string_view name = "preprocess_returns_another_payload";
  static std::vector<double> preprocess(const torch_delegate::method_to_lower&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PreprocessReturnsAnotherPayload() {
  torch_delegate::lower<PreprocessReturnsAnotherPayload>(torch::jit::Module("m"));
}

// case: PreprocessResultOfAnotherPayload
struct PreprocessResultOfAnotherPayload {
  static constexpr std::string_view name = "preprocess_result_of_another_payload";
  torch_delegate::preprocess_result<std::vector<double>> preprocess(const torch_delegate::method_to_lower&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PreprocessResultOfAnotherPayload() {
  torch_delegate::lower<PreprocessResultOfAnotherPayload>(torch::jit::Module("m"));
}

// case: LibTorchPreprocess
struct LibTorchPreprocess {
  static constexpr std::string_view name = "libtorch_preprocess";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_LibTorchPreprocess() { torch_delegate::lower<LibTorchPreprocess>(torch::jit::Module("m")); }

// case: PartitionWithoutSupports
#include <torch_delegate/partition.hpp>
struct PartitionWithoutSupports {
  static constexpr std::string_view name = "partition_without_supports";
  static bool supports(const torch::jit::Node*) { return true; }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_PartitionWithoutSupports() { torch_delegate::lower_partially<PartitionWithoutSupports>(torch::jit::Module("m")); }

// case: ReplanOfAnotherShape
struct ReplanOfAnotherShape {
  static constexpr std::string_view name = "replan_of_another_shape";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static int replan(int&, const torch_delegate::given_inputs&) { return 0; }
};
static_assert(torch_delegate::backend_replans<ReplanOfAnotherShape>);
void use_ReplanOfAnotherShape() { torch_delegate::lower<ReplanOfAnotherShape>(torch::jit::Module("m")); }

// case: AcceptsRegionOfAnotherShape
#include <torch_delegate/partition.hpp>
struct AcceptsRegionOfAnotherShape {
  static constexpr std::string_view name = "accepts_region_of_another_shape";
  static bool supports(const torch::jit::Node*) { return true; }
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region) {
    if (region.size() < 2) return torch_delegate::region_verdict::refuse("one node");
    return true;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
void use_AcceptsRegionOfAnotherShape() { torch_delegate::lower_partially<AcceptsRegionOfAnotherShape>(torch::jit::Module("m")); }
