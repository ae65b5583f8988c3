// Named data (issue 14): one copy per key and lowered module across methods, conflicts named,
// format 2 only with named data, compile reads it without copies, release after load, the
// multi-unit preprocess_all, and weights read at preprocess (method_to_lower::value_of).
#include "helpers.hpp"

#include <named_data/linear_backend.hpp>
#include <torch_delegate/partition.hpp>

#include <cstdio>
#include <set>

#include <torch/csrc/jit/mobile/import.h>
#include <torch/csrc/jit/mobile/module.h>

using namespace test_helpers;

namespace named_data_tests {

using packed_linear::LinearBackend;

torch::jit::Module two_methods(std::int64_t features = 16) {
  torch::jit::Module module("Encoder");
  torch::manual_seed(0);
  module.register_parameter("weight", torch::randn({features, features}), false);
  module.register_parameter("bias", torch::randn({features}), false);
  module.define(R"(
def forward(self, x):
    return torch.linear(x, self.weight, self.bias)

def encode(self, x):
    return torch.relu(torch.linear(x, self.weight, self.bias))
)");
  return module;
}

torch_delegate::method_options<LinearBackend> both(packed_linear::options o = {}) { return {{"forward", o}, {"encode", o}}; }

std::vector<c10::IValue> processed_fields(const torch::jit::Module& lowered) {
  return lowered.attr("__loweredModule__").toModule().attr("__processed_module").toTupleRef().elements().vec();
}

/// Stores a different tensor under the same key for each method: a conflict.
struct ConflictingBackend {
  static constexpr std::string_view name = "td_test_named_conflict";
  static torch_delegate::preprocess_result<std::string> preprocess(const torch_delegate::method_to_lower& method) {
    torch_delegate::preprocess_result<std::string> result{method.name()};
    result.named_data.add_tensor("weights", torch::full({2, 2}, method.name() == "forward" ? 1.0 : 2.0));
    return result;
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x) { return x; }
};

/// preprocess_all: every unit at once, with named data shared by all; records what it saw.
inline std::vector<std::string> preprocess_all_saw;
inline int preprocess_all_calls = 0;
inline bool preprocess_all_drops_one = false;
struct AllAtOnceBackend {
  static constexpr std::string_view name = "td_test_preprocess_all";
  using payload = std::string;
  static torch_delegate::multi_preprocess_result<std::string> preprocess_all(
      std::span<const torch_delegate::unit_with_options<torch_delegate::no_options>> units) {
    ++preprocess_all_calls;
    torch_delegate::multi_preprocess_result<std::string> result;
    for (const auto& entry : units) {
      preprocess_all_saw.push_back(entry.unit.name());
      result.units.push_back({entry.unit.name()});
    }
    if (preprocess_all_drops_one) result.units.pop_back();
    result.named_data.add_tensor("scale", torch::full({1}, 3.0));
    return result;
  }
  static bool is_available() { return true; }
  static at::Tensor compile(const std::string& payload, const torch_delegate::compile_context& context) {
    // Each unit's payload is its own name; the scale is shared.
    CHECK(payload == std::string(context.method()));
    return context.named_data().tensor("scale");
  }
  static at::Tensor execute(at::Tensor& scale, const at::Tensor& x) { return x * scale; }
};

/// Asks compile_context for a key that no unit stored.
struct MissingKeyBackend {
  static constexpr std::string_view name = "td_test_named_missing";
  static torch_delegate::preprocess_result<std::string> preprocess(const torch_delegate::method_to_lower&) {
    torch_delegate::preprocess_result<std::string> result{"w"};
    result.named_data.add_bytes("a", std::as_bytes(std::span<const char>("xy", 2)));
    result.named_data.add_bytes("b", {});
    return result;
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string&, const torch_delegate::compile_context& context) {
    CHECK(context.named_data().bytes("a").size() == 2);
    CHECK(static_cast<char>(context.named_data().bytes("a")[1]) == 'y');
    CHECK(context.named_data().bytes("b").empty());
    context.named_data().tensor("missing");
    return "";
  }
  static at::Tensor execute(std::string&, const at::Tensor& x) { return x; }
};

/// Partial lowering: every region stores the same table under one key.
struct SharedTableBackend {
  static constexpr std::string_view name = "td_test_named_regions";
  static bool supports(const torch::jit::Node* node) { return node->kind() == c10::aten::mul; }
  static torch_delegate::preprocess_result<std::string> preprocess(const torch_delegate::method_to_lower& method) {
    torch_delegate::preprocess_result<std::string> result{method.name()};
    result.named_data.add_tensor("table", torch::full({4}, 2.0));
    return result;
  }
  static bool is_available() { return true; }
  static at::Tensor compile(const std::string&, const torch_delegate::compile_context& context) {
    return context.named_data().tensor("table");
  }
  static at::Tensor execute(at::Tensor& table, const at::Tensor& x, const at::Tensor& y) { return x * y * table[0]; }
};

}  // namespace named_data_tests

