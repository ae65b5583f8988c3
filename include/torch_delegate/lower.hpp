// lower<B>(module, options): turn a scripted module's methods into a module that delegates them
// to backend B, in the structure LibTorch's own to_backend produces.
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/codegen.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/preprocess.hpp>
#include <torch_delegate/registration.hpp>

#include <torch/csrc/jit/backends/backend_debug_handler.h>

#include <map>

namespace torch_delegate {

/// Typed options per method to lower: {{"forward", {...}}, {"accum", {...}}}.
template <class B>
using method_options = std::map<std::string, options_t<B>>;

namespace detail {

/// How many generated class pairs lowering keeps for reuse, most recently used first. A process
/// that lowers many distinct module classes does not grow without bound; a lowered module keeps
/// its own classes alive, so eviction never affects a module that exists.
inline constexpr std::size_t lowered_types_cache_capacity = 64;

/// Lowers whole methods with a backend's lowering (lower<B> and the Python package): plan the
/// units, decode each unit's options once (unknown keys warned about here), preprocess, assemble.
TORCH_DELEGATE_DECL torch::jit::Module lower_methods(const backend_lowering& lowering, const torch::jit::Module& module,
                                                     const c10::impl::GenericDict& method_compile_spec,
                                                     bool fallback_when_unavailable, const input_specs* inputs = nullptr,
                                                     std::int64_t max_replans = 0);

template <class B>
lowered_module<B> lower_with(const torch::jit::Module& module, const c10::impl::GenericDict& method_compile_spec,
                             bool fallback_when_unavailable, const input_specs* inputs = nullptr) {
  register_backend<B>();
  return lowered_module<B>(lower_methods(record_of<B>, module, method_compile_spec, fallback_when_unavailable, inputs));
}

}  // namespace detail

/// Lowers `module`'s methods to B with an untyped method_compile_spec, exactly LibTorch's
/// format: {"forward": {"key": value, ...}, ...}. The original module is not modified.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const c10::impl::GenericDict& method_compile_spec) {
  return detail::lower_with<B>(module, method_compile_spec, /*fallback_when_unavailable=*/false);
}

/// Lowers `module`'s methods to B with typed options per method (default: "forward" with
/// default options). The original module is not modified.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const method_options<B>& options = {{"forward", {}}}) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, method_options] : options) spec.insert(method, encode_options(method_options));
  return lower<B>(module, spec);
}

/// Lowers with input specs: the dtype and shape of each method's tensor arguments (input_spec.hpp).
/// preprocess sees them as the types of the unit's graph inputs (complete when every size is
/// given) and, where TorchScript's shape analysis can tell, of the values computed from them; a call whose
/// tensors do not match fails before the backend runs. A method without an entry is unchecked.
template <class B>
lowered_module<B> lower(const torch::jit::Module& module, const method_options<B>& options, const input_specs& inputs) {
  c10::impl::GenericDict spec(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [method, method_options] : options) spec.insert(method, encode_options(method_options));
  return detail::lower_with<B>(module, spec, /*fallback_when_unavailable=*/false, &inputs);
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/lower.ipp>
#endif
