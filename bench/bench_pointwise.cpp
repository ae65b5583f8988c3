// The pointwise_fusion backend (issue 13) against eager ATen, the scripted original and ATen's own fused ops.
//   pointwise/<expression>/n:<elements>/threads:<intra-op threads>
//     expressions: gelu9 (GELU written as 9 ops), add_scale ((x + h) * 2.0 - 1.0),
//                  mul_add_relu (relu(x * w + b)), sigmoid_gate (x * sigmoid(x) * h + 1.0), silu
//     counters <variant>_ns, ns per call of: eager (the same ATen calls from C++: the fair anchor),
//       scripted (the scripted module, unlowered), scripted_fuser_off (gelu9: the same with
//       TorchScript's fusers off), fused (lower_partially<PointwiseBackend>), aten (ATen's own fused op),
//       single_add (n = 1: one at::add, what a 1-element fused call is judged by); timed side by side
//   pointwise/triad/n:67108864         a[i] = b[i] + s * c[i]: the machine's memory bandwidth ceiling
//   pointwise/first_touch              what a page touched for the first time costs here (see main)
//   pointwise/ffn/<T>x<D>x<H>          a transformer feed-forward block, end to end: counters
//                                       eager_ns, scripted_ns, fused_ns and linears_ns (the Linears alone)
//   bench_pointwise --plans             what lower_partially fuses in each of those modules
// bench/run turns the JSON into the "Pointwise fusion" table of docs/performance.md
// (bench/report_pointwise.py).
#include "pointwise_backend.hpp"

#include <torch_delegate/partition.hpp>
#include <torch_delegate/torch_delegate.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

// TorchScript's CPU fuser switch (torch/csrc/jit/codegen/fuser/interface.h, which Debian's
// libtorch-dev does not ship; libtorch_cpu exports both).
namespace torch::jit {
TORCH_API bool canFuseOnCPU();
TORCH_API void overrideCanFuseOnCPU(bool value);
}  // namespace torch::jit

namespace {

using tensors = std::vector<at::Tensor>;

// ---------------------------------------------------------------------------------------------
// The expressions: TorchScript source, and the same ATen calls written out in C++
// ---------------------------------------------------------------------------------------------

struct expression {
  std::string name;
  std::string body;  // forward's return expression over x, h, w, b
  std::vector<std::string> arguments;
  std::function<at::Tensor(const tensors&)> eager;
  std::function<at::Tensor(const tensors&)> aten;  // ATen's own fused op; empty where it has none
};

at::Tensor gelu9_eager(const at::Tensor& x) {
  static const double scale = std::sqrt(2.0 / std::numbers::pi);
  const at::Tensor inner = at::add(x, at::mul(at::pow(x, 3.0), 0.044715));
  return at::mul(at::mul(x, 0.5), at::add(at::tanh(at::mul(inner, scale)), 1.0));
}
// 8 tensor ops and the scalar math.sqrt(2.0 / math.pi): lowered partially, the scalar part stays
// in TorchScript and the tensor ops become one region.
const std::string gelu9_source =
    "0.5 * {x} * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * ({x} + 0.044715 * torch.pow({x}, 3.0))))";

std::string gelu9_of(const std::string& x) {
  std::string text = gelu9_source;
  for (std::size_t at; (at = text.find("{x}")) != std::string::npos;) text.replace(at, 3, x);
  return text;
}

const std::vector<expression>& expressions() {
  static const std::vector<expression> all{
      {"gelu9", gelu9_of("x"), {"x"}, [](const tensors& in) { return gelu9_eager(in[0]); },
       [](const tensors& in) { return at::gelu(in[0], "tanh"); }},
      {"add_scale", "(x + h) * 2.0 - 1.0", {"x", "h"},
       [](const tensors& in) { return at::sub(at::mul(at::add(in[0], in[1]), 2.0), 1.0); }, {}},
      {"mul_add_relu", "torch.relu(x * w + b)", {"x", "w", "b"},
       [](const tensors& in) { return at::relu(at::add(at::mul(in[0], in[1]), in[2])); }, {}},
      {"sigmoid_gate", "x * torch.sigmoid(x) * h + 1.0", {"x", "h"},
       [](const tensors& in) { return at::add(at::mul(at::mul(in[0], at::sigmoid(in[0])), in[1]), 1.0); }, {}},
      {"silu", "x * torch.sigmoid(x)", {"x"}, [](const tensors& in) { return at::mul(in[0], at::sigmoid(in[0])); },
       [](const tensors& in) { return at::silu(in[0]); }},
  };
  return all;
}

/// Python's `math` as torch.jit.script sees it: math.pi a constant, math.sqrt etc. the builtin
/// scalar ops. Module::define has no `math` of its own (only `torch`): this gives the graph a
/// model scripted in Python has.
struct math_module : torch::jit::SugaredValue {
  std::string kind() const override { return "math module"; }
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange& loc, torch::jit::GraphFunction& function,
                                                 const std::string& field) override {
    if (field == "pi") return std::make_shared<torch::jit::SimpleValue>(function.graph()->insertConstant(std::numbers::pi, loc));
    return std::make_shared<torch::jit::BuiltinFunction>(c10::Symbol::aten(field), c10::nullopt);
  }
};
struct python_like_resolver : torch::jit::NativeResolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& function,
                                                         const torch::jit::SourceRange& loc) override {
    if (name == "math") return std::make_shared<math_module>();
    return NativeResolver::resolveValue(name, function, loc);
  }
};

