// The checks of a partial-lowering request, in one place: every error about what was asked (the
// backends, the compile specs, the options, the methods and submodules named) comes before any
// work (no graph copied, no region formed, compiled or timed).
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>

#include <vector>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// Checks a request of partial lowering (`specs`: one {method: spec} per backend) or of a plan
/// (`specs` nullptr), on the user's `module` (errors name its class, not a copy's): at least one
/// backend, each able to partition, none twice; one spec per backend, keyed by partitioned
/// methods; each method and submodule path named exists; example inputs only for partitioned
/// methods; on_other_shapes, max_replans, min_gain in range; measure with example inputs;
/// choose_order (lowering) with measure. Throws the first error found.
/// `options` with each method's example inputs completed by the defaults of the arguments after
/// the last one given (as a call is completed), so that (x,) serves forward(x, mask=None).
TORCH_DELEGATE_INTERNAL partition_options with_default_example_inputs(const torch::jit::Module& module,
                                                                      const partition_options& options);

TORCH_DELEGATE_INTERNAL void check_partition_request(const backend_list& backends, const torch::jit::Module& module,
                                                     const partition_options& options,
                                                     const std::vector<c10::impl::GenericDict>* specs);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition_checks.ipp>
#endif
