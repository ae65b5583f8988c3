// Definitions of runtime_switches.hpp: the process's table of declared switches.
#pragma once

#include <torch_delegate/runtime_switches.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>

namespace torch_delegate {
namespace detail {

/// torch-delegate's own switches, and the engines' caps that change the kernels LibTorch and the
/// backends run (read by those engines, declared here so that the timing cache keys on them).
inline constexpr std::array<runtime_switch, 6> framework_switches{{
    {"TORCH_DELEGATE_TIMING_CACHE", "1", "0: measured lowering neither reads nor writes the timing cache", false},
    {"TORCH_DELEGATE_CACHE_DIR", "$XDG_CACHE_HOME/torch_delegate, else ~/.cache/torch_delegate",
     "the timing cache's directory", false},
    {"ONEDNN_MAX_CPU_ISA", "the CPU's", "oneDNN's (LibTorch's and the onednn backend's) highest ISA: SSE41, AVX2, AVX512_CORE, ...", true},
    {"DNNL_MAX_CPU_ISA", "the CPU's", "the same, by oneDNN's older name", true},
    {"ATEN_CPU_CAPABILITY", "the CPU's", "ATen's kernels' highest ISA: default, avx2, avx512", true},
    {"OPENBLAS_CORETYPE", "the CPU's", "the kernels OpenBLAS (LibTorch's Linears, where it is the BLAS) runs", true},
}};

struct switch_table {
  std::mutex mutex;
  std::map<std::string, std::vector<runtime_switch>, std::less<>> by_owner;
};

TORCH_DELEGATE_INTERNAL switch_table& switches_of_process() {
  static switch_table table;
  return table;
}

TORCH_DELEGATE_INTERNAL std::optional<runtime_switch> declared_switch(std::string_view name, std::string* owner) {
  for (const runtime_switch& each : framework_switches)
    if (each.name == name) {
      if (owner) *owner = "torch-delegate";
      return each;
    }
  switch_table& table = switches_of_process();
  std::lock_guard lock(table.mutex);
  for (const auto& [who, switches] : table.by_owner)
    for (const runtime_switch& each : switches)
      if (each.name == name) {
        if (owner) *owner = who;
        return each;
      }
  return std::nullopt;
}

}  // namespace detail

TORCH_DELEGATE_DECL void declare_runtime_switches(std::string_view owner, std::span<const runtime_switch> switches) {
  for (const runtime_switch& each : switches) {
    TORCH_CHECK(!each.name.empty(), "torch_delegate::declare_runtime_switches: '", owner, "' declares a switch without a name");
    std::string declared_by;
    if (detail::declared_switch(each.name, &declared_by))
      TORCH_CHECK(declared_by == owner, "torch_delegate::declare_runtime_switches: '", owner, "' declares ", each.name,
                  ", which '", declared_by, "' declares already: give each switch one owner");
  }
  detail::switch_table& table = detail::switches_of_process();
  std::lock_guard lock(table.mutex);
  table.by_owner[std::string(owner)] = std::vector<runtime_switch>(switches.begin(), switches.end());
}

TORCH_DELEGATE_DECL std::vector<known_switch> runtime_switches() {
  const auto value_of = [](std::string_view name) -> std::optional<std::string> {
    const char* given = std::getenv(std::string(name).c_str());
    return given ? std::optional<std::string>(given) : std::nullopt;
  };
  std::vector<known_switch> known;
  for (const runtime_switch& each : detail::framework_switches) known.push_back({"torch-delegate", each, value_of(each.name)});
  detail::switch_table& table = detail::switches_of_process();
  std::lock_guard lock(table.mutex);
  for (const auto& [owner, switches] : table.by_owner) {
    std::vector<runtime_switch> sorted = switches;
    std::sort(sorted.begin(), sorted.end(), [](const runtime_switch& a, const runtime_switch& b) { return a.name < b.name; });
    for (const runtime_switch& each : sorted) known.push_back({owner, each, value_of(each.name)});
  }
  return known;
}

TORCH_DELEGATE_DECL std::string runtime_switch_value(std::string_view name) {
  const std::optional<runtime_switch> declared = detail::declared_switch(name, nullptr);
  TORCH_CHECK(declared, "torch_delegate: the runtime switch ", name,
              " is read but declared by no table: declare it with torch_delegate::declare_runtime_switches "
              "(docs/runtime-switches.md)");
  const char* given = std::getenv(std::string(name).c_str());
  return given ? std::string(given) : std::string(declared->default_value);
}

TORCH_DELEGATE_DECL bool runtime_switch_off(std::string_view name) { return runtime_switch_value(name) == "0"; }

}  // namespace torch_delegate
