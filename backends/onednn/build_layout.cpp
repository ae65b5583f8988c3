// The builders of layer_norm, cat and the views: layer_norm over the last dimension, cat along
// the channels in a layout with a JIT kernel (or, where a channel shuffle follows it, our
// shuffle kernel), and permute and flatten as memory descriptors over their input's bytes (no
// copy).
#include "builders.hpp"
#include "internal.hpp"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace onednn_delegate {

// This family's own helpers (defined below).
static bool cat_in_place(plan_context& p, std::size_t index);
static bool channel_shuffle(plan_context& p, std::size_t index);
/// A value's channels (dim 1) before it is planned: from its slot, else from the steps that make
/// it (a convolution's weights, the input of a step that keeps its shape, a cat's parts).
static std::optional<std::int64_t> channels_of(const plan_context& p, std::int64_t id, int depth = 0);
static bool cat_chain(plan_context& p, std::size_t index);

void layer_norm(plan_context& p, std::size_t index) {
  const compiled_step& norm = p.step(index);
  const dims d = p.slot(p.value(norm.record.inputs[0])).dims();
  const std::size_t in = p.as(p.value(norm.record.inputs[0]), dense(d));  // the normalized (last) dimension innermost
  const auto eps = static_cast<float>(*norm.record.layer_norm_eps);
  const dnnl::layer_normalization_forward::primitive_desc pd(
      {dnnl::prop_kind::forward_inference, p.slot(in), eps, dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift},
      attributes(), cpu_engine());
  const md channels({d.back()}, f32, tag::a);
  const std::size_t gamma = p.constant(p.store().weights[index], channels), beta = p.constant(p.store().biases[index], channels);
  p.keep_weights(index, gamma, beta);
  p.define(norm.record.output, pd.dst_desc());
  p.call(dnnl::layer_normalization_forward(pd),
         {{DNNL_ARG_SRC, in}, {DNNL_ARG_SCALE, gamma}, {DNNL_ARG_SHIFT, beta}, {DNNL_ARG_DST, p.value(norm.record.output)}},
         pd.scratchpad_desc());
}

/// A cat with no copy: at batch 1, in a channel-blocked layout (nChw8c, or nChw16c on AVX-512)
/// with every part's channels in whole blocks, a run of channel blocks is a dense tensor of that
/// layout of its own, so each part is made in place, in its range of the result's bytes
/// (GoogLeNet's inception blocks, SqueezeNet's fire modules; in nCdhw8c or nCdhw16c S3D's). Each
/// part must be a value this plan made in that layout, viewed by no other slot; false (nothing
/// changed) otherwise.
bool cat_in_place(plan_context& p, std::size_t index) {
  const auto& sources = p.step(index).record.inputs;
  for (const auto& [layout, block] : {std::pair{tag::nChw8c, 8}, std::pair{tag::nChw16c, 16}}) {
    std::vector<std::size_t> parts;
    dims out;
    bool fits = true;
    for (const std::int64_t source : sources) {
      const std::size_t slot = p.value(source);
      const dims d = p.slot(slot).dims();
      fits = (d.size() == 4 || d.size() == 5) && d[0] == 1 && d[1] % block == 0 && p.slot(slot) == in_layout(d, layout) &&
             slot >= static_cast<std::size_t>(p.region().inputs) && !p.constant_memory(slot) && p.alias_of(slot) == no_slot &&
             std::find(parts.begin(), parts.end(), slot) == parts.end() && !p.viewed(slot) &&  // no view of it
             (out.empty() || (d.size() == out.size() && std::equal(d.begin() + 2, d.end(), out.begin() + 2)));
      if (!fits) break;
      if (out.empty())
        out = d;
      else
        out[1] += d[1];
      parts.push_back(slot);
    }
    if (!fits || parts.empty()) continue;
    p.define(p.step(index).record.output, in_layout(out, layout));
    const std::size_t whole = p.value(p.step(index).record.output);
    std::size_t offset = 0;
    for (const std::size_t part : parts) {
      p.make_part(part, whole, offset);
      offset += p.slot(part).get_size();
    }
    return true;
  }
  return false;
}

