// Small helpers shared by the test TUs.
#pragma once

#include <torch/script.h>
#include <torch_delegate/report.hpp>
#include <torch_delegate/torch_delegate.hpp>
// After LibTorch: doctest's CHECK must win over glog's (a TU built without the precompiled
// header, e.g. tools/sanitize tsan, sees this order).
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

namespace test_helpers {

/// `forward(x, h) = x + h`, the method most tests lower.
inline constexpr const char* forward_source = "def forward(self, x, h):\n    return x + h\n";

/// A scripted module with the given TorchScript source.
inline torch::jit::Module script(const std::string& source, const std::string& name = "m") {
  torch::jit::Module module(name);
  module.define(source);
  return module;
}

/// A path in the build's test directory, unique per test.
inline std::string temp_path(const std::string& file) {
  return (std::filesystem::temp_directory_path() / ("torch_delegate_test_" + std::to_string(::getpid()) + "_" + file))
      .string();
}

/// The message of the exception `f` throws; fails the test when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

/// Collects LibTorch warnings (TORCH_WARN) raised while alive.
struct warning_capture : c10::WarningHandler {
  std::vector<std::string> messages;
  c10::WarningHandler* previous = c10::Warning::get_warning_handler();
  warning_capture() { c10::Warning::set_warning_handler(this); }
  ~warning_capture() override { c10::Warning::set_warning_handler(previous); }
  warning_capture(const warning_capture&) = delete;
  warning_capture& operator=(const warning_capture&) = delete;
  void process(const c10::SourceLocation&, const std::string& message, bool) override { messages.push_back(message); }
  std::string all() const {
    std::string text;
    for (const std::string& message : messages) text += message + "\n";
    return text;
  }
};

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace test_helpers

#define CHECK_CONTAINS(text, part)                                       \
  do {                                                                   \
    const std::string td_text_ = (text);                                 \
    INFO("text: ", td_text_);                                            \
    CHECK(test_helpers::contains(td_text_, (part)));                     \
  } while (0)

namespace torch_delegate {
/// "backend: reason (detail)": how a failed CHECK on per-backend reasons prints them (found by
/// argument-dependent lookup; glog prints a std::vector of them with it).
inline std::ostream& operator<<(std::ostream& out, const backend_reason& each) {
  return out << each.backend << ": " << to_string(each.reason) << " (" << each.detail << ")";
}
}  // namespace torch_delegate
