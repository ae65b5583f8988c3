// The Backend concept: what a plain struct must declare to be a torch-delegate backend.
#pragma once

#include <torch_delegate/convert.hpp>
#include <torch_delegate/detail/backend_traits.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/named_data.hpp>

#include <concepts>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace torch_delegate {

class method_to_lower;  // preprocess.hpp: one method of the module being lowered

/// What a backend's accepts_region may return instead of a bool: whether it takes a candidate
/// region and, when it does not, why. The reason goes into the report ("refused by the backend
/// (3-node region: no convolution or linear)"), where a bare `false` says only the region's size.
/// `return true;` and `return false;` still work.
struct region_verdict {
  region_verdict(bool accept = true) : accepted(accept) {}  // implicit: a bool is a verdict
  /// A refusal and its reason, in a few words ("no convolution or linear").
  static region_verdict refuse(std::string why) {
    region_verdict verdict(false);
    verdict.reason = std::move(why);
    return verdict;
  }
  bool accepted = true;
  std::string reason;  // when refused: why (may be empty)
};

/// ExecuTorch-style preprocess result: the payload plus, per backend instruction id, the debug
/// handles of the original nodes it implements (several for a fused instruction). A backend's
/// preprocess may return this instead of a bare payload; `raise_at` and `record_instruction`
/// then take the backend's instruction ids.
template <class Payload>
struct preprocess_result {
  preprocess_result() = default;
  /// `return {payload, instruction_handles};` keeps compiling warning-free (-Wextra) now that
  /// there is a third member.
  preprocess_result(Payload p, std::map<std::int64_t, std::vector<std::int64_t>> handles = {}, named_data_store data = {})
      : payload(std::move(p)), instruction_handles(std::move(handles)), named_data(std::move(data)) {}

  Payload payload;
  std::map<std::int64_t, std::vector<std::int64_t>> instruction_handles;
  /// Data this unit stores by name (e.g. packed weights): one copy per key and lowered module,
  /// however many units add it; compile reads it with compile_context::named_data().
  named_data_store named_data;
};

/// What a backend's `preprocess_all` returns (ExecuTorch's preprocess_multimethod): one result per
/// unit, in the order it was given the units, plus named data shared by all of them.
template <class Payload>
struct multi_preprocess_result {
  std::vector<preprocess_result<Payload>> units;
  named_data_store named_data;
};

/// One unit as `preprocess_all` sees it: the unit and its decoded options.
template <class Options>
struct unit_with_options {
  const method_to_lower& unit;
  const Options& options;
};

/// What a generic `execute` receives: the method's arguments, in schema order.
using inputs = std::span<const c10::IValue>;

/// The list of typed `execute` signatures of a backend whose `execute` is overloaded:
///   using execute_signatures = torch_delegate::signatures<at::Tensor(at::Tensor, at::Tensor), ...>;
template <class... Signatures>
struct signatures {};

/// Names the result type of an execute overload whose arguments another overload shares: C++
/// cannot overload on the result alone, so such an overload takes this tag after the handle.
///   at::Tensor execute(Handle&, const at::Tensor& x, const at::Tensor& h);
///   std::tuple<at::Tensor, at::Tensor> execute(Handle&, torch_delegate::returning<std::tuple<at::Tensor, at::Tensor>>,
///                                              const at::Tensor& x, const at::Tensor& h);
/// with both listed in `execute_signatures`. torch-delegate passes the tag when an overload takes it.
template <class Result>
struct returning {
  using type = Result;
};

/// Options of a backend that declares none. Such a backend accepts any per-method compile spec
/// (LibTorch passes it through untouched) and keeps it verbatim in `__method_compile_spec`.
struct no_options {};

/// Options of a backend that reads its method's compile spec itself: `value` is the method's
/// entry of LibTorch's method_compile_spec exactly as given (any IValue: a dict, a string...).
///   using options = torch_delegate::raw_options;
///   static Handle compile(const Payload&, const torch_delegate::raw_options& spec);
struct raw_options {
  c10::IValue value;
};

/// The options type of a backend (`B::options`, or `no_options`).
template <class B>
using options_t = typename detail::options_of<B>::type;

