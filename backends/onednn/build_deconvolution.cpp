// The deconvolution builder: PyTorch's conv_transpose1d/2d/3d (a U-Net's or a decoder's
// upsampling) as oneDNN's deconvolution, in the layouts oneDNN picks, never on a reference kernel:
// where oneDNN has only those, ATen's transposed convolution on dense tensors. An output padding
// is oneDNN's right padding less it (its output's extra rows and columns on the far side).
#include "builders.hpp"
#include "internal.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <optional>
#include <string>

namespace onednn_delegate {

md deconvolution_weights(const std::vector<std::int64_t>& weight, std::int64_t groups) {
  // PyTorch's bytes are [I, O / groups, kernel...]: oneDNN's logical [O, I, kernel...] stored input
  // channels first (iohw, and its 1-d and 3-d forms); grouped, [groups, O / groups, I / groups,
  // kernel...] stored [groups, I / groups, O / groups, kernel...] (giohw's forms).
  dims logical{weight[1], weight[0] / groups};
  logical.insert(logical.end(), weight.begin() + 2, weight.end());
  const std::size_t rank = weight.size();
  if (groups == 1) return md(logical, f32, rank == 3 ? tag::bac : rank == 5 ? tag::iodhw : tag::iohw);
  logical.insert(logical.begin(), groups);
  return md(logical, f32, rank == 3 ? tag::acbd : rank == 5 ? tag::giodhw : tag::giohw);
}

namespace {

/// Deconvolution `index`'s output padding, one a spatial dimension (zeros where it has none).
std::vector<std::int64_t> output_padding(const compiled_step& step) {
  return step.record.output_padding ? *step.record.output_padding : std::vector<std::int64_t>(step.record.convolution->stride.size(), 0);
}

/// The output of deconvolution `index` for its input's size: (in - 1) * stride - 2 * padding +
/// dilation * (kernel - 1) + output_padding + 1.
dims deconvolution_output(const plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const convolution_parameters& c = *step.record.convolution;
  const dims d = p.slot(p.value(step.record.inputs[0])).dims();
  const std::vector<std::int64_t>& w = step.weight_sizes;
  const std::vector<std::int64_t> extra = output_padding(step);
  dims out{d[0], w[1] * c.groups};
  for (std::size_t k = 0; k + 2 < d.size(); ++k)
    out.push_back((d[k + 2] - 1) * c.stride[k] - 2 * c.padding[k] + c.dilation[k] * (w[k + 2] - 1) + extra[k] + 1);
  return out;
}

/// Where oneDNN offers only a reference kernel: ATen's conv_transpose2d on dense NCHW tensors (the
/// weights kept as PyTorch's in the plan), its post-ops after it.
void deconvolution_in_aten(plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const convolution_parameters& c = *step.record.convolution;
  const dims d = p.slot(p.value(step.record.inputs[0])).dims();
  const std::vector<std::int64_t> weight = step.weight_sizes;
  const std::int64_t groups = c.groups, outputs = weight[1] * groups;
  const std::size_t src = p.as(p.value(step.record.inputs[0]), dense(d));
  const std::size_t weights = p.constant(p.store().weights[index], deconvolution_weights(weight, groups));
  const std::size_t bias = p.constant(p.store().biases[index], md({outputs}, f32, tag::x));
  p.keep_weights(index, weights, bias);
  const dims out = deconvolution_output(p, index);
  p.define(p.finished(index), dense(out));
  const dnnl::memory weight_memory = p.constant_memory(weights), bias_memory = p.constant_memory(bias);
  const std::vector<std::int64_t> stride = c.stride, padding = c.padding, dilation = c.dilation, extra = output_padding(step);
  auto run = [=](const std::unordered_map<int, dnnl::memory>& arguments) {
    c10::InferenceMode inference;
    const at::Tensor x = at::from_blob(arguments.at(DNNL_ARG_SRC).get_data_handle(), d, at::kFloat);
    const at::Tensor w = at::from_blob(weight_memory.get_data_handle(), weight, at::kFloat);
    const at::Tensor b = at::from_blob(bias_memory.get_data_handle(), {outputs}, at::kFloat);
    const at::Tensor y = at::convolution(x, w, b, stride, padding, dilation, true, extra, groups);
    at::from_blob(arguments.at(DNNL_ARG_DST).get_data_handle(), out, at::kFloat).copy_(y);
  };
  p.call(dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, p.value(p.finished(index))}}, md(), run, "deconvolution",
         "aten::convolution");
  for (const std::size_t next : step.fusion.post_ops) post_op_alone(p, next);
}

}  // namespace

