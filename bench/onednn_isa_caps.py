"""oneDNN under ISA caps (issue 37): torchvision's CNNs lowered to ["onednn"] against
torch.jit.optimize_for_inference(freeze(script)) (LibTorch's oneDNN path), at each
ONEDNN_MAX_CPU_ISA cap: SSE41, AVX2 and the machine's own (no cap) when it is higher. oneDNN picks
its kernels by ISA, and a plan that is fast at one cap can get reference kernels at another: each
cap runs in a process of its own (the cap is read when the first primitive is made, and it caps
LibTorch's oneDNN too: the same libdnnl.so.2). Batch 1, 3x224x224, torch.set_num_threads(2),
OpenBLAS for LibTorch's Linears (LD_LIBRARY_PATH, as bench/run does), interleaved rounds (each
variant once per round), medians. Also counts the reference kernels (is_reference) in each plan,
from the backend's debug query.

Usage: PYTHONPATH=<build>/python bench/onednn_isa_caps.py <libonednn_backend.so> [--rounds N] [--models a,b,...]
       [--threads N] (2 by default; OpenMP's spinning threads make 2-thread figures meaningless on a
       machine loaded beyond its cores: the load average is printed with the table)
Prints a Markdown table (docs/performance.md, "oneDNN under ISA caps (issue 37)").
"""
import json
import os
import statistics
import subprocess
import sys
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
MODELS = ["mobilenet_v2", "resnet18", "efficientnet_b0", "mobilenet_v3_small", "regnet_y_400mf", "squeezenet1_0",
          "shufflenet_v2_x1_0", "resnet50"]


def cpu_isa():
    """The widest x86 vector ISA /proc/cpuinfo lists, and its AVX-512 extensions."""
    flags = set()
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    if "avx512f" in flags:
        extensions = "/".join(f[len("avx512"):] for f in sorted(flags) if f.startswith("avx512") and f != "avx512f")
        return "AVX-512 (avx512f" + ("/" + extensions if extensions else "") + ")", model, True
    if "avx2" in flags:
        return "AVX2" + (" + FMA" if "fma" in flags else ""), model, False
    return "SSE4.1" if "sse4_1" in flags else "older than SSE4.1", model, False


def child(library, models, rounds, threads):
    """One cap (set by the parent in the environment): every model, interleaved, medians in ms."""
    import torch
    import torchvision
    import torch_delegate
    from torch_delegate import _C  # noqa: F401  (the extension, before the backend's library)
    torch.ops.load_library(library)
    torch.set_num_threads(threads)
    results = {}
    for name in models:
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.rand(1, 3, 224, 224)
        scripted = torch.jit.script(model)
        reference = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(model)))
        lowered = torch_delegate.lower(scripted, ["onednn"], partial=True, example_inputs=(x,))
        variants = {"optimize_for_inference": reference, "onednn": lowered}
        times = {key: [] for key in variants}
        with torch.no_grad():
            for fn in variants.values():
                for _ in range(3):
                    fn(x)
            for _ in range(rounds):
                for key, fn in variants.items():
                    start = time.perf_counter()
                    fn(x)
                    times[key].append((time.perf_counter() - start) * 1e3)
        try:
            plan = torch.ops.torch_delegate_onednn.plan_implementations(lowered._c)
        except (AttributeError, RuntimeError):  # a library from before issue 37 (to compare): no query
            plan = [("", "", "", "?", "(no query)")]
        ref = sorted({f"{kind} {impl}" for _, _, _, kind, impl in plan
                      if impl == "(no query)" or any(part.startswith("ref") for part in impl.split(":"))})
        aten = sum(1 for _, _, _, _, impl in plan if impl.startswith("aten::"))
        results[name] = {key: statistics.median(v) for key, v in times.items()}
        results[name].update(regions=len(torch_delegate.report(lowered).methods[0].regions), reference=ref, aten=aten)
    print(json.dumps(results))


def main():
    library = sys.argv[1]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 30
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
    models = sys.argv[sys.argv.index("--models") + 1].split(",") if "--models" in sys.argv else MODELS
    isa, cpu, avx512 = cpu_isa()
    caps = ["SSE41", "AVX2"] + (["(none: AVX-512)"] if avx512 else [])
    env = dict(os.environ, LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else ""))
    load = os.getloadavg()[0]
    print(f"CPU: {cpu}; ISA: {isa}; batch 1, 3x224x224, {threads} threads, OpenBLAS, {rounds} interleaved rounds, median ms; "
          f"load average {load:.1f} on {os.cpu_count()} cores at the start\n")
    print("| cap | model | optimize_for_inference | onednn | ratio (ofi / onednn) | regions | reference kernels | steps in ATen |")
    print("|---|---|---|---|---|---|---|---|")
    for cap in caps:
        cap_env = dict(env)
        cap_env.pop("ONEDNN_MAX_CPU_ISA", None)
        if not cap.startswith("("):
            cap_env["ONEDNN_MAX_CPU_ISA"] = cap
        out = subprocess.run([sys.executable, __file__, "--child", library, ",".join(models), str(rounds), str(threads)], env=cap_env,
                             check=True, capture_output=True, text=True).stdout
        results = json.loads(out.strip().splitlines()[-1])
        for name in models:
            r = results[name]
            ratio = r["optimize_for_inference"] / r["onednn"]
            print(f"| {cap} | {name} | {r['optimize_for_inference']:.2f} | {r['onednn']:.2f} | {ratio:.2f}x | {r['regions']} | "
                  f"{', '.join(r['reference']) or 'none'} | {r['aten']} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
