// Definitions for load.hpp.
#pragma once

#include <torch_delegate/load.hpp>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/custom_class_detail.h>

#include <algorithm>
#include <cctype>
#include <memory>

namespace torch_delegate {

namespace detail {

/// The TorchScript code records of a saved module, read without loading it.
inline std::vector<std::string> saved_code(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& error) {
    throw c10::Error("torch-delegate: cannot read '" + path + "' as a saved TorchScript module: " +
                         error.what_without_backtrace(), "");
  }
  std::vector<std::string> code;
  for (const std::string& record : reader->getAllRecords()) {
    if (record.size() < 3 || record.compare(record.size() - 3, 3, ".py") != 0) continue;
    auto [data, size] = reader->getRecord(record);
    code.emplace_back(static_cast<const char*>(data.get()), size);
  }
  return code;
}

/// Every distinct identifier that follows `marker` in `code`.
inline void names_after(const std::string& code, const std::string& marker, std::vector<std::string>& names) {
  for (std::size_t at = code.find(marker); at != std::string::npos; at = code.find(marker, at + 1)) {
    std::size_t end = at + marker.size();
    while (end < code.size() && (std::isalnum(static_cast<unsigned char>(code[end])) || code[end] == '_')) ++end;
    std::string name = code.substr(at + marker.size(), end - at - marker.size());
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
}

/// Fails, naming the signature, when the saved code calls an operator of `backend` that this
/// process does not have: the backend's build no longer has that execute signature.
inline void check_operators(const std::string& path, const std::string& backend, const std::vector<std::string>& code) {
  std::vector<std::string> called;
  for (const std::string& text : code) names_after(text, names::saved_operator_prefix() + names::operator_prefix(backend), called);
  for (const std::string& id : called) {
    const std::string name = std::string(operator_namespace) + "::" + operator_prefix(backend) + id;
    if (!torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name)).empty()) continue;
    const std::optional<std::string> signature = signature_of_identifier(id);
    std::string text = "incompatible payload: the module '" + path + "' was lowered for execute" +
                       signature.value_or("<" + id + ">") + ", which this build of the backend does not have; it has:";
    const std::string prefix = std::string(operator_namespace) + "::" + operator_prefix(backend);
    for (const auto& registered : torch::jit::getAllOperators()) {
      const std::string& other = registered->schema().name();
      if (other.rfind(prefix, 0) != 0) continue;
      if (auto known = signature_of_identifier(std::string_view(other).substr(prefix.size()))) text += "\n    execute" + *known;
    }
    text += "\nLower the model again with this build, or load it with a build whose execute signatures include it.";
    fail({backend, {}}, text);
  }
}

}  // namespace detail

TORCH_DELEGATE_DECL std::vector<std::string> backends_needed(const std::string& path) {
  std::vector<std::string> names;
  for (const std::string& code : detail::saved_code(path))
    detail::names_after(code, detail::names::backend_class_prefix(), names);
  return names;
}

TORCH_DELEGATE_DECL void check_archive(const std::string& path) { detail::check_archive_file(path); }

TORCH_DELEGATE_DECL void check_loadable(const std::string& path, const load_options& options) {
  if (options.verify) check_archive(path);
  const std::vector<std::string> code = detail::saved_code(path);
  std::vector<std::string> backends;
  for (const std::string& text : code)
    detail::names_after(text, detail::names::backend_class_prefix(), backends);
  for (const std::string& backend : backends) {
    if (!torch::getCustomClass(detail::names::backend_class(backend)))
      detail::fail({backend, {}}, "the module '" + path + "' delegates to this backend, which is not registered in this "
                                  "process. Register it before loading: load its library (torch.ops.load_library in "
                                  "Python, dlopen, or link it with -Wl,--no-as-needed), or call "
                                  "torch_delegate::register_runtime<YourBackend>() / TORCH_DELEGATE_REGISTER_RUNTIME.");
    detail::check_operators(path, backend, code);
  }
}

TORCH_DELEGATE_DECL torch::jit::Module load(const std::string& path, const load_options& options) {
  check_loadable(path, options);
  return torch::jit::load(path);
}


}  // namespace torch_delegate
