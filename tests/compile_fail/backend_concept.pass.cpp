// The must-compile twins of backend_concept.fail.cpp: the same backends, each fixed.
#include <torch_delegate/torch_delegate.hpp>

struct NoName {
  static constexpr std::string_view name = "no_name";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct NoIsAvailable {
  static constexpr std::string_view name = "no_is_available";
  bool is_available() const { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct NoCompile {
  static constexpr std::string_view name = "no_compile";
  static bool is_available() { return true; }
  int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct VoidCompile {
  static constexpr std::string_view name = "void_compile";
  using payload = std::string;
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static int compile(const std::vector<std::int64_t>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct NoExecute {
  static constexpr std::string_view name = "no_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  std::vector<c10::IValue> execute(int&, torch_delegate::inputs inputs) { return {inputs.begin(), inputs.end()}; }
};
struct OverloadedExecute {
  static constexpr std::string_view name = "overloaded_execute";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, double)>;
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static at::Tensor execute(int&, const at::Tensor& x, double) { return x; }
};
struct ListedButMissing {
  static constexpr std::string_view name = "listed_but_missing";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor), at::Tensor(at::Tensor, at::Tensor)>;
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
  static at::Tensor execute(int&, const at::Tensor& x, const at::Tensor&) { return x; }
};
struct FloatArgument {
  static constexpr std::string_view name = "float_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x, double) { return x; }
};
struct NoPreprocess {
  static constexpr std::string_view name = "no_preprocess";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct NonConstReferenceArgument {
  static constexpr std::string_view name = "non_const_reference_argument";
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct PreprocessReturnsAnotherPayload {
  static constexpr std::string_view name = "preprocess_returns_another_payload";
  static std::vector<double> preprocess(const torch_delegate::method_to_lower&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct PreprocessResultOfAnotherPayload {
  static constexpr std::string_view name = "preprocess_result_of_another_payload";
  torch_delegate::preprocess_result<std::vector<double>> preprocess(const torch_delegate::method_to_lower&) { return {}; }
  static bool is_available() { return true; }
  static int compile(const std::vector<double>&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
struct LibTorchPreprocess {
  static constexpr std::string_view name = "libtorch_preprocess";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static int compile(const std::string&) { return 0; }
  static at::Tensor execute(int&, const at::Tensor& x) { return x; }
};
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

void register_all() {
  torch_delegate::register_runtime<NoName>();
  torch_delegate::register_runtime<NoIsAvailable>();
  torch_delegate::register_runtime<NoCompile>();
  torch_delegate::register_runtime<VoidCompile>();
  torch_delegate::register_runtime<NoExecute>();
  torch_delegate::register_runtime<OverloadedExecute>();
  torch_delegate::register_runtime<ListedButMissing>();
  torch_delegate::register_runtime<FloatArgument>();
  torch_delegate::lower<NoPreprocess>(torch::jit::Module("m"));
  torch_delegate::register_runtime<UnreflectedOptions>();
  torch_delegate::register_runtime<NonConstReferenceArgument>();
  torch_delegate::lower<PreprocessReturnsAnotherPayload>(torch::jit::Module("m"));
  torch_delegate::lower<PreprocessResultOfAnotherPayload>(torch::jit::Module("m"));
  torch_delegate::lower<LibTorchPreprocess>(torch::jit::Module("m"));
}