using namespace named_data_tests;

TEST_CASE("named data: two methods that use the same weight store it once, in the file and in the payload") {
  const torch::jit::Module module = two_methods();
  torch::jit::Module lowered = torch_delegate::lower<LinearBackend>(module, both()).module();
  const std::vector<c10::IValue> fields = processed_fields(lowered);
  REQUIRE(fields.size() == 5);
  CHECK(fields[1].toInt() == 2);  // format 2: it has named data
  const auto table = fields[4].toGenericDict();
  CHECK(table.size() == 2);  // the packed weight and the bias, once each for both methods
  for (const auto& entry : table) CHECK(entry.value().toTupleRef().elements()[1].toInt() == 64);

  const at::Tensor x = torch::randn({3, 16});
  const std::string path = temp_path("named_shared.pt");
  lowered.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  for (const char* method : {"forward", "encode"}) {
    const at::Tensor expected = torch::jit::Module(module).get_method(method)({x}).toTensor();
    // Exact: the packed weight keeps aten::linear's layout, so the BLAS call is eager's.
    CHECK(loaded.get_method(method)({x}).toTensor().equal(expected));
    CHECK(lowered.get_method(method)({x}).toTensor().equal(expected));
    // Packed transposed: equal within float rounding (BLAS sums in another order).
    torch::jit::Module transposed = torch_delegate::lower<LinearBackend>(module, both({.transpose = true})).module();
    CHECK(transposed.get_method(method)({x}).toTensor().allclose(expected, 1e-5, 1e-6));
    CHECK(transposed.get_method(method)({x.unsqueeze(0)}).toTensor().allclose(expected.unsqueeze(0), 1e-5, 1e-6));
  }
  // The lite interpreter loads and runs it too.
  lowered._save_for_mobile(path);
  auto mobile = torch::jit::_load_for_mobile(path);
  CHECK(mobile.get_method("encode")({x}).toTensor().equal(torch::jit::Module(module).get_method("encode")({x}).toTensor()));
  std::remove(path.c_str());

  // Without named data each method's payload holds its own copy, and the format stays 1.
  torch::jit::Module copies = torch_delegate::lower<LinearBackend>(module, both({.named_data = false})).module();
  CHECK(processed_fields(copies).size() == 4);
  CHECK(processed_fields(copies)[1].toInt() == 1);
}

TEST_CASE("named data: a key given different content by two methods is an error naming both") {
  const torch::jit::Module module = script("def forward(self, x):\n    return x\n\ndef encode(self, x):\n    return x\n");
  const std::string message =
      error_of([&] { torch_delegate::lower<ConflictingBackend>(module, {{"forward", {}}, {"encode", {}}}); });
  // Units in spec order (method_options is sorted: encode, then forward).
  CHECK(message ==
        "torch-delegate: backend 'td_test_named_conflict', method 'forward': named data 'weights' is given with different "
        "content by unit 'encode' (Float [2, 2] (16 bytes)) and unit 'forward' (Float [2, 2] (16 bytes)): a key names one "
        "piece of data. Use distinct keys, e.g. torch_delegate::content_key(prefix, tensor)");
}

