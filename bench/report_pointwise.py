#!/usr/bin/python3
"""Turns bench_pointwise's JSON into the "Pointwise fusion" table of docs/performance.md and a plot.

Usage: bench/report_pointwise.py <results dir holding pointwise.json> <docs/performance.md> <picture.png>
"""
import json
import pathlib
import platform
import re
import statistics
import subprocess
import sys

results, doc_path, picture_path = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
bench = json.loads((results / "pointwise.json").read_text())
context = bench["context"]

def iterations(bench_json):
    """Every repetition of every case, by case name (bench/run writes them all; it displays only the
    aggregates). "/real_time" (UseRealTime) and "/repeats:9" (a case's own repetition count) are not
    part of a name here."""
    runs = {}
    for run in bench_json["benchmarks"]:
        if run.get("run_type") == "iteration":
            runs.setdefault(re.sub(r"/repeats:\d+", "", run["run_name"]).removesuffix("/real_time"), []).append(run)
    return runs


repetitions = iterations(bench)


def runs_of(name):
    if name not in repetitions:
        raise SystemExit(f"report_pointwise: no runs of {name} in {results / 'pointwise.json'}")
    return repetitions[name]


def counter(name, field):
    """The median over repetitions of one counter of a case (times: ns per call)."""
    return statistics.median(run[field] for run in runs_of(name))


def case(expression, variant, n, threads=2):
    """ns per call of one variant of an expression."""
    return counter(f"pointwise/{expression}/n:{n}/threads:{threads}", f"{variant}_ns")


def ratio(name, numerator, denominator):
    """The median over repetitions of numerator / denominator, each repetition's pair timed side by side
    (bench_pointwise.cpp: this VM's speed drifts, and a ratio of medians would mix moments)."""
    return statistics.median(run[f"{numerator}_ns"] / run[f"{denominator}_ns"] for run in runs_of(name))


def speedup(expression, n, threads=2):
    return ratio(f"pointwise/{expression}/n:{n}/threads:{threads}", "eager", "fused")


def has(expression, variant, n=1024, threads=2):
    return f"{variant}_ns" in runs_of(f"pointwise/{expression}/n:{n}/threads:{threads}")[0]


def duration(ns):
    if ns < 1e4:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1e6:
        return f"{ns / 1e3:.0f} µs"
    return f"{ns / 1e6:.2f} ms" if ns < 1e8 else f"{ns / 1e6:.0f} ms"


def check(ok):
    return "met" if ok else "**missed**"


expressions = {
    "gelu9": "GELU as 9 ops: `0.5 * x * (1.0 + tanh(sqrt(2/π) * (x + 0.044715 * x³)))`",
    "add_scale": "`(x + h) * 2.0 - 1.0`",
    "mul_add_relu": "`relu(x * w + b)`",
    "sigmoid_gate": "`x * sigmoid(x) * h + 1.0`",
    "silu": "SiLU: `x * sigmoid(x)`",
}
aten_op = {"gelu9": "`at::gelu(x, \"tanh\")`", "silu": "`at::silu`"}
sizes = [1, 1024, 65536, 1 << 20, 1 << 24]
size_names = {1: "1", 1024: "1K", 65536: "64K", 1 << 20: "1M", 1 << 24: "16M"}
# The goals of issue 13 (2 threads): speed-up of the fused call over eager ATen.
goals = {("gelu9", 1024): 3.0, ("gelu9", 1 << 20): 1.7, ("gelu9", 1 << 24): 5.0, ("add_scale", 1 << 20): 2.5}

# 1. every expression and size, 2 threads
header = ("| expression | elements | eager (ATen calls) | fused | ATen's fused op | scripted | "
          "speed-up (eager / fused) | goal | |\n|---|---|---|---|---|---|---|---|---|\n")
