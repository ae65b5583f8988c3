// compile-cost, upstream side: the add backend written the upstream way, registered (backend
// and preprocess), as a backend author's TU would be.
#include "upstream_add_backend.hpp"

[[maybe_unused]] static const bool registered = (bench::register_upstream(), true);