/// The payload type that `preprocess` produces and `compile` consumes.
template <class B>
using payload_t = typename detail::payload_of<B>::type;

// -- named sub-concepts ----------------------------------------------------------------------

/// `static constexpr std::string_view name = "my_backend";`
template <class B>
concept backend_has_name = requires {
  { B::name } -> std::convertible_to<std::string_view>;
};

/// `static bool is_available();` (or a member function).
template <class B>
concept backend_reports_availability = requires(B& backend) {
  { backend.is_available() } -> std::same_as<bool>;
};

namespace detail {
struct compile_context_access;
}

/// What `compile` is told besides the payload and the options, when it asks for it (a last
/// parameter `const torch_delegate::compile_context&`). Passed explicitly: no thread-local state.
/// Made by torch-delegate for each method it compiles; a backend reads it through its accessors.
class compile_context {
 public:
  /// The backend's name.
  std::string_view backend() const { return backend_; }
  /// The method being compiled.
  std::string_view method() const { return method_; }
  /// The version this payload was written with (see payload_version).
  std::int64_t payload_version() const { return payload_version_; }

  /// The lowered module's named data (what preprocess stored, shared by every method),
  /// read-only and without copies; empty when there is none.
  const named_data_map& named_data() const {
    static const named_data_map none;
    return named_data_ ? *named_data_ : none;
  }
  /// Asks torch-delegate to drop the data of `key` once every method of the module is compiled,
  /// for a backend that keeps its own copy (so the weights are not resident twice). Honoured
  /// when a saved module is loaded; in the process that lowers, the data is kept so that the
  /// module can still be saved. A loaded module whose data was released refuses to be saved.
  void release_named_data(const std::string& key) const {
    if (release_requests_) release_requests_->insert(key);
  }
  /// How many other input shapes this method may be re-planned for at call time (0: none). Not
  /// 0 when it was partially lowered with `on_other_shapes = other_shapes::replan` and the
  /// backend has `replan`: compile then keeps what replan needs (the weights, not released).
  std::size_t max_replans() const { return max_replans_; }

 private:
  friend struct detail::compile_context_access;
  compile_context(std::string_view backend, std::string_view method, std::int64_t payload_version,
                  const named_data_map* named_data, std::set<std::string>* release_requests, std::size_t max_replans)
      : backend_(backend), method_(method), payload_version_(payload_version), named_data_(named_data),
        release_requests_(release_requests), max_replans_(max_replans) {}

  std::string_view backend_;
  std::string_view method_;
  std::int64_t payload_version_ = 1;
  const named_data_map* named_data_ = nullptr;
  std::set<std::string>* release_requests_ = nullptr;
  std::size_t max_replans_ = 0;
};

namespace detail {
/// The one place that makes a compile_context (runtime_objects.ipp, for each method it compiles).
struct compile_context_access {
  static compile_context make(std::string_view backend, std::string_view method, std::int64_t payload_version,
                              const named_data_map* named_data, std::set<std::string>* release_requests,
                              std::size_t max_replans = 0) {
    return compile_context(backend, method, payload_version, named_data, release_requests, max_replans);
  }
};
}  // namespace detail

namespace detail {
/// The forms of `compile`, in the order torch-delegate looks for them.
enum class compile_form { none, options_and_context, context, options, plain };

template <class B>
constexpr compile_form compile_form_of() {
  if constexpr (std::is_void_v<payload_t<B>>) {
    return compile_form::none;
  } else if constexpr (requires(B& b, const payload_t<B>& p, const options_t<B>& o, const compile_context& c) {
                         { b.compile(p, o, c) } -> std::move_constructible;
                       }) {
    return compile_form::options_and_context;
  } else if constexpr (requires(B& b, const payload_t<B>& p, const compile_context& c) {
                         { b.compile(p, c) } -> std::move_constructible;
                       }) {
    return compile_form::context;
  } else if constexpr (requires(B& b, const payload_t<B>& p, const options_t<B>& o) {
                         { b.compile(p, o) } -> std::move_constructible;
                       }) {
    return compile_form::options;
  } else if constexpr (requires(B& b, const payload_t<B>& p) {
                         { b.compile(p) } -> std::move_constructible;
                       }) {
    return compile_form::plain;
  } else {
    return compile_form::none;
  }
}

/// Calls B's compile in whichever form it has.
template <class B>
decltype(auto) call_compile(B& backend, const payload_t<B>& payload, const options_t<B>& options,
                            const compile_context& context) {
  constexpr compile_form form = compile_form_of<B>();
  if constexpr (form == compile_form::options_and_context) {
    return backend.compile(payload, options, context);
  } else if constexpr (form == compile_form::context) {
    return backend.compile(payload, context);
  } else if constexpr (form == compile_form::options) {
    return backend.compile(payload, options);
  } else {
    return backend.compile(payload);
  }
}
}  // namespace detail

