// Loading saved lowered modules with checks first: every backend a module delegates to must be
// registered, and must still have the execute signatures the module was lowered for. A missing
// one is an error that names it, instead of LibTorch's "unknown type" or "unknown builtin op"
// from deep inside the loader.
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/runtime_registration.hpp>

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace torch_delegate {

/// The backends a saved module delegates to, read from its code without loading it.
TORCH_DELEGATE_DECL std::vector<std::string> backends_needed(const std::string& path);

/// The checks `load` makes before loading: every backend the saved module delegates to is
/// registered in this process and still has the execute signatures the module was lowered for.
/// An error names the first that is missing (and says how to register a backend).
TORCH_DELEGATE_DECL void check_loadable(const std::string& path);

/// Loads a saved module after checking that every backend it delegates to is registered in this
/// process, and that each still has the execute signatures the module was lowered for.
TORCH_DELEGATE_DECL torch::jit::Module load(const std::string& path);

/// Loads a module lowered to B (registering B's runtime first) and adopts it.
template <class B>
lowered_module<B> load(const std::string& path) {
  register_runtime<B>();
  return lowered_module<B>(load(path));
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/load.ipp>
#endif
