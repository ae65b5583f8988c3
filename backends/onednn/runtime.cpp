// The runtime: compile (the payload decoded and checked, fusions decided, the weights kept for
// the plans) and execute (the plan for the call's input shapes, from the region's bounded cache or
// made now, run with a call context: one buffer, the primitives' arguments bound to it).
#include "internal.hpp"
#include "recurrence.hpp"

#include "toolkit/availability.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

namespace onednn_delegate {

namespace {
std::mutex treated_as_reference_mutex;
std::vector<std::string> treated_as_reference;  // treat_as_reference's names (tests only)
}  // namespace

bool is_reference(std::string_view implementation) {
  // oneDNN names an implementation "<kernel>:<isa or 'any'>", some with a prefix ("x64:gemm:jit");
  // its reference kernels are "ref:any", "ref_<variant>:any" (and "gemm:ref" off x64): plain C++
  // loops, 10-100x slower than the JIT ones a plan can nearly always get in another layout.
  for (std::size_t begin = 0; begin <= implementation.size();) {
    const std::size_t end = std::min(implementation.find(':', begin), implementation.size());
    if (implementation.substr(begin, end - begin).starts_with("ref")) return true;
    begin = end + 1;
  }
  // Tests walk the fallback order by naming more kernels "reference" (treat_as_reference).
  const std::lock_guard lock(treated_as_reference_mutex);
  return std::any_of(treated_as_reference.begin(), treated_as_reference.end(),
                     [&](const std::string& name) { return implementation.find(name) != std::string_view::npos; });
}

void treat_as_reference(std::vector<std::string> kernels) {
  const std::lock_guard lock(treated_as_reference_mutex);
  treated_as_reference = std::move(kernels);
}

void fail_planning(std::string_view method, const std::string& why) { TORCH_CHECK(false, "onednn: region ", method, ": ", why); }

call_context::call_context(const execution_plan& plan, std::size_t inputs)
    : buffer(at::empty({static_cast<std::int64_t>(plan.buffer_bytes)}, at::kByte)), memory(plan.slots.size()) {
  auto* base = static_cast<std::uint8_t*>(buffer.data_ptr());
  for (std::size_t slot = 0; slot < plan.slots.size(); ++slot) {
    if (slot < inputs)
      memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), DNNL_MEMORY_NONE);
    else if (plan.constants[slot])
      memory[slot] = plan.constants[slot];
    else if (plan.in_output[slot] != no_slot)
      memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), DNNL_MEMORY_NONE);  // in a returned tensor: bound per call
    else if (plan.aliases[slot] != no_slot && plan.aliases[slot] < inputs)
      memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), DNNL_MEMORY_NONE);  // a view of an input: bound per call
    else if (plan.aliases[slot] != no_slot)
      memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), base + plan.offsets[plan.aliases[slot]] + plan.alias_offsets[slot]);
    else
      memory[slot] = dnnl::memory(plan.slots[slot], cpu_engine(), base + plan.offsets[slot]);
  }
  for (const plan_call& call : plan.calls) {
    auto& bound = arguments.emplace_back();
    for (const auto& [argument, slot] : call.arguments) bound.emplace(argument, memory[slot]);
    if (call.scratchpad.get_size() > 0)
      bound.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(call.scratchpad, cpu_engine(), base + plan.scratchpad_offset));
  }
}

