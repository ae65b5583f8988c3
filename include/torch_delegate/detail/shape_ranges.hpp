// Declared shape ranges (partition_options::shape_ranges): the request's checks, the check at a
// method's entry where other shapes are an error, and the lowered methods run at the ranges' ends
// against the original at lowering.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <string_view>

namespace torch_delegate {
struct partition_options;
}

namespace torch_delegate::detail {

/// The errors of a request's shape_ranges (its example inputs completed by their defaults): a
/// method with ranges and no example inputs, more ranges than arguments, a range for an argument
/// whose example is not a tensor, bounds of another rank than the example or not around it, and
/// other_shapes::torchscript.
TORCH_DELEGATE_INTERNAL void check_shape_ranges(std::string_view backend, const partition_options& options);

/// Whether a lowering's regions re-plan other shapes under `options` although on_other_shapes is
/// other_shapes::error: declared ranges are served, and each method's entry check refuses the rest.
TORCH_DELEGATE_INTERNAL bool ranges_replanned_under_error(const partition_options& options);

/// With other_shapes::error and declared ranges: the check at the start of `graph` (the rewritten
/// `method`) that each tensor argument with an example has sizes within its range (the example's
/// own sizes where none is declared), else the error that names the argument, its sizes and the
/// range. Saved with the method; nothing inserted otherwise.
TORCH_DELEGATE_INTERNAL void insert_range_check(torch::jit::Graph& graph, const c10::FunctionSchema& schema, const std::string& method,
                                                const partition_options& options);

/// The lowered module's record of the declared ranges (names::shape_ranges_attribute), which
/// torch_delegate.warm_up reads to plan them again after a load; nothing where none was declared.
TORCH_DELEGATE_INTERNAL void record_shape_ranges(torch::jit::Module& lowered, const partition_options& options);

/// Each method with declared ranges, lowered (`lowered`), run at the ranges' ends (every declared
/// argument at its min, then at its max; the others as their examples) against `module`'s method
/// on the same values: an error naming the end where a region cannot plan it, or where a result
/// is further than 1e-3 of the largest magnitude from the original's. The plans stay.
TORCH_DELEGATE_INTERNAL void check_at_range_ends(std::string_view backend, const torch::jit::Module& module,
                                                 const torch::jit::Module& lowered, const partition_options& options);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/shape_ranges.ipp>
#endif
