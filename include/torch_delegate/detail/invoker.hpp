// The typed half of a backend's runtime: runtime_of<B> (the function pointers the non-template
// runtime is built from) and the invoker of each execute signature. Every route to execute
// (the JIT operator a lowered method calls, LibTorch's `__backend.execute`, the typed C++ call of
// lowered_module::method) goes through invoker<B, R(A...)>::invoke (or call_generic for the
// generic execute): availability, argument checks and result conversion exist once.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/dispatch.hpp>
#include <torch_delegate/detail/runtime_objects.hpp>
#include <torch_delegate/options.hpp>
#include <torch_delegate/payload_format.hpp>

#include <ATen/core/stack.h>

#include <array>
#include <tuple>
#include <type_traits>
#include <utility>

namespace torch_delegate::detail {

template <class B>
struct runtime_of;

/// B::runs_empty_tensors if declared, else false: execute is never given a tensor with no
/// elements (the call is refused first, impl/dispatch.ipp).
template <class B>
constexpr bool backend_runs_empty_tensors() {
  if constexpr (requires { B::runs_empty_tensors; })
    return static_cast<bool>(B::runs_empty_tensors);
  else
    return false;
}

/// The availability policy, in one place: asked on every call (a backend may answer differently
/// over time); false is LibTorch's "Backend is not available." error naming the method.
template <class B>
B& available_backend(compiled_method& method) {
  B& backend = *static_cast<B*>(method.owner->backend);
  if (!backend.is_available()) fail_not_available(&method.info, B::name);
  return backend;
}

/// Result conversion, in one place: a tuple result is one output per element (the operator's
/// several returns, the entries of execute's outputs list), anything else one output.
template <class R, class Emit>
void for_each_output(R&& result, Emit&& emit) {
  using plain = std::remove_cvref_t<R>;
  if constexpr (requires { std::tuple_size<plain>::value; } && !std::is_same_v<plain, at::Tensor>) {
    std::apply([&](auto&&... element) {
      (emit(caster_of<decltype(element)>::cast(std::forward<decltype(element)>(element))), ...);
    }, std::forward<R>(result));
  } else {
    emit(caster_of<plain>::cast(std::forward<R>(result)));
  }
}

template <class B, class Signature>
struct invoker;

template <class B, class R, class... A>
struct invoker<B, R(A...)> {
  static constexpr auto text = "(" + join(caster_of<A>::name...) + ") -> " + caster_of<R>::name;
  static constexpr std::array<std::string_view, sizeof...(A)> arguments{caster_of<A>::name.view()...};

  /// The one call of this execute overload: every route ends here.
  template <class... Args>
  static R invoke(compiled_method& method, Args&&... args) {
    B& backend = available_backend<B>(method);
    call_inspection inspection;
    std::size_t index = 0;
    (inspect_typed_argument(method.info, index++, args, inspection), ...);
    std::shared_ptr<void> replanned;  // a handle re-planned for these inputs' shapes, kept for the call
    void* handle = method.info.input_specs.empty() ? method.handle : handle_for_typed_call(method, replanned, args...);
    R result = run_execute(method.info, [&]() -> R {
      return call_execute<R, A...>(backend, *static_cast<handle_t<B>*>(handle), std::forward<Args>(args)...);
    });
    if (inspection.wants_gradient()) {
      // Only when autograd is asked for: the outputs, converted as the operator returns them.
      if constexpr (std::is_copy_constructible_v<R>) {
        std::size_t output = 0;
        for_each_output(R(result), [&](const c10::IValue& value) { check_output_history(method.info, inspection, output++, value); });
      }
    }
    return result;
  }

  /// From boxed arguments: checks their number and types, then invoke.
  static R invoke_boxed(compiled_method& method, const c10::IValue* args, std::size_t count) {
    if (count != sizeof...(A)) fail_argument_count(method.info, count);
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> R {
      ((caster_of<A>::check(args[I]) ? void() : fail_argument_type(method.info, I, caster_of<A>::name.view(), args[I])), ...);
      return invoke(method, caster_of<A>::load(args[I])...);
    }(std::index_sequence_for<A...>{});
  }

  /// Route: LibTorch's `__backend.execute(handle, inputs)` and generic C++ calls.
  static c10::impl::GenericList call(compiled_method& method, c10::ArrayRef<c10::IValue> args) {
    c10::impl::GenericList outputs(c10::AnyType::get());
    for_each_output(invoke_boxed(method, args.data(), args.size()), [&](c10::IValue value) { outputs.push_back(std::move(value)); });
    return outputs;
  }

