// What measured decisions stand on (issue 40): the sign test and adaptive rounds of
// timing_statistics.hpp, and the timing cache file of timing_cache.hpp (entries, damaged lines,
// a file that is not ours, two processes writing at once). No lowering here: test_partition_tuning
// lowers with them.
#include "helpers.hpp"

#include <torch_delegate/detail/timing_cache.hpp>
#include <torch_delegate/detail/timing_statistics.hpp>
#include <torch_delegate/partition.hpp>
#include <torch_delegate/runtime_switches.hpp>

#include <c10/util/Exception.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

using namespace test_helpers;
using torch_delegate::detail::compare_rounds;
using torch_delegate::detail::sampling_rule;
using torch_delegate::detail::separation;
using torch_delegate::detail::sign_test_p;
using torch_delegate::detail::timing_cache_file;

namespace {
/// Collects LibTorch's warnings (TORCH_WARN) while it lives.
struct warnings_seen : c10::WarningHandler {
  std::vector<std::string> texts;
  c10::Warning::WarningHandlerGuard guard{this};
  void process(const c10::SourceLocation&, const std::string& message, const bool) override { texts.push_back(message); }
};

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string fresh_directory(const std::string& name) {
  const std::string directory = temp_path(name);
  std::filesystem::remove_all(directory);
  return directory;
}
}  // namespace