namespace {
/// Whether cats followed by a channel shuffle run on our kernel (TD_ONEDNN_SHUFFLE=0: as oneDNN's
/// concat and reorders).
bool shuffle_enabled() {
  static const bool enabled = !switched_off("TD_ONEDNN_SHUFFLE");
  return enabled;
}
}  // namespace

/// ShuffleNetV2's channel shuffle after a cat, as one copy by our kernel (shuffle.hpp): the steps
/// cat(a, b) -> reshape [N, 2, C, H, W] -> permute [0, 2, 1, 3, 4] -> contiguous -> reshape
/// [N, 2C, H, W], each value read by the next step alone, a and b both [N, C, H, W]. Where the
/// result's only readers are the two slices of a chunk into halves ([0, C) and [C, 2C) of dim 1),
/// the kernel makes the halves as tensors of their own (a blocked layout cannot slice 58 channels
/// off without a copy), else the whole result. In a's layout when it is nChw16c or nhwc (which
/// AVX-512's kernels pick), else nChw8c: what the convolutions around it use. The steps it covers are
/// planned here (plan_context::mark_planned); false (nothing changed) when the steps are not that pattern.
bool channel_shuffle(plan_context& p, std::size_t index) {
  if (!shuffle_enabled()) return false;
  const auto& sources = p.step(index).record.inputs;
  if (sources.size() != 2) return false;
  const dims d = p.slot(p.value(sources[0])).dims();
  if (d.size() != 4 || p.slot(p.value(sources[1])).dims() != d) return false;
  const std::int64_t n = d[0], c = d[1], h = d[2], w = d[3];
  const auto is_output = [&](std::int64_t id) {
    return std::find(p.region().outputs.begin(), p.region().outputs.end(), id) != p.region().outputs.end();
  };
  // The one step that reads `id`, when it is of `kind` and not absorbed, and `id` is no result.
  const auto sole = [&](std::int64_t id, step_kind kind) -> std::optional<std::size_t> {
    const auto& readers = p.readers(id);
    if (readers.size() != 1 || is_output(id) || p.step(readers[0]).kind != kind || p.step(readers[0]).fusion.absorbed) return std::nullopt;
    return readers[0];
  };
  const auto split = sole(p.step(index).record.output, step_kind::reshape);
  // The views' sizes at this plan's shapes: the cat's result is not planned yet, of [n, 2c, h, w].
  const plan_context::known_dims joined{{p.step(index).record.output, dims{n, 2 * c, h, w}}};
  if (!split || p.reshape_sizes(*split, joined) != dims{n, 2, c, h, w}) return false;
  const auto swapped = sole(p.step(*split).record.output, step_kind::permute);
  if (!swapped || *p.step(*swapped).record.permute_dims != std::vector<std::int64_t>{0, 2, 1, 3, 4}) return false;
  const auto copied = sole(p.step(*swapped).record.output, step_kind::contiguous);
  if (!copied) return false;
  const auto merged = sole(p.step(*copied).record.output, step_kind::reshape);
  if (!merged) return false;
  plan_context::known_dims before_merge = joined;  // the merge's input: the swapped halves, [n, c, 2, h, w]
  before_merge.emplace_back(p.step(*copied).record.output, dims{n, c, 2, h, w});
  if (p.reshape_sizes(*merged, before_merge) != dims{n, 2 * c, h, w}) return false;
  const std::int64_t shuffled = p.step(*merged).record.output;

  // The halves, when a chunk's two slices are all that reads the result.
  std::vector<std::size_t> halves;
  if (const auto& readers = p.readers(shuffled); !is_output(shuffled) && readers.size() == 2) {
    std::optional<std::size_t> low, high;
    for (const std::size_t reader : readers) {
      const compiled_step& part = p.step(reader);
      if (part.kind != step_kind::slice || part.fusion.absorbed || part.record.slice->dim != 1 || part.record.slice->length != c) continue;
      if (part.record.slice->start == 0) low = reader;
      if (part.record.slice->start == c) high = reader;
    }
    if (low && high) halves = {*low, *high};
  }

  // In a's layout: nChw16c, nhwc (AVX-512's brgconv kernels), else nChw8c.
  const md& given = p.slot(p.value(sources[0]));
  const bool sixteen = given == md(d, f32, tag::nChw16c), nhwc = given == md(d, f32, tag::nhwc);
  const tag layout = sixteen ? tag::nChw16c : nhwc ? tag::nhwc : tag::nChw8c;
  const std::size_t a = p.as(p.value(sources[0]), md(d, f32, layout)), b = p.as(p.value(sources[1]), md(d, f32, layout));
  const std::int64_t count = halves.empty() ? 2 * c : c;  // each result's channels
  const shuffle::geometry g = nhwc ? shuffle::geometry{n * h * w, c, 1, c, count} : shuffle::geometry{n, c, h * w, sixteen ? 16 : 8};
  std::vector<std::pair<std::int64_t, std::int64_t>> parts;  // per result: (first channel, channels)
  std::vector<std::pair<int, std::size_t>> arguments{{DNNL_ARG_MULTIPLE_SRC, a}, {DNNL_ARG_MULTIPLE_SRC + 1, b}};
  if (halves.empty()) {
    p.define(shuffled, md({n, 2 * c, h, w}, f32, layout));
    parts.emplace_back(0, 2 * c);
    arguments.emplace_back(DNNL_ARG_MULTIPLE_DST, p.value(shuffled));
  } else {
    for (std::size_t k = 0; k < 2; ++k) {
      const std::int64_t made = p.step(halves[k]).record.output;
      p.define(made, md(d, f32, layout));
      parts.emplace_back(static_cast<std::int64_t>(k) * c, c);
      arguments.emplace_back(DNNL_ARG_MULTIPLE_DST + static_cast<int>(k), p.value(made));
      p.mark_planned(halves[k]);
    }
  }
  for (const std::size_t covered : {*split, *swapped, *copied, *merged}) p.mark_planned(covered);
  p.call(
      dnnl::primitive(), std::move(arguments), md(),
      [g, parts](const std::unordered_map<int, dnnl::memory>& bound) {
        const auto* x = static_cast<const float*>(bound.at(DNNL_ARG_MULTIPLE_SRC).get_data_handle());
        const auto* y = static_cast<const float*>(bound.at(DNNL_ARG_MULTIPLE_SRC + 1).get_data_handle());
        std::vector<std::int64_t> ends;  // the parts' output blocks, run as one range
        for (const auto& [first, count] : parts) ends.push_back((ends.empty() ? 0 : ends.back()) + shuffle::output_blocks(g, count));
        at::parallel_for(0, ends.back(), 1, [&](std::int64_t begin, std::int64_t end) {
          for (std::size_t k = 0; k < parts.size(); ++k) {
            const std::int64_t start = k ? ends[k - 1] : 0, lo = std::max(begin, start), hi = std::min(end, ends[k]);
            if (lo >= hi) continue;
            auto* out = static_cast<float*>(bound.at(DNNL_ARG_MULTIPLE_DST + static_cast<int>(k)).get_data_handle());
            shuffle::interleave(x, y, g, parts[k].first, parts[k].second, out, lo - start, hi - start);
          }
        });
      },
      "shuffle", "shuffle:sse");
  return true;
}

