// Definitions for input_spec.hpp.
#pragma once

#include <torch_delegate/input_spec.hpp>

namespace torch_delegate {

TORCH_DELEGATE_DECL bool tensor_spec::matches(const at::Tensor& tensor) const {
  if (!tensor.defined() || tensor.scalar_type() != dtype || tensor.dim() != static_cast<std::int64_t>(sizes.size()))
    return false;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != -1 && sizes[d] != tensor.size(static_cast<std::int64_t>(d))) return false;
  return !is_static() || tensor.is_contiguous();
}

TORCH_DELEGATE_DECL std::string tensor_spec::describe(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  std::string text = std::string(c10::toString(dtype)) + " [";
  for (std::size_t d = 0; d < sizes.size(); ++d) text += (d ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

TORCH_DELEGATE_DECL std::string tensor_spec::to_string() const {
  return describe(dtype, sizes) + (is_static() ? " contiguous" : "");
}

}  // namespace torch_delegate