namespace {
/// A recurrent layer's weights ([directions, gates * hidden, features + hidden]: PyTorch's
/// weight_ih and weight_hh side by side) and biases ([directions, 2, gates * hidden]) in oneDNN's
/// order, kept in `store` for every plan: weights on the input (ldgoi over [1, directions,
/// features, gates, hidden]) and on the state (likewise over hidden), and the bias (ldgo). A GRU's
/// gates go from PyTorch's (reset, update, new) to oneDNN's (update, reset, new), its bias is
/// linear-before-reset's four: the update's and reset's summed, the new gate's on the input, and
/// on the state (PyTorch's formula: n = tanh(W_in x + b_in + r * (W_hn h + b_hn))).
std::tuple<dnnl::memory, dnnl::memory, dnnl::memory> recurrent_weights(const torch_delegate::compile_context& context,
                                                                       const step_record& record, plan_store& store) {
  const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
  const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
  const recurrent_parameters& r = *record.recurrent;
  const bool gru = r.kind == "gru";  // else the biases on input and state add up
  const std::int64_t gates = recurrent_gates(r.kind), hidden = r.hidden;
  TORCH_CHECK(weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && weight.dim() == 3 && bias.dim() == 3 &&
                  (weight.size(0) == 1 || weight.size(0) == 2) && weight.size(1) == gates * hidden && weight.size(2) > hidden &&
                  bias.size(0) == weight.size(0) && bias.size(1) == 2 && bias.size(2) == gates * hidden,
              "onednn: region ", context.method(), ": a recurrent layer (", r.kind, ", ", hidden, " hidden) with weight ", weight.sizes(),
              " and bias ", bias.sizes(), " (expected float [directions (1 or 2), ", gates * hidden, ", features + ", hidden,
              "] and [directions, 2, ", gates * hidden, "])");
  const std::int64_t directions = weight.size(0), features = weight.size(2) - hidden;
  const at::Tensor by_gate = weight.view({directions, gates, hidden, features + hidden});
  at::Tensor on_input = by_gate.narrow(3, 0, features), on_state = by_gate.narrow(3, features, hidden);
  at::Tensor b = bias.view({directions, 2, gates, hidden}), made_bias;
  if (!gru) {
    made_bias = b.select(1, 0) + b.select(1, 1);
  } else {
    const at::Tensor order = at::tensor(std::vector<std::int64_t>{1, 0, 2});
    on_input = on_input.index_select(1, order);
    on_state = on_state.index_select(1, order);
    const at::Tensor i = b.select(1, 0).index_select(1, order), h = b.select(1, 1).index_select(1, order);
    made_bias = at::cat({i.narrow(1, 0, 2) + h.narrow(1, 0, 2), i.narrow(1, 2, 1), h.narrow(1, 2, 1)}, 1);
  }
  on_input = on_input.contiguous();
  on_state = on_state.contiguous();
  made_bias = made_bias.contiguous();
  // For our recurrence kernel: the state's weights packed (PyTorch's [gates * hidden, hidden] per
  // direction, in oneDNN's gate order), the biases on the input, a GRU's on the state of its new gate.
  const std::int64_t columns = gates * hidden;
  at::Tensor packed = at::empty({directions, recurrence::padded(columns) * hidden});
  for (std::int64_t d = 0; d < directions; ++d)
    recurrence::pack_state_weights(on_state[d].reshape({columns, hidden}).contiguous().data_ptr<float>(), columns, hidden,
                                   packed[d].data_ptr<float>());
  const at::Tensor input_bias = made_bias.narrow(1, 0, gates).contiguous();
  const at::Tensor new_gate_bias = gru ? made_bias.select(1, 3).contiguous() : at::zeros({directions, hidden});
  store.recurrent.insert(store.recurrent.end(), {on_input, on_state, made_bias, packed, input_bias, new_gate_bias});
  const auto flat = [](const at::Tensor& t) { return dnnl::memory(dense({t.numel()}), cpu_engine(), t.data_ptr()); };
  store.weights.recurrence.push_back({flat(packed), flat(input_bias), flat(new_gate_bias)});
  const std::int64_t bias_gates = made_bias.size(1);
  return {dnnl::memory(md({1, directions, features, gates, hidden}, f32, tag::ldgoi), cpu_engine(), on_input.data_ptr()),
          dnnl::memory(md({1, directions, hidden, gates, hidden}, f32, tag::ldgoi), cpu_engine(), on_state.data_ptr()),
          dnnl::memory(md({1, directions, bias_gates, hidden}, f32, tag::ldgo), cpu_engine(), made_bias.data_ptr())};
}
}  // namespace

