// The identity of an execute signature: its record (constant data built from a C++ function
// type), how a method's schema selects one, and the operator name that names it in saved code.
// Not a template: templates only fill in signature_records (detail/invoker.hpp).
#pragma once

#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace torch_delegate::detail {

struct compiled_method;

/// Calls one execute overload with LibTorch's boxed arguments (`__backend.execute`, and the typed
/// C++ call of a generic method): one outputs entry per top-level tuple element, else one.
using boxed_call = c10::impl::GenericList (*)(compiled_method& method, c10::ArrayRef<c10::IValue> arguments);

/// The JIT operator body of a typed overload: (Any handle, A...) -> R on the interpreter's stack.
using operator_body = void (*)(torch::jit::Stack& stack);

/// One execute signature, as constant data built from a C++ function type.
struct signature_record {
  std::string_view text;                         // "(Tensor, Tensor) -> Tensor", or "(*) -> *"
  std::span<const std::string_view> arguments;   // TorchScript type of each argument
  std::string_view result;                       // TorchScript type of the result
  bool generic = false;                          // execute(Handle&, inputs): any schema
  boxed_call call = nullptr;
  operator_body run_operator = nullptr;          // null for the generic execute
};

inline constexpr std::string_view generic_signature_text = "(*) -> *";

/// "forward(Tensor x, Tensor h) -> Tensor": a schema as errors show it.
TORCH_DELEGATE_INTERNAL std::string schema_without_self(const c10::FunctionSchema& schema);

/// Whether a typed signature's argument and result types equal a method's schema.
TORCH_DELEGATE_INTERNAL bool signature_matches(const signature_record& signature, const c10::FunctionSchema& schema);

/// Picks the execute signature for a method: the first typed overload whose argument and
/// result types equal the schema's, else the generic execute, else an error that lists the
/// method's schema and every signature the backend has.
TORCH_DELEGATE_INTERNAL const signature_record& select_signature(std::span<const signature_record> signatures,
                                                             const c10::FunctionSchema& schema, const error_context& where);

/// Finds a compiled method's signature again by its text (it is stored in the payload).
TORCH_DELEGATE_INTERNAL const signature_record& find_signature(std::span<const signature_record> signatures,
                                                           std::string_view text, const error_context& where);

// -- operator names ------------------------------------------------------------------------------
//
// One operator per typed execute signature, named after the signature itself, so that saved
// modules (whose code names the operator) do not depend on the order of execute_signatures:
//   "(Tensor, Tensor) -> Tuple[Tensor, Tensor]"  ->  torch_delegate::<backend>_execute__LTensor_CTensor_R_TTuple_ITensor_CTensor_J
// The spelling is reversible (signature_of_identifier), so a missing operator can be reported with
// its signature. Modules saved before this scheme (e3cbb93 and earlier) name operators by
// position, "<backend>_execute<k>"; those names stay registered as aliases.

using names::operator_namespace;
using names::operator_prefix;

/// How signature text is spelled in an operator name: each entry's text becomes '_' + code;
/// letters and digits stay, anything else is _xHH.
struct signature_spelling {
  std::string_view text;
  char code;
};
inline constexpr signature_spelling signature_spellings[] = {
    {"_", '_'}, {", ", 'C'}, {" -> ", 'T'}, {"(", 'L'}, {")", 'R'},
    {"[", 'I'}, {"]", 'J'},  {"?", 'Q'},    {"*", 'S'}, {".", 'D'}};

/// The signature text spelled with identifier characters (see signature_spellings).
TORCH_DELEGATE_DECL std::string identifier_of_signature(std::string_view text);

/// The inverse of identifier_of_signature; nullopt for a spelling it never produces.
TORCH_DELEGATE_DECL std::optional<std::string> signature_of_identifier(std::string_view id);

/// "torch_delegate::<backend>_execute_<signature identifier>".
inline std::string operator_name(std::string_view backend, std::string_view signature_text) {
  return std::string(operator_namespace) + "::" + operator_prefix(backend) + identifier_of_signature(signature_text);
}

/// The name modules saved before signature-named operators use: by position in the list.
inline std::string legacy_operator_name(std::string_view backend, std::size_t index) {
  return std::string(operator_namespace) + "::" + names::legacy_operator_basename(backend, index);
}

/// An operator's schema, e.g. "<name>(Any handle, Tensor a0, Tensor a1) -> Tensor".
TORCH_DELEGATE_DECL std::string operator_schema(const std::string& name, const signature_record& signature);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/signature.ipp>
#endif