TEST_CASE("timing statistics: the sign test and when two paths separate") {
  CHECK(sign_test_p(8, 8) == doctest::Approx(2.0 / 256));
  CHECK(sign_test_p(0, 0) == 1.0);
  CHECK(sign_test_p(4, 8) == 1.0);  // capped
  CHECK(sign_test_p(7, 8) == doctest::Approx(2.0 * 9 / 256));
  CHECK(sign_test_p(29, 40) < 0.01);
  CHECK(sign_test_p(28, 40) > 0.01);
  const sampling_rule rule;  // margin 3 %, alpha 0.01, 8 to 40 rounds

  SUBCASE("8 of 8 rounds 2x faster: separated, in either order") {
    const auto compared = compare_rounds(std::vector<double>(8, 1.0), std::vector<double>(8, 2.0), rule);
    CHECK(compared.verdict == separation::first_faster);
    CHECK(compared.first_wins == 8);
    CHECK(compared.second_wins == 0);
    CHECK(compared.first_ms == 1.0);
    CHECK(compared.second_ms == 2.0);
    CHECK(compare_rounds(std::vector<double>(8, 2.0), std::vector<double>(8, 1.0), rule).verdict == separation::second_faster);
  }
  SUBCASE("fewer rounds than early_rounds, or 7 of 8: not separable") {
    CHECK(compare_rounds(std::vector<double>(3, 1.0), std::vector<double>(3, 2.0), rule).verdict == separation::not_separable);
    std::vector<double> a(8, 1.0), b(8, 2.0);
    b[3] = 0.5;
    const auto compared = compare_rounds(a, b, rule);
    CHECK(compared.verdict == separation::not_separable);
    CHECK(compared.first_wins == 7);
    CHECK(compared.second_wins == 1);
  }
  SUBCASE("within the margin (2 %): no round is won, never separable") {
    const auto compared = compare_rounds(std::vector<double>(40, 1.0), std::vector<double>(40, 1.02), rule);
    CHECK(compared.verdict == separation::not_separable);
    CHECK(compared.first_wins == 0);
    CHECK(compared.p_value == 1.0);
    CHECK(!torch_delegate::detail::can_still_separate(compared, rule));  // at the maximum
  }
  SUBCASE("noise both ways (each wins half the rounds): not separable") {
    std::vector<double> a, b;
    for (int i = 0; i < 40; ++i) {
      a.push_back(i % 2 ? 1.0 : 1.5);
      b.push_back(i % 2 ? 1.5 : 1.0);
    }
    CHECK(compare_rounds(a, b, rule).verdict == separation::not_separable);
  }
  SUBCASE("rounds won but medians within the margin: not separable") {
    // The first wins 9 rounds by a lot, loses the other 11 by a little: its median is no better.
    std::vector<double> a(20, 1.01), b(20, 1.0);
    for (int i = 0; i < 9; ++i) a[i] = 0.5;
    const auto compared = compare_rounds(a, b, rule);
    CHECK(compared.verdict == separation::not_separable);
  }
  SUBCASE("a wide gap separates early: every round won and the t test on the log ratios below alpha") {
    // Twice as fast, within 1 % from round to round: 4 rounds.
    const std::vector<double> fast{1.0, 1.01, 0.99, 1.0}, slow{2.0, 1.98, 2.01, 2.02};
    const auto early = compare_rounds(fast, slow, rule);
    CHECK(early.verdict == separation::first_faster);
    CHECK(early.rounds == 4);
    CHECK(early.p_value < rule.alpha);
    CHECK(early.p_value == doctest::Approx(torch_delegate::detail::paired_t_test_p(
                               {std::log(2.0), std::log(1.98 / 1.01), std::log(2.01 / 0.99), std::log(2.02)})));
    CHECK(torch_delegate::detail::separated_early(early, rule));
    CHECK(compare_rounds(slow, fast, rule).verdict == separation::second_faster);
    // Every round won, but the gap from 5 % to 3x: the t test does not separate them yet.
    const std::vector<double> ones(4, 1.0), spread{1.05, 3.0, 1.05, 3.0};
    const auto wide = compare_rounds(ones, spread, rule);
    CHECK(wide.verdict == separation::not_separable);
    CHECK(wide.p_value == doctest::Approx(sign_test_p(4, 4)));  // the sign test's p stays in the report
    // A wide gap with one round lost: not early (the sign test decides, from 8 rounds).
    CHECK(compare_rounds(std::vector<double>{1.0, 1.0, 1.0, 3.0}, std::vector<double>{2.0, 2.0, 2.0, 2.0}, rule).verdict ==
          separation::not_separable);
    // At 8 rounds and more, the sign test decides: 7 of 8 with a wide gap does not separate.
    std::vector<double> eight(8, 1.0), twice(8, 2.0);
    twice[5] = 0.9;
    CHECK(compare_rounds(eight, twice, rule).verdict == separation::not_separable);
  }
  SUBCASE("a gross gap separates from 2 rounds: every round won by gross_ratio and the t test below alpha") {
    // ConvNeXt-T's body beside a busy process: 60 ms on onednn, 2.4 s in TorchScript.
    const auto two = compare_rounds(std::vector<double>{60.0, 61.0}, std::vector<double>{2400.0, 2430.0}, rule);
    CHECK(two.verdict == separation::first_faster);
    CHECK(two.rounds == 2);
    CHECK(two.p_value == doctest::Approx(torch_delegate::detail::paired_t_test_p({std::log(40.0), std::log(2430.0 / 61.0)})));
    CHECK(torch_delegate::detail::separated_early(two, rule));
    // One round won by less than gross_ratio: not before early_rounds.
    // (3.9 and 3.95 agree: the t test alone would separate them, p = 0.003.)
    CHECK(compare_rounds(std::vector<double>{1.0, 1.0}, std::vector<double>{3.9, 3.95}, rule).verdict == separation::not_separable);
    CHECK(torch_delegate::detail::paired_t_test_p({std::log(3.9), std::log(3.95)}) < rule.alpha);
    // Exactly gross_ratio, and the second path leading.
    CHECK(compare_rounds(std::vector<double>{1.0, 1.0}, std::vector<double>{4.0, 4.0}, rule).verdict == separation::first_faster);
    CHECK(compare_rounds(std::vector<double>{2400.0, 2430.0}, std::vector<double>{60.0, 61.0}, rule).verdict ==
          separation::second_faster);
    CHECK(compare_rounds(std::vector<double>{1.0, 1.0, 1.0}, std::vector<double>{3.9, 3.9, 3.9}, rule).verdict ==
          separation::not_separable);
    // Gross, but 40x then 10x: the t test does not separate 2 rounds that far apart (p = 0.14).
    CHECK(compare_rounds(std::vector<double>{1.0, 1.0}, std::vector<double>{40.0, 10.0}, rule).verdict == separation::not_separable);
    // One round: never.
    CHECK(compare_rounds(std::vector<double>{1.0}, std::vector<double>{100.0}, rule).verdict == separation::not_separable);
    std::size_t rounds = 0;
    auto quick = torch_delegate::detail::sample_until_separated([&] { return ++rounds, std::pair{1.0, 10.0}; }, rule);
    CHECK(quick.verdict == separation::first_faster);
    CHECK(quick.rounds == 2);
    CHECK(rounds == 2);
  }
  SUBCASE("the t test's p against closed forms (1, 2 and 3 degrees of freedom)") {
    using torch_delegate::detail::paired_t_test_p;
    const double pi = std::acos(-1.0);
    CHECK(paired_t_test_p({}) == 1.0);
    CHECK(paired_t_test_p({0.5}) == 1.0);
    CHECK(paired_t_test_p({0.5, 0.5, 0.5}) == 0.0);
    CHECK(paired_t_test_p({0.0, 0.0}) == 1.0);
    // {1, 3}: t = 2 with 1 degree of freedom (Cauchy): p = 1 - 2 atan(t) / pi.
    CHECK(paired_t_test_p({1.0, 3.0}) == doctest::Approx(1.0 - 2.0 * std::atan(2.0) / pi).epsilon(1e-9));
    // {1, 2, 6}: t = 3 / sqrt(7 / 3), 2 degrees of freedom: p = 1 - t / sqrt(2 + t^2).
    const double t2 = 3.0 / std::sqrt(7.0 / 3.0);
    CHECK(paired_t_test_p({1.0, 2.0, 6.0}) == doctest::Approx(1.0 - t2 / std::sqrt(2.0 + t2 * t2)).epsilon(1e-9));
    // {1, 2, 3, 4}: t = 2.5 / sqrt(5 / 12), 3 degrees of freedom:
    // p = 1 - 2 / pi (atan(t / sqrt 3) + (t / sqrt 3) / (1 + t^2 / 3)).
    const double u = 2.5 / std::sqrt(5.0 / 12.0) / std::sqrt(3.0);
    CHECK(paired_t_test_p({1.0, 2.0, 3.0, 4.0}) == doctest::Approx(1.0 - 2.0 / pi * (std::atan(u) + u / (1.0 + u * u))).epsilon(1e-9));
    CHECK(paired_t_test_p({-1.0, -2.0, -3.0, -4.0}) == doctest::Approx(paired_t_test_p({1.0, 2.0, 3.0, 4.0})));  // two-sided
  }
  SUBCASE("adaptive rounds: 4 when the gap is wide and steady; equal paths stop once no further rounds could separate them") {
    std::size_t rounds = 0;
    auto clear = torch_delegate::detail::sample_until_separated([&] { return std::pair{++rounds, 1.0}, std::pair{1.0, 3.0}; }, rule);
    CHECK(clear.verdict == separation::first_faster);
    CHECK(clear.rounds == 4);
    CHECK(rounds == 4);
    // Steady but for one round that goes the other way: the sign test, from 8 rounds.
    rounds = 0;
    auto noisy = torch_delegate::detail::sample_until_separated(
        [&] { return ++rounds == 2 ? std::pair{3.0, 1.0} : std::pair{1.0, 3.0}; }, rule);
    CHECK(noisy.verdict == separation::first_faster);
    CHECK(noisy.rounds == 12);  // 11 of 12: p = 0.0063, the first below 0.01 (10 of 11: 0.012)
    CHECK(!torch_delegate::detail::separated_early(noisy, rule));
    rounds = 0;
    auto equal = torch_delegate::detail::sample_until_separated([&] { return ++rounds, std::pair{1.0, 1.0}; }, rule);
    CHECK(equal.verdict == separation::not_separable);
    CHECK(equal.rounds == 8);  // the minimum: the medians the same, neither path leaning
    CHECK(rounds == 8);
    // Equal but noisy, each path faster by 10 % in every other round: the medians the same, 4
    // wins each, no lean; rounds stop at the minimum (they went on to the budget before: 36 of
    // 40 wins were still in reach).
    rounds = 0;
    auto even = torch_delegate::detail::sample_until_separated(
        [&] { return ++rounds % 2 ? std::pair{1.0, 1.1} : std::pair{1.1, 1.0}; }, rule);
    CHECK(even.verdict == separation::not_separable);
    CHECK(even.rounds == 8);
    CHECK(even.first_wins == 4);
    CHECK(even.second_wins == 4);
    // Medians 2 % apart (more than a third of the margin): rounds go on, here to the maximum (the
    // budget is not spent: these rounds take no time), as long as the leader could still win.
    rounds = 0;
    auto apart = torch_delegate::detail::sample_until_separated([&] { return ++rounds, std::pair{1.0, 1.02}; }, rule);
    CHECK(apart.verdict == separation::not_separable);
    CHECK(apart.rounds == 12);  // 28 rounds left could at best reach 28 of 40 wins: p > 0.01
    sampling_rule quick = rule;
    quick.budget_s = 0.0;  // the budget spent: the minimum, then stop
    rounds = 0;
    auto spent = torch_delegate::detail::sample_until_separated([&] { return ++rounds, std::pair{1.0, 1.02}; }, quick);
    CHECK(spent.rounds == 8);
    // The budget spent, but one path has won 7 of 8 (one round lost, as to another process):
    // up to twice the minimum, where 13 of 15 separate.
    rounds = 0;
    auto leaning = torch_delegate::detail::sample_until_separated(
        [&] { return ++rounds % 8 == 3 ? std::pair{3.0, 1.0} : std::pair{1.0, 3.0}; }, quick);
    CHECK(leaning.verdict == separation::first_faster);
    CHECK(leaning.rounds == 15);
    CHECK(leaning.first_wins == 13);
    // Leaning, not separating: at most twice the minimum.
    rounds = 0;
    auto stopped = torch_delegate::detail::sample_until_separated(
        [&] { return ++rounds % 4 == 0 ? std::pair{3.0, 1.0} : std::pair{1.0, 3.0}; }, quick);
    CHECK(stopped.verdict == separation::not_separable);
    CHECK(stopped.rounds == 16);
  }
  SUBCASE("the hard budget: rounds stop once it is spent, below the minimum too") {
    // As the noisy case above (12 rounds to separate), each round taking 5 ms, the hard budget
    // 30 ms: at most 6 rounds, not separable (ConvNeXt-T's TorchScript calls beside two busy
    // processes, 2 s and more a round).
    sampling_rule capped = rule;
    capped.hard_budget_s = 0.03;
    std::size_t rounds = 0;
    auto cut = torch_delegate::detail::sample_until_separated(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return ++rounds == 2 ? std::pair{3.0, 1.0} : std::pair{1.0, 3.0};
        },
        capped);
    CHECK(cut.verdict == separation::not_separable);
    CHECK(cut.rounds >= 2);
    CHECK(cut.rounds <= 6);
    CHECK(rounds == cut.rounds);
    CHECK(cut.hard_stop);  // what a time limit that cut the budget is told by
    // A gross gap still separates in 2 rounds within it.
    rounds = 0;
    auto gross = torch_delegate::detail::sample_until_separated(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return ++rounds, std::pair{1.0, 10.0};
        },
        capped);
    CHECK(gross.verdict == separation::first_faster);
    CHECK(gross.rounds == 2);
    CHECK(!gross.hard_stop);
  }
}

