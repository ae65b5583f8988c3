// What backend.hpp reads off a backend's type: a callable's signature (callable_traits), its
// options type (options_of) and its payload type (payload_of: declared, or compile's first
// parameter). Not public API: backend.hpp's options_t and payload_t are.
#pragma once

#include <tuple>
#include <type_traits>

namespace torch_delegate {

struct no_options;  // backend.hpp: the options of a backend that declares none

namespace detail {

template <class F>
struct callable_traits {
  static constexpr bool deducible = false;
};
template <class R, class... A>
struct callable_traits<R (*)(A...)> {
  static constexpr bool deducible = true;
  using result = R;
  using arguments = std::tuple<A...>;
};
template <class R, class C, class... A>
struct callable_traits<R (C::*)(A...)> : callable_traits<R (*)(A...)> {};
template <class R, class C, class... A>
struct callable_traits<R (C::*)(A...) const> : callable_traits<R (*)(A...)> {};
template <class R, class C, class... A>
struct callable_traits<R (C::*)(A...) noexcept> : callable_traits<R (*)(A...)> {};
template <class R, class C, class... A>
struct callable_traits<R (C::*)(A...) const noexcept> : callable_traits<R (*)(A...)> {};
template <class R, class... A>
struct callable_traits<R (*)(A...) noexcept> : callable_traits<R (*)(A...)> {};

// -- options --------------------------------------------------------------------------------
template <class B>
struct options_of {
  using type = no_options;
};
template <class B>
  requires requires { typename B::options; }
struct options_of<B> {
  using type = typename B::options;
};

// -- payload: declared (`using payload = ...`) or the first parameter of a unique `compile` ----
template <class B>
concept declares_payload = requires { typename B::payload; };
template <class B>
concept has_unique_compile = requires { &B::compile; } && callable_traits<decltype(&B::compile)>::deducible;

template <class B>
struct payload_of {
  using type = void;
};
template <class B>
  requires declares_payload<B>
struct payload_of<B> {
  using type = typename B::payload;
};
template <class B>
  requires(!declares_payload<B> && has_unique_compile<B>)
struct payload_of<B> {
  using arguments = typename callable_traits<decltype(&B::compile)>::arguments;
  using type = std::remove_cvref_t<std::tuple_element_t<0, arguments>>;
};

}  // namespace detail

}  // namespace torch_delegate
