"""torch-delegate against ONNX Runtime, the CPU engine users would export to instead (issue 39).

Each model is exported with torch.onnx.export (opset 14) and run by ONNX Runtime through
onnxruntime-node in a process of its own (bench/ort_runner.js), driven over a pipe so that its
calls are interleaved with LibTorch's and ours: round after round, every variant runs a few calls
in a row (the first of each block is dropped: it pays for what the previous variant left behind,
such as the other process's spinning threads), the order drawn anew each round; medians.
Same input, same threads (2 unless TD_BENCH_THREADS), batch 1; every output is compared with
eager's. LibTorch runs with OpenBLAS when it is installed (libopenblas0-openmp, by
LD_LIBRARY_PATH: Debian's default reference BLAS is 25-75x slower on Linears).

Variants: scripted; torch.jit.optimize_for_inference (oneDNN, the fastest LibTorch path);
lowered to ["onednn"]; the README's recipe (lower(scripted, ["onednn", "xnnpack",
"pointwise_fusion"], partial=True, example_inputs=(x,), measure=True, choose_order=True));
ONNX Runtime (graphOptimizationLevel "all", intraOpNumThreads = threads, sequential).

The transformers' GFLOP/s are stated against the machine's measured GEMM peak: the faster of
LibTorch's mm on its BLAS and a Linear lowered to onednn, on a 2048^3 product (gemm_peak).

Where node or onnxruntime-node is missing, the bench says so and times the rest.

On an AVX-512 machine, `bench/as_avx2.py -- /usr/bin/python3 bench/ort_models.py ...` runs it all
(LibTorch, oneDNN, OpenBLAS, XNNPACK and ORT's node process) on the code those engines pick for an
AVX2 machine; the machine line says so, and the doc's table is the one between the
`<!-- ort table avx2 -->` markers.

Usage: PYTHONPATH=<build>/python bench/ort_models.py <build> [<doc.md>] [--quick] [--models a,b,...]
                                                    [--no-recipe] [--json out.json]
       PYTHONPATH=<build>/python bench/ort_models.py <build> [<doc.md>] --report run.json [run.json ...]
           (the table of saved runs, nothing measured; --report last)
(the table goes between the doc's `<!-- ort table -->` and `<!-- end ort table -->` lines)
ORT is looked for in $TD_ORT_NODE_MODULES, else <build>/ort/node_modules (bench/run installs it
there: npm install --ignore-scripts onnxruntime-node).
"""
import json
import math
import os
import statistics
import shlex
import subprocess
import sys
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
options = sys.argv[1:]
VALUED = ("--models", "--json")
reporting = options[options.index("--report") + 1:] if "--report" in options else []
args = [a for i, a in enumerate(options)
        if not a.startswith("--") and (i == 0 or options[i - 1] not in VALUED) and a not in reporting]


def option(name, default=None):
    return options[options.index(name) + 1] if name in options else default


