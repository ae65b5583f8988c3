// The planner's core: for one set of input shapes, a slot per value (shapes inferred step by step
// as each builder defines what its step makes), the calls in order with each slot's first and
// last use, constants (weights reordered into the layout their primitive picked), and the slots'
// places in one per-call buffer (placement.cpp). Which builder runs a step: the table in builders.hpp.
// No LibTorch here: errors go through fail_planning (runtime.cpp).
#include "builders.hpp"

#include "toolkit/size_programs.hpp"

#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>

namespace onednn_delegate {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

md dense(const dims& sizes) {
  dims strides(sizes.size(), 1);
  for (std::size_t k = sizes.size(); k-- > 1;) strides[k - 1] = strides[k] * std::max<std::int64_t>(sizes[k], 1);
  return md(sizes, f32, strides);
}

tag of_rank(tag image, std::size_t rank) {
  // oneDNN's tags alias by their letters (nchw and oihw are abcd, goihw and ncdhw abcde): compare
  // the forms, not the names.
  if (image == tag::goihw) return rank == 6 ? tag::goidhw : rank == 4 ? tag::goiw : image;
  if (rank == 3) {  // a 1-d convolution's
    if (image == tag::nchw) return tag::ncw;  // and oihw: oiw
    if (image == tag::nhwc) return tag::nwc;
    if (image == tag::nChw8c) return tag::nCw8c;
    if (image == tag::nChw16c) return tag::nCw16c;
    return image;
  }
  if (rank != 5) return image;
  if (image == tag::nchw) return tag::ncdhw;  // and oihw: oidhw
  if (image == tag::nhwc) return tag::ndhwc;
  if (image == tag::nChw8c) return tag::nCdhw8c;
  if (image == tag::nChw16c) return tag::nCdhw16c;
  return image;
}

md in_layout(const dims& sizes, tag image) { return md(sizes, f32, of_rank(image, sizes.size())); }

dnnl::primitive_attr attributes(const dnnl::post_ops& post_ops) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(post_ops);
  return attr;
}

plan_context::plan_context(const region_steps& region, weight_store& store, const std::vector<std::vector<std::int64_t>>& shapes)
    : region_(region),
      store_(store),
      slot_of_(static_cast<std::size_t>(region.values), no_slot),
      readers_(static_cast<std::size_t>(region.values)),
      planned_(region.steps.size(), false),
      channels_last_(channels_last_region(region)) {
  producer_.assign(static_cast<std::size_t>(region.values), no_slot);
  for (std::size_t i = 0; i < region.steps.size(); ++i) {
    for (const std::int64_t input : region.steps[i].record.inputs) readers_.at(static_cast<std::size_t>(input)).push_back(i);
    producer_.at(static_cast<std::size_t>(region.steps[i].record.output)) = i;
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    slot_of_[i] = add_slot(dense(dims(shapes[i])));
    shapes_ += i ? ", [" : "[";  // as c10 prints an IntArrayRef: "[1, 3, 96, 96]"
    for (std::size_t k = 0; k < shapes[i].size(); ++k) shapes_ += (k ? ", " : "") + std::to_string(shapes[i][k]);
    shapes_ += "]";
  }
}

std::shared_ptr<const execution_plan> plan_context::build() {
  const auto& steps = region_.steps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].fusion.absorbed || planned_[i]) continue;
    try {
      plan_step(i);  // a convolution or a linear that refuses its post-ops runs them after it
    } catch (const dnnl::error& error) {
      refuse("step " + std::to_string(i) + " (" + std::string(name_of(steps[i].kind)) + ") on input " + describe(steps[i]) +
             ": oneDNN refused it: " + error.what());
    }
  }
  plan_.in_output.assign(plan_.slots.size(), no_slot);
  for (std::int64_t index : region_.outputs) {
    const std::size_t slot = value(index);
    const dims d = plan_.slots[slot].dims();
    const std::size_t k = plan_.outputs.size();
    plan_.outputs.push_back(slot);
    plan_.output_dims.push_back(d);
    // Direct: a dense result whose bytes are all of a buffer of the call's own (not an input's or
    // a weight's, none of another output's, not empty; the result itself or a view of all of it,
    // as a linear's [rows, O] seen as [1, rows, O]) is written where the call returns it; else it
    // is copied there at the end.
    const std::size_t whole = root(slot);
    const bool direct = direct_outputs_enabled() && whole >= static_cast<std::size_t>(region_.inputs) &&
                        !plan_.constants[whole] && plan_.in_output[whole] == no_slot && plan_.slots[slot] == dense(d) &&
                        plan_.slots[slot].get_size() > 0 &&
                        (whole == slot || (plan_.alias_offsets[slot] == 0 && plan_.slots[whole].get_size() == plan_.slots[slot].get_size()));
    if (direct) {
      plan_.in_output[whole] = k;
      plan_.output_reorders.emplace_back();
      continue;
    }
    plan_.output_reorders.emplace_back(
        dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan_.slots[slot], cpu_engine(), dense(d))));
    record(plan_.output_reorders.back(), "output " + std::to_string(k));
    last_use_[root(slot)] = plan_.calls.size();  // read after the last call
  }
  for (std::size_t slot = 0; slot < plan_.slots.size(); ++slot)  // the views of a direct output are in its tensor
    if (plan_.aliases[slot] != no_slot && plan_.in_output[plan_.aliases[slot]] != no_slot)
      plan_.in_output[slot] = plan_.in_output[plan_.aliases[slot]];
  place();
  for (const auto& [index, weights, bias] : own_weights_) {  // later plans reorder from these, or share them
    store_.weights[index] = plan_.constants[weights];
    if (bias != no_slot) store_.biases[index] = plan_.constants[bias];
  }
  store_.views_named_data = false;
  return made_;
}