rows, speedups = [], {}
for expression, label in expressions.items():
    for n in sizes:
        eager, fused = case(expression, "eager", n), case(expression, "fused", n)
        speedups[expression, n] = speed = speedup(expression, n)
        goal = goals.get((expression, n))
        if n == 1 and expression in aten_op:
            label += f" (ATen's op: {aten_op[expression]})"
        rows.append([label if n == 1 else "", size_names[n], duration(eager), duration(fused),
                     duration(case(expression, "aten", n)) if has(expression, "aten") else "",
                     duration(case(expression, "scripted", n)), f"{speed:.2f} ×",
                     f"≥ {goal} ×" if goal else "", check(speed >= goal) if goal else ""])

# The 1-element call: a fused region through the interpreter against one ATen op.
for expression in ("gelu9", "add_scale"):
    fused, single_add = case(expression, "fused", 1), case(expression, "single_add", 1)
    extra = statistics.median(run["fused_ns"] - run["single_add_ns"] for run in runs_of(f"pointwise/{expression}/n:1/threads:2"))
    rows.append([f"1-element fused call ({expression}) − one `at::add` on 1 element", "1", duration(single_add),
                 duration(fused), "", "", f"+{extra / 1e3:.2f} µs", "≤ +1 µs", check(extra <= 1e3)])

def blas_name(library):
    """A readable name for the BLAS a run loaded (bench_pointwise's blas_library context)."""
    if "openblas-openmp" in library:
        return "OpenBLAS, OpenMP build"
    if "openblas" in library:
        return "OpenBLAS"
    if "/blas/" in library:
        return "reference BLAS, Debian's default"
    return library


# The feed-forward block, end to end.
main_blas = blas_name(context.get("blas_library", "?"))
ffn_sizes = sorted({name.split("/")[2] for name in repetitions if name.startswith("pointwise/ffn/")},
                   key=lambda size: -int(size.split("x")[1]))
for size in ffn_sizes:
    tokens, model, hidden = size.split("x")
    name = f"pointwise/ffn/{size}/threads:2"
    eager, scripted, fused, linears = (counter(name, f"{variant}_ns") for variant in ("eager", "scripted", "fused", "linears"))
    speed = ratio(name, "scripted", "fused")
    rows.append([f"feed-forward block `(x + linear2(gelu9(linear1(x)))) * 0.5`, {tokens} tokens × d_model {model} × "
                 f"hidden {hidden}, {main_blas}: speed-up over the scripted original (the two Linears alone: {duration(linears)}, "
                 f"{100 * linears / scripted:.0f} % of the scripted block)", size,
                 duration(eager), duration(fused), "", duration(scripted), f"{speed:.2f} × (over scripted)",
                 "≥ 1.3 ×", check(speed >= 1.3)])

# The block with OpenBLAS (bench/run: bench_pointwise's ffn cases again, OpenBLAS first on the library path).
openblas_path = results / "pointwise_ffn_openblas.json"
if openblas_path.exists():
    openblas_bench = json.loads(openblas_path.read_text())
    openblas_runs = iterations(openblas_bench)
    openblas = blas_name(openblas_bench["context"].get("blas_library", "?"))
    for name, runs in sorted(openblas_runs.items(), key=lambda item: -int(item[0].split("/")[2].split("x")[1])):
        median = lambda field: statistics.median(run[field] for run in runs)
        size = name.split("/")[2]
        tokens, model, hidden = size.split("x")
        speed = statistics.median(run["scripted_ns"] / run["fused_ns"] for run in runs)
        rows.append([f"the same block, {tokens} tokens × d_model {model} × hidden {hidden}, {openblas} (the two Linears "
                     f"alone: {duration(median('linears_ns'))}, {100 * median('linears_ns') / median('scripted_ns'):.0f} % "
                     "of the scripted block)", size, duration(median("eager_ns")), duration(median("fused_ns")), "",
                     duration(median("scripted_ns")), f"{speed:.2f} × (over scripted)", "≥ 1.3 ×", check(speed >= 1.3)])

