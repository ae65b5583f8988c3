// Typed payload records: a backend's per-op parameters as a Boost.Hana struct with named fields,
// written into (and read back from) the flat int list a payload stores, so no code indexes
// `ints[7]`. Versioned by appending: a field added in a later payload version goes at the end
// with a default, and a record that declares `oldest_fields` (how many fields its first version
// had) reads an older payload with the later fields at their defaults. The whole payload's
// version is the backend's `payload_version` (docs/errors.md, payload_format.hpp).
#pragma once

#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace torch_delegate::toolkit {

/// A record the helpers below read and write: a Boost.Hana struct (BOOST_HANA_ADAPT_STRUCT or
/// BOOST_HANA_DEFINE_STRUCT) whose fields are std::int64_t, bool, double (stored as its bits),
/// or, last only, std::vector<std::int64_t> (the rest of the list: a reshape's dims, a cat's inputs).
template <class Record>
concept payload_record = boost::hana::Struct<Record>::value;

/// How many fields `Record` has.
template <payload_record Record>
inline constexpr std::size_t record_fields = decltype(boost::hana::length(boost::hana::accessors<Record>()))::value;

/// How many fields the oldest readable version of `Record` had: `Record::oldest_fields` where it
/// declares one, else all of them.
template <payload_record Record>
constexpr std::size_t oldest_record_fields() {
  if constexpr (requires { Record::oldest_fields; })
    return Record::oldest_fields;
  else
    return record_fields<Record>;
}

namespace record_detail {
template <class T>
constexpr bool is_tail = std::is_same_v<T, std::vector<std::int64_t>>;
template <class T>
constexpr bool is_scalar_field = std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool> || std::is_same_v<T, double>;
template <class T>
struct unsupported_record_field_type;  // named after the problem: the field's type is on the first error line
template <class T>
constexpr void check_field() {
  if constexpr (!is_scalar_field<T> && !is_tail<T>) {
    [[maybe_unused]] unsupported_record_field_type<T> incomplete;
  }
}
}  // namespace record_detail

/// The record's fields appended to `out` in declaration order.
template <payload_record Record>
void append_record(std::vector<std::int64_t>& out, const Record& record) {
  boost::hana::for_each(boost::hana::accessors<Record>(), [&](auto pair) {
    const auto& field = boost::hana::second(pair)(record);
    using field_type = std::remove_cvref_t<decltype(field)>;
    record_detail::check_field<field_type>();
    if constexpr (record_detail::is_tail<field_type>)
      out.insert(out.end(), field.begin(), field.end());
    else if constexpr (std::is_same_v<field_type, double>)
      out.push_back(std::bit_cast<std::int64_t>(field));
    else
      out.push_back(static_cast<std::int64_t>(field));
  });
}

/// The record as a payload's int list.
template <payload_record Record>
std::vector<std::int64_t> record_ints(const Record& record) {
  std::vector<std::int64_t> out;
  out.reserve(record_fields<Record>);
  append_record(out, record);
  return out;
}

/// The record read from `ints` (its fields in order): fields past the end keep their defaults
/// when at least oldest_record_fields<Record>() are there; nullopt when fewer are (the caller
/// says which op's record and where: field_names helps). A tail field takes what is left.
template <payload_record Record>
std::optional<Record> read_record(std::span<const std::int64_t> ints) {
  Record record{};
  std::size_t next = 0, read = 0;
  boost::hana::for_each(boost::hana::accessors<Record>(), [&](auto pair) {
    auto& field = boost::hana::second(pair)(record);
    using field_type = std::remove_cvref_t<decltype(field)>;
    record_detail::check_field<field_type>();
    if constexpr (record_detail::is_tail<field_type>) {
      field.assign(ints.begin() + static_cast<std::ptrdiff_t>(std::min(next, ints.size())), ints.end());
      next = ints.size();
      if (read + 1 == record_fields<Record>) ++read;  // counts when every field before it was there
    } else if (next < ints.size()) {
      if constexpr (std::is_same_v<field_type, double>)
        field = std::bit_cast<double>(ints[next]);
      else
        field = static_cast<field_type>(ints[next]);
      ++next;
      ++read;
    }
  });
  if (read < oldest_record_fields<Record>()) return std::nullopt;
  return record;
}

/// The names of `Record`'s fields, in order ("input, output, ..."), for diagnostics and docs.
template <payload_record Record>
std::string field_names() {
  std::string names;
  boost::hana::for_each(boost::hana::accessors<Record>(), [&](auto pair) {
    names += (names.empty() ? "" : ", ") + std::string(boost::hana::to<char const*>(boost::hana::first(pair)));
  });
  return names;
}

}  // namespace torch_delegate::toolkit