std::shared_ptr<const execution_plan> make_plan(const region_steps& region, weight_store& store,
                                                const std::vector<std::vector<std::int64_t>>& shapes) {
  return plan_context(region, store, shapes).build();
}

bool plan_context::small_step(std::size_t index) const {
  static const bool enabled = !switched_off("TD_ONEDNN_ONE_THREAD");
  const compiled_step& s = step(index);
  if (!enabled || s.record.inputs.empty()) return false;
  const auto elements = [](const dims& d) {
    std::int64_t n = 1;
    for (const auto e : d) n *= e;
    return n;
  };
  std::int64_t work = 0;
  switch (s.kind) {
    case step_kind::convolution: {
      if (s.weight_sizes.size() < 3) return false;
      work = elements(conv_output(*this, index));
      for (std::size_t k = 1; k < s.weight_sizes.size(); ++k) work *= s.weight_sizes[k];
      break;
    }
    case step_kind::global_avg_pool2d:
    case step_kind::global_avg_pool3d:
    case step_kind::relu:
    case step_kind::activation:
    case step_kind::mul:
    case step_kind::add:
      work = elements(plan_.slots[value(s.record.inputs[0])].dims());
      break;
    default:
      return false;
  }
  return work <= one_thread_work;
}

void plan_context::plan_step(std::size_t index) {
  step_ = index;
  const compiled_step& planned = step(index);
  if (planned.record.size_program && planned.kind != step_kind::reshape && planned.kind != step_kind::slice &&
      planned.kind != step_kind::resample) {
    // Made for its input's trailing sizes (an adaptive pool's windows): refused for others.
    const std::vector<std::int64_t> made_for = *program_sizes(index);
    const dims given = plan_.slots[value(planned.record.inputs.at(0))].dims();
    const auto text = [](const auto& sizes) {  // as c10 prints sizes: "[12, 14]"
      std::string out = "[";
      for (std::size_t k = 0; k < sizes.size(); ++k) out += (k ? ", " : "") + std::to_string(sizes[k]);
      return out + "]";
    };
    if (made_for.size() > given.size() || !std::equal(made_for.rbegin(), made_for.rend(), given.rbegin()))
      refuse("step " + std::to_string(index) + " (" + std::string(name_of(planned.kind)) + ") was made for an input ending in " +
             text(made_for) + " (an adaptive pool's windows, which hold for that size alone), given " + text(given));
  }
  const step_planner builder = builders.at(static_cast<std::size_t>(step(index).kind));
  if (!small_step(index)) return builder(*this, index);
  const std::size_t first = plan_.calls.size();
  {
    const thread_count one(1);
    builder(*this, index);
  }
  for (std::size_t k = first; k < plan_.calls.size(); ++k) plan_.calls[k].one_thread = !plan_.calls[k].host;
}

void plan_context::refuse(const std::string& why) const { fail_planning(region_.method, why); }

std::size_t plan_context::add_slot(const md& desc, std::size_t alias_of) {
  plan_.slots.push_back(desc);
  plan_.aliases.push_back(alias_of);
  plan_.alias_offsets.push_back(0);
  plan_.constants.emplace_back();
  first_use_.push_back(plan_.calls.size());
  last_use_.push_back(plan_.calls.size());
  return plan_.slots.size() - 1;
}

