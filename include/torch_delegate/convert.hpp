// Conversion between c10::IValue and typed C++ values: one small contract per type.
#pragma once

#include <ATen/core/ivalue.h>

#include <torch_delegate/detail/fixed_string.hpp>

#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/tuple.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch_delegate {

/// The conversion contract for one C++ type, specialised per type. A caster has
///   static constexpr detail::fixed_string name;   // its TorchScript type, e.g. "Tensor"
///   static bool check(const c10::IValue&);         // does the value hold this type?
///   static T load(const c10::IValue&);             // (or a const reference) after check
///   static c10::IValue cast(T);                    // back to a value
/// Specialise it for your own types; the primary template only produces a diagnostic.
template <class T, class = void>
struct ivalue_caster;

namespace detail {
/// Named after the problem so that the user's type is on the first line of the error.
template <class T>
struct type_has_no_ivalue_caster;

template <class T>
inline constexpr bool dependent_false = false;
}  // namespace detail

template <class T, class>
struct ivalue_caster {
  static constexpr detail::fixed_string name = "?";
  static constexpr bool unsupported = true;
  static constexpr bool diagnose() {
    if constexpr (std::is_same_v<T, float>) {
      static_assert(detail::dependent_false<T>,
                    "torch-delegate: unsupported argument or result type 'float': TorchScript's float "
                    "is 64-bit. Please use double instead.");
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      static_assert(detail::dependent_false<T>,
                    "torch-delegate: unsupported integer type: TorchScript's int is 64-bit. Please use "
                    "std::int64_t instead.");
    } else if constexpr (std::is_same_v<T, const char*> || std::is_same_v<T, std::string_view>) {
      static_assert(detail::dependent_false<T>,
                    "torch-delegate: unsupported string type: TorchScript's str is owned. Please use "
                    "std::string instead.");
    } else {
      detail::type_has_no_ivalue_caster<T> specialise_torch_delegate_ivalue_caster_for_it;
      static_assert(detail::dependent_false<T>,
                    "torch-delegate: no conversion between c10::IValue and this type. Use at::Tensor, "
                    "double, std::int64_t, bool, std::string, std::vector<T>, std::tuple<T...>, "
                    "std::optional<T>, a Boost.Hana struct of those, or c10::IValue, or specialise torch_delegate::ivalue_caster<T> "
                    "(docs/backend-concept.md#argument-types).");
    }
    return false;
  }
};

/// True when `T` has a usable caster (a specialisation, not the diagnosing primary template).
template <class T>
concept convertible_to_ivalue = !requires { ivalue_caster<T>::unsupported; };

template <>
struct ivalue_caster<at::Tensor> {
  static constexpr detail::fixed_string name = "Tensor";
  static bool check(const c10::IValue& v) { return v.isTensor(); }
  static const at::Tensor& load(const c10::IValue& v) { return v.toTensor(); }
  static c10::IValue cast(at::Tensor t) { return c10::IValue(std::move(t)); }
};

template <>
struct ivalue_caster<double> {
  static constexpr detail::fixed_string name = "float";
  static bool check(const c10::IValue& v) { return v.isDouble(); }
  static double load(const c10::IValue& v) { return v.toDouble(); }
  static c10::IValue cast(double d) { return c10::IValue(d); }
};

template <>
struct ivalue_caster<std::int64_t> {
  static constexpr detail::fixed_string name = "int";
  static bool check(const c10::IValue& v) { return v.isInt(); }
  static std::int64_t load(const c10::IValue& v) { return v.toInt(); }
  static c10::IValue cast(std::int64_t i) { return c10::IValue(i); }
};

template <>
struct ivalue_caster<bool> {
  static constexpr detail::fixed_string name = "bool";
  static bool check(const c10::IValue& v) { return v.isBool(); }
  static bool load(const c10::IValue& v) { return v.toBool(); }
  static c10::IValue cast(bool b) { return c10::IValue(b); }
};

