#!/usr/bin/python3
"""Turns bench/run's measurements into one table (stdout and docs/performance.md) and a plot."""
import json
import pathlib
import platform
import subprocess
import sys

results, doc_path, picture_path = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
bench = json.loads((results / "bench.json").read_text())
memory = json.loads((results / "memory.json").read_text())
compile_cost = json.loads((results / "compile.json").read_text())
instructions = json.loads((results / "instructions.json").read_text())


def figure(name, field="real_time"):
    """The median over repetitions of one benchmark, in ns (or items/s for field=items_per_second)."""
    for run in bench["benchmarks"]:
        if run["run_name"] == name and run.get("aggregate_name") == "median":
            value = run[field]
            if field == "real_time":
                value *= {"ns": 1, "us": 1e3, "ms": 1e6}[run["time_unit"]]
            return value
    raise SystemExit(f"no median for {name}")


bare = figure("BM_call_bare_aten_add")
scripted = figure("BM_call_scripted_original")
up_call, our_call = figure("BM_call_interpreter_upstream"), figure("BM_call_interpreter_ours")
region_call = figure("BM_call_region_ours")
typed, direct = figure("BM_call_typed_ours"), figure("BM_call_direct_execute")
up_first, our_first = figure("BM_lower_first_upstream"), figure("BM_lower_first_ours")
up_second, our_second = figure("BM_lower_second_upstream"), figure("BM_lower_second_ours")
up_load, our_load = figure("BM_load_upstream"), figure("BM_load_ours")
up_load_after, our_load_after = figure("BM_load_upstream_after_lowering"), figure("BM_load_ours_after_lowering")
threads = {n: (figure(f"BM_threads_interpreter_upstream/real_time/threads:{n}", "items_per_second"),
               figure(f"BM_threads_interpreter_ours/real_time/threads:{n}", "items_per_second"),
               figure(f"BM_threads_typed_ours/real_time/threads:{n}", "items_per_second")) for n in (1, 2, 4)}
backend_tu, baseline_tu = compile_cost["compile_backend_tu_s"], compile_cost["compile_baseline_tu_s"]
backend_compiled_tu = compile_cost["compile_backend_compiled_tu_s"]
profile_backend_compiled = compile_cost["profile_backend_compiled_tu"]
up_add_tu, our_add_tu = compile_cost["compile_upstream_add_tu_s"], compile_cost["compile_ours_add_tu_s"]
runtime_tu = compile_cost.get("compile_runtime_tu_s", float("nan"))  # runs before issue 26 did not time it
profile_backend, profile_baseline = compile_cost["profile_backend_tu"], compile_cost["profile_baseline_tu"]
up_mem, our_mem = memory["memory_bytes_per_module_upstream"], memory["memory_bytes_per_module_ours"]
up_heap, our_heap = memory["heap_bytes_per_module_upstream"], memory["heap_bytes_per_module_ours"]


def us(ns):
    return f"{ns / 1e3:.2f} µs"


def ms(ns):
    return f"{ns / 1e6:.3f} ms"


def check(ok):
    return "met" if ok else "**missed**"


