// libpointwise_fusion.so: loading it registers the pointwise_fusion backend (runtime and
// preprocess), e.g. with torch.ops.load_library in Python.
#include "pointwise_backend.hpp"

#include <torch_delegate/torch_delegate.hpp>

TORCH_DELEGATE_REGISTER_BACKEND(pointwise::PointwiseBackend);
