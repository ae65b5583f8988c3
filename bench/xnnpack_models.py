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


def goal_variants(name, x):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    return {"oneDNN": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model))),
            "xnnpack": torch_delegate.lower(torch.jit.freeze(torch.jit.script(model)), "xnnpack", partial=True,
                                            example_inputs=(x,))}


if "--passive-probe" in sys.argv:
    # Run by the main run in a process of its own with OMP_WAIT_POLICY=PASSIVE (libgomp reads it
    # at start-up): the goal configuration's oneDNN and xnnpack figures, as "name oneDNN xnnpack".
    torch.set_num_threads(2)
    x = torch.rand(1, 3, 224, 224)
    for name in MODELS:
        seconds, _ = measure(goal_variants(name, x), x, 3 if quick else 5)
        print(name, seconds["oneDNN"], seconds["xnnpack"], flush=True)
    sys.exit(0)

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
# Memory. A fresh process loads a saved model, calls it, then loads and calls a second copy of the
# same file: the second copy no longer pays what a process pays once (code pages, XNNPACK's and
# TorchScript's own state). VmRSS is read after malloc_trim, so that memory freed to glibc (the
# named data released after packing) is not counted. XNNPACK 2022 gives every value of a
# subgraph its own buffer, so a region's activations are resident too: lowered for batch 1 and
# batch 2, the difference is one image's activations, and what is left at batch 1 is the weights.
memory_lines = ["", "Memory per loaded model: VmRSS added by a second copy of the same saved file, loaded and called in "
                "a process that already holds one (after malloc_trim: freed memory not counted), against the bytes of "
                "the model's parameters and buffers. xnnpack, lowered for batch 1 and for batch 2: the difference is one "
                "image's activations (XNNPACK 2022 keeps a buffer per value); the batch-1 figure minus them is what its "
                "weights take.", "",
                "| model | weights (MB) | frozen (MB) | xnnpack, batch 1 (MB) | xnnpack, batch 2 (MB) | activations per image (MB) | "
                "xnnpack's weights (MB) | xnnpack's weights / weights |", "|---|---|---|---|---|---|---|---|"]
probe = ("import ctypes, sys, torch\n"
         "trim = ctypes.CDLL('libc.so.6').malloc_trim\n"
         "def rss():\n"
         "    trim(0)\n"
         "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) * 1024\n"
         "torch.set_num_threads(2); torch.ops.load_library(sys.argv[1]); x = torch.rand(int(sys.argv[3]), 3, 224, 224)\n"
         "first = torch.jit.load(sys.argv[2])\n"
         "with torch.no_grad(): first(x)\n"
         "before = rss()\n"
         "second = torch.jit.load(sys.argv[2])\n"
         "with torch.no_grad(): second(x)\n"
         "print(rss() - before)")
for name in ["mobilenet_v2", "resnet50"]:
    torch.set_num_threads(2)
    model = getattr(torchvision.models, name)(weights=None).eval()
    weights = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    resident = {}
    for kind, batch in [("frozen", 1), ("xnnpack", 1), ("xnnpack", 2)]:
        x = torch.rand(batch, 3, 224, 224)
        frozen = torch.jit.freeze(torch.jit.script(model))
        module = frozen if kind == "frozen" else torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x,))
        path = f"/tmp/td_bench_{name}_{kind}_{batch}.pt"
        module.save(path)
        resident[kind, batch] = int(subprocess.run([sys.executable, "-c", probe, library, path, str(batch)], capture_output=True,
                                                   text=True, check=True).stdout)
    activations = resident["xnnpack", 2] - resident["xnnpack", 1]
    packed = resident["xnnpack", 1] - activations
    memory_lines.append(f"| {name} | {weights / 1e6:.1f} | {resident['frozen', 1] / 1e6:.1f} | {resident['xnnpack', 1] / 1e6:.1f} | "
                        f"{resident['xnnpack', 2] / 1e6:.1f} | {activations / 1e6:.1f} | {packed / 1e6:.1f} | {packed / weights:.2f}x |")

# The per-layer profile of the goal the table misses (ResNet-18 below oneDNN): each distinct
# convolution of the model alone, with its input size in the model, through oneDNN and through
# xnnpack, interleaved; its share of the model's FLOPs. Where the time goes, layer by layer.
torch.set_num_threads(2)
resnet = torchvision.models.resnet18(weights=None).eval()
layers = {}


def record_layer(module, inputs, output):
    key = (module.in_channels, module.out_channels, module.kernel_size[0], module.stride[0], inputs[0].shape[2])
    if key not in layers:
        layers[key] = [module, tuple(inputs[0].shape), 0, 0]
    layers[key][2] += 1
    layers[key][3] += 2 * output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]


hooks = [m.register_forward_hook(record_layer) for m in resnet.modules() if isinstance(m, nn.Conv2d)]
with torch.no_grad():
    resnet(torch.rand(1, 3, 224, 224))
for hook in hooks:
    hook.remove()
profile_lines = ["", "Where ResNet-18's time goes (batch 1, 2 threads): each distinct convolution (+ ReLU) alone, with "
                 "its input size in the model, through oneDNN (converting to and from its blocked layout, as a lone layer "
                 "must) and xnnpack (input already NHWC, as inside the model's region), interleaved; count: how many the "
                 "model has; sum: count x time over the layers.", "",
                 "| convolution | input | count | share of FLOPs | oneDNN (ms) | xnnpack (ms) | xnnpack vs oneDNN | xnnpack GFLOP/s |",
                 "|---|---|---|---|---|---|---|---|"]
