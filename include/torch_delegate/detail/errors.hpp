// Error texts shared by every template: compiled once, named by backend and method.
#pragma once

#include <c10/util/Exception.h>

#include <string>
#include <string_view>

namespace torch_delegate::detail {

/// Where an error happened: every message starts with it.
struct error_context {
  std::string_view backend;
  std::string_view method;  // empty when the error is not about one method
};

inline std::string describe(const error_context& where) {
  std::string out = "torch-delegate: backend '";
  out.append(where.backend);
  out += "'";
  if (!where.method.empty()) {
    out += ", method '";
    out.append(where.method);
    out += "'";
  }
  return out;
}

/// Throws c10::Error (RuntimeError in Python) whose text is "<context>: <message>".
[[noreturn]] inline void fail(const error_context& where, std::string_view message) {
  std::string text = describe(where);
  text += ": ";
  text.append(message);
  throw c10::Error(text, "");
}

}  // namespace torch_delegate::detail