compiled_region OnednnBackend::compile(const region_payload& payload, const torch_delegate::compile_context& context) {
  TORCH_CHECK(is_available(), "onednn: this LibTorch was built without oneDNN");
  auto region = std::make_shared<region_steps>(
      region_steps{decode_steps(payload, context.method()), payload.inputs, payload.values, payload.outputs, std::string(context.method())});
  auto store = std::make_shared<plan_store>();
  std::vector<std::string> used;  // released: the store keeps the tensors until the first plan has its copies
  for (compiled_step& step : region->steps) {
    const step_record& record = step.record;
    const step_kind kind = step.kind;
    dnnl::memory weight_memory, bias_memory;
    if (kind == step_kind::layer_norm || kind == step_kind::linear || kind == step_kind::scale) {
      const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
      TORCH_CHECK(weight.scalar_type() == at::kFloat && weight.dim() >= 1 && (kind != step_kind::linear || weight.dim() == 2) &&
                      (kind != step_kind::layer_norm || weight.dim() == 1),
                  "onednn: region ", context.method(), ": a ", record.op, " with weight ", weight.sizes());
      step.weight_sizes = weight.sizes().vec();
      if (kind == step_kind::linear && linear_as_matmul())  // [I, O], a view of the [O, I] bytes: a matmul's weights
        weight_memory = dnnl::memory(md({weight.size(1), weight.size(0)}, f32, tag::ba), cpu_engine(), weight.data_ptr());
      else
        weight_memory = dnnl::memory(dense(dims(weight.sizes().begin(), weight.sizes().end())), cpu_engine(), weight.data_ptr());
      store->dense.push_back(weight);
      used.push_back(record.weight);
      if (kind != step_kind::scale && !(kind == step_kind::linear && record.bias.empty())) {  // else: computed in the call
        const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
        TORCH_CHECK(bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == weight.size(0), "onednn: region ",
                    context.method(), ": a ", record.op, " with weight ", weight.sizes(), " and bias ", bias.sizes());
        bias_memory = dnnl::memory(dense({bias.size(0)}), cpu_engine(), bias.data_ptr());
        store->dense.push_back(bias);
        used.push_back(record.bias);
      }
    }
    if (kind == step_kind::deconvolution) {
      const std::int64_t groups = record.convolution->groups;
      const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
      const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
      TORCH_CHECK(weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && weight.dim() >= 3 && weight.dim() <= 5 &&
                      record.convolution->stride.size() == static_cast<std::size_t>(weight.dim() - 2) && bias.dim() == 1 &&
                      weight.size(0) % groups == 0 && bias.size(0) == weight.size(1) * groups,
                  "onednn: region ", context.method(), ": a transposed convolution with weight ", weight.sizes(), ", bias ", bias.sizes(),
                  ", ", record.convolution->stride.size(), " strides and ", groups,
                  " groups (expected a float weight [I, O / groups, kernel...] of a kernel size a stride, input channels a multiple of ",
                  "the groups, one bias per output channel)");
      step.weight_sizes = weight.sizes().vec();
      weight_memory = dnnl::memory(deconvolution_weights(step.weight_sizes, groups), cpu_engine(), weight.data_ptr());
      bias_memory = dnnl::memory(md({bias.size(0)}, f32, tag::x), cpu_engine(), bias.data_ptr());
      store->dense.push_back(weight);
      store->dense.push_back(bias);
      used.push_back(record.weight);
      used.push_back(record.bias);
    }
    if (kind == step_kind::convolution) {
      const std::int64_t groups = record.convolution->groups;
      const at::Tensor weight = context.named_data().tensor(record.weight).contiguous();
      const at::Tensor bias = context.named_data().tensor(record.bias).contiguous();
      TORCH_CHECK(weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
                      weight.dim() == static_cast<std::int64_t>(record.convolution->stride.size()) + 2 && bias.dim() == 1 &&
                      bias.size(0) == weight.size(0) && weight.size(0) % groups == 0,
                  "onednn: region ", context.method(), ": a convolution with weight ", weight.sizes(), ", bias ", bias.sizes(),
                  " and ", groups, " groups (expected a float weight of ", record.convolution->stride.size() + 2,
                  " dimensions for its ", record.convolution->stride.size(), " strides, output channels a multiple of the groups, one bias per output channel)");
      step.weight_sizes = weight.sizes().vec();
      weight_memory = dnnl::memory(plain_weights(step.weight_sizes, groups), cpu_engine(), weight.data_ptr());
      bias_memory = dnnl::memory(md({bias.size(0)}, f32, tag::x), cpu_engine(), bias.data_ptr());
      store->dense.push_back(weight);
      store->dense.push_back(bias);
      used.push_back(record.weight);
      used.push_back(record.bias);
    }
    dnnl::memory iteration_memory;
    if (kind == step_kind::recurrent) {
      std::tie(weight_memory, iteration_memory, bias_memory) = recurrent_weights(context, record, *store);
      step.weight_sizes = context.named_data().tensor(record.weight).sizes().vec();
      used.push_back(record.weight);
      used.push_back(record.bias);
    }
    store->weights.weights.push_back(weight_memory);
    store->weights.biases.push_back(bias_memory);
    store->weights.iteration.push_back(iteration_memory);
    if (kind != step_kind::recurrent) store->weights.recurrence.emplace_back();
  }
  for (const std::string& key : used) context.release_named_data(key);
  return {std::move(region), std::move(store)};
}

