// cblas_linear: a backend written out of torch-delegate's tree, on its toolkit, as a backend
// author starts one. It runs the chains of aten::linear a model has (each with the ReLU or
// GELU after it folded in) as cblas_sgemm calls, and leaves every other node to TorchScript.
// Built against an install or a build tree with pkg-config (meson.build); loaded with
// torch.ops.load_library, it registers "cblas_linear". docs/backends.md walks through it.
#include <torch_delegate/toolkit/fused_activation.hpp>
#include <torch_delegate/toolkit/graph.hpp>
#include <torch_delegate/toolkit/op_table.hpp>
#include <torch_delegate/toolkit/payload_builder.hpp>
#include <torch_delegate/runtime_switches.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <ATen/ATen.h>
#include <cblas.h>

#include <array>
#include <span>
#include <string>
#include <vector>

namespace cblas_linear {

namespace tk = torch_delegate::toolkit;

// [switches]
constexpr std::array<torch_delegate::runtime_switch, 1> switches{{
    {"CBLAS_LINEAR_UNAVAILABLE", "unset", "set: is_available() is false (to try a fallback)", false},
}};
const bool switches_declared = (torch_delegate::declare_runtime_switches("cblas_linear", switches), true);
// [switches]

/// One step: y = activation(x W^T + b), its weight and bias named data keys.
struct step {
  std::string weight, bias;
  std::int64_t in = 0, out = 0;
  std::int64_t activation = 0;  // 0 none, 1 relu, 2 gelu
};
struct payload {
  std::vector<step> steps;
};

/// What preprocess builds a payload with: the toolkit's value ids and named data, and the steps.
struct builder {
  tk::payload_builder values;
  payload made;
};

// [support]
/// A linear whose weight and bias are known at lowering, on a float [N, in] input.
bool linear_supported(const torch::jit::Node* node) {
  return tk::known_at_lowering(node->input(1)) && tk::known_at_lowering(node->input(2)) &&
         tk::is_float_of_rank_or_unknown(node->input(0), 2);
}

void emit_linear(builder& b, const torch::jit::Node* node) {
  const at::Tensor weight = b.values.region().tensor_of(node->input(1));
  const std::optional<c10::IValue> bias = b.values.region().value_of(node->input(2));
  step s{b.values.store_constant(weight), "", weight.size(1), weight.size(0), 0};
  if (bias && bias->isTensor()) s.bias = b.values.store_constant(bias->toTensor());
  b.values.id(node->input(0));  // the chain's value: rejected, naming the node, if another
  const torch::jit::Value* output = node->output();
  // The ReLU or GELU that alone reads the result is folded into this step.
  const auto folded = tk::fold_following(output, b.values.result_check(), b.values.folded(), [](const torch::jit::Node* next) {
    return tk::is(next, "aten::relu") ? 1 : tk::is(next, "aten::gelu") && tk::constant_is(next->input(1), c10::IValue("none")) ? 2 : 0;
  });
  s.activation = folded;
  b.values.next_id(output);
  b.made.steps.push_back(s);
}

const tk::op_table<builder>& ops() {
  static const tk::op_table<builder> table = [] {
    tk::op_table<builder> t;
    t.add("aten::linear", linear_supported, emit_linear);
    t.add({"aten::relu", "aten::gelu"}, tk::always_supported, [](builder& b, const torch::jit::Node* node) {
      b.values.reject(node, "an activation runs folded into the linear before it");
    });
    return t;
  }();
  return table;
}
// [support]

struct CblasLinearBackend {
  static constexpr std::string_view name = "cblas_linear";
  static constexpr bool owns_parameters = true;  // weights are constants of the region: stored once as named data

  static bool supports(const torch::jit::Node* node) { return ops().supports(node); }
  /// A region is a chain: each linear reads the one before it, the first the region's one input.
  static torch_delegate::region_verdict accepts_region(std::span<const torch::jit::Node* const> region) {
    const torch::jit::Value* current = nullptr;
    for (const torch::jit::Node* node : region) {
      if (!tk::is(node, "aten::linear")) {  // an activation: folded into the linear it alone reads
        if (!current || node->input(0) != current || current->uses().size() != 1)
          return torch_delegate::region_verdict::refuse("an activation that is not the only reader of a linear");
      } else if (current && node->input(0) != current) {
        return torch_delegate::region_verdict::refuse("linears that are not a chain");
      }
      current = node->output();
    }
    return true;
  }

  static torch_delegate::preprocess_result<payload> preprocess(const torch_delegate::method_to_lower& region) {
    builder b{tk::payload_builder(region, std::string(name)), {}};
    const auto inputs = tk::region_inputs(*region.graph());
    if (inputs.size() != 1) region.reject(region.graph()->nodes().front(), "cblas_linear: a region takes one tensor");
    b.values.next_id(inputs[0]);
    for (const torch::jit::Node* node : region.graph()->nodes()) {
      if (b.values.skips(node)) continue;
      if (!ops().emit(b, node)) b.values.reject_unsupported(node);
    }
    torch_delegate::preprocess_result<payload> result;
    result.payload = std::move(b.made);
    result.named_data = b.values.take_named_data();
    return result;
  }

  static bool is_available() { return torch_delegate::runtime_switch_value("CBLAS_LINEAR_UNAVAILABLE") == "unset"; }

  struct compiled {
    std::vector<step> steps;
    std::vector<at::Tensor> weights, biases;
  };
  static compiled compile(const payload& p, const torch_delegate::compile_context& context) {
    compiled c{p.steps, {}, {}};
    for (const step& s : p.steps) {
      c.weights.push_back(context.named_data().tensor(s.weight));
      c.biases.push_back(s.bias.empty() ? at::Tensor() : context.named_data().tensor(s.bias));
    }
    return c;
  }

  static at::Tensor execute(compiled& c, const at::Tensor& given) {
    at::Tensor x = given.contiguous();
    for (std::size_t i = 0; i < c.steps.size(); ++i) {
      const step& s = c.steps[i];
      const std::int64_t rows = x.size(0);
      // y = bias broadcast over the rows, then y += x W^T (sgemm's beta = 1).
      at::Tensor y = c.biases[i].defined() ? c.biases[i].expand({rows, s.out}).contiguous() : at::zeros({rows, s.out});
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(s.out),
                  static_cast<int>(s.in), 1.0f, x.data_ptr<float>(), static_cast<int>(s.in), c.weights[i].data_ptr<float>(),
                  static_cast<int>(s.in), c.biases[i].defined() ? 1.0f : 0.0f, y.data_ptr<float>(), static_cast<int>(s.out));
      x = s.activation == 1 ? at::relu(y) : s.activation == 2 ? at::gelu(y) : y;
    }
    return x;
  }
};

}  // namespace cblas_linear

BOOST_HANA_ADAPT_STRUCT(cblas_linear::step, weight, bias, in, out, activation);
BOOST_HANA_ADAPT_STRUCT(cblas_linear::payload, steps);

TORCH_DELEGATE_REGISTER_BACKEND(cblas_linear::CblasLinearBackend);