TEST_CASE("timing cache file: entries, a second reader, the default directory") {
  const std::string directory = fresh_directory("cache_entries");
  {
    timing_cache_file cache(directory);
    CHECK(!cache.find("region", std::string(32, 'a')));
    cache.store("region", std::string(32, 'a'), "1.5 2 0 8 8 0 0.0078125");
    cache.store("region", std::string(32, 'b'), "3 2 1 8 0 8 0.0078125");
    cache.store("region", std::string(32, 'a'), "1.25 2 0 8 8 0 0.0078125");  // the last of a key wins
    CHECK(*cache.find("region", std::string(32, 'a')) == "1.25 2 0 8 8 0 0.0078125");
  }
  timing_cache_file again(directory);
  CHECK(*again.find("region", std::string(32, 'a')) == "1.25 2 0 8 8 0 0.0078125");
  CHECK(*again.find("region", std::string(32, 'b')) == "3 2 1 8 0 8 0.0078125");
  CHECK(!again.find("lowering", std::string(32, 'a')));  // kinds do not mix
  CHECK(again.damaged_lines() == 0);
  const std::string text = file_text(directory + "/timings-1.txt");
  CHECK(text.rfind("torch-delegate timing cache, format 1\nregion\taaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\t1.5 2 0 8 8 0 0.0078125\t", 0) == 0);
  // Keys are digests of what they depend on.
  CHECK(torch_delegate::detail::key_digest("a").size() == 32);
  CHECK(torch_delegate::detail::key_digest("a") != torch_delegate::detail::key_digest("b"));
  CHECK(torch_delegate::detail::key_digest("ab") != torch_delegate::detail::key_digest("ba"));
  const std::string machine = torch_delegate::detail::machine_fingerprint();
  CHECK(contains(machine, ";threads:" + std::to_string(at::get_num_threads()) + ";"));
  CHECK(contains(machine, "cpu:"));

  // A backend's build: the GNU build ID of the object holding its code, the same anywhere in it,
  // another in another object (libc here); nothing for an address no object holds.
  const std::string here = torch_delegate::detail::code_build_id(reinterpret_cast<const void*>(&file_text));
  CHECK(!here.empty());
  CHECK(here == torch_delegate::detail::code_build_id(reinterpret_cast<const void*>(&fresh_directory)));
  const std::string libc = torch_delegate::detail::code_build_id(reinterpret_cast<const void*>(&std::fopen));
  CHECK(!libc.empty());
  CHECK(libc != here);
  int on_the_stack = 0;
  CHECK(torch_delegate::detail::code_build_id(&on_the_stack).empty());
  CHECK(torch_delegate::detail::code_build_id(nullptr).empty());

  torch_delegate::partition_options options;
  CHECK(torch_delegate::detail::timing_cache_directory(options).empty());  // the test command sets TORCH_DELEGATE_TIMING_CACHE=0
  options.timing_cache_dir = directory;
  CHECK(torch_delegate::detail::timing_cache_directory(options) == directory);  // given: used whatever the variable says
  options.timing_cache = false;
  CHECK(torch_delegate::detail::timing_cache_directory(options).empty());
  std::filesystem::remove_all(directory);
}

