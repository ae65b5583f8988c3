// The runtime half of a backend: its TorchBind class in LibTorch's schema, compiled handles,
// and the typed execute trampolines. Everything a process needs to load and run lowered modules.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/detail/backend_check.hpp>
#include <torch_delegate/detail/dispatch.hpp>
#include <torch_delegate/detail/registry.hpp>
#include <torch_delegate/options.hpp>
#include <torch_delegate/payload_format.hpp>

#include <ATen/core/stack.h>
#include <c10/util/Type.h>
#include <torch/csrc/jit/frontend/script_type_parser.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <typeindex>

namespace torch_delegate {

namespace detail {

inline constexpr const char* backends_namespace = "__backends__";        // LibTorch's, for compatibility
inline constexpr const char* handles_namespace = "__torch_delegate__";   // our compiled-method class

inline std::string backend_class_name(std::string_view backend) {
  return "__torch__.torch.classes." + std::string(backends_namespace) + "." + std::string(backend);
}
inline std::string handle_class_basename(std::string_view backend) {
  return std::string(backend) + "__compiled_method";
}

[[noreturn]] inline void fail_copy(std::string_view backend) {
  fail({backend, {}}, "a lowered module cannot be deep-copied or cloned: its compiled handles belong to the "
                      "backend and are not copyable. Save and load it, or lower the original module again.");
}

/// The TorchBind object behind `__backend`: one backend instance per lowered module.
template <class B>
struct backend_object : torch::CustomClassHolder {
  B backend;
};

/// The TorchBind object behind `__handles[method]`: the backend's compiled handle plus what
/// errors need to say.
template <class B>
struct compiled_method : torch::CustomClassHolder {
  compiled_method(handle_t<B> h, method_info i, c10::intrusive_ptr<backend_object<B>> o)
      : handle(std::move(h)), info(std::move(i)), owner(std::move(o)) {}
  handle_t<B> handle;
  method_info info;
  c10::intrusive_ptr<backend_object<B>> owner;  // the backend instance that compiled it
};

/// The single place availability is asked (a backend may answer differently over time).
template <class B>
bool backend_is_available(B& backend) {
  return backend.is_available();
}

// -- typed trampolines ------------------------------------------------------------------------

template <class R>
void append_outputs(c10::impl::GenericList& outputs, R&& result) {
  using plain = std::remove_cvref_t<R>;
  if constexpr (requires { std::tuple_size<plain>::value; } && !std::is_same_v<plain, at::Tensor>) {
    std::apply([&](auto&&... element) {
      (outputs.push_back(caster_of<decltype(element)>::cast(std::forward<decltype(element)>(element))), ...);
    }, std::forward<R>(result));
  } else {
    outputs.push_back(caster_of<R>::cast(std::forward<R>(result)));
  }
}

template <class B, class Signature>
struct typed_signature;

template <class B, class R, class... A>
struct typed_signature<B, R(A...)> {
  static constexpr auto text =
      "(" + join(caster_of<A>::name...) + ") -> " + caster_of<R>::name;
  static constexpr std::array<std::string_view, sizeof...(A)> arguments{caster_of<A>::name.view()...};

  static c10::impl::GenericList call(void* backend, void* handle, c10::ArrayRef<c10::IValue> args,
                                     const method_info& method) {
    if (args.size() != sizeof...(A)) fail_argument_count(method, args.size());
    return call_with(backend, handle, args, method, std::index_sequence_for<A...>{});
  }

  template <std::size_t... I>
  static c10::impl::GenericList call_with(void* backend, void* handle, c10::ArrayRef<c10::IValue> args,
                                          const method_info& method, std::index_sequence<I...>) {
    ((caster_of<A>::check(args[I]) ? void() : fail_argument_type(method, I, caster_of<A>::name.view(), args[I])), ...);
    c10::impl::GenericList outputs(c10::AnyType::get());
    append_outputs(outputs, run_execute(method, [&]() -> R {
                     return call_execute<R, A...>(*static_cast<B*>(backend), *static_cast<handle_t<B>*>(handle),
                                                  caster_of<A>::load(args[I])...);
                   }));
    return outputs;
  }

