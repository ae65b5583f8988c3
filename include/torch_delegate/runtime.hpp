// What a runtime-only build includes (a binary that loads and runs modules lowered elsewhere):
// registration of a backend's runtime, lowered_module<B> and its typed calls, load, and
// keep_freed_memory.
// See the header map in README.md for where each part lives.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/debug.hpp>
#include <torch_delegate/load.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/options.hpp>
#include <torch_delegate/process_memory.hpp>
#include <torch_delegate/runtime_registration.hpp>
