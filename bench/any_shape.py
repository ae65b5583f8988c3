"""A model lowered once, served at every shape: torch-delegate against ONNX Runtime with dynamic axes.

Each model is lowered once at its example shape (batch 1) as the README's recipe lowers it
(lower(scripted, ["onednn", "xnnpack", "pointwise_fusion"], partial=True, example_inputs=(x,),
measure=True, choose_order=True), with the default on_other_shapes="automatic"; the memory
children find the parent's measurements in the timing cache), and exported once to ONNX (opset 14) with its
batch, image or sequence axes dynamic, run by ONNX Runtime in a process of its own
(bench/ort_runner.js). Then, per shape: both outputs compared with eager's, the first call of
ours at that shape (it plans the shape) against its steady time, and the steady times of ours and
ORT's interleaved as bench/ort_models.py interleaves them (round after round, the order drawn
anew, each block's first call dropped; medians). Same threads (2 unless TD_BENCH_THREADS).

Memory: per model, two fresh processes lower it and run ours alone, one at the largest shape only,
one cycling through every shape 10 times; their peak RSS while serving (VmHWM, reset after the
lowering: /proc/self/clear_refs) are compared: what keeping a plan per shape costs beyond what
the largest shape needs.

Usage: PYTHONPATH=<build>/python bench/any_shape.py <build> [<doc.md>] [--quick] [--models a,b,...] [--json out.json]
                                                   [--rows run.json]  (a saved run's times: memory measured again)
(the table goes between the doc's `<!-- any shape table -->` and `<!-- end any shape table -->` lines)
ORT is looked for in $TD_ORT_NODE_MODULES, else <build>/ort/node_modules (npm install
--ignore-scripts onnxruntime-node there).
"""
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
options = sys.argv[1:]
VALUED = ("--models", "--json", "--memory", "--mode", "--rows")
args = [a for i, a in enumerate(options) if not a.startswith("--") and (i == 0 or options[i - 1] not in VALUED)]


def option(name, default=None):
    return options[options.index(name) + 1] if name in options else default


build = args[0]
doc_path = args[1] if len(args) > 1 else None
quick = "--quick" in options
threads = int(os.environ.get("TD_BENCH_THREADS", "2"))
if os.path.isdir(OPENBLAS) and os.environ.get("TD_BENCH_BLAS") is None:  # LibTorch's Linears on OpenBLAS, as ort_models.py
    env = dict(os.environ, TD_BENCH_BLAS="openblas",
               LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else ""))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from ort_process import OrtProcess, interleaved_medians, local_timer  # noqa: E402

torch.set_num_threads(threads)
import torch_delegate  # noqa: E402

for backend in ("xnnpack", "onednn", "pointwise_fusion"):
    torch_delegate.load_backend(backend)
RECIPE = ["onednn", "xnnpack", "pointwise_fusion"]

# Per model: its shapes (the first is the example's) and the axes ONNX Runtime gets as dynamic.
IMAGE_AXES = {0: "batch", 2: "height", 3: "width"}
PLANS = {
    "resnet50": ([(1, 3, 224, 224), (3, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224), (1, 3, 192, 256), (1, 3, 320, 320)], IMAGE_AXES),
    "mobilenet_v2": ([(1, 3, 224, 224), (3, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224), (1, 3, 192, 256), (1, 3, 320, 320)], IMAGE_AXES),
    "efficientnet_b0": ([(1, 3, 224, 224), (3, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224), (1, 3, 192, 256), (1, 3, 320, 320)], IMAGE_AXES),
    "convnext_tiny": ([(1, 3, 224, 224), (3, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224), (1, 3, 192, 256), (1, 3, 320, 320)], IMAGE_AXES),
    "vit_b_16": ([(1, 3, 224, 224), (4, 3, 224, 224), (16, 3, 224, 224)], {0: "batch"}),
    "bert_base_encoder": ([(1, 128, 768), (1, 16, 768), (1, 64, 768), (1, 384, 768), (8, 16, 768), (8, 64, 768), (8, 128, 768),
                           (8, 384, 768)], {0: "batch", 1: "sequence"}),
}
QUICK = {"resnet50": [0, 1, 4], "mobilenet_v2": [0, 2, 5], "efficientnet_b0": [0, 1, 4], "convnext_tiny": [0, 1, 4],
         "vit_b_16": [0, 1], "bert_base_encoder": [0, 1, 2, 4]}


def model_and_shapes(name):
    model, x = models.model_and_input(name)
    shapes, axes = PLANS[name]
    if quick:
        shapes = [shapes[k] for k in QUICK[name]]
    assert tuple(x.shape) == shapes[0]
    return model, shapes, axes


def recipe(model, example):
    return torch_delegate.lower(torch.jit.script(model), RECIPE, partial=True, example_inputs=(example,), measure=True,
                                choose_order=True)


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS (Linux 4.0 and later)


def peak_rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_child(name, mode):
    """In a fresh process: lower `name`, then run ours at the largest shape only ("one") or through
    every shape 10 times ("all"); the peak RSS (MB)."""
    model, shapes, _ = model_and_shapes(name)
    low = recipe(model, torch.rand(*shapes[0]))
    del model
    largest = max(shapes, key=math.prod)
    inputs = {shape: torch.rand(*shape) for shape in shapes}
    import gc
    gc.collect()
    reset_peak_rss()  # what serving takes, not what measuring the partition took
    with torch.no_grad():
        for _ in range(10):
            for shape in ([largest] if mode == "one" else shapes):
                low(inputs[shape])
    return peak_rss_mb()


if option("--memory"):  # the child of memory()
    print(json.dumps(memory_child(option("--memory"), option("--mode"))))
    sys.exit(0)