TEST_CASE("named_data_store: same content is stored once, other content and bad alignments are errors") {
  torch_delegate::named_data_store store;
  store.add_tensor("w", torch::ones({4}), 16);
  store.add_tensor("w", torch::ones({4}), 128);  // same content: kept once, the larger alignment
  CHECK(store.size() == 1);
  CHECK(store.entries().at("w").alignment == 128);
  CHECK(store.bytes() == 16);
  CHECK(error_of([&] { store.add_tensor("w", torch::zeros({4})); }) ==
        "named_data_store: named data 'w' is added twice with different content: Float [4] (16 bytes), then Float [4] (16 bytes)");
  CHECK(error_of([&] { store.add_tensor("v", torch::ones({1}), 48); }) ==
        "named_data_store::add_tensor: the alignment of named data 'v' must be a power of two from 1 to 4096, got 48");
  CHECK(error_of([&] { store.add_tensor("", torch::ones({1})); }) == "named_data_store::add_tensor: the key is empty");
  CHECK(error_of([&] { store.add_tensor("u", at::Tensor()); }) == "named_data_store::add_tensor: the tensor for 'u' is undefined");
  // A strided view is stored as its own contiguous copy.
  store.add_tensor("t", torch::arange(6, at::kFloat).reshape({2, 3}).t());
  CHECK(store.entries().at("t").data.is_contiguous());
  CHECK(store.entries().at("t").data.equal(torch::arange(6, at::kFloat).reshape({2, 3}).t()));
}

TEST_CASE("content_key: equal content gives the same key, any difference another") {
  const at::Tensor a = torch::arange(4, at::kFloat);
  CHECK(torch_delegate::content_key("w", a) == torch_delegate::content_key("w", a.clone()));
  CHECK(torch_delegate::content_key("w", a).size() == std::string("w-").size() + 16);
  CHECK(torch_delegate::content_key("w", a) != torch_delegate::content_key("w", a + 1));
  CHECK(torch_delegate::content_key("w", a) != torch_delegate::content_key("w", a.reshape({2, 2})));
  CHECK(torch_delegate::content_key("w", a) != torch_delegate::content_key("w", a.to(at::kDouble)));

  // The bytes are hashed in four lanes of 8-byte words with a tail of the last (size % 32) bytes:
  // a change to any one byte, in any lane or the tail, and swapping two lanes' words give another
  // key; so does a non-contiguous view of other content, hashed as the dense copy it stands for.
  const at::Tensor bytes = torch::arange(75, at::kByte);  // two 32-byte strides and an 11-byte tail
  const std::string key = torch_delegate::content_key("b", bytes);
  std::set<std::string> keys{key};
  for (std::int64_t i = 0; i < bytes.numel(); ++i) {
    at::Tensor changed = bytes.clone();
    changed[i] += 1;
    keys.insert(torch_delegate::content_key("b", changed));
  }
  CHECK(keys.size() == 76);
  at::Tensor swapped = bytes.clone();
  swapped.slice(0, 0, 8).copy_(bytes.slice(0, 8, 16));
  swapped.slice(0, 8, 16).copy_(bytes.slice(0, 0, 8));
  CHECK(torch_delegate::content_key("b", swapped) != key);
  const at::Tensor matrix = torch::arange(64, at::kFloat).reshape({8, 8});
  CHECK(torch_delegate::content_key("m", matrix.t()) == torch_delegate::content_key("m", matrix.t().contiguous()));
  CHECK(torch_delegate::content_key("m", matrix.t()) != torch_delegate::content_key("m", matrix));
  CHECK(torch_delegate::content_key("e", torch::empty({0})) == torch_delegate::content_key("e", torch::empty({0})));
}

TEST_CASE("named_data_map: data is aligned as asked, a missing key names the keys there are") {
  torch_delegate::named_data_map map("td_test");
  const at::Tensor data = torch::arange(8, at::kFloat);
  map.insert("page", {data, 4096});
  CHECK(reinterpret_cast<std::uintptr_t>(map.tensor("page").data_ptr()) % 4096 == 0);
  CHECK(map.tensor("page").equal(data));
  CHECK(error_of([&] { map.tensor("nope"); }) ==
        "torch-delegate: backend 'td_test': no named data 'nope' in this lowered module; it has 'page'");
  map.erase("page");
  CHECK(error_of([&] { map.tensor("page"); }) ==
        "torch-delegate: backend 'td_test': no named data 'page': it was released after compile "
        "(compile_context::release_named_data); it has none");

  const torch::jit::Module module = script("def forward(self, x):\n    return x\n");
  CHECK(error_of([&] { torch_delegate::lower<MissingKeyBackend>(module); }).find(
            "no named data 'missing' in this lowered module; it has 'a', 'b'") != std::string::npos);
}