TEST_CASE("timing cache file: a damaged line is reported once and ignored; a file not ours is neither read nor written") {
  const std::string directory = fresh_directory("cache_damaged");
  {
    timing_cache_file cache(directory);
    cache.store("region", std::string(32, 'a'), "1 2 0 8 8 0 0.0078125");
    cache.store("region", std::string(32, 'b'), "1 2 0 8 8 0 0.0078125");
  }
  const std::string path = directory + "/timings-1.txt";
  std::string text = file_text(path);
  text[text.find("\t1 2 0") + 1] = '7';  // the first entry's payload changed: its CRC no longer matches
  text += "region\tcccccccccccccccccccccccccccccccc\t1 2";  // a line cut short (a crash while writing)
  std::ofstream(path, std::ios::binary) << text;
  {
    warnings_seen seen;
    timing_cache_file cache(directory);
    CHECK(!cache.find("region", std::string(32, 'a')));
    CHECK(*cache.find("region", std::string(32, 'b')) == "1 2 0 8 8 0 0.0078125");
    CHECK(!cache.find("region", std::string(32, 'c')));
    CHECK(cache.damaged_lines() == 2);
    REQUIRE(seen.texts.size() == 1);
    CHECK(seen.texts[0] == "torch-delegate: the timing cache " + path +
                               ": 2 of its 3 entries are damaged (a CRC that does not match, or a line cut short) and are "
                               "ignored; they are measured again");
    timing_cache_file twice(directory);
    twice.find("region", std::string(32, 'b'));
    CHECK(seen.texts.size() == 1);  // once per process
  }
  std::filesystem::remove_all(directory);

  const std::string foreign = fresh_directory("cache_foreign");
  std::filesystem::create_directories(foreign);
  std::ofstream(foreign + "/timings-1.txt") << "some other program's file\nregion\t" << std::string(32, 'a') << "\t1\t0\n";
  warnings_seen seen;
  timing_cache_file cache(foreign);
  CHECK(!cache.find("region", std::string(32, 'a')));
  CHECK(cache.foreign());
  cache.store("region", std::string(32, 'd'), "1 2 0 8 8 0 0.0078125");
  CHECK(file_text(foreign + "/timings-1.txt").rfind("some other program's file\n", 0) == 0);
  CHECK(!contains(file_text(foreign + "/timings-1.txt"), std::string(32, 'd')));
  REQUIRE(seen.texts.size() == 1);
  CHECK(contains(seen.texts[0], "timings-1.txt: its first line is not \"torch-delegate timing cache, format 1\": it is not a "
                                "torch-delegate timing cache of this format, and is neither read nor written"));
  std::filesystem::remove_all(foreign);
}

