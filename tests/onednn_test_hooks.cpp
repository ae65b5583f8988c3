// libonednn_test_hooks.so: a test's hook into the onednn backend, kept out of the shipped library.
// Loaded after libonednn_backend.so, it hands the comma-separated kernel names of the environment
// variable TD_ONEDNN_TREAT_AS_REFERENCE to onednn_delegate::treat_as_reference, so that plans take
// those kernels for reference ones and walk their fallbacks (tests/python/test_onednn_isa.py).
// No LibTorch header: the one declaration it calls is repeated here (a mismatch fails to link).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace onednn_delegate {
void treat_as_reference(std::vector<std::string> kernels);
}

namespace {
const bool hooked = [] {
  std::vector<std::string> names;
  const char* given = std::getenv("TD_ONEDNN_TREAT_AS_REFERENCE");
  for (std::string_view rest = given ? given : ""; !rest.empty();) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    if (comma > 0) names.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  onednn_delegate::treat_as_reference(std::move(names));
  return true;
}();
}  // namespace
