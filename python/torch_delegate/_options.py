"""The knobs of lower() and plan(): one LowerOptions for both, each knob checked once, and its
conversion into the extension's PartitionOptions; the module, backend-name and spec arguments."""
from __future__ import annotations

import collections.abc
import dataclasses
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import torch

from . import _C
from ._progress import ProgressPrinter
from ._report import Report, TensorSpec


@dataclasses.dataclass(frozen=True)
class Input:
    """An example input given by the sizes it will take (Torch-TensorRT's Input): each dimension
    from min_shape to max_shape, opt_shape the typical one. In example_inputs in place of a
    tensor: lowering runs the method on a tensor of opt_shape (random normal values; integers
    and bools: zeros), times there when measuring, and checks the lowered method against the
    original at min_shape and at max_shape (C++: partition_options::shape_ranges). Calls within
    the range are re-planned whatever on_other_shapes says; on_other_shapes="error" refuses the
    shapes outside it, "automatic" serves them too."""

    min_shape: Sequence[int]
    opt_shape: Sequence[int]
    max_shape: Sequence[int]
    dtype: torch.dtype = torch.float32

    def __post_init__(self):
        shapes = [self.min_shape, self.opt_shape, self.max_shape]
        for name, shape in zip(("min_shape", "opt_shape", "max_shape"), shapes):
            if not isinstance(shape, (tuple, list, torch.Size)) or not all(
                    isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape):
                raise TypeError(f"torch_delegate.Input: {name} must be sizes (a tuple of ints >= 0), got {shape!r}")
        if not len(self.min_shape) == len(self.opt_shape) == len(self.max_shape):
            raise ValueError(f"torch_delegate.Input: min_shape, opt_shape and max_shape must have as many dimensions, got "
                             f"{tuple(self.min_shape)}, {tuple(self.opt_shape)}, {tuple(self.max_shape)}")
        if not all(low <= opt <= high for low, opt, high in zip(*shapes)):
            raise ValueError(f"torch_delegate.Input: each dimension must have min <= opt <= max, got min {tuple(self.min_shape)}, "
                             f"opt {tuple(self.opt_shape)}, max {tuple(self.max_shape)}")
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"torch_delegate.Input: dtype must be a torch.dtype, got {self.dtype!r}")

    def example(self) -> torch.Tensor:
        """The tensor lowering runs the method on: opt_shape, random normal (zeros for integers and bools)."""
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return torch.randn(tuple(self.opt_shape), generator=torch.Generator().manual_seed(0), dtype=self.dtype)
        return torch.zeros(tuple(self.opt_shape), dtype=self.dtype)


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
    #: failing with "Backend is not available." (False; C++: partition_options::fallback_when_unavailable)
    fallback_when_unavailable: Optional[bool] = None
    #: the former name of fallback_when_unavailable (a DeprecationWarning; giving both is an error)
    fallback: Optional[bool] = None
    #: the arguments of one call, (x,) for the first method, or {method: (args...)}: the method
    #: runs once on them while lowering; every region's tensors get their dtype, sizes and memory
    #: format, which preprocess sees and which a call is checked against
    example_inputs: Optional[Union[torch.Tensor, Sequence[Any], Mapping[str, Sequence[Any]]]] = None
    #: with example_inputs, what a call with other dtypes or sizes does: "automatic" (the default:
    #: "replan" where the region's backend can, as every shipped one can, else "error"), "error"
    #: (the input-spec error), "torchscript" (the region's TorchScript runs) or "replan" (the
    #: backend plans the region again for them; every backend must have replan)
    on_other_shapes: Optional[str] = None
    #: with on_other_shapes "replan" or "automatic": how many other shapes each region keeps compiled (4)
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
    #: with measure: the seconds a lowering may spend measuring, from its start (0: no limit); once
    #: spent, what is not measured yet goes by the list's order, as an unmeasured lowering (20.0)
    measure_time_limit_s: Optional[float] = None
    #: with example_inputs: compute once, at lowering, what each method computes only from the sizes
    #: the example's arguments give (padding amounts, Swin's attention mask), behind one check of
    #: the arguments; a call with other shapes runs the method as it was (True)
    fold_shapes: Optional[bool] = None
    #: with measure: the timing cache, where measured verdicts are kept and reused (a second
    #: measured lowering of the same model on the same machine times nothing): True (the default
    #: directory: $TORCH_DELEGATE_CACHE_DIR, else $XDG_CACHE_HOME/torch_delegate, else
    #: ~/.cache/torch_delegate; off when $TORCH_DELEGATE_TIMING_CACHE=0), a directory (str), or
    #: False (nothing read or written) (True)
    timing_cache: Optional[Union[bool, str]] = None
    #: with measure: what a long lowering shows: True (a tqdm bar when tqdm is installed, else a
    #: line on stderr, once it has taken a second), False (nothing), or a callable given each
    #: torch_delegate.ProgressUpdate (stage, detail, step, steps, elapsed_s) (True)
    progress: Optional[Union[bool, Callable[[Any], None]]] = None
    #: a Report (plan(..., measure=True) or report(lowered)) whose decisions are repeated: a
    #: candidate region is delegated if and only if the report has it, a region it kept as slower,
    #: as gaining too little or as not separable keeps that reason; nothing is timed
    replay: Optional["Report"] = None
    #: whole methods only: per method, one entry per argument: a TensorSpec, an example tensor or None
    input_specs: Optional[Mapping[str, Sequence[Any]]] = None
    #: load a named backend that is installed (installed_backends()) but not yet loaded, instead of
    #: raising an error that says how to load it (False)
    load_backends: Optional[bool] = None

    def __post_init__(self):
        for knob in _KNOBS:
            value = getattr(self, knob)
            if value is not None:
                object.__setattr__(self, knob, _knob(knob, value, "torch_delegate.LowerOptions"))


