// libonednn_backend.so: loading it registers the onednn backend (runtime and preprocess), e.g.
// with torch.ops.load_library or torch_delegate.load_backend("onednn") in Python.
#include "onednn_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

TORCH_DELEGATE_REGISTER_BACKEND(onednn_delegate::OnednnBackend);
