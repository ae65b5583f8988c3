// Runtime switches: the environment variables a backend (or torch-delegate itself) reads, each
// declared once in a table with its default and what it changes. The tables are what the docs'
// switch pages are generated from (python -m torch_delegate switches) and what the timing cache's
// machine key is made of: a timing taken under one set of kernels is never replayed under another.
#pragma once

#include <torch_delegate/detail/config.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace torch_delegate {

/// One environment variable: its name, what it means when unset, and what setting it changes.
/// `changes_kernels`: whether it changes what runs (and so how fast): such a switch's value is
/// part of the timing cache's machine key. Give the table static storage (a constexpr array).
struct runtime_switch {
  std::string_view name;
  std::string_view default_value;
  std::string_view effect;
  bool changes_kernels = true;
};

/// A switch as known to this process: the table that declared it (a backend's name, or
/// "torch-delegate"), the switch, and its value in the environment (nullopt when unset).
struct known_switch {
  std::string owner;
  runtime_switch declared;
  std::optional<std::string> value;
};

/// Declares `owner`'s switches (a backend calls it where it registers, once per process; a second
/// call for the same owner replaces the first). A name declared by two owners is an error.
TORCH_DELEGATE_DECL void declare_runtime_switches(std::string_view owner, std::span<const runtime_switch> switches);

/// Every switch declared in this process, torch-delegate's own first, then by owner and name.
TORCH_DELEGATE_DECL std::vector<known_switch> runtime_switches();

/// The value of a declared switch: the environment's, else its default. Throws c10::Error naming
/// the switch when no table declares it (a switch read must be a switch documented).
TORCH_DELEGATE_DECL std::string runtime_switch_value(std::string_view name);

/// Whether a declared switch is set to "0" (the backends' "turn this off").
TORCH_DELEGATE_DECL bool runtime_switch_off(std::string_view name);

}  // namespace torch_delegate

#if TORCH_DELEGATE_HEADER_ONLY
#include <torch_delegate/impl/runtime_switches.ipp>
#endif