int planning_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

namespace {
/// The region's plan for `shapes` at this thread's thread count: the cached one, else made now
/// (under the cache's lock: one plan per shape and thread count, weights reordered once).
std::shared_ptr<const runnable_plan> plan_for(compiled_region& compiled, const torch_delegate::toolkit::input_shapes& shapes) {
  plan_store& store = *compiled.plans;
  return store.plans.get_or_make(plan_key{shapes, planning_threads()}, [&] {
    auto made = std::make_shared<runnable_plan>();
    made->plan = make_plan(*compiled.region, store.weights, shapes);
    store.dense.clear();  // the plans read the first one's copies now
    return made;
  });
}
}  // namespace

compiled_region OnednnBackend::replan(compiled_region& compiled, const torch_delegate::given_inputs& given) {
  const region_steps& region = *compiled.region;
  for (std::size_t i = 0; i < region.steps.size(); ++i) {
    const compiled_step& step = region.steps[i];
    TORCH_CHECK(!((step.kind == step_kind::reshape || step.kind == step_kind::slice) && !step.record.size_program), "onednn: region ",
                region.method, ": step ", i, " (", step.record.op,
                ") holds the sizes of the shapes it was lowered for (sizes computed outside the region, or a payload before version "
                "4): the region serves those shapes only");
  }
  TORCH_CHECK(static_cast<std::int64_t>(given.size()) == region.inputs, "onednn: region ", region.method, " takes ", region.inputs,
              " inputs, given ", given.size());
  torch_delegate::toolkit::input_shapes shapes;
  for (std::size_t i = 0; i < given.size(); ++i) {
    TORCH_CHECK(given[i] && given[i]->dtype == at::kFloat, "onednn: region ", region.method, ": input ", i + 1,
                given[i] ? " is not a float tensor" : " is not a tensor");
    shapes.push_back(given[i]->sizes);
  }
  // Planned now: a size that does not fit is this call's error, and the call finds its plan made.
  // The handle shares the steps, the weights and the plans: a region holds its weights once.
  plan_for(compiled, shapes);
  return compiled;
}

