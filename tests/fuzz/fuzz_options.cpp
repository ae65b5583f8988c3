// libFuzzer target: the typed-options decoder on arbitrary Dict[str, Any] values built from the
// input (known and unknown keys, every IValue kind, nesting). Decoding gives options or a
// c10::Error; options that decode re-encode and decode to the same values.
#include <torch_delegate/options.hpp>

#include <fuzzer/FuzzedDataProvider.h>

namespace {
struct fuzz_options {
  torch_delegate::required<std::string> target;
  double scale = 1.0;
  std::int64_t repeat = 1;
  bool fast = false;
  std::vector<std::int64_t> shape;
  std::optional<double> tolerance;
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(fuzz_options, target, scale, repeat, fast, shape, tolerance);

namespace {
c10::IValue any_value(FuzzedDataProvider& in, int depth) {
  switch (in.ConsumeIntegralInRange(0, depth > 2 ? 5 : 7)) {
    case 0: return in.ConsumeIntegral<std::int64_t>();
    case 1: return in.ConsumeFloatingPoint<double>();
    case 2: return in.ConsumeBool();
    case 3: return in.ConsumeRandomLengthString(16);
    case 4: return c10::IValue();
    case 5: {
      c10::List<std::int64_t> list;
      for (int n = in.ConsumeIntegralInRange(0, 4); n > 0; --n) list.push_back(in.ConsumeIntegral<std::int64_t>());
      return list;
    }
    case 6: {
      c10::impl::GenericList list(c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) list.push_back(any_value(in, depth + 1));
      return list;
    }
    default: {
      c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
      for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n)
        dict.insert_or_assign(in.ConsumeRandomLengthString(8), any_value(in, depth + 1));
      return dict;
    }
  }
}
const char* const known_keys[] = {"target", "scale", "repeat", "fast", "shape", "tolerance", ""};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  c10::IValue spec;
  if (in.ConsumeIntegralInRange(0, 9) == 0) {
    spec = any_value(in, 0);
  } else {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    for (int n = in.ConsumeIntegralInRange(0, 8); n > 0; --n) {
      std::string key = in.ConsumeBool() ? known_keys[in.ConsumeIntegralInRange(0, 6)] : in.ConsumeRandomLengthString(10);
      dict.insert_or_assign(std::move(key), any_value(in, 0));
    }
    spec = dict;
  }
  const torch_delegate::detail::error_context where{"fuzz", "forward"};
  try {
    fuzz_options decoded = torch_delegate::decode_options<fuzz_options>(spec, where);
    fuzz_options again = torch_delegate::decode_options<fuzz_options>(torch_delegate::encode_options(decoded), where);
    const bool same = again.target == decoded.target && again.repeat == decoded.repeat && again.fast == decoded.fast &&
                      again.shape == decoded.shape &&
                      (again.scale == decoded.scale || (again.scale != again.scale && decoded.scale != decoded.scale));
    if (!same) __builtin_trap();
  } catch (const c10::Error&) {
  }
  return 0;
}
