"""Backends by name: the ones this package ships (libraries in torch_delegate/backends/ in a wheel,
in the install's libdir after `meson install`, or in a build tree's backends/), and third-party ones that name their library through the entry-point
group "torch_delegate.backends". Nothing here loads native code unless asked to: listing reads
file names and entry-point metadata only."""
from __future__ import annotations

import dataclasses
import os
import pathlib
from importlib import metadata
from typing import Dict, Iterable, List, Optional

import torch

from . import _C, _install

#: The entry-point group a third-party backend package declares itself in. The entry point's name
#: is the backend's name; its object is the path of the backend's library (a str or os.PathLike),
#: or a callable that returns it:
#:
#:     [project.entry-points."torch_delegate.backends"]
#:     my_npu = "my_npu_backend:library_path"
ENTRY_POINT_GROUP = "torch_delegate.backends"

# The backends this package ships: name -> (library file, its directory in a build tree).
_SHIPPED = {
    "pointwise_fusion": ("libpointwise_fusion.so", "backends/pointwise_fusion"),
    "xnnpack": ("libxnnpack_backend.so", "backends/xnnpack"),
    "onednn": ("libonednn_backend.so", "backends/onednn"),
}
# What each shipped backend is built on (backends/meson.build builds it where that is installed).
_NEEDS = {
    "pointwise_fusion": "a compiler with OpenMP",
    "xnnpack": "Debian's libxnnpack-dev with libpthreadpool-dev",
    "onednn": "Debian's libdnnl-dev",
}
# Teaching backends a build tree has (never installed): found by name there, for the tests and
# the examples that load them from Python.
_BUILD_TREE_ONLY = {
    "packed_linear": ("libpacked_linear.so", "."),
}

_PACKAGE = pathlib.Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class InstalledBackend:
    """A backend that torch_delegate.load_backend(name) can load, found without loading it."""

    name: str
    #: the library's path; "" for an entry point (its Python object gives it when loaded)
    library: str
    #: "shipped" (with this package), "build tree" (PYTHONPATH=<build>/python) or
    #: "entry point <distribution>" (a third-party package)
    source: str
    loaded: bool  #: registered in this process already


def _registered() -> set:
    return {described["name"] for described in _C.backends()}


def _shipped_library(name: str) -> Optional[tuple]:
    """(path, source) of a shipped backend's library, or None where it was not built."""
    file, build_dir = _SHIPPED[name] if name in _SHIPPED else _BUILD_TREE_ONLY[name]
    if name in _SHIPPED:
        for directory in (_PACKAGE / "backends", pathlib.Path(_install.BACKEND_LIBDIR or _PACKAGE / "backends")):
            if (directory / file).is_file():
                return str(directory / file), "shipped"
    # A build tree: <build>/python/torch_delegate is this package, <build>/backends/... the backends.
    build = _PACKAGE.parent.parent
    if (build / "meson-private").is_dir() and (build / build_dir / file).is_file():
        return str(build / build_dir / file), "build tree"
    return None


def _entry_points() -> List[metadata.EntryPoint]:
    found = metadata.entry_points()
    if hasattr(found, "select"):
        return list(found.select(group=ENTRY_POINT_GROUP))
    return list(found.get(ENTRY_POINT_GROUP, []))  # Python < 3.10


def _entry_point_library(entry: metadata.EntryPoint) -> str:
    target = entry.load()
    if callable(target) and not isinstance(target, (str, os.PathLike)):
        target = target()
    if not isinstance(target, (str, os.PathLike)):
        raise Error(f"torch_delegate: the entry point '{entry.name} = {entry.value}' of the group '{ENTRY_POINT_GROUP}' "
                    f"gives {type(target).__name__}; it must give the path of the backend's library (a str or "
                    f"os.PathLike), or a callable that returns one")
    path = os.fspath(target)
    if not os.path.isfile(path):
        raise Error(f"torch_delegate: the entry point '{entry.name} = {entry.value}' names the library {path}, "
                    f"which does not exist")
    return path


Error = _C.Error


def installed_backends() -> List[InstalledBackend]:
    """The backends load_backend can load, by name, without loading any: the shipped ones that
    were built, then third-party ones from entry points (a name already taken is skipped)."""
    registered = _registered()
    found: Dict[str, InstalledBackend] = {}
    for name in [*_SHIPPED, *_BUILD_TREE_ONLY]:
        library = _shipped_library(name)
        if library:
            found[name] = InstalledBackend(name, library[0], library[1], name in registered)
    for entry in _entry_points():
        if entry.name in found:
            continue
        # Its library is known once its Python object is imported: load_backend does that.
        library = ""
        dist = getattr(getattr(entry, "dist", None), "name", None) or "?"
        found[entry.name] = InstalledBackend(entry.name, library, f"entry point {dist}", entry.name in registered)
    return list(found.values())


def available_backends() -> List[InstalledBackend]:
    """The former name of installed_backends() (a DeprecationWarning): "available" is what
    Backend.available says of a registered backend (it can compile and execute here)."""
    import warnings
    warnings.warn("torch_delegate.available_backends() is now installed_backends()", DeprecationWarning, stacklevel=2)
    return installed_backends()


def load_backend(name: str) -> str:
    """Loads the backend `name` (shipped with this package, or named by an entry point of the
    group "torch_delegate.backends") and returns its library's path. Loading a backend that is
    already registered does nothing. Raises torch_delegate.Error naming the backends that can
    be loaded when `name` is none of them."""
    if not isinstance(name, str):
        raise TypeError(f"torch_delegate.load_backend: name must be a str, got {type(name).__name__}")
    library = _shipped_library(name) if name in _SHIPPED or name in _BUILD_TREE_ONLY else None
    if name in _SHIPPED and library is None:
        raise Error(f"torch_delegate.load_backend: the backend '{name}' ships with torch_delegate but was not built "
                    f"in this installation (it is built where {_NEEDS[name]} is installed when the package is built)")
    if library is not None:
        path = library[0]
    else:
        entries = [entry for entry in _entry_points() if entry.name == name]
        if not entries:
            known = ", ".join(repr(b.name) for b in installed_backends()) or "none"
            raise Error(f"torch_delegate.load_backend: no backend named '{name}' is installed (installed: {known}). "
                        f"A third-party backend declares itself in the entry-point group '{ENTRY_POINT_GROUP}'")
        path = _entry_point_library(entries[0])
    if name not in _registered():
        torch.ops.load_library(path)
        if name not in _registered():
            raise Error(f"torch_delegate.load_backend: loading {path} did not register a backend named '{name}' "
                        f"(registered: {', '.join(sorted(_registered())) or 'none'})")
    return path


def require_registered(names: Iterable[str], who: str, load_backends: bool) -> None:
    """Before lowering to, or loading a file that needs, `names`: each must be registered. One that
    is installed but not loaded is loaded when load_backends is True; otherwise the error says
    how to load it. Names neither registered nor installed are left to the C++ error, which lists
    what is registered."""
    registered = _registered()
    missing = [name for name in names if name not in registered]
    if not missing:
        return
    installed = {backend.name for backend in installed_backends()}
    loadable = [name for name in missing if name in installed]
    if not loadable:
        return
    if load_backends:
        for name in loadable:
            load_backend(name)
        return
    calls = "; ".join(f"torch_delegate.load_backend({name!r})" for name in loadable)
    raise Error(f"{who}: the backend{'s' if len(loadable) > 1 else ''} {', '.join(repr(n) for n in loadable)} "
                f"{'are' if len(loadable) > 1 else 'is'} installed but not loaded in this process: call {calls} first, "
                f"or pass load_backends=True")

