// The recurrent builder: one layer of an nn.LSTM or nn.GRU (both directions) as oneDNN's LSTM or
// linear-before-reset GRU primitive (PyTorch's GRU formula), over the layer's input as the region
// holds it ([batch, time, features] or [time, batch, features], dense: oneDNN reads both, ntc and
// tnc) and the layer's part of the initial states, writing the output sequence with both
// directions side by side, as PyTorch does. The weights are reordered at plan time from the ones
// compile put in oneDNN's gate order (runtime.cpp, recurrent_weights).
#include "builders.hpp"
#include "recurrence.hpp"

#include <ATen/Parallel.h>

#include <string>

namespace onednn_delegate {

bool own_recurrence_enabled() {
  static const bool enabled = own_avx2_kernels_allowed("TD_ONEDNN_RECURRENCE") && recurrence::cpu_supported();
  return enabled;
}

namespace {
/// The layer as oneDNN's matmul, every gate's part of the input for the whole sequence at once
/// ([rows, features] x [features, directions * gates * hidden], the biases added), then our
/// recurrence kernel (recurrence.hpp) over it, its directions and batch groups on ATen's threads.
void recurrence_on_own_kernel(plan_context& p, std::size_t index, std::size_t x, const std::vector<std::size_t>& states, const dims& out) {
  const compiled_step& step = p.step(index);
  const recurrent_parameters& r = *step.record.recurrent;
  const bool lstm = r.kind == "lstm";
  const std::vector<std::int64_t>& w = step.weight_sizes;
  const std::int64_t directions = w.at(0), hidden = r.hidden, features = w.at(2) - hidden, gates = recurrent_gates(r.kind);
  const dims d = p.slot(x).dims();
  const std::int64_t rows = d[0] * d[1], columns = directions * gates * hidden;
  const std::size_t src = p.view(md({rows, features}, f32, tag::ab), x);
  const weight_store::recurrence_weights& own = p.store().recurrence.at(index);
  // The input's weights as compile left them, [directions * gates * hidden, features]: the matmul's [features, columns] (ba).
  const dnnl::memory on_input(md({features, columns}, f32, tag::ba), cpu_engine(), p.store().weights[index].get_data_handle());
  const dnnl::matmul::primitive_desc pd({md({rows, features}, f32, tag::ab), md({features, columns}, f32, tag::any),
                                         md({1, columns}, f32, tag::ab), md({rows, columns}, f32, tag::ab)},
                                        attributes(), cpu_engine());
  const std::size_t weights = p.constant(on_input, pd.weights_desc());
  const std::size_t bias =
      p.constant(dnnl::memory(md({1, columns}, f32, tag::ab), cpu_engine(), own.input_bias.get_data_handle()), pd.bias_desc());
  const std::size_t input_gates = p.add_slot(md({rows, columns}, f32, tag::ab));
  p.call(dnnl::matmul(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, input_gates}},
         pd.scratchpad_desc());
  p.define(p.finished(index), dense(out));
  recurrence::layer shape;
  shape.kind = lstm                   ? recurrence::cell::lstm
               : r.kind == "gru"      ? recurrence::cell::gru
               : r.kind == "rnn_relu" ? recurrence::cell::relu
                                      : recurrence::cell::tanh;
  shape.batch_first = r.batch_first;
  shape.steps = r.batch_first ? d[1] : d[0];
  shape.batch = r.batch_first ? d[0] : d[1];
  shape.hidden = hidden;
  shape.directions = directions;
  shape.packed = static_cast<const float*>(own.packed.get_data_handle());
  shape.new_gate_bias = static_cast<const float*>(own.new_gate_bias.get_data_handle());
  std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_SRC, input_gates}, {DNNL_ARG_DST, p.value(p.finished(index))}};
  if (!states.empty()) arguments.emplace_back(DNNL_ARG_SRC_ITER, states.at(0));
  if (lstm && !states.empty()) arguments.emplace_back(DNNL_ARG_SRC_ITER_C, states.at(1));
  auto run = [shape](const std::unordered_map<int, dnnl::memory>& given) {
    recurrence::layer layer = shape;
    layer.input_gates = static_cast<const float*>(given.at(DNNL_ARG_SRC).get_data_handle());
    layer.out = static_cast<float*>(given.at(DNNL_ARG_DST).get_data_handle());
    if (const auto h = given.find(DNNL_ARG_SRC_ITER); h != given.end()) layer.h0 = static_cast<const float*>(h->second.get_data_handle());
    if (const auto c = given.find(DNNL_ARG_SRC_ITER_C); c != given.end()) layer.c0 = static_cast<const float*>(c->second.get_data_handle());
    at::parallel_for(0, recurrence::tasks(layer), 1, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t task = first; task < last; ++task) recurrence::run_task(layer, task);
    });
  };
  static const std::string names[] = {"lstm_recurrence:avx2", "gru_recurrence:avx2", "rnn_tanh_recurrence:avx2",
                                      "rnn_relu_recurrence:avx2"};
  p.call(dnnl::primitive(), std::move(arguments), md(), run, "rnn", names[static_cast<int>(shape.kind)].c_str());
  for (const std::size_t next : step.fusion.post_ops) post_op_alone(p, next);
}
}  // namespace

