"""A picture of a partition: a partially lowered method's graph in Graphviz's dot language, each
region one box (its node count, kinds, line and backend) inside a cluster coloured by its
backend, each node kept in TorchScript grey with its reason (each backend's, where the backends
of a list give different ones). Regions are drawn collapsed, so a method of ten thousand nodes
stays readable: its picture has as many boxes as it has regions and kept nodes. svg() renders
with Graphviz's dot program (Debian: graphviz)."""
from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Dict, List, Optional

import torch

if TYPE_CHECKING:
    from . import Report

# Fill colours by backend, in order of first appearance (colour-blind friendly, light enough for
# black text).
_PALETTE = ["#8ecae6", "#ffb703", "#90be6d", "#f4a3c0", "#cdb4db", "#f9c74f", "#a8dadc", "#e9c46a"]
KEPT_COLOUR = "#d9d9d9"
# Nodes not drawn: constants and attribute reads feed other nodes, and would double the picture.
_HIDDEN = {"prim::Constant", "prim::GetAttr"}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _short(kind: str) -> str:
    return kind.split("::", 1)[-1]


def backend_colours(report: "Report") -> Dict[str, str]:
    colours: Dict[str, str] = {}
    for method in report.methods:
        for region in method.regions:
            if region.backend and region.backend not in colours:
                colours[region.backend] = _PALETTE[len(colours) % len(_PALETTE)]
    return colours


def _region_label(region, backend: str) -> str:
    kinds = ", ".join(_short(kind) for kind in region.kinds[:6]) + (", ..." if len(region.kinds) > 6 else "")
    lines = [f"{region.name}", f"{backend}: {region.node_count} nodes", kinds]
    if region.location:
        lines.append(region.location)
    if region.backend_ms >= 0:
        lines.append(f"{region.backend_ms:.3g} ms (TorchScript {region.torchscript_ms:.3g} ms)")
    return "\n".join(lines)


def to_dot(report: "Report", module: Optional[torch.jit.ScriptModule] = None) -> str:
    """The report as a dot graph. With `module` (the partially lowered module the report is of),
    each method's graph: regions and kept nodes with their data edges. Without it, each method's
    regions and kept nodes in the report's order, without edges."""
    colours = backend_colours(report)
    out: List[str] = ["digraph partition {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
                      '  graph [fontname="Helvetica", fontsize=11];']
    for m, method in enumerate(report.methods):
        out.append(f"  subgraph cluster_method_{m} {{")
        out.append(f"    label={_quote(f'{report.module}.{method.method}' if report.module else method.method)}; style=dashed;")
        regions = {region.name: region for region in method.regions}
        kept_by_kind: Dict[str, list] = {}
        for node in method.kept:
            kept_by_kind.setdefault(node.kind, []).append(node)
        graph = None
        if module is not None:
            try:
                graph = module._c._get_method(method.method).graph
            except RuntimeError:
                graph = None
        if graph is None:
            _summary(out, m, method, colours)
        else:
            _graph(out, m, graph, regions, kept_by_kind, colours)
        out.append("  }")
    # The legend: one box per backend, and the kept colour.
    out.append("  subgraph cluster_legend {")
    out.append('    label="backends"; style=dotted;')
    for b, (backend, colour) in enumerate(colours.items()):
        out.append(f"    legend_{b} [label={_quote(backend)}, fillcolor={_quote(colour)}];")
    out.append(f'    legend_kept [label="kept in TorchScript", fillcolor={_quote(KEPT_COLOUR)}];')
    out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"


def _disagreeing(node) -> list:
    """Each backend's reason for a kept node when they are not all its primary reason (as the
    text report, which then gives one line per backend); [] when one reason says it."""
    per_backend = getattr(node, "per_backend", [])
    if all((each.reason, each.detail) == (node.reason, node.detail) for each in per_backend):
        return []
    return per_backend


def _kept_attributes(node, kind: str) -> str:
    where = f"\n{node.location}" if node.location else ""
    reasons = _disagreeing(node)
    if reasons:
        # The label: each backend's reason, one line each; the tooltip adds their details.
        label = f"{_short(kind)}\n" + "\n".join(f"{each.backend}: {each.reason}" for each in reasons) + where
        tooltip = f"{kind}" + (f" at {node.location}" if node.location else "") + ":" + "".join(
            f"\n{each.backend}: {each.reason}" + (f" ({each.detail})" if each.detail else "") for each in reasons)
    else:
        label = f"{_short(kind)}\n{node.reason}" + where
        tooltip = f"{kind}: {node.reason}" + (f" ({node.detail})" if node.detail else "")
        if node.location:
            tooltip += f" at {node.location}"
    return f"label={_quote(label)}, tooltip={_quote(tooltip)}, fillcolor={_quote(KEPT_COLOUR)}"


