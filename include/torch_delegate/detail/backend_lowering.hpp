// What the non-template lowering knows of a backend B: its name, execute signatures, preprocess
// trampoline, runtime, how to decode and describe its options, and what partial lowering needs
// (lowering_of<B>, a few function pointers, as runtime_of<B> is for the runtime). lower<B>,
// lower_partially<B> and delegation_plan<B> are thin templates over code that takes it; the
// Python package lowers any registered backend by name through it.
//
// Registering a backend publishes its backend_lowering process-wide, in LibTorch's operator
// registry (one operator `torch_delegate::_backend_lowering.<name>`), so that code in another
// shared object (a Python extension) finds it whatever dlopen flags loaded the backend's library.
#pragma once

#include <torch_delegate/detail/backend_check.hpp>
#include <torch_delegate/coverage.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/invoker.hpp>
#include <torch_delegate/detail/runtime_objects.hpp>
#include <torch_delegate/options.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace torch_delegate {

/// One compile option a backend takes, as `backends()` describes it.
struct option_info {
  std::string key;
  std::string type;             // "int", "bool", "List[float]", ...
  bool required = false;
  c10::IValue default_value;    // what a default-constructed options struct holds; None when required
};

/// How a backend takes compile options.
enum class options_form {
  none,   // no_options: any spec is accepted and ignored
  raw,    // raw_options: the method's spec as given
  typed   // a reflected struct: a Dict[str, Any] whose keys are its fields
};

namespace detail {

/// What partitioning needs of a backend, type-erased: B::accepts_region as a verdict, whether B
/// returns a bool or a region_verdict.
using accepts_region_function = region_verdict (*)(std::span<const torch::jit::Node* const> region);

template <class B>
region_verdict accepts_region_verdict(std::span<const torch::jit::Node* const> region) {
  return B::accepts_region(region);
}

/// The partitioning part of a backend's record (its name and execute signatures, which a region
/// must match, are the record's runtime part's).
struct partition_backend {
  supports_function supports = nullptr;              // B::supports; nullptr: B cannot lower partially
  accepts_region_function accepts_region = nullptr;  // B::accepts_region, if declared
  std::size_t min_region_size = 1;                   // the backend's own minimum
  bool owns_parameters = false;                      // B::owns_parameters: regions take their weights as constants
  bool channels_last = false;                        // B::channels_last: regions take and return 4-d tensors NHWC
};

/// The layout version of backend_lowering. A reader built against another layout refuses the
/// entry (with an error saying to rebuild) instead of reading garbage.
inline constexpr std::uint32_t backend_lowering_abi = 5;  // 5: accepts_region returns a region_verdict

/// Everything the non-template host half knows of a backend B, in one record: its runtime part
/// (name, payload version, execute signatures, the runtime's functions: backend_runtime, which
/// the runtime half reads alone), its host part (preprocess, options) and its partitioning
/// part. Each fact is stored once.
struct backend_lowering {
  std::uint32_t abi = backend_lowering_abi;  // first, so that any layout can read it
  const backend_runtime* runtime = nullptr;   // name, payload version, signatures, compile/execute
  const char* (*type_name)() = nullptr;       // the backend's C++ type (mangled; c10::demangle it)
  preprocess_trampoline preprocess = nullptr;
  options_form form = options_form::typed;
  /// A method's spec -> its decoded options (an options_t<B>), unknown keys warned about where
  /// B ignores them and rejected otherwise.
  std::shared_ptr<const void> (*decode_options)(const c10::IValue& spec, const error_context& where) = nullptr;
  /// The spec of default-constructed options: what a region whose method has no options gets.
  c10::IValue (*default_spec)() = nullptr;
  std::vector<option_info> (*describe_options)() = nullptr;
  partition_backend partition{};