build = args[0]
doc_path = args[1] if len(args) > 1 else None
quick = "--quick" in options
threads = int(os.environ.get("TD_BENCH_THREADS", "2"))
# LibTorch with OpenBLAS: re-run this script with it first on the library path (once).
if os.path.isdir(OPENBLAS) and os.environ.get("TD_BENCH_BLAS") is None:
    env = dict(os.environ, TD_BENCH_BLAS="openblas",
               LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402  (after the re-exec: the BLAS is chosen when libtorch loads)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
blas = models.blas_in_use()  # what this process loaded, whatever TD_BENCH_BLAS says

torch.set_num_threads(threads)
import torch_delegate  # noqa: E402

for backend in ("xnnpack", "onednn", "pointwise_fusion"):
    torch_delegate.load_backend(backend)
RECIPE = ["onednn", "xnnpack", "pointwise_fusion"]


class Ort:
    """The ORT runner process; `error` says why there is none."""

    def __init__(self, workdir):
        self.process, self.error, self.version = None, None, None
        modules = os.environ.get("TD_ORT_NODE_MODULES", os.path.join(build, "ort", "node_modules"))
        if not os.path.isdir(os.path.join(modules, "onnxruntime-node")):
            self.error = (f"onnxruntime-node is not installed in {modules} (npm install --ignore-scripts "
                          f"onnxruntime-node there, or set TD_ORT_NODE_MODULES)")
            return
        try:
            # bench/as_avx2.py: the runner is masked as this process is.
            prefix = shlex.split(os.environ.get("TD_BENCH_CHILD_PREFIX", ""))
            self.process = subprocess.Popen(prefix + ["node", os.path.join(os.path.dirname(__file__), "ort_runner.js")],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                            env=dict(os.environ, NODE_PATH=modules))
        except FileNotFoundError:
            self.error = "node is not installed (Debian: nodejs)"
        self.workdir = workdir

    def ask(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline() or '{"error": "the ORT runner exited"}')
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def load(self, name, model, x):
        """Exports the model (again each run: its weights are this run's) and loads it; ORT's output."""
        path = os.path.join(self.workdir, f"{name}.onnx")
        # Not under no_grad: the weights requiring grad keep nn.MultiheadAttention off its fast path,
        # whose op (aten::_native_multi_head_attention) ONNX opset 14 cannot express.
        torch.onnx.export(model, (x,), path, opset_version=14)
        x.numpy().tofile(os.path.join(self.workdir, f"{name}.input"))
        reply = self.ask({"load": path, "input": os.path.join(self.workdir, f"{name}.input"),
                          "shape": list(x.shape), "threads": threads})
        self.version = reply["version"]
        import numpy
        return torch.from_numpy(numpy.fromfile(reply["output"], dtype=numpy.float32)).reshape(reply["dims"])

    def timer(self):
        def calls(count):
            return [ms / 1e3 for ms in self.ask({"time": count})["ms"]]
        return calls


def local_timer(function, x):
    def calls(count):
        times = []
        for _ in range(count):
            start = time.perf_counter()
            function(x)
            times.append(time.perf_counter() - start)
        return times
    return calls


def measure(timers):
    """Medians (s) of steady calls, interleaved, the order drawn anew each round
    (models.round_order); each block after models.SETTLE seconds of quiet, its first call dropped."""
    with torch.no_grad():
        first = {name: min(timer(2)) for name, timer in timers.items()}  # warm-up, and a size
        slowest = max(first.values())
        rounds = 4 if quick else (12 if slowest < 0.1 else 8 if slowest < 0.3 else 5)
        calls = 3 if slowest < 0.3 else 2
        steady = {name: [] for name in timers}
        names = list(timers)
        for round_ in range(rounds):
            for name in models.round_order(names, round_):
                time.sleep(models.SETTLE)  # the previous variant's idle threads (ORT's, OpenMP's, pthreadpool's) stop spinning
                steady[name].extend(timers[name](calls)[1:])
    return {name: statistics.median(values) for name, values in steady.items()}


def model_flops(model, x):
    """Floating-point operations of one eager call (the profiler's count: convolutions, matrix
    products, additions; 2 per multiply-add)."""
    with torch.no_grad(), torch.profiler.profile(with_flops=True) as profile:
        model(x)
    return sum(event.flops for event in profile.key_averages())


def gemm_peak(rounds=4):
    """The machine's measured matrix-product peak (GFLOP/s), what a perfect GEMM-bound model would
    reach: a 2048^3 float product on this process's threads, run two ways, LibTorch's mm on its
    BLAS and a Linear lowered to onednn (oneDNN's matmul); the faster is the peak. (The BLAS
    alone understates it where that BLAS has no kernel for the ISA: OpenBLAS 0.3.21 runs AVX2
    kernels on a Zen 5.) Each way's best call of `rounds` rounds of 5, the ways alternating: a
    slow phase of the machine (seconds long here) must not decide the figure."""
    a, b = torch.rand(2048, 2048), torch.rand(2048, 2048)
    products = {"blas": lambda: a @ b}
    linear = torch.nn.Linear(2048, 2048, bias=False).eval()
    try:
        lowered = torch_delegate.lower(torch.jit.script(linear), ["onednn"], partial=True, example_inputs=(a,))
        if torch_delegate.report(lowered).methods[0].regions:
            products["onednn"] = lambda: lowered(a)
    except RuntimeError as error:  # the onednn backend not built or not available: the BLAS's rate alone
        print(f"ort_models: oneDNN's GEMM rate is not measured: {str(error).splitlines()[0]}", file=sys.stderr)
    best = {way: math.inf for way in products}
    with torch.no_grad():
        for product in products.values():
            product()
        for _ in range(rounds):
            for way, product in products.items():
                best[way] = min(best[way], *(timed_once(product) for _ in range(5)))
    return {way: 2 * 2048 ** 3 / seconds / 1e9 for way, seconds in best.items()}


def peak_of(saved):
    """A run's GEMM rates, {"blas": ...[, "onednn": ...]}; a run saved before rates were kept has
    the BLAS's alone, as a number."""
    return saved if isinstance(saved, dict) else {"blas": saved}


def timed_once(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def relative_error(got, want):
    if isinstance(got, tuple):  # a scripted GoogLeNet returns its named tuple of outputs
        got = got[0]
    return float((got - want).abs().max() / max(float(want.abs().max()), 1e-6))


def run_model(name, ort, recipe):
    model, x = models.model_and_input(name)
    row = {"name": name, "threads": threads, "gflop": model_flops(model, x) / 1e9}
    scripted = torch.jit.script(model)
    variants = {"scripted": scripted,
                "oif": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))}
    start = time.perf_counter()
    variants["onednn"] = torch_delegate.lower(torch.jit.script(model), ["onednn"], partial=True, example_inputs=(x,))
    row["onednn_lowering_s"] = time.perf_counter() - start
    if recipe:
        start = time.perf_counter()
        variants["recipe"] = torch_delegate.lower(torch.jit.script(model), RECIPE, partial=True, example_inputs=(x,),
                                                  measure=True, choose_order=True)
        row["recipe_lowering_s"] = time.perf_counter() - start
        report = torch_delegate.report(variants["recipe"])
        regions = {}
        for method in report.methods:
            for region in method.regions:
                regions[region.backend] = regions.get(region.backend, 0) + 1
        row["recipe_regions"] = regions
    report = torch_delegate.report(variants["onednn"])
    row["onednn_regions"] = sum(len(method.regions) for method in report.methods)
    row["onednn_kept"] = sum(len(method.kept) for method in report.methods)
    with torch.no_grad():
        want = model(x)
        want = want[0] if isinstance(want, tuple) else want
        row["error"] = {variant: relative_error(function(x), want) for variant, function in variants.items()}
    timers = {variant: local_timer(function, x) for variant, function in variants.items()}
    if ort.process is not None:
        try:
            got = ort.load(name, model, x)
            row["error"]["ort"] = relative_error(got.reshape(want.shape), want)
            timers["ort"] = ort.timer()
        except Exception as error:  # reported in the table, the other variants are still timed
            row["ort_failed"] = str(error).splitlines()[0][:160]
    row.update({variant: seconds * 1e3 for variant, seconds in measure(timers).items()})
    return row


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def report_only(paths):
    """--report a.json b.json: the table of runs saved with --json (their rows in order, the
    machine line of the first), written as a run would write it; nothing is measured."""
    runs = [json.load(open(path)) for path in paths]
    rows = [row for run in runs for row in run["rows"]]

    class Saved:
        version, error = runs[0]["ort"], None
    return table(rows, Saved, peak_of(runs[0]["gemm_peak"]), runs[0]["machine"], runs[0]["blas"],
                 runs[0].get("allocator", "glibc's malloc as it is (a run before keep_freed_memory)"))


