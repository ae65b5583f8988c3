// torch-delegate vs LibTorch's own to_backend, side by side in one process and one run.
//   bench_delegate [google benchmark flags]   per-call, typed-path, lowering, load, thread figures
//   bench_delegate --memory                   resident bytes added by one lowered module (JSON)
//   BM_partition_*/N                          partial lowering of a method of N nodes (issue 12)
//   bench_delegate --instructions             the key cases once more, each in its own td_count_*
//                                             function, for valgrind --tool=callgrind (bench/run)
#include "bench_backends.hpp"

#include <torch_delegate/partition.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <malloc.h>
#include <sstream>
#include <unistd.h>

namespace {

const at::Tensor x = torch::ones({1});
const at::Tensor h = torch::ones({1});

std::vector<c10::IValue> inputs() { return {x, h}; }

torch::jit::Module& upstream_module() {
  static torch::jit::Module module = bench::lower_upstream(bench::scripted_add());
  return module;
}
torch_delegate::lowered_module<bench::OurAddBackend>& our_module() {
  static auto module = torch_delegate::lower<bench::OurAddBackend>(bench::scripted_add());
  return module;
}

// 1. per call through the TorchScript interpreter --------------------------------------------
void BM_call_bare_aten_add(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(at::add(x, h));
}
void BM_call_scripted_original(benchmark::State& state) {
  static torch::jit::Module module = bench::scripted_add();
  for (auto _ : state) benchmark::DoNotOptimize(module.forward(inputs()));
}
void BM_call_interpreter_upstream(benchmark::State& state) {
  auto& module = upstream_module();
  for (auto _ : state) benchmark::DoNotOptimize(module.forward(inputs()));
  state.SetItemsProcessed(state.iterations());
}
void BM_call_interpreter_ours(benchmark::State& state) {
  auto& module = our_module().module();
  for (auto _ : state) benchmark::DoNotOptimize(module.forward(inputs()));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_call_bare_aten_add);
BENCHMARK(BM_call_scripted_original);
BENCHMARK(BM_call_interpreter_upstream);
BENCHMARK(BM_call_interpreter_ours);

// The same add as a region of a partially lowered method (issue 12: a region's call overhead
// within 1.2x of the whole-method path): forward calls the region's method on the delegate
// child, which calls the backend.
struct PartialAddBackend : bench::OurAddBackend {
  static constexpr std::string_view name = "bench_ours_partial_add";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::prim::Constant;
  }
};
torch::jit::Module& partial_module() {
  static torch::jit::Module module = torch_delegate::lower_partially<PartialAddBackend>(bench::scripted_add());
  return module;
}
void BM_call_region_ours(benchmark::State& state) {
  auto& module = partial_module();
  for (auto _ : state) benchmark::DoNotOptimize(module.forward(inputs()));
}
BENCHMARK(BM_call_region_ours);

// Partial lowering on large methods (issue 12: partitioning 10 000 nodes in ≤ 1 s): a
// straight-line method of N nodes, add/sub (supported) with a relu (kept in TorchScript) every
// 100 nodes, so N/100 regions. BM_partition_plan: delegation_plan<B> (canonical graph, alias
// analysis, regions, report); BM_partition_lower: lower_partially<B> (also the regions'
// preprocess, the child module's TorchScript and the rewritten method).
struct PartitionBench {
  static constexpr std::string_view name = "td_bench_partition";
  static bool supports(const torch::jit::Node* node) {
    return node->kind() == c10::aten::add || node->kind() == c10::aten::sub || node->kind() == c10::prim::Constant;
  }
  static std::string preprocess(const torch_delegate::method_to_lower& method) { return method.name(); }
  static bool is_available() { return true; }
  static std::string compile(const std::string& payload) { return payload; }
  static std::vector<c10::IValue> execute(std::string&, torch_delegate::inputs) { return {}; }
};

const torch::jit::Module& module_of(std::int64_t nodes) {
  static std::map<std::int64_t, torch::jit::Module> modules;
  auto found = modules.find(nodes);
  if (found != modules.end()) return found->second;
  std::ostringstream source;
  source << "def forward(self, x, h):\n    v = x\n";
  for (std::int64_t i = 0; i < nodes; ++i) {
    if (i % 100 == 99)
      source << "    v = torch.relu(v)\n";
    else
      source << "    v = v " << (i % 2 ? "-" : "+") << " h\n";
  }
  source << "    return v\n";
  torch::jit::Module module("m");
  module.define(source.str());
  return modules.emplace(nodes, module).first->second;
}