  std::string_view name() const { return runtime->name; }
  std::int64_t payload_version() const { return runtime->payload_version; }
  std::span<const signature_record> signatures() const { return runtime->signatures; }
  /// Whether B can lower partially: it declares `static bool supports(const torch::jit::Node*)`.
  bool partitions() const { return partition.supports != nullptr; }
};

template <class Options>
std::vector<option_info> describe_options() {
  std::vector<option_info> described;
  if constexpr (!is_untyped_options<Options>) {
    const Options defaults{};
    boost::hana::for_each(boost::hana::accessors<Options>(), [&](auto pair) {
      const auto& field = boost::hana::second(pair)(defaults);
      using field_type = std::remove_cvref_t<decltype(field)>;
      using value_type = typename option_field<field_type>::value_type;
      option_info info{boost::hana::to<const char*>(boost::hana::first(pair)), std::string(ivalue_caster<value_type>::name.view()),
                       option_field<field_type>::is_required, {}};
      if constexpr (option_field<field_type>::is_required) {
        if (field.has_value()) info.default_value = ivalue_caster<value_type>::cast(field.value());
      } else {
        info.default_value = ivalue_caster<value_type>::cast(field);
      }
      described.push_back(std::move(info));
    });
  }
  return described;
}

template <class B>
constexpr std::size_t backend_min_region_size() {
  if constexpr (requires { B::min_region_size; })
    return static_cast<std::size_t>(B::min_region_size);
  else
    return 1;
}

template <class B>
constexpr bool backend_owns_parameters() {
  if constexpr (requires { B::owns_parameters; })
    return static_cast<bool>(B::owns_parameters);
  else
    return false;
}

template <class B>
constexpr bool backend_channels_last() {
  if constexpr (requires { B::channels_last; })
    return static_cast<bool>(B::channels_last);
  else
    return false;
}

template <class B>
constexpr partition_backend partition_backend_of() {
  if constexpr (backend_declares_support<B>) {
    accepts_region_function accepts = nullptr;
    if constexpr (backend_accepts_regions<B>) accepts = &accepts_region_verdict<B>;
    return {&B::supports, accepts, backend_min_region_size<B>(), backend_owns_parameters<B>(), backend_channels_last<B>()};
  } else {
    return {};
  }
}

/// The function pointers of B that the non-template lowering calls.
template <class B>
struct lowering_of {
  static std::shared_ptr<const void> decode(const c10::IValue& spec, const error_context& where) {
    return std::make_shared<const options_t<B>>(decode_backend_options<B>(spec, where, unknown_option_keys::warn));
  }
  static c10::IValue default_spec() { return encode_options(options_t<B>{}); }
  static constexpr options_form form = std::is_same_v<options_t<B>, no_options>    ? options_form::none
                                       : std::is_same_v<options_t<B>, raw_options> ? options_form::raw
                                                                                    : options_form::typed;

  static const char* type_name() { return typeid(B).name(); }

  // Constant-initialized (no dynamic initializer), so that a registration run by another static
  // initializer never sees it unset.
  static constexpr backend_lowering value{backend_lowering_abi,
                                             &runtime_of<B>::value,
                                             &type_name,
                                             &preprocess_units_with<B>,
                                             form,
                                             &decode,
                                             &default_spec,
                                             &describe_options<options_t<B>>,
                                             partition_backend_of<B>()};
};

/// B's record: the one object through which every non-template part (lowering, partial
/// lowering, the Python package, LibTorch's registry) knows B; its runtime part is
/// runtime_of<B>::value, which a runtime-only program reads alone.
template <class B>
inline constexpr const backend_lowering& record_of = lowering_of<B>::value;

/// The host funnel: every route that lowers plans here (lower<B> and the Python package through
/// lower_methods, each region of lower_partially<B>, LibTorch's preprocess registry: its
/// codegen_backend_module and Python's torch._C._jit_to_backend). The request is checked (str
/// keys, methods that exist, not empty), each unit's schema, execute signature and operator are
/// selected, input specs applied, and its options decoded once (unknown keys warned about here),
/// all before any preprocessing.
TORCH_DELEGATE_DECL lowering_plan plan_request(const backend_lowering& lowering, const torch::jit::Module& module,
                                               const c10::impl::GenericDict& method_compile_spec,
                                               bool fallback_when_unavailable, const input_specs* inputs);

/// The preprocess function in LibTorch's signature, for LibTorch's registry: the funnel, then
/// preprocess (LibTorch then generates the module itself).
template <class B>
c10::IValue preprocess_for_libtorch(const torch::jit::Module& module, const c10::Dict<c10::IValue, c10::IValue>& spec,
                                    const torch::jit::BackendDebugHandleGenerator& generate_debug_handles) {
  const backend_lowering& lowering = record_of<B>;
  return preprocess_units(plan_request(lowering, module, spec, /*fallback_when_unavailable=*/false, nullptr),
                          lowering.payload_version(), lowering.preprocess, module, generate_debug_handles);
}

/// Publishes a backend's lowering process-wide (see the top of this file). Idempotent.
TORCH_DELEGATE_INTERNAL void publish_lowering(const backend_lowering& lowering);

/// The lowering of the backend registered as `name` in this process (by whichever shared object
/// registered it); nullptr when none is. An entry of another layout is an error saying to rebuild.
TORCH_DELEGATE_DECL const backend_lowering* find_lowering(std::string_view name);

/// A priority list of backends (lowering to several): a node goes to the first that takes it.
using backend_list = std::vector<const backend_lowering*>;

/// "xnnpack, pointwise_fusion": a priority list's names, as reports and errors give them.
TORCH_DELEGATE_INTERNAL std::string names_of(const backend_list& backends);

/// Every backend lowering published in this process, by name.
TORCH_DELEGATE_DECL std::vector<const backend_lowering*> published_lowerings();

/// The published lowering of `name`, or an error naming the backends that are registered and
/// how to register one (`who`: the function asking, e.g. "torch_delegate.lower").
TORCH_DELEGATE_DECL const backend_lowering& lowering_named(std::string_view name, std::string_view who);

}  // namespace detail

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/backend_lowering.ipp>
#endif
