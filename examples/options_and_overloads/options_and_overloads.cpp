// A backend with typed options and two typed execute overloads, lowering two methods of
// different signatures, one returning a tuple. It runs each method's own (optimised) graph:
// a "reference" backend, the kind a hardware team writes first to check its lowering.
#include <torch_delegate/torch_delegate.hpp>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/script.h>

#include <iostream>

// [options]
struct reference_options {
  torch_delegate::required<std::string> device;  // must be given: "cpu" is the only one here
  bool optimize = true;                          // constant-fold and prune the graph in preprocess
  std::int64_t max_nodes = 256;                  // reject methods larger than this
};
BOOST_HANA_ADAPT_STRUCT(reference_options, device, optimize, max_nodes);
// [options]

struct compiled_graph {
  std::shared_ptr<torch::jit::GraphFunction> function;
  std::string device;
};

// [backend]
struct ReferenceBackend {
  static constexpr std::string_view name = "reference_interpreter";
  using options = reference_options;

  static std::string preprocess(const torch_delegate::method_to_lower& method, const options& options) {
    auto graph = method.graph()->copy();
    if (options.optimize) {
      torch::jit::ConstantPropagation(graph);
      torch::jit::EliminateDeadCode(graph);
    }
    if (graph->inputs()[0]->hasUses()) method.reject(graph->inputs()[0]->uses()[0].user, "Attributes are not supported.");
    graph->eraseInput(0);  // self
    const auto nodes = std::distance(graph->nodes().begin(), graph->nodes().end());
    if (nodes > options.max_nodes)
      throw std::invalid_argument(std::to_string(nodes) + " nodes, more than max_nodes=" + std::to_string(options.max_nodes));
    return graph->toString();
  }

  static bool is_available() { return true; }

  static compiled_graph compile(const std::string& payload, const options& options) {
    if (options.device.value() != "cpu") throw std::invalid_argument("device '" + options.device.value() + "' is not present");
    auto graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(payload, graph.get());
    return {std::make_shared<torch::jit::GraphFunction>("reference", graph, nullptr), options.device.value()};
  }

  // One overload per signature; the list tells torch-delegate which ones exist.
  using execute_signatures = torch_delegate::signatures<std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor),
                                                        at::Tensor(at::Tensor, double)>;

  static std::tuple<at::Tensor, at::Tensor> execute(compiled_graph& graph, const at::Tensor& x, const at::Tensor& y) {
    auto outputs = run(graph, {x, y}).toTupleRef().elements();
    return {outputs[0].toTensor(), outputs[1].toTensor()};
  }
  static at::Tensor execute(compiled_graph& graph, const at::Tensor& x, double factor) {
    return run(graph, {x, factor}).toTensor();
  }

 private:
  static c10::IValue run(compiled_graph& graph, torch::jit::Stack stack) {
    graph.function->run(stack);
    return stack.at(0);
  }
};
// [backend]

int main() {
  torch::jit::Module module("Model");
  module.define(R"(
    def forward(self, x, y):
        return x + y * 2, x - y

    def scale(self, x, factor: float):
        return x * factor * (1.0 + 1.0)
  )");

  // [lower]
  torch_delegate::method_options<ReferenceBackend> options;
  options["forward"].device = std::string("cpu");
  options["scale"].device = std::string("cpu");
  options["scale"].optimize = false;
  auto lowered = torch_delegate::lower<ReferenceBackend>(module, options);
  // [lower]

  const at::Tensor x = torch::rand({3}), y = torch::rand({3});
  // [call]
  auto forward = lowered.method<std::tuple<at::Tensor, at::Tensor>(at::Tensor, at::Tensor)>("forward");
  auto [sum, difference] = forward(x, y);
  at::Tensor scaled = lowered.module().run_method("scale", x, 0.5).toTensor();
  // [call]

  const auto expected = module.forward({x, y}).toTupleRef().elements();
  bool ok = sum.allclose(expected[0].toTensor()) && difference.allclose(expected[1].toTensor()) &&
            scaled.allclose(module.run_method("scale", x, 0.5).toTensor());

  // The options are in LibTorch's method_compile_spec, typed again on load.
  const auto spec = lowered.module().attr("__loweredModule__").toModule().attr("__method_compile_spec").toGenericDict();
  std::cout << "method_compile_spec of scale: " << spec.at("scale") << "\n";
  ok = ok && spec.at("scale").toGenericDict().at("optimize").toBool() == false;

  // A bad option is reported with backend, method and key.
  torch_delegate::method_options<ReferenceBackend> wrong;
  wrong["forward"].device = std::string("npu");
  try {
    torch_delegate::lower<ReferenceBackend>(module, wrong);
    ok = false;
  } catch (const c10::Error& error) {
    std::cout << "as expected: " << error.what_without_backtrace() << "\n";
  }
  // A method whose signature has no execute overload is refused when lowering; the error shows
  // the method's schema and every signature (docs/lowering.md shows this section of the output).
  torch::jit::Module with_string("WithString");
  with_string.define("def forward(self, x, s: str):\n    return x\n");
  torch_delegate::method_options<ReferenceBackend> on_cpu;
  on_cpu["forward"].device = std::string("cpu");
  std::cout << "--- output: no-matching-signature ---\n";
  try {
    torch_delegate::lower<ReferenceBackend>(with_string, on_cpu);
    ok = false;
  } catch (const c10::Error& error) {
    std::cout << error.what_without_backtrace() << "\n";
  }
  std::cout << "--- end output ---\n";
  std::cout << (ok ? "options_and_overloads: outputs match the original module" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