  static constexpr signature_record record() {
    return {text.view(), arguments, caster_of<R>::name.view(), false, &call};
  }

  /// The JIT operator lowered methods call: (Any handle, A...) -> R, no List[Any] in between.
  static void run_operator(torch::jit::Stack& stack) {
    run_operator_with(stack, std::index_sequence_for<A...>{});
  }

  template <std::size_t... I>
  static void run_operator_with(torch::jit::Stack& stack, std::index_sequence<I...>) {
    constexpr std::size_t count = sizeof...(A) + 1;
    const c10::IValue& handle = stack[stack.size() - count];
    if (handle.isNone()) fail_not_available(nullptr, B::name);
    auto compiled = handle.toCustomClass<compiled_method<B>>();
    const method_info& method = compiled->info;
    B& backend = compiled->owner->backend;
    if (!backend_is_available(backend)) fail_not_available(&method, B::name);
    const c10::IValue* args = &stack[stack.size() - count + 1];
    ((caster_of<A>::check(args[I]) ? void() : fail_argument_type(method, I, caster_of<A>::name.view(), args[I])), ...);
    R result = run_execute(method, [&]() -> R { return call_execute<R, A...>(backend, compiled->handle, caster_of<A>::load(args[I])...); });
    torch::jit::drop(stack, count);
    // A tuple result is the operator's several returns (the schema parser reads "(A, B)" so).
    if constexpr (requires { std::tuple_size<R>::value; }) {
      std::apply([&](auto&&... element) { (torch::jit::push(stack, caster_of<decltype(element)>::cast(std::move(element))), ...); },
                 std::move(result));
    } else {
      torch::jit::push(stack, caster_of<R>::cast(std::move(result)));
    }
  }
};

template <class B>
c10::impl::GenericList call_generic(void* backend, void* handle, c10::ArrayRef<c10::IValue> args,
                                    const method_info& method) {
  if (args.size() != method.argument_names.size()) fail_argument_count(method, args.size());
  std::vector<c10::IValue> results = run_execute(method, [&]() -> std::vector<c10::IValue> {
    return static_cast<B*>(backend)->execute(*static_cast<handle_t<B>*>(handle), inputs(args.data(), args.size()));
  });
  if (static_cast<std::int64_t>(results.size()) != method.output_count) fail_output_count(method, results.size());
  c10::impl::GenericList outputs(c10::AnyType::get());
  outputs.reserve(results.size());
  for (auto& result : results) outputs.push_back(std::move(result));
  return outputs;
}

template <class B, class... S>
constexpr auto make_signature_records(signatures<S...>*) {
  constexpr std::size_t generic = backend_executes_generically<B> ? 1 : 0;
  std::array<signature_record, sizeof...(S) + generic> records{typed_signature<B, S>::record()...};
  if constexpr (generic) records.back() = {generic_signature_text, {}, "*", true, &call_generic<B>};
  return records;
}

/// Every execute signature of `B`, typed overloads first, the generic execute (if any) last.
template <class B>
inline constexpr auto signature_records = make_signature_records<B>(static_cast<execute_signatures_t<B>*>(nullptr));

// -- the boxed entry points, in LibTorch's schemas ----------------------------------------------

inline c10::FunctionSchema is_available_schema() {
  return c10::FunctionSchema("is_available", "", {c10::Argument("self", c10::AnyType::get())},
                             {c10::Argument("available", c10::BoolType::get())});
}
inline c10::FunctionSchema compile_schema() {
  auto any_dict = c10::DictType::create(c10::StringType::get(), c10::AnyType::get());
  return c10::FunctionSchema("compile", "",
                             {c10::Argument("self", c10::AnyType::get()), c10::Argument("processed", c10::AnyType::get()),
                              c10::Argument("method_compile_spec", any_dict)},
                             {c10::Argument("handles", any_dict)});
}
inline c10::FunctionSchema execute_schema() {
  auto any_list = c10::ListType::create(c10::AnyType::get());
  return c10::FunctionSchema("execute", "",
                             {c10::Argument("self", c10::AnyType::get()), c10::Argument("handle", c10::AnyType::get()),
                              c10::Argument("input", any_list)},
                             {c10::Argument("output", any_list)});
}

/// Whether B declared `static constexpr bool ignore_unknown_options = true;`.
template <class B>
constexpr bool ignores_unknown_options() {
  if constexpr (requires { B::ignore_unknown_options; }) {
    return B::ignore_unknown_options;
  } else {
    return false;
  }
}

/// Decodes one method's spec for B. `report` is what to do with keys B's options do not
/// declare when B ignores unknown keys (warn once at preprocess, silently elsewhere).
template <class B>
options_t<B> decode_backend_options(const c10::IValue& spec, const error_context& where,
                                    unknown_option_keys report = unknown_option_keys::ignore) {
  return decode_options<options_t<B>>(spec, where, ignores_unknown_options<B>() ? report : unknown_option_keys::reject);
}

// Deprecated side channel kept for backends written before compile_context: what
// payload_version_being_compiled() returns. Restored, not reset, so that nested compiles
// (a backend compiling another lowered module) see their own version.
inline thread_local std::int64_t compiling_payload_version = 0;

struct payload_version_scope {
  explicit payload_version_scope(std::int64_t version) : previous_(compiling_payload_version) {
    compiling_payload_version = version;
  }
  ~payload_version_scope() { compiling_payload_version = previous_; }
  payload_version_scope(const payload_version_scope&) = delete;
  payload_version_scope& operator=(const payload_version_scope&) = delete;

