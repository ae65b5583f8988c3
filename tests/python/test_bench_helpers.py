"""bench/models.py's helpers that every bench figure rests on: which BLAS this process loaded
(read from the process, so that a table never names a BLAS it did not run on), the machine line
(the ISA, oneDNN's cap, AVX2 code under bench/as_avx2.py), the seeded
order of each round's variants, and the README's measured recipe being the one the benches
measure and the example runs."""
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)

import models  # noqa: E402
import torch  # noqa: E402,F401  (loads LibTorch, and with it the BLAS)


def expected(path):
    real = os.path.realpath(path)
    return "openblas" if "openblas" in real else "reference" if "/blas/" in real else real


SYSTEM_BLAS = "/usr/lib/x86_64-linux-gnu/libblas.so.3"
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"

# This process: the library the system's libblas.so.3 resolves to (run as the test command
# runs it, with no other BLAS first on the library path).
if os.path.exists(SYSTEM_BLAS) and not os.environ.get("LD_LIBRARY_PATH"):
    assert models.blas_in_use() == expected(SYSTEM_BLAS), (models.blas_in_use(), os.path.realpath(SYSTEM_BLAS))

# A process with OpenBLAS first on the library path (as the benches re-run themselves) names it,
# whatever TD_BENCH_BLAS says.
if os.path.isdir(OPENBLAS):
    env = dict(os.environ, LD_LIBRARY_PATH=OPENBLAS, TD_BENCH_BLAS="reference")
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {BENCH!r}); import torch, models; "
                          "print(models.blas_in_use())"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "openblas", out

# The machine line every table prints: the CPU's widest ISA, oneDNN's cap, and bench/as_avx2.py's
# AVX2 code when it runs the process (read from the environment each call).
saved = {key: os.environ.pop(key, None) for key in ("TD_BENCH_AS_AVX2", "ONEDNN_MAX_CPU_ISA")}
plain = models.machine_line()
assert f"{os.cpu_count()} cores, " in plain and ("AVX-512" in plain or "AVX2" in plain or "no AVX2" in plain), plain
assert "as_avx2" not in plain and "capped" not in plain, plain
os.environ["TD_BENCH_AS_AVX2"], os.environ["ONEDNN_MAX_CPU_ISA"] = "1", "AVX2"
masked = models.machine_line()
assert "AVX2 code on an " in masked and "(bench/as_avx2.py: CPUID without AVX-512, every engine)" in masked, masked
assert masked.endswith("(oneDNN capped: ONEDNN_MAX_CPU_ISA=AVX2)"), masked
for key, value in saved.items():
    os.environ.pop(key, None)
    if value is not None:
        os.environ[key] = value

# Each round's order: a permutation of the names, the same for the same round, not one rotation.
names = ["recipe", "onednn", "xnnpack", "oif", "ort"]
orders = [models.round_order(names, r) for r in range(12)]
assert all(sorted(order) == sorted(names) for order in orders)
assert orders == [models.round_order(names, r) for r in range(12)]
neighbours = {order[order.index("xnnpack") + 1] for order in orders if order.index("xnnpack") + 1 < len(order)}
assert len(neighbours) > 1, "the variant after xnnpack changes from round to round"

# The busy process of the loaded timings ends with the bench that started it, even one stopped
# without its cleanup (os._exit here; a signal, a crash): left behind, it took a core for 40 minutes.
import time  # noqa: E402

starter = subprocess.run([sys.executable, "-c", f"import os, sys; sys.path.insert(0, {BENCH!r}); import models; "
                          "print(models.busy_process().pid, flush=True); os._exit(0)"], capture_output=True, text=True, check=True)
spinner = int(starter.stdout.strip())


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended
    except OSError:
        return False


deadline = time.monotonic() + 10
while running(spinner) and time.monotonic() < deadline:
    time.sleep(0.05)
assert not running(spinner), f"the busy process {spinner} outlived the bench that started it"

# The documented recipe is the one the benches measure and the example runs: one list everywhere
# (its order decides where two orders do not separate; docs/measured-partitioning.md).
import re  # noqa: E402

ROOT = os.path.join(BENCH, "..")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


readme = re.search(r"`torch_delegate.lower\(m, (\[[^\]]*\]), partial=True", read("docs/measured-partitioning.md"))
assert readme, "docs/measured-partitioning.md: the measured priority list was not found"
recipe = readme.group(1)
assert recipe == '["onednn", "xnnpack", "pointwise_fusion"]', recipe
for path, pattern in (("bench/measured_lowering.py", r"^RECIPE = (\[.*\])$"), ("bench/ort_models.py", r"^RECIPE = (\[.*\])$"),
                      ("bench/partition_models.py", r"^BACKENDS = (\[.*\])$")):
    found = re.search(pattern, read(path), re.M)
    assert found and found.group(1) == recipe, (path, found and found.group(1), recipe)
example = read("examples/python/onednn_resnet.py")
assert example.count(recipe) == 2 and "xnnpack\", \"onednn" not in example, "examples/python/onednn_resnet.py"

print("bench helpers: ok,", models.blas_in_use())