void define(torch::jit::Module& module, const std::string& source) {
  module.define(source, std::make_shared<python_like_resolver>());
}

torch::jit::Module scripted(const expression& e) {
  std::string parameters;
  for (const std::string& argument : e.arguments) parameters += ", " + argument;
  torch::jit::Module module("m");
  define(module, "def forward(self" + parameters + "):\n    return " + e.body + "\n");
  return module;
}

// ---------------------------------------------------------------------------------------------
// Inputs, modules and checks, made once and shared by the thread counts and repetitions
// ---------------------------------------------------------------------------------------------

/// Three float tensors of n elements from torch::randn (an expression takes the first ones).
const tensors& inputs_of(std::int64_t n) {
  static std::map<std::int64_t, tensors> cache;
  auto found = cache.find(n);
  if (found != cache.end()) return found->second;
  torch::manual_seed(n);
  return cache.emplace(n, tensors{torch::randn({n}), torch::randn({n}), torch::randn({n})}).first->second;
}

std::vector<c10::IValue> boxed(const tensors& in, std::size_t count) { return {in.begin(), in.begin() + count}; }

/// Aborts the run when a fused result is not the eager one: a wrong kernel must not look fast.
/// Relative 1e-5, with an absolute floor of 1e-6: where eager's result is near 0 through
/// cancellation (GELU's 1 + tanh for x < -4), both are within a few ulps of the operands but not
/// of the tiny result.
void check_equal(const std::string& what, const at::Tensor& fused, const at::Tensor& eager) {
  const bool same_shape = fused.sizes() == eager.sizes();
  if (same_shape && at::allclose(fused, eager, /*rtol=*/1e-5, /*atol=*/1e-6)) return;
  std::cerr << "bench_pointwise: the fused result of " << what << " differs from eager's";
  if (same_shape) {
    const at::Tensor error = (fused - eager).abs();
    const std::int64_t worst = error.argmax().item<std::int64_t>();
    std::cerr << ": at element " << worst << " fused " << fused.flatten()[worst].item<float>() << ", eager "
              << eager.flatten()[worst].item<float>();
  }
  std::cerr << "\n";
  std::exit(1);
}

/// The scripted module of an expression: its own module per variant, so that each variant's graph
/// executor optimises under its own fuser settings.
torch::jit::Module& module_of(const expression& e, const std::string& variant) {
  static std::map<std::string, torch::jit::Module> cache;
  const std::string key = e.name + "/" + variant;
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  torch::jit::Module module = scripted(e);
  if (variant == "fused") module = torch_delegate::lower_partially<pointwise::PointwiseBackend>(module);
  return cache.emplace(key, module).first->second;
}

/// TorchScript's fusers off while a scripted_fuser_off case warms up and runs (the graph
/// executor decides whether to fuse when it optimises, after the profiling runs).
struct fusers_off {
  bool texpr = torch::jit::tensorExprFuserEnabled(), cpu = torch::jit::canFuseOnCPU();
  fusers_off() {
    torch::jit::setTensorExprFuserEnabled(false);
    torch::jit::overrideCanFuseOnCPU(false);
  }
  ~fusers_off() {
    torch::jit::setTensorExprFuserEnabled(texpr);
    torch::jit::overrideCanFuseOnCPU(cpu);
  }
};

