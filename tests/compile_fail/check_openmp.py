#!/usr/bin/env python3
"""torch_delegate::parallel_for in a translation unit compiled without OpenMP is a compile error
that says so (LibTorch's at::parallel_for would silently run on one thread there); its twin, the
same unit compiled with -fopenmp, compiles.

Usage: check_openmp.py <include dir> <compiler command...>"""
import subprocess
import sys
import tempfile

SOURCE = """#include <torch_delegate/profiling.hpp>
void add_in_parallel(float* out, const float* a, const float* b, long n) {
  torch_delegate::parallel_for(0, n, 1024, [&](long begin, long end) {
    for (long i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}
"""
EXPECT = ("torch-delegate: parallel_for: this translation unit is compiled without OpenMP, so LibTorch's "
          "at::parallel_for (an inline template built on OpenMP) would run every range on the calling thread. "
          "Compile it with -fopenmp")

include, compiler = sys.argv[1], sys.argv[2:]
with tempfile.NamedTemporaryFile("w", suffix=".cpp") as source:
    source.write(SOURCE)
    source.flush()
    base = compiler + ["-std=c++20", "-fsyntax-only", "-I" + include, "-isystem", "/usr/include/torch/csrc/api/include",
                       source.name]
    without = subprocess.run(base, capture_output=True, text=True)
    if without.returncode == 0 or EXPECT not in without.stderr:
        sys.exit(f"without -fopenmp: expected a compile error containing\n  {EXPECT}\ngot (exit {without.returncode}):\n"
                 + without.stderr[-3000:])
    with_openmp = subprocess.run(base + ["-fopenmp"], capture_output=True, text=True)
    if with_openmp.returncode != 0:
        sys.exit("with -fopenmp: the twin does not compile:\n" + with_openmp.stderr[-3000:])
print("parallel_for: an error without OpenMP, compiles with -fopenmp")
