// Registering a backend with LibTorch: its runtime (runtime_registration.hpp: TorchBind classes
// and JIT operators, so that this process can load and run modules lowered to it) and its preprocess (LibTorch's registry,
// so that codegen_backend_module and Python's torch._C._jit_to_backend accept it). The templates
// here only check the backend and hand runtime_of<B> to the non-template registration.
#pragma once

#include <torch_delegate/detail/backend_check.hpp>
#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/preprocess.hpp>
#include <torch_delegate/runtime_registration.hpp>

#include <typeinfo>

namespace torch_delegate {

namespace detail {

/// The preprocess function LibTorch's registry takes.
using libtorch_preprocess = c10::IValue (*)(const torch::jit::Module& module, const c10::Dict<c10::IValue, c10::IValue>& spec,
                                            const torch::jit::BackendDebugHandleGenerator& generate_debug_handles);

/// Registers a backend's preprocess in LibTorch's registry and publishes its lowering (for the
/// Python package), once per backend type; another type (or a non-torch-delegate backend) with
/// the same name is an error.
TORCH_DELEGATE_DECL void register_preprocess(const backend_lowering& lowering, const std::type_info& type,
                                             libtorch_preprocess preprocess);

}  // namespace detail

/// Registers both halves of `B`: its runtime and its preprocess. Idempotent. `lower<B>` calls
/// it; a backend's shared library calls it once with TORCH_DELEGATE_REGISTER_BACKEND.
template <class B>
void register_backend() {
  static_assert(detail::check_host_backend<B>());
  if constexpr (HostBackend<B>) {
    register_runtime<B>();
    detail::register_preprocess(detail::record_of<B>, typeid(B), &detail::preprocess_for_libtorch<B>);
  }
}

}  // namespace torch_delegate

/// Registers a backend (runtime and preprocess) when its library is loaded: put it in one .cpp
/// of the backend's shared library, e.g. TORCH_DELEGATE_REGISTER_BACKEND(DemoBackend);
#define TORCH_DELEGATE_REGISTER_BACKEND(Backend)                                                  \
  [[maybe_unused]] static const bool TORCH_DELEGATE_CONCAT(torch_delegate_registered_, __COUNTER__) = \
      (::torch_delegate::register_backend<Backend>(), true)

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/registration.ipp>
#endif
