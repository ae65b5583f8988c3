"""libtorch_delegate.so exports what users' code calls and nothing else.

The library is built with -fvisibility=hidden: a function is exported when its declaration says
TORCH_DELEGATE_DECL (called from a template or inline function of a header, so from users'
translation units) and hidden when it says TORCH_DELEGATE_INTERNAL (called only by the library).
This test fails when an exported function of torch_delegate::detail (the public API is exported
by definition) is called by none of the programs and
libraries built on the library here (tests, examples, the Python extension): mark it
TORCH_DELEGATE_INTERNAL. (A call to an internal function from outside fails to link.)

Usage: check_exports.py <libtorch_delegate.so> <consumer binary>...
"""
import subprocess
import sys


def dynamic_symbols(path, defined):
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            symbols[parts[-1]] = parts[-2]
    return symbols


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


library, consumers = sys.argv[1], sys.argv[2:]
exported = {name for name, kind in dynamic_symbols(library, True).items() if kind == "T"}
used = set()
for consumer in consumers:
    used |= set(dynamic_symbols(consumer, False))
readable = demangle(sorted(exported))
ours = {name for name in exported if readable[name].startswith("torch_delegate::detail::") and "{lambda" not in readable[name]}
if len(ours) < 10:
    sys.exit(f"only {len(ours)} torch_delegate functions exported by {library}: is this the library?")
unused = sorted(readable[name] for name in ours - used)
if unused:
    print(f"{len(unused)} function(s) exported by {library} that no consumer calls; declare them "
          "TORCH_DELEGATE_INTERNAL (hidden) instead of TORCH_DELEGATE_DECL:")
    print("\n".join("  " + name for name in unused))
    sys.exit(1)
print(f"{len(ours)} exported torch_delegate::detail functions, each called from outside the library")
