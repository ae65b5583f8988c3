"""torch_delegate from Python: lower TorchScript modules (or eager ones, scripted here) to
torch-delegate backends, partially or whole, read the delegation report, and load lowered modules with a check that the file is what was
saved (every record's CRC32) and that their backends are registered.

A backend is a C++ library built with torch-delegate; load it first, as any TorchScript extension:

    import torch, torch_delegate
    torch.ops.load_library("libpointwise_fusion.so")
    lowered = torch_delegate.lower(MyModel(), "pointwise_fusion", partial=True)  # or a scripted/traced module
    print(torch_delegate.report(lowered))
    lowered.save("model.pt")

See docs/python.md.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

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
    "LowerOptions",
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


#: Each kept reason's token (stable: saved reports and replay name reasons by it) and its label
#: (the text's), as the C++ report has them: {"unsupported_kind": "unsupported kind", ...}.
_REASON_LABELS: Dict[str, str] = dict(_C.kept_reasons)
_REASON_TOKENS: Dict[str, str] = {label: token for token, label in _C.kept_reasons}


def _reason_token(reason: str, token: str, who: str) -> str:
    """A kept reason's token: the one given, which must name `reason` (the label), or the label's."""
    if not token and reason in _REASON_TOKENS:
        return _REASON_TOKENS[reason]
    if token and _REASON_LABELS.get(token) == reason:
        return token
    raise ValueError(f"{who}: reason {reason!r} with reason_token {token!r} is not a kept reason; the reasons "
                     f"(token: label) are " + ", ".join(f"{t}: {label}" for t, label in _REASON_LABELS.items()))


@dataclasses.dataclass(frozen=True)
class BackendReason:
    """One backend's reason for not taking a node."""

    backend: str
    reason: str  #: as KeptNode.reason
    detail: str
    reason_token: str = ""  #: as KeptNode.reason_token (filled from reason when not given)

    def __post_init__(self):
        object.__setattr__(self, "reason_token", _reason_token(self.reason, self.reason_token, "torch_delegate.BackendReason"))


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
    #: reason's stable token, "unsupported_kind", "slower_on_backend", ... (C++'s kept_reason, as
    #: saved reports name it): match on this, not on the label, which may be reworded. Filled from
    #: reason when not given.
    reason_token: str = ""

    def __post_init__(self):
        object.__setattr__(self, "reason_token", _reason_token(self.reason, self.reason_token, "torch_delegate.KeptNode"))


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
    backends is [], module "" and methods is empty.
    """

    backends: List[str]  #: the backends, in priority order: ["xnnpack", "pointwise_fusion"] (one name for one)
    module: str
    methods: List[MethodReport]
    text: str

    def __post_init__(self):
        if isinstance(self.backends, str):
            raise TypeError(f"torch_delegate.Report: backends is a list of backend names, e.g. ['xnnpack', "
                            f"'pointwise_fusion'], got the str {self.backends!r}; give [{self.backends!r}] for one backend")

    @property
    def backend(self) -> str:
        """Deprecated: the backends as one string, "xnnpack, pointwise_fusion"; use backends."""
        warnings.warn("torch_delegate.Report.backend is deprecated: use Report.backends, a list of names "
                      "(backend is ', '.join(report.backends))", DeprecationWarning, stacklevel=2)
        return ", ".join(self.backends)

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


@dataclasses.dataclass(frozen=True)
class LowerOptions:
    """The knobs of lower() and plan(), one object for both. Every knob is None unless given:
    None is "not given" (the C++ default of partition_options applies: its value is in the comment).
    lower(..., **knobs) and plan(..., **knobs) fold their keywords into one of these (a keyword
    overrides the same knob of options=). Each knob is checked here, once, when it is given.
    """

    #: the methods to lower or plan, a name or names (lower: the spec's methods, else "forward")
    methods: Optional[Union[str, Sequence[str]]] = None
    #: lower: False: whole methods, as torch._C._jit_to_backend does (the same module structure);
    #: True: only the regions the backend supports are delegated, the rest stays in TorchScript
    #: (plan is the dry run of partial lowering). The knobs below, up to replay, are partial ones.
    partial: Optional[bool] = None
    #: the smallest region worth a backend call, in nodes (0: the backend's own minimum)
    min_region_size: Optional[int] = None
    #: node kinds kept in TorchScript although the backend supports them, e.g. "aten::mul"
    keep_kinds: Optional[Union[str, Sequence[str]]] = None
    #: submodules (attribute paths, e.g. "encoder.block1") whose nodes stay in TorchScript
    keep_submodules: Optional[Union[str, Sequence[str]]] = None
    #: selective lowering: only these submodules' nodes are delegated
    lower_submodules: Optional[Union[str, Sequence[str]]] = None
    #: every node must be delegated, else an error naming the first that is not (False)
    require_full: Optional[bool] = None
    #: where the backend is unavailable, each region runs its original TorchScript instead of
    #: failing with "Backend is not available." (False)
    fallback: Optional[bool] = None
    #: the arguments of one call, (x,) for the first method, or {method: (args...)}: the method
    #: runs once on them while lowering; every region's tensors get their dtype, sizes and memory
    #: format, which preprocess sees and which a call is checked against
    example_inputs: Optional[Union[torch.Tensor, Sequence[Any], Mapping[str, Sequence[Any]]]] = None
    #: with example_inputs, what a call with other dtypes or sizes does: "error" (the input-spec
    #: error; the default), "torchscript" (the region's TorchScript runs) or "replan" (the backend
    #: compiles the region again for them, for a backend that can: xnnpack)
    on_other_shapes: Optional[str] = None
    #: with on_other_shapes="replan": how many other shapes each region keeps compiled (4)
    max_replans: Optional[int] = None
    #: with example_inputs: time each candidate region on its backend and as TorchScript and
    #: delegate it only where the backend is faster (False)
    measure: Optional[bool] = None
    #: with measure: a share of the method's time in [0, 1) (0.01: 1 %): the faster regions that
    #: save least stay in TorchScript while together they save less; 0 delegates every faster one
    min_gain: Optional[float] = None
    #: lower only, with measure and several backends: also lower with each other backend first
    #: (and, where a lowering mixes backends, its first alone) and keep the fastest (False)
    choose_order: Optional[bool] = None
    #: a Report (plan(..., measure=True) or report(lowered)) whose decisions are repeated: a
    #: candidate region is delegated if and only if the report has it, a region it kept as slower
    #: keeps that reason; nothing is timed
    replay: Optional["Report"] = None
    #: whole methods only: per method, one entry per argument: a TensorSpec, an example tensor or None
    input_specs: Optional[Mapping[str, Sequence[Any]]] = None
    #: load a named backend that is installed (available_backends()) but not yet loaded, instead of
    #: raising an error that says how to load it (False)
    load_backends: Optional[bool] = None

    def __post_init__(self):
        for knob in _KNOBS:
            value = getattr(self, knob)
            if value is not None:
                object.__setattr__(self, knob, _knob(knob, value, "torch_delegate.LowerOptions"))


_KNOBS = tuple(field.name for field in dataclasses.fields(LowerOptions))
#: The knobs of partial lowering: lower(...) without partial=True refuses them.
_PARTIAL_KNOBS = ("min_region_size", "keep_kinds", "keep_submodules", "lower_submodules", "require_full", "fallback",
                  "example_inputs", "on_other_shapes", "max_replans", "measure", "min_gain", "choose_order", "replay")
_FLAGS = ("partial", "require_full", "fallback", "measure", "choose_order", "load_backends")
_NAME_LISTS = ("methods", "keep_kinds", "keep_submodules", "lower_submodules")
#: The knobs that take one of a few strings: the allowed values are the C++ enum's.
_CHOICES = {"on_other_shapes": tuple(_C.OtherShapes.__members__)}


def _knob(knob: str, value: Any, who: str) -> Any:
    """A given knob's value, checked (TypeError or ValueError naming it, what it takes and what it
    got) and normalised: names as a tuple, example_inputs as a tuple or {method: tuple}."""
    if knob in _FLAGS:
        if not isinstance(value, bool):
            raise TypeError(f"{who}: {knob} must be True or False, got {value!r}")
    elif knob in _NAME_LISTS:
        names = [value] if isinstance(value, str) else list(value) if isinstance(value, collections.abc.Iterable) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise TypeError(f"{who}: {knob} must be a name (str) or names, got {value!r}")
        if knob == "methods" and not names:
            raise ValueError(f"{who}: methods must name at least one method, got {value!r}")
        return tuple(names)
    elif knob in _CHOICES:
        if value not in _CHOICES[knob]:
            raise ValueError(f"{who}: {knob} must be one of {', '.join(map(repr, _CHOICES[knob]))}, got {value!r}")
    elif knob in ("min_region_size", "max_replans"):
        least = 0 if knob == "min_region_size" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{who}: {knob} must be an int >= {least}, got {value!r}")
    elif knob == "min_gain":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{who}: min_gain must be a share of the method's time in [0, 1) (0.01: 1 %), got {value!r}")
        return float(value)
    elif knob == "replay":
        if not isinstance(value, Report):
            raise TypeError(f"{who}: replay must be a torch_delegate.Report (plan(..., measure=True) or report(lowered)), "
                            f"got {type(value).__name__}")
    elif knob == "example_inputs":
        return _example_inputs_form(value, who)
    elif knob == "input_specs":
        if not isinstance(value, Mapping):
            raise TypeError(f"{who}: input_specs must be a dict of method name -> one entry per argument, "
                            f"got {type(value).__name__}")
    return value


def _example_inputs_form(example_inputs, who):
    """example_inputs as a tuple of one call's arguments (for the first method) or {method: tuple}."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    if not isinstance(example_inputs, Mapping):
        raise TypeError(f"{who}: example_inputs must be a tuple of a call's arguments or {{method: tuple}}, "
                        f"got {type(example_inputs).__name__}")
    for method, inputs in example_inputs.items():
        if not isinstance(method, str) or not isinstance(inputs, (tuple, list)):
            raise TypeError(f"{who}: example_inputs: each entry must be method name (str) -> tuple of arguments")
    return {method: tuple(inputs) for method, inputs in example_inputs.items()}


