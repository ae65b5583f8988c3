// Backends used only by the tests: each exercises one part of the contract.
#pragma once

#include <torch_delegate/torch_delegate.hpp>

#include <atomic>
#include <mutex>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/constant_pooling.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

namespace test_backends {

// -- typed overloads and typed options ---------------------------------------------------------
struct typed_options {
  torch_delegate::required<std::string> target;
  double scale = 1.0;
  std::int64_t repeat = 1;
  bool fast = false;
};

struct typed_handle {
  std::string method;
  typed_options options;
};

/// Records what compile received, to check that options survive save/load typed.
inline std::mutex compiled_mutex;
inline std::vector<typed_handle> compiled_log;

struct TypedBackend {
  static constexpr std::string_view name = "td_test_typed";
  using options = typed_options;

  static std::string preprocess(const torch_delegate::method_to_lower& method, const options&) { return method.name(); }

  static bool is_available() { return true; }
  static typed_handle compile(const std::string& payload, const options& options) {
    std::lock_guard<std::mutex> lock(compiled_mutex);
    compiled_log.push_back({payload, options});
    return {payload, options};
  }

  using execute_signatures = torch_delegate::signatures<
      at::Tensor(at::Tensor, at::Tensor), std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor, bool),
      std::tuple<at::Tensor>(at::Tensor), std::vector<at::Tensor>(at::Tensor, std::int64_t),
      double(at::Tensor, at::Tensor, at::Tensor), at::Tensor(at::Tensor, double, std::int64_t)>;
  // forward(x, h) = x + h, times the "scale" option
  static at::Tensor execute(typed_handle& h, const at::Tensor& x, const at::Tensor& y) { return (x + y) * h.options.scale; }
  // pair(x, h, swap) = (x + h, x - h), swapped if asked
  static std::tuple<at::Tensor, at::Tensor> execute(typed_handle&, const at::Tensor& x, const at::Tensor& y, bool swap) {
    return swap ? std::tuple{x - y, x + y} : std::tuple{x + y, x - y};
  }
  // single(x) = (x * 2,)
  static std::tuple<at::Tensor> execute(typed_handle&, const at::Tensor& x) { return {x * 2}; }
  // repeat(x, n) = [x] * n
  static std::vector<at::Tensor> execute(typed_handle&, const at::Tensor& x, std::int64_t n) {
    return std::vector<at::Tensor>(static_cast<std::size_t>(n), x);
  }
  // total(x, y, z) = float((x + y + z).sum())
  static double execute(typed_handle&, const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
    return (x + y + z).sum().item<double>();
  }
  // affine(x, alpha=2.0, *, beta=3) = x * alpha + beta
  static at::Tensor execute(typed_handle&, const at::Tensor& x, double alpha, std::int64_t beta) { return x * alpha + beta; }
};

// -- generic execute: a reference backend that runs the method's own graph -------------------
struct graph_handle {
  std::shared_ptr<torch::jit::GraphFunction> function;
};

struct GenericBackend {
  static constexpr std::string_view name = "td_test_generic";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    auto graph = method.graph()->copy();
    if (graph->inputs()[0]->hasUses()) method.reject(graph->inputs()[0]->node(), "uses self");
    graph->eraseInput(0);
    return graph->toString();
  }
  static bool is_available() { return true; }
  static graph_handle compile(const std::string& payload) {
    auto graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(payload, graph.get());
    return {std::make_shared<torch::jit::GraphFunction>("td_test_generic", graph, nullptr)};
  }
  static std::vector<c10::IValue> execute(graph_handle& handle, torch_delegate::inputs inputs) {
    torch::jit::Stack stack(inputs.begin(), inputs.end());
    handle.function->run(stack);
    if (stack.size() == 1 && stack[0].isTuple()) return stack[0].toTupleRef().elements().vec();
    return stack;
  }
};

/// Runs LibTorch passes on method.graph() in place (folding, dead code, inlining) before it
/// reads the graph, as backends do: freed nodes must not be read by the framework afterwards.
struct PassesInPlaceBackend : GenericBackend {
  static constexpr std::string_view name = "td_test_passes_in_place";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    std::shared_ptr<torch::jit::Graph> graph = method.graph();  // the same graph, changed in place
    torch::jit::Inline(*graph);
    torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
    torch::jit::ConstantPooling(graph);
    return GenericBackend::preprocess(method);
  }
};

/// Rejects every prim::GetAttr: a node without a source range.
struct NoAttributesBackend : GenericBackend {
  static constexpr std::string_view name = "td_test_no_attributes";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    for (const torch::jit::Node* node : method.graph()->nodes())
      if (node->kind() == c10::prim::GetAttr) method.reject(node, "Attributes are not supported.");
    return GenericBackend::preprocess(method);
  }
};

/// Reads its method's compile spec itself, whatever it is.
struct RawSpecBackend {
  static constexpr std::string_view name = "td_test_raw_spec";
  using options = torch_delegate::raw_options;
  static std::string preprocess(const torch_delegate::method_to_lower&, const options& spec) {
    return spec.value.isString() ? spec.value.toStringRef() : spec.value.type()->annotation_str();
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload, const options& spec) {
    return payload + "|" + (spec.value.isString() ? spec.value.toStringRef() : spec.value.type()->annotation_str());
  }
  static at::Tensor execute(std::string& seen, const at::Tensor& x) {
    return x + static_cast<double>(seen.size());
  }
};

/// Typed options that accept and ignore keys they do not declare, with a warning.
struct LenientBackend {
  static constexpr std::string_view name = "td_test_lenient";
  using options = typed_options;
  static constexpr bool ignore_unknown_options = true;
  static double preprocess(const torch_delegate::method_to_lower&, const options& options) { return options.scale; }
  static bool is_available() { return true; }
  static double compile(const double& scale) { return scale; }
  static at::Tensor execute(double& scale, const at::Tensor& x) { return x * scale; }
};

/// Returns one output too many: the framework must say so, not unpack garbage.
struct MiscountingBackend : GenericBackend {
  static constexpr std::string_view name = "td_test_miscounting";
  static std::vector<c10::IValue> execute(graph_handle& handle, torch_delegate::inputs inputs) {
    auto outputs = GenericBackend::execute(handle, inputs);
    outputs.push_back(outputs.front());
    return outputs;
  }
};

// -- availability under the test's control ---------------------------------------------------
inline std::atomic<bool> toggle_available{true};

struct ToggleBackend {
  static constexpr std::string_view name = "td_test_toggle";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return toggle_available.load(); }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return x + h; }
};

// -- two types, one name -----------------------------------------------------------------------
struct ClashFirst {
  static constexpr std::string_view name = "td_test_clash";
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor& h) { return x + h; }
};
struct ClashSecond : ClashFirst {};

// -- failures inside the backend ----------------------------------------------------------------
struct ThrowingBackend {
  static constexpr std::string_view name = "td_test_throwing";
  static std::string preprocess(const torch_delegate::method_to_lower& method) {
    if (method.name() == "bad_preprocess") throw std::runtime_error("preprocess exploded");
    return method.name();
  }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) {
    if (payload == "bad_compile") throw std::logic_error("compile exploded");
    return payload;
  }
  static at::Tensor execute(std::string&, const at::Tensor& x, const at::Tensor&) {
    throw std::out_of_range("execute exploded");
    return x;
  }
};

}  // namespace test_backends

BOOST_HANA_ADAPT_STRUCT(test_backends::typed_options, target, scale, repeat, fast);