/// `compile(const Payload&[, const Options&][, const compile_context&]) -> Handle`.
template <class B>
concept backend_compiles = detail::compile_form_of<B>() != detail::compile_form::none;

namespace detail {
template <class B>
struct handle_of {
  using type = void;
};
template <class B>
  requires backend_compiles<B>
struct handle_of<B> {
  using type = std::remove_cvref_t<decltype(call_compile(std::declval<B&>(), std::declval<const payload_t<B>&>(),
                                                         std::declval<const options_t<B>&>(),
                                                         std::declval<const compile_context&>()))>;
};
}  // namespace detail

/// The backend's own compiled handle type: what `compile` returns.
template <class B>
using handle_t = typename detail::handle_of<B>::type;

/// What a re-planned call passes to `replan`: per argument of the method, the spec of the tensor
/// given (its dtype, sizes and layout), std::nullopt for an argument that is not a tensor.
using given_inputs = std::vector<std::optional<tensor_spec>>;

/// `Handle replan(Handle& compiled, const torch_delegate::given_inputs& given)` (optional): a
/// handle for other input shapes than those `compiled` was compiled for. Called when a region
/// partially lowered with `on_other_shapes = other_shapes::replan` is called with tensors that do
/// not match its recorded input specs; torch-delegate keeps the result (a bounded cache per
/// region, `partition_options::max_replans`). compile_context::max_replans() tells compile to
/// keep what replan needs.
template <class B>
concept backend_replans = requires(B& backend, handle_t<B>& handle, const given_inputs& given) {
  { backend.replan(handle, given) } -> std::same_as<handle_t<B>>;
};

/// `std::vector<c10::IValue> execute(Handle&, torch_delegate::inputs)`: runs any signature.
template <class B>
concept backend_executes_generically = requires(B& backend, handle_t<B>& handle, inputs args) {
  { backend.execute(handle, args) } -> std::same_as<std::vector<c10::IValue>>;
};

namespace detail {
template <class B, class Signature>
struct signature_is_executable : std::false_type {};
template <class B, class R, class... A>
struct signature_is_executable<B, R(A...)> {
  static constexpr bool tagged = requires(B& backend, handle_t<B>& handle, A&&... args) {
    { backend.execute(handle, returning<R>{}, std::forward<A>(args)...) } -> std::same_as<R>;
  };
  static constexpr bool value = tagged || requires(B& backend, handle_t<B>& handle, A&&... args) {
    { backend.execute(handle, std::forward<A>(args)...) } -> std::same_as<R>;
  };
};

/// The one way torch-delegate calls a typed execute: with the returning<R> tag when the
/// backend's overload takes it, else plainly.
template <class R, class... A, class B, class... Args>
R call_execute(B& backend, handle_t<B>& handle, Args&&... args) {
  if constexpr (signature_is_executable<B, R(A...)>::tagged) {
    return backend.execute(handle, returning<R>{}, std::forward<Args>(args)...);
  } else {
    return backend.execute(handle, std::forward<Args>(args)...);
  }
}

template <class B>
struct listed_signatures {
  using type = signatures<>;
};
template <class B>
  requires requires { typename B::execute_signatures; }
struct listed_signatures<B> {
  using type = typename B::execute_signatures;
};

// A unique, non-template `execute(Handle&, Args...)` declares its own signature.
template <class Arguments, class R>
struct signature_from_arguments;
template <class H, class... A, class R>
struct signature_from_arguments<std::tuple<H, A...>, R> {
  using type = R(std::remove_cvref_t<A>...);
};
template <class H, class T, class... A, class R>
struct signature_from_arguments<std::tuple<H, returning<T>, A...>, R> {
  using type = R(std::remove_cvref_t<A>...);
};

template <class B>
concept has_unique_execute =
    requires { &B::execute; } && callable_traits<decltype(&B::execute)>::deducible;

template <class B>
struct deduced_signatures {
  using type = typename listed_signatures<B>::type;
};
template <class B>
  requires(!requires { typename B::execute_signatures; } && has_unique_execute<B> &&
           !backend_executes_generically<B>)
struct deduced_signatures<B> {
  using traits = callable_traits<decltype(&B::execute)>;
  using type = signatures<typename signature_from_arguments<typename traits::arguments, typename traits::result>::type>;
};
}  // namespace detail