TEST_CASE("named data: released after a load, the module refuses to be saved; where it was lowered it saves") {
  const torch::jit::Module module = two_methods();
  torch::jit::Module lowered = torch_delegate::lower<LinearBackend>(module, both({.own_copy = true})).module();
  const std::string path = temp_path("named_own.pt");
  lowered.save(path);  // the lowering process keeps the data: saving works
  torch::jit::Module loaded = torch::jit::load(path);
  const at::Tensor x = torch::randn({2, 16});
  CHECK(loaded.forward({x}).toTensor().equal(torch::jit::Module(module).forward({x}).toTensor()));
  CHECK(torch_delegate::detail::released_named_data(loaded.attr("__loweredModule__").toModule().attr("__processed_module")).size() == 2);
  const std::string message = error_of([&] { loaded.save(temp_path("named_resave.pt")); });
  CHECK(message.find("torch-delegate: backend 'packed_linear': cannot save this lowered module: its backend released the "
                     "named data 'packed_linear.bias-") != std::string::npos);
  CHECK(message.find("Save the module that lowering returned, or the file it was loaded from.") != std::string::npos);
  std::remove(path.c_str());
  std::remove(temp_path("named_resave.pt").c_str());  // what LibTorch wrote before the save failed
}

TEST_CASE("named data in the payload: a malformed table is an error, never a crash") {
  using torch_delegate::detail::read_named_data;
  auto processed = [](c10::IValue table, std::int64_t format = 2) {
    c10::impl::GenericDict methods(c10::StringType::get(), c10::AnyType::get());
    return c10::IValue(c10::ivalue::Tuple::create({c10::IValue("b"), c10::IValue(format), c10::IValue(std::int64_t{1}),
                                                   c10::IValue(methods), std::move(table)}));
  };
  c10::impl::GenericDict table(c10::StringType::get(), c10::AnyType::get());
  CHECK(read_named_data(processed(table), "b")->empty());
  CHECK(read_named_data(processed(c10::IValue(), 1), "b")->empty());  // format 1 ignores a 5th field
  CHECK(error_of([&] { read_named_data(processed(c10::IValue()), "b"); }).find(
            "format 2 needs a named-data table Dict[str, Tuple[Tensor, int]] as 5th field") != std::string::npos);
  table.insert("k", c10::IValue(std::int64_t{3}));
  CHECK(error_of([&] { read_named_data(processed(table), "b"); }).find("malformed named-data entry") != std::string::npos);
  table.insert_or_assign("k", c10::ivalue::Tuple::create({c10::IValue(torch::ones({2})), c10::IValue(std::int64_t{3})}));
  CHECK(error_of([&] { read_named_data(processed(table), "b"); }).find("malformed named-data entry 'k'") != std::string::npos);
  table.insert_or_assign("k", c10::ivalue::Tuple::create({c10::IValue(torch::ones({2})), c10::IValue(std::int64_t{8})}));
  CHECK(read_named_data(processed(table), "b")->tensor("k").equal(torch::ones({2})));
}

TEST_CASE("preprocess_all: one call with every unit, one result per unit, named data shared") {
  preprocess_all_saw.clear();
  preprocess_all_calls = 0;
  const torch::jit::Module module = script("def forward(self, x):\n    return x\n\ndef encode(self, x):\n    return x\n");
  auto lowered = torch_delegate::lower<AllAtOnceBackend>(module, {{"forward", {}}, {"encode", {}}});
  CHECK(preprocess_all_calls == 1);
  CHECK(preprocess_all_saw == std::vector<std::string>{"encode", "forward"});  // spec order
  const at::Tensor x = torch::ones({2});
  CHECK(lowered.module().get_method("encode")({x}).toTensor().equal(x * 3));
  CHECK(processed_fields(lowered.module())[4].toGenericDict().size() == 1);

  preprocess_all_drops_one = true;
  const std::string message = error_of([&] { torch_delegate::lower<AllAtOnceBackend>(module, {{"forward", {}}, {"encode", {}}}); });
  preprocess_all_drops_one = false;
  CHECK(message == "torch-delegate: backend 'td_test_preprocess_all': preprocess_all returned 1 results for 2 units: it "
                   "must return one per unit, in order");
}

