"""Measured partitioning users can live with (issue 40): how long the README's recipe takes to
lower each torchvision CNN of the bench, whether it gives the same answer twice, and whether its
answer is right.

For each model (bench/models.py; batch 1, 2 threads unless TD_BENCH_THREADS; LibTorch with
OpenBLAS when installed):
- unmeasured: lower(scripted, RECIPE, partial=True, example_inputs=(x,)), the median of 3 after
  one untimed (the process's first lowering of a model pays for setting up), alternating with
  the warm lowerings below;
- 200 calls: 200 calls of the scripted model (the issue's allowance: measured lowering
  <= 3x unmeasured + 200 calls);
- cold / warm: the recipe measured (measure=True, choose_order=True) with an empty timing cache,
  then again with the cache it left, the median of 3 (idle machine; one warm lowering against
  the median of 2 unmeasured once made RegNet-Y's 0.24 s against 0.19 a miss, where medians of
  3 give 1.05x);
- loaded: the recipe measured, cache off, with another process busy beside it (one core spinning:
  as on a shared machine or CI runner; --busy N: N of them), --runs times (10 by default; 3 with
  --quick): the longest and the median of them, how many gave the most common partition (the
  stability count), and in how many measure_time_limit_s was spent (its default, 20 s; --limit S
  passes another, 0: none) and what was not measured by then went by the list's order;
- right answer: the recipe's result (the idle, cold-cache lowering's) timed interleaved against each
  backend alone (lowered without measuring) and torch.jit.optimize_for_inference: its ratio to
  the fastest single backend (>= 1 is faster) and to optimize_for_inference.

Usage: PYTHONPATH=<build>/python bench/measured_lowering.py [<doc.md>] [--quick] [--models a,b] [--runs N]
       [--busy N] [--limit S] [--json out.json]
       PYTHONPATH=<build>/python bench/measured_lowering.py [<doc.md>] --report run.json [run.json ...]
           (the table of saved runs, nothing measured; --report last)
(the table goes between the doc's `<!-- measured table -->` and `<!-- end measured table -->` lines)
"""
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
if os.path.isdir(OPENBLAS) and os.environ.get("TD_BENCH_BLAS") is None:
    env = dict(os.environ, TD_BENCH_BLAS="openblas",
               LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

options = sys.argv[1:]
VALUED = ("--models", "--runs", "--json", "--busy", "--limit")
reporting = options[options.index("--report") + 1:] if "--report" in options else []
args = [a for i, a in enumerate(options)
        if not a.startswith("--") and (i == 0 or options[i - 1] not in VALUED) and a not in reporting]


KNOWN = VALUED + ("--quick", "--report")
unknown = [a for a in options if a.startswith("-") and a not in KNOWN and a not in reporting]
if unknown:
    sys.exit(f"bench/measured_lowering.py: unknown option {unknown[0]!r}; the options are {', '.join(KNOWN)}\n" + __doc__)
missing = [name for name in VALUED if name in options and (options.index(name) + 1 >= len(options)
                                                            or options[options.index(name) + 1].startswith("--"))]
if missing:
    sys.exit(f"bench/measured_lowering.py: {missing[0]} needs a value")


def option(name, default=None):
    return options[options.index(name) + 1] if name in options else default


doc_path = args[0] if args else None
quick = "--quick" in options
runs = int(option("--runs", 3 if quick else 10))
names = option("--models", ",".join(["resnet18", "mobilenet_v2", "shufflenet_v2_x1_0"] if quick else models.CNNS)).split(",")
threads = int(os.environ.get("TD_BENCH_THREADS", "2"))
busy = int(option("--busy", 1))
limit = option("--limit")  # measure_time_limit_s for every measured lowering; None: the library's default
torch.set_num_threads(threads)
import torch_delegate  # noqa: E402

RECIPE = ["onednn", "xnnpack", "pointwise_fusion"]
for backend in RECIPE:
    torch_delegate.load_backend(backend)


def seconds(call):
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def partition(lowered):
    """The order a lowering was made with, and its partition (each region's backend, size and
    place): two lowerings with the same partition run the same model, whatever the order."""
    report = torch_delegate.report(lowered)
    return (", ".join(report.backends),
            tuple((r.backend, r.node_count, r.location) for m in report.methods for r in m.regions))


def describe(signature):
    order, regions = signature
    counts = collections.Counter(backend for backend, _, _ in regions)
    return ", ".join(f"{n} {b}" for b, n in counts.items()) or "none"


class Busy:
    """`count` other processes, each keeping one core busy (a spinning Python loop), while it lives."""

    def __init__(self, count=1):
        self.count = count

    def __enter__(self):
        self.processes = [models.busy_process() for _ in range(self.count)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()


class LastUpdate:
    """A progress callable that keeps the lowering's last update: whether the time limit was spent."""

    def __init__(self):
        self.detail = ""

    def __call__(self, update):
        self.detail = update.detail

    def cut(self):
        return "measure_time_limit_s cut the measuring short" in self.detail


def interleaved(variants, x, rounds=15):
    """Medians in ms: rounds of a block of 3 calls per variant (the first dropped), each block
    after models.SETTLE seconds of quiet, the order drawn anew each round (models.round_order)."""
    times = {k: [] for k in variants}
    with torch.no_grad():
        for f in variants.values():
            f(x), f(x)
        for r in range(rounds):
            for k in models.round_order(variants, r):
                time.sleep(models.SETTLE)
                variants[k](x)
                start = time.perf_counter()
                variants[k](x), variants[k](x)
                times[k].append((time.perf_counter() - start) / 2 * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def measure_model(name):
    model, x = models.model_and_input(name)
    scripted = torch.jit.script(model)
    row = {"model": name}
    with torch.no_grad():
        unmeasured_lowering = lambda: torch_delegate.lower(scripted, RECIPE, partial=True, example_inputs=(x,))
        unmeasured_lowering()  # the process's first lowering of the model pays for setting up
        scripted(x), scripted(x)
        row["calls200_s"] = seconds(lambda: [scripted(x) for _ in range(200)])[0]
        cache = tempfile.mkdtemp(prefix="td_bench_cache_")
        try:
            recipe = dict(partial=True, example_inputs=(x,), measure=True, choose_order=True, progress=False)
            if limit is not None:
                recipe["measure_time_limit_s"] = float(limit)
            row["cold_s"], cold = seconds(lambda: torch_delegate.lower(scripted, RECIPE, timing_cache=cache, **recipe))
            # Unmeasured and warm lowerings alternate, 3 of each: a process's lowerings drift
            # (GoogLeNet's went 0.25 s, then 0.18 a few lowerings later), and the ratio is what counts.
            unmeasured, warms = [], []
            for _ in range(3):
                unmeasured.append(seconds(unmeasured_lowering)[0])
                warms.append(seconds(lambda: torch_delegate.lower(scripted, RECIPE, timing_cache=cache, **recipe)))
            row["unmeasured_s"] = statistics.median(unmeasured)
            row["warm_s"], warm = statistics.median(w[0] for w in warms), warms[-1][1]
            row["warm_same"] = partition(warm)[1] == partition(cold)[1]
            row["cold_partition"] = describe(partition(cold)) + " (" + partition(cold)[0] + ")"
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        loaded_times, signatures, cut = [], [], 0
        with Busy(busy):
            for _ in range(runs):
                last = LastUpdate()
                spent, lowered = seconds(lambda: torch_delegate.lower(scripted, RECIPE, timing_cache=False,
                                                                      **dict(recipe, progress=last)))
                loaded_times.append(spent)
                signatures.append(partition(lowered))
                cut += last.cut()
        # The same partition: the same regions on the same backends (the order it was found by aside).
        common_regions, count = collections.Counter(s[1] for s in signatures).most_common(1)[0]
        common = next(s for s in signatures if s[1] == common_regions)
        row.update(loaded_max_s=max(loaded_times), loaded_median_s=statistics.median(loaded_times), loaded_s=loaded_times, stable=count,
                   runs=runs, busy=busy, limit_spent=cut, partition=describe(common), order=common[0],
                   partitions=[describe(s) + " (" + s[0] + ")" for s in signatures])
        variants = {"recipe": cold,  # lowered on the idle machine
                    "oif": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))}
        for backend in ("onednn", "xnnpack"):
            variants[backend] = torch_delegate.lower(scripted, [backend], partial=True, example_inputs=(x,))
        ms = interleaved(variants, x)
        row["ms"] = ms
        best_single = min(("onednn", "xnnpack"), key=lambda b: ms[b])
        row["best_single"] = best_single
        row["vs_best_single"] = ms[best_single] / ms["recipe"]
        row["vs_oif"] = ms["oif"] / ms["recipe"]
    row["budget_s"] = 3 * row["unmeasured_s"] + row["calls200_s"]
    return row


def table(rows):
    lines = ["| model | unmeasured lowering | 200 calls | budget (3x + 200 calls) | measured, cold cache | warm cache "
             "| warm / unmeasured | loaded (other processes busy): longest of runs | loaded median | same partition "
             "| time limit spent | partition | recipe vs best single backend | recipe vs optimize_for_inference |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['unmeasured_s']:.2f} s | {r['calls200_s']:.1f} s | {r['budget_s']:.1f} s "
            f"| {r['cold_s']:.1f} s{'' if r['cold_s'] <= r['budget_s'] else ' (over)'} | {r['warm_s']:.2f} s "
            f"| {r['warm_s'] / r['unmeasured_s']:.2f}x | {r['loaded_max_s']:.1f} s{'' if r['loaded_max_s'] <= 30 else ' (over 30 s)'} "
            f"| {median_cell(r)} | {r['stable']} of {r['runs']} | {limit_cell(r)} | {r['partition']} ({r['order']}) "
            f"| {r['vs_best_single']:.2f}x ({r['best_single']}: {r['ms'][r['best_single']]:.1f} ms, recipe {r['ms']['recipe']:.1f}) "
            f"| {r['vs_oif']:.2f}x |")
    return "\n".join(lines)


def median_cell(row):
    """The loaded lowerings' median (runs saved before it was a column: "?")."""
    return f"{row['loaded_median_s']:.1f} s" if "loaded_median_s" in row else "?"


def limit_cell(row):
    """In how many loaded lowerings measure_time_limit_s was spent, and beside how many busy
    processes (runs saved before it was a column: "?")."""
    if "limit_spent" not in row:
        return "?"
    return f"{row['limit_spent']} of {row['runs']}" + (f" ({row['busy']} busy)" if row.get("busy", 1) != 1 else "")


def stable_count(row):
    """Runs with the most common partition, the order each was found by aside (saved runs of
    --json: their "partitions" are "<regions> (<order>)")."""
    regions = [p.rsplit(" (", 1)[0] for p in row["partitions"]]
    return collections.Counter(regions).most_common(1)[0][1]


def main():
    if "--report" in options:  # the table of saved --json runs, nothing measured
        rows, machine = [], None
        for path in options[options.index("--report") + 1:]:
            saved = json.load(open(path))
            machine = saved["machine"]
            for row in saved["rows"]:
                row["stable"] = stable_count(row)
                rows.append(row)
        text = table(rows)
        print(text)
        if doc_path:
            write_doc(f"Measured by bench/measured_lowering.py on {machine}, {threads} threads; loaded: each model's "
                      f"measured lowerings (the runs column), the timing cache off, one other process spinning on a core. "
                      f"Ratios >= 1: the recipe is faster.", text)
        return
    print(f"machine: {models.machine_line()}; {threads} threads; BLAS: {models.blas_in_use()}", flush=True)
    rows = []
    for name in names:
        row = measure_model(name)
        rows.append(row)
        print(json.dumps(row), flush=True)
    text = table(rows)
    print(text)
    summary = (f"Measured by bench/measured_lowering.py on {models.machine_line()}, {threads} threads, torch-delegate "
               f"{torch_delegate.__version__}; loaded: {runs} measured lowerings each, the timing cache off, "
               f"{busy} other process{'es' if busy != 1 else ''} spinning on a core each"
               f"{f'; measure_time_limit_s={limit}' if limit is not None else ''}. Ratios >= 1: the recipe is faster.")
    if option("--json"):
        json.dump({"machine": models.machine_line(), "rows": rows}, open(option("--json"), "w"), indent=1)
    if doc_path:
        write_doc(summary, text)


def write_doc(summary, text):
    doc = open(doc_path).read()
    begin, end = "<!-- measured table -->", "<!-- end measured table -->"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + summary + "\n\n" + text + "\n" + doc[doc.index(end):]
        open(doc_path, "w").write(doc)


main()
