// torch-delegate: write a LibTorch delegate backend as one plain struct. Include this header.
#pragma once

#include <torch_delegate/backend.hpp>
#include <torch_delegate/convert.hpp>
#include <torch_delegate/coverage.hpp>
#include <torch_delegate/debug.hpp>
#include <torch_delegate/load.hpp>
#include <torch_delegate/lower.hpp>
#include <torch_delegate/input_spec.hpp>
#include <torch_delegate/lowered_module.hpp>
#include <torch_delegate/named_data.hpp>
#include <torch_delegate/node_queries.hpp>
#include <torch_delegate/options.hpp>
#include <torch_delegate/preprocess.hpp>
#include <torch_delegate/registration.hpp>
#include <torch_delegate/runtime.hpp>
#include <torch_delegate/runtime_switches.hpp>
#include <torch_delegate/version.hpp>
