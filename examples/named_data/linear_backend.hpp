// packed_linear: a backend that runs chains of aten::linear (and aten::relu) with weights packed
// at preprocess (contiguous, 64-byte aligned; with `transpose`, also transposed to [in, out])
// and stored as named data under a key derived from their content, so methods that use the same
// weight share one copy in the saved file and in memory. docs/named-data.md walks through it.
#pragma once

#include <torch_delegate/torch_delegate.hpp>

#include <ATen/ATen.h>
#include <boost/hana/adapt_struct.hpp>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace packed_linear {

struct options {
  /// Store packed weights as named data (one copy per lowered module). false: each method's
  /// payload holds its own copy, for comparison.
  bool named_data = true;
  /// Compile copies each weight into memory of its own (as a backend that uploads weights to a
  /// device would) and asks torch-delegate to release the named data, so that a loaded module
  /// holds each weight once.
  bool own_copy = false;
  /// Pack each weight transposed, [in, out], so that calls multiply without a transposed view.
  /// Off: the weight keeps aten::linear's layout and calls are bitwise equal to eager (the same
  /// BLAS call); on: equal within float rounding (BLAS sums in another order).
  bool transpose = false;
};

}  // namespace packed_linear
BOOST_HANA_ADAPT_STRUCT(packed_linear::options, named_data, own_copy, transpose);

namespace packed_linear {

/// One step of a method: y = relu?(linear(x, weight, bias)). A tensor comes either from named
/// data (its key) or, without named data, inline in the payload. The weight's first field also
/// says its layout: a key or tag containing "weight_t" (or an empty one: payloads saved before
/// `transpose` existed) is [in, out], "weight" is aten::linear's [out, in].
using step_record = std::tuple<std::string, std::optional<at::Tensor>,  // weight: key (or layout tag), or inline
                               std::string, std::optional<at::Tensor>,  // bias: key, or inline; neither: no bias
                               bool>;                                    // relu after it
using payload_type = std::vector<step_record>;

struct compiled_step {
  at::Tensor weight_t;  // [in, out]: a transposed view of a [out, in] weight, or a transposed packed one
  at::Tensor bias;      // undefined: none
  bool relu = false;
};

struct LinearBackend {
  static constexpr std::string_view name = "packed_linear";
  static constexpr bool runs_empty_tensors = true;  // ATen's addmm and matmul take empty batches
  using options = packed_linear::options;
  using payload = payload_type;

  static torch_delegate::preprocess_result<payload> preprocess(const torch_delegate::method_to_lower& method,
                                                               const options& o) {
    torch_delegate::preprocess_result<payload> result;
    const torch::jit::Value* current = method.graph()->inputs().size() == 2 ? method.graph()->inputs()[1] : nullptr;
    if (!current) throw std::invalid_argument("packed_linear: the method must take one tensor argument");
    auto stored = [&](const std::string& what, const at::Tensor& tensor) -> std::pair<std::string, std::optional<at::Tensor>> {
      if (!o.named_data) return {what == "bias" ? "" : what, tensor};  // inline; the weight's layout tag
      const std::string key = torch_delegate::content_key("packed_linear." + what, tensor);
      result.named_data.add_tensor(key, tensor, /*alignment=*/64);
      return {key, std::nullopt};
    };
    for (const torch::jit::Node* node : method.graph()->nodes()) {
      if (node->kind() == c10::prim::GetAttr || node->kind() == c10::prim::Constant) continue;  // read by value_of
      if (node->kind() == c10::aten::linear && node->input(0) == current) {
        // The weight, packed: contiguous and aligned; transposed once here with `transpose`.
        const at::Tensor weight = method.tensor_of(node->input(1));
        // Its own copy (packing makes one): never the module's parameter itself.
        const at::Tensor packed = o.transpose ? weight.t().contiguous() : weight.clone(at::MemoryFormat::Contiguous);
        const std::optional<c10::IValue> bias = method.value_of(node->input(2));
        if (!bias || !(bias->isNone() || bias->isTensor())) method.reject(node, "packed_linear needs a bias known at lowering time.");
        auto [weight_key, weight_inline] = stored(o.transpose ? "weight_t" : "weight", packed);
        auto [bias_key, bias_inline] = bias->isNone() ? std::pair<std::string, std::optional<at::Tensor>>{"", std::nullopt}
                                                      : stored("bias", bias->toTensor().clone(at::MemoryFormat::Contiguous));
        result.instruction_handles[static_cast<std::int64_t>(result.payload.size())] = {method.debug_handle(node)};
        result.payload.emplace_back(weight_key, weight_inline, bias_key, bias_inline, false);
        current = node->output();
      } else if (node->kind() == c10::aten::relu && node->input(0) == current && !result.payload.empty()) {
        std::get<4>(result.payload.back()) = true;
        current = node->output();
      } else {
        method.reject(node, "packed_linear runs chains of aten::linear and aten::relu only.");
      }
    }
    if (method.graph()->outputs().size() != 1 || method.graph()->outputs()[0] != current)
      throw std::invalid_argument("packed_linear: the method must return the result of its last linear or relu");
    return result;
  }

  static bool is_available() { return true; }

  // Not static: one LinearBackend object per lowered module compiles all of its methods, so
  // the copies it owns (own_copy) are shared between methods like the named data they come from.
  std::vector<compiled_step> compile(const payload& steps, const options& o, const torch_delegate::compile_context& context) {
    auto tensor = [&](const std::string& key, const std::optional<at::Tensor>& inline_tensor) -> at::Tensor {
      if (inline_tensor) return *inline_tensor;
      if (key.empty()) return at::Tensor();
      if (!o.own_copy) return context.named_data().tensor(key);  // no copy: a view of the module's data
      auto [copy, added] = owned_.try_emplace(key);
      if (added) copy->second = context.named_data().tensor(key).clone();
      context.release_named_data(key);  // this object holds it now
      return copy->second;
    };
    std::vector<compiled_step> compiled;
    for (const auto& [weight_key, weight, bias_key, bias, relu] : steps) {
      const bool transposed = weight_key.empty() || weight_key.find("weight_t") != std::string::npos;
      const at::Tensor w = tensor(weight_key, weight);
      compiled.push_back({transposed ? w : w.t(), tensor(bias_key, bias), relu});
    }
    return compiled;
  }

  static at::Tensor execute(std::vector<compiled_step>& steps, const at::Tensor& x) {
    at::Tensor y = x;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const compiled_step& step = steps[i];
      // What aten::linear does with a [out, in] weight, given its transpose.
      if (y.dim() == 2 && step.bias.defined())
        y = at::addmm(step.bias, y, step.weight_t);
      else
        y = step.bias.defined() ? at::matmul(y, step.weight_t) + step.bias : at::matmul(y, step.weight_t);
      if (step.relu) y = at::relu(y);
    }
    return y;
  }

 private:
  std::map<std::string, at::Tensor> owned_;  // own_copy: key -> this module's copy
};

}  // namespace packed_linear
