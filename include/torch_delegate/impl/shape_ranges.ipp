// Definitions for detail/shape_ranges.hpp.
#pragma once

#include <torch_delegate/detail/errors.hpp>
#include <torch_delegate/detail/names.hpp>
#include <torch_delegate/detail/shape_ranges.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/partition.hpp>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace torch_delegate::detail {

namespace shape_range_rules {

inline std::string sizes_text(c10::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t d = 0; d < sizes.size(); ++d) text += (d ? ", " : "") + std::to_string(sizes[d]);
  return text + "]";
}

// The range of each argument of `method` (nullopt: none): the declared one, else, for a tensor
// example, its own sizes (a range of one shape).
inline std::vector<std::optional<shape_range>> ranges_of(const std::string& method, const partition_options& options) {
  std::vector<std::optional<shape_range>> ranges;
  const auto examples = options.example_inputs.find(method);
  if (examples == options.example_inputs.end()) return ranges;
  const auto declared = options.shape_ranges.find(method);
  for (std::size_t i = 0; i < examples->second.size(); ++i) {
    if (declared != options.shape_ranges.end() && i < declared->second.size() && declared->second[i])
      ranges.push_back(declared->second[i]);
    else if (examples->second[i].isTensor()) {
      const std::vector<std::int64_t> sizes = examples->second[i].toTensor().sizes().vec();
      ranges.push_back(shape_range{sizes, sizes});
    } else
      ranges.push_back(std::nullopt);
  }
  return ranges;
}

// A string literal of TorchScript for `text`.
inline std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Every tensor `value` holds (a tensor, or in tuples, lists and dicts), in order.
inline void tensors_in(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTuple())
    for (const c10::IValue& element : value.toTupleRef().elements()) tensors_in(element, out);
  else if (value.isList())
    for (const c10::IValue& element : value.toListRef()) tensors_in(element, out);
  else if (value.isGenericDict())
    for (const auto& entry : value.toGenericDict()) tensors_in(entry.value(), out);
}

// A tensor of `sizes` like `example` (dtype, device, memory layout): normal values for floating
// and complex dtypes, values within the example's for integers, either for bool.
inline at::Tensor made_like(const at::Tensor& example, const std::vector<std::int64_t>& sizes, at::Generator& generator) {
  at::Tensor made;
  const c10::ScalarType dtype = example.scalar_type();
  if (at::isFloatingType(dtype) || at::isComplexType(dtype)) {
    made = at::randn(sizes, generator, example.options());
  } else if (dtype == at::kBool) {
    made = at::rand(sizes, generator, example.options().dtype(at::kFloat)) > 0.5;
  } else {
    std::int64_t low = 0, high = 0;
    if (example.numel()) {
      low = example.min().item<std::int64_t>();
      high = example.max().item<std::int64_t>();
    }
    made = at::randint(low, high + 1, sizes, generator, example.options());
  }
  const c10::MemoryFormat format = example.suggest_memory_format();
  return format == c10::MemoryFormat::Contiguous || sizes.size() != static_cast<std::size_t>(example.dim())
             ? made
             : made.contiguous(format);
}

// The names the entry check's TorchScript uses beyond torch's: RuntimeError, whose message then
// starts "torch-delegate: " (the exception's name is the message's first word).
struct check_resolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                         const torch::jit::SourceRange& location) override {
    if (name == "RuntimeError") return std::make_shared<torch::jit::ExceptionValue>("torch-delegate");
    return torch::jit::nativeResolver()->resolveValue(name, function, location);
  }
};

}  // namespace shape_range_rules

TORCH_DELEGATE_INTERNAL bool ranges_replanned_under_error(const partition_options& options) {
  return options.on_other_shapes == other_shapes::error && !options.shape_ranges.empty();
}

