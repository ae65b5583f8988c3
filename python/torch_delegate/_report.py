"""What torch_delegate reads back from the extension: the registered backends, and the delegation
report (regions, kept nodes with each backend's reason, by token and label) as frozen dataclasses."""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Dict, List, Optional, Sequence

import torch

from . import _C


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
    #: measured: how the times decided ("faster on onednn: 12 of 12 rounds ...", "not separable: ...")
    decision: str = ""


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
class DecidedCondition:
    """A condition of the method's control flow decided at lowering (checked at the method's entry;
    a call for which it does not hold runs the method as written)."""

    test: str  #: "src_mask is None", "src.is_nested", "torch.is_autocast_enabled()"
    value: str  #: "True", "False", "cpu"
    basis: str  #: "the example", "the process at lowering", ...
    location: str  #: the model's line that tests it, or ""


@dataclasses.dataclass(frozen=True)
class MethodReport:
    """What partial lowering does (or did) with one method."""

    method: str
    regions: List[Region]
    kept: List[KeptNode]
    #: the conditions lowering decided (docs/partitioning.md, "Conditions decided at lowering")
    decided: List[DecidedCondition] = dataclasses.field(default_factory=list)

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


def _report_of(data: dict) -> Report:
    # Fields by name, as _C gives them (never by position).
    methods = [
        MethodReport(method["method"], [Region(**region) for region in method["regions"]],
                     [KeptNode(**dict(kept, per_backend=[BackendReason(**each) for each in kept["per_backend"]]))
                      for kept in method["kept"]],
                     [DecidedCondition(**decided) for decided in method.get("decided", [])])
        for method in data["methods"]
    ]
    return Report(data["backends"], data["module"], methods, data["text"])
