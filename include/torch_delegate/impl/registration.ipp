// Definitions for registration.hpp.
#pragma once

#include <torch_delegate/registration.hpp>
#include <torch_delegate/detail/registry.hpp>

#include <c10/util/Type.h>
#include <torch/csrc/jit/backends/backend_detail.h>

#include <mutex>
#include <typeindex>

namespace torch_delegate::detail {

TORCH_DELEGATE_DECL void register_preprocess(const backend_lowering& lowering, const std::type_info& type,
                                             libtorch_preprocess preprocess) {
  const std::string name(lowering.name());
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!claim_backend_name(name, std::type_index(type), c10::demangle(type.name()), registration_part::preprocess)) return;
  try {
    torch::jit::detail::registerBackendPreprocessFunction(name, preprocess);
  } catch (const c10::Error&) {
    release_backend_part(name, registration_part::preprocess);
    fail({name, {}}, "a preprocess function for this name is already registered with LibTorch by a "
                     "backend that is not this torch-delegate type.");
  }
  publish_lowering(lowering);
}

}  // namespace torch_delegate::detail