TEST_CASE("timing cache file: compacted when read past its bound or mostly entries written again") {
  const std::string directory = fresh_directory("cache_compacted");
  const std::string path = directory + "/timings-1.txt";
  const auto key = [](int i) {
    char text[33];
    std::snprintf(text, sizeof text, "%032d", i);
    return std::string(text);
  };
  const auto lines = [&] {
    const std::string text = file_text(path);
    return std::count(text.begin(), text.end(), '\n');
  };
  {  // one key written 100 times, another once: the file holds 101 entries
    timing_cache_file cache(directory);
    for (int i = 0; i < 100; ++i) cache.store("region", key(0), "payload " + std::to_string(i));
    cache.store("lowering", key(1), "once");
  }
  CHECK(lines() == 102);
  {
    timing_cache_file cache(directory);  // reading it compacts it: each key's last entry
    CHECK(cache.find("region", key(0)) == "payload 99");
    CHECK(cache.find("lowering", key(1)) == "once");
  }
  CHECK(lines() == 3);
  CHECK(file_text(path).find("torch-delegate timing cache, format 1\n") == 0);
  {
    timing_cache_file cache(directory);
    CHECK(cache.find("region", key(0)) == "payload 99");
    CHECK(cache.damaged_lines() == 0);
  }
  {  // 200 entries of about 100 bytes against a bound of 8 kB: the newest are kept, within half of it
    timing_cache_file cache(directory, 8192);
    for (int i = 0; i < 200; ++i) cache.store("region", key(100 + i), std::string(50, 'x'));
  }
  CHECK(file_text(path).size() > 8192);
  {
    timing_cache_file cache(directory, 8192);
    CHECK(cache.find("region", key(299)) == std::string(50, 'x'));  // read before the compaction
  }
  CHECK(file_text(path).size() <= 4096);
  timing_cache_file after(directory, 8192);
  CHECK(after.find("region", key(299)) == std::string(50, 'x'));  // the newest kept
  CHECK(!after.find("region", key(100)));                          // the oldest dropped
  CHECK(!after.find("region", key(0)));
  CHECK(after.damaged_lines() == 0);
  CHECK(!std::filesystem::exists(path + ".compacting." + std::to_string(::getpid())));
  std::filesystem::remove_all(directory);
}

