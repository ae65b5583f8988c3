// Registering a backend's runtime with LibTorch (its TorchBind class and JIT operators), so that
// this process can load and run modules lowered to it: what a runtime-only binary needs
// (runtime.hpp). Registering the host half too (LibTorch's preprocess registry) is
// registration.hpp's.
#pragma once

#include <torch_delegate/detail/backend_check.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/invoker.hpp>
#include <torch_delegate/detail/runtime_objects.hpp>
#include <torch_delegate/options.hpp>

#include <typeinfo>

namespace torch_delegate {

/// Inside `compile`: the payload version of the payload being compiled; 0 outside compile.
/// Deprecated: take a `const torch_delegate::compile_context&` as compile's last parameter.
[[deprecated("take a 'const torch_delegate::compile_context&' as compile's last parameter")]]
inline std::int64_t payload_version_being_compiled() { return detail::compiling_payload_version; }

/// Registers the runtime of `B` (its TorchBind class `__torch__.torch.classes.__backends__.<name>`)
/// so that this process can load and run modules lowered to it. Idempotent.
template <class B>
void register_runtime() {
  static_assert(detail::check_backend<B>());
  // Only a Backend instantiates the runtime: a failed check above stays the only diagnostic
  // instead of starting a cascade of errors from the code that would use the missing member.
  if constexpr (Backend<B>) {
    static_assert(detail::require_convertible<payload_t<B>>());
    static_assert(detail::check_options<options_t<B>>());
    detail::register_runtime(detail::runtime_of<B>::value, typeid(B));
  }
}

}  // namespace torch_delegate

#define TORCH_DELEGATE_CONCAT_IMPL(a, b) a##b
#define TORCH_DELEGATE_CONCAT(a, b) TORCH_DELEGATE_CONCAT_IMPL(a, b)

/// Registers the runtime of a backend when its library is loaded: use it in exactly one .cpp
/// of a runtime-only build (one that loads modules preprocessed elsewhere).
#define TORCH_DELEGATE_REGISTER_RUNTIME(Backend)                                                  \
  [[maybe_unused]] static const bool TORCH_DELEGATE_CONCAT(torch_delegate_registered_, __COUNTER__) = \
      (::torch_delegate::register_runtime<Backend>(), true)
