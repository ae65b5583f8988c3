// Precompiled for the test TUs: LibTorch's headers are most of their compile time.
#include <torch/script.h>
#include <torch_delegate/torch_delegate.hpp>
#include <doctest/doctest.h>
