// Build mode. Header-only is the default: every function is defined in the headers.
//
// Define TORCH_DELEGATE_SEPARATE_COMPILATION (Meson: the `torch_delegate_compiled` dependency)
// to take the non-template machinery (registration with LibTorch, compile, the payload format,
// preprocess, lowering, codegen, loading) from the compiled library libtorch_delegate.so
// instead: a backend's translation unit then holds only its own templates. Use one mode for a
// whole program, as with Asio's ASIO_SEPARATE_COMPILATION.
#pragma once

#if defined(TORCH_DELEGATE_SEPARATE_COMPILATION) && !defined(TORCH_DELEGATE_BUILDING_LIBRARY)
// Declarations only; the definitions (include/torch_delegate/impl/*.ipp) are in the library.
#define TORCH_DELEGATE_HEADER_ONLY 0
#define TORCH_DELEGATE_DECL
#elif defined(TORCH_DELEGATE_BUILDING_LIBRARY)
// src/torch_delegate.cpp: the definitions, compiled once, exported.
#define TORCH_DELEGATE_HEADER_ONLY 0
#define TORCH_DELEGATE_DECL __attribute__((visibility("default")))
#else
#define TORCH_DELEGATE_HEADER_ONLY 1
#define TORCH_DELEGATE_DECL inline
#endif
