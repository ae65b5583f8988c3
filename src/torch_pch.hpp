// The precompiled header of our own unoptimised targets (src/meson.build): LibTorch's torch/script.h,
// which is most of every test's and example's compile time. Nothing here is part of the library;
// a user's build never sees it.

#include <torch/script.h>