total_flops = sum(entry[3] for entry in layers.values())
totals = {"oneDNN": 0.0, "xnnpack": 0.0}
for (cin, cout, k, stride, size), (conv, shape, count, flops) in layers.items():
    x = torch.rand(*shape)
    layer = nn.Sequential(nn.Conv2d(cin, cout, k, stride, conv.padding, bias=False), nn.ReLU()).eval()
    frozen = torch.jit.freeze(torch.jit.script(layer))
    # xnnpack's layer takes its input channels-last, as inside the model's one region (no
    # conversion on entry); oneDNN's converts to and from its blocked layout, as a lone layer must.
    x_nhwc = x.contiguous(memory_format=torch.channels_last)
    lowered_layer = torch_delegate.lower(frozen, "xnnpack", partial=True, example_inputs=(x_nhwc,))
    variants = {"oneDNN": torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(layer))),
                "xnnpack": lambda _, f=lowered_layer: f(x_nhwc)}
    seconds, _ = measure(variants, x, 3 if quick else 5, calls=5)
    for variant in totals:
        totals[variant] += count * seconds[variant]
    profile_lines.append(f"| {cin}->{cout}, {k}x{k}, stride {stride} | {size}x{size} | {count} | "
                         f"{flops / total_flops * 100:.0f} % | {seconds['oneDNN'] * 1e3:.2f} | {seconds['xnnpack'] * 1e3:.2f} | "
                         f"{seconds['oneDNN'] / seconds['xnnpack']:.2f}x | {flops / count / seconds['xnnpack'] / 1e9:.0f} |")
profile_lines.append(f"| **sum** | | | 100 % | {totals['oneDNN'] * 1e3:.1f} | {totals['xnnpack'] * 1e3:.1f} | "
                     f"{totals['oneDNN'] / totals['xnnpack']:.2f}x | |")

# The default environment against OMP_WAIT_POLICY=PASSIVE (libgomp's workers sleep at once
# instead of spinning after a parallel region), in a process of its own, same goal configuration.
import os
probe = subprocess.run([sys.executable, __file__, library, out_path, "--passive-probe"] + (["--quick"] if quick else []),
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"), capture_output=True, text=True, check=True)
passive = {line.split()[0]: (float(line.split()[1]), float(line.split()[2])) for line in probe.stdout.splitlines()}
passive_lines = ["", "Default environment against `OMP_WAIT_POLICY=PASSIVE` (batch 1, 2 threads, steady ms; the passive "
                 "run in a process of its own):", "",
                 "| model | oneDNN | xnnpack | oneDNN, PASSIVE | xnnpack, PASSIVE | xnnpack vs oneDNN, PASSIVE |",
                 "|---|---|---|---|---|---|"]
for name, batch, threads, s, flops in rows:
    if (batch, threads) == (1, 2) and name in passive:
        p_onednn, p_xnnpack = passive[name]
        passive_lines.append(f"| {name} | {s['oneDNN'] * 1e3:.1f} | {s['xnnpack'] * 1e3:.1f} | {p_onednn * 1e3:.1f} | "
                             f"{p_xnnpack * 1e3:.1f} | {p_onednn / p_xnnpack:.2f}x |")

# Concurrent callers: one lowered model called from 1 and from 4 Python threads (the GIL is
# released while a TorchScript method runs); each region runs one call at a time.
import threading
concurrency_lines = ["", "Concurrent callers of one lowered model (batch 1; xnnpack's pool has 2 threads): calls per second "
                     "from 1 caller and from 4 callers at once.", "", "| model | 1 caller | 4 callers |", "|---|---|---|"]
for name in ["mobilenet_v3_small", "resnet18"]:
    x = torch.rand(1, 3, 224, 224)
    lowered_model = goal_variants(name, x)["xnnpack"]
    rates = []
    for callers in (1, 4):
        per_caller = 40 if quick else 100

        def work():
            with torch.no_grad():
                for _ in range(per_caller):
                    lowered_model(x)

        with torch.no_grad():
            lowered_model(x)
        workers = [threading.Thread(target=work) for _ in range(callers)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rates.append(callers * per_caller / (time.perf_counter() - start))
    concurrency_lines.append(f"| {name} | {rates[0]:.0f} | {rates[1]:.0f} |")

switch_lines = ["", "First call after another variant ran (ms; the steady figures above exclude it): what ATen's spinning "
                "OpenMP workers cost the call that follows them.", "",
                "| model | batch | threads | oneDNN | xnnpack | xnnpack steady |", "|---|---|---|---|---|---|"]
for (name, batch, threads, after), row in zip(switches, rows):
    switch_lines.append(f"| {name} | {batch} | {threads} | {after['oneDNN'] * 1e3:.1f} | {after['xnnpack'] * 1e3:.1f} | "
                        f"{row[3]['xnnpack'] * 1e3:.1f} |")
text = "\n".join(lines + summary + passive_lines + switch_lines + memory_lines + profile_lines + concurrency_lines) + "\n"
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
