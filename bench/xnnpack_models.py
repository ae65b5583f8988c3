"""torchvision's CNNs through the xnnpack backend against LibTorch's CPU paths, side by side in one
process, interleaved (round after round, every variant once per round; the median of the rounds).

Variants: eager, scripted, frozen, torch.jit.optimize_for_inference (oneDNN: the fastest LibTorch
path here), optimize_for_mobile (XNNPACK per op) and the model lowered to xnnpack
(torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))). Batch 1 and 8, 1
and 2 threads; optimize_for_mobile at batch 1 only (7-10x slower than eager here: its per-op
XNNPACK pool fights ATen's OpenMP threads; at batch 8 one round would take minutes).

Also: each model's FLOP/s (convolutions and linears, counted from the eager model) against this
machine's measured peak (the faster of a large GEMM run as a 1x1 convolution through oneDNN and
through xnnpack, in the same run), and a per-region profile of the lowered model when a goal is
missed.

Usage: PYTHONPATH=<build>/python bench/xnnpack_models.py <libxnnpack_backend.so> <doc.md> [<plot.png>] [--quick]
(the table goes between the doc's `<!-- xnnpack table -->` and `<!-- end xnnpack table -->` lines)
Environment: whatever the machine has (no OMP_WAIT_POLICY): the default users get.
"""
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.mobile_optimizer import optimize_for_mobile

import torch_delegate

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf"]
library, out_path = sys.argv[1], sys.argv[2]
plot_path = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else None
quick = "--quick" in sys.argv
torch.ops.load_library(library)


def flops_of(model, x):
    """Multiply-adds x 2 of every Conv2d and Linear in one forward."""
    total = [0]

    def conv_hook(module, inputs, output):
        kh, kw = module.kernel_size
        total[0] += 2 * output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear_hook(module, inputs, output):
        total[0] += 2 * output.numel() * module.in_features

    hooks = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(linear_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return total[0]


def timed(function, x):
    start = time.perf_counter()
    function(x)
    return time.perf_counter() - start


def measure(variants, x, rounds, calls=4):
    """Per variant: the median of its steady calls, and the median of its first call after
    another variant ran (interleaved: each round runs every variant `calls` times in a row). A
    model is called again and again in a program: the steady calls are what it costs. The first
    call after another variant pays for what that variant left behind: ATen's OpenMP workers
    spin for a few ms after a parallel region (GOMP_SPINCOUNT), on the cores XNNPACK's pool then
    needs."""
    steady = {name: [] for name in variants}
    first = {name: [] for name in variants}
    with torch.no_grad():
        for function in variants.values():  # warm up (first calls compile, pack, allocate)
            function(x)
            function(x)
        for _ in range(rounds):
            for name, function in variants.items():
                times = [timed(function, x) for _ in range(calls)]
                first[name].append(times[0])
                steady[name].extend(times[1:])
    return ({name: statistics.median(values) for name, values in steady.items()},
            {name: statistics.median(values) for name, values in first.items()})


def peak_flops(threads):
    """oneDNN and xnnpack on a large GEMM: a 1x1 convolution, 2048 -> 2048 channels at 32x32
    (M 1024, N 2048, K 2048; the size at which oneDNN ran fastest here)."""
    conv = nn.Conv2d(2048, 2048, 1, bias=False).eval()
    x = torch.rand(1, 2048, 32, 32)
    frozen = torch.jit.freeze(torch.jit.script(conv))
    variants = {"onednn": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(conv))),
                "xnnpack": torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))}
    seconds, _ = measure(variants, x, 5)
    return {name: 2 * 1024 * 2048 * 2048 / s for name, s in seconds.items()}


rows = []
switches = []
configurations = [(1, 2), (1, 1), (8, 2), (8, 1)]
if quick:
    configurations = [(1, 2), (8, 2)]
peaks = {}
for batch, threads in configurations:
    torch.set_num_threads(threads)  # before lowering: xnnpack's runtime takes the count at compile
    if threads not in peaks:
        peaks[threads] = peak_flops(threads)
    for name in MODELS:
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.rand(batch, 3, 224, 224)
        scripted = torch.jit.script(model)
        frozen = torch.jit.freeze(torch.jit.script(model))
        variants = {
            "eager": model,
            "scripted": scripted,
            "frozen": frozen,
            "oneDNN": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model))),
            "xnnpack": torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "xnnpack", partial=True,
                                            example_inputs=(x,)),
        }
        if batch == 1:
            variants["mobile"] = optimize_for_mobile(torch.jit.script(model))
        rounds = (3 if quick else 5) if batch == 1 else 2
        seconds, after_switch = measure(variants, x, rounds, calls=4 if batch == 1 else 3)
        flops = flops_of(model, x)
        rows.append((name, batch, threads, seconds, flops))
        switches.append((name, batch, threads, after_switch))
        print(f"{name:20s} b{batch} t{threads} " + "  ".join(f"{k} {v * 1e3:7.1f}" for k, v in seconds.items()) +
              f"  xnnpack/oneDNN {seconds['oneDNN'] / seconds['xnnpack']:.2f}x  (first after switch: xnnpack "
              f"{after_switch['xnnpack'] * 1e3:.1f})", file=sys.stderr, flush=True)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


