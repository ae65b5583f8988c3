// Random and mutated IValues for the libFuzzer targets (tests/fuzz/*.cpp): readers of saved
// formats must give a record or an error for any of them, never crash.
#pragma once

#include <ATen/core/ivalue.h>

#include <fuzzer/FuzzedDataProvider.h>

namespace fuzz_values {

/// Any value: a number, a bool, a string, None, a tuple, a list or a dict of such values.
inline c10::IValue any_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange(0, depth > 2 ? 4 : 7)) {
    case 0: return in.ConsumeIntegral<std::int64_t>();
    case 1: return in.ConsumeFloatingPoint<double>();
    case 2: return in.ConsumeBool();
    case 3: return in.ConsumeRandomLengthString(16);
    case 4: return c10::IValue();
    case 5: {
      std::vector<c10::IValue> elements;
      for (int n = in.ConsumeIntegralInRange(0, 5); n > 0; --n) elements.push_back(any_value(in, depth + 1));
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    case 6: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) list.push_back(any_value(in, depth + 1));
      return list;
    }
    default: {
      const bool int_keys = in.ConsumeBool();
      c10::impl::GenericDict dict(int_keys ? c10::TypePtr(c10::IntType::get()) : c10::TypePtr(c10::StringType::get()),
                                  c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) {
        c10::IValue key = int_keys ? c10::IValue(in.ConsumeIntegral<std::int64_t>()) : c10::IValue(in.ConsumeRandomLengthString(8));
        dict.insert_or_assign(std::move(key), any_value(in, depth + 1));
      }
      return dict;
    }
  }
}

/// A copy of `value` with one random change somewhere inside it.
inline c10::IValue mutate(const c10::IValue& value, FuzzedDataProvider& in, int depth) {
  if (depth > 6 || in.ConsumeIntegralInRange(0, 5) == 0) return any_value(in, depth);
  if (value.isTuple()) {
    std::vector<c10::IValue> elements = value.toTupleRef().elements().vec();
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0: if (!elements.empty()) elements.resize(in.ConsumeIntegralInRange<std::size_t>(0, elements.size() - 1)); break;
      case 1: elements.push_back(any_value(in, depth + 1)); break;
      default:
        if (!elements.empty()) {
          auto& chosen = elements[in.ConsumeIntegralInRange<std::size_t>(0, elements.size() - 1)];
          chosen = mutate(chosen, in, depth + 1);
        }
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isGenericDict()) {
    auto dict = value.toGenericDict().copy();
    if (dict.empty() || in.ConsumeBool()) {
      try {
        dict.insert_or_assign(c10::IValue(in.ConsumeRandomLengthString(8)), any_value(in, depth + 1));
      } catch (const c10::Error&) {  // a str key in an int-keyed dict
      }
      return dict;
    }
    std::size_t index = in.ConsumeIntegralInRange<std::size_t>(0, dict.size() - 1);
    for (auto& entry : dict)
      if (index-- == 0) {
        dict.insert_or_assign(entry.key(), mutate(entry.value(), in, depth + 1));
        break;
      }
    return dict;
  }
  if (value.isList()) {
    // The list keeps its element type, whatever the mutated elements are: a reader must not
    // trust a container's static type.
    c10::impl::GenericList list(value.toList().elementType());
    for (const c10::IValue& element : value.toListRef()) list.push_back(in.ConsumeBool() ? mutate(element, in, depth + 1) : element);
    return list;
  }
  return any_value(in, depth);
}

}  // namespace fuzz_values