up_overhead, our_overhead = up_call - bare, our_call - bare
rows = [
    ("call via interpreter (`module.forward`)", us(up_call), us(our_call), f"{our_call / up_call:.2f}", "", ""),
    ("interpreter overhead (call − bare `at::add`)", us(up_overhead), us(our_overhead),
     f"{our_overhead / up_overhead:.2f}", "≤ 0.5", check(our_overhead <= 0.5 * up_overhead)),
    ("a region's call overhead (partial lowering) / the whole-method path's", "",
     f"{us(region_call - bare)} vs {us(our_overhead)}", f"{(region_call - bare) / our_overhead:.2f}", "≤ 1.2",
     check(region_call - bare <= 1.2 * our_overhead)),
    ("original scripted module call / bare `at::add`", us(scripted), us(bare), "", "(reference)", ""),
    ("typed C++ call − direct `execute`", "", f"{typed - direct:.0f} ns ({us(typed)} vs {us(direct)})", "",
     "≤ 50 ns", check(typed - direct <= 50)),
    ("lowering, module of a new class", ms(up_first), ms(our_first), f"{our_first / up_first:.2f}", "", ""),
    ("lowering, second module of the same class", ms(up_second), ms(our_second), f"{our_second / up_second:.3f}",
     "≤ 0.1", check(our_second <= 0.1 * up_second)),
    ("`torch::jit::load` of the saved module", ms(up_load), ms(our_load), f"{our_load / up_load:.2f}", "≤ 0.8",
     check(our_load <= 0.8 * up_load)),
    ("… the same, after the lowering benchmarks in the same process", ms(up_load_after), ms(our_load_after),
     f"{our_load_after / up_load_after:.2f}", "", ""),
]
for n, (up, ours, typed_rate) in threads.items():
    rows.append((f"calls/s, {n} thread{'s' if n > 1 else ''} on one module (interpreter; typed C++)",
                 f"{up / 1e3:.0f} k", f"{ours / 1e3:.0f} k; {typed_rate / 1e3:.0f} k", f"{ours / up:.2f}", "", ""))
rows += [
    ("compile a backend TU / a TU with only `torch/script.h` (-O2), header-only", "",
     f"{backend_tu:.1f} s / {baseline_tu:.1f} s", f"{backend_tu / baseline_tu:.2f}", "≤ 1.5", check(backend_tu <= 1.5 * baseline_tu)),
    ("… the same TU, separately compiled (`TORCH_DELEGATE_SEPARATE_COMPILATION`)", "",
     f"{backend_compiled_tu:.1f} s / {baseline_tu:.1f} s", f"{backend_compiled_tu / baseline_tu:.2f}", "≤ 1.3",
     check(backend_compiled_tu <= 1.3 * baseline_tu)),
    ("… of which parsing + templates; optimisation + code generation (GCC `-ftime-report`): header-only; separately compiled; baseline", "",
     f"{profile_backend['parse_s']:.1f} s + {profile_backend['codegen_s']:.1f} s; "
     f"{profile_backend_compiled['parse_s']:.1f} s + {profile_backend_compiled['codegen_s']:.1f} s; "
     f"{profile_baseline['parse_s']:.1f} s + {profile_baseline['codegen_s']:.1f} s", "", "(profile)", ""),
    ("compile the add backend's TU, registration included (-O2)", f"{up_add_tu:.1f} s", f"{our_add_tu:.1f} s",
     f"{our_add_tu / up_add_tu:.2f}", "", ""),
    ("… its runtime half alone (`runtime.hpp`, `register_runtime`, `load`; a target binary's TU) / baseline", "",
     f"{runtime_tu:.1f} s / {baseline_tu:.1f} s", f"{runtime_tu / baseline_tu:.2f}", "(reference)", ""),
    (f"resident bytes added per lowered module ({memory['modules']} modules)", f"{up_mem / 1024:.1f} KiB",
     f"{our_mem / 1024:.1f} KiB", f"{our_mem / up_mem:.2f}", "", ""),
    ("heap bytes in use per lowered module (mallinfo2)", f"{up_heap / 1024:.1f} KiB", f"{our_heap / 1024:.1f} KiB",
     f"{our_heap / up_heap:.2f}", "", ""),
]
if "error" in instructions:
    rows.append(("instructions (callgrind)", "", f"not measured in this run: valgrind failed ({instructions['error']})",
                 "", "", ""))