def _options(options: Optional[LowerOptions], knobs: Dict[str, Any], who: str) -> LowerOptions:
    """options= with the keywords of the call folded in (a keyword overrides the same knob of
    options; None is not given): the one LowerOptions a call reads."""
    if options is None:
        options = LowerOptions()
    elif not isinstance(options, LowerOptions):
        raise TypeError(f"{who}: options must be a torch_delegate.LowerOptions, got {type(options).__name__}")
    unknown = [knob for knob in knobs if knob not in _KNOBS]
    if unknown:
        raise TypeError(f"{who}: unknown keyword argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))}; the knobs (torch_delegate.LowerOptions) are {', '.join(_KNOBS)}")
    given = {knob: value for knob, value in knobs.items() if value is not None}  # None: not given
    for knob, value in given.items():
        _knob(knob, value, who)  # here too, so that the error names the call
    return dataclasses.replace(options, **given)


def _partition_options(options: LowerOptions, methods: List[str], who: str) -> "_C.PartitionOptions":
    """The C++ partition_options of `options`: each knob given, C++'s default for the others."""
    converted = _C.PartitionOptions()
    converted.methods = methods
    given = {knob: getattr(options, knob) for knob in _PARTIAL_KNOBS if getattr(options, knob) is not None}
    for knob in ("keep_kinds", "keep_submodules", "lower_submodules"):
        if knob in given:
            given[knob] = set(given[knob])
    if "fallback" in given:
        given["fallback_when_unavailable"] = given.pop("fallback")
    if "on_other_shapes" in given:
        given["on_other_shapes"] = _C.OtherShapes.__members__[given["on_other_shapes"]]
    if "example_inputs" in given:
        inputs = given.pop("example_inputs")
        by_method = inputs if isinstance(inputs, Mapping) else {methods[0]: inputs}
        try:
            converted.example_inputs = {method: list(arguments) for method, arguments in by_method.items()}
        except TypeError:
            raise TypeError(f"{who}: example_inputs: an argument has no TorchScript type; give tensors, numbers, "
                            f"strings, or lists, tuples and dicts of them") from None
    for knob, value in given.items():
        setattr(converted, knob, value)
    return converted


