"""Runs a command as if this AVX-512 machine were an AVX2 machine without AVX-512 (issue 39).

Every engine here picks its kernels from the CPUID instruction: oneDNN (which also has
ONEDNN_MAX_CPU_ISA), ATen (ATEN_CPU_CAPABILITY), OpenBLAS (OPENBLAS_CORETYPE), XNNPACK through
cpuinfo, glibc's string functions, and ONNX Runtime's MLAS, which has no cap at all. To compare
ONNX Runtime with us on AVX2 code on one machine, this runs the command under gdb: every `cpuid`
instruction in the program and in each library it loads (found by objdump, cached in
~/.cache/torch_delegate/cpuid_sites) gets two breakpoints, one to note the leaf asked for and one
after it to clear, in the answer, the feature bits of AVX-512 (F, DQ, IFMA, PF, ER, CD, BW, VL,
VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ, 4VNNIW, 4FMAPS, VP2INTERSECT, FP16, BF16), AMX and
AVX-VNNI. The engines ask once, when they start; after that the process runs at native speed (the
number of answers changed is printed at the end: it must not grow with the work timed).

Limits: objdump decodes executable sections linearly, so a constant table kept among the code
(some hand-written assembly does) could decode as a `cpuid` and get a breakpoint, which would
change two of its bytes. Under it, every output of bench/ort_models.py (LibTorch, oneDNN,
OpenBLAS, XNNPACK and ONNX Runtime) matched eager's within 1e-6, as without it. A program killed
by a signal exits 1 here, and descriptors 3 and 4 are the tool's own.

The machine stays what it is otherwise (its caches, its clock, its AVX2 units): a figure taken so is
labelled "AVX2 code on <this CPU>", not a figure of an AVX2 machine.

Usage: bench/as_avx2.py [--quiet] -- command [args...]
       The command's children are not masked; a bench that starts engines in child processes puts
       TD_BENCH_CHILD_PREFIX (set here: this script and "--") before their command
       (bench/ort_models.py does, for ONNX Runtime's node process).
Inside gdb (gdb -x bench/as_avx2.py): the breakpoints, set as libraries load.
"""
import json
import os
import re
import shutil
import shlex
import struct
import subprocess
import sys
import tempfile

# Leaf 7 sub-leaf 0: EBX, ECX, EDX; leaf 7 sub-leaf 1: EAX.
AVX512_EBX = (1 << 16) | (1 << 17) | (1 << 21) | (1 << 26) | (1 << 27) | (1 << 28) | (1 << 30) | (1 << 31)
AVX512_ECX = (1 << 1) | (1 << 6) | (1 << 11) | (1 << 12) | (1 << 14)
AVX512_EDX = (1 << 2) | (1 << 3) | (1 << 8) | (1 << 22) | (1 << 23) | (1 << 24) | (1 << 25)  # + AMX BF16/TILE/INT8
LEAF7_1_EAX = (1 << 4) | (1 << 5)  # AVX-VNNI, AVX512_BF16
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                     "torch_delegate", "cpuid_sites")


def cpuid_sites(path):
    """The link-time addresses of the cpuid instructions in an ELF file, by objdump (cached)."""
    info = os.stat(path)
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.realpath(path)) + f"-{info.st_size}-{int(info.st_mtime)}.json"
    cached = os.path.join(CACHE, key)
    try:
        return json.load(open(cached))
    except (OSError, ValueError):  # none yet, or unreadable: found again
        pass
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True).stdout
    sites = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\s+cpuid\s*$", listing, re.M)]
    os.makedirs(CACHE, exist_ok=True)
    # Written whole under another name, then renamed: two processes starting at once read either
    # no file or a whole one.
    with tempfile.NamedTemporaryFile("w", dir=CACHE, delete=False) as out:
        json.dump(sites, out)
    os.replace(out.name, cached)
    return sites


def load_bias(path, pid):
    """What the loader added to the file's addresses in process pid (0 for a fixed executable)."""
    with open(path, "rb") as elf:
        header = elf.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            return None
        e_type, = struct.unpack_from("<H", header, 16)
        if e_type == 2:
            return 0
        phoff, = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    loads = [struct.unpack_from("<IIQQ", table, i * phentsize) for i in range(phnum)]
    first = min((vaddr for kind, _, offset, vaddr in loads if kind == 1), default=0) & ~0xfff
    real = os.path.realpath(path)
    for line in open(f"/proc/{pid}/maps"):
        fields = line.split()
        if len(fields) >= 6 and int(fields[2], 16) == 0 and os.path.realpath(fields[5]) == real:
            return int(fields[0].split("-")[0], 16) - first
    return None


