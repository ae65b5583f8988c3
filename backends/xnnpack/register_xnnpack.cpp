// libxnnpack_backend.so: loading it registers the xnnpack backend (runtime and preprocess), e.g.
// with torch.ops.load_library in Python.
#include "xnnpack_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

TORCH_DELEGATE_REGISTER_BACKEND(xnnpack_delegate::XnnpackBackend);
