// The TorchScript source of a lowered module and its wrapper: generated in this one place,
// readable when printed, and golden-tested (tests/test_codegen.cpp).
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/function_schema.h>

#include <string>
#include <vector>

namespace torch_delegate::detail {

/// A TorchScript literal for a default value, or an error naming the argument.
TORCH_DELEGATE_DECL std::string default_literal(const c10::IValue& value, const error_context& where, const std::string& argument);

/// "self, x: Tensor, h: Tensor, alpha: float = 1.0, *, beta: int = 2"
TORCH_DELEGATE_INTERNAL std::string parameter_list(const c10::FunctionSchema& schema, const error_context& where);

/// "x, h, alpha, beta=beta": forwards every parameter, keyword-only ones by keyword.
TORCH_DELEGATE_INTERNAL std::string forwarded_arguments(const c10::FunctionSchema& schema);

TORCH_DELEGATE_INTERNAL std::string return_annotation(const c10::FunctionSchema& schema);

/// The methods every lowered module has. LibTorch's own lowered modules also have
/// __create_backend, __is_available and __create_backend_debug_info; they are inlined here because
/// torch::jit::load compiles every method of the class again (see docs/performance.md).
TORCH_DELEGATE_DECL std::string lowered_module_common_source(const std::string& backend_class, const std::string& debug_info,
                                                             bool fallback_when_unavailable = false);

/// With availability fallback: `td_is_available()` on the lowered module (the backend is
/// available and compiled this module's handles) and on its wrapper (forwarding).
TORCH_DELEGATE_INTERNAL std::string availability_method_source(bool wrapper);

/// "torch_delegate.<operator>(<handle>, x, h)", the operator named from the backend and the
/// execute signature (signature.hpp: operator_name; resolved by generated_code_resolver), a
/// 1-tuple result re-wrapped.
TORCH_DELEGATE_INTERNAL std::string operator_call(const std::string& operator_name, const std::string& handle,
                                 const c10::FunctionSchema& schema);

/// One lowered method. With a typed operator (`operator_name`, from a typed execute overload):
/// one call of it. Otherwise LibTorch's generic path: pack the arguments into List[Any], call
/// the backend's execute, check and unpack the outputs.
TORCH_DELEGATE_DECL std::string lowered_method_source(const std::string& name, const c10::FunctionSchema& schema,
                                         const error_context& where, const std::string& operator_name = {});

/// One wrapper method: forwards to the lowered module. (Calling the operator from here would
/// save an interpreter frame, but the lite interpreter names the lowered module's frame in its
/// "Module hierarchy" of a backend error, as it does for LibTorch's own lowered modules.)
TORCH_DELEGATE_DECL std::string wrapper_method_source(const std::string& name, const c10::FunctionSchema& schema,
                                         const error_context& where);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/codegen.ipp>
#endif