std::size_t plan_context::value(std::int64_t id) const {
  const std::size_t slot = slot_of_.at(static_cast<std::size_t>(id));
  if (slot == no_slot) refuse("value " + std::to_string(id) + " is read before it is made");
  return slot;
}

std::optional<dims> plan_context::planned_dims(std::int64_t id, const known_dims& known) const {
  for (const auto& [value, sizes] : known)
    if (value == id) return sizes;
  if (id < 0 || id >= region_.values) return std::nullopt;
  if (const std::size_t slot = slot_of(id); slot != no_slot) return plan_.slots[slot].dims();
  if (const std::size_t made_by = producer(id); made_by != no_slot) {
    // A step's own value, consumed by its post-ops or folded relu: of its finished value's sizes
    // (post-ops keep the sizes). Absorbed steps are finished by the step they are part of.
    for (std::size_t owner = 0; owner < region_.steps.size(); ++owner) {
      const step_fusion& f = region_.steps[owner].fusion;
      const bool part = owner == made_by || (f.relu && *f.relu == made_by) ||
                        std::find(f.post_ops.begin(), f.post_ops.end(), made_by) != f.post_ops.end();
      if (!part) continue;
      const std::int64_t last = f.post_ops.empty() ? finished(owner) : finished(f.post_ops.back());
      if (const std::size_t slot = slot_of(last); slot != no_slot) return plan_.slots[slot].dims();
    }
  }
  return std::nullopt;
}

std::optional<std::vector<std::int64_t>> plan_context::program_sizes(std::size_t index, const known_dims& known) const {
  const auto& program = step(index).record.size_program;
  if (!program) return std::nullopt;
  try {
    return torch_delegate::toolkit::run_size_program(*program, [&](std::int64_t value, std::int64_t dim) {
      const std::optional<dims> d = planned_dims(value, known);
      if (!d) throw std::invalid_argument("it reads the sizes of value " + std::to_string(value) + ", not planned yet");
      if (dim < 0 || dim >= static_cast<std::int64_t>(d->size()))
        throw std::invalid_argument("it reads dimension " + std::to_string(dim) + " of value " + std::to_string(value) + ", of " +
                                    std::to_string(d->size()) + " dimensions");
      return (*d)[static_cast<std::size_t>(dim)];
    });
  } catch (const std::invalid_argument& error) {
    refuse("step " + std::to_string(index) + " (" + std::string(name_of(step(index).kind)) + "): its size program: " + error.what());
  }
}

dims plan_context::reshape_sizes(std::size_t index, const known_dims& known) const {
  const compiled_step& shaped = step(index);
  const auto computed = program_sizes(index, known);
  dims to = computed ? dims(computed->begin(), computed->end()) : dims(shaped.record.reshape_sizes->begin(), shaped.record.reshape_sizes->end());
  const auto inferred = std::find(to.begin(), to.end(), -1);
  if (inferred == to.end()) return to;
  std::int64_t count = 1, known_count = 1;
  const std::optional<dims> from = planned_dims(shaped.record.inputs[0], known);
  if (!from) refuse("step " + std::to_string(index) + " (reshape): its input is not planned yet");
  for (const auto size : *from) count *= size;
  for (const auto size : to)
    if (size != -1) known_count *= size;
  if (known_count == 0 || count % known_count != 0)
    refuse("step " + std::to_string(index) + " (reshape): sizes with -1 that do not divide its input's " + std::to_string(count) + " values");
  *inferred = count / known_count;
  return to;
}

bool plan_context::is_output(std::int64_t id) const {
  return std::find(region_.outputs.begin(), region_.outputs.end(), id) != region_.outputs.end();
}

bool plan_context::viewed(std::size_t index) const {
  return std::find(plan_.aliases.begin(), plan_.aliases.end(), index) != plan_.aliases.end();
}

void plan_context::make_part(std::size_t part, std::size_t whole, std::size_t offset) {
  plan_.aliases[part] = whole;
  plan_.alias_offsets[part] = offset;
  first_use_[whole] = std::min(first_use_[whole], first_use_[part]);
  last_use_[whole] = std::max(last_use_[whole], last_use_[part]);
}

std::size_t plan_context::view(const md& desc, std::size_t of) {
  const std::size_t made = add_slot(desc, root(of));
  plan_.alias_offsets[made] = plan_.aliases[of] == no_slot ? 0 : plan_.alias_offsets[of];  // a view of a cat's part
  return made;
}

