// libtorch_delegate_test_backends.so: loading it registers "test_backend" and
// "test_backend_unavailable" (runtime and preprocess), as LibTorch's libjitbackend_test.so does.
// The Python package's tests (tests/python/test_package.py) use two more: "td_test_typed"
// (typed options of four types, one required) and "td_test_pluggable_demo" (the demo backend,
// partial lowering included, unavailable when TD_TEST_UNPLUGGED is set: a device that is absent).
#include "test_backend.hpp"
#include "../backends.hpp"

#include <backend_with_compiler_demo/demo_backend.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <cstdlib>

namespace python_tests {
struct PluggableDemo : demo::DemoBackend {
  static constexpr std::string_view name = "td_test_pluggable_demo";
  static bool is_available() { return std::getenv("TD_TEST_UNPLUGGED") == nullptr; }
};
}  // namespace python_tests

TORCH_DELEGATE_REGISTER_BACKEND(libtorch_scenarios::AvailableTestBackend);
TORCH_DELEGATE_REGISTER_BACKEND(libtorch_scenarios::UnavailableTestBackend);
TORCH_DELEGATE_REGISTER_BACKEND(test_backends::TypedBackend);
TORCH_DELEGATE_REGISTER_BACKEND(python_tests::PluggableDemo);
