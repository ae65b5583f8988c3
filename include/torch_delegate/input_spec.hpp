// Input specs (Torch-TensorRT's `Input`): the dtype and shape each tensor argument of a method
// will have, declared when it is lowered. preprocess then sees complete tensor types in the
// unit's graph, and a call whose tensors do not match fails with a clear error before the
// backend runs. A size of -1 accepts any size in that dimension (the backend's dynamic path).
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace torch_delegate {

/// What one tensor argument must be.
struct tensor_spec {
  std::vector<std::int64_t> sizes;  // -1: any size in that dimension
  c10::ScalarType dtype = c10::ScalarType::Float;
  /// The memory layout of a static spec: Contiguous (NCHW for a 4-d tensor), ChannelsLast (NCHW
  /// sizes, NHWC memory), or nullopt for any strides (the backend takes what it is given).
  std::optional<c10::MemoryFormat> memory_format = c10::MemoryFormat::Contiguous;

  /// The spec of an example input: its sizes, dtype and layout (channels-last when it is laid out
  /// so and not also contiguous; any strides when it is neither).
  TORCH_DELEGATE_DECL static tensor_spec like(const at::Tensor& example);
  bool operator==(const tensor_spec&) const = default;

  /// Every size known (no -1): preprocess sees a complete type in its memory format, and a call
  /// must pass a tensor laid out so.
  bool is_static() const {
    for (std::int64_t size : sizes)
      if (size < 0) return false;
    return true;
  }
  /// Whether `tensor` has this dtype, this many dimensions and these sizes (-1: any), and is laid
  /// out in memory_format when the spec is static.
  TORCH_DELEGATE_DECL bool matches(const at::Tensor& tensor) const;
  /// "Float [8, -1]", "Float [8, 4] contiguous", "Float [1, 32, 112, 112] channels_last".
  TORCH_DELEGATE_DECL std::string to_string() const;
  /// "Float [8, 3]": a tensor's dtype and sizes, as errors show what was given.
  TORCH_DELEGATE_DECL static std::string describe(c10::ScalarType dtype, c10::IntArrayRef sizes);
};

/// The sizes one tensor argument may take (Torch-TensorRT's `Input(min_shape, opt_shape,
/// max_shape)`): each dimension from `min` to `max`, both included. The example input given for
/// the argument is the typical shape between them (the "opt" shape: measured partitioning times
/// there). partition_options::shape_ranges declares them.
struct shape_range {
  std::vector<std::int64_t> min;
  std::vector<std::int64_t> max;
  bool operator==(const shape_range&) const = default;

  /// Whether `sizes` has this many dimensions, each within its bounds.
  bool contains(c10::IntArrayRef sizes) const {
    if (sizes.size() != min.size() || sizes.size() != max.size()) return false;
    for (std::size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d] < min[d] || sizes[d] > max[d]) return false;
    return true;
  }
  /// "[1..32, 3, 224, 224]": a dimension whose bounds are equal shows its one size.
  std::string to_string() const {
    std::string text = "[";
    for (std::size_t d = 0; d < min.size() && d < max.size(); ++d) {
      text += (d ? ", " : "") + std::to_string(min[d]);
      if (max[d] != min[d]) text += ".." + std::to_string(max[d]);
    }
    return text + "]";
  }
};

/// Per method, one entry per argument (`self` excluded): a tensor_spec for a Tensor argument,
/// std::nullopt for an argument left unchecked (any type).
using input_specs = std::map<std::string, std::vector<std::optional<tensor_spec>>>;

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/input_spec.ipp>
#endif