/// The profiling executor optimises a scripted method after its profiling runs: time it after.
constexpr int warm_up_calls = 3;

/// One way of computing a case, as the benchmark calls it.
struct variant {
  std::string name;
  std::function<void()> call;
};

/// Times the variants of a case side by side: each round calls each of them `batch` times in
/// turn, a different one first each round; counter `<name>_ns` is its time per call. The speed of
/// this VM drifts by 20 % and more over seconds: variants timed one after another would each get
/// their own share of the drift, while side by side they share it and their ratios hold.
void time_side_by_side(benchmark::State& state, const std::vector<variant>& variants, int batch) {
  for (const variant& v : variants)
    for (int i = 0; i < warm_up_calls; ++i) v.call();
  std::vector<double> total_ns(variants.size());
  std::size_t round = 0;
  for (auto _ : state) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::size_t v = (round + k) % variants.size();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < batch; ++i) variants[v].call();
      total_ns[v] += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    }
    ++round;
  }
  const double calls = static_cast<double>(state.iterations()) * batch;
  for (std::size_t v = 0; v < variants.size(); ++v) state.counters[variants[v].name + "_ns"] = total_ns[v] / calls;
}

/// pointwise/<expression>/n:<n>/threads:<threads>: every variant of an expression at one size.
void BM_expression(benchmark::State& state, const expression& e, std::int64_t n, int threads) {
  at::set_num_threads(threads);
  const tensors& all = inputs_of(n);
  const tensors in(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(e.arguments.size()));
  const std::vector<c10::IValue> arguments = boxed(in, in.size());
  torch::jit::Module& scripted = module_of(e, "scripted");
  torch::jit::Module& fused = module_of(e, "fused");
  std::vector<variant> variants{{"eager", [&] { benchmark::DoNotOptimize(e.eager(in)); }},
                                {"scripted", [&] { benchmark::DoNotOptimize(scripted.forward(arguments)); }},
                                {"fused", [&] { benchmark::DoNotOptimize(fused.forward(arguments)); }}};
  if (e.name == "gelu9") {
    torch::jit::Module& without_fusers = module_of(e, "scripted_fuser_off");
    variants.push_back({"scripted_fuser_off", [&] {
                          fusers_off off;
                          benchmark::DoNotOptimize(without_fusers.forward(arguments));
                        }});
  }
  if (e.aten) variants.push_back({"aten", [&] { benchmark::DoNotOptimize(e.aten(in)); }});
  // One at::add of two 1-element tensors: what a 1-element fused call is judged against.
  if (n == 1 || e.name == "add_scale")  // at other sizes: the one-pass floor of a fused add-scale
    variants.push_back({"single_add", [&] { benchmark::DoNotOptimize(at::add(all[0], all[1])); }});
  check_equal(e.name + " at " + std::to_string(n) + " elements", fused.forward(arguments).toTensor(), e.eager(in));
  // Calls of a few µs in batches, so that reading the clock is not part of their time.
  time_side_by_side(state, variants, n <= 1024 ? 32 : n <= 65536 ? 4 : 1);
  state.counters["elements"] = static_cast<double>(n);
  state.counters["threads"] = threads;
}

/// The triad's loop, in the widest vectors the CPU has (GCC clones it per ISA and picks one when
/// the program loads): with x86-64's baseline SSE2 alone one thread issues too few bytes per
/// cycle to reach the memory's bandwidth (it measured ~20 % below ATen's own AVX-512 add here).
__attribute__((target_clones("avx512f", "avx2", "default"))) void triad_range(float* __restrict out,
                                                                              const float* __restrict left,
                                                                              const float* __restrict right,
                                                                              float s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = left[i] + s * right[i];
}

