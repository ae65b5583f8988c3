// compile-cost, torch-delegate side: the same add backend written with torch-delegate,
// registered (runtime and preprocess).
#include "our_add_backend.hpp"

TORCH_DELEGATE_REGISTER_BACKEND(bench::OurAddBackend);
