// Input specs (issue 14): dtypes and shapes declared at lowering reach preprocess as complete
// tensor types, travel in the payload, and a call that does not match them fails before the
// backend runs, on every route (operator, typed C++ call, LibTorch's execute), also after a load.
#include "helpers.hpp"

#include <sstream>

using namespace test_helpers;

namespace input_spec_tests {

inline std::string seen_input_type;
inline std::string seen_output_type;
inline int executed = 0;

/// Doubles its input; records the types preprocess saw.
struct SpecCheckedBackend {
  static constexpr std::string_view name = "td_test_input_specs";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    std::ostringstream input, output;
    input << *method.graph()->inputs()[1]->type();
    output << *method.graph()->outputs()[0]->type();
    seen_input_type = input.str();
    seen_output_type = output.str();
    return "";
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, double scale) {
    ++executed;
    return x * scale;
  }
};

torch::jit::Module scaled() { return script("def forward(self, x, scale: float):\n    return torch.relu(x) * scale\n"); }

torch_delegate::input_specs float_8_by_any() { return {{"forward", {torch_delegate::tensor_spec{{8, -1}, at::kFloat}, std::nullopt}}}; }

}  // namespace input_spec_tests

using namespace input_spec_tests;

TEST_CASE("input specs: preprocess sees complete tensor types") {
  torch_delegate::lower<SpecCheckedBackend>(scaled(), {{"forward", {}}},
                                      {{"forward", {torch_delegate::tensor_spec::like(torch::ones({8, 4})), std::nullopt}}});
  CHECK(seen_input_type == "Float(8, 4, strides=[4, 1], requires_grad=0, device=cpu)");
  INFO(seen_output_type);
  CHECK(seen_output_type.rfind("Float(", 0) == 0);  // shape analysis carried the dtype through relu and mul
  torch_delegate::lower<SpecCheckedBackend>(scaled(), {{"forward", {}}}, float_8_by_any());
  CHECK(seen_input_type == "Float(8, *, requires_grad=0, device=cpu)");
  torch_delegate::lower<SpecCheckedBackend>(scaled());
  CHECK(seen_input_type == "Tensor");  // without specs: what TorchScript knows
}

TEST_CASE("input specs: a call that does not match fails before the backend runs, on every route and after a load") {
  auto lowered = torch_delegate::lower<SpecCheckedBackend>(scaled(), {{"forward", {}}}, float_8_by_any());
  const std::string path = temp_path("input_specs.pt");
  lowered.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  std::remove(path.c_str());
  const std::string prefix = "torch-delegate: backend 'td_test_input_specs', method 'forward': argument 1 ('x') must be "
                             "Float [8, -1] (its input spec when the method was lowered; -1: any size), got ";
  executed = 0;
  for (torch::jit::Module* module : {&lowered.module(), &loaded}) {
    CHECK(module->forward({torch::ones({8, 3}), 2.0}).toTensor().equal(torch::full({8, 3}, 2.0)));
    CHECK(module->forward({torch::ones({8, 5}), 2.0}).toTensor().equal(torch::full({8, 5}, 2.0)));  // -1: any size
    CHECK(error_of([&] { module->forward({torch::ones({8, 3}, at::kDouble), 2.0}); }).find(prefix + "Double [8, 3]") !=
          std::string::npos);
    CHECK(error_of([&] { module->forward({torch::ones({7, 3}), 2.0}); }).find(prefix + "Float [7, 3]") != std::string::npos);
    CHECK(error_of([&] { module->forward({torch::ones({8}), 2.0}); }).find(prefix + "Float [8]") != std::string::npos);
  }
  CHECK(executed == 4);  // the calls that match, and only those
  // The typed C++ call checks too.
  auto typed = lowered.method<at::Tensor(at::Tensor, double)>("forward");
  CHECK(typed(torch::ones({8, 2}), 3.0).equal(torch::full({8, 2}, 3.0)));
  CHECK(error_of([&] { typed(torch::ones({2, 2}), 3.0); }) == prefix + "Float [2, 2]");
  // A static spec wants a contiguous tensor.
  auto fixed = torch_delegate::lower<SpecCheckedBackend>(scaled(), {{"forward", {}}},
                                                         {{"forward", {torch_delegate::tensor_spec{{2, 3}}, std::nullopt}}});
  CHECK(error_of([&] { fixed.module().forward({torch::ones({3, 2}).t(), 1.0}); }).find(
            "argument 1 ('x') must be Float [2, 3] contiguous (its input spec when the method was lowered; -1: any size), "
            "got Float [2, 3] not contiguous") != std::string::npos);
}

TEST_CASE("input specs: bad specs are errors that name the method and argument") {
  using torch_delegate::tensor_spec;
  const torch::jit::Module module = scaled();
  auto lower = [&](torch_delegate::input_specs specs) {
    return error_of([&] { torch_delegate::lower<SpecCheckedBackend>(module, {{"forward", {}}}, specs); });
  };
  const std::string prefix = "torch-delegate: backend 'td_test_input_specs', method ";
  CHECK(lower({{"encode", {tensor_spec{{1}}, std::nullopt}}}) ==
        prefix + "'encode': input specs given for a method that is not being lowered");
  CHECK(lower({{"forward", {tensor_spec{{1}}}}}) == prefix + "'forward': input specs: expected one entry per argument (2), got 1");
  CHECK(lower({{"forward", {tensor_spec{{1}}, tensor_spec{{1}}}}}) ==
        prefix + "'forward': input specs: argument 2 ('scale') is float, not a Tensor: give std::nullopt for it");
  CHECK(lower({{"forward", {tensor_spec{{-2}}, std::nullopt}}}) ==
        prefix + "'forward': input specs: argument 1 ('x') has size -2; sizes are >= 0, or -1 for any");
}

TEST_CASE("tensor_spec: matches and prints") {
  const torch_delegate::tensor_spec spec{{2, -1}, at::kFloat};
  CHECK(spec.matches(torch::ones({2, 9})));
  CHECK_FALSE(spec.matches(torch::ones({2, 9}, at::kInt)));
  CHECK_FALSE(spec.matches(torch::ones({2})));
  CHECK_FALSE(spec.matches(at::Tensor()));
  CHECK(spec.to_string() == "Float [2, -1]");
  CHECK(torch_delegate::tensor_spec::like(torch::ones({3}, at::kDouble)).to_string() == "Double [3] contiguous");
  CHECK_FALSE(torch_delegate::tensor_spec::like(torch::ones({3, 2})).matches(torch::ones({2, 3}).t()));
}
