"""torch_delegate from Python: lower TorchScript modules to torch-delegate backends, partially or
whole, read the delegation report, and load lowered modules with a check that the file is what was
saved (every record's CRC32) and that their backends are registered.

A backend is a C++ library built with torch-delegate; load it first, as any TorchScript extension:

    import torch, torch_delegate
    torch.ops.load_library("libpointwise_fusion.so")
    scripted = torch.jit.script(MyModel())
    lowered = torch_delegate.lower(scripted, "pointwise_fusion", partial=True)
    print(torch_delegate.report(lowered))
    lowered.save("model.pt")

See docs/python.md.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import torch

from . import _C
from ._backends import ENTRY_POINT_GROUP, InstalledBackend, available_backends, load_backend
from ._backends import require_registered as _require_registered

__all__ = [
    "Backend",
    "BackendReason",
    "ENTRY_POINT_GROUP",
    "Error",
    "InstalledBackend",
    "KeptNode",
    "MethodReport",
    "OptionInfo",
    "Region",
    "Report",
    "TensorSpec",
    "available_backends",
    "backends",
    "backends_needed",
    "check_archive",
    "load",
    "load_backend",
    "lower",
    "plan",
    "report",
]

__version__: str = _C.version  #: the version of torch-delegate this package and its extension are

#: The error torch-delegate raises (a RuntimeError), with the text of the C++ error: what was
#: wrong, where (backend, method, the model's source line), what was expected and what given.
Error = _C.Error


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One compile option of a backend."""

    key: str
    type: str  #: its TorchScript type, e.g. "int", "List[float]"
    required: bool
    default: Any  #: the default options' value; None when required


@dataclasses.dataclass(frozen=True)
class Backend:
    """A torch-delegate backend registered in this process."""

    name: str
    type: str  #: the backend's C++ type
    available: bool  #: whether this process can compile and execute for it (is_available())
    partial: bool  #: whether it can lower partially (it declares supports(node))
    options_form: str  #: "typed" (options below), "raw" (any value, passed as given) or "none"
    options: List[OptionInfo]
    signatures: List[str]  #: its execute signatures


@dataclasses.dataclass(frozen=True)
class Region:
    """One delegated region of a method."""

    name: str  #: its method in the delegate child module, e.g. "forward_region_0"
    node_count: int  #: nodes, constants not counted
    kinds: List[str]  #: distinct node kinds, in order of first appearance
    location: str  #: "model.py:12": the model's own line (not PyTorch's torch/nn/...) of its first node, or ""
    depth: int  #: 0: the method's body; 1: inside an if/loop body; ...
    submodule: str = ""  #: the submodule all its nodes come from, e.g. "features.3.block"; "" for the top
    #: layout conversions placed at its boundary (a channels-last backend), e.g. "input 0 (...): to channels_last on entry"
    conversions: List[str] = dataclasses.field(default_factory=list)
    backend: str = ""  #: the backend that runs it (with several, the first in the list that takes its nodes)
    backend_ms: float = -1.0  #: measured: one call on its backend, in ms (-1: not measured)
    torchscript_ms: float = -1.0  #: measured: one call as TorchScript, in ms (-1: not measured)


@dataclasses.dataclass(frozen=True)
class BackendReason:
    """One backend's reason for not taking a node."""

    backend: str
    reason: str  #: as KeptNode.reason
    detail: str


@dataclasses.dataclass(frozen=True)
class KeptNode:
    """One node that stays in TorchScript, and why."""

    kind: str
    #: "unsupported kind", "excluded by the user", "outside the submodules to lower", "control flow", ...;
    #: with several backends, the reason of the one that got furthest with it (a region refused or
    #: measured slower before an unsupported kind), the first in the list among those that got as far
    reason: str
    detail: str
    location: str  #: "model.py:12": the innermost line of the model's own source, or ""
    depth: int
    submodule: str = ""  #: the submodule it comes from, e.g. "features.3.block.2"; "" for the top
    #: every backend's reason, in the list's order (one with one backend; a report saved before
    #: format 6 has the one reason it saved, as the last backend's)
    per_backend: List[BackendReason] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class MethodReport:
    """What partial lowering does (or did) with one method."""

    method: str
    regions: List[Region]
    kept: List[KeptNode]

    @property
    def delegated_nodes(self) -> int:
        return sum(region.node_count for region in self.regions)