  /// Route: the JIT operator lowered methods call, (Any handle, A...) -> R on the stack.
  static void run_operator(torch::jit::Stack& stack) {
    constexpr std::size_t count = sizeof...(A) + 1;
    compiled_method& method = compiled_method_of(stack[stack.size() - count], runtime_of<B>::value);
    R result = invoke_boxed(method, &stack[stack.size() - count + 1], sizeof...(A));
    torch::jit::drop(stack, count);
    for_each_output(std::move(result), [&](c10::IValue value) { stack.push_back(std::move(value)); });
  }

  static constexpr signature_record record() {
    return {text.view(), arguments, caster_of<R>::name.view(), false, &call, &run_operator};
  }
};

/// The generic execute's invoker: any schema, outputs counted against the method's.
template <class B>
c10::impl::GenericList call_generic(compiled_method& method, c10::ArrayRef<c10::IValue> args) {
  if (args.size() != method.info.argument_names.size()) fail_argument_count(method.info, args.size());
  B& backend = available_backend<B>(method);
  call_inspection inspection;
  for (std::size_t i = 0; i < args.size(); ++i) inspect_argument(method.info, i, args[i], inspection);
  std::shared_ptr<void> replanned;
  void* handle = method.info.input_specs.empty() ? method.handle : handle_for_call(method, args.data(), args.size(), replanned);
  std::vector<c10::IValue> results = run_execute(method.info, [&]() -> std::vector<c10::IValue> {
    return backend.execute(*static_cast<handle_t<B>*>(handle), inputs(args.data(), args.size()));
  });
  if (static_cast<std::int64_t>(results.size()) != method.info.output_count) fail_output_count(method.info, results.size());
  if (inspection.wants_gradient())
    for (std::size_t i = 0; i < results.size(); ++i) check_output_history(method.info, inspection, i, results[i]);
  c10::impl::GenericList outputs(c10::AnyType::get());
  outputs.reserve(results.size());
  for (auto& result : results) outputs.push_back(std::move(result));
  return outputs;
}

template <class B, class... S>
constexpr auto make_signature_records(signatures<S...>*) {
  constexpr std::size_t generic = backend_executes_generically<B> ? 1 : 0;
  std::array<signature_record, sizeof...(S) + generic> records{invoker<B, S>::record()...};
  if constexpr (generic) records.back() = {generic_signature_text, {}, "*", true, &call_generic<B>, nullptr};
  return records;
}

/// Every execute signature of `B`, typed overloads first, the generic execute (if any) last.
template <class B>
inline constexpr auto signature_records = make_signature_records<B>(static_cast<execute_signatures_t<B>*>(nullptr));

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
TORCH_DELEGATE_SHARED inline thread_local std::int64_t compiling_payload_version = 0;

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

/// The function pointers of B that the non-template runtime (runtime_objects.hpp) calls.
template <class B>
struct runtime_of {
  static inline runtime_classes classes{};

  static void* create() { return new B(); }
  static void destroy(void* backend) noexcept { delete static_cast<B*>(backend); }
  static bool is_available(void* backend) { return static_cast<B*>(backend)->is_available(); }
  static void destroy_handle(void* handle) noexcept { delete static_cast<handle_t<B>*>(handle); }

  static void* compile(void* backend, const c10::IValue& payload, const c10::IValue& spec, const compile_context& context) {
    const error_context where{B::name, context.method()};
    using payload_caster = ivalue_caster<payload_t<B>>;
    if (!payload_caster::check(payload))
      fail_processed(B::name, context.method(), "payload expects " + std::string(payload_caster::name.view()) + ", got " +
                                                  payload.type()->annotation_str());
    options_t<B> options = decode_backend_options<B>(spec, where);
    try {
      payload_version_scope version(context.payload_version());
      return new handle_t<B>(call_compile(*static_cast<B*>(backend), payload_t<B>(payload_caster::load(payload)), options, context));
    } catch (...) {
      rethrow_from_backend(where, "compile");
    }
  }

  static void* replan(void* backend, void* handle, const given_inputs& given) {
    if constexpr (backend_replans<B>) {
      return new handle_t<B>(static_cast<B*>(backend)->replan(*static_cast<handle_t<B>*>(handle), given));
    } else {
      return nullptr;
    }
  }

  static constexpr backend_runtime value{B::name,
                                         payload_version_of<B>(),
                                         oldest_payload_version_of<B>(),
                                         signature_records<B>,
                                         &classes,
                                         &create,
                                         &destroy,
                                         &is_available,
                                         &compile,
                                         &destroy_handle,
                                         backend_replans<B> ? &replan : nullptr,
                                         backend_runs_empty_tensors<B>()};
};

/// A backend instance of B outside a module (tests, tools): what `__backend` holds.
template <class B>
c10::intrusive_ptr<backend_instance> make_backend_instance() {
  return c10::make_intrusive<backend_instance>(runtime_of<B>::value);
}

}  // namespace torch_delegate::detail
