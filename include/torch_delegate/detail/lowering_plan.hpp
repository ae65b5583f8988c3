// The plan that lowering builds once per delegate unit (its schema, execute signature, operator,
// options decoded once, input specs), and preprocess run over every unit of a plan, type-erased.
// Read by the host funnel (detail/backend_lowering.hpp: plan_request), codegen and partial
// lowering; a backend sees only method_to_lower (preprocess.hpp).
#pragma once

#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/invoker.hpp>
#include <torch_delegate/detail/signature.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/preprocess.hpp>

#include <torch/csrc/jit/backends/backend_detail.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace torch_delegate {

namespace detail {

/// What lowering decides for one delegate unit, once: lowering, preprocess and codegen read it;
/// the class-cache key is derived from it.
struct delegate_unit {
  std::string name;                          // key of the unit in the payload and in __handles
  const c10::FunctionSchema* schema;         // its input and output types (self first)
  c10::IValue spec;                          // its entry of method_compile_spec, as given
  const signature_record* signature;         // the execute signature it calls
  std::string operator_name;                 // the JIT operator of that signature; "" for the generic execute
  std::shared_ptr<const void> options;       // its decoded options (set by lower<B>), else decoded from spec
  std::vector<std::optional<tensor_spec>> inputs;  // declared input specs, one per argument; empty: none

  error_context where(std::string_view backend) const { return {backend, name}; }
};

/// Every delegate unit of one lowering, in spec order.
struct lowering_plan {
  std::string backend;
  std::vector<delegate_unit> units;
  /// Availability fallback (partial lowering): the lowered module loads where the backend is
  /// unavailable (no "Backend is not available." from __setstate__) and answers
  /// td_is_available(), so that its caller runs the original TorchScript instead.
  bool fallback_when_unavailable = false;
  /// Partial lowering with other_shapes::replan: how many other input shapes each unit with
  /// input specs may be re-planned for at call time (0: none).
  std::int64_t max_replans = 0;

  /// `__method_compile_spec`: each unit's spec, by name.
  TORCH_DELEGATE_INTERNAL c10::impl::GenericDict spec() const;
};

/// Plans a lowering: checks the spec (str keys, methods that exist), and per unit takes its schema
/// and selects its execute signature. No preprocessing yet: every error about the request comes
/// before any work.
TORCH_DELEGATE_INTERNAL lowering_plan plan_lowering(std::string_view backend, std::span<const signature_record> signatures,
                                                const torch::jit::Module& module,
                                                const c10::Dict<c10::IValue, c10::IValue>& method_compile_spec);

/// What a backend's preprocess gave for one unit, type-erased.
struct erased_preprocess_result {
  c10::IValue payload;
  std::map<std::int64_t, std::vector<std::int64_t>> instruction_handles;  // empty: ids are debug handles
  named_data_store named_data;
};

/// What a backend's preprocess gave for every unit of a plan (in plan order), plus the named
/// data its preprocess_all shares between them.
struct erased_preprocess_batch {
  std::vector<erased_preprocess_result> units;
  named_data_store shared;
};

/// Preprocesses every unit of a plan with a given backend: per unit (options decoded,
/// preprocess, the payload converted to an IValue), or all at once with its preprocess_all.
using preprocess_trampoline = erased_preprocess_batch (*)(std::span<const method_to_lower> units,
                                                          const lowering_plan& plan);

/// Gives each unit of a plan its declared input specs, checked: every method named exists in the
/// plan, one entry per argument, specs on Tensor arguments only, sizes >= -1.
TORCH_DELEGATE_INTERNAL void apply_input_specs(lowering_plan& plan, const input_specs& inputs);

/// Runs preprocess on every unit of a plan: returns the processed payload (payload_format.hpp).
TORCH_DELEGATE_DECL c10::IValue preprocess_units(const lowering_plan& plan, std::int64_t payload_version,
                                                 preprocess_trampoline preprocess, const torch::jit::Module& module,
                                                 const torch::jit::BackendDebugHandleGenerator& generate_debug_handles);

/// Checks that `module` has `method` and returns its schema.
TORCH_DELEGATE_INTERNAL const c10::FunctionSchema& schema_of(const torch::jit::Module& module, const std::string& method,
                                                         const error_context& where);

/// A copy of a method's graph with every call inlined and the dead code that inlining leaves
/// (the submodules' prim::GetAttr) removed: what preprocess and coverage look at.
TORCH_DELEGATE_DECL std::shared_ptr<torch::jit::Graph> inlined_graph(const torch::jit::Module& module,
                                                                     const std::string& method);

template <class Payload, class Result>
erased_preprocess_result erase_preprocessed(Result&& result) {
  if constexpr (std::is_same_v<std::remove_cvref_t<Result>, preprocess_result<Payload>>) {
    return {ivalue_caster<Payload>::cast(std::move(result.payload)), std::move(result.instruction_handles),
            std::move(result.named_data)};
  } else {
    return {ivalue_caster<Payload>::cast(Payload(std::forward<Result>(result))), {}, {}};
  }
}

/// A unit's options, decoded once by the host funnel (plan_request) for every route.
template <class B>
const options_t<B>& options_of_unit(const delegate_unit& plan) {
  return *static_cast<const options_t<B>*>(plan.options.get());
}

template <class B>
erased_preprocess_batch preprocess_units_with(std::span<const method_to_lower> units, const lowering_plan& plan) {
  erased_preprocess_batch batch;
  B backend;
  if constexpr (backend_preprocesses_all<B>) {
    std::vector<unit_with_options<options_t<B>>> with_options;
    for (std::size_t i = 0; i < units.size(); ++i)
      with_options.push_back({units[i], options_of_unit<B>(plan.units[i])});
    multi_preprocess_result<payload_t<B>> result;
    try {
      result = backend.preprocess_all(std::span<const unit_with_options<options_t<B>>>(with_options));
    } catch (...) {
      rethrow_from_backend({B::name, {}}, "preprocess_all");
    }
    if (result.units.size() != units.size())
      fail({B::name, {}}, "preprocess_all returned " + std::to_string(result.units.size()) + " results for " +
                              std::to_string(units.size()) + " units: it must return one per unit, in order");
    for (auto& unit_result : result.units) batch.units.push_back(erase_preprocessed<payload_t<B>>(std::move(unit_result)));
    batch.shared = std::move(result.named_data);
  } else {
    for (std::size_t i = 0; i < units.size(); ++i) {
      const error_context where = plan.units[i].where(B::name);
      try {
        const options_t<B>& options = options_of_unit<B>(plan.units[i]);
        if constexpr (requires { backend.preprocess(units[i], options); }) {
          batch.units.push_back(erase_preprocessed<payload_t<B>>(backend.preprocess(units[i], options)));
        } else {
          batch.units.push_back(erase_preprocessed<payload_t<B>>(backend.preprocess(units[i])));
        }
      } catch (...) {
        rethrow_from_backend(where, "preprocess");
      }
    }
  }
  return batch;
}

}  // namespace detail

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/lowering_plan.ipp>
#endif