void BM_partition_plan(benchmark::State& state) {
  const torch::jit::Module& module = module_of(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(torch_delegate::delegation_plan<PartitionBench>(module));
  state.counters["nodes"] = static_cast<double>(state.range(0));
}
void BM_partition_lower(benchmark::State& state) {
  const torch::jit::Module& module = module_of(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(torch_delegate::lower_partially<PartitionBench>(module));
  state.counters["nodes"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_partition_plan)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_partition_lower)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// 2. the typed C++ path vs calling execute directly --------------------------------------------
void BM_call_typed_ours(benchmark::State& state) {
  auto forward = our_module().method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  for (auto _ : state) benchmark::DoNotOptimize(forward(x, h));
}
void BM_call_direct_execute(benchmark::State& state) {
  std::string handle = bench::OurAddBackend::compile("add");
  for (auto _ : state) benchmark::DoNotOptimize(bench::OurAddBackend::execute(handle, x, h));
}
BENCHMARK(BM_call_typed_ours);
BENCHMARK(BM_call_direct_execute);

// 4. torch::jit::load of a saved lowered module, measured before the lowering benchmarks (a
// deploying process loads models; it has not lowered thousands of distinct classes) and again
// after them (a heap that has seen those lowerings: see docs/performance.md) ---------------------
std::string saved(const torch::jit::Module& module) {
  std::ostringstream out;
  module.save(out);
  return out.str();
}
void BM_load_upstream(benchmark::State& state) {
  const std::string bytes = saved(upstream_module());
  for (auto _ : state) {
    std::istringstream in(bytes);
    benchmark::DoNotOptimize(torch::jit::load(in));
  }
}
void BM_load_ours(benchmark::State& state) {
  const std::string bytes = saved(our_module().module());
  for (auto _ : state) {
    std::istringstream in(bytes);
    benchmark::DoNotOptimize(torch::jit::load(in));
  }
}
void BM_load_upstream_after_lowering(benchmark::State& state) { BM_load_upstream(state); }
void BM_load_ours_after_lowering(benchmark::State& state) { BM_load_ours(state); }
BENCHMARK(BM_load_upstream)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_load_ours)->Unit(benchmark::kMicrosecond);

// 3. lowering: a module of a new class ("first"), and a second module of the same class -------
void BM_lower_first_upstream(benchmark::State& state) {
  static std::int64_t n = 0;  // class names never repeat, across repetitions too
  for (auto _ : state) benchmark::DoNotOptimize(bench::lower_upstream(bench::scripted_add("First" + std::to_string(n++))));
}
void BM_lower_first_ours(benchmark::State& state) {
  static std::int64_t n = 0;  // class names never repeat, across repetitions too
  for (auto _ : state)
    benchmark::DoNotOptimize(torch_delegate::lower<bench::OurAddBackend>(bench::scripted_add("First" + std::to_string(n++))));
}
void BM_lower_second_upstream(benchmark::State& state) {
  const auto module = bench::scripted_add();
  for (auto _ : state) benchmark::DoNotOptimize(bench::lower_upstream(module));
}
void BM_lower_second_ours(benchmark::State& state) {
  const auto module = bench::scripted_add();
  torch_delegate::lower<bench::OurAddBackend>(module);
  for (auto _ : state) benchmark::DoNotOptimize(torch_delegate::lower<bench::OurAddBackend>(module));
}
BENCHMARK(BM_lower_first_upstream)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lower_first_ours)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lower_second_upstream)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lower_second_ours)->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_load_upstream_after_lowering)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_load_ours_after_lowering)->Unit(benchmark::kMicrosecond);

// 5. several threads calling one lowered module -------------------------------------------------
// The single-thread interpreter cases, run under 1, 2 and 4 threads (own names for the report).
void BM_threads_interpreter_upstream(benchmark::State& state) { BM_call_interpreter_upstream(state); }
void BM_threads_interpreter_ours(benchmark::State& state) { BM_call_interpreter_ours(state); }
void BM_threads_typed_ours(benchmark::State& state) {
  auto forward = our_module().method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  for (auto _ : state) benchmark::DoNotOptimize(forward(x, h));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_threads_interpreter_upstream)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();
BENCHMARK(BM_threads_interpreter_ours)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();
BENCHMARK(BM_threads_typed_ours)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// 7. memory: resident bytes per lowered module ----------------------------------------------------
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

std::int64_t heap_bytes() { return static_cast<std::int64_t>(mallinfo2().uordblks); }

struct per_module {
  double resident;
  double heap;
};

template <class Lower>
per_module bytes_per_module(Lower&& lower, int count) {
  std::vector<torch::jit::Module> keep;
  keep.reserve(count + 1);
  keep.push_back(lower(0));  // warm-up: first-use registrations and caches
  const std::int64_t resident_before = resident_bytes(), heap_before = heap_bytes();
  for (int i = 1; i <= count; ++i) keep.push_back(lower(i));
  return {double(resident_bytes() - resident_before) / count, double(heap_bytes() - heap_before) / count};
}