def memory(name):
    def run(mode):
        command = [sys.executable, __file__, build, "--memory", name, "--mode", mode] + (["--quick"] if quick else [])
        return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    return {"one_mb": run("one"), "all_mb": run("all")}


def export_dynamic(name, model, x, axes, workdir):
    """The model exported once (opset 14) with `axes` of its input dynamic: ORT runs every shape."""
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(model, (x,), path, opset_version=14, input_names=["x"], dynamic_axes={"x": axes})
    return path


def relative_error(got, want):
    return float((got - want).abs().max() / max(float(want.abs().max()), 1e-6))


def run_model(name, ort):
    model, shapes, axes = model_and_shapes(name)
    example = torch.rand(*shapes[0])
    low = recipe(model, example)
    if not ort.error:
        ort.load(name, export_dynamic(name, model, example, axes, ort.workdir), example)
    rows = []
    for shape in shapes:
        x = torch.rand(*shape)
        with torch.no_grad():
            want = model(x)
            start = time.perf_counter()
            got = low(x)
            first = time.perf_counter() - start
        row = {"model": name, "shape": list(shape), "first_s": first, "error": relative_error(got, want)}
        timers = {"ours": local_timer(low, x)}
        if not ort.error:
            row["ort_error"] = relative_error(ort.feed(name, x), want)
            timers["ort"] = ort.timer()
        row.update({f"{k}_s": v for k, v in interleaved_medians(timers, quick).items()})
        rows.append(row)
        ratio = f", {row['ort_s'] / row['ours_s']:.2f}x ORT" if "ort_s" in row else ""
        print(f"{name} {list(shape)}: ours {1e3 * row['ours_s']:.1f} ms{ratio}; first call {row['first_s'] / row['ours_s']:.1f}x "
              f"steady; error {row['error']:.1e}", flush=True)
    return rows


def table(header, rows, memories):
    """The doc's table: per (model, shape), ours, ORT, the ratio, the first call; per model, memory."""
    lines = [header, "", "| model | shape | ours (ms) | ORT (ms) | ORT / ours | first call / steady | error (ours, ORT) |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ort = f"{1e3 * row['ort_s']:.1f}" if "ort_s" in row else "-"
        ratio = f"**{row['ort_s'] / row['ours_s']:.2f}x**" if "ort_s" in row else "-"
        errors = f"{row['error']:.0e}, {row['ort_error']:.0e}" if "ort_error" in row else f"{row['error']:.0e}"
        lines.append(f"| {row['model']} | {'x'.join(map(str, row['shape']))} | {1e3 * row['ours_s']:.1f} | {ort} | {ratio} | "
                     f"{row['first_s'] / row['ours_s']:.1f}x | {errors} |")
    ratios = [row["ort_s"] / row["ours_s"] for row in rows if "ort_s" in row]
    if ratios:
        lines += ["", f"Geometric mean **{math.exp(statistics.mean(map(math.log, ratios))):.2f}x** ONNX Runtime over "
                      f"{len(ratios)} (model, shape) pairs; lowest {min(ratios):.2f}x."]
    lines += ["", "| model | peak RSS, the largest shape alone (MB) | after every shape 10 times (MB) | ratio |", "|---|---|---|---|"]
    for name, m in memories.items():
        lines.append(f"| {name} | {m['one_mb']:.0f} | {m['all_mb']:.0f} | {m['all_mb'] / m['one_mb']:.2f}x |")
    return "\n".join(lines)


def write_table(text):
    begin, end = "<!-- any shape table -->", "<!-- end any shape table -->"
    doc = open(doc_path).read()
    if begin not in doc or end not in doc:
        sys.exit(f"any_shape: {doc_path} has no {begin} ... {end} lines")
    head, rest = doc.split(begin, 1)
    open(doc_path, "w").write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def main():
    import tempfile
    names = option("--models", ",".join(PLANS)).split(",")
    workdir = tempfile.mkdtemp(prefix="any_shape.")
    ort = OrtProcess(build, workdir, threads)
    print(f"# {models.machine_line()}; {threads} threads; torch {torch.__version__}; "
          f"ORT: {ort.error or 'onnxruntime-node'}", flush=True)
    rows, memories = [], {}
    run = json.load(open(option("--rows"))) if option("--rows") else None
    saved = run["rows"] if run else None
    if run:
        ort.version = run["ort"]
    for name in names:
        rows.extend([row for row in saved if row["model"] == name] if saved is not None else run_model(name, ort))
        memories[name] = memory(name)
        m = memories[name]
        print(f"{name}: peak RSS {m['all_mb']:.0f} MB after every shape 10 times, {m['one_mb']:.0f} MB after the largest alone "
              f"({m['all_mb'] / m['one_mb']:.2f}x)", flush=True)
    ratios = [row["ort_s"] / row["ours_s"] for row in rows if "ort_s" in row]
    if ratios:
        print(f"# geometric mean {math.exp(statistics.mean(map(math.log, ratios))):.2f}x ORT over {len(ratios)} (model, shape) "
              f"pairs; lowest {min(ratios):.2f}x; ORT {ort.version}")
    header = (f"{models.machine_line()}; {threads} threads; LibTorch {torch.__version__}; ONNX Runtime {ort.version or '-'} "
              f"(onnxruntime-node); {time.strftime('%Y-%m-%d')}; bench/any_shape.py{' --quick' if quick else ''}")
    if doc_path:
        write_table(table(header, rows, memories))
    if option("--json"):
        with open(option("--json"), "w") as out:
            json.dump({"machine": models.machine_line(), "threads": threads, "ort": ort.version, "rows": rows, "memory": memories},
                      out, indent=1)
    ort.close()


if __name__ == "__main__":
    main()
