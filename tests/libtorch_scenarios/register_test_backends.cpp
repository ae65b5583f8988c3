// libtorch_delegate_test_backends.so: loading it registers "test_backend" and
// "test_backend_unavailable" (runtime and preprocess), as LibTorch's libjitbackend_test.so does.
#include "test_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

TORCH_DELEGATE_REGISTER_BACKEND(libtorch_scenarios::AvailableTestBackend);
TORCH_DELEGATE_REGISTER_BACKEND(libtorch_scenarios::UnavailableTestBackend);
