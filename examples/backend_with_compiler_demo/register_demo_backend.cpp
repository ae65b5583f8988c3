// libbackend_with_compiler_demo.so: loading it registers the demo backend (runtime and
// preprocess), e.g. with torch.ops.load_library in Python.
#include "demo_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

TORCH_DELEGATE_REGISTER_BACKEND(demo::DemoBackend);
