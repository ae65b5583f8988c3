// Every name torch-delegate gives something in LibTorch: the TorchBind classes it registers, the
// JIT operators, the classes, attributes and methods of lowered and partially lowered modules.
// Saved modules hold these spellings, so changing one breaks every module saved before: this
// header is their one owner (tests/sources/check_sources.py fails when another source spells one).
// Several are LibTorch's own (codegen_backend_module's layout), kept for compatibility.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace torch_delegate::detail::names {

// -- Attributes of partially lowered modules ----------------------------------------------------
/// The delegation report as text, and as data (report.hpp names them for users).
inline constexpr const char* report_attribute = "_torch_delegate_report";
inline constexpr const char* report_data_attribute = "_torch_delegate_report_data";
/// The declared shape ranges (partition_options::shape_ranges), where some were:
/// Dict[str, List[Optional[List[List[int]]]]], per method one entry per argument, [min, typical, max].
inline constexpr const char* shape_ranges_attribute = "_torch_delegate_shape_ranges";

// -- TorchBind classes ---------------------------------------------------------------------------
/// What the qualified name of every TorchBind class starts with (LibTorch's).
inline constexpr std::string_view torchbind_prefix = "__torch__.torch.classes.";
/// The namespace of backend classes (LibTorch's, for compatibility with its to_backend).
inline constexpr std::string_view backends_namespace = "__backends__";
/// The namespace of our compiled-method (handle) classes.
inline constexpr std::string_view handles_namespace = "__torch_delegate__";

/// "__torch__.torch.classes.<namespace>.<class>"
inline std::string torchbind_class(std::string_view name_space, std::string_view class_name) {
  return std::string(torchbind_prefix) + std::string(name_space) + "." + std::string(class_name);
}
/// "__torch__.torch.classes.__backends__.<backend>": the backend's TorchBind class.
inline std::string backend_class(std::string_view backend) { return torchbind_class(backends_namespace, backend); }
/// What a saved module's code spells before a backend's name: "__torch__.torch.classes.__backends__."
inline std::string backend_class_prefix() { return torchbind_class(backends_namespace, ""); }
/// "<backend>__compiled_method": the class of one compiled method's handle.
inline std::string handle_class_basename(std::string_view backend) { return std::string(backend) + "__compiled_method"; }

// -- JIT operators ----------------------------------------------------------------------------------
/// The namespace of the typed execute operators: "torch_delegate::<backend>_execute_<signature>".
/// Generated code calls them as `torch_delegate.<op>(...)`; saved code spells them
/// `ops.torch_delegate.<op>`.
inline constexpr std::string_view operator_namespace = "torch_delegate";
/// "<backend>_execute_": what every operator name of a backend starts with (without namespace).
inline std::string operator_prefix(std::string_view backend) { return std::string(backend) + "_execute_"; }
/// "<backend>_execute<k>": by position, as modules saved before signature-named operators call them.
inline std::string legacy_operator_basename(std::string_view backend, std::size_t index) {
  return std::string(backend) + "_execute" + std::to_string(index);
}
/// The operator through which a backend's lowering is published process-wide, one overload per
/// backend (what the Python package finds backends by): "torch_delegate::_backend_lowering".
inline std::string lowering_operator() { return std::string(operator_namespace) + "::_backend_lowering"; }
/// How saved code calls an operator of ours: "ops.torch_delegate."
inline std::string saved_operator_prefix() { return "ops." + std::string(operator_namespace) + "."; }

// -- lowered modules (LibTorch's codegen_backend_module layout) ---------------------------------
inline constexpr std::string_view lowered_module_class_prefix = "torch.jit.LoweredModule.";
inline constexpr std::string_view lowered_wrapper_class_prefix = "torch.jit.LoweredWrapper.";
inline constexpr std::string_view processed_module = "__processed_module";
inline constexpr std::string_view method_compile_spec = "__method_compile_spec";
inline constexpr std::string_view backend_object = "__backend";
inline constexpr std::string_view handles = "__handles";
inline constexpr std::string_view backend_debug_info = "__backend_debug_info";
/// The wrapper's attribute that holds the lowered module.
inline constexpr std::string_view lowered_module = "__loweredModule__";

// -- methods torch-delegate adds ------------------------------------------------------------------
/// On lowered modules with availability fallback, and on their wrappers: whether the backend can run.
inline constexpr std::string_view is_available_method = "td_is_available";
/// On the backend's TorchBind class: refuses to save a module whose named data was released.
inline constexpr std::string_view check_saveable_method = "td_check_saveable";

// -- partial lowering -------------------------------------------------------------------------------
/// The attribute of a partially lowered module that holds the regions' lowered child.
inline constexpr std::string_view delegate_attribute = "__delegate";
/// The child of the backend at `position` in a priority list of backends: the first's is
/// delegate_attribute (as with one backend), the others' "__delegate_<backend>".
inline std::string delegate_attribute_of(std::size_t position, std::string_view backend) {
  return position == 0 ? std::string(delegate_attribute) : std::string(delegate_attribute) + "_" + std::string(backend);
}
/// The class of that child before lowering: "__torch__.torch_delegate.Regions.<backend>".
inline std::string regions_class(std::string_view backend) {
  return "__torch__.torch_delegate.Regions." + std::string(backend);
}
/// "<method>_region_<k>": a region's method in the child.
inline std::string region_method(std::string_view method, std::size_t index) {
  return std::string(method) + "_region_" + std::to_string(index);
}
/// Whether `name` is a region's method ("<method>_region_<digits>"), in modules saved by any build.
inline bool is_region_method(std::string_view name) {
  const std::size_t at = name.rfind("_region_");
  if (at == std::string_view::npos || at == 0 || at + 8 == name.size()) return false;
  for (char c : name.substr(at + 8))
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace torch_delegate::detail::names