int memory_report() {
  const int count = 400;
  // Distinct module objects of one class: what a server holding many lowered models does.
  const per_module upstream = bytes_per_module([](int) { return bench::lower_upstream(bench::scripted_add()); }, count);
  const per_module ours = bytes_per_module(
      [](int) { return torch_delegate::lower<bench::OurAddBackend>(bench::scripted_add()).module(); }, count);
  std::cout << "{\"memory_bytes_per_module_upstream\": " << upstream.resident
            << ", \"memory_bytes_per_module_ours\": " << ours.resident
            << ", \"heap_bytes_per_module_upstream\": " << upstream.heap << ", \"heap_bytes_per_module_ours\": " << ours.heap
            << ", \"modules\": " << count << "}\n";
  return 0;
}

}  // namespace

// 8. instruction counts: each case runs `n` times inside its own td_count_* function; bench/run
// collects only inside them (callgrind --toggle-collect=td_count_*) and divides by n. Stable on a
// noisy machine where times of the same case vary by 2x between runs.
namespace cases {
void bare_aten_add() { benchmark::DoNotOptimize(at::add(x, h)); }
void interpreter_upstream() { benchmark::DoNotOptimize(upstream_module().forward(inputs())); }
void interpreter_ours() { benchmark::DoNotOptimize(our_module().module().forward(inputs())); }
void region_ours() { benchmark::DoNotOptimize(partial_module().forward(inputs())); }
void typed_ours() {
  static auto forward = our_module().method<at::Tensor(at::Tensor, at::Tensor)>("forward");
  benchmark::DoNotOptimize(forward(x, h));
}
void direct_execute() {
  static std::string handle = bench::OurAddBackend::compile("add");
  benchmark::DoNotOptimize(bench::OurAddBackend::execute(handle, x, h));
}
void load_upstream() {
  static const std::string bytes = saved(upstream_module());
  std::istringstream in(bytes);
  benchmark::DoNotOptimize(torch::jit::load(in));
}
void load_ours() {
  static const std::string bytes = saved(our_module().module());
  std::istringstream in(bytes);
  benchmark::DoNotOptimize(torch::jit::load(in));
}
void lower_second_upstream() {
  static const auto module = bench::scripted_add();
  benchmark::DoNotOptimize(bench::lower_upstream(module));
}
void lower_second_ours() {
  static const auto module = bench::scripted_add();
  benchmark::DoNotOptimize(torch_delegate::lower<bench::OurAddBackend>(module));
}
}  // namespace cases

#define TD_COUNT_CASE(name)                                          \
  extern "C" __attribute__((noinline)) void td_count_##name(int n) { \
    for (int i = 0; i < n; ++i) cases::name();                       \
  }
TD_COUNT_CASE(bare_aten_add)
TD_COUNT_CASE(interpreter_upstream)
TD_COUNT_CASE(interpreter_ours)
TD_COUNT_CASE(region_ours)
TD_COUNT_CASE(typed_ours)
TD_COUNT_CASE(direct_execute)
TD_COUNT_CASE(load_upstream)
TD_COUNT_CASE(load_ours)
TD_COUNT_CASE(lower_second_upstream)
TD_COUNT_CASE(lower_second_ours)
#undef TD_COUNT_CASE

/// Runs every case (warmed up first, outside the counted functions) and prints how many times
/// each counted function ran its case, as JSON.
int instruction_cases() {
  struct entry {
    const char* name;
    void (*warm)();
    void (*count)(int);
    int calls;
  };
  const entry all[] = {{"bare_aten_add", cases::bare_aten_add, td_count_bare_aten_add, 200},
                       {"interpreter_upstream", cases::interpreter_upstream, td_count_interpreter_upstream, 200},
                       {"interpreter_ours", cases::interpreter_ours, td_count_interpreter_ours, 200},
                       {"region_ours", cases::region_ours, td_count_region_ours, 200},
                       {"typed_ours", cases::typed_ours, td_count_typed_ours, 200},
                       {"direct_execute", cases::direct_execute, td_count_direct_execute, 200},
                       {"load_upstream", cases::load_upstream, td_count_load_upstream, 10},
                       {"load_ours", cases::load_ours, td_count_load_ours, 10},
                       {"lower_second_upstream", cases::lower_second_upstream, td_count_lower_second_upstream, 10},
                       {"lower_second_ours", cases::lower_second_ours, td_count_lower_second_ours, 10}};
  for (const entry& e : all) {
    e.warm();
    e.warm();
  }
  std::cout << "{";
  for (std::size_t i = 0; i < std::size(all); ++i) {
    all[i].count(all[i].calls);
    std::cout << (i ? ", " : "") << "\"" << all[i].name << "\": " << all[i].calls;
  }
  std::cout << "}\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--memory") return memory_report();
  if (argc > 1 && std::string(argv[1]) == "--instructions") return instruction_cases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