TORCH_DELEGATE_INTERNAL void check_shape_ranges(std::string_view backend, const partition_options& options) {
  using shape_range_rules::sizes_text;
  if (options.shape_ranges.empty()) return;
  if (options.on_other_shapes == other_shapes::torchscript)
    fail({backend, {}}, "shape_ranges are served by the backends (each region re-planned within them), and on_other_shapes = "
                        "torchscript runs other shapes as TorchScript: give other_shapes::automatic (shapes outside the ranges "
                        "re-planned too) or other_shapes::error (shapes outside the ranges refused)");
  for (const auto& [method, ranges] : options.shape_ranges) {
    const auto examples = options.example_inputs.find(method);
    if (examples == options.example_inputs.end())
      fail({backend, method}, "shape_ranges: the method has no example_inputs; each range needs its argument's example, the "
                              "typical shape within it (the one measured partitioning times)");
    if (ranges.size() > examples->second.size())
      fail({backend, method}, "shape_ranges: " + std::to_string(ranges.size()) + " given, the method takes " +
                                  std::to_string(examples->second.size()) + " arguments");
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (!ranges[i]) continue;
      const std::string which = "shape_ranges: argument " + std::to_string(i) + ": ";
      const c10::IValue& example = examples->second[i];
      if (!example.isTensor())
        fail({backend, method}, which + "a range is for a tensor, and its example is a " + example.tagKind());
      const at::Tensor tensor = example.toTensor();
      const shape_range& range = *ranges[i];
      if (range.min.size() != static_cast<std::size_t>(tensor.dim()) || range.max.size() != range.min.size())
        fail({backend, method}, which + "min " + sizes_text(range.min) + " and max " + sizes_text(range.max) +
                                    " must have the example's " + std::to_string(tensor.dim()) + " dimensions (its sizes: " +
                                    sizes_text(tensor.sizes()) + ")");
      for (std::size_t d = 0; d < range.min.size(); ++d)
        if (range.min[d] < 0 || range.min[d] > tensor.size(static_cast<std::int64_t>(d)) ||
            tensor.size(static_cast<std::int64_t>(d)) > range.max[d])
          fail({backend, method}, which + "the example's sizes " + sizes_text(tensor.sizes()) + " must lie within the range " +
                                      range.to_string() + " (from min " + sizes_text(range.min) + " to max " +
                                      sizes_text(range.max) + ", min at least 0): dimension " + std::to_string(d) +
                                      " does not");
    }
  }
}

TORCH_DELEGATE_INTERNAL void insert_range_check(torch::jit::Graph& graph, const c10::FunctionSchema& schema,
                                                const std::string& method, const partition_options& options) {
  if (!ranges_replanned_under_error(options)) return;
  const std::vector<std::optional<shape_range>> ranges = shape_range_rules::ranges_of(method, options);
  std::string source;
  std::vector<torch::jit::Value*> checked;
  for (std::size_t i = 0; i < ranges.size() && i + 1 < graph.inputs().size() && i + 1 < schema.arguments().size(); ++i) {
    if (!ranges[i]) continue;
    const shape_range& range = *ranges[i];
    const std::string k = std::to_string(checked.size());
    std::string outside = "len(sizes" + k + ") != " + std::to_string(range.min.size());
    for (std::size_t d = 0; d < range.min.size(); ++d) {
      const std::string size = "sizes" + k + "[" + std::to_string(d) + "]";
      if (range.min[d] == range.max[d])
        outside += " or " + size + " != " + std::to_string(range.min[d]);
      else
        outside += " or " + size + " < " + std::to_string(range.min[d]) + " or " + size + " > " + std::to_string(range.max[d]);
    }
    const std::string message = "method '" + method + "': argument '" + schema.arguments()[i + 1].name() +
                                "' has sizes {}, outside those it was lowered for: " + range.to_string() +
                                " (partition_options::shape_ranges; on_other_shapes = error refuses the others)";
    source += "    sizes" + k + " = argument" + k + ".size()\n    if " + outside + ":\n        raise RuntimeError(" +
              shape_range_rules::quoted(message) + ".format(sizes" + k + "))\n";
    checked.push_back(graph.inputs()[i + 1]);
  }
  if (checked.empty()) return;
  std::string parameters;
  for (std::size_t k = 0; k < checked.size(); ++k) parameters += (k ? ", argument" : "argument") + std::to_string(k) + ": Tensor";
  const std::string function = "def check(" + parameters + ") -> None:\n" + source;
  torch::jit::CompilationUnit unit;
  unit.define(c10::nullopt, function, std::make_shared<shape_range_rules::check_resolver>(), nullptr);
  std::shared_ptr<torch::jit::Graph> check = torch::jit::toGraphFunction(unit.get_function("check")).graph();
  torch::jit::WithInsertPoint at(graph.block()->param_node()->next());
  torch::jit::insertGraph(graph, *check, checked);
}