@dataclasses.dataclass(frozen=True)
class Report:
    """The delegation report: per method, its regions and each node kept in TorchScript.

    str(report) is the readable report (the same text as C++'s delegation_report::to_string()).
    A module partially lowered by a build older than this package carries the text only: then
    backend and module are "" and methods is empty.
    """

    backend: str
    module: str
    methods: List[MethodReport]
    text: str

    @property
    def region_count(self) -> int:
        return sum(len(method.regions) for method in self.methods)

    def to_dot(self, module: Optional[torch.jit.ScriptModule] = None) -> str:
        """The partition as a Graphviz dot graph: each region a box in a cluster coloured by its
        backend (its node count, kinds, line, measured times), each kept node grey with its
        reason. With `module`, the partially lowered module this report is of, the method's graph
        with its data edges; without, the report's regions and kept nodes alone."""
        from ._dot import to_dot
        return to_dot(self, module)

    def to_svg(self, module: Optional[torch.jit.ScriptModule] = None) -> str:
        """to_dot() rendered as SVG by Graphviz's dot program (Debian's graphviz)."""
        from ._dot import svg
        return svg(self.to_dot(module))

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What one tensor argument must be when the method is called: its sizes (-1: any size in
    that dimension) and dtype. Backends see it at preprocess; calls that do not match fail."""

    sizes: Sequence[int]
    dtype: torch.dtype = torch.float32

    @staticmethod
    def like(example: torch.Tensor) -> "TensorSpec":
        """The spec of an example input: its sizes and dtype."""
        return TensorSpec(list(example.shape), example.dtype)


_PARTIAL_KNOBS = ("min_region_size", "keep_kinds", "keep_submodules", "lower_submodules", "require_full", "fallback",
                  "example_inputs", "on_other_shapes", "max_replans", "measure", "min_gain", "choose_order", "replay")


def _example_inputs(example_inputs, methods, who):
    """{method: [args]} from example_inputs=(x,) (the first method's) or {method: (args...)}."""
    if example_inputs is None:
        return {}
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, Mapping):
        by_method = dict(example_inputs)
    elif isinstance(example_inputs, (tuple, list)):
        by_method = {methods[0]: example_inputs}
    else:
        raise TypeError(f"{who}: example_inputs must be a tuple of a call's arguments or {{method: tuple}}, "
                        f"got {type(example_inputs).__name__}")
    for method, inputs in by_method.items():
        if not isinstance(method, str) or not isinstance(inputs, (tuple, list)):
            raise TypeError(f"{who}: example_inputs: each entry must be method name (str) -> tuple of arguments")
    return {method: list(inputs) for method, inputs in by_method.items()}


def _script_module(module: Any, who: str) -> torch._C.ScriptModule:
    if isinstance(module, torch.jit.ScriptModule):
        return module._c
    kind = type(module).__name__
    if isinstance(module, torch.nn.Module):
        raise TypeError(
            f"{who}: expected a TorchScript module (torch.jit.ScriptModule), got {kind}, an eager torch.nn.Module; "
            f"script or trace it first: torch.jit.script(module)")
    raise TypeError(f"{who}: expected a TorchScript module (torch.jit.ScriptModule), got {kind}")


def _names(value: Union[str, Iterable[str]], knob: str, who: str) -> List[str]:
    if isinstance(value, str):
        return [value]
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{who}: {knob} must be names (str), got {type(name).__name__}")
    return names


def _spec_dict(spec: Optional[Mapping[str, Any]], who: str) -> Dict[str, Any]:
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise TypeError(f"{who}: spec must be a dict of method name -> options dict, e.g. "
                        f"{{'forward': {{'num_threads': 2}}}}, got {type(spec).__name__}")
    return dict(spec)


def _input_specs(input_specs: Mapping[str, Sequence[Any]], who: str) -> Dict[str, list]:
    converted: Dict[str, list] = {}
    for method, entries in input_specs.items():
        if not isinstance(method, str):
            raise TypeError(f"{who}: input_specs keys must be method names (str), got {type(method).__name__}")
        row = []
        for position, entry in enumerate(entries):
            if entry is None:
                row.append(None)
            elif isinstance(entry, torch.Tensor):
                row.append((list(entry.shape), entry.dtype))
            elif isinstance(entry, TensorSpec):
                row.append((list(entry.sizes), entry.dtype))
            else:
                raise TypeError(f"{who}: input spec {position} of method '{method}' must be a TensorSpec, an example "
                                f"torch.Tensor or None, got {type(entry).__name__}")
        converted[method] = row
    return converted


