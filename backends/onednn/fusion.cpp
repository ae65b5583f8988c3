// Every fusion onednn makes, decided in one pass over a region's steps at compile (no shapes, no
// LibTorch): a relu folded into the convolution or add it follows, each convolution's, linear's
// and matmul's post-ops, a matmul's scaled first operand, and the cross-step candidates whose
// shapes the planner checks (a mul folded into a convolution's weights, a cat chain's end). The
// plan context (planner.cpp) and the builders apply the decisions and fall back, step by step,
// when oneDNN refuses one; they decide only what the shapes decide (plan_decisions).
#include "steps.hpp"

#include <algorithm>
#include <array>

namespace onednn_delegate {

std::string_view name_of(step_kind kind) { return step_names.at(static_cast<std::size_t>(kind)); }

std::optional<step_kind> step_kind_named(std::string_view name) {
  for (std::size_t k = 0; k < step_names.size(); ++k)
    if (step_names[k] == name) return static_cast<step_kind>(k);
  return std::nullopt;
}

std::int64_t finished_value(const std::vector<compiled_step>& steps, std::size_t index) {
  const std::optional<std::size_t> relu = steps[index].fusion.relu;
  return relu ? steps[*relu].record.output : steps[index].record.output;
}

std::vector<step_fusion> decide_fusions(const std::vector<compiled_step>& steps, std::int64_t values,
                                        const std::vector<std::int64_t>& outputs) {
  const auto count = static_cast<std::size_t>(values);
  const auto at = [](std::int64_t id) { return static_cast<std::size_t>(id); };
  std::vector<step_fusion> fusion(steps.size());
  std::vector<int> uses(count, 0);  // how many reads of each value (+2 for a result: never fused away)
  std::vector<std::size_t> reader(count, 0);
  for (std::size_t i = 0; i < steps.size(); ++i)
    for (const std::int64_t input : steps[i].record.inputs) {
      ++uses[at(input)];
      reader[at(input)] = i;
    }
  for (const std::int64_t output : outputs) uses[at(output)] += 2;
  const auto sole_reader = [&](std::int64_t value) -> std::optional<std::size_t> {
    if (uses[at(value)] != 1) return std::nullopt;
    return reader[at(value)];
  };
  const auto finished = [&](std::size_t i) {
    return fusion[i].relu ? steps[*fusion[i].relu].record.output : steps[i].record.output;
  };

  // 1. A relu that alone reads a convolution's or an add's value goes with that step, whatever
  //    the planner falls back to (format 1 wrote it as a flag of the step).
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != step_kind::convolution && steps[i].kind != step_kind::add) continue;
    const std::optional<std::size_t> next = sole_reader(steps[i].record.output);
    if (!next || steps[*next].kind != step_kind::relu || fusion[*next].absorbed) continue;
    fusion[i].relu = next;
    fusion[*next].absorbed = true;
  }

  // Where each value is made: a folded relu's value by the step it is folded into.
  std::vector<std::int64_t> made_at(count, -1);  // region inputs: -1
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (!fusion[i].absorbed) made_at[at(finished(i))] = made_at[at(steps[i].record.output)] = static_cast<std::int64_t>(i);

  // 2. Post-ops: while the value made so far is read by one step alone and is no result, an
  //    activation of it, a scale_by, or (after a convolution) an add of it and a value made
  //    before the convolution (of two convolutions, the later one takes a residual's add).
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != step_kind::convolution && steps[i].kind != step_kind::linear && steps[i].kind != step_kind::matmul) continue;
    std::int64_t made = finished(i);
    while (const std::optional<std::size_t> next = sole_reader(made)) {
      const compiled_step& step = steps[*next];
      if (fusion[*next].absorbed) break;
      if (step.kind == step_kind::add && steps[i].kind == step_kind::convolution) {
        const std::int64_t other = step.record.inputs[0] == made ? step.record.inputs[1] : step.record.inputs[0];
        if (other == made || made_at[at(other)] >= static_cast<std::int64_t>(i)) break;
      } else if (step.kind != step_kind::relu && step.kind != step_kind::activation && step.kind != step_kind::scale_by) {
        break;
      }
      fusion[i].post_ops.push_back(*next);
      fusion[*next].absorbed = true;
      made = finished(*next);
    }
  }

  // 3. A scale_by whose value a matmul alone reads, as its first operand only (attention's scaled
  //    query): the matmul scales its product instead. A query that is a strided view (a select
  //    of a permuted qkv) would otherwise be copied dense for the scale's own primitive.
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != step_kind::scale_by || fusion[i].absorbed) continue;
    const std::int64_t scaled = steps[i].record.output;
    const std::optional<std::size_t> next = sole_reader(scaled);
    if (!next || steps[*next].kind != step_kind::matmul || steps[*next].record.inputs.at(0) != scaled) continue;
    fusion[*next].scaled_first = i;
    fusion[i].absorbed = true;
  }

  // Decisions the planner completes once shapes are known (plan_decisions).
  // 4. A mul whose product a convolution without groups alone reads, as its input: the
  //    convolution may read the mul's first operand with its weights scaled instead (a 1x1 one:
  //    the planner checks its weights' sizes, which compile reads after these decisions).
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != step_kind::mul || fusion[i].absorbed) continue;
    const std::int64_t made = steps[i].record.output;
    const std::optional<std::size_t> next = sole_reader(made);
    if (!next) continue;
    const compiled_step& conv = steps[*next];
    if (conv.kind == step_kind::convolution && !fusion[*next].absorbed && conv.record.inputs.at(0) == made && conv.record.convolution &&
        conv.record.convolution->groups == 1)
      fusion[i].scales_weights_of = next;
  }
  // 5. A cat whose parts begin a later cat's parts (DenseNet's growing cats): the latest such cat
  //    ends its chain, whose buffer the chain's cats view.
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != step_kind::cat || fusion[i].absorbed) continue;
    const auto& parts = steps[i].record.inputs;
    for (std::size_t later = i + 1; later < steps.size(); ++later) {
      const auto& others = steps[later].record.inputs;
      if (steps[later].kind == step_kind::cat && !fusion[later].absorbed && others.size() > parts.size() &&
          std::equal(parts.begin(), parts.end(), others.begin()))
        fusion[i].chain_end = later;
    }
  }
  return fusion;
}

}  // namespace onednn_delegate
