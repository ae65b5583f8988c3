"""python -m torch_delegate (or torch-delegate, installed): the backends that can be loaded, the
plan of a saved scripted model for a backend, the report of a lowered file, the backends a file
needs. --json for data, --svg for a picture of the partition.

Every command that reads a saved file first checks that it is what was saved (each record's CRC32
and the zip structure, as torch_delegate.load does); --no-verify skips that.

Exit codes: 0 done; 1 torch-delegate refused (the message says why); 2 bad command line;
3 no such file; 4 the file is not a TorchScript module; 5 a backend that is not installed, or
installed but not loaded (the message says how to load it); 6 the file is damaged (changed after
it was saved, or cut short: the message names the record)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import zipfile
from typing import List, Optional, Sequence

EXIT_REFUSED, EXIT_USAGE, EXIT_NO_FILE, EXIT_NOT_TORCHSCRIPT, EXIT_BACKEND, EXIT_DAMAGED = 1, 2, 3, 4, 5, 6


class _Exit(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _check_file(path: str, verify: bool) -> None:
    if not os.path.exists(path):
        raise _Exit(EXIT_NO_FILE, f"{path}: no such file")
    if os.path.isdir(path):
        raise _Exit(EXIT_NO_FILE, f"{path}: is a directory, not a saved module")
    with open(path, "rb") as data:
        starts_as_zip = data.read(4) == b"PK\x03\x04"
    if verify and (starts_as_zip or zipfile.is_zipfile(path)):
        # A zip archive, or one cut short (it starts as one): checked as torch_delegate.load checks it.
        import torch_delegate
        try:
            torch_delegate.check_archive(path)
        except torch_delegate.Error as error:
            raise _Exit(EXIT_DAMAGED, str(error).strip()) from None
    if not zipfile.is_zipfile(path):
        raise _Exit(EXIT_NOT_TORCHSCRIPT, f"{path}: not a TorchScript module (not a zip archive; save one with "
                                          f"torch.jit.save or module.save)")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if not any("/code/" in name for name in names):
        raise _Exit(EXIT_NOT_TORCHSCRIPT, f"{path}: not a TorchScript module (a zip archive without TorchScript code: "
                                          f"torch.save writes those; save a scripted module with torch.jit.save)")


def _backend_names(text: Sequence[str]) -> List[str]:
    names: List[str] = []
    for part in text:
        names += [name for name in part.split(",") if name]
    return names


def _load_backends(names: Sequence[str]) -> None:
    """The backends named on the command line: loaded if installed (naming them is asking for them)."""
    import torch_delegate
    registered = {backend.name for backend in torch_delegate.backends()}
    installed = {backend.name for backend in torch_delegate.installed_backends()}
    for name in names:
        if name in registered:
            continue
        if name not in installed:
            known = ", ".join(sorted(installed | registered)) or "none"
            raise _Exit(EXIT_BACKEND, f"unknown backend '{name}' (installed: {known})")
        torch_delegate.load_backend(name)


def _example_inputs(shapes: Optional[Sequence[str]]):
    if not shapes:
        return None
    import torch
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for shape in shapes:
        try:
            sizes = [int(size) for size in shape.lower().split("x")]
        except ValueError:
            raise _Exit(EXIT_USAGE, f"--example-input {shape!r}: give sizes as 1x3x224x224") from None
        inputs.append(torch.rand(*sizes, generator=generator))
    return tuple(inputs)


def _report_json(report) -> str:
    data = dataclasses.asdict(report)
    data["backend"] = ", ".join(report.backends)  # deprecated: the one string of the JSON before "backends"
    data["regions"] = report.region_count
    return json.dumps(data, indent=2)


def _write_svg(report, module, path: str) -> None:
    with open(path, "w") as out:
        out.write(report.to_svg(module))


def _command_backends(arguments) -> int:
    import torch_delegate
    installed = torch_delegate.installed_backends()
    registered = {backend.name: backend for backend in torch_delegate.backends()}
    rows = [{"name": backend.name, "source": backend.source, "library": backend.library, "loaded": backend.loaded}
            for backend in installed]
    for name in registered:
        if name not in {row["name"] for row in rows}:
            rows.append({"name": name, "source": "registered in this process", "library": "", "loaded": True})
    if arguments.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['name']:<20} {row['source']:<22} {row['library']}")
    return 0


def _command_plan(arguments) -> int:
    import torch
    import torch_delegate
    _check_file(arguments.model, arguments.verify)
    names = _backend_names(arguments.backend)
    _load_backends(names)
    module = torch.jit.load(arguments.model)
    inputs = _example_inputs(arguments.example_input)
    # One LowerOptions for the plan and for the lowering the picture is drawn from.
    options = torch_delegate.LowerOptions(partial=True, example_inputs=inputs, measure=arguments.measure,
                                          min_gain=arguments.min_gain, measure_time_limit_s=arguments.measure_time_limit)
    report = torch_delegate.plan(module, names, options=options)
    if arguments.svg:
        # The picture of the plan is the method as lowering would leave it: lowered here, in memory,
        # repeating a measured plan's decisions rather than timing again.
        drawn = torch_delegate.lower(module, names, options=options, replay=report if arguments.measure else None)
        _write_svg(torch_delegate.report(drawn), drawn, arguments.svg)
    print(_report_json(report) if arguments.json else report)
    return 0


def _command_report(arguments) -> int:
    import torch_delegate
    _check_file(arguments.file, arguments.verify)
    needed = torch_delegate.backends_needed(arguments.file)
    if arguments.load_backends:
        _load_backends(needed)
    registered = {backend.name for backend in torch_delegate.backends()}
    missing = [name for name in needed if name not in registered]
    if missing:
        installed = {backend.name for backend in torch_delegate.installed_backends()}
        hint = ("pass --load-backends to load " + ", ".join(missing)) if all(name in installed for name in missing) else \
            f"install {'them' if len(missing) > 1 else 'it'} (installed: {', '.join(sorted(installed)) or 'none'})"
        raise _Exit(EXIT_BACKEND, f"{arguments.file} needs the backend{'s' if len(missing) > 1 else ''} "
                                  f"{', '.join(missing)}, not loaded in this process: {hint}")
    module = torch_delegate.load(arguments.file, verify=False)  # _check_file checked it
    report = torch_delegate.report(module)
    if report is None:
        raise _Exit(EXIT_REFUSED, f"{arguments.file}: not partially lowered (no delegation report); "
                                  f"it needs: {', '.join(needed) or 'no backend'}")
    if arguments.svg:
        _write_svg(report, module, arguments.svg)
    print(_report_json(report) if arguments.json else report)
    return 0


def _command_needs(arguments) -> int:
    import torch_delegate
    _check_file(arguments.file, arguments.verify)
    needed = torch_delegate.backends_needed(arguments.file)
    if arguments.json:
        print(json.dumps(needed))
    else:
        for name in needed:
            print(name)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m torch_delegate", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog=__doc__.split("\n\n", 1)[1])
    commands = top.add_subparsers(dest="command", required=True, metavar="backends|plan|report|needs|switches")
    backends = commands.add_parser("backends", help="the backends that can be loaded by name, and those loaded")
    backends.add_argument("--json", action="store_true")
    backends.set_defaults(run=_command_backends)
    plan = commands.add_parser("plan", help="what lowering a saved scripted model to backends would delegate")
    plan.add_argument("model", help="a saved TorchScript module (torch.jit.save)")
    plan.add_argument("backend", nargs="+", help="a backend's name, or several (a priority list): xnnpack pointwise_fusion")
    plan.add_argument("--example-input", action="append", metavar="SIZES",
                      help="an example input's sizes, 1x3x224x224 (random floats); once per argument")
    plan.add_argument("--measure", action="store_true", help="time each candidate region (needs --example-input)")
    plan.add_argument("--min-gain", type=_share, default=0.01, metavar="SHARE",
                      help="with --measure: the faster regions that save least stay in TorchScript while together they "
                           "save less than this share of the method's time (default 0.01)")
    plan.add_argument("--measure-time-limit", type=_seconds, default=None, metavar="SECONDS",
                      help="with --measure: the seconds measuring may take; what is not measured by then goes by the "
                           "list's order (default 20; 0: no limit)")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--svg", metavar="OUT.svg", help="draw the partition (Graphviz)")
    _verify_flag(plan)
    plan.set_defaults(run=_command_plan)
    report = commands.add_parser("report", help="the delegation report of a partially lowered file")
    report.add_argument("file")
    report.add_argument("--load-backends", action="store_true", help="load the installed backends the file needs")
    report.add_argument("--json", action="store_true")
    report.add_argument("--svg", metavar="OUT.svg", help="draw the partition (Graphviz)")
    _verify_flag(report)
    report.set_defaults(run=_command_report)
    needs = commands.add_parser("needs", help="the backends a saved file needs (read without loading it)")
    needs.add_argument("file")
    needs.add_argument("--json", action="store_true")
    _verify_flag(needs)
    needs.set_defaults(run=_command_needs)
    switches = commands.add_parser("switches", help="the environment variables torch-delegate and the backends read")
    switches.add_argument("--load-backends", action="store_true", help="load every installed backend first (their tables)")
    switches.add_argument("--markdown", action="store_true", help="as the table of docs/runtime-switches.md")
    switches.add_argument("--json", action="store_true")
    switches.set_defaults(run=_command_switches)
    return top


def _command_switches(arguments) -> int:
    import torch_delegate
    if arguments.load_backends:
        for backend in torch_delegate.installed_backends():
            torch_delegate.load_backend(backend.name)
    found = torch_delegate.runtime_switches()
    if arguments.json:
        print(json.dumps([dataclasses.asdict(each) for each in found], indent=2))
    elif arguments.markdown:
        print(switches_markdown(found))
    else:
        for each in found:
            value = each.value if each.value is not None else f"unset (default: {each.default})"
            print(f"{each.owner:<16} {each.name:<30} {value}")
    return 0


def switches_markdown(found) -> str:
    """The tables of docs/runtime-switches.md: one per owner, in declaration order."""
    lines: List[str] = []
    owners = list(dict.fromkeys(each.owner for each in found))
    for owner in owners:
        lines += ["", f"### {owner}", "", "| variable | when unset | what setting it changes | timing cache key |", "|---|---|---|---|"]
        for each in found:
            if each.owner == owner:
                effect = each.effect.replace("|", "\\|")
                lines.append(f"| `{each.name}` | {each.default} | {effect} | {'yes' if each.changes_kernels else 'no'} |")
    return "\n".join(lines[1:])


def _verify_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--no-verify", dest="verify", action="store_false",
                         help="do not check the file's records against their CRC32 first (exit code 6 when one differs)")


def _seconds(text: str) -> float:
    """--measure-time-limit's value: seconds, finite and >= 0 (argparse: exit code 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"seconds, a finite number >= 0 (0: no limit), got {text!r}")
    return value


def _share(text: str) -> float:
    """--min-gain's value: a share of the method's time, in [0, 1) (argparse: exit code 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"a share of the method's time in [0, 1) (0.01: 1 %), got {text!r}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    cli = parser()
    arguments = cli.parse_args(argv)
    if getattr(arguments, "measure", False) and not arguments.example_input:
        # The same rule as LowerOptions(measure=True) without example_inputs, in this command's terms.
        cli.error("plan --measure times each candidate region on example inputs: give --example-input SIZES "
                  "(once per argument, e.g. --example-input 1x3x224x224), or leave --measure off")
    try:
        return arguments.run(arguments)
    except _Exit as stop:
        print(f"torch_delegate {arguments.command}: {stop}", file=sys.stderr)
        return stop.code
    except RuntimeError as error:  # torch_delegate.Error, or LibTorch's
        print(f"torch_delegate {arguments.command}: {str(error).strip()}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
