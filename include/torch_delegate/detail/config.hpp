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
#define TORCH_DELEGATE_INTERNAL
#elif defined(TORCH_DELEGATE_BUILDING_LIBRARY)
// src/torch_delegate.cpp: the definitions, compiled once, exported.
#define TORCH_DELEGATE_HEADER_ONLY 0
#define TORCH_DELEGATE_DECL __attribute__((visibility("default")))
#define TORCH_DELEGATE_INTERNAL __attribute__((visibility("hidden")))
#else
#define TORCH_DELEGATE_HEADER_ONLY 1
#define TORCH_DELEGATE_DECL inline
#define TORCH_DELEGATE_INTERNAL inline
#endif

// TORCH_DELEGATE_DECL: a non-template function that code in users' translation units calls
// (through a template or an inline function of a public header): exported by the library.
// TORCH_DELEGATE_INTERNAL: one that only the library's own code calls: hidden in the library (the
// library is built with -fvisibility=hidden), so that a call from outside fails to link instead of
// growing an undocumented ABI. tests/sources/check_exports.py checks the split.

// A variable that code in users' translation units and the compiled library both read or write
// (a thread-local the library sets and a backend reads): one object per process. The library
// hides every symbol it does not declare with TORCH_DELEGATE_DECL (-fvisibility=hidden), which
// would otherwise give it a copy of its own.
#define TORCH_DELEGATE_SHARED __attribute__((visibility("default")))
