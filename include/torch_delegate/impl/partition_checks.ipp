// Definitions for detail/partition_checks.hpp: every check of a partial-lowering request.
#pragma once

#include <torch_delegate/detail/partition_checks.hpp>
#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/detail/lowering_plan.hpp>
#include <torch_delegate/detail/shape_ranges.hpp>
#include <torch_delegate/partition.hpp>

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace torch_delegate::detail {

// The one check that a backend can lower partially (every route: lower_partially<B>, the Python
// package's lower and plan; delegation_plan<B> and lower_partially<B> also refuse to compile for
// such a backend, with the same fix).
inline void require_partitions(const backend_lowering& lowering) {
  if (!lowering.partitions())
    fail({lowering.name(), {}}, "this backend cannot lower partially: it declares no 'static bool supports(const "
                                "torch::jit::Node*)' (docs/partial-lowering.md); lower whole methods instead");
}

// At least one backend, each able to partition, no backend twice.
inline void check_backend_list(const backend_list& backends) {
  if (backends.empty()) fail({"torch-delegate", {}}, "partial lowering needs at least one backend, got an empty list");
  std::set<std::string_view> seen;
  for (const backend_lowering* backend : backends) {
    require_partitions(*backend);
    if (!seen.insert(backend->name()).second)
      fail({backend->name(), {}}, "the backend is listed twice in the priority list (" + names_of(backends) + ")");
  }
}

// Each method that options or inputs are given for (`what`) is partitioned.
inline void check_given_for_partitioned(std::string_view backend, std::string_view what, const std::string& method,
                                        const partition_options& options) {
  if (std::find(options.methods.begin(), options.methods.end(), method) == options.methods.end())
    fail({backend, method}, std::string(what) + " given for a method that is not partitioned (partition_options::methods: " +
                                comma_separated(options.methods) + ")");
}

// One compile spec per backend, each keyed by method names, each a partitioned method.
inline void check_specs(const backend_list& backends, const std::vector<c10::impl::GenericDict>& specs,
                        const partition_options& options) {
  if (specs.size() != backends.size())
    fail({backends.front()->name(), {}}, "one compile spec per backend: " + std::to_string(backends.size()) + " backends, " +
                                             std::to_string(specs.size()) + " specs");
  for (std::size_t k = 0; k < backends.size(); ++k) {
    const backend_lowering& lowering = *backends[k];
    std::vector<std::string> option_methods;
    for (const auto& entry : specs[k]) {
      if (!entry.key().isString())
        fail({lowering.name(), {}}, "the compile spec's keys must be method names (str), got " + entry.key().type()->annotation_str());
      option_methods.push_back(entry.key().toStringRef());
    }
    for (const std::string& method : option_methods)
      check_given_for_partitioned(lowering.name(), "compile options are", method, options);
  }
}

// Every path in keep_submodules and lower_submodules names a submodule of `module`.
inline void check_submodule_paths(const backend_lowering& backend, const torch::jit::Module& module,
                                  const partition_options& options) {
  std::set<std::string> known;
  for (const torch::jit::NameModule& named : module.named_modules())
    if (!named.name.empty()) known.insert(named.name);
  for (const auto& [knob, paths] : {std::pair{"keep_submodules", &options.keep_submodules},
                                    std::pair{"lower_submodules", &options.lower_submodules}})
    for (const std::string& path : *paths)
      if (!known.count(path))
        fail({backend.name(), {}}, std::string(knob) + ": '" + path + "' is not a submodule of " +
                                     module.type()->name()->qualifiedName() + " (its submodules: " +
                                     (known.empty() ? "none" : comma_separated(known)) + ")");
}

// The knobs of example inputs and of tuning, each with what it needs.
inline void check_option_values(const backend_list& backends, const partition_options& options) {
  const backend_lowering& first = *backends.front();
  if (options.measure && options.example_inputs.empty())
    fail({first.name(), {}}, "measure times each candidate region on the values example_inputs give it, and none are "
                             "given: give example_inputs (the arguments of each method to time), or leave measure off");
  if (options.on_other_shapes != other_shapes::error && options.on_other_shapes != other_shapes::automatic &&
      options.example_inputs.empty())
    fail({first.name(), {}}, "on_other_shapes: it applies to the shapes recorded from example_inputs, and none are given");
  for (const backend_lowering* backend : backends)
    if (options.on_other_shapes == other_shapes::replan && !backend->runtime->replan)
      fail({backend->name(), {}}, "on_other_shapes = replan: the backend does not re-plan regions (it has no "
                                  "'Handle replan(Handle&, const torch_delegate::given_inputs&)'); use other_shapes::torchscript "
                                  "(run the region's TorchScript for other shapes) or other_shapes::error");
  if (!(options.min_gain >= 0.0 && options.min_gain < 1.0)) {
    std::ostringstream given;
    given << options.min_gain;
    fail({first.name(), {}}, "min_gain is a share of the method's time, in [0, 1) (0.01: 1 %); got " + given.str());
  }
  if (!(options.measure_time_limit_s >= 0.0) || options.measure_time_limit_s == std::numeric_limits<double>::infinity()) {
    std::ostringstream given;
    given << options.measure_time_limit_s;
    fail({first.name(), {}}, "measure_time_limit_s is the seconds a measured lowering may spend measuring, finite and at least 0 "
                             "(0: no limit); got " + given.str());
  }
  if (options.on_other_shapes == other_shapes::replan && options.max_replans == 0)
    fail({first.name(), {}}, "on_other_shapes = replan with max_replans = 0: no shape could be kept; give at least 1");
}

// The trailing arguments not given take their defaults from the method's schema, as in a call
// (nn.TransformerEncoder's forward(src, mask=None, src_key_padding_mask=None) with (x,)).
TORCH_DELEGATE_INTERNAL partition_options with_default_example_inputs(const torch::jit::Module& module,
                                                                      const partition_options& options) {
  partition_options completed = options;
  for (auto& [method, inputs] : completed.example_inputs) {
    const auto found = module.find_method(method);
    if (!found) continue;  // named in the error of the check that needs it
    const auto& schema = found->function().getSchema().arguments();
    for (std::size_t i = inputs.size() + 1; i < schema.size() && schema[i].default_value(); ++i)
      inputs.push_back(*schema[i].default_value());
  }
  return completed;
}

TORCH_DELEGATE_INTERNAL void check_partition_request(const backend_list& backends, const torch::jit::Module& module,
                                                     const partition_options& options,
                                                     const std::vector<c10::impl::GenericDict>* specs) {
  check_backend_list(backends);
  const backend_lowering& first = *backends.front();
  if (specs) check_specs(backends, *specs, options);
  // Lowering only: a plan is one measured lowering, with no order to choose.
  if (specs && options.choose_order && !options.measure)
    fail({first.name(), {}}, "choose_order compares measured lowerings: set measure (with example_inputs) too");
  check_submodule_paths(first, module, options);
  check_option_values(backends, options);
  check_shape_ranges(first.name(), options);
  for (const auto& [method, inputs] : options.example_inputs)
    check_given_for_partitioned(first.name(), "example_inputs are", method, options);
  for (const std::string& method : options.methods) schema_of(module, method, {first.name(), method});
}

}  // namespace torch_delegate::detail