template <>
struct ivalue_caster<std::string> {
  static constexpr detail::fixed_string name = "str";
  static bool check(const c10::IValue& v) { return v.isString(); }
  static const std::string& load(const c10::IValue& v) { return v.toStringRef(); }
  static c10::IValue cast(std::string s) { return c10::IValue(std::move(s)); }
};

template <>
struct ivalue_caster<c10::IValue> {
  static constexpr detail::fixed_string name = "Any";
  static bool check(const c10::IValue&) { return true; }
  static const c10::IValue& load(const c10::IValue& v) { return v; }
  static c10::IValue cast(c10::IValue v) { return v; }
};

namespace detail {
/// Element types c10::List<T> holds directly.
template <class T>
inline constexpr bool is_list_element_v = std::is_same_v<T, at::Tensor> || std::is_same_v<T, double> ||
                                          std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool> ||
                                          std::is_same_v<T, std::string>;
}  // namespace detail

template <class T>
struct ivalue_caster<std::vector<T>, std::enable_if_t<convertible_to_ivalue<T>>> {
  static constexpr auto name = "List[" + ivalue_caster<T>::name + "]";
  static bool check(const c10::IValue& v) {
    if (!v.isList()) return false;
    for (const c10::IValue& element : v.toListRef())
      if (!ivalue_caster<T>::check(element)) return false;
    return true;
  }
  static std::vector<T> load(const c10::IValue& v) {
    std::vector<T> out;
    const auto& elements = v.toListRef();
    out.reserve(elements.size());
    for (const c10::IValue& element : elements) out.emplace_back(ivalue_caster<T>::load(element));
    return out;
  }
  static c10::IValue cast(std::vector<T> values) {
    if constexpr (std::is_same_v<T, c10::IValue>) {
      c10::impl::GenericList list(c10::AnyType::get());
      for (auto& v : values) list.push_back(std::move(v));
      return list;
    } else if constexpr (!detail::is_list_element_v<T>) {
      // Tuples, optionals, nested lists: c10::List<T> knows c10's own types only (c10::optional,
      // not std::optional), so each element is cast on its own.
      c10::impl::GenericList list(c10::AnyType::get());
      list.reserve(values.size());
      for (auto& v : values) list.push_back(ivalue_caster<T>::cast(std::move(v)));
      return list;
    } else {
      c10::List<T> list;
      list.reserve(values.size());
      for (auto& v : values) list.push_back(std::move(v));
      return c10::IValue(std::move(list));
    }
  }
};

template <class T>
struct ivalue_caster<std::optional<T>, std::enable_if_t<convertible_to_ivalue<T>>> {
  static constexpr auto name = "Optional[" + ivalue_caster<T>::name + "]";
  static bool check(const c10::IValue& v) { return v.isNone() || ivalue_caster<T>::check(v); }
  static std::optional<T> load(const c10::IValue& v) {
    if (v.isNone()) return std::nullopt;
    return T(ivalue_caster<T>::load(v));
  }
  static c10::IValue cast(std::optional<T> v) {
    return v ? ivalue_caster<T>::cast(std::move(*v)) : c10::IValue();
  }
};

template <class... Ts>
struct ivalue_caster<std::tuple<Ts...>, std::enable_if_t<(convertible_to_ivalue<Ts> && ...)>> {
  static constexpr auto name = "Tuple[" + detail::join(ivalue_caster<Ts>::name...) + "]";
  static bool check(const c10::IValue& v) {
    if (!v.isTuple()) return false;
    // Indexed through an ArrayRef: indexing TupleElements itself (three elements inline) makes
    // GCC's -Warray-bounds see index 4 of the inline array in optimised builds.
    const c10::ArrayRef<c10::IValue> elements = v.toTupleRef().elements().asArrayRef();
    if (elements.size() != sizeof...(Ts)) return false;
    return check_elements(elements, std::index_sequence_for<Ts...>{});
  }
  static std::tuple<Ts...> load(const c10::IValue& v) {
    const c10::ArrayRef<c10::IValue> elements = v.toTupleRef().elements().asArrayRef();
    return load_elements(elements, std::index_sequence_for<Ts...>{});
  }
  static c10::IValue cast(std::tuple<Ts...> values) {
    return std::apply(
        [](auto&&... v) {
          return c10::IValue(c10::ivalue::Tuple::create(
              std::vector<c10::IValue>{ivalue_caster<Ts>::cast(std::move(v))...}));
        },
        std::move(values));
  }