def main():
    if "--report" in options:
        paths = options[options.index("--report") + 1:]
        runs = [json.load(open(path)) for path in paths]
        parts = "; ".join(f"{', '.join(row['name'] for row in run['rows'])} at {run.get('commit', '?')} ({run.get('date', '?')})"
                          for run in runs)
        write(report_only(paths), f"Measured by bench/ort_models.py in {len(runs)} runs (full runs; bench/run runs it): {parts}.\n\n")
        return
    # glibc's malloc keeps what LibTorch frees, as ONNX Runtime's arena keeps its memory: else a
    # model's TorchScript parts (and scripted, optimize_for_inference) fault their tensors in again
    # each call or not, by what the process happened to allocate before (bench/allocator.py).
    # TD_BENCH_GLIBC_DEFAULTS=1 leaves glibc as it is. Not in --report: nothing runs there.
    if os.environ.get("TD_BENCH_GLIBC_DEFAULTS") == "1":
        allocator = "glibc's malloc as it is"
    elif torch_delegate.keep_freed_memory():
        allocator = "glibc's malloc after keep_freed_memory()"
    else:
        allocator = "the C library's malloc (not glibc: keep_freed_memory changed nothing)"
    names = option("--models", ",".join(models.CNNS + models.TRANSFORMERS)).split(",")
    workdir = os.path.join(build, "ort")
    os.makedirs(workdir, exist_ok=True)
    ort = Ort(workdir)
    if ort.error:
        print(f"ort_models: ONNX Runtime is not measured: {ort.error}", file=sys.stderr)
    peak = gemm_peak()
    print(f"ort_models: GEMM rates {', '.join(f'{k} {v:.1f}' for k, v in peak.items())} GFLOP/s ({blas} BLAS, {threads} threads)",
          file=sys.stderr, flush=True)
    rows = []
    for name in names:
        row = run_model(name, ort, "--no-recipe" not in options)
        rows.append(row)
        print(name, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}, file=sys.stderr, flush=True)
    if option("--json"):
        json.dump({"machine": models.machine_line(), "blas": blas, "allocator": allocator, "ort": ort.version, "gemm_peak": peak, "commit": commit(),
                   "date": time.strftime('%Y-%m-%d'), "quick": quick, "rows": rows}, open(option("--json"), "w"), indent=1)
    write(table(rows, ort, peak, models.machine_line(), blas, allocator))


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        return ""


