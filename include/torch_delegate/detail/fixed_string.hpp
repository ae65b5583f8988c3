// Compile-time strings: TorchScript type names and signature texts built from C++ types.
#pragma once

#include <cstddef>
#include <string_view>

namespace torch_delegate::detail {

/// A string literal usable as a constant expression and as a template argument.
template <std::size_t N>
struct fixed_string {
  char data[N + 1]{};

  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&text)[N + 1]) {
    for (std::size_t i = 0; i <= N; ++i) data[i] = text[i];
  }
  constexpr std::string_view view() const { return {data, N}; }
  static constexpr std::size_t size() { return N; }
};

template <std::size_t M>
fixed_string(const char (&)[M]) -> fixed_string<M - 1>;

template <std::size_t A, std::size_t B>
constexpr fixed_string<A + B> operator+(const fixed_string<A>& a, const fixed_string<B>& b) {
  fixed_string<A + B> out;
  for (std::size_t i = 0; i < A; ++i) out.data[i] = a.data[i];
  for (std::size_t i = 0; i < B; ++i) out.data[A + i] = b.data[i];
  out.data[A + B] = '\0';
  return out;
}

template <std::size_t A, std::size_t M>
constexpr auto operator+(const fixed_string<A>& a, const char (&b)[M]) {
  return a + fixed_string<M - 1>(b);
}

template <std::size_t M, std::size_t B>
constexpr auto operator+(const char (&a)[M], const fixed_string<B>& b) {
  return fixed_string<M - 1>(a) + b;
}

/// Joins the names with ", ": join<>() is "", join(a, b) is "a, b".
constexpr fixed_string<0> join() { return {}; }
template <std::size_t N, std::size_t... Ns>
constexpr auto join(const fixed_string<N>& first, const fixed_string<Ns>&... rest) {
  if constexpr (sizeof...(Ns) == 0) {
    return first;
  } else {
    return first + ", " + join(rest...);
  }
}

}  // namespace torch_delegate::detail
