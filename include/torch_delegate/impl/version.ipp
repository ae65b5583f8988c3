#pragma once

#include <torch_delegate/version.hpp>

namespace torch_delegate {

TORCH_DELEGATE_DECL const char* library_version() noexcept { return TORCH_DELEGATE_VERSION; }

}  // namespace torch_delegate
