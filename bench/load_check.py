"""What load's archive check costs (issue 37): torch_delegate.load of a ~100 MB saved module with
the check (verify=True, the default) and without (verify=False), side by side in one process,
interleaved, with check_archive alone and torch.jit.load as anchors; medians and ratios.

Two modules: a synthetic feed-forward block with 100 MB of weights partially lowered to
pointwise_fusion (its GELU delegated, its Linears' weights records of the archive), and
torchvision's resnet50 (98 MB of weights, scripted and saved). The files are read from the page
cache (written just before, then read once): what a server that loads a model it has on local
disk sees; a cold read from disk costs the same for both and is not what the check adds.

Usage: PYTHONPATH=<build>/python bench/load_check.py <libpointwise_fusion.so> [docs/performance.md] [--quick]
(the table goes between the doc's `<!-- load check table -->` and `<!-- end load check table -->` lines)
"""
import os
import statistics
import sys
import tempfile
import time

import torch

import torch_delegate as td

arguments = [argument for argument in sys.argv[1:] if not argument.startswith("--")]
quick = "--quick" in sys.argv
torch.ops.load_library(arguments[0])
out_path = arguments[1] if len(arguments) > 1 else None
rounds = 7 if quick else 21


def cpu_isa():
    """The CPU's model and the ISA extensions the check (and LibTorch) can use."""
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE4.2" if "sse4_2" in flags else "baseline"
    clmul = "PCLMULQDQ" if "pclmulqdq" in flags else "no PCLMULQDQ (tables)"
    return f"{model}, {isa}, {clmul}"


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(4096, 3072), torch.nn.Linear(3072, 4096)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x), approximate="tanh"))


def modules(directory):
    wide = td.lower(torch.jit.script(Wide().eval()), "pointwise_fusion", partial=True)
    wide_path = os.path.join(directory, "wide.pt")
    wide.save(wide_path)
    yield "feed-forward, 4096-3072-4096, partially lowered (pointwise_fusion)", wide_path
    import torchvision
    resnet_path = os.path.join(directory, "resnet50.pt")
    torch.jit.script(torchvision.models.resnet50(weights=None).eval()).save(resnet_path)
    yield "resnet50 (torchvision), scripted", resnet_path


def timed(call):
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


rows = []
with tempfile.TemporaryDirectory() as directory:
    for name, path in modules(directory):
        size = os.path.getsize(path)
        variants = {
            "td.load (checked)": lambda: td.load(path),
            "td.load(verify=False)": lambda: td.load(path, verify=False),
            "check_archive alone": lambda: td.check_archive(path),
            "torch.jit.load": lambda: torch.jit.load(path),
        }
        for call in variants.values():
            call()  # warm: the file in the page cache, LibTorch's first-load work done
        times = {key: [] for key in variants}
        for round_ in range(rounds):
            order = list(variants)
            order = order[round_ % len(order):] + order[:round_ % len(order)]  # each first in turn
            for key in order:
                times[key].append(timed(variants[key]))
        medians = {key: statistics.median(values) for key, values in times.items()}
        rows.append((name, size, medians))
        print(f"{name}: {size / 1e6:.1f} MB: " + ", ".join(f"{key} {value:.1f} ms" for key, value in medians.items()),
              file=sys.stderr)

lines = [f"CPU: {cpu_isa()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s); medians of {rounds} "
         f"interleaved rounds, file in the page cache.", "",
         "| module | file | `td.load` checked | `td.load(verify=False)` | checked / unchecked | `check_archive` alone "
         "| check's speed | `torch.jit.load` |",
         "|---|---|---|---|---|---|---|---|"]
for name, size, medians in rows:
    checked, unchecked, alone = medians["td.load (checked)"], medians["td.load(verify=False)"], medians["check_archive alone"]
    lines.append(f"| {name} | {size / 1e6:.1f} MB | {checked:.1f} ms | {unchecked:.1f} ms | {checked / unchecked:.2f} × | "
                 f"{alone:.1f} ms | {size / alone / 1e6:.1f} GB/s | {medians['torch.jit.load']:.1f} ms |")
text = "\n".join(lines) + "\n"
print(text)

if out_path:
    begin, end = "<!-- load check table -->\n", "<!-- end load check table -->"
    with open(out_path) as source:
        doc = source.read()
    if begin not in doc or end not in doc:
        raise SystemExit(f"load_check: {out_path} has no '{begin.strip()}' ... '{end}' markers")
    stamp = f"<!-- written by bench/load_check.py on {time.strftime('%Y-%m-%d')} -->\n"
    with open(out_path, "w") as out:
        out.write(doc[:doc.index(begin) + len(begin)] + stamp + text + doc[doc.index(end):])
