// torch_delegate._C: the Python package's bindings. Every backend registered in the process
// (by whichever shared object registered it: see detail/backend_lowering.hpp) is lowered by name
// through its published backend_lowering; nothing here is a template over a backend.
//
// Python values become TorchScript values here (options, input specs); modules cross as
// torch._C.ScriptModule (torch's own pybind11 type); errors from C++ become
// torch_delegate.Error with the C++ text (no C++ backtrace), and C++ warnings Python warnings.
#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/load.hpp>
#include <torch_delegate/lower.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/process_memory.hpp>
#include <torch_delegate/report_format.hpp>
#include <torch_delegate/runtime_switches.hpp>
#include <torch_delegate/version.hpp>

#include <c10/util/Type.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind.h>  // the IValue caster: example_inputs
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/functional.h>  // partition_options::progress: a Python callable

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;
namespace td = torch_delegate;

namespace {

/// What torch_delegate.Error carries: the text of a torch-delegate (or LibTorch) error.
struct delegate_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Runs `body` with C++ warnings turned into Python warnings and c10::Errors into
/// torch_delegate.Error; with `release_gil`, without the GIL (a body that touches no Python object).
template <bool release_gil = true, class Body>
auto guarded(Body&& body) {
  torch::PyWarningHandler warnings;
  try {
    std::optional<py::gil_scoped_release> unlocked;
    if constexpr (release_gil) unlocked.emplace();
    return body();
  } catch (const c10::Error& error) {
    warnings.set_in_exception();
    throw delegate_error(error.what_without_backtrace());
  } catch (...) {
    warnings.set_in_exception();
    throw;
  }
}

std::string python_type_name(py::handle value) { return Py_TYPE(value.ptr())->tp_name; }

/// A Python option value -> a TorchScript value, its type inferred (bool, int, float, str,
/// Tensor, lists and dicts of one of them, None).
c10::IValue option_value(py::handle value, const std::string& method, const std::string& key) {
  try {
    return torch::jit::toTypeInferredIValue(value);
  } catch (const std::exception&) {
    throw py::type_error("torch_delegate.lower: option '" + key + "' of method '" + method + "' is a Python " +
                         python_type_name(value) +
                         ", which has no TorchScript type; give a bool, int, float, str, torch.Tensor, or a list or "
                         "dict of one of them");
  }
}

/// One method's entry of a Python spec -> its TorchScript spec. A dict becomes a Dict[str, Any]
/// whose values keep their own types ({"num_threads": 2, "approximate": True}), except that a
/// Python int given for a float option becomes a float, as Python's own arithmetic would have
/// it; anything else (a backend that takes raw options) is converted as it is.
c10::IValue method_spec(const std::string& method, py::handle entry, const std::vector<td::option_info>& known) {
  if (!py::isinstance<py::dict>(entry)) return option_value(entry, method, "<spec>");
  c10::impl::GenericDict options(c10::StringType::get(), c10::AnyType::get());
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(entry)) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error("torch_delegate.lower: the option keys of method '" + method + "' must be str, got " +
                           python_type_name(key));
    const std::string name = key.cast<std::string>();
    const bool wants_float = std::any_of(known.begin(), known.end(), [&](const td::option_info& option) {
      return option.key == name && option.type == "float";
    });
    if (wants_float && py::isinstance<py::int_>(value) && !py::isinstance<py::bool_>(value))
      options.insert(name, c10::IValue(value.cast<double>()));
    else
      options.insert(name, option_value(value, method, name));
  }
  return options;
}

/// {method: options} from Python, for `methods`: each method's entry, or the backend's default
/// options where it has none. A key that is not among `methods` is an error.
c10::impl::GenericDict compile_spec(const td::detail::backend_lowering& lowering, const py::dict& spec,
                                    const std::vector<std::string>& methods, bool defaults_for_missing) {
  for (auto [method, entry] : spec) {
    if (!py::isinstance<py::str>(method))
      throw py::type_error("torch_delegate.lower: the spec's keys must be method names (str), got " + python_type_name(method));
    const std::string name = method.cast<std::string>();
    if (std::find(methods.begin(), methods.end(), name) == methods.end()) {
      std::string listed;
      for (const std::string& m : methods) listed += (listed.empty() ? "'" : ", '") + m + "'";
      throw py::value_error("torch_delegate.lower: the spec has options for method '" + name +
                            "', which is not among the methods to lower (" + listed + ")");
    }
  }
  const std::vector<td::option_info> known = lowering.describe_options();
  c10::impl::GenericDict converted(c10::StringType::get(), c10::AnyType::get());
  for (const std::string& method : methods) {
    if (spec.contains(method))
      converted.insert(method, method_spec(method, spec[py::str(method)], known));
    else if (defaults_for_missing)
      converted.insert(method, lowering.default_spec());
  }
  return converted;
}

