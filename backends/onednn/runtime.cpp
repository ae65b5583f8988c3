// The runtime: compile (the payload decoded and checked, fusions decided, the weights kept for
// the plans) and execute (the plan for the call's input shapes, from the region's bounded cache or
// made now, run with a call context: one buffer, the primitives' arguments bound to it).
#include "internal.hpp"

#include "toolkit/availability.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
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
      TORCH_CHECK(weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && weight.dim() == 4 &&
                      record.convolution->stride.size() == 2 && bias.dim() == 1 && weight.size(0) % groups == 0 &&
                      bias.size(0) == weight.size(1) * groups,
                  "onednn: region ", context.method(), ": a transposed convolution with weight ", weight.sizes(), ", bias ", bias.sizes(),
                  " and ", groups, " groups (expected a float weight [I, O / groups, kh, kw], input channels a multiple of ",
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
    store->weights.weights.push_back(weight_memory);
    store->weights.biases.push_back(bias_memory);
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
    if (input < given.size()) {
      context->memory[slot].set_data_handle(given[input].data_ptr());
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