def write(text, stamp=None):
    print(text)
    if doc_path:
        # Under bench/as_avx2.py, the table of AVX2 code on this machine has markers of its own.
        name = "ort table avx2" if "(bench/as_avx2.py:" in text else "ort table"
        begin, end = f"<!-- {name} -->\n", f"<!-- end {name} -->"
        doc = open(doc_path).read()
        if begin not in doc or end not in doc:
            raise SystemExit(f"ort_models: {doc_path} has no '{begin.strip()}' ... '{end}' markers")
        at = commit()
        stamp = stamp or (f"Measured {time.strftime('%Y-%m-%d')}{' at ' + at if at else ''} by bench/ort_models.py "
                          f"({'--quick' if quick else 'full run'}; bench/run runs it).\n\n")
        with open(doc_path, "w") as out:
            out.write(doc[:doc.index(begin) + len(begin)] + stamp + text + doc[doc.index(end):])


def table(rows, ort, rates, machine, blas, allocator):
    peak = max(rates.values())
    measured = (f"the faster of LibTorch's mm on {blas}, {rates['blas']:.0f}, and a Linear lowered to onednn (oneDNN's matmul), "
                f"{rates['onednn']:.0f}" if "onednn" in rates else f"LibTorch's mm on {blas}, {rates['blas']:.0f}: oneDNN's not measured")
    def cell(row, key):
        return f"{row[key]:.2f}" if key in row else "-"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    lines = ["| model | ONNX Runtime | scripted | optimize_for_inference | onednn | recipe | recipe vs ORT | "
             "onednn vs ORT | recipe vs optimize_for_inference | recipe vs scripted | recipe's regions | "
             "largest error vs eager (ORT / ours) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ours = row.get("recipe")
        regions = " + ".join(f"{count} {backend}" for backend, count in sorted(row.get("recipe_regions", {}).items()))
        error = row["error"]
        lines.append(f"| {row['name']} | {cell(row, 'ort') if 'ort' in row else row.get('ort_failed', '-')} | "
                     f"{cell(row, 'scripted')} | {cell(row, 'oif')} | {cell(row, 'onednn')} | {cell(row, 'recipe')} | "
                     f"{ratio(row.get('ort'), ours)} | {ratio(row.get('ort'), row.get('onednn'))} | "
                     f"{ratio(row.get('oif'), ours)} | {ratio(row.get('scripted'), ours)} | {regions or '-'} | "
                     f"{error.get('ort', float('nan')):.0e} / {max(v for k, v in error.items() if k != 'ort'):.0e} |")
    summary = ["", f"Machine: {machine}; {rows[0]['threads']} threads; batch 1; LibTorch's BLAS: {blas}; "
               f"LibTorch's allocator: {allocator}; "
               f"ONNX Runtime {ort.version or 'not measured: ' + str(ort.error)}. Times in ms (medians, interleaved). "
               f"The machine's measured GEMM peak (a 2048^3 float matrix product; {measured}): {peak:.0f} GFLOP/s.", ""]
    for label, group in (("CNNs", models.CNNS), ("transformers", models.TRANSFORMERS), ("video models", models.VIDEO)):
        chosen = [row for row in rows if row["name"] in group and "recipe" in row and "ort" in row]
        if chosen:
            versus = {row["name"]: row["ort"] / row["recipe"] for row in chosen}
            best = {row["name"]: row["ort"] / min(row["recipe"], row["onednn"]) for row in chosen}
            summary.append(f"- {label} ({len(chosen)}): the recipe is {geomean(list(versus.values())):.2f}x ONNX Runtime as a "
                           f"geometric mean, slowest {min(versus.values()):.2f}x ({min(versus, key=versus.get)}); "
                           f"{geomean([row['oif'] / row['recipe'] for row in chosen]):.2f}x optimize_for_inference, "
                           f"{geomean([min(row['oif'], row['scripted']) / row['recipe'] for row in chosen]):.2f}x the faster of it "
                           f"and scripted (from {min(min(row['oif'], row['scripted']) / row['recipe'] for row in chosen):.2f}x); "
                           f"the faster of the recipe and onednn alone: {geomean(list(best.values())):.2f}x ONNX Runtime.")
        for row in rows:
            if row["name"] in group and label == "transformers":
                reached = ", ".join(f"{variant} {row['gflop'] / row[variant] * 1e3:.0f} ({row['gflop'] / row[variant] * 1e5 / peak:.0f} %)"
                                    for variant in ("ort", "oif", "onednn", "recipe") if variant in row)
                summary.append(f"  - {row['name']}: {row['gflop']:.1f} GFLOP a call; GFLOP/s (% of the GEMM peak, {peak:.0f}): {reached}.")
    return "\n".join(lines + summary) + "\n"


main()