/// Python input specs {method: [None | (sizes, dtype)]} -> input_specs.
td::input_specs input_specs_of(const py::dict& given) {
  td::input_specs specs;
  for (auto [method, entries] : given) {
    const std::string name = method.cast<std::string>();
    std::vector<std::optional<td::tensor_spec>>& out = specs[name];
    for (py::handle entry : entries) {
      if (entry.is_none()) {
        out.emplace_back();
        continue;
      }
      const auto pair = entry.cast<py::tuple>();
      const py::handle dtype = pair[1];
      if (!THPDtype_Check(dtype.ptr()))
        throw py::type_error("torch_delegate.lower: an input spec's dtype must be a torch.dtype, got " + python_type_name(dtype));
      out.push_back(td::tensor_spec{pair[0].cast<std::vector<std::int64_t>>(), reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type});
    }
  }
  return specs;
}

/// The reason a report's token names ("unsupported_kind", ...), or a ValueError naming `where`.
td::kept_reason reason_named(const std::string& token, const std::string& where) {
  if (const std::optional<td::kept_reason> reason = td::detail::reason_of_token(token)) return *reason;
  throw py::value_error("torch_delegate: " + where + ": unknown kept reason token '" + token + "'");
}

/// A torch_delegate.Report -> delegation_report (for partition_options::replay): every field read
/// by name, the inverse of report_data below; kept reasons by their tokens.
td::delegation_report report_of(py::handle given) {
  td::delegation_report report{.backend = td::detail::comma_separated(given.attr("backends").cast<std::vector<std::string>>()),
                               .module = given.attr("module").cast<std::string>(),
                               .methods = {}};
  for (py::handle method : given.attr("methods")) {
    td::method_delegation entry{.method = method.attr("method").cast<std::string>(), .regions = {}, .kept = {}};
    for (py::handle region : method.attr("regions"))
      entry.regions.push_back(td::region_report{.name = region.attr("name").cast<std::string>(),
                                                .node_count = region.attr("node_count").cast<std::size_t>(),
                                                .kinds = region.attr("kinds").cast<std::vector<std::string>>(),
                                                .location = region.attr("location").cast<std::string>(),
                                                .depth = region.attr("depth").cast<int>(),
                                                .submodule = region.attr("submodule").cast<std::string>(),
                                                .conversions = region.attr("conversions").cast<std::vector<std::string>>(),
                                                .backend = region.attr("backend").cast<std::string>(),
                                                .backend_ms = region.attr("backend_ms").cast<double>(),
                                                .torchscript_ms = region.attr("torchscript_ms").cast<double>(),
                                                .decision = region.attr("decision").cast<std::string>()});
    for (py::handle node : method.attr("kept")) {
      const std::string where = "replay: method '" + entry.method + "', kept " + node.attr("kind").cast<std::string>();
      std::vector<td::backend_reason> per_backend;
      for (py::handle each : node.attr("per_backend"))
        per_backend.push_back(td::backend_reason{.backend = each.attr("backend").cast<std::string>(),
                                                 .reason = reason_named(each.attr("reason_token").cast<std::string>(), where),
                                                 .detail = each.attr("detail").cast<std::string>()});
      entry.kept.push_back(td::kept_node{.kind = node.attr("kind").cast<std::string>(),
                                         .reason = reason_named(node.attr("reason_token").cast<std::string>(), where),
                                         .detail = node.attr("detail").cast<std::string>(),
                                         .location = node.attr("location").cast<std::string>(),
                                         .depth = node.attr("depth").cast<int>(),
                                         .submodule = node.attr("submodule").cast<std::string>(),
                                         .per_backend = std::move(per_backend)});
    }
    if (py::hasattr(method, "decided"))
      for (py::handle condition : method.attr("decided"))
        entry.decided.push_back(td::decided_condition{.test = condition.attr("test").cast<std::string>(),
                                                      .value = condition.attr("value").cast<std::string>(),
                                                      .basis = condition.attr("basis").cast<std::string>(),
                                                      .location = condition.attr("location").cast<std::string>()});
    report.methods.push_back(std::move(entry));
  }
  return report;
}

