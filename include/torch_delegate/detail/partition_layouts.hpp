// What example inputs record at a region's boundary: its input specs (dtype and sizes), and, for
// a backend that works in channels-last, the layout conversions its boundaries need.
#pragma once

#include <torch_delegate/detail/backend_lowering.hpp>
#include <torch_delegate/detail/config.hpp>
#include <torch_delegate/detail/regions.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/report.hpp>

#include <cstddef>
#include <optional>
#include <vector>

namespace torch_delegate::detail {

/// A region's input specs, one per input: the dtype and sizes of an input whose type is complete
/// (recorded from example inputs), with any layout (at run time a value's strides depend on who
/// made it: a region of a backend that works in NHWC returns channels-last tensors, and ATen's ops
/// pass that layout on, which the example run in TorchScript does not show); none for the others.
/// Nothing when no input has one.
TORCH_DELEGATE_INTERNAL std::optional<std::vector<std::optional<tensor_spec>>> recorded_specs(const region& formed);

/// For a backend whose regions work in channels-last (B::channels_last): which conversions the
/// boundaries of each region need, in its report, and which uses of its outputs get one. A 4-d
/// input made by another region of the method needs none (it is channels-last already); one made
/// in TorchScript or passed to the method is converted on entry by the backend; an output read by
/// a TorchScript convolution (ATen's convolutions are slower on channels-last input here) gets a
/// conversion to contiguous before it (region::to_contiguous). Other TorchScript nodes take
/// channels-last tensors as they are. Needs the ranks that example inputs give.
/// With several backends, `regions` holds every backend's: those of the backend at `position`
/// (backend_of) are placed; a node in any region is no TorchScript consumer.
TORCH_DELEGATE_INTERNAL void place_conversions(const backend_lowering& backend, std::vector<region>& regions,
                                               method_delegation& entry, const std::vector<std::size_t>& backend_of,
                                               std::size_t position);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/partition_layouts.ipp>
#endif
