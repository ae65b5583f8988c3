// Definitions for detail/signature.hpp (header-only mode includes this; the compiled library
// compiles it once).
#pragma once

#include <torch_delegate/detail/signature.hpp>

#include <torch/csrc/jit/frontend/script_type_parser.h>

#include <algorithm>
#include <cctype>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL std::string schema_without_self(const c10::FunctionSchema& schema) {
  std::string text = schema.name() + "(";
  const auto& arguments = schema.arguments();
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    if (i > 1) text += ", ";
    text += arguments[i].type()->annotation_str() + " " + arguments[i].name();
  }
  text += ") -> " + (schema.returns().empty() ? std::string("None") : schema.returns()[0].type()->annotation_str());
  return text;
}

TORCH_DELEGATE_INTERNAL bool signature_matches(const signature_record& signature, const c10::FunctionSchema& schema) {
  const auto& arguments = schema.arguments();
  if (arguments.size() != signature.arguments.size() + 1 || schema.returns().size() != 1) return false;
  for (std::size_t i = 0; i < signature.arguments.size(); ++i)
    if (arguments[i + 1].type()->annotation_str() != signature.arguments[i]) return false;
  return schema.returns()[0].type()->annotation_str() == signature.result;
}

TORCH_DELEGATE_INTERNAL const signature_record& select_signature(std::span<const signature_record> signatures,
                                                             const c10::FunctionSchema& schema, const error_context& where) {
  for (const signature_record& signature : signatures)
    if (!signature.generic && signature_matches(signature, schema)) return signature;
  for (const signature_record& signature : signatures)
    if (signature.generic) return signature;
  std::string text = "no execute signature matches the method.\n  method:    " + schema_without_self(schema) +
                     "\n  available:";
  for (const signature_record& signature : signatures) text += "\n    execute" + std::string(signature.text);
  if (signatures.empty()) text += " (none)";
  text += "\nAdd an execute overload with these types, or a generic "
          "'std::vector<c10::IValue> execute(Handle&, torch_delegate::inputs)'.";
  fail(where, text);
}

TORCH_DELEGATE_INTERNAL const signature_record& find_signature(std::span<const signature_record> signatures,
                                                           std::string_view text, const error_context& where) {
  for (const signature_record& signature : signatures)
    if (signature.text == text) return signature;
  std::string message = "the payload was preprocessed for execute" + std::string(text) +
                        ", which this build of the backend does not have; available:";
  for (const signature_record& signature : signatures) message += "\n    execute" + std::string(signature.text);
  fail(where, message);
}

TORCH_DELEGATE_DECL std::string identifier_of_signature(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto* spelled = std::find_if(std::begin(signature_spellings), std::end(signature_spellings),
                                       [&](const signature_spelling& s) { return text.substr(i, s.text.size()) == s.text; });
    if (spelled != std::end(signature_spellings)) {
      out += '_';
      out += spelled->code;
      i += spelled->text.size();
      continue;
    }
    const auto c = static_cast<unsigned char>(text[i++]);
    if (std::isalnum(c)) {
      out += static_cast<char>(c);
    } else {
      out += "_x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

TORCH_DELEGATE_DECL std::optional<std::string> signature_of_identifier(std::string_view id) {
  auto digit = [](char h) { return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1; };
  std::string out;
  for (std::size_t i = 0; i < id.size(); ++i) {
    if (id[i] != '_') {
      out += id[i];
      continue;
    }
    if (++i >= id.size()) return std::nullopt;
    if (id[i] == 'x') {
      if (i + 2 >= id.size()) return std::nullopt;
      const int high = digit(id[i + 1]), low = digit(id[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      out += static_cast<char>(high * 16 + low);
      i += 2;
      continue;
    }
    const auto* spelled = std::find_if(std::begin(signature_spellings), std::end(signature_spellings),
                                       [&](const signature_spelling& s) { return s.code == id[i]; });
    if (spelled == std::end(signature_spellings)) return std::nullopt;
    out += spelled->text;
  }
  return out;
}

TORCH_DELEGATE_DECL std::string operator_schema(const std::string& name, const signature_record& signature) {
  torch::jit::ScriptTypeParser parser;
  std::string schema = name + "(Any handle";
  for (std::size_t i = 0; i < signature.arguments.size(); ++i)
    schema += ", " + parser.parseType(std::string(signature.arguments[i]))->str() + " a" + std::to_string(i);
  return schema + ") -> " + parser.parseType(std::string(signature.result))->str();
}

}  // namespace torch_delegate::detail
