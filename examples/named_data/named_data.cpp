// Named data: two methods (forward, encode) use the same 4 MiB weight. Lowered to packed_linear
// with named data, the saved file and a process that loads it hold the packed weight once;
// without named data, each method's payload holds its own copy. Self-checking: exits 1 when a
// figure is off. docs/named-data.md shows what it prints between "--- output: prints ---" and
// "--- end output ---" (checked by tools/doc_snippets.py); the exact figures follow.
//
//   named_data                 lower, save, measure files and (in child processes) memory
//   named_data rss <file.pt>   (child) print how much resident memory loading <file.pt> adds
#include "linear_backend.hpp"

#include <torch/script.h>

#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {

// Under AddressSanitizer, malloc is ASan's (freed memory waits in a quarantine, mallopt does not
// apply): resident memory says nothing about what the module holds, so it is not checked.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool memory_measurable = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool memory_measurable = false;
#else
constexpr bool memory_measurable = true;
#endif
#else
constexpr bool memory_measurable = true;
#endif

constexpr std::int64_t features = 1024;  // a 1024 x 1024 float weight: 4 MiB
constexpr double mib = 1024.0 * 1024.0;
const double one_copy = features * features * sizeof(float) / mib;

// [module]
torch::jit::Module encoder() {
  torch::jit::Module module("Encoder");
  torch::manual_seed(0);
  module.register_parameter("weight", torch::randn({features, features}) / 32, /*requires_grad=*/false);
  module.register_parameter("bias", torch::randn({features}), /*requires_grad=*/false);
  module.define(R"(
def forward(self, x):
    return torch.linear(x, self.weight, self.bias)

def encode(self, x):
    return torch.relu(torch.linear(x, self.weight, self.bias))
)");
  return module;
}
// [module]

double resident_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

/// In a child process: the resident memory that loading `path` adds, after a warm-up load of
/// the same file (the first load of a process also pays for LibTorch's one-time setup).
int measure_load(const std::string& path) {
  // Large blocks always come from mmap and go back at free: what is resident is what is held.
  torch_delegate::register_runtime<packed_linear::LinearBackend>();  // a process that only loads
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  mallopt(M_TRIM_THRESHOLD, 0);
  torch::jit::load(path);
  malloc_trim(0);
  const double before = resident_mib();
  torch::jit::Module loaded = torch::jit::load(path);
  const double after = resident_mib();
  std::printf("%.2f\n", after - before);
  return 0;
}

double load_cost_in_child(const char* self, const std::string& path) {
  const std::string command = std::string("\"") + self + "\" rss \"" + path + "\"";
  FILE* child = popen(command.c_str(), "r");
  double added = -1;
  if (child && std::fscanf(child, "%lf", &added) != 1) added = -1;
  if (child) pclose(child);
  return added;
}

double file_mib(const std::string& path) { return static_cast<double>(std::filesystem::file_size(path)) / mib; }

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "rss") return measure_load(argv[2]);
  const torch::jit::Module module = encoder();

  // [lower]
  using packed_linear::LinearBackend;
  torch_delegate::method_options<LinearBackend> shared{{"forward", {}}, {"encode", {}}};
  torch_delegate::method_options<LinearBackend> copies{{"forward", {.named_data = false}},
                                                       {"encode", {.named_data = false}}};
  torch_delegate::method_options<LinearBackend> own{{"forward", {.own_copy = true}}, {"encode", {.own_copy = true}}};
  torch_delegate::lower<LinearBackend>(module, shared).save("encoder_shared.pt");
  torch_delegate::lower<LinearBackend>(module, copies).save("encoder_copies.pt");
  torch_delegate::lower<LinearBackend>(module, own).save("encoder_own_copy.pt");
  // [lower]

  // Same results as the original, for both methods, after a save and load.
  const at::Tensor x = torch::randn({8, features});
  bool same = true;
  for (const char* file : {"encoder_shared.pt", "encoder_copies.pt", "encoder_own_copy.pt"}) {
    torch::jit::Module loaded = torch::jit::load(file);
    for (const char* method : {"forward", "encode"}) {
      const at::Tensor expected = torch::jit::Module(module).get_method(method)({x}).toTensor();
      same = same && loaded.get_method(method)({x}).toTensor().equal(expected);  // bitwise
    }
  }

  const double shared_file = file_mib("encoder_shared.pt"), copies_file = file_mib("encoder_copies.pt");
  const double shared_rss = load_cost_in_child(argv[0], "encoder_shared.pt");
  const double copies_rss = load_cost_in_child(argv[0], "encoder_copies.pt");
  const double own_rss = load_cost_in_child(argv[0], "encoder_own_copy.pt");
  auto copies_of = [](double size) { return static_cast<long>(std::lround(size / one_copy)); };

  std::cout << "--- output: prints ---\n";
  std::cout << "outputs equal to the original's: " << (same ? "yes" : "NO") << "\n"
            << "saved file, named data:        " << copies_of(shared_file) << " copy of the weight\n"
            << "saved file, a copy per method: " << copies_of(copies_file) << " copies\n"
            << "loading it adds, named data:        " << copies_of(shared_rss) << " copy\n"
            << "loading it adds, a copy per method: " << copies_of(copies_rss) << " copies\n"
            << "loading it adds, own copy + release: " << copies_of(own_rss) << " copy\n";
  std::cout << "--- end output ---\n";
  std::printf("one copy of the weight: %.2f MiB\n", one_copy);
  std::printf("files: named data %.3f MiB (%.3f x one copy), a copy per method %.3f MiB (%.3f x)\n", shared_file,
              shared_file / one_copy, copies_file, copies_file / one_copy);
  std::printf("resident memory added by torch::jit::load: named data %.2f MiB, a copy per method %.2f MiB, "
              "own copy + release %.2f MiB\n",
              shared_rss, copies_rss, own_rss);

  const bool memory_ok = !memory_measurable || (shared_rss > 0 && shared_rss <= 1.5 * one_copy &&
                                                 copies_rss >= 1.8 * one_copy && own_rss > 0 && own_rss <= 1.5 * one_copy);
  if (!memory_measurable) std::cout << "resident memory not checked: built with AddressSanitizer\n";
  const bool ok = same && shared_file <= 1.1 * one_copy && copies_file >= 1.9 * one_copy && memory_ok;
  if (!ok) std::cout << "FAILED: a figure is outside its bound (file <= 1.1 x one copy, load <= 1.5 x one copy)\n";
  return ok ? 0 : 1;
}