/// STREAM's triad on arrays far larger than the caches: the bandwidth a pass over memory gets
/// here, which bounds every fused figure at 16M elements. Counted as STREAM counts it (3 arrays
/// of 4 bytes per element; the write-allocate read of `a` is not counted).
void BM_triad(benchmark::State& state, int threads) {
  constexpr std::int64_t n = std::int64_t{1} << 26;
  at::set_num_threads(threads);
  static at::Tensor a = at::zeros({n}), b = at::full({n}, 1.0f), c = at::full({n}, 2.0f);
  float* const out_data = a.data_ptr<float>();
  const float* const left_data = b.data_ptr<float>();
  const float* const right_data = c.data_ptr<float>();
  auto triad = [&] {
    at::parallel_for(0, n, std::int64_t{1} << 16, [&](std::int64_t begin, std::int64_t end) {
      triad_range(out_data + begin, left_data + begin, right_data + begin, 3.0f, end - begin);
    });
  };
  triad();  // warm-up
  for (auto _ : state) {
    triad();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(3 * sizeof(float)));
  state.counters["threads"] = threads;
}

/// Memory touched for the first time: mmap 64 MiB, write a byte per page, unmap. What a tensor
/// costs when the allocator asks the kernel for fresh pages (see main: the benchmark keeps freed
/// memory, so the other cases do not pay this).
void BM_first_touch(benchmark::State& state) {
  constexpr std::size_t bytes = std::size_t{64} << 20;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  for (auto _ : state) {
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    for (std::size_t offset = 0; offset < bytes; offset += page) static_cast<volatile char*>(memory)[offset] = 1;
    munmap(memory, bytes);
  }
  state.counters["pages"] = static_cast<double>(bytes / page);
}

// ---------------------------------------------------------------------------------------------
// A transformer feed-forward block: y = (x + linear2(gelu9(linear1(x)))) * 0.5
// ---------------------------------------------------------------------------------------------

struct ffn_size {
  std::int64_t tokens, model, hidden;
  std::string name() const {
    return std::to_string(tokens) + "x" + std::to_string(model) + "x" + std::to_string(hidden);
  }
};

// tokens x d_model x hidden. Debian's LibTorch multiplies matrices with the reference (netlib)
// BLAS, 3-5 GFLOP/s here and on one thread, while the pointwise work per element of the hidden
// layer is fixed: its share of the block falls as 1 / d_model, whatever the tokens and hidden. At
// a BERT-like 2048 x 256 x 1024 the Linears take ~97 % of the block, so no pointwise backend can
// move it. Tried d_model 256, 128, 64, 32, 16 and 8: 8192 x 16 x 64 is the narrowest still a
// model, where the pointwise work is the largest share it gets (a fifth to a third of the scripted
// block). "linears" times the two matrix products alone, the floor of the block. bench/run times
// the block again with OpenBLAS first on the library path (25-75 x faster Linears here), where the
// pointwise share, and fusion's gain, is large enough to see at BERT-like widths.
const std::vector<ffn_size> default_ffn_sizes{{2048, 256, 1024}, {8192, 16, 64}};

/// The block sizes to time: TD_BENCH_FFN_SIZES="TxDxH,..." (e.g. "2048x128x512") or the defaults.
const std::vector<ffn_size>& ffn_sizes() {
  static const std::vector<ffn_size> sizes = [] {
    const char* given = std::getenv("TD_BENCH_FFN_SIZES");
    if (given == nullptr || *given == '\0') return default_ffn_sizes;
    std::vector<ffn_size> parsed;
    std::istringstream list(given);
    for (std::string item; std::getline(list, item, ',');) {
      ffn_size size{};
      char x1 = 0, x2 = 0;
      std::istringstream fields(item);
      if (!(fields >> size.tokens >> x1 >> size.model >> x2 >> size.hidden) || x1 != 'x' || x2 != 'x' || size.tokens <= 0 ||
          size.model <= 0 || size.hidden <= 0) {
        std::cerr << "TD_BENCH_FFN_SIZES: '" << item << "' is not tokens x d_model x hidden (e.g. 2048x128x512)\n";
        std::exit(2);
      }
      parsed.push_back(size);
    }
    return parsed;
  }();
  return sizes;
}

struct ffn_case {
  torch::jit::Module scripted{"ffn"}, fused;
  at::Tensor x, w1, b1, w2, b2;
  at::Tensor eager() const {
    const at::Tensor hidden = at::linear(x, w1, b1);
    return at::mul(at::add(x, at::linear(gelu9_eager(hidden), w2, b2)), 0.5);
  }
  /// The two Linears alone: the time no pointwise backend can take off the block.
  at::Tensor linears() const { return at::linear(at::linear(x, w1, b1), w2, b2); }
};