lines = ["| model | batch | threads | eager | scripted | frozen | oneDNN | mobile | **xnnpack** | xnnpack vs oneDNN | vs scripted | GFLOP/s (% of peak) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for name, batch, threads, s, flops in rows:
    ms = {k: f"{v * 1e3:.1f}" for k, v in s.items()}
    gflops = flops / s["xnnpack"] / 1e9
    peak = max(peaks[threads].values()) / 1e9
    lines.append(f"| {name} | {batch} | {threads} | {ms['eager']} | {ms['scripted']} | {ms['frozen']} | {ms['oneDNN']} | "
                 f"{ms.get('mobile', '-')} | **{ms['xnnpack']}** | {s['oneDNN'] / s['xnnpack']:.2f}x | "
                 f"{s['scripted'] / s['xnnpack']:.2f}x | {gflops:.1f} ({100 * gflops / peak:.0f} %) |")
goal_rows = [r for r in rows if r[1] == 1 and r[2] == 2]
ratios = [r[3]["oneDNN"] / r[3]["xnnpack"] for r in goal_rows]
versus_scripted = [r[3]["scripted"] / r[3]["xnnpack"] for r in goal_rows]
summary = [
    "",
    f"Batch 1, 2 threads (the goal): geometric mean {geomean(ratios):.2f}x faster than optimize_for_inference "
    f"(goal >= 1.3x), slowest {min(ratios):.2f}x ({goal_rows[ratios.index(min(ratios))][0]}; goal >= 1.0x), "
    f"against scripted {min(versus_scripted):.2f}x to {max(versus_scripted):.2f}x (goal >= 2x each).",
    "",
    "Peak measured in the same run (a GEMM of M 1024, N 2048, K 2048 as a 1x1 convolution; % of peak above is of the faster): " +
    "; ".join(f"{t} thread{'s' if t > 1 else ''}: oneDNN {p['onednn'] / 1e9:.1f}, xnnpack {p['xnnpack'] / 1e9:.1f} GFLOP/s"
              for t, p in sorted(peaks.items())) + ".",
]
memory_lines = ["", "Memory of a loaded lowered model (a fresh process: VmRSS after torch.jit.load and one call, minus "
                "before the load), against the bytes of the model's parameters and buffers:", "",
                "| model | weights (MB) | frozen, loaded (MB) | xnnpack, loaded (MB) | xnnpack / weights |", "|---|---|---|---|---|"]
for name in ["mobilenet_v2", "resnet50"]:
    torch.set_num_threads(2)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.rand(1, 3, 224, 224)
    weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    frozen = torch.jit.freeze(torch.jit.script(model))
    paths = {}
    for kind, module in [("frozen", frozen),
                         ("xnnpack", torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,)))]:
        paths[kind] = f"/tmp/td_bench_{name}_{kind}.pt"
        module.save(paths[kind])
    probe = ("import sys, torch\n"
             "def rss(): return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) * 1024\n"
             "torch.ops.load_library(sys.argv[1]); x = torch.rand(1, 3, 224, 224); before = rss()\n"
             "m = torch.jit.load(sys.argv[2])\n"
             "with torch.no_grad(): m(x)\n"
             "print(rss() - before)")
    resident = {kind: int(subprocess.run([sys.executable, "-c", probe, library, path], capture_output=True, text=True,
                                         check=True).stdout) for kind, path in paths.items()}
    memory_lines.append(f"| {name} | {weights / 1e6:.1f} | {resident['frozen'] / 1e6:.1f} | {resident['xnnpack'] / 1e6:.1f} | "
                        f"{resident['xnnpack'] / weights:.2f}x |")

switch_lines = ["", "First call after another variant ran (ms; the steady figures above exclude it): what ATen's spinning "
                "OpenMP workers cost the call that follows them.", "",
                "| model | batch | threads | oneDNN | xnnpack | xnnpack steady |", "|---|---|---|---|---|---|"]
for (name, batch, threads, after), row in zip(switches, rows):
    switch_lines.append(f"| {name} | {batch} | {threads} | {after['oneDNN'] * 1e3:.1f} | {after['xnnpack'] * 1e3:.1f} | "
                        f"{row[3]['xnnpack'] * 1e3:.1f} |")
text = "\n".join(lines + summary + switch_lines + memory_lines) + "\n"
print(text)
# Into docs/performance.md between its markers (or a file of its own).
begin, end = "<!-- xnnpack table -->\n", "<!-- end xnnpack table -->"
try:
    doc = open(out_path).read()
except FileNotFoundError:
    doc = begin + end + "\n"
if begin not in doc or end not in doc:
    raise SystemExit(f"xnnpack_models: {out_path} has no '{begin.strip()}' ... '{end}' markers")
stamp = f"Measured {time.strftime('%Y-%m-%d')} by bench/xnnpack_models.py ({'--quick' if quick else 'full run'}; bench/run runs it), median ms.\n\n"
with open(out_path, "w") as out:
    out.write(doc[:doc.index(begin) + len(begin)] + stamp + text + doc[doc.index(end):])

if plot_path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = [r[0] for r in goal_rows]
    positions = range(len(names))
    for offset, variant, color in [(-0.3, "scripted", "#bbbbbb"), (-0.1, "frozen", "#999999"),
                                   (0.1, "oneDNN", "#4c72b0"), (0.3, "xnnpack", "#dd8452")]:
        ax.bar([p + offset for p in positions], [r[3]["oneDNN"] / r[3][variant] for r in goal_rows], 0.2, label=variant,
               color=color)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(positions))
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylabel("speed vs optimize_for_inference")
    ax.set_title("torchvision CNNs, batch 1, 2 threads (higher is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path, dpi=110)
