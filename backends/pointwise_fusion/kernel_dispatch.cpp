// Picks the kernels' build for the running CPU (kernels.cpp is compiled once per ISA level).
#include "kernels.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

namespace pointwise {

namespace isa_baseline { extern const kernel_set kernels; }
namespace isa_avx2 { extern const kernel_set kernels; }
namespace isa_avx512 { extern const kernel_set kernels; }

std::string_view op_name(op code) {
  static constexpr std::array<std::string_view, op_count> names{
      "neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "cube",
      "pow", "gelu_erf", "gelu_tanh", "silu", "add_imm", "mul_imm", "copy", "add", "sub", "mul", "div", "add_scaled", "minimum",
      "maximum", "lt", "le", "gt", "ge", "eq", "ne", "where"};
  const auto index = static_cast<std::size_t>(code);
  return index < names.size() ? names[index] : std::string_view("?");
}

namespace {
bool cpu_runs(std::string_view isa) {
  __builtin_cpu_init();
  if (isa == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == "baseline";
}

const kernel_set* build_named(std::string_view isa) {
  if (isa == "avx512") return &isa_avx512::kernels;
  if (isa == "avx2") return &isa_avx2::kernels;
  if (isa == "baseline") return &isa_baseline::kernels;
  return nullptr;
}
}  // namespace

const kernel_set* kernels_named(std::string_view isa) { return cpu_runs(isa) ? build_named(isa) : nullptr; }

namespace {
const kernel_set* initial_choice() {
  std::string_view cap = "avx512";
  if (const char* requested = std::getenv("POINTWISE_FUSION_ISA")) cap = requested;
  constexpr std::array<std::string_view, 3> levels{"avx512", "avx2", "baseline"};
  bool reached = false;
  for (std::string_view level : levels) {
    reached = reached || level == cap;
    if (reached && cpu_runs(level)) return build_named(level);
  }
  return &isa_baseline::kernels;  // an unknown cap: the baseline runs everywhere
}
std::atomic<const kernel_set*> chosen{nullptr};
}  // namespace

const kernel_set& selected_kernels() {
  const kernel_set* current = chosen.load(std::memory_order_acquire);
  if (!current) {
    const kernel_set* expected = nullptr;
    current = initial_choice();
    if (!chosen.compare_exchange_strong(expected, current)) current = expected;
  }
  return *current;
}

bool select_kernels(std::string_view isa) {
  const kernel_set* build = kernels_named(isa);
  if (build) chosen.store(build, std::memory_order_release);
  return build != nullptr;
}

}  // namespace pointwise