ffn_case& ffn_of(const ffn_size& size) {
  static std::map<std::string, ffn_case> cache;
  auto found = cache.find(size.name());
  if (found != cache.end()) return found->second;
  ffn_case c;
  torch::manual_seed(0);
  c.x = torch::randn({size.tokens, size.model});
  c.w1 = torch::randn({size.hidden, size.model}) / std::sqrt(double(size.model));
  c.b1 = torch::randn({size.hidden}) * 0.1;
  c.w2 = torch::randn({size.model, size.hidden}) / std::sqrt(double(size.hidden));
  c.b2 = torch::randn({size.model}) * 0.1;
  c.scripted.register_parameter("w1", c.w1, false);
  c.scripted.register_parameter("b1", c.b1, false);
  c.scripted.register_parameter("w2", c.w2, false);
  c.scripted.register_parameter("b2", c.b2, false);
  // torch.linear is aten::linear, what torch.nn.functional.linear compiles to in Python.
  define(c.scripted,
         "def forward(self, x):\n"
         "    h = torch.linear(x, self.w1, self.b1)\n"
         "    g = " + gelu9_of("h") + "\n"
         "    return (x + torch.linear(g, self.w2, self.b2)) * 0.5\n");
  c.fused = torch_delegate::lower_partially<pointwise::PointwiseBackend>(c.scripted);
  return cache.emplace(size.name(), std::move(c)).first->second;
}

/// pointwise/ffn/<size>/threads:<threads>: the block's variants side by side.
void BM_ffn(benchmark::State& state, const ffn_size& size, int threads) {
  at::set_num_threads(threads);
  ffn_case& c = ffn_of(size);
  const std::vector<c10::IValue> arguments{c.x};
  check_equal("the feed-forward block " + size.name(), c.fused.forward(arguments).toTensor(), c.eager());
  time_side_by_side(state,
                    {{"eager", [&] { benchmark::DoNotOptimize(c.eager()); }},
                     {"scripted", [&] { benchmark::DoNotOptimize(c.scripted.forward(arguments)); }},
                     {"fused", [&] { benchmark::DoNotOptimize(c.fused.forward(arguments)); }},
                     {"linears", [&] { benchmark::DoNotOptimize(c.linears()); }}},
                    1);
  state.counters["tokens"] = static_cast<double>(size.tokens);
  state.counters["d_model"] = static_cast<double>(size.model);
  state.counters["hidden"] = static_cast<double>(size.hidden);
  state.counters["threads"] = threads;
}

// ---------------------------------------------------------------------------------------------
// What TorchScript's executor does with the scripted original (is NNC in play?)
// ---------------------------------------------------------------------------------------------

/// Fusion groups in the optimised graph of the scripted GELU after warm-up: 0 means the scripted
/// figures are plain ATen calls through the interpreter, not NNC (Debian's LibTorch has no LLVM).
std::string scripted_fusion_groups() {
  torch::jit::Module module = scripted(expressions()[0]);
  const std::vector<c10::IValue> arguments{torch::randn({1024})};
  for (int i = 0; i < warm_up_calls; ++i) module.forward(arguments);
  int groups = 0;
  for (const torch::jit::Node* node : torch::jit::lastExecutedOptimizedGraph()->nodes())
    groups += node->kind() == c10::prim::TensorExprGroup || node->kind() == c10::prim::FusionGroup;
  return std::to_string(groups);
}

/// What happens when a user forces TorchScript's CPU fuser on: without LLVM, NNC has no code
/// generator for the CPU.
std::string forced_cpu_fuser() {
  const bool before = torch::jit::canFuseOnCPU();
  torch::jit::overrideCanFuseOnCPU(true);
  std::string outcome = "runs";
  try {
    torch::jit::Module module = scripted(expressions()[0]);
    const std::vector<c10::IValue> arguments{torch::randn({1024})};
    for (int i = 0; i < warm_up_calls; ++i) module.forward(arguments);
  } catch (const std::exception& error) {  // std::runtime_error("LLVM Backend not found") here
    const std::string message = error.what();
    outcome = "fails (\"" + message.substr(0, message.find('\n')) + "\")";
  }
  torch::jit::overrideCanFuseOnCPU(before);
  return outcome;
}

}  // namespace