std::optional<std::int64_t> channels_of(const plan_context& p, std::int64_t id, int depth) {
  if (const std::size_t slot = p.slot_of(id); slot != no_slot) {
    const dims d = p.slot(slot).dims();
    return d.size() == 4 ? std::optional<std::int64_t>(d[1]) : std::nullopt;
  }
  const std::size_t made_by = p.producer(id);
  if (made_by == no_slot || depth > 64) return std::nullopt;
  const compiled_step& maker = p.step(made_by);
  switch (maker.kind) {
    case step_kind::convolution: return maker.weight_sizes.empty() ? std::nullopt : std::optional<std::int64_t>(maker.weight_sizes[0]);
    case step_kind::relu:
    case step_kind::activation:
    case step_kind::scale_by:
    case step_kind::add:
    case step_kind::max_pool2d:
    case step_kind::max_pool3d:
    case step_kind::global_avg_pool2d:
    case step_kind::global_avg_pool3d:
      return channels_of(p, maker.record.inputs[0], depth + 1);
    case step_kind::cat: {
      std::int64_t sum = 0;
      for (const std::int64_t part : maker.record.inputs) {
        const std::optional<std::int64_t> c = channels_of(p, part, depth + 1);
        if (!c) return std::nullopt;
        sum += *c;
      }
      return sum;
    }
    default: return std::nullopt;
  }
}