def _script_module(module: Any, who: str, script_eager: bool = False) -> torch._C.ScriptModule:
    """The TorchScript module to lower; with `script_eager`, an eager nn.Module scripted for the user."""
    if isinstance(module, torch.jit.ScriptModule):
        return module._c
    kind = type(module).__name__
    if isinstance(module, torch.nn.Module) and script_eager:
        try:
            return torch.jit.script(module)._c
        except Exception as error:
            said = (str(error).strip().splitlines() or [""])[0]
            raise TypeError(f"{who}: got {kind}, an eager torch.nn.Module, which torch.jit.script could not script "
                            f"({type(error).__name__}: {said}); script or trace it yourself and pass the result: "
                            f"torch.jit.script(module), or torch.jit.trace(module, example_inputs)") from error
    if isinstance(module, torch.nn.Module):
        raise TypeError(
            f"{who}: expected a TorchScript module (torch.jit.ScriptModule), got {kind}, an eager torch.nn.Module; "
            f"script or trace it first: torch.jit.script(module)")
    raise TypeError(f"{who}: expected a TorchScript module (torch.jit.ScriptModule), got {kind}")


#: What the spec is, in the errors that refuse one.
_SPEC_SHAPE = ("{backend: {method: options}}, e.g. {'xnnpack': {'forward': {'num_threads': 2}}}; with one backend, "
               "{method: options} is short for it")