def _region_cluster(out: List[str], node_id: str, region, colours: Dict[str, str], indent: str) -> None:
    backend = region.backend or "?"
    colour = colours.get(backend, _PALETTE[0])
    out.append(f"{indent}subgraph cluster_{node_id} {{")
    out.append(f"{indent}  label={_quote(backend)}; style=filled; color={_quote(colour)}; fillcolor={_quote(colour + '55')};")
    tooltip = f"{region.name} on {backend}: {region.node_count} nodes: " + ", ".join(region.kinds)
    if region.submodule:
        tooltip += f" (submodule {region.submodule})"
    for conversion in region.conversions:
        tooltip += f"; {conversion}"
    out.append(f"{indent}  {node_id} [label={_quote(_region_label(region, backend))}, tooltip={_quote(tooltip)}, "
               f"fillcolor={_quote(colour)}, penwidth=2];")
    out.append(f"{indent}}}")


def _summary(out: List[str], m: int, method, colours: Dict[str, str]) -> None:
    for r, region in enumerate(method.regions):
        _region_cluster(out, f"m{m}_r{r}", region, colours, "    ")
    for k, node in enumerate(method.kept):
        out.append(f"    m{m}_k{k} [{_kept_attributes(node, node.kind)}];")


def _graph(out: List[str], m: int, graph, regions, kept_by_kind, colours: Dict[str, str]) -> None:
    ids: Dict[str, str] = {}  # a value's debug name -> the drawn node that makes it
    taken: Dict[str, int] = {}
    counter = [0]

    def new_id() -> str:
        counter[0] += 1
        return f"m{m}_n{counter[0]}"

    inputs = [value for value in graph.inputs()][1:]  # not self
    if inputs:
        node_id = new_id()
        names = ", ".join(value.debugName() for value in inputs)
        out.append(f'    {node_id} [label={_quote("inputs: " + names)}, shape=oval, fillcolor="white"];')
        for value in inputs:
            ids[value.debugName()] = node_id

    def walk(block, indent: str) -> None:
        for node in block.nodes():
            kind = node.kind()
            if kind in _HIDDEN:
                continue
            node_id = new_id()
            region = regions.get(node.s("name")) if kind == "prim::CallMethod" and node.hasAttribute("name") else None
            if region is not None:
                _region_cluster(out, node_id, region, colours, indent)
            else:
                queue = kept_by_kind.get(kind, [])
                index = taken.get(kind, 0)
                if index < len(queue):
                    taken[kind] = index + 1
                    out.append(f"{indent}{node_id} [{_kept_attributes(queue[index], kind)}];")
                else:  # a node the lowering made (a conversion, a region's bookkeeping): not in the report
                    out.append(f"{indent}{node_id} [label={_quote(_short(kind))}, fillcolor=\"white\"];")
            for value in node.inputs():
                source = ids.get(value.debugName())
                if source and source != node_id:
                    out.append(f"{indent}{source} -> {node_id};")
            for value in node.outputs():
                ids[value.debugName()] = node_id
            for b, inner in enumerate(node.blocks()):
                out.append(f"{indent}subgraph cluster_{node_id}_b{b} {{")
                out.append(f"{indent}  label={_quote(f'{_short(kind)} block {b}')}; style=dotted;")
                walk(inner, indent + "  ")
                out.append(f"{indent}}}")

    walk(graph.block(), "    ")
    outputs = [value for value in graph.outputs()]
    if outputs:
        node_id = new_id()
        out.append(f'    {node_id} [label="return", shape=oval, fillcolor="white"];')
        for value in outputs:
            source = ids.get(value.debugName())
            if source:
                out.append(f"    {source} -> {node_id};")


def svg(dot: str) -> str:
    """`dot` rendered as SVG by Graphviz's dot program."""
    program = shutil.which("dot")
    if program is None:
        raise RuntimeError("torch_delegate: drawing needs Graphviz's dot program (Debian: apt-get install graphviz)")
    done = subprocess.run([program, "-Tsvg"], input=dot, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"torch_delegate: Graphviz's dot failed: {done.stderr.strip()}")
    return done.stdout
