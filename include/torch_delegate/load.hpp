// Loading saved lowered modules with checks first: the file is what was saved (every record's
// CRC32, see detail/archive_check.hpp), and every backend a module delegates to must be
// registered, and must still have the execute signatures the module was lowered for. A missing
// one is an error that names it, instead of LibTorch's "unknown type" or "unknown builtin op"
// from deep inside the loader.
#pragma once

#include <torch_delegate/detail/archive_check.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/runtime_registration.hpp>

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

namespace torch_delegate {

/// How `load` and `check_loadable` treat the file.
struct load_options {
  /// Check the archive before anything reads it (check_archive): a file changed after it was
  /// saved, cut short or with a damaged zip structure is refused. Costs one read of the file
  /// (docs/deployment.md gives the figure); false skips it.
  bool verify = true;
};

/// Checks that a saved module's file is what was saved: every record's data against the CRC32
/// its zip archive stores for it, each record's local header and data descriptor against the
/// central directory, the central directory and its ZIP64 records against the file. Throws
/// c10::Error "torch-delegate: <path>: record '<name>' is damaged: ...; refusing to load it"
/// (or names the damaged structure). LibTorch 1.13's own reader checks none of this.
TORCH_DELEGATE_DECL void check_archive(const std::string& path);

/// The backends a saved module delegates to, read from its code without loading it.
TORCH_DELEGATE_DECL std::vector<std::string> backends_needed(const std::string& path);

/// The checks `load` makes before loading: the file is intact (check_archive, unless
/// options.verify is false), every backend the saved module delegates to is registered in this
/// process and still has the execute signatures the module was lowered for. An error names the
/// first that is missing (and says how to register a backend).
TORCH_DELEGATE_DECL void check_loadable(const std::string& path, const load_options& options = {});

/// Loads a saved module after checking that the file is intact (check_archive, unless
/// options.verify is false), that every backend it delegates to is registered in this process,
/// and that each still has the execute signatures the module was lowered for.
TORCH_DELEGATE_DECL torch::jit::Module load(const std::string& path, const load_options& options = {});

/// Loads a module lowered to B (registering B's runtime first) and adopts it.
template <class B>
lowered_module<B> load(const std::string& path, const load_options& options = {}) {
  register_runtime<B>();
  return lowered_module<B>(load(path, options));
}

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/load.ipp>
#endif