def backends() -> List[Backend]:
    """The torch-delegate backends registered in this process (their libraries loaded with
    torch.ops.load_library, or linked in), by name."""
    found = []
    for described in _C.backends():
        options = [OptionInfo(key, type_, required, default) for key, type_, required, default in described["options"]]
        found.append(Backend(described["name"], described["type"], described["available"], described["partial"],
                             described["options_form"], options, list(described["signatures"])))
    return found


def lower(module: torch.jit.ScriptModule, backend: Union[str, Sequence[str]], spec: Optional[Mapping[str, Any]] = None, *,
          methods: Optional[Union[str, Iterable[str]]] = None,
          partial: bool = False,
          min_region_size: int = 0,
          keep_kinds: Iterable[str] = (),
          keep_submodules: Iterable[str] = (),
          lower_submodules: Iterable[str] = (),
          require_full: bool = False,
          fallback: bool = False,
          input_specs: Optional[Mapping[str, Sequence[Any]]] = None,
          example_inputs: Optional[Union[Sequence[Any], Mapping[str, Sequence[Any]]]] = None,
          on_other_shapes: str = "error",
          max_replans: int = 4,
          measure: bool = False,
          min_gain: float = 0.01,
          choose_order: bool = False,
          replay: Optional["Report"] = None,
          load_backends: bool = False) -> torch.jit.ScriptModule:
    """Lowers a scripted or traced module to a registered backend; the original is not modified.

    backend: a backend's name, or (partial=True) a priority list of names, ["xnnpack",
        "pointwise_fusion"]: each node goes to the first backend that takes it; one delegate
        child per backend; the report says which backend runs each region. Then spec maps each
        backend's name to its compile options per method.
    spec: compile options per method, {"forward": {"num_threads": 2, "approximate": True}}:
        values of any mix of types; a method without options gets the backend's defaults.
    methods: the methods to lower (default: the spec's methods, else "forward").
    partial=False: whole methods, as torch._C._jit_to_backend does (the same module structure).
    partial=True: only the regions the backend supports are delegated; the rest stays in
        TorchScript. Its knobs: min_region_size (nodes; 0: the backend's own minimum),
        keep_kinds (node kinds kept in TorchScript, e.g. "aten::mul"), keep_submodules and
        lower_submodules (attribute paths, e.g. "encoder.block1"), require_full (every node
        must be delegated, else an error naming the first that is not) and fallback (where the
        backend is unavailable, each region runs its original TorchScript instead of failing).
    input_specs: whole methods only: per method, one entry per argument: a TensorSpec, an
        example tensor, or None (unchecked).
    example_inputs: partial=True only: the arguments of one call, (x,) for "forward", or
        {method: (args...)}. The method runs once on them while lowering; every region's
        tensors get their dtype, sizes and memory format, which preprocess sees and which a
        call is checked against.
    on_other_shapes: with example_inputs, what a call whose tensors have other dtypes or sizes
        does: "error" (the input-spec error, naming the region and the argument),
        "torchscript" (the region's own TorchScript runs instead) or "replan" (the backend
        compiles the region again for the new shapes, for a backend that can: xnnpack can).
    max_replans: with on_other_shapes="replan", how many other shapes each region keeps
        compiled (the least recently used is dropped beyond it).
    measure: with example_inputs, time each candidate region on its backend and as TorchScript
        and delegate it only where the backend is faster (the report gives both times; a
        region one backend loses is offered to the next); then the method is timed whole and
        regions of least gain are taken out while it is slower than the original.
    min_gain: with measure, a share of the method's time (0.01: 1 %): the faster regions that
        save least stay in TorchScript ("gain below the minimum") while together they save less.
        0 delegates every region that is faster.
    choose_order: with measure and several backends, also lower with each other backend first
        (the rest in the list's order) and, where a lowering mixes backends, with its first
        backend alone; time the methods whole side by side and keep the fastest (the list's
        order unless another is faster by more than 2 %); the report's backend names the
        backends used, in order. Lowering takes about as many times longer as there are
        backends (twice that where lowerings mix backends).
    replay: a Report (a measured plan, or report(lowered)) whose decisions are repeated: a
        candidate region is delegated if and only if the report has it. Nothing is timed.
    load_backends: load a named backend that is installed (available_backends()) but not yet
        loaded, instead of raising an error that says how to load it.

    Returns a torch.jit.ScriptModule that saves and loads like any other. Raises TypeError or
    ValueError for a bad argument, torch_delegate.Error for what the backend or lowering refuses.
    """
    who = "torch_delegate.lower"
    cpp_module = _script_module(module, who)
    backends = _backend_names(backend, who)
    _require_registered(backends, who, load_backends)
    if len(backends) > 1:
        if not partial:
            raise ValueError(f"{who}: several backends ({', '.join(backends)}) need partial=True: each node goes to the "
                             f"first backend in the list that takes it")
        # spec: {backend: {method: options}} with several backends.
        specs = spec or {}
        if not isinstance(specs, Mapping) or any(name not in backends for name in specs):
            raise ValueError(f"{who}: with several backends, spec maps a backend's name to its compile options "
                             f"({{'{backends[0]}': {{'forward': {{...}}}}}}), got {spec!r}")
        specs = [_spec_dict(specs.get(name), who) for name in backends]
        spec = {}
        for entry in specs:
            spec.update(entry)
    else:
        spec = _spec_dict(spec, who)
        specs = [spec]
    if methods is None:
        method_names = list(spec) or ["forward"]
    else:
        method_names = _names(methods, "methods", who)
    if partial:
        if input_specs is not None:
            raise ValueError(f"{who}: input_specs apply to whole methods; they cannot be given with partial=True "
                             f"(give example_inputs instead)")
        if not isinstance(min_region_size, int) or isinstance(min_region_size, bool) or min_region_size < 0:
            raise ValueError(f"{who}: min_region_size must be an int >= 0, got {min_region_size!r}")
        if on_other_shapes not in ("error", "torchscript", "replan"):
            raise ValueError(f"{who}: on_other_shapes must be 'error', 'torchscript' or 'replan', got {on_other_shapes!r}")
        if not isinstance(max_replans, int) or isinstance(max_replans, bool) or max_replans < 1:
            raise ValueError(f"{who}: max_replans must be an int >= 1, got {max_replans!r}")
        result = _C.lower_partially(cpp_module, backends, specs, method_names, min_region_size,
                                    _names(keep_kinds, "keep_kinds", who), _names(keep_submodules, "keep_submodules", who),
                                    _names(lower_submodules, "lower_submodules", who), bool(require_full), bool(fallback),
                                    _example_inputs(example_inputs, method_names, who), on_other_shapes, max_replans,
                                    bool(measure), _min_gain(min_gain, who), bool(choose_order), _replayed(replay, who))
    else:
        given = {"min_region_size": min_region_size != 0, "keep_kinds": bool(list(keep_kinds)),
                 "keep_submodules": bool(list(keep_submodules)), "lower_submodules": bool(list(lower_submodules)),
                 "require_full": bool(require_full), "fallback": bool(fallback)}
        given["example_inputs"] = example_inputs is not None
        given["on_other_shapes"] = on_other_shapes != "error"
        given["max_replans"] = max_replans != 4
        given["measure"] = bool(measure)
        given["min_gain"] = min_gain != 0.01
        given["choose_order"] = bool(choose_order)
        given["replay"] = replay is not None
        knobs = [knob for knob in _PARTIAL_KNOBS if given[knob]]
        if knobs:
            raise ValueError(f"{who}: {', '.join(knobs)} {'is a' if len(knobs) == 1 else 'are'} partial-lowering "
                             f"knob{'' if len(knobs) == 1 else 's'}; pass partial=True to delegate supported regions "
                             f"and leave the rest to TorchScript")
        result = _C.lower_methods(cpp_module, backends[0], spec, method_names,
                                  _input_specs(input_specs, who) if input_specs else {})
    return torch.jit._recursive.wrap_cpp_module(result)


