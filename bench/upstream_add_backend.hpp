// The benchmark's whole-tensor add backend written the upstream way: PyTorchBackendInterface,
// torch::jit::backend<T>, backend_preprocess_register, lowered with codegen_backend_module.
// Includes only LibTorch, so that compile_cost_upstream_add.cpp measures upstream alone.
#pragma once

#include <torch/csrc/jit/backends/backend.h>
#include <torch/csrc/jit/backends/backend_detail.h>
#include <torch/csrc/jit/backends/backend_preprocess.h>
#include <torch/script.h>

namespace bench {

// -- upstream ------------------------------------------------------------------------------------
class UpstreamAddBackend : public torch::jit::PyTorchBackendInterface {
 public:
  bool is_available() override { return true; }
  c10::impl::GenericDict compile(c10::IValue processed, c10::impl::GenericDict spec) override {
    c10::impl::GenericDict handles(c10::StringType::get(), c10::AnyType::get());
    for (const auto& entry : spec) handles.insert(entry.key(), processed);
    return handles;
  }
  c10::impl::GenericList execute(c10::IValue, c10::impl::GenericList inputs) override {
    c10::impl::GenericList outputs(c10::AnyType::get());
    outputs.push_back(at::add(inputs.get(0).toTensor(), inputs.get(1).toTensor()));
    return outputs;
  }
};

inline c10::IValue upstream_preprocess(const torch::jit::Module&, const c10::Dict<c10::IValue, c10::IValue>&,
                                       const torch::jit::BackendDebugHandleGenerator&) {
  return std::string("add");
}

inline void register_upstream() {
  static auto backend = torch::jit::backend<UpstreamAddBackend>("bench_upstream_add");
  static auto preprocess = torch::jit::backend_preprocess_register("bench_upstream_add", upstream_preprocess);
}

inline torch::jit::Module lower_upstream(const torch::jit::Module& module) {
  register_upstream();
  c10::Dict<c10::IValue, c10::IValue> spec(c10::StringType::get(), c10::AnyType::get());
  spec.insert("forward", c10::Dict<c10::IValue, c10::IValue>(c10::StringType::get(), c10::AnyType::get()));
  return torch::jit::detail::codegen_backend_module("bench_upstream_add", module, spec,
                                                    c10::DictType::create(c10::StringType::get(), c10::AnyType::get()));
}

}  // namespace bench
