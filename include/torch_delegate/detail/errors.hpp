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

/// "a, b, c": the elements of `range`, each made a string by `text` (default: as they are),
/// joined with ", ". The one join the error texts use.
template <class Range, class Text>
std::string comma_separated(const Range& range, Text text) {
  std::string joined;
  for (const auto& element : range) {
    if (!joined.empty()) joined += ", ";
    joined += text(element);
  }
  return joined;
}
template <class Range>
std::string comma_separated(const Range& range) {
  return comma_separated(range, [](const auto& element) { return std::string(element); });
}

}  // namespace torch_delegate::detail
