// The baseline for compile-cost: a translation unit that only includes LibTorch's script header.
#include <torch/script.h>

int baseline() { return 0; }
