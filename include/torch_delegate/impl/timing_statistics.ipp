// Definitions for detail/timing_statistics.hpp.
#pragma once

#include <torch_delegate/detail/timing_statistics.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace torch_delegate::detail {

TORCH_DELEGATE_DECL double sign_test_p(std::size_t wins, std::size_t rounds) {
  if (rounds == 0) return 1.0;
  wins = std::min(wins, rounds);
  // 2 P(X >= wins) for X ~ Binomial(rounds, 1/2), in logs (rounds can be large).
  double tail = 0.0;
  for (std::size_t k = wins; k <= rounds; ++k)
    tail += std::exp(std::lgamma(double(rounds) + 1) - std::lgamma(double(k) + 1) - std::lgamma(double(rounds - k) + 1) -
                     double(rounds) * std::log(2.0));
  return std::min(1.0, 2.0 * tail);
}

inline double median_of(std::vector<double> times) {
  if (times.empty()) return 0.0;
  const auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), middle, times.end());
  return *middle;
}

TORCH_DELEGATE_DECL paired_comparison compare_rounds(const std::vector<double>& first, const std::vector<double>& second,
                                                     const sampling_rule& rule) {
  paired_comparison result;
  result.rounds = std::min(first.size(), second.size());
  for (std::size_t i = 0; i < result.rounds; ++i) {
    if (first[i] * (1.0 + rule.margin) < second[i]) ++result.first_wins;
    if (second[i] * (1.0 + rule.margin) < first[i]) ++result.second_wins;
  }
  result.first_ms = median_of(std::vector<double>(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(result.rounds)));
  result.second_ms = median_of(std::vector<double>(second.begin(), second.begin() + static_cast<std::ptrdiff_t>(result.rounds)));
  result.p_value = sign_test_p(std::max(result.first_wins, result.second_wins), result.rounds);
  if (result.rounds >= rule.min_rounds && result.p_value < rule.alpha) {
    if (result.first_wins > result.second_wins && result.first_ms * (1.0 + rule.margin) < result.second_ms)
      result.verdict = separation::first_faster;
    else if (result.second_wins > result.first_wins && result.second_ms * (1.0 + rule.margin) < result.first_ms)
      result.verdict = separation::second_faster;
  }
  return result;
}

TORCH_DELEGATE_DECL bool can_still_separate(const paired_comparison& so_far, const sampling_rule& rule) {
  if (so_far.verdict != separation::not_separable) return false;
  if (so_far.rounds >= rule.max_rounds) return false;
  const std::size_t left = rule.max_rounds - so_far.rounds, lead = std::max(so_far.first_wins, so_far.second_wins);
  return sign_test_p(lead + left, rule.max_rounds) < rule.alpha;
}

TORCH_DELEGATE_DECL paired_comparison sample_until_separated(const std::function<std::pair<double, double>()>& round,
                                                             const sampling_rule& rule) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> first, second;
  paired_comparison so_far;
  for (;;) {
    const auto [a, b] = round();
    first.push_back(a);
    second.push_back(b);
    if (first.size() < rule.min_rounds) continue;
    so_far = compare_rounds(first, second, rule);
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!can_still_separate(so_far, rule)) return so_far;
    // Past the budget, rounds stop, unless the leader has won at least 3 in 4 of them: then up
    // to twice the minimum (a whole CNN as one region on a loaded machine: one round lost to
    // another process leaves 7 of 8, p = 0.07, where 14 of 16 separate).
    const bool leaning = 4 * std::max(so_far.first_wins, so_far.second_wins) >= 3 * first.size();
    if (spent >= rule.budget_s && (!leaning || first.size() >= 2 * rule.min_rounds)) return so_far;
  }
}

}  // namespace torch_delegate::detail
