"""A runtime-only translation unit (one that includes <torch_delegate/runtime.hpp>) includes what a
target binary needs and nothing more: no header of the host half (preprocess, lowering, coverage,
partial lowering, reports), no JIT pass, no profiler, and no TorchScript frontend header beyond
those that loading a module takes anyway (LibTorch's api/module.h and serialization/import.h). Checked in both modes (header-only and
separately compiled) from the compiler's dependency list (-M: preprocessing only).

Usage: check_runtime_includes.py <source root> <c++ compiler> [compiler args...]
"""
import pathlib
import re
import subprocess
import sys
import tempfile

root = pathlib.Path(sys.argv[1])
compiler = sys.argv[2:]
flags = ["-std=c++20", f"-I{root / 'include'}", "-isystem", "/usr/include/torch/csrc/api/include"]
HOST_HEADERS = re.compile(r"torch_delegate/(preprocess|lower|coverage|partition|registration|profiling|report|report_format|"
                          r"detail/backend_lowering|detail/lowering_plan|detail/canonical_graph|detail/regions|detail/locations|detail/codegen)\.(hpp|ipp)$|"
                          r"torch_delegate/impl/(preprocess|lower|coverage|partition|registration|profiling|report|"
                          r"report_format|backend_lowering|lowering_plan|canonical_graph|regions|locations|codegen)\.ipp$")
FORBIDDEN = re.compile(r"torch/csrc/jit/passes/|torch/csrc/profiler/|torch/csrc/autograd/profiler")


def closure(source, extra):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp") as tu:
        tu.write(source)
        tu.flush()
        out = subprocess.run(compiler + flags + extra + ["-M", tu.name], check=True, capture_output=True, text=True).stdout
    return {path for path in out.replace("\\\n", " ").split()[1:]}


loading = "#include <torch/csrc/jit/api/module.h>\n#include <torch/csrc/jit/serialization/import.h>\n"
allowed_frontend = {p for p in closure(loading, []) if "jit/frontend/" in p}
problems = []
for mode, extra in (("header-only", []), ("separately compiled", ["-DTORCH_DELEGATE_SEPARATE_COMPILATION"])):
    headers = closure("#include <torch_delegate/runtime.hpp>\n", extra)
    for path in sorted(headers):
        if HOST_HEADERS.search(path):
            problems.append(f"{mode}: runtime.hpp includes the host header {path}")
        elif FORBIDDEN.search(path):
            problems.append(f"{mode}: runtime.hpp includes {path}")
        elif "jit/frontend/" in path and path not in allowed_frontend:
            problems.append(f"{mode}: runtime.hpp includes the frontend header {path}")
    ours = sorted(p for p in headers if "torch_delegate/" in p)
    print(f"{mode}: {len(headers)} headers, {len(ours)} of torch-delegate")

for problem in problems:
    print(problem)
sys.exit(1 if problems else 0)