def plan(module: torch.jit.ScriptModule, backend: Union[str, Sequence[str]], *,
         methods: Union[str, Iterable[str]] = ("forward",),
         min_region_size: int = 0,
         keep_kinds: Iterable[str] = (),
         keep_submodules: Iterable[str] = (),
         lower_submodules: Iterable[str] = (),
         require_full: bool = False,
         example_inputs: Optional[Union[Sequence[Any], Mapping[str, Sequence[Any]]]] = None,
         measure: bool = False,
         min_gain: float = 0.01,
         replay: Optional["Report"] = None,
         load_backends: bool = False) -> Report:
    """Dry run of lower(..., partial=True): what would be delegated and why the rest would stay
    in TorchScript. Nothing is lowered. load_backends: as for lower()."""
    who = "torch_delegate.plan"
    cpp_module = _script_module(module, who)
    _require_registered(_backend_names(backend, who), who, load_backends)
    if not isinstance(min_region_size, int) or isinstance(min_region_size, bool) or min_region_size < 0:
        raise ValueError(f"{who}: min_region_size must be an int >= 0, got {min_region_size!r}")
    return _report_of(_C.plan(cpp_module, _backend_names(backend, who), _names(methods, "methods", who), min_region_size,
                              _names(keep_kinds, "keep_kinds", who), _names(keep_submodules, "keep_submodules", who),
                              _names(lower_submodules, "lower_submodules", who), bool(require_full),
                              _example_inputs(example_inputs, _names(methods, "methods", who), who), bool(measure),
                              _min_gain(min_gain, who), _replayed(replay, who)))


