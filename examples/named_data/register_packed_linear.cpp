// libpacked_linear.so: registers the packed_linear backend (both halves) when loaded, e.g. by
// torch.ops.load_library in Python, which can then lower to it with torch._C._jit_to_backend
// and load modules lowered to it.
#include "linear_backend.hpp"

TORCH_DELEGATE_REGISTER_BACKEND(packed_linear::LinearBackend);