/// DenseNet's cats: each of the parts of one before it and more (cat(x0), cat(x0, x1), ..., the
/// block's cat(x0, ..., xn)). Each is a view of the first channels of one buffer, the chain's last
/// cat's, and each part is copied into its channels once, by the first cat that has it; oneDNN's
/// concat copied every part again for each cat (DenseNet-121: 1.7 ms a call of 16.7 in oneDNN's
/// log on AVX-512). In nhwc (a channels-last region) a view of some of the channels is strided:
/// our kernel reads it for a batch norm (channel_affine_convolution), any other reader a dense copy
/// (as()), no more than the concat copied. Elsewhere at batch 1, in the channel-blocked layout of
/// the ISA's convolutions (nChw8c; nChw16c where oneDNN runs AVX-512) with every part in whole
/// blocks: there the first k blocks of a buffer are a dense tensor of k blocks, so each view is
/// an ordinary dense value every reader takes. False (nothing planned) where the cat starts no
/// chain (no later cat begins with its parts) or continues none.
bool cat_chain(plan_context& p, std::size_t index) {
  if (!cat_chain_enabled()) return false;
  const auto& sources = p.step(index).record.inputs;
  const dims first = p.slot(p.value(sources[0])).dims();
  if (first.size() != 4) return false;
  const std::int64_t block = p.channels_last() ? 0 : onednn_runs_avx512() ? 16 : 8;  // 0: nhwc
  const tag layout = !block ? tag::nhwc : block == 16 ? tag::nChw16c : tag::nChw8c;  // the chain's buffer's
  if (block && first[0] != 1) return false;  // a blocked prefix is dense at batch 1 only
  for (const std::int64_t source : sources) {
    const dims d = p.slot(p.value(source)).dims();
    if (d.size() != 4 || d[0] != first[0] || d[2] != first[2] || d[3] != first[3] || (block && d[1] % block != 0)) return false;
  }
  // The parts already in a chain's buffer: its first ones, in order.
  std::size_t placed = 0, whole = no_slot;
  std::int64_t channels = 0;
  for (; placed < sources.size(); ++placed) {
    const auto found = p.decisions().chain_parts.find(sources[placed]);
    if (found == p.decisions().chain_parts.end() || (whole != no_slot && found->second.first != whole) || found->second.second != channels)
      break;
    whole = found->second.first;
    channels += p.slot(p.value(sources[placed])).dims()[1];
  }
  std::int64_t needed = channels;
  for (std::size_t k = placed; k < sources.size(); ++k) needed += p.slot(p.value(sources[k])).dims()[1];
  if (whole == no_slot) {
    // A chain starts: its buffer is its last cat's (fusion.cpp: the latest cat whose parts begin with these).
    const std::optional<std::size_t> last = p.step(index).fusion.chain_end;
    if (!last) return false;
    const std::optional<std::int64_t> total = channels_of(p, p.step(*last).record.output);
    if (!total || *total < needed || (block && *total % block != 0)) return false;
    whole = p.add_slot(md({first[0], *total, first[2], first[3]}, f32, layout));
  } else if (needed > p.slot(whole).dims()[1] || (placed < sources.size() && channels < p.decisions().chain_filled.at(whole))) {
    return false;  // too wide, or new parts where a sibling cat's are (cat(a, b, c), then cat(a, b, d))
  }
  const md buffer = p.slot(whole);
  for (std::size_t k = placed; k < sources.size(); ++k) {
    const std::size_t part = p.value(sources[k]);
    const dims d = p.slot(part).dims();
    const std::size_t target = p.view(buffer.submemory_desc(d, {0, channels, 0, 0}), whole);
    p.call(dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), p.slot(part), cpu_engine(), p.slot(target))),
           {{DNNL_ARG_FROM, part}, {DNNL_ARG_TO, target}}, md());
    p.decisions().chain_parts.emplace(sources[k], std::pair{whole, channels});
    channels += d[1];
  }
  p.decisions().chain_filled[whole] = std::max(p.decisions().chain_filled[whole], channels);
  const dims joined{first[0], channels, first[2], first[3]};
  p.bind(p.step(index).record.output, p.view(block ? md(joined, f32, layout) : buffer.submemory_desc(joined, {0, 0, 0, 0}), whole));
  return true;
}

