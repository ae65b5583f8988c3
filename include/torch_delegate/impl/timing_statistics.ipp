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

// The regularised incomplete beta function I_x(a, b), by its continued fraction (modified
// Lentz), on the side of x where that converges fast.
inline double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  if (x > (a + 1.0) / (a + b + 2.0)) return 1.0 - incomplete_beta(b, a, 1.0 - x);
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  constexpr double tiny = 1e-300;
  auto guard = [](double v) { return std::fabs(v) < tiny ? tiny : v; };
  double c = 1.0, d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0)), fraction = d;
  for (int m = 1; m <= 300; ++m) {
    const double even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
    d = 1.0 / guard(1.0 + even * d);
    c = guard(1.0 + even / c);
    fraction *= d * c;
    const double odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
    d = 1.0 / guard(1.0 + odd * d);
    c = guard(1.0 + odd / c);
    const double step = d * c;
    fraction *= step;
    if (std::fabs(step - 1.0) < 1e-12) break;
  }
  return front * fraction / a;
}

TORCH_DELEGATE_DECL double paired_t_test_p(const std::vector<double>& differences) {
  const std::size_t n = differences.size();
  if (n < 2) return 1.0;
  double mean = 0.0;
  for (const double d : differences) mean += d;
  mean /= double(n);
  double squares = 0.0;
  for (const double d : differences) squares += (d - mean) * (d - mean);
  const double variance = squares / double(n - 1);
  if (variance <= 0.0) return mean == 0.0 ? 1.0 : 0.0;
  const double t = mean / std::sqrt(variance / double(n)), freedom = double(n - 1);
  // Two-sided: P(|T| >= |t|) = I_{v / (v + t^2)}(v / 2, 1 / 2).
  return incomplete_beta(freedom / 2.0, 0.5, freedom / (freedom + t * t));
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
  auto decide = [&] {
    if (result.first_wins > result.second_wins && result.first_ms * (1.0 + rule.margin) < result.second_ms)
      result.verdict = separation::first_faster;
    else if (result.second_wins > result.first_wins && result.second_ms * (1.0 + rule.margin) < result.first_ms)
      result.verdict = separation::second_faster;
  };
  if (result.rounds >= rule.min_rounds) {
    if (result.p_value < rule.alpha) decide();
  } else if (result.rounds >= 2 && std::max(result.first_wins, result.second_wins) == result.rounds) {
    // Early: every round won by the leader, and the log ratios' mean far from 0 for their spread;
    // before early_rounds, only where every round was won by gross_ratio or more.
    std::vector<double> ratios;
    for (std::size_t i = 0; i < result.rounds; ++i)
      ratios.push_back(first[i] > 0 && second[i] > 0 ? std::log(second[i] / first[i]) : 0.0);
    const bool gross = std::all_of(ratios.begin(), ratios.end(),
                                   [&](double ratio) { return std::fabs(ratio) >= std::log(rule.gross_ratio); });
    const double p = result.rounds >= rule.early_rounds || gross ? paired_t_test_p(ratios) : 1.0;
    if (p < rule.alpha) {
      result.p_value = p;
      decide();
    }
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
    if (first.size() < 2) continue;
    so_far = compare_rounds(first, second, rule);
    if (so_far.verdict != separation::not_separable) return so_far;
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Calls so long that even the minimum of rounds would take minutes (a whole model in
    // TorchScript on a loaded machine): what the rounds so far did not separate, the rules decide.
    if (spent >= rule.hard_budget_s) {
      so_far.hard_stop = true;
      return so_far;
    }
    if (first.size() < rule.min_rounds) continue;  // early, only a wide gap stops the rounds
    if (!can_still_separate(so_far, rule)) return so_far;
    const bool leaning = 4 * std::max(so_far.first_wins, so_far.second_wins) >= 3 * first.size();
    // Medians within a third of the margin of each other, and neither path leaning: more rounds
    // would have to move them apart by the margin to separate them, which noise alone does not
    // (ConvNeXt-T's two orders, the classifier apart the same, beside a busy process: 6 and 3 of
    // 14 rounds, 11 s of a 47 s lowering, not separable).
    if (!leaning && so_far.first_ms > 0 && so_far.second_ms > 0 &&
        std::max(so_far.first_ms / so_far.second_ms, so_far.second_ms / so_far.first_ms) < 1.0 + rule.margin / 3)
      return so_far;
    // Past the budget, rounds stop, unless the leader has won at least 3 in 4 of them: then up
    // to twice the minimum (a whole CNN as one region on a loaded machine: one round lost to
    // another process leaves 7 of 8, p = 0.07, where 14 of 16 separate).
    if (spent >= rule.budget_s && (!leaning || first.size() >= 2 * rule.min_rounds)) return so_far;
  }
}

}  // namespace torch_delegate::detail