/// The typed `execute` signatures of a backend: listed in `B::execute_signatures`, or
/// deduced from its single `execute`.
template <class B>
using execute_signatures_t = typename detail::deduced_signatures<B>::type;

namespace detail {
template <class B, class List>
struct all_signatures_executable;
template <class B, class... S>
struct all_signatures_executable<B, signatures<S...>> {
  static constexpr bool value = (signature_is_executable<B, S>::value && ...);
  static constexpr std::size_t count = sizeof...(S);
};
}  // namespace detail

/// Typed `execute` overloads, each listed or deduced, each callable as declared.
template <class B>
concept backend_executes_typed = detail::all_signatures_executable<B, execute_signatures_t<B>>::count > 0 &&
                                 detail::all_signatures_executable<B, execute_signatures_t<B>>::value;

template <class B>
concept backend_executes = backend_executes_typed<B> || backend_executes_generically<B>;

/// The version of the payload format this build of the backend writes
/// (`static constexpr std::int64_t payload_version = N;`, default 1), and the oldest one it
/// still reads (`oldest_payload_version`, default: only its own).
template <class B>
constexpr std::int64_t payload_version_of() {
  if constexpr (requires { B::payload_version; }) {
    return B::payload_version;
  } else {
    return 1;
  }
}
template <class B>
constexpr std::int64_t oldest_payload_version_of() {
  if constexpr (requires { B::oldest_payload_version; }) {
    return B::oldest_payload_version;
  } else {
    return payload_version_of<B>();
  }
}

/// A torch-delegate backend, as seen by a runtime (a process that loads and runs lowered
/// modules). See docs/backend-concept.md.
template <class B>
concept Backend = std::is_default_constructible_v<B> && backend_has_name<B> &&
                  backend_reports_availability<B> && backend_compiles<B> && backend_executes<B>;

namespace detail {
template <class R, class Payload>
concept preprocess_output = std::convertible_to<R, Payload> || std::same_as<std::remove_cvref_t<R>, preprocess_result<Payload>>;
}  // namespace detail

/// `preprocess(const method_to_lower&, const Options&) -> Payload` (or a preprocess_result<Payload>),
/// or without options.
template <class B>
concept backend_preprocesses =
    requires(B& backend, const method_to_lower& method, const options_t<B>& options) {
      { backend.preprocess(method, options) } -> detail::preprocess_output<payload_t<B>>;
    } || requires(B& backend, const method_to_lower& method) {
      { backend.preprocess(method) } -> detail::preprocess_output<payload_t<B>>;
    };

/// `preprocess_all(std::span<const unit_with_options<Options>>) -> multi_preprocess_result<Payload>`:
/// every unit of the module at once (ExecuTorch's preprocess_multimethod). A backend with it
/// needs no per-unit preprocess; one with both is given every unit through preprocess_all.
template <class B>
concept backend_preprocesses_all = requires(B& backend, std::span<const unit_with_options<options_t<B>>> units) {
  { backend.preprocess_all(units) } -> std::same_as<multi_preprocess_result<payload_t<B>>>;
};

/// A backend with its host side: what `lower<B>` needs.
template <class B>
concept HostBackend = Backend<B> && (backend_preprocesses<B> || backend_preprocesses_all<B>);

}  // namespace torch_delegate