 private:
  std::int64_t previous_;
};

/// LibTorch's compile(processed, method_compile_spec) -> {method: handle}.
template <class B>
c10::impl::GenericDict compile_all(const c10::intrusive_ptr<backend_object<B>>& owner, const c10::IValue& processed,
                                   const c10::impl::GenericDict& spec) {
  B& backend = owner->backend;
  c10::impl::GenericDict handles(c10::StringType::get(), c10::AnyType::get());
  for (const auto& entry : spec) {
    const std::string& method = entry.key().toStringRef();
    const error_context where{B::name, method};
    decoded_method decoded =
        read_processed(processed, B::name, method, {oldest_payload_version_of<B>(), payload_version_of<B>()});
    method_record& record = decoded.record;
    const signature_record& signature = find_signature(signature_records<B>, record.signature, where);
    using payload_caster = ivalue_caster<payload_t<B>>;
    if (!payload_caster::check(record.payload))
      fail_processed(B::name, method, "payload expects " + std::string(payload_caster::name.view()) + ", got " +
                                          record.payload.type()->annotation_str());
    options_t<B> options = decode_backend_options<B>(entry.value(), where);
    method_info info{std::string(B::name), method, std::move(record.argument_names), record.output_count, &signature,
                     std::move(record.debug)};
    try {
      payload_version_scope version(decoded.payload_version);
      const compile_context context{B::name, method, decoded.payload_version};
      auto compiled = c10::make_intrusive<compiled_method<B>>(
          call_compile(backend, payload_t<B>(payload_caster::load(record.payload)), options, context), std::move(info),
          owner);
      handles.insert(method, c10::IValue(std::move(compiled)));
    } catch (...) {
      rethrow_from_backend(where, "compile");
    }
  }
  return handles;
}

// -- the JIT operators lowered methods call -----------------------------------------------------
//
// One operator per typed execute signature, named after the signature itself, so that saved
// modules (whose code names the operator) do not depend on the order of execute_signatures:
//   "(Tensor, Tensor) -> Tuple[Tensor, Tensor]"  ->  torch_delegate::<backend>_execute__LTensor_CTensor_R_TTuple_ITensor_CTensor_J
// The spelling is reversible (signature_of_identifier), so a missing operator can be reported with
// its signature. Modules saved before this scheme (e3cbb93 and earlier) name operators by
// position, "<backend>_execute<k>"; those names stay registered as aliases.

inline constexpr std::string_view operator_namespace = "torch_delegate";

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
inline std::string identifier_of_signature(std::string_view text) {
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

/// The inverse of identifier_of_signature; nullopt for a spelling it never produces.
inline std::optional<std::string> signature_of_identifier(std::string_view id) {
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

/// "<backend>_execute_": what every operator name of a backend starts with (without namespace).
inline std::string operator_prefix(std::string_view backend) { return std::string(backend) + "_execute_"; }

/// "torch_delegate::<backend>_execute_<signature identifier>".
inline std::string operator_name(std::string_view backend, std::string_view signature_text) {
  return std::string(operator_namespace) + "::" + operator_prefix(backend) + identifier_of_signature(signature_text);
}

/// The name modules saved before signature-named operators use: by position in the list.
inline std::string legacy_operator_name(std::string_view backend, std::size_t index) {
  return std::string(operator_namespace) + "::" + std::string(backend) + "_execute" + std::to_string(index);
}

/// An operator's schema, e.g. "<name>(Any handle, Tensor a0, Tensor a1) -> Tensor".
inline std::string operator_schema(const std::string& name, const signature_record& signature) {
  torch::jit::ScriptTypeParser parser;
  std::string schema = name + "(Any handle";
  for (std::size_t i = 0; i < signature.arguments.size(); ++i)
    schema += ", " + parser.parseType(std::string(signature.arguments[i]))->str() + " a" + std::to_string(i);
  return schema + ") -> " + parser.parseType(std::string(signature.result))->str();
}

template <class B, class... S, std::size_t... I>
void register_operators(signatures<S...>*, std::index_sequence<I...>) {
  // Alias analysis CONSERVATIVE: a backend call has effects the JIT cannot see, so it must never
  // be deduplicated, reordered or removed as dead code.
  [[maybe_unused]] auto make = [](const std::string& name, const signature_record& signature, torch::jit::Operation operation) {
    return c10::optional<torch::jit::Operator>(
        torch::jit::Operator(operator_schema(name, signature), std::move(operation), c10::AliasAnalysisKind::CONSERVATIVE));
  };
  static torch::jit::RegisterOperators operators(std::vector<c10::optional<torch::jit::Operator>>{
      make(operator_name(B::name, signature_records<B>[I].text), signature_records<B>[I], &typed_signature<B, S>::run_operator)...,
      make(legacy_operator_name(B::name, I), signature_records<B>[I], &typed_signature<B, S>::run_operator)...});
}

/// LibTorch's execute(handle, inputs) -> outputs. The handle is None when the module was
/// lowered where the backend is unavailable.
template <class B>
void execute_boxed(torch::jit::Stack& stack) {
  c10::IValue arguments = torch::jit::pop(stack);
  c10::IValue handle = torch::jit::pop(stack);
  auto self = torch::jit::pop(stack).toCustomClass<backend_object<B>>();
  if (handle.isNone() || !backend_is_available(self->backend)) fail_not_available(nullptr, B::name);
  auto compiled = handle.toCustomClass<compiled_method<B>>();
  const method_info& info = compiled->info;
  torch::jit::push(stack, info.signature->call(&self->backend, &compiled->handle, arguments.toListRef(), info));
}

template <class B>
void register_runtime_classes() {
  using listed = execute_signatures_t<B>;
  [&]<class... S>(signatures<S...>* list) {
    register_operators<B>(list, std::index_sequence_for<S...>{});
  }(static_cast<listed*>(nullptr));
  torch::class_<compiled_method<B>>(handles_namespace, handle_class_basename(B::name))
      .def_pickle([](const c10::intrusive_ptr<compiled_method<B>>&) -> std::int64_t { fail_copy(B::name); },
                  [](std::int64_t) -> c10::intrusive_ptr<compiled_method<B>> { fail_copy(B::name); });
  torch::class_<backend_object<B>>(backends_namespace, std::string(B::name))
      .def(torch::init<>())
      ._def_unboxed("is_available",
                    [](torch::jit::Stack& stack) {
                      auto self = torch::jit::pop(stack).toCustomClass<backend_object<B>>();
                      torch::jit::push(stack, backend_is_available(self->backend));
                    },
                    is_available_schema())
      ._def_unboxed("compile",
                    [](torch::jit::Stack& stack) {
                      auto spec = torch::jit::pop(stack).toGenericDict();
                      auto processed = torch::jit::pop(stack);
                      auto self = torch::jit::pop(stack).toCustomClass<backend_object<B>>();
                      torch::jit::push(stack, compile_all(self, processed, spec));
                    },
                    compile_schema())
      ._def_unboxed("execute", &execute_boxed<B>, execute_schema())
      .def_pickle([](const c10::intrusive_ptr<backend_object<B>>&) -> std::int64_t { fail_copy(B::name); },
                  [](std::int64_t) -> c10::intrusive_ptr<backend_object<B>> { fail_copy(B::name); });
}

/// Registers one part of `B` once; a second type with the same name is an error.
template <class B, class Register>
void register_part(registration_part part, Register&& do_register) {
  const std::string name(B::name);
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!claim_backend_name(name, typeid(B), c10::demangle(typeid(B).name()), part)) return;
  try {
    do_register(name);
  } catch (...) {
    release_backend_part(name, part);
    throw;
  }
}

}  // namespace detail

/// Inside `compile`: the payload version of the payload being compiled; 0 outside compile.
/// Deprecated: take a `const torch_delegate::compile_context&` as compile's last parameter.
[[deprecated("take a 'const torch_delegate::compile_context&' as compile's last parameter")]]
inline std::int64_t payload_version_being_compiled() { return detail::compiling_payload_version; }

/// Registers the runtime of `B` (its TorchBind class `__torch__.torch.classes.__backends__.<name>`)
/// so that this process can load and run modules lowered to it. Idempotent; returns true.
template <class B>
bool register_runtime() {
  static_assert(detail::check_backend<B>());
  static_assert(detail::require_convertible<payload_t<B>>());
  static_assert(detail::check_options<options_t<B>>());
  detail::register_part<B>(detail::registration_part::runtime, [](const std::string& name) {
    const bool identifier = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                            std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!identifier)
      detail::fail({name, {}}, "a backend name must be an identifier (letters, digits, '_'; not starting with a digit): "
                               "it names a TorchBind class and operators.");
    if (torch::getCustomClass(detail::backend_class_name(name)))
      detail::fail({name, {}}, "the name is already registered with LibTorch by a backend that is not this "
                               "torch-delegate type (torch::jit::backend<T> or another library).");
    detail::register_runtime_classes<B>();
  });
  return true;
}

}  // namespace torch_delegate

#define TORCH_DELEGATE_CONCAT_IMPL(a, b) a##b
#define TORCH_DELEGATE_CONCAT(a, b) TORCH_DELEGATE_CONCAT_IMPL(a, b)

/// Registers the runtime of a backend when its library is loaded: use it in exactly one .cpp
/// of a runtime-only build (one that loads modules preprocessed elsewhere).
#define TORCH_DELEGATE_REGISTER_RUNTIME(Backend)                                                  \
  [[maybe_unused]] static const bool TORCH_DELEGATE_CONCAT(torch_delegate_registered_, __COUNTER__) = \
      ::torch_delegate::register_runtime<Backend>()
