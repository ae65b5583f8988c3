// Diagnostics for the Backend concept: one static_assert per requirement, each naming the
// member, its expected shape and the docs section, with the user's type on the first line.
#pragma once

#include <torch_delegate/backend.hpp>

#include <concepts>
#include <span>

namespace torch::jit {
struct Node;  // accepts_region's nodes: a backend that declares one includes ir.h
}  // namespace torch::jit

namespace torch_delegate::detail {

// Incomplete on purpose: the compiler prints "<YourBackend>" next to the problem's name.
template <class B> struct backend_is_not_default_constructible;
template <class B> struct backend_is_missing_name;
template <class B> struct backend_is_missing_is_available;
template <class B> struct backend_payload_type_cannot_be_deduced;
template <class B> struct backend_is_missing_compile;
template <class B> struct backend_is_missing_execute;
template <class B> struct backend_replan_has_the_wrong_shape;
template <class B> struct backend_accepts_region_has_the_wrong_shape;
template <class B> struct backend_execute_is_overloaded_without_execute_signatures;
template <class B, class Signature> struct backend_has_no_execute_overload_for_signature;
template <class B, class Signature> struct backend_execute_takes_a_non_const_reference;
template <class B, class Result> struct backend_generic_execute_must_return_std_vector_of_ivalue;
template <class B> struct backend_is_missing_preprocess;
template <class B> struct backend_preprocess_has_the_wrong_shape;
template <class B, class Returned, class Payload> struct backend_preprocess_returns_a_different_payload_than_compile_takes;

// "Does B have any member named execute?", true also when it is overloaded or a template: the
// name is then ambiguous between B and the probe.
struct execute_name_probe {
  int execute;
};
template <class B>
struct execute_name_lookup : B, execute_name_probe {};
template <class B>
concept has_member_named_execute =
    std::is_class_v<B> && !std::is_final_v<B> && !requires { &execute_name_lookup<B>::execute; };

// The same for accepts_region: an accepts_region partitioning cannot call is an error, not a
// member silently ignored.
struct accepts_region_name_probe {
  int accepts_region;
};
template <class B>
struct accepts_region_name_lookup : B, accepts_region_name_probe {};
template <class B>
concept has_member_named_accepts_region =
    std::is_class_v<B> && !std::is_final_v<B> && !requires { &accepts_region_name_lookup<B>::accepts_region; };
/// accepts_region as partitioning calls it: returning a bool or a region_verdict.
template <class B>
concept backend_accepts_regions = requires(std::span<const torch::jit::Node* const> region) {
  { B::accepts_region(region) } -> std::same_as<bool>;
} || requires(std::span<const torch::jit::Node* const> region) {
  { B::accepts_region(region) } -> std::same_as<region_verdict>;
};

// The same for preprocess: tells "no preprocess at all" from "a preprocess of the wrong shape".
struct preprocess_name_probe {
  int preprocess;
};
template <class B>
struct preprocess_name_lookup : B, preprocess_name_probe {};
template <class B>
concept has_member_named_preprocess =
    std::is_class_v<B> && !std::is_final_v<B> && !requires { &preprocess_name_lookup<B>::preprocess; };

// Would the signature be executable if torch-delegate passed lvalues instead of temporaries?
// True for an execute that takes an argument by non-const reference (`at::Tensor&`).
template <class B, class Signature>
struct signature_is_executable_with_lvalues : std::false_type {};
template <class B, class R, class... A>
struct signature_is_executable_with_lvalues<B, R(A...)> {
  static constexpr bool value = requires(B& backend, handle_t<B>& handle) {
    { backend.execute(handle, std::declval<A&>()...) } -> std::same_as<R>;
  };
};

// What the backend's preprocess returns, called as lowering calls it (backend_lowering.hpp:
// with the options first, then without); `callable` is false when it cannot be called either way.
template <class B>
struct preprocess_return {
  static constexpr bool callable = false;
};
template <class B>
  requires requires(B& backend, const method_to_lower& method, const options_t<B>& options) {
    backend.preprocess(method, options);
  }
struct preprocess_return<B> {
  static constexpr bool callable = true;
  using type = decltype(std::declval<B&>().preprocess(std::declval<const method_to_lower&>(),
                                                      std::declval<const options_t<B>&>()));
};
template <class B>
  requires(!requires(B& backend, const method_to_lower& method, const options_t<B>& options) {
    backend.preprocess(method, options);
  } && requires(B& backend, const method_to_lower& method) { backend.preprocess(method); })
struct preprocess_return<B> {
  static constexpr bool callable = true;
  using type = decltype(std::declval<B&>().preprocess(std::declval<const method_to_lower&>()));
};

// An execute that takes torch_delegate::inputs (the generic one) but returns something else than
// std::vector<c10::IValue>: Result, else void.
template <class Signature>
struct generic_execute_with_other_result {
  using type = void;
};
template <class R>
  requires(!std::is_same_v<R, std::vector<c10::IValue>>)
struct generic_execute_with_other_result<R(std::span<const c10::IValue>)> {
  using type = R;
};

template <class B, class Signature>
constexpr bool check_signature() {
  if constexpr (!std::is_void_v<typename generic_execute_with_other_result<Signature>::type>) {
    backend_generic_execute_must_return_std_vector_of_ivalue<B, typename generic_execute_with_other_result<Signature>::type>
        returns_another_type;
    static_assert(dependent_false<B>,
                  "torch-delegate: a generic execute, 'execute(Handle&, torch_delegate::inputs)', returns "
                  "'std::vector<c10::IValue>': one value per output of the method (a tensor converts: "
                  "return {c10::IValue(y)}) (docs/backend-concept.md#execute).");
    return false;
  } else if constexpr (!signature_is_executable<B, Signature>::value &&
                signature_is_executable_with_lvalues<B, Signature>::value) {
    backend_execute_takes_a_non_const_reference<B, Signature> takes_an_argument_by_non_const_reference;
    static_assert(dependent_false<B>,
                  "torch-delegate: execute takes an argument by non-const reference, which cannot bind to "
                  "the arguments torch-delegate passes (each is converted from the method's inputs into a "
                  "temporary): take 'const at::Tensor&' or 'at::Tensor' by value (likewise 'const T&' or "
                  "'T' for any other argument type) (docs/backend-concept.md#execute).");
    return false;
  } else if constexpr (!signature_is_executable<B, Signature>::value) {
    backend_has_no_execute_overload_for_signature<B, Signature> listed_in_execute_signatures;
    static_assert(dependent_false<B>,
                  "torch-delegate: a signature listed in execute_signatures has no execute overload: "
                  "expected 'Result execute(Handle&, Args...)' returning exactly Result "
                  "(docs/backend-concept.md#execute).");
    return false;
  } else {
    using traits = callable_traits<Signature*>;
    return []<class... A>(std::tuple<A...>*) {
      return (require_convertible<A>() && ...) && require_convertible<typename traits::result>();
    }(static_cast<typename traits::arguments*>(nullptr));
  }
}

template <class B, class... S>
constexpr bool check_signatures(signatures<S...>*) {
  return (check_signature<B, S>() && ...);
}

/// Checks the runtime side of a backend; each failure explains itself. Returns true when `B`
/// is a Backend.
template <class B>
constexpr bool check_backend() {
  if constexpr (!std::is_default_constructible_v<B>) {
    backend_is_not_default_constructible<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: a backend must be default-constructible: one instance is created "
                  "per lowered module (docs/backend-concept.md#minimal-complete-definition).");
  }
  if constexpr (!backend_has_name<B>) {
    backend_is_missing_name<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend needs a compile-time name: add "
                  "'static constexpr std::string_view name = \"my_backend\";' "
                  "(docs/backend-concept.md#name).");
  }
  if constexpr (!backend_reports_availability<B>) {
    backend_is_missing_is_available<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend is missing 'static bool is_available();' (a member "
                  "function returning exactly bool also works) (docs/backend-concept.md#is_available).");
  }
  if constexpr (std::is_void_v<payload_t<B>>) {
    backend_payload_type_cannot_be_deduced<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: cannot find the backend's compile: expected "
                  "'Handle compile(const Payload&, const Options&)' or 'Handle compile(const Payload&)', each "
                  "optionally with a last 'const torch_delegate::compile_context&'; "
                  "if compile is overloaded or a template, declare 'using payload = ...;' "
                  "(docs/backend-concept.md#compile).");
  } else if constexpr (!backend_compiles<B>) {
    backend_is_missing_compile<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend's compile has the wrong shape: expected "
                  "'Handle compile(const Payload&, const Options&)' or 'Handle compile(const Payload&)', each "
                  "optionally with a last 'const torch_delegate::compile_context&', returning a movable Handle (docs/backend-concept.md#compile).");
  } else if constexpr (!backend_executes<B>) {
    if constexpr (requires { &B::execute; } || requires { typename B::execute_signatures; }) {
      check_signatures<B>(static_cast<execute_signatures_t<B>*>(nullptr));
    } else if constexpr (has_member_named_execute<B>) {
      backend_execute_is_overloaded_without_execute_signatures<B> error;
      static_assert(dependent_false<B>,
                    "torch-delegate: the backend's execute is overloaded or a template, so its signatures "
                    "cannot be deduced: list them with 'using execute_signatures = "
                    "torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor), ...>;' "
                    "(docs/backend-concept.md#execute).");
    } else {
      backend_is_missing_execute<B> error;
      static_assert(dependent_false<B>,
                    "torch-delegate: the backend is missing execute: expected "
                    "'Result execute(Handle&, Args...)' (one per signature) or "
                    "'std::vector<c10::IValue> execute(Handle&, torch_delegate::inputs)' "
                    "(docs/backend-concept.md#execute).");
    }
  } else {
    check_signatures<B>(static_cast<execute_signatures_t<B>*>(nullptr));
    if constexpr (requires { &B::replan; } && !backend_replans<B>) {
      backend_replan_has_the_wrong_shape<B> error;
      static_assert(dependent_false<B>,
                    "torch-delegate: the backend's replan cannot be called as torch-delegate calls it: "
                    "expected 'Handle replan(Handle& compiled, const torch_delegate::given_inputs& given)', "
                    "returning the type compile returns (docs/partial-lowering.md#other-shapes).");
    }
  }
  return Backend<B>;
}