std::vector<c10::IValue> OnednnBackend::execute(compiled_region& compiled, torch_delegate::inputs args) {
  const region_steps& region = *compiled.region;
  TORCH_CHECK(static_cast<std::int64_t>(args.size()) == region.inputs, "onednn: region ", region.method, " takes ", region.inputs,
              " inputs, got ", args.size());
  std::vector<at::Tensor> given(args.size());
  torch_delegate::toolkit::input_shapes shapes;
  for (std::size_t i = 0; i < args.size(); ++i) {
    TORCH_CHECK(args[i].isTensor(), "onednn: region ", region.method, ": input ", i + 1, " is not a tensor");
    const at::Tensor& tensor = args[i].toTensor();
    TORCH_CHECK(tensor.scalar_type() == at::kFloat && tensor.device().is_cpu() && tensor.dim() >= 1 && tensor.dim() <= 6 &&
                    tensor.layout() == at::kStrided,
                "onednn: region ", region.method, ": input ", i + 1, " must be a dense float CPU tensor of 1 to 6 dims, got ",
                tensor.dim(), "-d ", tensor.scalar_type(), " on ", tensor.device());
    given[i] = tensor.contiguous();
    shapes.push_back(tensor.sizes().vec());
  }
  const std::shared_ptr<const runnable_plan> runnable = plan_for(compiled, shapes);
  const execution_plan* plan = runnable->plan.get();
  std::unique_ptr<call_context> context;
  {
    std::lock_guard<std::mutex> lock(runnable->idle_mutex);
    if (!runnable->idle.empty()) {
      context = std::move(runnable->idle.back());
      runnable->idle.pop_back();
    }
  }
  if (!context) context = std::make_unique<call_context>(*plan, given.size());
  // The returned tensors of the direct outputs, made first: their primitives write into them.
  std::vector<at::Tensor> results(plan->outputs.size());
  for (std::size_t k = 0; k < plan->outputs.size(); ++k)
    if (!plan->output_reorders[k])  // no reorder: written in place
      results[k] = at::empty(plan->output_dims[k], at::kFloat);
  for (std::size_t slot = 0; slot < plan->slots.size(); ++slot) {
    const std::size_t input = slot < given.size() ? slot : plan->aliases[slot];
    if (input < given.size()) {  // an input, or a view of one (from its offset: a layer's part of a state)
      const std::size_t view_offset = slot < given.size() ? 0 : plan->alias_offsets[slot];
      context->memory[slot].set_data_handle(static_cast<std::uint8_t*>(given[input].data_ptr()) + view_offset);
    } else if (plan->in_output[slot] != no_slot) {
      const std::size_t view_offset = plan->aliases[slot] == no_slot ? 0 : plan->alias_offsets[slot];
      context->memory[slot].set_data_handle(static_cast<std::uint8_t*>(results[plan->in_output[slot]].data_ptr()) + view_offset);
    }
  }
  const dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(cpu_engine());
  for (std::size_t k = 0; k < plan->calls.size(); ++k) {
    if (plan->calls[k].host) {
      stream.wait();  // ATen reads what the primitives before it wrote
      plan->calls[k].host(context->arguments[k]);
    } else if (plan->calls[k].one_thread) {  // made for one thread: its loops do not fork
      const thread_count one(1);
      plan->calls[k].primitive.execute(stream, context->arguments[k]);
    } else {
      plan->calls[k].primitive.execute(stream, context->arguments[k]);
    }
  }
  const std::vector<dnnl::memory>& memory = context->memory;
  std::vector<c10::IValue> outputs;
  for (std::size_t k = 0; k < plan->outputs.size(); ++k) {
    if (results[k].defined()) {  // written in place
      outputs.emplace_back(std::move(results[k]));
      continue;
    }
    at::Tensor out = at::empty(plan->output_dims[k], at::kFloat);
    dnnl::memory to(dense(plan->output_dims[k]), engine, out.data_ptr());
    plan->output_reorders[k].execute(stream, {{DNNL_ARG_FROM, memory[plan->outputs[k]]}, {DNNL_ARG_TO, to}});
    outputs.emplace_back(std::move(out));
  }
  stream.wait();
  std::lock_guard<std::mutex> lock(runnable->idle_mutex);
  runnable->idle.push_back(std::move(context));
  return outputs;
}

}  // namespace onednn_delegate