def _specs(spec: Optional[Mapping[str, Any]], backends: List[str], who: str) -> Dict[str, Dict[str, Any]]:
    """The spec in its one shape: {backend: {method: options}}, every backend of the list a key.
    With one backend, {method: options} (no backend's name among its keys) is that backend's."""
    if spec is None or (isinstance(spec, Mapping) and not spec):
        return {name: {} for name in backends}
    if not isinstance(spec, Mapping):
        raise TypeError(f"{who}: spec must be a dict: {_SPEC_SHAPE}; got {type(spec).__name__}")
    named = [key for key in spec if key in backends]
    if not named and len(backends) == 1:
        return {backends[0]: dict(spec)}
    if len(named) != len(spec):
        others = [key for key in spec if key not in backends]
        raise ValueError(f"{who}: spec must be {_SPEC_SHAPE}. With the backends {', '.join(map(repr, backends))}, its keys "
                         f"{', '.join(map(repr, others))} are no backend's: put each method's options under its backend's "
                         f"name, {{{backends[0]!r}: {{'forward': {{...}}}}}}")
    for name in named:
        if spec[name] is not None and not isinstance(spec[name], Mapping):
            raise TypeError(f"{who}: spec[{name!r}] must be a dict of method name -> options, got {type(spec[name]).__name__}")
    return {name: dict(spec.get(name) or {}) for name in backends}


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