# The same with glibc's default memory behaviour (bench_pointwise --default-memory), if measured.
default_memory_path = results / "pointwise_default_memory.json"
if default_memory_path.exists():
    default_runs = iterations(json.loads(default_memory_path.read_text()))
    for name, runs in sorted(default_runs.items(), key=lambda item: item[0]):
        median = lambda field: statistics.median(run[field] for run in runs)
        if name.startswith("pointwise/ffn/"):
            size = name.split("/")[2]
            tokens, model, hidden = size.split("x")
            speed = statistics.median(run["scripted_ns"] / run["fused_ns"] for run in runs)
            rows.append([f"the same block, {tokens} × {model} × {hidden}, with glibc's default memory behaviour (what a "
                         "LibTorch process here does unless told otherwise)", size, duration(median("eager_ns")),
                         duration(median("fused_ns")), "", duration(median("scripted_ns")),
                         f"{speed:.2f} × (over scripted)", "≥ 1.3 ×", check(speed >= 1.3)])
        elif name.startswith("pointwise/gelu9/"):
            speed = statistics.median(run["eager_ns"] / run["fused_ns"] for run in runs)
            rows.append(["GELU as 9 ops, with glibc's default memory behaviour", "16M", duration(median("eager_ns")),
                         duration(median("fused_ns")), duration(median("aten_ns")) if "aten_ns" in runs[0] else "",
                         duration(median("scripted_ns")), f"{speed:.2f} ×", "≥ 5.0 ×", check(speed >= 5)])

# 2. the bandwidth ceiling and what the fused calls reach of it at 16M elements
triad = {threads: counter(f"pointwise/triad/n:67108864/threads:{threads}", "bytes_per_second") / 1e9 for threads in (1, 2)}
streams = {"gelu9": 2, "add_scale": 3, "mul_add_relu": 4, "sigmoid_gate": 3, "silu": 2}  # inputs + the output
reached = {e: streams[e] * 4 * (1 << 24) / case(e, "fused", 1 << 24) for e in expressions}  # bytes per ns = GB/s
page_us = statistics.median(run["real_time"] * {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}[run["time_unit"]] / run["pages"]
                            for run in runs_of("pointwise/first_touch/bytes:67108864"))
allocation = (f"Memory: this machine (a VM) charges {page_us:.1f} µs for each 4 KiB page a process touches for the "
              f"first time (a 64 MiB tensor: {64 * 256 * page_us / 1e3:.0f} ms), and glibc gives freed blocks of "
              "128 KiB and more back to the kernel, so every eager intermediate would pay that again. "
              "`bench_pointwise` keeps freed memory in the process (`mallopt`), as a caching allocator would: the "
              "figures are compute and memory traffic, and eager, which allocates a tensor per op, is favoured.")
bandwidth = (f"Memory bandwidth ceiling (STREAM triad `a[i] = b[i] + s * c[i]` over 64M floats, 3 × 4 bytes per "
             f"element): {triad[1]:.1f} GB/s on 1 thread, {triad[2]:.1f} GB/s on 2. The fused calls at 16M elements, "
             "counting each input and the output once: " +
             ", ".join(f"{e} {reached[e]:.1f} GB/s" for e in expressions) + ".")

# The floor of a one-pass fused add-scale: one at::add of the same tensors, timed beside it.
floor_name = f"pointwise/add_scale/n:{1 << 20}/threads:2"
if "single_add_ns" in runs_of(floor_name)[0]:
    bandwidth += (" One `at::add(x, h)` at 1M elements, timed beside `(x + h) * 2.0 - 1.0` (a single pass over the same "
                  f"three streams, the floor of any fused call): {duration(counter(floor_name, 'single_add_ns'))}; eager's "
                  f"chain takes {ratio(floor_name, 'eager', 'single_add'):.2f} × that, and the fused call "
                  f"{ratio(floor_name, 'fused', 'single_add'):.2f} ×.")

