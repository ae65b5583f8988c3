// The generated TorchScript, printed and compared with golden text.
#include "helpers.hpp"

#include <torch_delegate/detail/codegen.hpp>
#include <torch_delegate/runtime.hpp>

using namespace test_helpers;

TEST_CASE("golden: lowered and wrapper methods, with defaults, keyword-only args and tuples") {
  auto module = script(R"(
def forward(self, x, h, alpha: float = 0.5, *, name: str = "a\"b", sizes: List[int] = [1, 2]) -> Tuple[Tensor, Tensor]:
    return x, h
def single(self, x: Tensor) -> Tuple[Tensor]:
    return (x,)
)");
  const torch_delegate::detail::error_context where{"demo", "forward"};
  const auto& schema = module.get_method("forward").function().getSchema();
  CHECK(torch_delegate::detail::lowered_method_source("forward", schema, where) ==
        "def forward(self, x: Tensor, h: Tensor, alpha: float = 0.5, *, name: str = \"a\\\"b\", sizes: List[int] = [1, 2]) -> Tuple[Tensor, Tensor]:\n"
        "    td_inputs_: List[Any] = [x, h, alpha, name, sizes]\n"
        "    td_outputs_ = self.__backend.execute(self.__handles[\"forward\"], td_inputs_)\n"
        "    td_output_0_ = td_outputs_[0]\n"
        "    assert isinstance(td_output_0_, Tensor)\n"
        "    td_output_1_ = td_outputs_[1]\n"
        "    assert isinstance(td_output_1_, Tensor)\n"
        "    return (td_output_0_, td_output_1_)\n");
  CHECK(torch_delegate::detail::wrapper_method_source("forward", schema, where) ==
        "def forward(self, x: Tensor, h: Tensor, alpha: float = 0.5, *, name: str = \"a\\\"b\", sizes: List[int] = [1, 2]) -> Tuple[Tensor, Tensor]:\n"
        "    return self.__loweredModule__.forward(x, h, alpha, name=name, sizes=sizes)\n");
  CHECK(torch_delegate::detail::lowered_method_source("single", module.get_method("single").function().getSchema(), where)
            .find("    return (td_output_0_,)\n") != std::string::npos);
}

TEST_CASE("golden: the common lowered-module methods") {
  CHECK(torch_delegate::detail::lowered_module_common_source("__torch__.torch.classes.__backends__.demo",
                                                             "__torch__.torch.classes.backendutils.BackendDebugInfo()") ==
        "def __getstate__(self):\n"
        "    self.__backend.td_check_saveable(self.__processed_module)\n"
        "    return self.__method_compile_spec, self.__processed_module, True\n"
        "\n"
        "def __setstate__(self, state: Tuple[Dict[str, Any], Any, bool]):\n"
        "    self.__method_compile_spec = state[0]\n"
        "    self.__processed_module = state[1]\n"
        "    if state[2]:\n"
        "        self.__backend = __torch__.torch.classes.__backends__.demo()\n"
        "        self.__backend_debug_info = __torch__.torch.classes.backendutils.BackendDebugInfo()\n"
        "    if self.__backend.is_available():\n"
        "        self.__handles = self.__backend.compile(self.__processed_module, self.__method_compile_spec)\n"
        "    else:\n"
        "        raise Exception(\"Backend is not available. (torch-delegate: backend 'demo' reports is_available() == false "
        "while this module loads: load it where the backend is available, or lower it with fallback_when_unavailable)\")\n");
}

TEST_CASE("default literals round-trip exactly") {
  const torch_delegate::detail::error_context where{"demo", "forward"};
  using torch_delegate::detail::default_literal;
  CHECK(default_literal(c10::IValue(0.1), where, "a") == "0.10000000000000001");
  CHECK(default_literal(c10::IValue(2.0), where, "a") == "2.0");
  CHECK(default_literal(c10::IValue(std::numeric_limits<double>::infinity()), where, "a") == "float(\"inf\")");
  CHECK(default_literal(c10::IValue(), where, "a") == "None");
  CHECK(default_literal(c10::IValue(false), where, "a") == "False");
  CHECK_CONTAINS(error_of([&] { default_literal(c10::IValue(torch::ones({1})), where, "w"); }),
                 "torch-delegate: backend 'demo', method 'forward': cannot reproduce the default value of argument 'w' (Tensor)");
}

TEST_CASE("golden: a typed execute overload becomes one operator call in the lowered module; the wrapper forwards") {
  auto module = script(R"(
def forward(self, x, h, alpha: float = 0.5):
    return x
def single(self, x: Tensor) -> Tuple[Tensor]:
    return (x,)
)");
  const torch_delegate::detail::error_context where{"demo", "forward"};
  const auto& schema = module.get_method("forward").function().getSchema();
  CHECK(torch_delegate::detail::lowered_method_source("forward", schema, where, "torch_delegate::demo_execute0") ==
        "def forward(self, x: Tensor, h: Tensor, alpha: float = 0.5) -> Tensor:\n"
        "    return torch_delegate.demo_execute0(self.__handles[\"forward\"], x, h, alpha)\n");
  CHECK(torch_delegate::detail::wrapper_method_source("forward", schema, where) ==
        "def forward(self, x: Tensor, h: Tensor, alpha: float = 0.5) -> Tensor:\n"
        "    return self.__loweredModule__.forward(x, h, alpha)\n");
  CHECK(torch_delegate::detail::lowered_method_source("single", module.get_method("single").function().getSchema(), where,
                                                      "torch_delegate::demo_execute2") ==
        "def single(self, x: Tensor) -> Tuple[Tensor]:\n"
        "    return (torch_delegate.demo_execute2(self.__handles[\"single\"], x),)\n");
}

TEST_CASE("operator schemas are derived from the signature records; names spell the signature") {
  const std::string_view arguments[] = {"Tensor", "List[int]", "Optional[float]"};
  const torch_delegate::detail::signature_record record{"(Tensor, List[int], Optional[float]) -> Tuple[Tensor, int]",
                                                        arguments, "Tuple[Tensor, int]", false, nullptr, nullptr};
  using namespace torch_delegate::detail;
  const std::string name = operator_name("demo", record.text);
  CHECK(name == "torch_delegate::demo_execute__LTensor_CList_Iint_J_COptional_Ifloat_J_R_TTuple_ITensor_Cint_J");
  CHECK(operator_schema(name, record) == name + "(Any handle, Tensor a0, int[] a1, float? a2) -> (Tensor, int)");
  CHECK(legacy_operator_name("demo", 3) == "torch_delegate::demo_execute3");
  for (const std::string& text : std::vector<std::string>{"(Tensor, Tensor) -> Tensor", "(*) -> *",
                                                           "(__torch__.My_Type) -> Dict[str, Tensor]",
                                                           "(a_b, c__d) -> Optional[Tensor]", "(weird\x01 chars!) -> x"}) {
    const std::string id = identifier_of_signature(text);
    INFO(text, " -> ", id);
    CHECK(std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }));
    CHECK(signature_of_identifier(id) == text);
  }
  CHECK_FALSE(signature_of_identifier("bad_").has_value());
  CHECK_FALSE(signature_of_identifier("_Z").has_value());
  CHECK_FALSE(signature_of_identifier("_x4").has_value());
}