def in_gdb():
    import gdb

    state = {"asked": {}, "changed": 0, "sites": 0, "files": set()}

    def register(name):
        return int(gdb.parse_and_eval(f"${name}")) & 0xffffffff

    class Ask(gdb.Breakpoint):
        def stop(self):
            state["asked"][(gdb.selected_thread().ptid, self.site)] = (register("eax"), register("ecx"))
            return False

    class Answer(gdb.Breakpoint):
        def stop(self):
            leaf = state["asked"].pop((gdb.selected_thread().ptid, self.site), None)
            if leaf is None:
                return False
            masks = {(7, 0): {"ebx": AVX512_EBX, "ecx": AVX512_ECX, "edx": AVX512_EDX}, (7, 1): {"eax": LEAF7_1_EAX}}
            for name, mask in masks.get(leaf, {}).items():
                value = register(name)
                if value & mask:
                    gdb.execute(f"set ${name} = {value & ~mask}")
                    state["changed"] += 1
            return False

    def cover():
        pid = gdb.selected_inferior().pid
        if not pid:
            return
        for objfile in gdb.objfiles():
            path = objfile.filename
            if not path or path in state["files"] or not os.path.isfile(path):
                continue
            bias = load_bias(path, pid)
            if bias is None:
                continue
            state["files"].add(path)
            for site in cpuid_sites(path):
                for kind, at in ((Ask, site), (Answer, site + 2)):
                    point = kind(f"*{bias + at:#x}", internal=True)
                    point.site = bias + site
                    point.silent = True
                state["sites"] += 1

    def forget(_event):  # an exec: the old image's breakpoints go with it
        for point in gdb.breakpoints():
            if isinstance(point, (Ask, Answer)):
                point.delete()
        state["files"].clear()
        state["asked"].clear()

    gdb.events.new_objfile.connect(lambda _event: cover())
    gdb.events.clear_objfiles.connect(forget)

    def exited(event):
        state["code"] = getattr(event, "exit_code", 1)

    gdb.events.exited.connect(exited)
    # displaced-stepping off: to step over a breakpoint, gdb by default copies the instruction to a
    # scratch buffer at the program's entry point and runs it there. Under Linux 6.18 (seen on AMD
    # EPYC Zen 5 machines, gdb 13.1) the first such step in ld.so, over the `cpuid` of leaf 1 in
    # get_common_indices, left the process to fault on the next instruction (a store to
    # _rtld_global_ro): the program died with SIGSEGV before main. Stepping in place (gdb removes
    # the breakpoint, steps, puts it back) has no such buffer; it costs nothing here, as the engines
    # ask CPUID only while they start.
    for setting in ("pagination off", "confirm off", "print thread-events off", "print inferior-events off",
                    "startup-with-shell on", "displaced-stepping off", "auto-load safe-path /nonexistent"):
        gdb.execute(f"set {setting}")
    gdb.execute("handle SIGSEGV SIGBUS SIGFPE SIGPIPE SIGUSR1 SIGUSR2 SIGCHLD SIGALRM SIGPROF SIGTERM SIGINT nostop noprint pass")
    command = json.loads(os.environ["TD_AS_AVX2_COMMAND"])
    gdb.execute(f"file {command[0]}", to_string=True)
    gdb.execute(f"starti {shlex.join(command[1:])} {os.environ['TD_AS_AVX2_REDIRECT']}", to_string=True)
    cover()
    gdb.execute("continue", to_string=True)
    if os.environ.get("TD_AS_AVX2_QUIET") != "1":
        sys.stderr.write(f"as_avx2: {state['changed']} cpuid answers masked at {state['sites']} sites in "
                         f"{len(state['files'])} files\n")
    gdb.execute(f"quit {state.get('code', 1)}")


def main():
    argv = sys.argv[1:]
    quiet = "--quiet" in argv[:argv.index("--")] if "--" in argv else False
    if "--" not in argv or not argv[argv.index("--") + 1:]:
        sys.exit(__doc__)
    command = argv[argv.index("--") + 1:]
    for tool, package in (("gdb", "gdb"), ("objdump", "binutils")):
        if shutil.which(tool) is None:
            sys.exit(f"as_avx2: {tool} is not installed (Debian: apt-get install {package}); tools/bootstrap installs it")
    # The command's stdin and stdout are the caller's (a pipe, for the ORT runner): gdb's own
    # messages go to stderr, the program gets fds 3 and 4 back as 0 and 1.
    os.dup2(0, 3)
    os.dup2(1, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)
    me = os.path.abspath(__file__)
    command[0] = shutil.which(command[0]) or command[0]
    env = dict(os.environ, TD_AS_AVX2_COMMAND=json.dumps(command), TD_AS_AVX2_REDIRECT="0<&3 1>&4 3<&- 4<&-",
               TD_AS_AVX2_QUIET="1" if quiet else "0",
               TD_BENCH_CHILD_PREFIX=shlex.join([sys.executable, me, "--quiet", "--"]),
               TD_BENCH_AS_AVX2="1")
    gdb = ["gdb", "-q", "-nx", "-batch", "-x", me]
    sys.exit(subprocess.run(gdb, env=env, stdout=2, pass_fds=(3, 4)).returncode)


try:
    import gdb  # noqa: F401  (sourced by gdb)
except ImportError:
    main()
else:
    in_gdb()
