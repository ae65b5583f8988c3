// A backend's is_available(): its library's own probe, unless an environment variable says to
// behave as on a machine without it (the fallback's tests set TD_<BACKEND>_UNAVAILABLE), and
// comma-separated lists read from the environment (test hooks such as TD_ONEDNN_TREAT_AS_REFERENCE).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate::toolkit {

/// Whether `variable` is set in the environment (to anything, even empty).
inline bool environment_has(const char* variable) { return std::getenv(variable) != nullptr; }

/// `probe()` unless `variable` is set. Call it once, into a function-local static (is_available
/// has no side effects after the first call, and the probe may be costly):
///
///   bool XnnpackBackend::is_available() {
///     static const bool available = toolkit::available_unless("TD_XNNPACK_UNAVAILABLE",
///         [] { return xnn_initialize(nullptr) == xnn_status_success; });
///     return available;
///   }
template <class Probe>
bool available_unless(const char* variable, Probe&& probe) {
  return !environment_has(variable) && static_cast<bool>(probe());
}

/// The non-empty comma-separated entries of `variable` ("a,b,,c" -> a, b, c); none when unset.
inline std::vector<std::string> environment_list(const char* variable) {
  std::vector<std::string> names;
  const char* given = std::getenv(variable);
  for (std::string_view rest = given ? given : ""; !rest.empty();) {
    const std::size_t comma = std::min(rest.find(','), rest.size());
    if (comma > 0) names.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return names;
}

}  // namespace torch_delegate::toolkit
