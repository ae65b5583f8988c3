// When two timings separate: the statistics every measured decision of tuning.hpp goes through
// (a region on its backend against TorchScript, a lowered method against the original, one
// lowering of choose_order against another). Times come in rounds, the two paths interleaved, so
// that a round's two times share the machine's load of the moment. A sign test over the rounds
// decides (docs/partial-lowering.md, "When a timing decides"): one path wins a round when it is
// faster by more than the margin; the paths separate when the rounds one of them won are too many
// to be chance (two-sided p below alpha, a round neither won counting against the one that leads:
// paths within the margin of each other do not separate, however many rounds) and the medians
// differ by more than the margin. A wide gap separates sooner: from early_rounds on, when the
// leader won every round and a paired t test on the rounds' log time ratios is below alpha too
// (the sign test alone needs 8 rounds for p < 0.01, whatever the gap); from 2 rounds on, the
// same when the leader won every round by gross_ratio or more. Rounds are added until
// they separate, until no number of further rounds could separate them, or until the budget is
// spent. No LibTorch here.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch_delegate::detail {

/// Which of two timed paths is faster, when the rounds say so.
enum class separation { first_faster, second_faster, not_separable };

/// How many rounds, and what separates.
struct sampling_rule {
  double margin = 0.03;          // a round is won by more than 3 %; the medians must differ by more
  double alpha = 0.01;           // the sign test's two-sided level
  std::size_t min_rounds = 8;    // 8 of 8 is the fewest that reach p < 0.01
  std::size_t max_rounds = 40;
  double budget_s = 1.5;         // rounds stop once this is spent (at least min_rounds are taken;
                                 // up to 2 * min_rounds while one path has won 3 rounds in 4)
  std::size_t early_rounds = 4;  // fewer than min_rounds separate only when the leader won every
                                 // one and the t test on log ratios says so too (a wide gap)
  double gross_ratio = 4.0;      // and fewer than early_rounds, from 2, only when the leader won
                                 // every one by this factor or more (ConvNeXt-T's body beside a
                                 // busy process: 60 ms on onednn, 2.4 s in TorchScript)
  double hard_budget_s = 9.0;    // rounds stop once this is spent, whatever their number (from
                                 // 2): not separable then, and the rules decide (ConvNeXt-T's
                                 // whole model against TorchScript beside two busy processes:
                                 // calls of 2 s and more, 8 rounds 24 to 29 s)
};

/// partition_options::measure_time_limit_s: a deadline for a lowering's measuring.
class time_limit {
 public:
  /// The deadline: `seconds` from now (0 or less: none; more than 1e9, 31 years, counts as 1e9:
  /// the clock's ticks would overflow).
  void start(double seconds) {
    if (seconds > 0)
      deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(std::min(seconds, 1e9)));
  }
  bool spent() const { return given_up_ || (deadline_ && std::chrono::steady_clock::now() >= *deadline_); }
  /// From now on spent(): what is left is not measured (a comparison whose 2 first rounds did
  /// not fit: smaller ones might, but a lowering that stopped measuring stops for good).
  void give_up() { given_up_ = true; }
  /// The seconds left (infinity without a deadline; 0 or less once it has passed or is given up).
  double seconds_left() const {
    if (given_up_) return 0;
    return deadline_ ? std::chrono::duration<double>(*deadline_ - std::chrono::steady_clock::now()).count()
                     : std::numeric_limits<double>::infinity();
  }
  /// `rule` with its hard budget cut to the seconds left.
  sampling_rule within(sampling_rule rule) const {
    rule.hard_budget_s = std::min(rule.hard_budget_s, seconds_left());
    return rule;
  }
  /// Whether the 2 rounds every comparison takes, of `round_ms` each, fit in the seconds left: a
  /// comparison that does not fit is not begun. (Its paths' warm-up calls, which say how long a
  /// round takes, come before: with what it costs to compile its paths, that is what a lowering
  /// can overrun the limit by.)
  bool fits_two_rounds(double round_ms) const { return 2 * round_ms <= 1e3 * seconds_left(); }
  /// fits_two_rounds, and where they do not, give_up().
  bool room_for_two_rounds(double round_ms) {
    if (fits_two_rounds(round_ms)) return true;
    give_up();
    return false;
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  bool given_up_ = false;
};

/// What the rounds of two paths say.
struct paired_comparison {
  separation verdict = separation::not_separable;
  std::size_t rounds = 0;
  std::size_t first_wins = 0;   // rounds where the first was faster by more than the margin
  std::size_t second_wins = 0;  // and the second
  double p_value = 1.0;         // two-sided sign test of the leader's wins over all rounds; for a
                                // verdict in fewer than min_rounds rounds, the t test's p (early)
  double first_ms = 0.0;        // medians of each path's rounds
  double second_ms = 0.0;
  bool hard_stop = false;       // the rounds stopped because rule.hard_budget_s was spent
  bool out_of_time = false;     // not separable because the lowering's measure_time_limit_s was
                                // spent (before the first round, or during the rounds)

  bool operator==(const paired_comparison&) const = default;
};

/// Whether the time limit left no room for a comparison: nothing was timed.
inline bool not_timed_at_all(const paired_comparison& compared) { return compared.out_of_time && compared.rounds == 0; }

/// The two-sided sign test: the chance that one of two paths wins at least `wins` of `rounds`
/// rounds when each round is a fair coin between them (rounds neither won count as lost).
TORCH_DELEGATE_DECL double sign_test_p(std::size_t wins, std::size_t rounds);

/// The two-sided p of a paired t test: that the mean of `differences` is 0 (Student's t with
/// n - 1 degrees of freedom); 1 for fewer than 2, 0 for equal nonzero ones.
TORCH_DELEGATE_DECL double paired_t_test_p(const std::vector<double>& differences);

/// Whether a verdict was reached early (fewer than min_rounds rounds: by the t test, not the
/// sign test), for reports.
inline bool separated_early(const paired_comparison& compared, const sampling_rule& rule) {
  return compared.verdict != separation::not_separable && compared.rounds < rule.min_rounds;
}

/// The verdict of the rounds (first[i], second[i]) under `rule`.
TORCH_DELEGATE_DECL paired_comparison compare_rounds(const std::vector<double>& first, const std::vector<double>& second,
                                                     const sampling_rule& rule);

/// Whether further rounds (up to rule.max_rounds) could still separate what `so_far` has not:
/// false once even winning every remaining round would leave p at or above alpha.
TORCH_DELEGATE_DECL bool can_still_separate(const paired_comparison& so_far, const sampling_rule& rule);

/// Rounds of `round` (one time of each path, in ms, taken side by side) until compare_rounds
/// separates them, can_still_separate says none would, rule.max_rounds, or rule.budget_s; from
/// rule.min_rounds on, also once the medians are within a third of rule.margin of each other and
/// neither path has won 3 rounds in 4. Whatever the rounds, once rule.hard_budget_s is spent
/// (fewer than min_rounds: not separable unless a wide gap separated them).
TORCH_DELEGATE_DECL paired_comparison sample_until_separated(const std::function<std::pair<double, double>()>& round,
                                                             const sampling_rule& rule);

}  // namespace torch_delegate::detail

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/timing_statistics.ipp>
#endif
