// Definitions for input_spec.hpp.
#pragma once

#include <torch_delegate/input_spec.hpp>

namespace torch_delegate {

TORCH_DELEGATE_DECL bool tensor_spec::matches(const at::Tensor& tensor) const {
  if (!tensor.defined() || tensor.scalar_type() != dtype || tensor.dim() != static_cast<std::int64_t>(sizes.size()))
    return false;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != -1 && sizes[d] != tensor.size(static_cast<std::int64_t>(d))) return false;
  return !is_static() || !memory_format || tensor.is_contiguous(*memory_format);
}

TORCH_DELEGATE_DECL tensor_spec tensor_spec::like(const at::Tensor& example) {
  tensor_spec spec{example.sizes().vec(), example.scalar_type()};
  if (example.is_contiguous()) return spec;
  if (example.dim() == 4 && example.is_contiguous(c10::MemoryFormat::ChannelsLast))
    spec.memory_format = c10::MemoryFormat::ChannelsLast;
  else
    spec.memory_format = std::nullopt;
  return spec;
}

TORCH_DELEGATE_DECL std::string tensor_spec::describe(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  std::string text = std::string(c10::toString(dtype)) + " [";
  for (std::size_t d = 0; d < sizes.size(); ++d) text += (d ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

TORCH_DELEGATE_DECL std::string tensor_spec::to_string() const {
  if (!is_static() || !memory_format) return describe(dtype, sizes);
  return describe(dtype, sizes) + (*memory_format == c10::MemoryFormat::ChannelsLast ? " channels_last" : " contiguous");
}

}  // namespace torch_delegate