void recurrent(plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const recurrent_parameters& r = *step.record.recurrent;
  const bool lstm = r.kind == "lstm", gru = r.kind == "gru";
  const std::vector<std::int64_t>& w = step.weight_sizes;  // [directions, gates * hidden, features + hidden]
  const std::int64_t directions = w.at(0), hidden = r.hidden, features = w.at(2) - hidden, gates = recurrent_gates(r.kind);
  const std::size_t in = p.value(step.record.inputs[0]);
  const dims d = p.slot(in).dims();
  if (d.size() != 3 || d[2] != features)
    p.refuse("a recurrent layer of " + std::to_string(features) + " features given input " + p.describe(step) +
             " (expected [batch, time, features] or [time, batch, features])");
  const std::int64_t batch = r.batch_first ? d[0] : d[1], steps = r.batch_first ? d[1] : d[0];
  if (batch < 1 || steps < 1) p.refuse("a recurrent layer given an empty input " + p.describe(step));
  const tag sequence = r.batch_first ? tag::ntc : tag::tnc;
  const std::size_t x = p.as(in, dense(d));
  // The layer's part of each initial state: [layers * directions, batch, hidden], rows from layer * directions.
  const dims state{r.layers * directions, batch, hidden};
  std::vector<std::size_t> states;
  for (std::size_t k = 1; k < step.record.inputs.size(); ++k) {
    const std::size_t given = p.value(step.record.inputs[k]);
    if (p.slot(given).dims() != state) {
      std::string sizes;
      for (const auto size : p.slot(given).dims()) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
      p.refuse("a recurrent layer's initial state of [" + sizes + "] (expected [" + std::to_string(state[0]) + ", " +
               std::to_string(batch) + ", " + std::to_string(hidden) + "]: layers * directions, batch, hidden)");
    }
    const std::size_t bytes = static_cast<std::size_t>(r.layer * directions * batch * hidden) * sizeof(float);
    states.push_back(p.view_at(md({1, directions, batch, hidden}, f32, tag::ldnc), p.as(given, dense(state)), bytes));
  }
  const dims out = r.batch_first ? dims{batch, steps, directions * hidden} : dims{steps, batch, directions * hidden};
  if (own_recurrence_enabled()) return recurrence_on_own_kernel(p, index, x, states, out);
  const std::size_t src = p.view(md({steps, batch, features}, f32, sequence), x);
  const md src_layer({steps, batch, features}, f32, sequence), dst_layer({steps, batch, directions * hidden}, f32, sequence);
  // No states read: zeros (an empty descriptor).
  const md state_desc = states.empty() ? md() : md({1, directions, batch, hidden}, f32, tag::ldnc);
  const md on_input({1, directions, features, gates, hidden}, f32, tag::any),
      on_state({1, directions, hidden, gates, hidden}, f32, tag::any);
  const md bias({1, directions, gru ? gates + 1 : gates, hidden}, f32, tag::ldgo);
  const auto direction = directions == 2 ? dnnl::rnn_direction::bidirectional_concat : dnnl::rnn_direction::unidirectional_left2right;
  const auto inference = dnnl::prop_kind::forward_inference;
  dnnl::primitive primitive;
  md weights_layer, weights_iter, scratchpad;
  try {
    if (lstm) {
      const dnnl::lstm_forward::primitive_desc pd(
          {inference, direction, src_layer, state_desc, state_desc, on_input, on_state, bias, dst_layer, md(), md()}, attributes(),
          cpu_engine());
      primitive = dnnl::lstm_forward(pd);
      weights_layer = pd.weights_layer_desc();
      weights_iter = pd.weights_iter_desc();
      scratchpad = pd.scratchpad_desc();
    } else if (!gru) {  // an Elman RNN
      const auto activation = r.kind == "rnn_relu" ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_tanh;
      const dnnl::vanilla_rnn_forward::primitive_desc pd(
          {inference, activation, direction, src_layer, state_desc, on_input, on_state, bias, dst_layer, md()}, attributes(), cpu_engine());
      primitive = dnnl::vanilla_rnn_forward(pd);
      weights_layer = pd.weights_layer_desc();
      weights_iter = pd.weights_iter_desc();
      scratchpad = pd.scratchpad_desc();
    } else {
      const dnnl::lbr_gru_forward::primitive_desc pd(
          {inference, direction, src_layer, state_desc, on_input, on_state, bias, dst_layer, md()}, attributes(), cpu_engine());
      primitive = dnnl::lbr_gru_forward(pd);
      weights_layer = pd.weights_layer_desc();
      weights_iter = pd.weights_iter_desc();
      scratchpad = pd.scratchpad_desc();
    }
  } catch (const dnnl::error& error) {
    p.refuse("oneDNN has no " + r.kind + " for input " + p.describe(step) + ": " + error.what());
  }
  const std::size_t layer_weights = p.constant(p.store().weights[index], weights_layer);
  const std::size_t iter_weights = p.constant(p.store().iteration[index], weights_iter);
  const std::size_t bias_slot = p.constant(p.store().biases[index], bias);
  p.define(p.finished(index), dense(out));
  const std::size_t dst = p.view(dst_layer, p.value(p.finished(index)));
  std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_SRC_LAYER, src},
                                                     {DNNL_ARG_WEIGHTS_LAYER, layer_weights},
                                                     {DNNL_ARG_WEIGHTS_ITER, iter_weights},
                                                     {DNNL_ARG_BIAS, bias_slot},
                                                     {DNNL_ARG_DST_LAYER, dst}};
  if (!states.empty()) arguments.emplace_back(DNNL_ARG_SRC_ITER, states.at(0));
  if (lstm && !states.empty()) arguments.emplace_back(DNNL_ARG_SRC_ITER_C, states.at(1));
  p.call(primitive, std::move(arguments), scratchpad);
  for (const std::size_t next : step.fusion.post_ops) post_op_alone(p, next);
}

}  // namespace onednn_delegate