void cat(plan_context& p, std::size_t index) {
  if (channel_shuffle(p, index) || cat_in_place(p, index) || cat_chain(p, index)) return;
  const compiled_step& joined = p.step(index);
  const auto& sources = joined.record.inputs;
  // In the layouts the inputs have; where that is a reference kernel (channels that do not
  // fill a blocked layout's last block: ShuffleNetV2's 58), all of them in nhwc, else nchw.
  std::optional<dnnl::concat::primitive_desc> chosen;
  std::optional<tag> relaid;
  for (const std::optional<tag> layout : {std::optional<tag>(), std::optional<tag>(tag::nhwc), std::optional<tag>(tag::nchw)}) {
    std::vector<md> inputs;
    for (const std::int64_t source : sources)
      inputs.push_back(layout ? in_layout(p.slot(p.value(source)).dims(), *layout) : p.slot(p.value(source)));
    try {
      dnnl::concat::primitive_desc pd(1, inputs, cpu_engine(), attributes());
      const bool fast = !is_reference(pd.impl_info_str());
      if (!chosen || fast) chosen = pd, relaid = layout;
      if (fast) break;
    } catch (const dnnl::error&) {
    }
  }
  if (!chosen) p.refuse("step " + std::to_string(index) + " (cat): oneDNN refused it in every layout");
  std::vector<std::pair<int, std::size_t>> arguments;
  for (std::size_t k = 0; k < sources.size(); ++k) {
    const std::size_t slot = p.value(sources[k]);
    arguments.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k),
                           relaid ? p.as(slot, in_layout(p.slot(slot).dims(), *relaid)) : slot);
  }
  p.define(joined.record.output, chosen->dst_desc());
  arguments.emplace_back(DNNL_ARG_DST, p.value(joined.record.output));
  p.call(dnnl::concat(*chosen), std::move(arguments), chosen->scratchpad_desc());
}

void permute(plan_context& p, std::size_t index) {
  const compiled_step& permuted = p.step(index);
  const std::vector<std::int64_t>& to = *permuted.record.permute_dims;
  const std::size_t in = p.value(permuted.record.inputs[0]);
  const std::size_t rank = to.size();
  std::vector<int> order(rank);  // oneDNN's: input axis k becomes axis order[k]
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t from = to[k] < 0 ? to[k] + static_cast<std::int64_t>(rank) : to[k];
    TORCH_CHECK(from >= 0 && from < static_cast<std::int64_t>(rank), "onednn: region ", p.region().method, ": permute's dims ",
                c10::IntArrayRef(to), " for a ", rank, "-d tensor");
    order[static_cast<std::size_t>(from)] = static_cast<int>(k);
  }
  TORCH_CHECK(p.slot(in).dims().size() == rank, "onednn: region ", p.region().method, ": permute of ", rank, " dims given a ",
              p.slot(in).dims().size(), "-d tensor");
  p.bind(permuted.record.output, p.view(p.slot(in).permute_axes(order), in));
}