# 3. one thread, and the scripted baseline with TorchScript's fusers off
one_thread = "Speed-up (eager / fused) on 1 thread: " + "; ".join(
    f"{e} " + ", ".join(f"{size_names[n]} {speedup(e, n, 1):.2f}" for n in sizes) for e in expressions) + "."
fuser_off = [ratio(f"pointwise/gelu9/n:{n}/threads:2", "scripted_fuser_off", "scripted") for n in sizes]
scripted_note = (
    f"Scripted baseline: TorchScript's profiling executor is {context['profiling_executor']}, its tensor-expression "
    f"fuser enabled ({context['texpr_fuser_enabled']}) but not on the CPU (`canFuseOnCPU`: "
    f"{context['can_fuse_on_cpu']}); after warm-up the scripted GELU's optimised graph holds "
    f"{context['scripted_gelu9_fusion_groups']} fusion groups, so the scripted figures are the same ATen calls through "
    "the interpreter, no NNC fallback. With both fusers switched off (`setTensorExprFuserEnabled(false)`, "
    "`overrideCanFuseOnCPU(false)`) the scripted GELU takes "
    + ", ".join(f"{r:.2f}" for r in fuser_off) + " × the default's time (1 to 16M elements): slower, not faster, "
    "on small tensors, as the profiling executor then keeps its `prim::profile` nodes in the graph it runs. "
    f"Forcing the CPU fuser on instead {context['forced_cpu_fuser']} (Debian's LibTorch has no LLVM).")

table = header + "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"
compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
repetition_counts = sorted({run.get("repetitions", 1) for run in bench["benchmarks"]})
note = (f"\n{bandwidth}\n\n{allocation}\n\n{one_thread}\n\n{scripted_note}\n\n"
        f"Measured by `bench/run` (`bench_pointwise`) on {context['date'][:10]}: {context['num_cpus']} CPUs at "
        f"{context['mhz_per_cpu']} MHz, {platform.platform()}, {compiler}, LibTorch 1.13.1 (Debian), release build; "
        f"kernels: {context['kernel_isa']}; medians of {' or '.join(map(str, repetition_counts))} repetitions (the "
        "narrow feed-forward block: more, its times vary most), the variants of a case timed side by side and each "
        "speed-up the median of its repetitions' ratios; float32 inputs from `torch::randn`; "
        "2 intra-op threads (`at::set_num_threads`) unless said otherwise.\n")
print(table + note)

doc = doc_path.read_text()
begin, end = "<!-- pointwise table -->\n", "<!-- end pointwise table -->"
if begin not in doc or end not in doc:
    raise SystemExit(f"report_pointwise: {doc_path} has no '{begin.strip()}' ... '{end}' markers")
doc = doc[:doc.index(begin) + len(begin)] + table + note + doc[doc.index(end):]
doc_path.write_text(doc)

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

fig, ax = plt.subplots(figsize=(9.5, 4.2))
for expression in expressions:
    ax.plot(sizes, [speedups[expression, n] for n in sizes], marker="o", label=f"{expression} fused")
for expression in aten_op:
    ax.plot(sizes, [ratio(f"pointwise/{expression}/n:{n}/threads:2", "eager", "aten") for n in sizes], linestyle="dashed",
            marker=".", label=f"{expression}: ATen's own op")
for (expression, n), goal in goals.items():
    ax.plot([n], [goal], marker="_", markersize=18, markeredgewidth=2, color="black")
ax.axhline(1.0, color="#9aa5b1", linewidth=1)
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g} ×"))
ax.set_xticks(sizes, [size_names[n] for n in sizes])
ax.set_xlabel("float32 elements")
ax.set_ylabel("speed-up over eager ATen")
ax.set_title(f"2 threads, {context['kernel_isa']} kernels; black bars: goals; bandwidth ceiling (triad) "
             f"{triad[2]:.1f} GB/s", fontsize=10)
ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
fig.tight_layout()
fig.savefig(picture_path, dpi=110)
