// Definitions for debug.hpp.
#pragma once

#include <torch_delegate/debug.hpp>

namespace torch_delegate::detail {

TORCH_DELEGATE_INTERNAL std::string describe_handle(const method_debug_info& debug, std::int64_t handle) {
  auto found = debug.locations.find(handle);
  if (found == debug.locations.end()) return "\n(no debug information for debug handle " + std::to_string(handle) + ")";
  const debug_location& where = found->second;
  std::string text = "\nThe failing instruction implements " + where.node_kind + " (debug handle " + std::to_string(handle) + ")";
  if (!where.file_line.empty()) text += " at " + where.file_line;
  text += ":\n";
  for (const std::string& frame : where.call_stack) text += frame;
  return text + where.source;
}

TORCH_DELEGATE_INTERNAL std::string describe_instruction(const method_debug_info* debug, std::int64_t instruction) {
  std::string text;
  const std::vector<std::int64_t> handles = debug ? debug->handles_of(instruction) : std::vector<std::int64_t>{};
  if (handles.empty()) return "\n(no debug information for instruction " + std::to_string(instruction) + ")";
  for (std::int64_t handle : handles) text += describe_handle(*debug, handle);
  return text;
}

}  // namespace torch_delegate::detail