void deconvolution(plan_context& p, std::size_t index) {
  const compiled_step& step = p.step(index);
  const convolution_parameters& c = *step.record.convolution;
  const std::size_t in = p.value(step.record.inputs[0]);
  const dims d = p.slot(in).dims();
  const std::vector<std::int64_t>& w = step.weight_sizes;
  if (d.size() != w.size() || d.size() < 3 || d.size() > 5 || d[1] != w[0])
    p.refuse("a transposed convolution of weight [" + std::to_string(w.at(0)) + ", " + std::to_string(w.at(1)) +
             ", ...] (its input channels first) given input " + p.describe(step));
  const dims out = deconvolution_output(p, index);
  if (std::any_of(out.begin() + 2, out.end(), [](std::int64_t size) { return size <= 0; }))
    p.refuse("a transposed convolution's input " + p.describe(step) + " gives an empty output");
  const std::int64_t outputs = w[1] * c.groups;
  dims grouped{w[1], w[0] / c.groups};
  grouped.insert(grouped.end(), w.begin() + 2, w.end());
  if (c.groups > 1) grouped.insert(grouped.begin(), c.groups);
  const dims stride(c.stride.begin(), c.stride.end()), padding(c.padding.begin(), c.padding.end());
  dims padding_r = padding;  // the output padding's rows and columns on the far side: less padding there
  const std::vector<std::int64_t> extra = output_padding(step);
  for (std::size_t k = 0; k < padding_r.size(); ++k) padding_r[k] -= extra[k];
  dims dilation(c.dilation.begin(), c.dilation.end());
  for (auto& each : dilation) each -= 1;  // oneDNN counts the gaps
  const auto descriptor = [&](const md& src) -> std::optional<dnnl::deconvolution_forward::primitive_desc> {
    try {
      return dnnl::deconvolution_forward::primitive_desc(
          {dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src, md(grouped, f32, tag::any),
           md({outputs}, f32, tag::x), md(out, f32, tag::any), stride, dilation, padding, padding_r},
          attributes(), cpu_engine());
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  };
  const auto fast = [](const std::optional<dnnl::deconvolution_forward::primitive_desc>& pd) {
    return pd && !is_reference(pd->impl_info_str());
  };
  // oneDNN's pick of layouts, else the input's own, else each blocked and plain one in turn.
  std::optional<dnnl::deconvolution_forward::primitive_desc> chosen = descriptor(md(d, f32, tag::any));
  for (const md& src : {p.slot(in), in_layout(d, tag::nChw16c), in_layout(d, tag::nChw8c), in_layout(d, tag::nhwc), dense(d)})
    if (!fast(chosen)) chosen = descriptor(src);
  if (!fast(chosen)) return deconvolution_in_aten(p, index);
  const std::size_t src = p.as(in, chosen->src_desc());
  const std::size_t weights = p.constant(p.store().weights[index], chosen->weights_desc());
  const std::size_t bias = p.constant(p.store().biases[index], chosen->bias_desc());
  p.keep_weights(index, weights, bias);
  p.define(p.finished(index), chosen->dst_desc());
  p.call(dnnl::deconvolution_forward(*chosen),
         {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, p.value(p.finished(index))}},
         chosen->scratchpad_desc());
  for (const std::size_t next : step.fusion.post_ops) post_op_alone(p, next);
}

}  // namespace onednn_delegate
