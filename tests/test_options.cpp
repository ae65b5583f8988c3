// Typed options: encoded into LibTorch's method_compile_spec, decoded typed again, and every
// bad key or value reported with backend, method and key.
#include "backends.hpp"
#include "helpers.hpp"

using namespace test_helpers;
using test_backends::TypedBackend;
using test_backends::typed_options;

namespace {
const torch_delegate::detail::error_context where{"td_test_typed", "forward"};

c10::impl::GenericDict dict(std::initializer_list<std::pair<std::string, c10::IValue>> entries) {
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [key, value] : entries) out.insert(key, value);
  return out;
}
}  // namespace

TEST_CASE("typed options encode to a Dict[str, Any] and decode back unchanged") {
  typed_options options;
  options.target = std::string("npu");
  options.scale = 0.25;
  options.repeat = 9;
  options.fast = true;
  auto encoded = torch_delegate::encode_options(options).toGenericDict();
  CHECK(encoded.size() == 4);
  CHECK(encoded.at("target").toStringRef() == "npu");
  CHECK(encoded.at("scale").toDouble() == 0.25);
  CHECK(encoded.at("repeat").toInt() == 9);
  CHECK(encoded.at("fast").toBool() == true);
  auto decoded = torch_delegate::decode_options<typed_options>(encoded, where);
  CHECK(decoded.target.value() == "npu");
  CHECK(decoded.scale == 0.25);
  CHECK(decoded.repeat == 9);
  CHECK(decoded.fast);
}

TEST_CASE("absent optional keys take the struct's defaults; an unset required key is not encoded") {
  auto decoded = torch_delegate::decode_options<typed_options>(dict({{"target", std::string("cpu")}}), where);
  CHECK(decoded.scale == 1.0);
  CHECK(decoded.repeat == 1);
  CHECK_FALSE(decoded.fast);
  CHECK(torch_delegate::encode_options(typed_options{}).toGenericDict().contains("target") == false);
}

TEST_CASE("option errors name the backend, method and key") {
  using torch_delegate::decode_options;
  CHECK(error_of([] { decode_options<typed_options>(dict({{"target", std::string("cpu")}, {"scael", 2.0}}), where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': unknown option key 'scael'; known keys: target, "
        "scale, repeat, fast");
  CHECK(error_of([] { decode_options<typed_options>(dict({{"scale", 2.0}}), where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': missing required option 'target' (str)");
  CHECK(error_of([] { decode_options<typed_options>(dict({{"target", std::string("cpu")}, {"scale", std::string("big")}}), where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': option 'scale' expects float, got str");
  CHECK(error_of([] { decode_options<typed_options>(dict({{"target", 3}}), where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': option 'target' expects str, got int");
  CHECK(error_of([] { decode_options<typed_options>(c10::IValue(3), where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': the compile spec of a method must be a Dict[str, Any] "
        "of options, got int");
}

TEST_CASE("a backend without options accepts any per-method value, as LibTorch passes it through") {
  const torch_delegate::detail::error_context none{"td_test_generic", "forward"};
  using torch_delegate::decode_options;
  using torch_delegate::no_options;
  CHECK_NOTHROW(decode_options<no_options>(dict({}), none));
  CHECK_NOTHROW(decode_options<no_options>(dict({{"", std::string("")}}), none));
  CHECK_NOTHROW(decode_options<no_options>(dict({{"input_shapes", std::string("((1, 1, 320, 240), (1, 3))")}}), none));
  CHECK_NOTHROW(decode_options<no_options>(c10::IValue(std::string()), none));
  CHECK_NOTHROW(decode_options<no_options>(c10::IValue(), none));
}

TEST_CASE("raw_options keep the value as given; typed options reject unknown keys unless told to warn") {
  const torch_delegate::detail::error_context where{"td_test_typed", "forward"};
  using torch_delegate::decode_options;
  CHECK(decode_options<torch_delegate::raw_options>(c10::IValue(3), where).value == c10::IValue(3));
  CHECK(torch_delegate::encode_options(torch_delegate::raw_options{c10::IValue("x")}) == c10::IValue("x"));
  const auto spec = dict({{"target", std::string("cpu")}, {"extra", 1}});
  CHECK(error_of([&] { decode_options<typed_options>(spec, where); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': unknown option key 'extra'; known keys: target, "
        "scale, repeat, fast");
  warning_capture warnings;
  CHECK(decode_options<typed_options>(spec, where, torch_delegate::unknown_option_keys::ignore).target.value() == "cpu");
  CHECK(warnings.messages.empty());
  decode_options<typed_options>(spec, where, torch_delegate::unknown_option_keys::warn);
  CHECK(warnings.messages == std::vector<std::string>{"torch-delegate: backend 'td_test_typed', method 'forward': ignoring "
                                                      "unknown option key 'extra'; known keys: target, scale, repeat, fast"});
}

TEST_CASE("lower accepts untyped dictionaries and checks them the same way, before any work") {
  auto module = script(forward_source);
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", dict({{"target", std::string("cpu")}, {"scale", 2.0}}));
  auto lowered = torch_delegate::lower<TypedBackend>(module, spec);
  const at::Tensor x = torch::ones({2}), h = torch::ones({2});
  CHECK(lowered.forward({x, h}).toTensor().allclose((x + h) * 2.0));

  c10::impl::GenericDict bad(c10::StringType::get(), c10::AnyType::get());
  bad.insert("forward", dict({{"target", std::string("cpu")}, {"repeat", 1.5}}));
  CHECK(error_of([&] { torch_delegate::lower<TypedBackend>(module, bad); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': option 'repeat' expects int, got float");
}

TEST_CASE("typed lower with a missing required option fails naming it") {
  auto module = script(forward_source);
  CHECK(error_of([&] { torch_delegate::lower<TypedBackend>(module); }) ==
        "torch-delegate: backend 'td_test_typed', method 'forward': missing required option 'target' (str)");
}