 private:
  template <class Elements, std::size_t... I>
  static bool check_elements(const Elements& e, std::index_sequence<I...>) {
    return (ivalue_caster<Ts>::check(e[I]) && ...);
  }
  template <class Elements, std::size_t... I>
  static std::tuple<Ts...> load_elements(const Elements& e, std::index_sequence<I...>) {
    return std::tuple<Ts...>(Ts(ivalue_caster<Ts>::load(e[I]))...);
  }
};

namespace detail {
/// The fields of a Boost.Hana struct as a std::tuple of their types.
template <class T, class Accessors>
struct hana_fields_of;
template <class T, class... Pairs>
struct hana_fields_of<T, boost::hana::tuple<Pairs...>> {
  using type = std::tuple<
      std::remove_cvref_t<std::invoke_result_t<decltype(boost::hana::second(std::declval<Pairs>())), T&>>...>;
};
template <class T>
using hana_fields_t = typename hana_fields_of<T, decltype(boost::hana::accessors<T>())>::type;

template <class T>
concept hana_struct_converts = boost::hana::Struct<T>::value && convertible_to_ivalue<hana_fields_t<T>>;
}  // namespace detail

/// A Boost.Hana struct (BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT) whose fields convert:
/// a tuple of its fields in declaration order, as std::tuple of the same types would be. A
/// payload can be such a struct, with named fields instead of positions.
template <class T>
  requires detail::hana_struct_converts<T>
struct ivalue_caster<T, void> {
  using fields = detail::hana_fields_t<T>;
  static constexpr auto name = ivalue_caster<fields>::name;
  static bool check(const c10::IValue& v) { return ivalue_caster<fields>::check(v); }
  static T load(const c10::IValue& v) {
    // Through an ArrayRef, as the tuple caster does: indexing TupleElements (three inline) past 3
    // makes GCC -O2 warn (-Warray-bounds) for a struct of more fields.
    const c10::ArrayRef<c10::IValue> elements = v.toTupleRef().elements().asArrayRef();
    T out{};
    std::size_t i = 0;
    boost::hana::for_each(boost::hana::accessors<T>(), [&](auto pair) {
      auto& field = boost::hana::second(pair)(out);
      using field_type = std::remove_cvref_t<decltype(field)>;
      field = field_type(ivalue_caster<field_type>::load(elements[i++]));
    });
    return out;
  }
  static c10::IValue cast(T value) {
    std::vector<c10::IValue> elements;
    boost::hana::for_each(boost::hana::accessors<T>(), [&](auto pair) {
      auto& field = boost::hana::second(pair)(value);
      using field_type = std::remove_cvref_t<decltype(field)>;
      elements.push_back(ivalue_caster<field_type>::cast(std::move(field)));
    });
    return c10::ivalue::Tuple::create(std::move(elements));
  }
};

namespace detail {
/// The caster of a parameter type as written (`const at::Tensor&` uses the caster of at::Tensor).
template <class T>
using caster_of = ivalue_caster<std::remove_cvref_t<T>>;

/// Forces the diagnosing primary template to explain itself when `T` is not convertible.
template <class T>
constexpr bool require_convertible() {
  using plain = std::remove_cvref_t<T>;
  if constexpr (!convertible_to_ivalue<plain>) return ivalue_caster<plain>::diagnose();
  return true;
}
}  // namespace detail
}  // namespace torch_delegate
