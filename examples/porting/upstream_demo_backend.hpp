// backend_with_compiler_demo written the upstream way: a PyTorchBackendInterface subclass, a
// preprocess function over untyped dicts, registered with torch::jit::backend<T> and
// backend_preprocess_register. It shares the instruction format and kernels with the
// torch-delegate version (demo_backend_runtime.hpp), so that docs/porting.md compares only
// what each framework asks the author to write, and bench/ compares equal work.
#pragma once

#include <backend_with_compiler_demo/demo_backend.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/backends/backend.h>
#include <torch/csrc/jit/backends/backend_preprocess.h>
#include <torch/csrc/jit/passes/inliner.h>

namespace upstream_demo {

// [upstream]
// Handles must travel inside IValues: wrap the program in a CustomClassHolder capsule.
struct program_holder : torch::CustomClassHolder {
  explicit program_holder(demo::program p) : program(std::move(p)) {}
  demo::program program;
};

class UpstreamDemoBackend : public torch::jit::PyTorchBackendInterface {
 public:
  bool is_available() override { return true; }

  c10::impl::GenericDict compile(c10::IValue processed, c10::impl::GenericDict method_compile_spec) override {
    auto payloads = processed.toGenericDict();
    c10::impl::GenericDict handles(c10::StringType::get(), c10::AnyType::get());
    for (const auto& entry : method_compile_spec) {
      const std::string& method = entry.key().toStringRef();
      TORCH_CHECK(payloads.contains(method), "no payload for method ", method);
      auto program = demo::DemoBackend::compile(payloads.at(method).toStringRef());
      handles.insert(method, c10::IValue::make_capsule(c10::make_intrusive<program_holder>(std::move(program))));
    }
    return handles;
  }

  c10::impl::GenericList execute(c10::IValue handle, c10::impl::GenericList inputs) override {
    TORCH_CHECK(handle.isCapsule(), "handle is not a compiled program");
    auto* holder = static_cast<program_holder*>(handle.toCapsule().get());
    std::vector<c10::IValue> arguments(inputs.begin(), inputs.end());
    c10::impl::GenericList outputs(c10::AnyType::get());
    for (auto& output : demo::DemoBackend::execute(holder->program, arguments)) outputs.push_back(std::move(output));
    return outputs;
  }
};

inline c10::IValue preprocess(const torch::jit::Module& module, const c10::Dict<c10::IValue, c10::IValue>& spec,
                              const torch::jit::BackendDebugHandleGenerator& generate_debug_handles) {
  c10::impl::GenericDict payloads(c10::StringType::get(), c10::AnyType::get());
  for (const auto& entry : spec) {
    const std::string& name = entry.key().toStringRef();
    auto graph = torch::jit::toGraphFunction(module.get_method(name).function()).graph()->copy();
    torch::jit::Inline(*graph);
    auto handles = generate_debug_handles(graph);
    std::unordered_map<const torch::jit::Value*, std::int64_t> slot_of;
    std::int64_t next_slot = 0;
    std::ostringstream text;
    text << "inputs " << graph->inputs().size() - 1 << '\n';
    for (std::size_t i = 1; i < graph->inputs().size(); ++i) slot_of[graph->inputs()[i]] = next_slot++;
    std::vector<const torch::jit::Value*> returned{graph->outputs().begin(), graph->outputs().end()};
    for (torch::jit::Node* node : graph->nodes()) {
      if (node->kind() == c10::prim::Constant) {
        auto value = torch::jit::toIValue(node->output());
        if (!value || !(value->isDouble() || value->isInt())) continue;
        slot_of[node->output()] = next_slot;
        text << "const " << next_slot++ << ' ' << value->toScalar().toDouble() << '\n';
      } else if (node->kind() == c10::prim::TupleConstruct && node->output() == graph->outputs()[0]) {
        returned.assign(node->inputs().begin(), node->inputs().end());
      } else if ((node->kind() == c10::aten::add || node->kind() == c10::aten::sub) && node->inputs().size() == 3) {
        std::ostringstream operands;
        for (const torch::jit::Value* input : node->inputs()) {
          TORCH_CHECK(slot_of.count(input), "input ", input->debugName(), " is not computed by this compiler");
          operands << ' ' << slot_of[input];
        }
        slot_of[node->output()] = next_slot;
        text << (node->kind() == c10::aten::add ? "add " : "sub ") << next_slot++ << operands.str() << ' '
             << handles.at(node) << '\n';
      } else {
        std::ostringstream where;
        node->sourceRange().highlight(where);
        TORCH_CHECK(false, "The node of ", node->kind().toQualString(), " is not supported in this compiler.\n",
                    where.str());
      }
    }
    text << "ret";
    for (const torch::jit::Value* value : returned) text << ' ' << slot_of.at(value);
    text << '\n';
    payloads.insert(name, text.str());
  }
  return payloads;
}

// Registration: one static per name, in exactly one translation unit.
inline const auto backend_registration = torch::jit::backend<UpstreamDemoBackend>("upstream_demo");
inline const auto preprocess_registration = torch::jit::backend_preprocess_register("upstream_demo", preprocess);

// Lowering goes through LibTorch's string code generator.
inline torch::jit::Module lower(const torch::jit::Module& module, const std::vector<std::string>& methods) {
  c10::Dict<c10::IValue, c10::IValue> spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& method : methods) {
    c10::Dict<c10::IValue, c10::IValue> options(c10::StringType::get(), c10::AnyType::get());
    spec.insert(method, options);
  }
  return torch::jit::detail::codegen_backend_module(
      "upstream_demo", module, spec, c10::DictType::create(c10::StringType::get(), c10::AnyType::get()));
}
// [upstream]

}  // namespace upstream_demo