def report(module: torch.jit.ScriptModule) -> Optional[Report]:
    """The delegation report a partially lowered module carries (also after save and load);
    None for a module that was not partially lowered."""
    data = _C.report(_script_module(module, "torch_delegate.report"))
    return None if data is None else _report_of(data)


def load(path: str, map_location: Optional[Union[str, torch.device]] = None, *,
         load_backends: bool = False, verify: bool = True) -> torch.jit.ScriptModule:
    """torch.jit.load, after checking that the file is what was saved and that every backend the
    saved module delegates to is registered in this process and still has the execute signatures
    it was lowered for.

    verify=True (the default) first checks the archive (check_archive): a record whose data no
    longer matches the CRC32 the archive stores for it (the file was changed after it was saved),
    a file cut short or a damaged zip structure is a torch_delegate.Error naming the file and the
    record; LibTorch's own reader checks none of it. It reads the whole file once more
    (docs/deployment.md gives the cost); verify=False skips it.

    A backend that is not registered is a torch_delegate.Error that names it and says how to
    register it (for an installed backend: torch_delegate.load_backend(name), or
    load_backends=True to load it here)."""
    if not isinstance(path, str):
        path = str(path)
    if verify:
        _C.check_archive(path)
    if os.path.isfile(path):
        _require_registered(_C.backends_needed(path), "torch_delegate.load", load_backends)
    _C.check_loadable(path, verify=False)  # the archive, when asked for, was checked above
    return torch.jit.load(path, map_location=map_location)


def check_archive(path: str) -> None:
    """Checks that a saved module's file is what was saved: every record's data against the CRC32
    its zip archive stores, each record's headers against the central directory, the central
    directory and its ZIP64 records against the file. Raises torch_delegate.Error
    "torch-delegate: <path>: record '<name>' is damaged: ...; refusing to load it" (or names the
    damaged structure). load() does this first unless verify=False."""
    _C.check_archive(str(path))


def backends_needed(path: str) -> List[str]:
    """The backends a saved module delegates to, read from its code without loading it."""
    return list(_C.backends_needed(str(path)))


def _min_gain(min_gain, who: str) -> float:
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 1:
        raise ValueError(f"{who}: min_gain must be a share of the method's time in [0, 1) (0.01: 1 %), got {min_gain!r}")
    return float(min_gain)


def _replayed(replay, who: str):
    if replay is not None and not isinstance(replay, Report):
        raise TypeError(f"{who}: replay must be a torch_delegate.Report (plan(..., measure=True) or report(lowered)), "
                        f"got {type(replay).__name__}")
    return replay


def _backend_names(backend, who: str) -> List[str]:
    """A backend's name, or a priority list of names (a node goes to the first that takes it)."""
    if isinstance(backend, str):
        return [backend]
    if isinstance(backend, (list, tuple)) and backend and all(isinstance(name, str) for name in backend):
        return list(backend)
    raise TypeError(f"{who}: backend must be a backend's name (str) or a non-empty list of names, got {backend!r}")


def _report_of(data: dict) -> Report:
    # Fields by name, as _C gives them (never by position).
    methods = [
        MethodReport(method["method"], [Region(**region) for region in method["regions"]],
                     [KeptNode(**dict(kept, per_backend=[BackendReason(**each) for each in kept["per_backend"]]))
                      for kept in method["kept"]])
        for method in data["methods"]
    ]
    return Report(data["backend"], data["module"], methods, data["text"])
