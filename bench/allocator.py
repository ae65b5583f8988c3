"""What the process's memory allocator costs a lowered model, as a user's process runs one
(issue 39).

Each variant runs in a fresh process of its own, as a program that loads one model does: the
model is built (bench/models.py), scripted, lowered to ["onednn"] (partial, example inputs), run
a few times, then timed; the scripted model is timed the same way in processes of its own, as
the anchor. Variants: glibc's malloc as it is; glibc told to keep what is freed by
torch_delegate.keep_freed_memory() (called first in the process: its heap trimmed, and large
blocks given mappings of their own, only above 1 GiB); tcmalloc and jemalloc preloaded (LD_PRELOAD) where installed (Debian: libtcmalloc-minimal4, libjemalloc2).
The processes run one at a time, in rounds, the variants' order drawn anew each round. Per
process: the median of its calls (ms) and its minor page faults a call (getrusage), the memory
the kernel had to hand it again. Reported: medians over the processes, and each variant's time
against glibc as it is.

Why: a partially lowered model's TorchScript parts allocate through ATen, which takes large
blocks from malloc each call; glibc gives freed memory back to the kernel (its heap trimmed,
large blocks unmapped), and each call then faults it in again, page by page.

Usage: PYTHONPATH=<build>/python bench/allocator.py [doc.md] [--quick] [--models a,b] [--rounds N]
(the table goes between the doc's `<!-- allocator table -->` and `<!-- end allocator table -->`)
"""
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
LIBS = "/usr/lib/x86_64-linux-gnu"
CALLS = 30


def child(name, what):
    """In the child: build, lower, warm up, time; prints one JSON line."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models
    import torch_delegate as td
    torch.set_num_threads(int(os.environ.get("TD_BENCH_THREADS", "2")))
    if os.environ.get("TD_BENCH_KEEP_FREED") == "1" and not td.keep_freed_memory():
        sys.exit("bench/allocator.py: keep_freed_memory() changed nothing: the C library is not glibc")
    model, x = models.model_and_input(name)
    scripted = torch.jit.script(model)
    run = scripted
    if what == "lowered":
        run = td.lower(scripted, ["onednn"], partial=True, load_backends=True, example_inputs=(x,))
    with torch.no_grad():
        for _ in range(5):
            run(x)
        times = []
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(CALLS):
            start = time.perf_counter()
            run(x)
            times.append((time.perf_counter() - start) * 1e3)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(json.dumps({"ms": statistics.median(times), "faults": faults / CALLS}))


def variants():
    """(label, extra environment, note); the preloaded ones where the library is installed."""
    found = [("glibc", {}, ""), ("keep_freed_memory", {"TD_BENCH_KEEP_FREED": "1"}, "")]
    for label, lib, package in (("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
                                ("jemalloc", "libjemalloc.so.2", "libjemalloc2")):
        path = os.path.join(LIBS, lib)
        found.append((label, {"LD_PRELOAD": path}, "") if os.path.exists(path) else
                     (label, None, f"not installed (Debian: {package})"))
    return found


def isa():
    flags = open("/proc/cpuinfo").read()
    name = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "?")
    level = "AVX-512" if " avx512f" in flags else "AVX2 without AVX-512" if " avx2" in flags else "no AVX2"
    return f"{name}, {os.cpu_count()} cores, {level}"


def main():
    options = sys.argv[1:]
    if options[:1] == ["--child"]:
        child(options[1], options[2])
        return
    quick = "--quick" in options
    valued = ("--models", "--rounds")
    args = [a for i, a in enumerate(options) if not a.startswith("--") and (i == 0 or options[i - 1] not in valued)]
    doc = args[0] if args else None

    def option(flag, default):
        return options[options.index(flag) + 1] if flag in options else default

    names = option("--models", "swin_v2_t,resnet50" if quick else "swin_v2_t,swin_t,vit_b_16,resnet50").split(",")
    rounds = int(option("--rounds", "1" if quick else "3"))
    threads = os.environ.get("TD_BENCH_THREADS", "2")
    base = dict(os.environ, TD_BENCH_THREADS=threads)
    if os.path.isdir(OPENBLAS):  # LibTorch's Linears on OpenBLAS, as the other benches
        base["LD_LIBRARY_PATH"] = OPENBLAS + (":" + base["LD_LIBRARY_PATH"] if base.get("LD_LIBRARY_PATH") else "")
    usable = [(label, env) for label, env, _ in variants() if env is not None]
    results = {}  # (model, what, label) -> [(ms, faults)]
    for name in names:
        for r in range(rounds):
            runs = [(what, label, env) for what in ("lowered", "scripted") for label, env in usable]
            random.shuffle(runs)
            for what, label, env in runs:
                done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, what],
                                      env=dict(base, **env), capture_output=True, text=True)
                line = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
                if not line:
                    sys.exit(f"bench/allocator.py: {name} {what} with {label} failed:\n{done.stderr[-2000:]}")
                got = json.loads(line[0])
                results.setdefault((name, what, label), []).append((got["ms"], got["faults"]))
                print(f"{name} {what} {label} round {r + 1}: {got['ms']:.2f} ms, {got['faults']:.0f} faults a call",
                      file=sys.stderr, flush=True)

    labels = [label for label, _ in usable]
    lines = [f"Measured by bench/allocator.py on {isa()}; {threads} threads; batch 1; LibTorch's BLAS: "
             f"{'openblas' if os.path.isdir(OPENBLAS) else 'the system default'}; {rounds} process(es) per cell, "
             f"each the median of {CALLS} calls after 5 (ms), and its minor page faults a call. "
             f"keep_freed_memory: glibc's malloc after `torch_delegate.keep_freed_memory()`.", ""]
    missing = [f"{label}: {note}" for label, env, note in variants() if env is None]
    if missing:
        lines += ["Not measured: " + "; ".join(missing) + ".", ""]
    lines.append("| model | run | " + " | ".join(labels) + " | " +
                 " | ".join(f"{label} vs glibc" for label in labels[1:]) + " | page faults a call (" + " / ".join(labels) + ") |")
    lines.append("|---" * (2 + len(labels) + len(labels) - 1 + 1) + "|")
    for name in names:
        for what in ("lowered", "scripted"):
            ms = {label: statistics.median(m for m, _ in results[(name, what, label)]) for label in labels}
            faults = {label: statistics.median(f for _, f in results[(name, what, label)]) for label in labels}
            run = "lowered to onednn" if what == "lowered" else "scripted"
            lines.append(f"| {name} | {run} | " + " | ".join(f"{ms[label]:.2f}" for label in labels) + " | " +
                         " | ".join(f"{ms['glibc'] / ms[label]:.2f}x" for label in labels[1:]) + " | " +
                         " / ".join(f"{faults[label]:.0f}" for label in labels) + " |")
    table = "\n".join(lines)
    print(table)
    if doc:
        text = open(doc).read()
        begin, end = "<!-- allocator table -->", "<!-- end allocator table -->"
        if begin not in text or end not in text:
            sys.exit(f"bench/allocator.py: {doc} has no {begin} ... {end} lines")
        head, rest = text.split(begin, 1)
        open(doc, "w").write(head + begin + "\n" + table + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    main()