/// "xnnpack, pointwise_fusion" (a report's backends, as C++ keeps them) -> ["xnnpack", "pointwise_fusion"].
std::vector<std::string> backend_names(const std::string& joined) {
  std::vector<std::string> names;
  for (std::size_t start = 0; start < joined.size();) {
    const std::size_t comma = joined.find(", ", start);
    names.push_back(joined.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? joined.size() : comma + 2;
  }
  return names;
}

/// A delegation report as plain Python data, every field by name (the package wraps it in
/// dataclasses with the same field names).
py::dict report_data(const td::delegation_report& report) {
  py::list methods;
  for (const td::method_delegation& method : report.methods) {
    py::list regions, kept;
    for (const td::region_report& region : method.regions)
      regions.append(py::dict(py::arg("name") = region.name, py::arg("node_count") = region.node_count,
                              py::arg("kinds") = region.kinds, py::arg("location") = region.location,
                              py::arg("depth") = region.depth, py::arg("submodule") = region.submodule,
                              py::arg("conversions") = region.conversions, py::arg("backend") = region.backend,
                              py::arg("backend_ms") = region.backend_ms, py::arg("torchscript_ms") = region.torchscript_ms,
                              py::arg("decision") = region.decision));
    for (const td::kept_node& node : method.kept) {
      py::list per_backend;
      for (const td::backend_reason& each : node.per_backend)
        per_backend.append(py::dict(py::arg("backend") = each.backend, py::arg("reason") = std::string(td::to_string(each.reason)),
                                    py::arg("detail") = each.detail,
                                    py::arg("reason_token") = std::string(td::detail::token_of(each.reason))));
      kept.append(py::dict(py::arg("kind") = node.kind, py::arg("reason") = std::string(td::to_string(node.reason)),
                           py::arg("detail") = node.detail, py::arg("location") = node.location, py::arg("depth") = node.depth,
                           py::arg("submodule") = node.submodule, py::arg("per_backend") = per_backend,
                           py::arg("reason_token") = std::string(td::detail::token_of(node.reason))));
    }
    py::list decided;
    for (const td::decided_condition& condition : method.decided)
      decided.append(py::dict(py::arg("test") = condition.test, py::arg("value") = condition.value, py::arg("basis") = condition.basis,
                              py::arg("location") = condition.location));
    methods.append(
        py::dict(py::arg("method") = method.method, py::arg("regions") = regions, py::arg("kept") = kept, py::arg("decided") = decided));
  }
  return py::dict(py::arg("backends") = backend_names(report.backend), py::arg("module") = report.module,
                  py::arg("methods") = methods, py::arg("text") = report.to_string());
}

py::dict backend_description(const td::detail::backend_lowering& lowering) {
  py::dict described;
  described["name"] = std::string(lowering.name());
  described["type"] = c10::demangle(lowering.type_name());
  const td::detail::backend_runtime& runtime = *lowering.runtime;
  void* instance = runtime.create();
  bool available = false;
  try {
    available = runtime.is_available(instance);
  } catch (...) {
    runtime.destroy(instance);
    throw;
  }
  runtime.destroy(instance);
  described["available"] = available;
  described["partial"] = lowering.partitions();
  described["options_form"] = lowering.form == td::options_form::typed ? "typed" : lowering.form == td::options_form::raw ? "raw" : "none";
  py::list options;
  for (const td::option_info& option : lowering.describe_options())
    options.append(py::make_tuple(option.key, option.type, option.required, torch::jit::toPyObject(option.default_value)));
  described["options"] = options;
  py::list signatures;
  for (const td::detail::signature_record& signature : lowering.signatures())
    signatures.append(signature.generic ? std::string("execute(handle, inputs) (generic)") : "execute" + std::string(signature.text));
  described["signatures"] = signatures;
  return described;
}

/// The refusal of a libtorch_delegate of another version than the one this extension was built
/// against ("" when they agree): a mismatched library would misread what the extension hands it.
std::string version_mismatch(const std::string& extension, const std::string& library) {
  if (extension == library) return "";
  return "torch_delegate: the extension torch_delegate._C was built for libtorch_delegate " + extension +
         ", but the libtorch_delegate.so loaded in this process is version " + library +
         ". Install one version of the package (pip install --no-build-isolation --force-reinstall .) or put the "
         "matching build first on LD_LIBRARY_PATH.";
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_delegate's C++ bindings; use the torch_delegate package, not this module.";
  if (const std::string refused = version_mismatch(TORCH_DELEGATE_VERSION, td::library_version()); !refused.empty())
    throw py::import_error(refused);
  m.attr("version") = TORCH_DELEGATE_VERSION;
  m.def("library_version", [] { return std::string(td::library_version()); });
  m.def("version_mismatch", &version_mismatch, py::arg("extension"), py::arg("library"));
  py::register_exception<delegate_error>(m, "Error", PyExc_RuntimeError);

  m.def("backends", [] {
    std::vector<const td::detail::backend_lowering*> found = guarded([] { return td::detail::published_lowerings(); });
    py::list described;
    for (const td::detail::backend_lowering* lowering : found)
      described.append(guarded<false>([&] { return backend_description(*lowering); }));
    return described;
  });

  m.def("runtime_switches", [] {
    py::list listed;
    for (const td::known_switch& each : guarded([] { return td::runtime_switches(); }))
      listed.append(py::make_tuple(each.owner, std::string(each.declared.name), std::string(each.declared.default_value),
                                   std::string(each.declared.effect), each.declared.changes_kernels,
                                   each.value ? py::object(py::str(*each.value)) : py::object(py::none())));
    return listed;
  });

  m.def("lower_methods",
        [](const torch::jit::Module& module, const std::string& backend, const py::dict& spec,
           const std::vector<std::string>& methods, const py::dict& input_specs) {
          const td::detail::backend_lowering& lowering =
              guarded([&]() -> const td::detail::backend_lowering& { return td::detail::lowering_named(backend, "torch_delegate.lower"); });
          const c10::impl::GenericDict converted = compile_spec(lowering, spec, methods, true);
          const td::input_specs inputs = input_specs_of(input_specs);
          return guarded([&] {
            return td::detail::lower_methods(lowering, module, converted, false, input_specs.empty() ? nullptr : &inputs);
          });
        });

  // torch_delegate::partition_options, field for field (the package fills it from LowerOptions in
  // one place, torch_delegate._partition_options); its defaults are the C++ defaults.
  py::enum_<td::other_shapes>(m, "OtherShapes", "torch_delegate::other_shapes")
      .value("error", td::other_shapes::error)
      .value("torchscript", td::other_shapes::torchscript)
      .value("replan", td::other_shapes::replan)
      .value("automatic", td::other_shapes::automatic);
  py::class_<td::progress_update>(m, "ProgressUpdate", "torch_delegate::progress_update (partition.hpp)")
      .def_readonly("stage", &td::progress_update::stage)
      .def_readonly("detail", &td::progress_update::detail)
      .def_readonly("step", &td::progress_update::step)
      .def_readonly("steps", &td::progress_update::steps)
      .def_readonly("elapsed_s", &td::progress_update::elapsed_s)
      .def("__repr__", [](const td::progress_update& self) {
        return "ProgressUpdate(stage=" + py::repr(py::str(self.stage)).cast<std::string>() + ", detail=" +
               py::repr(py::str(self.detail)).cast<std::string>() + ", step=" + std::to_string(self.step) +
               ", steps=" + std::to_string(self.steps) + ", elapsed_s=" + std::to_string(self.elapsed_s) + ")";
      });
  py::class_<td::shape_range>(m, "ShapeRange", "torch_delegate::shape_range (input_spec.hpp)")
      .def(py::init([](std::vector<std::int64_t> min, std::vector<std::int64_t> max) {
             return td::shape_range{std::move(min), std::move(max)};
           }),
           py::arg("min"), py::arg("max"))
      .def_readwrite("min", &td::shape_range::min)
      .def_readwrite("max", &td::shape_range::max)
      .def("contains", [](const td::shape_range& self, const std::vector<std::int64_t>& sizes) { return self.contains(sizes); })
      .def("__repr__", [](const td::shape_range& self) { return "ShapeRange(" + self.to_string() + ")"; });
  using td::partition_options;
  py::class_<partition_options>(m, "PartitionOptions", "torch_delegate::partition_options (partition.hpp)")
      .def(py::init<>())
      .def_readwrite("methods", &partition_options::methods)
      .def_readwrite("min_region_size", &partition_options::min_region_size)
      .def_readwrite("keep_kinds", &partition_options::keep_kinds)
      .def_readwrite("keep_submodules", &partition_options::keep_submodules)
      .def_readwrite("lower_submodules", &partition_options::lower_submodules)
      .def_readwrite("require_full", &partition_options::require_full)
      .def_readwrite("example_inputs", &partition_options::example_inputs)
      .def_readwrite("on_other_shapes", &partition_options::on_other_shapes)
      .def_readwrite("shape_ranges", &partition_options::shape_ranges)
      .def_readwrite("max_replans", &partition_options::max_replans)
      .def_readwrite("measure", &partition_options::measure)
      .def_readwrite("min_gain", &partition_options::min_gain)
      .def_readwrite("choose_order", &partition_options::choose_order)
      .def_readwrite("measure_time_limit_s", &partition_options::measure_time_limit_s)
      .def_readwrite("fold_shapes", &partition_options::fold_shapes)
      // A torch_delegate.Report (or None) in; its data (as report() gives) out.
      .def_property(
          "replay",
          [](const partition_options& self) -> py::object { return self.replay ? py::object(report_data(*self.replay)) : py::none(); },
          [](partition_options& self, const py::object& report) {
            self.replay = report.is_none() ? std::nullopt : std::optional(report_of(report));
          })
      .def_readwrite("fallback_when_unavailable", &partition_options::fallback_when_unavailable)
      .def_readwrite("timing_cache", &partition_options::timing_cache)
      .def_readwrite("timing_cache_dir", &partition_options::timing_cache_dir)
      // A callable (called with the GIL taken, on the lowering's thread) or None.
      .def_readwrite("progress", &partition_options::progress);

  // Each kept reason as (token, label), in kept_reason's order: the tokens are what saved reports
  // and replay name; the labels what the text says.
  py::list kept_reasons;
  for (int reason = 0; td::detail::token_of(td::kept_reason(reason)) != "?"; ++reason)  // token_of: "?" past the last
    kept_reasons.append(py::make_tuple(std::string(td::detail::token_of(td::kept_reason(reason))),
                                       std::string(td::to_string(td::kept_reason(reason)))));
  m.attr("kept_reasons") = kept_reasons;
  m.attr("shape_ranges_attribute") = td::detail::names::shape_ranges_attribute;

  // backends: a priority list (one name for one backend); specs: one {method: options} per backend.
  m.def("lower_partially",
        [](const torch::jit::Module& module, const std::vector<std::string>& backends, const std::vector<py::dict>& specs,
           const td::partition_options& options) {
          // Pointers to the registry's records (guarded returns by value: not a reference to one).
          const td::detail::backend_list lowerings = guarded([&] {
            td::detail::backend_list found;
            for (const std::string& backend : backends) found.push_back(&td::detail::lowering_named(backend, "torch_delegate.lower"));
            return found;
          });
          std::vector<c10::impl::GenericDict> converted;
          for (std::size_t k = 0; k < backends.size(); ++k)
            converted.push_back(compile_spec(*lowerings[k], k < specs.size() ? specs[k] : py::dict(), options.methods, false));
          return guarded([&] { return td::detail::lower_partially_with_all(lowerings, module, options, converted); });
        },
        py::arg("module"), py::arg("backends"), py::arg("specs"), py::arg("options"));

  m.def("plan",
        [](const torch::jit::Module& module, const std::vector<std::string>& backends, const td::partition_options& options) {
          const td::delegation_report report = guarded([&] {
            td::detail::backend_list lowerings;
            for (const std::string& backend : backends)
              lowerings.push_back(&td::detail::lowering_named(backend, "torch_delegate.plan"));
            return td::detail::partition_report_all(lowerings, module, options);
          });
          return report_data(report);
        },
        py::arg("module"), py::arg("backends"), py::arg("options"));

  m.def("report", [](const torch::jit::Module& module) -> py::object {
    const std::optional<td::delegation_report> report = guarded([&] { return td::delegation_report_data_of(module); });
    if (report) return report_data(*report);
    const std::string text = guarded([&] { return td::delegation_report_of(module); });
    if (text.empty()) return py::none();
    // Saved before reports were data (or in a report format newer than this build reads).
    return py::dict(py::arg("backends") = py::list(), py::arg("module") = "", py::arg("methods") = py::list(),
                    py::arg("text") = text);
  });

  m.def("check_loadable", [](const std::string& path, bool verify) {
    guarded([&] { td::check_loadable(path, td::load_options{.verify = verify}); });
  }, py::arg("path"), py::arg("verify") = true);
  m.def("keep_freed_memory", [](std::size_t bytes) { return guarded([&] { return td::keep_freed_memory(bytes); }); });
  m.attr("min_kept_memory") = td::min_kept_memory;
  m.attr("default_kept_memory") = td::default_kept_memory;
  m.def("check_archive", [](const std::string& path) { guarded([&] { td::check_archive(path); }); });
  m.def("backends_needed", [](const std::string& path) { return guarded([&] { return td::backends_needed(path); }); });
}
