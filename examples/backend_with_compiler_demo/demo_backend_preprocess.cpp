// The host side of backend_with_compiler_demo: graph -> instruction text. Only binaries that
// lower modules link this file; a runtime-only build does not need it.
#include "demo_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

#include <algorithm>
#include <unordered_map>

namespace demo {

// [preprocess]
std::string DemoBackend::preprocess(const torch_delegate::method_to_lower& method) {
  const auto& graph = *method.graph();
  std::unordered_map<const torch::jit::Value*, std::int64_t> slot_of;
  std::int64_t next_slot = 0;
  std::ostringstream text;
  // Graph inputs, `self` excepted, take the first slots.
  text << "inputs " << graph.inputs().size() - 1 << '\n';
  for (std::size_t i = 1; i < graph.inputs().size(); ++i) slot_of[graph.inputs()[i]] = next_slot++;

  auto slot = [&](const torch::jit::Value* value, const torch::jit::Node* user) {
    auto found = slot_of.find(value);
    if (found == slot_of.end())
      method.reject(user, "The input " + value->debugName() + " of " + std::string(user->kind().toQualString()) +
                              " is not computed by this compiler.");
    return found->second;
  };

  std::vector<const torch::jit::Value*> returned{graph.outputs().begin(), graph.outputs().end()};
  for (const torch::jit::Node* node : graph.nodes()) {
    const std::string kind = node->kind().toQualString();
    if (!supports(node)) method.reject(node, "The node of " + kind + " is not supported in this compiler.");
    if (node->kind() == c10::prim::Constant) {
      auto value = torch::jit::toIValue(node->output());
      if (!value || !(value->isDouble() || value->isInt())) continue;  // only numbers feed add/sub
      slot_of[node->output()] = next_slot;
      text << "const " << next_slot++ << ' ' << value->toScalar().toDouble() << '\n';
    } else if (node->kind() == c10::prim::TupleConstruct) {
      if (node->output() != graph.outputs()[0] || graph.outputs().size() != 1)
        method.reject(node, "The node of prim::TupleConstruct is only supported as the returned value.");
      returned.assign(node->inputs().begin(), node->inputs().end());
    } else {
      const char* op = node->kind() == c10::aten::add ? "add" : "sub";
      if (node->inputs().size() != 3)
        method.reject(node, "The node of " + kind + " is only supported with (self, other, alpha).");
      const std::int64_t a = slot(node->input(0), node), b = slot(node->input(1), node), alpha = slot(node->input(2), node);
      slot_of[node->output()] = next_slot;
      text << op << ' ' << next_slot++ << ' ' << a << ' ' << b << ' ' << alpha << ' ' << method.debug_handle(node) << '\n';
    }
  }
  text << "ret";
  for (const torch::jit::Value* value : returned) text << ' ' << slot(value, graph.return_node());
  text << '\n';
  return text.str();
}
// [preprocess]

}  // namespace demo
