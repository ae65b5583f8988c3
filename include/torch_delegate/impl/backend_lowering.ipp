// Definitions for detail/backend_lowering.hpp: publishing and finding backend lowerings.
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>

#include <c10/util/Type.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <string>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL void publish_lowering(const backend_lowering& lowering) {
  const std::string name(lowering.name());
  for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(names::lowering_operator())))
    if (op->schema().overload_name() == name) return;
  const auto address = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&lowering));
  // The operator only hands out the entry's address; it has no effect on tensors.
  std::vector<c10::optional<torch::jit::Operator>> operators;
  operators.emplace_back(torch::jit::Operator(names::lowering_operator() + "." + name + "() -> int",
                                              [address](torch::jit::Stack& stack) { torch::jit::push(stack, address); },
                                              c10::AliasAnalysisKind::CONSERVATIVE));
  torch::jit::RegisterOperators registered(std::move(operators));
}

inline const backend_lowering* read_lowering(const torch::jit::Operator& op) {
  torch::jit::Stack stack;
  op.getOperation()(stack);
  const auto* lowering = reinterpret_cast<const backend_lowering*>(static_cast<std::uintptr_t>(stack.back().toInt()));
  const std::uint32_t abi = *reinterpret_cast<const std::uint32_t*>(lowering);  // the first member in every layout
  if (abi != backend_lowering_abi)
    fail({op.schema().overload_name(), {}},
         "this backend's library was built with torch-delegate's backend_lowering layout " + std::to_string(abi) +
             ", this build reads layout " + std::to_string(backend_lowering_abi) +
             ". Rebuild the backend's library against this version of torch-delegate.");
  return lowering;
}

TORCH_DELEGATE_DECL const backend_lowering* find_lowering(std::string_view name) {
  for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(names::lowering_operator())))
    if (op->schema().overload_name() == name) return read_lowering(*op);
  return nullptr;
}

TORCH_DELEGATE_DECL std::vector<const backend_lowering*> published_lowerings() {
  std::vector<const backend_lowering*> found;
  for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(names::lowering_operator())))
    found.push_back(read_lowering(*op));
  std::sort(found.begin(), found.end(), [](const backend_lowering* a, const backend_lowering* b) { return a->name() < b->name(); });
  return found;
}

TORCH_DELEGATE_DECL const backend_lowering& lowering_named(std::string_view name, std::string_view who) {
  if (const backend_lowering* found = find_lowering(name)) return *found;
  const std::string registered =
      comma_separated(published_lowerings(), [](const backend_lowering* lowering) { return std::string(lowering->name()); });
  throw c10::Error(std::string(who) + ": no torch-delegate backend named '" + std::string(name) +
                       "' is registered in this process (registered: " + (registered.empty() ? "none" : registered) +
                       "). Load the backend's library first, e.g. torch.ops.load_library(\"libmy_backend.so\") in "
                       "Python, or register it in C++ with TORCH_DELEGATE_REGISTER_BACKEND.",
                   "");
}

TORCH_DELEGATE_INTERNAL std::string names_of(const backend_list& backends) {
  return comma_separated(backends, [](const backend_lowering* backend) { return std::string(backend->name()); });
}

TORCH_DELEGATE_DECL lowering_plan plan_request(const backend_lowering& lowering, const torch::jit::Module& module,
                                               const c10::impl::GenericDict& method_compile_spec,
                                               bool fallback_when_unavailable, const input_specs* inputs) {
  lowering_plan plan = plan_lowering(lowering.name(), lowering.signatures(), module, method_compile_spec);
  if (plan.units.empty()) fail({lowering.name(), {}}, "no method to lower: the method_compile_spec is empty");
  plan.fallback_when_unavailable = fallback_when_unavailable;
  if (inputs) apply_input_specs(plan, *inputs);
  for (delegate_unit& unit : plan.units) unit.options = lowering.decode_options(unit.spec, unit.where(lowering.name()));
  return plan;
}

}  // namespace torch_delegate::detail
