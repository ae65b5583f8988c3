// Typed compile options: a Boost.Hana-reflected struct <-> LibTorch's method_compile_spec entry.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/detail/errors.hpp>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <boost/hana/accessors.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_delegate {

/// An option that `lower` must be given: a missing key is an error. Other fields take the
/// value of a default-constructed options struct when their key is absent.
template <class T>
class required {
 public:
  required() = default;
  required(T value) : value_(std::move(value)) {}

  bool has_value() const { return value_.has_value(); }
  const T& value() const { return value_.value(); }
  operator const T&() const { return value_.value(); }
  const T& operator*() const { return *value_; }
  const T* operator->() const { return &*value_; }
  friend bool operator==(const required&, const required&) = default;

 private:
  std::optional<T> value_;
};

namespace detail {

template <class T>
struct option_field {
  using value_type = T;
  static constexpr bool is_required = false;
};
template <class T>
struct option_field<required<T>> {
  using value_type = T;
  static constexpr bool is_required = true;
};

template <class Options>
struct options_are_not_a_hana_struct;

/// Options types that are not reflected field by field.
template <class Options>
inline constexpr bool is_untyped_options = std::is_same_v<Options, no_options> || std::is_same_v<Options, raw_options>;

template <class Options>
constexpr bool check_options() {
  if constexpr (is_untyped_options<Options>) {
    return true;
  } else if constexpr (!boost::hana::Struct<Options>::value) {
    options_are_not_a_hana_struct<Options> error;
    static_assert(dependent_false<Options>,
                  "torch-delegate: a backend's options type must be reflectable: declare its fields with "
                  "BOOST_HANA_DEFINE_STRUCT, or keep default member initialisers and add "
                  "BOOST_HANA_ADAPT_STRUCT(Options, field...) (docs/lowering.md#typed-options).");
    return false;
  } else {
    return true;
  }
}

/// The key a caller may put in a per-method dictionary only as a placeholder: LibTorch's own
/// tests and tutorials pass {"": ""} to backends that take no options.
inline bool is_placeholder_key(const c10::IValue& key) {
  return key.isString() && key.toStringRef().empty();
}

[[noreturn]] inline void fail_option_not_a_dict(const error_context& where, const c10::IValue& given) {
  fail(where, "the compile spec of a method must be a Dict[str, Any] of options, got " +
                  given.type()->annotation_str());
}

[[noreturn]] inline void fail_unknown_option(const error_context& where, const std::string& key,
                                             const std::vector<std::string>& known) {
  std::string text = "unknown option key '" + key + "'; ";
  if (known.empty()) {
    text += "this backend takes no options";
  } else {
    text += "known keys: " + comma_separated(known);
  }
  fail(where, text);
}

[[noreturn]] inline void fail_missing_option(const error_context& where, const std::string& key,
                                             std::string_view type) {
  fail(where, "missing required option '" + key + "' (" + std::string(type) + ")");
}

[[noreturn]] inline void fail_option_type(const error_context& where, const std::string& key,
                                          std::string_view expected, const c10::IValue& given) {
  fail(where, "option '" + key + "' expects " + std::string(expected) + ", got " +
                  given.type()->annotation_str());
}

/// Warns once per call about keys a backend declared to ignore
/// (`static constexpr bool ignore_unknown_options = true;`).
inline void warn_ignored_options(const error_context& where, const std::vector<std::string>& ignored,
                                 const std::vector<std::string>& known) {
  std::string text = describe(where) + ": ignoring unknown option key" + (ignored.size() > 1 ? "s " : " ");
  text += comma_separated(ignored, [](const std::string& key) { return "'" + key + "'"; });
  text += "; known keys: " + comma_separated(known);
  if (known.empty()) text += "(none)";
  TORCH_WARN(text);
}

template <class Options>
std::vector<std::string> option_keys() {
  std::vector<std::string> keys;
  if constexpr (!is_untyped_options<Options>) {
    boost::hana::for_each(boost::hana::accessors<Options>(), [&](auto pair) {
      keys.emplace_back(boost::hana::to<const char*>(boost::hana::first(pair)));
    });
  }
  return keys;
}

}  // namespace detail

/// What decoding does with option keys the options type does not declare.
enum class unknown_option_keys {
  reject,  // an error naming the key and the known keys (the default)
  warn,    // ignored, with a warning naming them (a backend's `ignore_unknown_options = true`)
  ignore   // ignored silently (where the same spec was already warned about)
};

/// Options -> what LibTorch keeps in `__method_compile_spec` per method: a Dict[str, Any] for
/// typed options, the value itself for raw_options.
template <class Options>
c10::IValue encode_options(const Options& options) {
  static_assert(detail::check_options<Options>());
  if constexpr (std::is_same_v<Options, raw_options>) return options.value;
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  if constexpr (!detail::is_untyped_options<Options>) {
    boost::hana::for_each(boost::hana::accessors<Options>(), [&](auto pair) {
      const char* key = boost::hana::to<const char*>(boost::hana::first(pair));
      const auto& field = boost::hana::second(pair)(options);
      using field_type = std::remove_cvref_t<decltype(field)>;
      using value_type = typename detail::option_field<field_type>::value_type;
      static_assert(detail::require_convertible<value_type>());
      if constexpr (detail::option_field<field_type>::is_required) {
        if (field.has_value()) dict.insert(key, ivalue_caster<value_type>::cast(field.value()));
      } else {
        dict.insert(key, ivalue_caster<value_type>::cast(field));
      }
    });
  }
  return dict;
}

/// One method's compile spec -> Options. no_options accepts any value (LibTorch passes specs
/// through untouched) and raw_options keeps it as given. Typed options need a Dict[str, Any]
/// and check every key: unknown keys (unless `unknown` says otherwise), missing required keys
/// and ill-typed values are errors naming the backend, method and key.
template <class Options>
Options decode_options(const c10::IValue& spec, const detail::error_context& where,
                       unknown_option_keys unknown = unknown_option_keys::reject) {
  static_assert(detail::check_options<Options>());
  if constexpr (std::is_same_v<Options, no_options>) {
    return {};
  } else if constexpr (std::is_same_v<Options, raw_options>) {
    return {spec};
  } else {
    if (!spec.isGenericDict()) detail::fail_option_not_a_dict(where, spec);
    const c10::impl::GenericDict dict = spec.toGenericDict();
    const std::vector<std::string> known = detail::option_keys<Options>();
    std::vector<std::string> ignored;
    for (const auto& entry : dict) {
      if (detail::is_placeholder_key(entry.key())) continue;
      const std::string key = entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind();
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      if (unknown == unknown_option_keys::reject) detail::fail_unknown_option(where, key, known);
      ignored.push_back(key);
    }
    if (!ignored.empty() && unknown == unknown_option_keys::warn) detail::warn_ignored_options(where, ignored, known);
    Options options{};
    boost::hana::for_each(boost::hana::accessors<Options>(), [&](auto pair) {
      const std::string key = boost::hana::to<const char*>(boost::hana::first(pair));
      auto& field = boost::hana::second(pair)(options);
      using field_type = std::remove_cvref_t<decltype(field)>;
      using value_type = typename detail::option_field<field_type>::value_type;
      using caster = ivalue_caster<value_type>;
      auto found = dict.find(key);
      if (found == dict.end()) {
        if (detail::option_field<field_type>::is_required) detail::fail_missing_option(where, key, caster::name.view());
        return;
      }
      if (!caster::check(found->value())) detail::fail_option_type(where, key, caster::name.view(), found->value());
      field = value_type(caster::load(found->value()));
    });
    return options;
  }
}

}  // namespace torch_delegate