TORCH_DELEGATE_INTERNAL void record_shape_ranges(torch::jit::Module& lowered, const partition_options& options) {
  if (options.shape_ranges.empty()) return;
  const c10::TypePtr sizes = c10::ListType::ofInts();
  const c10::TypePtr entry = c10::OptionalType::create(c10::ListType::create(sizes));
  const c10::TypePtr per_method = c10::ListType::create(entry);
  c10::impl::GenericDict record(c10::StringType::get(), per_method);
  for (const auto& [method, ranges] : options.shape_ranges) {
    const std::vector<c10::IValue>& examples = options.example_inputs.at(method);
    c10::impl::GenericList arguments(entry);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (!ranges[i]) {
        arguments.push_back(c10::IValue());
        continue;
      }
      c10::impl::GenericList ends(sizes);
      ends.push_back(c10::IValue(ranges[i]->min));
      ends.push_back(c10::IValue(examples[i].toTensor().sizes().vec()));
      ends.push_back(c10::IValue(ranges[i]->max));
      arguments.push_back(c10::IValue(ends));
    }
    record.insert(method, arguments);
  }
  lowered.register_attribute(names::shape_ranges_attribute, c10::DictType::create(c10::StringType::get(), per_method), record);
}

TORCH_DELEGATE_INTERNAL void check_at_range_ends(std::string_view backend, const torch::jit::Module& module,
                                                 const torch::jit::Module& lowered, const partition_options& options) {
  using shape_range_rules::sizes_text;
  const at::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(0);
  for (const auto& [method, declared] : options.shape_ranges) {
    const std::vector<c10::IValue>& examples = options.example_inputs.at(method);
    for (const char* at : {"min", "typical shape", "max"}) {  // the typical shape: the examples themselves
      const std::string_view end_name = at;
      std::vector<c10::IValue> inputs = examples;
      std::string end;
      for (std::size_t i = 0; i < declared.size(); ++i) {
        if (!declared[i]) continue;
        const std::vector<std::int64_t>& sizes =
            end_name == "min" ? declared[i]->min : end_name == "max" ? declared[i]->max : examples[i].toTensor().sizes().vec();
        if (end_name != "typical shape") inputs[i] = shape_range_rules::made_like(examples[i].toTensor(), sizes, generator);
        end += (end.empty() ? "" : ", ") + std::string("argument ") + std::to_string(i) + " " + sizes_text(sizes);
      }
      const std::string where = std::string("shape_ranges: at the ranges' ") + at + " (" + end + ")";
      c10::IValue want;
      try {
        want = module.get_method(method)(inputs);
      } catch (const std::exception& error) {
        fail({backend, method}, where + ", the original method itself fails, so the range cannot be served: " + error.what());
      }
      c10::IValue got;
      try {
        got = lowered.get_method(method)(inputs);
      } catch (const std::exception& error) {
        fail({backend, method}, where + ", the lowered method fails (narrow the range, or keep the region that cannot take "
                                        "it in TorchScript): " + error.what());
      }
      std::vector<at::Tensor> wanted, given;
      shape_range_rules::tensors_in(want, wanted);
      shape_range_rules::tensors_in(got, given);
      if (wanted.size() != given.size())
        fail({backend, method}, where + ": the lowered method returns " + std::to_string(given.size()) + " tensors, the original " +
                                    std::to_string(wanted.size()));
      for (std::size_t k = 0; k < wanted.size(); ++k) {
        const at::Tensor& w = wanted[k];
        const at::Tensor& g = given[k];
        if (w.sizes() != g.sizes() || w.scalar_type() != g.scalar_type())
          fail({backend, method}, where + ": result " + std::to_string(k) + " is " + tensor_spec::describe(g.scalar_type(), g.sizes()) +
                                      ", the original's " + tensor_spec::describe(w.scalar_type(), w.sizes()));
        if (!w.numel()) continue;
        if (!at::isFloatingType(w.scalar_type()) && !at::isComplexType(w.scalar_type())) {
          if (!at::equal(g, w)) fail({backend, method}, where + ": result " + std::to_string(k) + " differs from the original's");
          continue;
        }
        const at::Tensor want_values = w.abs().to(at::kDouble);
        const double largest = at::nan_to_num(want_values, 0.0, 0.0, 0.0).max().item<double>();
        const double bound = 1e-3 * largest;
        if (!at::allclose(g, w, 0.0, bound, /*equal_nan=*/true)) {
          const double difference = at::nan_to_num((g.to(at::kDouble) - w.to(at::kDouble)).abs(), 0.0,
                                                   std::numeric_limits<double>::infinity())
                                        .max()
                                        .item<double>();
          std::ostringstream text;
          text << where << ": result " << k << " differs from the original's by up to " << difference << " (at most 1e-3 of its "
               << "largest magnitude, " << largest << ", is allowed)";
          fail({backend, method}, text.str());
        }
      }
    }
  }
}

}  // namespace torch_delegate::detail