/// Checks the host side too (what `lower<B>` needs).
template <class B>
constexpr bool check_host_backend() {
  if constexpr (!check_backend<B>()) {
    return false;
  } else if constexpr (!backend_preprocesses<B> && !backend_preprocesses_all<B> && preprocess_return<B>::callable) {
    backend_preprocess_returns_a_different_payload_than_compile_takes<B, typename preprocess_return<B>::type,
                                                                      payload_t<B>>
        error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend's preprocess returns a different type than its compile "
                  "takes: the error above names the backend, then the type preprocess returns, then the "
                  "Payload compile takes (torch_delegate::payload_t<B>). Make them the same type, or "
                  "return torch_delegate::preprocess_result<Payload> (docs/backend-concept.md#preprocess).");
    return false;
  } else if constexpr (!backend_preprocesses<B> && !backend_preprocesses_all<B> && has_member_named_preprocess<B>) {
    backend_preprocess_has_the_wrong_shape<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend's preprocess cannot be called as lower<B> calls it: "
                  "expected 'Payload preprocess(const torch_delegate::method_to_lower&, const Options&)' "
                  "(Options: the backend's 'using options', else torch_delegate::no_options) or "
                  "'Payload preprocess(const torch_delegate::method_to_lower&)'; LibTorch's "
                  "'preprocess(const Module&, const Dict&, ...)' is not used "
                  "(docs/backend-concept.md#preprocess).");
    return false;
  } else if constexpr (has_member_named_accepts_region<B> && !backend_accepts_regions<B>) {
    backend_accepts_region_has_the_wrong_shape<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: the backend's accepts_region cannot be called as partitioning calls it: "
                  "expected 'static bool accepts_region(std::span<const torch::jit::Node* const>)', or the same "
                  "returning torch_delegate::region_verdict (docs/partial-lowering.md#what-the-backend-declares).");
    return false;
  } else if constexpr (!backend_preprocesses<B> && !backend_preprocesses_all<B>) {
    backend_is_missing_preprocess<B> error;
    static_assert(dependent_false<B>,
                  "torch-delegate: lower<B> needs the backend's host side: add "
                  "'static Payload preprocess(const torch_delegate::method_to_lower&, const Options&);' "
                  "(or without Options). A runtime-only build registers with "
                  "TORCH_DELEGATE_REGISTER_RUNTIME instead (docs/backend-concept.md#preprocess).");
    return false;
  } else {
    return true;
  }
}

}  // namespace torch_delegate::detail