TEST_CASE("timing cache file: two processes writing at once leave every entry whole") {
  const std::string directory = fresh_directory("cache_concurrent");
  constexpr int entries = 300;
  const std::string payload(200, '7');  // long lines: a torn write would show
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  const char mine = child == 0 ? 'c' : 'p';
  {
    timing_cache_file cache(directory);
    for (int i = 0; i < entries; ++i) {
      char key[33];
      std::snprintf(key, sizeof key, "%c%031d", mine, i);
      cache.store("region", key, payload);
    }
  }
  if (child == 0) std::_Exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  timing_cache_file cache(directory);
  int found = 0;
  for (const char who : {'c', 'p'})
    for (int i = 0; i < entries; ++i) {
      char key[33];
      std::snprintf(key, sizeof key, "%c%031d", who, i);
      found += cache.find("region", key) == payload;
    }
  CHECK(found == 2 * entries);
  CHECK(cache.damaged_lines() == 0);
  const std::string text = file_text(directory + "/timings-1.txt");
  CHECK(text.find("torch-delegate timing cache, format 1\n") == 0);
  CHECK(text.find("torch-delegate timing cache", 1) == std::string::npos);  // one header
  std::filesystem::remove_all(directory);
}

TEST_CASE("runtime switches: declared once, read by name, the kernel-changing ones in the timing cache's machine key") {
  using torch_delegate::runtime_switch;
  static constexpr std::array<runtime_switch, 2> switches{{
      {"TD_TEST_SWITCH_KERNELS", "4", "the tile of a test kernel"},
      {"TD_TEST_SWITCH_QUIET", "unset", "set: a test backend says less", false},
  }};
  torch_delegate::declare_runtime_switches("td_test_switches", switches);
  torch_delegate::declare_runtime_switches("td_test_switches", switches);  // again: the same table, no error
  ::unsetenv("TD_TEST_SWITCH_KERNELS");
  ::unsetenv("TD_TEST_SWITCH_QUIET");
  CHECK(torch_delegate::runtime_switch_value("TD_TEST_SWITCH_KERNELS") == "4");  // the default
  CHECK(!torch_delegate::runtime_switch_off("TD_TEST_SWITCH_KERNELS"));
  const std::string unset = torch_delegate::detail::machine_fingerprint();
  ::setenv("TD_TEST_SWITCH_KERNELS", "0", 1);
  ::setenv("TD_TEST_SWITCH_QUIET", "1", 1);
  CHECK(torch_delegate::runtime_switch_off("TD_TEST_SWITCH_KERNELS"));
  const std::string set = torch_delegate::detail::machine_fingerprint();
  CHECK(set != unset);  // a timing under other kernels is never replayed
  CHECK(contains(set, "TD_TEST_SWITCH_KERNELS=0;"));
  CHECK(!contains(set, "TD_TEST_SWITCH_QUIET"));  // changes no kernel
  ::setenv("TD_TEST_SWITCH_UNDECLARED", "1", 1);
  CHECK(!contains(torch_delegate::detail::machine_fingerprint(), "TD_TEST_SWITCH_UNDECLARED"));
  ::unsetenv("TD_TEST_SWITCH_KERNELS");
  ::unsetenv("TD_TEST_SWITCH_QUIET");
  ::unsetenv("TD_TEST_SWITCH_UNDECLARED");

  bool listed = false;
  for (const torch_delegate::known_switch& each : torch_delegate::runtime_switches())
    if (each.declared.name == "TD_TEST_SWITCH_QUIET") listed = each.owner == "td_test_switches" && !each.value;
  CHECK(listed);
  CHECK(torch_delegate::runtime_switches().front().owner == "torch-delegate");  // the engines' caps, first
  CHECK_THROWS_WITH(torch_delegate::runtime_switch_value("TD_TEST_SWITCH_UNDECLARED"),
                    doctest::Contains("the runtime switch TD_TEST_SWITCH_UNDECLARED is read but declared by no table"));
  static constexpr std::array<runtime_switch, 1> taken{{{"TD_TEST_SWITCH_KERNELS", "8", "another owner's"}}};
  CHECK_THROWS_WITH(torch_delegate::declare_runtime_switches("td_test_other", taken),
                    doctest::Contains("'td_test_other' declares TD_TEST_SWITCH_KERNELS, which 'td_test_switches' declares already"));
}