/// The BLAS library this process loaded (libblas.so.3 is a Debian alternative: the reference BLAS,
/// OpenBLAS, BLIS..., or whatever LD_LIBRARY_PATH puts first), resolved to its file.
std::string loaded_blas() {
  std::string found = "none loaded";
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const std::string name = info->dlpi_name == nullptr ? "" : info->dlpi_name;
        if (name.find("libblas.so") == std::string::npos) return 0;
        char resolved[PATH_MAX];
        *static_cast<std::string*>(out) = realpath(name.c_str(), resolved) != nullptr ? resolved : name;
        return 1;
      },
      &found);
  return found;
}

/// The delegation plan of every benchmarked module: what lower_partially fuses and what stays.
int print_plans() {
  for (const expression& e : expressions())
    std::cout << "== " << e.name << "\n" << torch_delegate::delegation_plan<pointwise::PointwiseBackend>(scripted(e)).to_string() << "\n";
  for (const ffn_size& size : ffn_sizes())
    std::cout << "== ffn " << size.name() << "\n"
              << torch_delegate::delegation_plan<pointwise::PointwiseBackend>(ffn_of(size).scripted).to_string() << "\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--plans") return print_plans();
  // --default-memory: glibc's own behaviour, what a LibTorch process here does unless told
  // otherwise (bench/run runs the feed-forward block and the 16M GELU this way too).
  const bool default_memory = argc > 1 && std::string(argv[1]) == "--default-memory";
  if (default_memory) {
    --argc;
    ++argv;
    argv[0] = argv[-1];
  }
  // This VM charges 10-25 µs for each page a process touches for the first time
  // (pointwise/first_touch; bare-metal Linux: ~0.2 µs), and glibc hands freed blocks above its
  // mmap threshold (128 KiB to 32 MiB) back to the kernel: every eager intermediate would pay it
  // again, and the figures would measure the VM. Freed memory stays in the process instead, as
  // with a caching allocator; this favours eager, which allocates a tensor per op where a fused
  // region allocates one.
  if (!default_memory) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("memory", default_memory ? "glibc defaults" : "kept in the process");
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  benchmark::AddCustomContext("blas_library", loaded_blas());
  benchmark::AddCustomContext("kernel_isa", std::string(pointwise::kernel_isa()));
  benchmark::AddCustomContext("default_intra_op_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("profiling_executor", torch::jit::getProfilingMode() ? "on" : "off");
  benchmark::AddCustomContext("texpr_fuser_enabled", torch::jit::tensorExprFuserEnabled() ? "yes" : "no");
  benchmark::AddCustomContext("can_fuse_on_cpu", torch::jit::canFuseOnCPU() ? "yes" : "no");
  benchmark::AddCustomContext("scripted_gelu9_fusion_groups", scripted_fusion_groups());
  benchmark::AddCustomContext("forced_cpu_fuser", forced_cpu_fuser());

  const std::int64_t sizes[] = {1, 1024, 65536, std::int64_t{1} << 20, std::int64_t{1} << 24};
  for (const expression& e : expressions())
    for (std::int64_t n : sizes)
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("pointwise/" + e.name + "/n:" + std::to_string(n) + "/threads:" + std::to_string(threads)).c_str(),
                                     BM_expression, e, n, threads)
            ->UseRealTime()->Unit(n >= (std::int64_t{1} << 20) ? benchmark::kMillisecond : benchmark::kMicrosecond);
  for (int threads : {1, 2})
    benchmark::RegisterBenchmark(("pointwise/triad/n:67108864/threads:" + std::to_string(threads)).c_str(), BM_triad,
                                 threads)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("pointwise/first_touch/bytes:67108864", BM_first_touch)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const ffn_size& size : ffn_sizes()) {
    auto* b = benchmark::RegisterBenchmark(("pointwise/ffn/" + size.name() + "/threads:2").c_str(), BM_ffn, size, 2)
                  ->UseRealTime()->Unit(benchmark::kMillisecond);
    if (size.model < 64) b->Repetitions(9);  // a few ms per call: more repetitions for a median that holds
  }

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