TEST_CASE("method_to_lower::value_of reads parameters through submodules and constants; run-time values are unknown") {
  torch::jit::Module inner("Inner");
  inner.register_parameter("weight", torch::full({2}, 5.0), false);
  inner.define("def forward(self, x):\n    return x * self.weight\n");
  torch::jit::Module outer("Outer");
  outer.register_module("inner", inner);
  outer.define("def forward(self, x):\n    return self.inner.forward(x) + 2.0\n");
  const auto graph = torch_delegate::detail::inlined_graph(outer, "forward");
  const c10::FunctionSchema& schema = outer.get_method("forward").function().getSchema();
  torch_delegate::method_to_lower view(outer, "td_test", "forward", graph, {}, schema);
  int seen = 0;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::mul) {
      CHECK(view.tensor_of(node->input(1)).equal(torch::full({2}, 5.0)));  // self.inner.weight
      CHECK_FALSE(view.value_of(node->input(0)).has_value());              // x: known at run time only
      CHECK(error_of([&] { view.tensor_of(node->input(0)); }).find(
                "expected a tensor known at lowering time (a constant, parameter or buffer), got a value computed at run "
                "time.") != std::string::npos);
      ++seen;
    }
    if (node->kind() == c10::aten::add) {
      CHECK(view.value_of(node->input(1))->toDouble() == 2.0);
      ++seen;
    }
  }
  CHECK(seen == 2);
}

TEST_CASE("named data: a module saved with payload format 2 and input specs keeps loading and running (tests/data)") {
  torch::jit::Module loaded = torch::jit::load(std::string(TD_TEST_DATA_DIR) + "/packed_linear_format2_by_8cc4fe4.pt");
  const at::Tensor weight = torch::arange(16, at::kFloat).reshape({4, 4}) / 10 - 0.5;
  const at::Tensor bias = torch::tensor({0.25f, -0.5f, 1.0f, 0.0f});
  const at::Tensor x = torch::linspace(-2, 2, 12).reshape({3, 4});
  // Saved before the `transpose` option: its weights are packed transposed (key "...weight_t-...").
  CHECK(loaded.forward({x}).toTensor().allclose(at::linear(x, weight, bias), 1e-5, 1e-6));
  CHECK(loaded.get_method("encode")({x}).toTensor().allclose(at::relu(at::linear(x, weight, bias)), 1e-5, 1e-6));
  CHECK(processed_fields(loaded)[4].toGenericDict().size() == 2);
  CHECK(error_of([&] { loaded.forward({torch::ones({3, 5})}); }).find("must be Float [-1, 4]") != std::string::npos);
}

TEST_CASE("named data with partial lowering: the regions of every method share one copy") {
  const torch::jit::Module module =
      script("def forward(self, x, y):\n    return x * y + 1.0\n\ndef encode(self, x, y):\n    return x * y - 1.0\n");
  torch_delegate::partition_options options;
  options.methods = {"forward", "encode"};
  torch::jit::Module lowered = torch_delegate::lower_partially<SharedTableBackend>(module, options);
  // One lowered child for the regions of both methods, one copy of the table.
  torch::jit::Module child = lowered.attr("__delegate").toModule();
  const auto fields = child.attr("__loweredModule__").toModule().attr("__processed_module").toTupleRef().elements().vec();
  REQUIRE(fields.size() == 5);
  CHECK(fields[3].toGenericDict().size() == 2);  // forward's region and encode's
  CHECK(fields[4].toGenericDict().size() == 1);
  const at::Tensor x = torch::ones({3}), y = torch::full({3}, 3.0);
  CHECK(lowered.forward({x, y}).toTensor().equal(torch::full({3}, 7.0)));
  CHECK(lowered.get_method("encode")({x, y}).toTensor().equal(torch::full({3}, 5.0)));
}
