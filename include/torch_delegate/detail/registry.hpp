// Which C++ type owns which backend name, process-wide. Not a template: compiled once.
#pragma once

#include <torch_delegate/detail/errors.hpp>

#include <mutex>
#include <string>
#include <typeindex>
#include <unordered_map>

namespace torch_delegate::detail {

/// The two halves a backend registers: the runtime (TorchBind class) and the host side
/// (LibTorch's preprocess registry).
enum class registration_part { runtime, preprocess };

struct registered_backend {
  std::type_index type;
  std::string type_name;
  bool runtime = false;
  bool preprocess = false;
};

inline std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

inline std::unordered_map<std::string, registered_backend>& registry() {
  static std::unordered_map<std::string, registered_backend> backends;
  return backends;
}

/// Claims `part` of backend `name` for `type`. Returns true when the caller must register it
/// now, false when this type already did (registering twice is harmless). Throws when another
/// type holds the name. Call with registry_mutex() held.
inline bool claim_backend_name(const std::string& name, std::type_index type, const std::string& type_name,
                               registration_part part) {
  auto [entry, inserted] = registry().try_emplace(name, registered_backend{type, type_name});
  registered_backend& owner = entry->second;
  if (!inserted && owner.type != type) {
    fail({name, {}}, "two different types register this backend name: '" + owner.type_name +
                         "' registered it first, '" + type_name +
                         "' tries again. Give each backend type its own name.");
  }
  bool& done = part == registration_part::runtime ? owner.runtime : owner.preprocess;
  if (done) return false;
  done = true;
  return true;
}

/// Undoes a claim whose registration threw, so that the error is reported again next time.
inline void release_backend_part(const std::string& name, registration_part part) {
  auto found = registry().find(name);
  if (found == registry().end()) return;
  (part == registration_part::runtime ? found->second.runtime : found->second.preprocess) = false;
  if (!found->second.runtime && !found->second.preprocess) registry().erase(found);
}

}  // namespace torch_delegate::detail
