// Definitions for detail/codegen.hpp.
#pragma once

#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/codegen.hpp>

#include <c10/util/StringUtil.h>

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace torch_delegate::detail {

TORCH_DELEGATE_DECL std::string default_literal(const c10::IValue& value, const error_context& where, const std::string& argument) {
  std::ostringstream out;
  if (value.isNone()) {
    out << "None";
  } else if (value.isBool()) {
    out << (value.toBool() ? "True" : "False");
  } else if (value.isInt()) {
    out << value.toInt();
  } else if (value.isDouble()) {
    const double d = value.toDouble();
    if (std::isnan(d)) {
      out << "float(\"nan\")";
    } else if (std::isinf(d)) {
      out << (d > 0 ? "float(\"inf\")" : "float(\"-inf\")");
    } else {
      out << std::setprecision(std::numeric_limits<double>::max_digits10) << d;
      const std::string text = out.str();
      if (text.find_first_of(".e") == std::string::npos) out << ".0";
    }
  } else if (value.isString()) {
    c10::printQuotedString(out, value.toStringRef());
  } else if (value.isList()) {
    out << "[";
    const auto& elements = value.toListRef();
    for (std::size_t i = 0; i < elements.size(); ++i) out << (i ? ", " : "") << default_literal(elements[i], where, argument);
    out << "]";
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    out << "(";
    for (std::size_t i = 0; i < elements.size(); ++i) out << (i ? ", " : "") << default_literal(elements[i], where, argument);
    out << (elements.size() == 1 ? ",)" : ")");
  } else {
    fail(where, "cannot reproduce the default value of argument '" + argument + "' (" + value.tagKind() +
                    ") in the lowered module; pass it explicitly or give it a None/bool/int/float/str/list default");
  }
  return out.str();
}

TORCH_DELEGATE_INTERNAL std::string parameter_list(const c10::FunctionSchema& schema, const error_context& where) {
  std::string out = "self";
  bool keyword_only = false;
  const auto& arguments = schema.arguments();
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (argument.kwarg_only() && !keyword_only) {
      out += ", *";
      keyword_only = true;
    }
    out += ", " + argument.name() + ": " + argument.type()->annotation_str();
    if (argument.default_value()) out += " = " + default_literal(*argument.default_value(), where, argument.name());
  }
  return out;
}

TORCH_DELEGATE_INTERNAL std::string forwarded_arguments(const c10::FunctionSchema& schema) {
  std::string out;
  const auto& arguments = schema.arguments();
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    if (i > 1) out += ", ";
    out += arguments[i].kwarg_only() ? arguments[i].name() + "=" + arguments[i].name() : arguments[i].name();
  }
  return out;
}

TORCH_DELEGATE_INTERNAL std::string return_annotation(const c10::FunctionSchema& schema) {
  return schema.returns()[0].type()->annotation_str();
}

/// "self.<attribute>"
inline std::string self_dot(std::string_view attribute) { return "self." + std::string(attribute); }

TORCH_DELEGATE_DECL std::string lowered_module_common_source(const std::string& backend_class, const std::string& debug_info,
                                                             bool fallback_when_unavailable) {
  const std::string backend = self_dot(names::backend_object), handles = self_dot(names::handles);
  const std::string processed = self_dot(names::processed_module), spec = self_dot(names::method_compile_spec);
  const std::string unavailable = fallback_when_unavailable
                                      ? "        td_no_handles_: Dict[str, Any] = {}\n"
                                        "        " + handles + " = td_no_handles_\n"
                                      : "        raise Exception(\"Backend is not available. (torch-delegate: backend '" +
                                            backend_class.substr(backend_class.rfind('.') + 1) +
                                            "' reports is_available() == false while this module loads: load it where the "
                                            "backend is available, or lower it with fallback_when_unavailable)\")\n";
  return "def __getstate__(self):\n"
         "    " + backend + "." + std::string(names::check_saveable_method) + "(" + processed + ")\n"
         "    return " + spec + ", " + processed + ", True\n"
         "\n"
         "def __setstate__(self, state: Tuple[Dict[str, Any], Any, bool]):\n"
         "    " + spec + " = state[0]\n"
         "    " + processed + " = state[1]\n"
         "    if state[2]:\n"
         "        " + backend + " = " + backend_class + "()\n"
         "        " + self_dot(names::backend_debug_info) + " = " + debug_info + "\n"
         "    if " + backend + ".is_available():\n"
         "        " + handles + " = " + backend + ".compile(" + processed + ", " + spec + ")\n"
         "    else:\n" +
         unavailable;
}