def lower(module: Union[torch.jit.ScriptModule, torch.nn.Module], backend: Union[str, Sequence[str]],
          spec: Optional[Mapping[str, Any]] = None, *, options: Optional[LowerOptions] = None,
          **knobs: Any) -> torch.jit.ScriptModule:
    """Lowers a module to a registered backend; the original is not modified.

    module: a scripted or traced module (torch.jit.ScriptModule), or an eager torch.nn.Module,
        which is scripted here with torch.jit.script (if it cannot be, a TypeError says so: script
        or trace it yourself).
    backend: a backend's name, or (partial=True) a priority list of names, ["xnnpack",
        "pointwise_fusion"]: each node goes to the first backend that takes it; one delegate
        child per backend; the report says which backend runs each region.
    spec: compile options, {backend: {method: options}}, e.g. {"xnnpack": {"forward":
        {"num_threads": 2}}}; with one backend, {method: options} is short for it. Options are
        values of any mix of types; a method without options gets the backend's defaults.
    options, knobs: a LowerOptions, and/or its knobs as keywords (partial=True, example_inputs=(x,),
        ...): see LowerOptions. A keyword that is no knob is a TypeError listing the knobs.

    Returns a torch.jit.ScriptModule that saves and loads like any other. Raises TypeError or
    ValueError for a bad argument, torch_delegate.Error for what the backend or lowering refuses.
    """
    who = "torch_delegate.lower"
    options = _options(options, knobs, who)
    cpp_module = _script_module(module, who, script_eager=True)
    backends = _backend_names(backend, who)
    _require_registered(backends, who, bool(options.load_backends))
    if len(backends) > 1 and not options.partial:
        raise ValueError(f"{who}: several backends ({', '.join(backends)}) need partial=True: each node goes to the "
                         f"first backend in the list that takes it")
    specs = _specs(spec, backends, who)
    methods = list(options.methods or dict.fromkeys(method for entry in specs.values() for method in entry) or ["forward"])
    if options.partial:
        if options.input_specs is not None:
            raise ValueError(f"{who}: input_specs apply to whole methods; they cannot be given with partial=True "
                             f"(give example_inputs instead)")
        result = _C.lower_partially(cpp_module, backends, [specs[name] for name in backends],
                                    _partition_options(options, methods, who))
    else:
        knobs = [knob for knob in _PARTIAL_KNOBS if getattr(options, knob) is not None]
        if knobs:
            raise ValueError(f"{who}: {', '.join(knobs)} {'is a' if len(knobs) == 1 else 'are'} partial-lowering "
                             f"knob{'' if len(knobs) == 1 else 's'}; pass partial=True to delegate supported regions "
                             f"and leave the rest to TorchScript")
        result = _C.lower_methods(cpp_module, backends[0], specs[backends[0]], methods,
                                  _input_specs(options.input_specs, who) if options.input_specs else {})
    return torch.jit._recursive.wrap_cpp_module(result)


def plan(module: Union[torch.jit.ScriptModule, torch.nn.Module], backend: Union[str, Sequence[str]], *,
         options: Optional[LowerOptions] = None, **knobs: Any) -> Report:
    """Dry run of lower(module, backend, options=options, partial=True, **knobs): what would be
    delegated and why the rest would stay in TorchScript. Nothing is lowered. It takes the same
    LowerOptions as lower (an eager module is scripted as there); partial=False and input_specs,
    which are whole-method lowering's, are refused."""
    who = "torch_delegate.plan"
    options = _options(options, knobs, who)
    if options.partial is False or options.input_specs is not None:
        raise ValueError(f"{who}: a plan is of partial lowering; {'partial=False' if options.partial is False else 'input_specs'} "
                         f"(whole-method lowering's) cannot be given to it")
    cpp_module = _script_module(module, who, script_eager=True)
    backends = _backend_names(backend, who)
    _require_registered(backends, who, bool(options.load_backends))
    methods = list(options.methods or ["forward"])
    return _report_of(_C.plan(cpp_module, backends, _partition_options(options, methods, who)))


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
    return Report(data["backends"], data["module"], methods, data["text"])