void flatten(plan_context& p, std::size_t index) {
  const compiled_step& flat = p.step(index);
  const flatten_parameters& f = *flat.record.flatten;
  const dims d = p.slot(p.value(flat.record.inputs[0])).dims();
  const auto rank = static_cast<std::int64_t>(d.size());
  const std::int64_t start = f.start_dim < 0 ? f.start_dim + rank : f.start_dim, end = f.end_dim < 0 ? f.end_dim + rank : f.end_dim;
  TORCH_CHECK(start >= 0 && end < rank && start <= end, "onednn: region ", p.region().method, ": flatten from ", f.start_dim, " to ",
              f.end_dim, " of a ", rank, "-d tensor");
  dims shaped(d.begin(), d.begin() + start);
  std::int64_t merged = 1;
  for (std::int64_t k = start; k <= end; ++k) merged *= d[static_cast<std::size_t>(k)];
  shaped.push_back(merged);
  shaped.insert(shaped.end(), d.begin() + end + 1, d.end());
  const std::size_t in = p.as(p.value(flat.record.inputs[0]), dense(d));
  p.bind(flat.record.output, p.view(dense(shaped), in));
}

/// A view with other sizes (view, reshape): of the same bytes when oneDNN can describe the
/// input's layout with the new sizes (a dense tensor, or a slice along its leading dimensions),
/// else of a dense copy (a blocked or permuted layout: ShuffleNetV2's channel shuffle).
void reshape(plan_context& p, std::size_t index) {
  const compiled_step& shaped = p.step(index);
  const dims to = p.reshape_sizes(index);
  std::size_t in = p.value(shaped.record.inputs[0]);
  const dims d = p.slot(in).dims();
  std::int64_t from_count = 1, to_count = 1;
  for (const auto size : d) from_count *= size;
  for (const auto size : to) to_count *= size;
  TORCH_CHECK(from_count == to_count, "onednn: region ", p.region().method, ": step ", index, ": a reshape of ", c10::IntArrayRef(d),
              " to ", c10::IntArrayRef(to));
  md reshaped;
  try {
    reshaped = p.slot(in).reshape(to);
  } catch (const dnnl::error&) {
    in = p.as(in, dense(d));
    reshaped = p.slot(in).reshape(to);
  }
  p.bind(shaped.record.output, p.view(reshaped, in));
}

/// A part of one dimension (a chunk's): a view of the same bytes in the input's plain layout (a
/// blocked one is made dense first).
void slice(plan_context& p, std::size_t index) {
  const compiled_step& sliced = p.step(index);
  const slice_parameters& s = *sliced.record.slice;
  std::size_t in = p.value(sliced.record.inputs[0]);
  const dims d = p.slot(in).dims();
  TORCH_CHECK(s.dim < static_cast<std::int64_t>(d.size()) && s.start + s.length <= d[static_cast<std::size_t>(s.dim)], "onednn: region ",
              p.region().method, ": step ", index, ": a slice of [", s.start, ", ", s.start + s.length, ") along dimension ", s.dim, " of ",
              c10::IntArrayRef(d));
  // A chunk's part, made for one size of the dimension it cuts (its program's one size): of that size only.
  if (const auto made_for = p.program_sizes(index); made_for && made_for->size() == 1 && (*made_for)[0] != d[static_cast<std::size_t>(s.dim)])
    p.refuse("step " + std::to_string(index) + " (slice): a part of a chunk of dimension " + std::to_string(s.dim) + " made for size " +
             std::to_string((*made_for)[0]) + ", given " + c10::str(c10::IntArrayRef(d)) + ": a chunk's parts change with that size");
  if (p.slot(in).data.format_kind != dnnl_blocked || p.slot(in).data.format_desc.blocking.inner_nblks != 0) in = p.as(in, dense(d));
  dims part = d, offsets(d.size(), 0);
  part[static_cast<std::size_t>(s.dim)] = s.length;
  offsets[static_cast<std::size_t>(s.dim)] = s.start;
  p.bind(sliced.record.output, p.view(p.slot(in).submemory_desc(part, offsets), in));
}

/// A copy into a dense, row-major layout (none when the value already is one).
void contiguous(plan_context& p, std::size_t index) {
  const compiled_step& copied = p.step(index);
  const std::size_t in = p.value(copied.record.inputs[0]);
  p.bind(copied.record.output, p.as(in, dense(p.slot(in).dims())));
}

}  // namespace onednn_delegate