std::size_t plan_context::view_at(const md& desc, std::size_t of, std::size_t bytes) {
  const std::size_t made = view(desc, of);
  plan_.alias_offsets[made] += bytes;
  return made;
}

std::string plan_context::describe(const compiled_step& described) const {
  const std::size_t slot = slot_of_.at(static_cast<std::size_t>(described.record.inputs.at(0)));
  if (slot == no_slot) return "?";
  std::string text = "[";
  for (auto d : plan_.slots[slot].dims()) text += (text.size() > 1 ? ", " : "") + std::to_string(d);
  return text + "]";
}

std::size_t plan_context::as(std::size_t slot, const md& want) {
  if (plan_.slots[slot] == want) return slot;
  for (const auto& [from, to] : reordered_)
    if (from == slot && plan_.slots[to] == want) return to;
  const std::size_t to = copy_as(slot, want);
  reordered_.emplace_back(slot, to);
  return to;
}

std::size_t plan_context::copy_as(std::size_t slot, const md& want) {
  const std::size_t to = add_slot(want);
  call(dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plan_.slots[slot], cpu_engine(), want)),
       {{DNNL_ARG_FROM, slot}, {DNNL_ARG_TO, to}}, md());
  return to;
}

void plan_context::call(dnnl::primitive primitive, std::vector<std::pair<int, std::size_t>> arguments, const md& scratchpad,
                        std::function<void(const std::unordered_map<int, dnnl::memory>&)> host, const char* host_kind,
                        const char* host_op) {
  for (const auto& argument : arguments) {
    const std::size_t slot = root(argument.second);
    if (argument.first == DNNL_ARG_DST || argument.first == DNNL_ARG_TO ||
        (argument.first >= DNNL_ARG_MULTIPLE_DST && argument.first < DNNL_ARG_MULTIPLE_DST + 1024))  // a kernel of ours' second result
      first_use_[slot] = std::min(first_use_[slot], plan_.calls.size());
    last_use_[slot] = plan_.calls.size();
  }
  scratchpad_bytes_ = std::max(scratchpad_bytes_, scratchpad.get_size());
  const std::string label = std::to_string(step_) + " " + std::string(name_of(step(step_).kind));
  if (host)
    plan_.implementations.push_back({region_.method, shapes_, label, host_kind, host_op});
  else
    record(primitive, label);
  plan_.calls.push_back({std::move(primitive), std::move(arguments), scratchpad, std::move(host)});
}

void plan_context::record(const dnnl::primitive& primitive, std::string label) {
  const char* implementation = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_query(primitive.get_primitive_desc(), dnnl_query_impl_info_str, 0, &implementation),
                          "could not read a primitive's implementation");
  plan_.implementations.push_back({region_.method, shapes_, std::move(label),
                                   dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(primitive.get_kind())), implementation});
}

dnnl::memory reordered_now(dnnl::memory given, const md& want) {
  dnnl::memory reordered(want, cpu_engine());
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(given, reordered).execute(stream, given, reordered);
  stream.wait();
  return reordered;
}

std::size_t plan_context::constant(dnnl::memory given, const md& want) {
  if (given.get_desc().dims() != want.dims())  // the same bytes seen with other dims (a scale: leading ones)
    given = dnnl::memory(dense(want.dims()), cpu_engine(), given.get_data_handle());
  const std::size_t slot = add_slot(want);
  // Constants are read-only once made: a plan's copy in the layout wanted is shared, not copied.
  plan_.constants[slot] = !store_.views_named_data && given.get_desc() == want ? given : reordered_now(given, want);
  return slot;
}

std::size_t plan_context::constant_as_is(dnnl::memory made) {
  const std::size_t slot = add_slot(made.get_desc());
  plan_.constants[slot] = std::move(made);
  return slot;
}

void plan_context::place() {
  const auto inputs = static_cast<std::size_t>(region_.inputs);
  plan_.lives.assign(plan_.slots.size(), {});
  for (std::size_t slot = inputs; slot < plan_.slots.size(); ++slot)
    if (!plan_.constants[slot] && plan_.aliases[slot] == no_slot && plan_.in_output[slot] == no_slot)
      plan_.lives[slot] = {plan_.slots[slot].get_size(), first_use_[slot], last_use_[slot]};
  const buffer_layout layout = lay_out_buffer(plan_.lives);
  plan_.offsets = layout.offsets;
  plan_.scratchpad_offset = layout.bytes;
  plan_.buffer_bytes = layout.bytes + scratchpad_bytes_;
}

}  // namespace onednn_delegate