_KNOBS = tuple(field.name for field in dataclasses.fields(LowerOptions))
#: The knobs of partial lowering: lower(...) without partial=True refuses them.
_PARTIAL_KNOBS = ("min_region_size", "keep_kinds", "keep_submodules", "lower_submodules", "require_full", "fallback_when_unavailable", "fallback",
                  "example_inputs", "on_other_shapes", "max_replans", "measure", "min_gain", "choose_order", "measure_time_limit_s", "fold_shapes",
                  "timing_cache", "progress", "replay")
_FLAGS = ("partial", "require_full", "fallback_when_unavailable", "fallback", "measure", "choose_order", "fold_shapes", "load_backends")
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
    elif knob == "measure_time_limit_s":
        try:
            seconds = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        except OverflowError:  # an int beyond a float's range
            seconds = float("inf")
        if seconds is None or not 0 <= seconds < float("inf"):
            raise ValueError(f"{who}: measure_time_limit_s must be the seconds a measured lowering may spend measuring, "
                             f"a finite number >= 0 (0: no limit), got {value!r}")
        return seconds
    elif knob == "timing_cache":
        if not isinstance(value, (bool, str)) or value == "":
            raise TypeError(f"{who}: timing_cache must be True, False or a directory (a non-empty str), got {value!r}")
    elif knob == "progress":
        if not isinstance(value, bool) and not callable(value):
            raise TypeError(f"{who}: progress must be True, False or a callable taking a torch_delegate.ProgressUpdate, "
                            f"got {value!r}")
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
    if isinstance(example_inputs, (torch.Tensor, Input)):
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
        if "fallback_when_unavailable" in given and given["fallback_when_unavailable"] != given["fallback"]:
            raise ValueError(f"{who}: fallback is the former name of fallback_when_unavailable: give one of them")
        warnings.warn(f"{who}: fallback= is now fallback_when_unavailable= (the C++ name)", DeprecationWarning, stacklevel=4)
        given["fallback_when_unavailable"] = given.pop("fallback")
    if "on_other_shapes" in given:
        given["on_other_shapes"] = _C.OtherShapes.__members__[given["on_other_shapes"]]
    if "example_inputs" in given:
        inputs = given.pop("example_inputs")
        by_method = inputs if isinstance(inputs, Mapping) else {methods[0]: inputs}
        ranges = {method: [_C.ShapeRange(list(a.min_shape), list(a.max_shape)) if isinstance(a, Input) else None for a in arguments]
                  for method, arguments in by_method.items() if any(isinstance(a, Input) for a in arguments)}
        by_method = {method: [a.example() if isinstance(a, Input) else a for a in arguments] for method, arguments in by_method.items()}
        if ranges:
            converted.shape_ranges = ranges
        try:
            converted.example_inputs = {method: list(arguments) for method, arguments in by_method.items()}
        except TypeError:
            raise TypeError(f"{who}: example_inputs: an argument has no TorchScript type; give tensors, numbers, "
                            f"strings, or lists, tuples and dicts of them") from None
    if "timing_cache" in given:
        cache = given.pop("timing_cache")
        converted.timing_cache = cache is not False
        if isinstance(cache, str):
            converted.timing_cache_dir = cache
    progress = given.pop("progress", True)
    if progress is not False and given.get("measure"):
        converted.progress = ProgressPrinter(who) if progress is True else progress
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


def _backend_names(backend, who: str) -> List[str]:
    """A backend's name, or a priority list of names (a node goes to the first that takes it)."""
    if isinstance(backend, str):
        return [backend]
    if isinstance(backend, (list, tuple)) and backend and all(isinstance(name, str) for name in backend):
        return list(backend)
    raise TypeError(f"{who}: backend must be a backend's name (str) or a non-empty list of names, got {backend!r}")