else:
    ins = instructions
    ins_overhead_up = ins["interpreter_upstream"] - ins["bare_aten_add"]
    ins_overhead_ours = ins["interpreter_ours"] - ins["bare_aten_add"]
    rows += [
        ("instructions: interpreter overhead per call (callgrind)", f"{ins_overhead_up:,.0f}", f"{ins_overhead_ours:,.0f}",
         f"{ins_overhead_ours / ins_overhead_up:.2f}", "≤ 0.5", check(ins_overhead_ours <= 0.5 * ins_overhead_up)),
        ("instructions: a region's call overhead / the whole-method path's", "",
         f"{ins['region_ours'] - ins['bare_aten_add']:,.0f} vs {ins_overhead_ours:,.0f}",
         f"{(ins['region_ours'] - ins['bare_aten_add']) / ins_overhead_ours:.2f}", "≤ 1.2",
         check(ins["region_ours"] - ins["bare_aten_add"] <= 1.2 * ins_overhead_ours)),
        ("instructions: typed C++ call − direct `execute`", "", f"{ins['typed_ours'] - ins['direct_execute']:,.0f}", "", "", ""),
        ("instructions: `torch::jit::load` of the saved module", f"{ins['load_upstream']:,.0f}", f"{ins['load_ours']:,.0f}",
         f"{ins['load_ours'] / ins['load_upstream']:.2f}", "≤ 0.8", check(ins["load_ours"] <= 0.8 * ins["load_upstream"])),
        ("instructions: lowering a second module of the same class", f"{ins['lower_second_upstream']:,.0f}",
         f"{ins['lower_second_ours']:,.0f}", f"{ins['lower_second_ours'] / ins['lower_second_upstream']:.3f}", "≤ 0.1",
         check(ins["lower_second_ours"] <= 0.1 * ins["lower_second_upstream"])),
    ]


for nodes in (1000, 10000):
    plan_ms = figure(f"BM_partition_plan/{nodes}") / 1e6
    lower_ms = figure(f"BM_partition_lower/{nodes}") / 1e6
    rows.append((f"partial lowering, a method of {nodes:,} nodes ({nodes // 100} regions): dry run; whole lowering", "",
                 f"{plan_ms:.1f} ms; {lower_ms:.1f} ms", "", "partitioning ≤ 1 s" if nodes == 10000 else "",
                 check(plan_ms <= 1000) if nodes == 10000 else ""))
header = "| figure | upstream to_backend | torch-delegate | ours / upstream | target | |\n|---|---|---|---|---|---|\n"
table = header + "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"
compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
context = bench["context"]
note = (f"\nMeasured by `bench/run` on {context['date'][:10]}: {context['num_cpus']} CPUs at {context['mhz_per_cpu']} MHz, "
        f"{platform.platform()}, {compiler}, LibTorch 1.13.1 (Debian), release build; medians of 3 repetitions, "
        f"1-element float tensors.\n")
print(table + note)

doc = doc_path.read_text()
begin, end = "<!-- bench-table:begin -->\n", "<!-- bench-table:end -->"
if begin in doc and end in doc:
    doc = doc[:doc.index(begin) + len(begin)] + table + note + doc[doc.index(end):]
    doc_path.write_text(doc)

import matplotlib  # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

labels = ["interpreter\noverhead", "lowering\n(same class)", "load", "lowering\n(new class)", "heap\nper module"]
ratios = [our_overhead / up_overhead, our_second / up_second, our_load / up_load, our_first / up_first, our_heap / up_heap]
targets = [0.5, 0.1, 0.8, None, None]
fig, ax = plt.subplots(figsize=(8, 3.4))
bars = ax.bar(labels, ratios, color="#2b7bb9")
for bar, ratio, target in zip(bars, ratios, targets):
    ax.text(bar.get_x() + bar.get_width() / 2, ratio + 0.02, f"{ratio:.2f}", ha="center")
    if target:
        ax.hlines(target, bar.get_x(), bar.get_x() + bar.get_width(), colors="#c0392b", linestyles="dashed")
ax.axhline(1.0, color="#9aa5b1", linewidth=1)
ax.set_ylabel("torch-delegate / upstream")
ax.set_title("lower is better; dashed: target; grey: upstream")
fig.tight_layout()
fig.savefig(picture_path, dpi=110)
