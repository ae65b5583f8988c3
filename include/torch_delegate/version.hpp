// torch-delegate's version: the one this header is (TORCH_DELEGATE_VERSION) and the one a
// separately compiled libtorch_delegate was built as (library_version()). A program built against
// one version's headers and run with another's library is told so instead of failing obscurely;
// the Python package's extension checks it when imported.
#pragma once

#include <torch_delegate/detail/config.hpp>

/// "major.minor.patch"; meson.build's project version is the same (a source test checks it).
#define TORCH_DELEGATE_VERSION "0.1.0"

namespace torch_delegate {

/// The version of the torch-delegate machinery in use: TORCH_DELEGATE_VERSION header-only, the
/// library's own with separate compilation (then compare it with TORCH_DELEGATE_VERSION).
TORCH_DELEGATE_DECL const char* library_version() noexcept;

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/version.ipp>
#endif