TORCH_DELEGATE_INTERNAL std::string availability_method_source(bool wrapper) {
  const std::string method = std::string(names::is_available_method);
  if (wrapper)
    return "def " + method + "(self) -> bool:\n"
           "    return " + self_dot(names::lowered_module) + "." + method + "()\n";
  return "def " + method + "(self) -> bool:\n"
         "    return len(" + self_dot(names::handles) + ") > 0 and " + self_dot(names::backend_object) + ".is_available()\n";
}

TORCH_DELEGATE_INTERNAL std::string operator_call(const std::string& operator_name, const std::string& handle,
                                 const c10::FunctionSchema& schema) {
  std::string call = operator_name.substr(0, operator_name.find("::")) + "." +
                     operator_name.substr(operator_name.find("::") + 2) + "(" + handle;
  for (std::size_t i = 1; i < schema.arguments().size(); ++i) call += ", " + schema.arguments()[i].name();
  call += ")";
  auto tuple = schema.returns()[0].type()->cast<c10::TupleType>();
  return tuple && tuple->elements().size() == 1 ? "(" + call + ",)" : call;
}

TORCH_DELEGATE_DECL std::string lowered_method_source(const std::string& name, const c10::FunctionSchema& schema,
                                         const error_context& where, const std::string& operator_name) {
  std::string out = "def " + name + "(" + parameter_list(schema, where) + ") -> " + return_annotation(schema) + ":\n";
  if (!operator_name.empty())
    return out + "    return " + operator_call(operator_name, self_dot(names::handles) + "[\"" + name + "\"]", schema) + "\n";
  std::string packed;
  for (std::size_t i = 1; i < schema.arguments().size(); ++i) packed += (i > 1 ? ", " : "") + schema.arguments()[i].name();
  out += "    td_inputs_: List[Any] = [" + packed + "]\n";
  out += "    td_outputs_ = " + self_dot(names::backend_object) + ".execute(" + self_dot(names::handles) + "[\"" + name +
         "\"], td_inputs_)\n";
  const c10::TypePtr& result = schema.returns()[0].type();
  std::vector<c10::TypePtr> outputs;
  auto tuple = result->cast<c10::TupleType>();
  if (tuple) {
    outputs.assign(tuple->elements().begin(), tuple->elements().end());
  } else {
    outputs.push_back(result);
  }
  std::string returned;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::string variable = "td_output_" + std::to_string(i) + "_";
    out += "    " + variable + " = td_outputs_[" + std::to_string(i) + "]\n";
    if (outputs[i]->kind() != c10::TypeKind::AnyType)
      out += "    assert isinstance(" + variable + ", " + outputs[i]->annotation_str() + ")\n";
    returned += (i ? ", " : "") + variable;
  }
  if (tuple) returned = "(" + returned + (outputs.size() == 1 ? ",)" : ")");
  out += "    return " + returned + "\n";
  return out;
}

TORCH_DELEGATE_DECL std::string wrapper_method_source(const std::string& name, const c10::FunctionSchema& schema,
                                         const error_context& where) {
  return "def " + name + "(" + parameter_list(schema, where) + ") -> " + return_annotation(schema) + ":\n" +
         "    return " + self_dot(names::lowered_module) + "." + name + "(" + forwarded_arguments(schema) + ")\n";
}

}  // namespace torch_delegate::detail
