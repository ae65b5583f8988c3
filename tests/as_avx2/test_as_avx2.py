"""bench/as_avx2.py: a program, a library it dlopens, the program an exec makes of it and a child
started with TD_BENCH_CHILD_PREFIX see CPUID without AVX-512 (a child forked without it does not);
the program's stdin, stdout and exit code are its own (gdb's messages go to stderr).

Usage: test_as_avx2.py <cpuid_probe> <libcpuid_probe_lib.so>
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "as_avx2.py")
probe, library = sys.argv[1], sys.argv[2]


def fail(message):
    sys.exit(f"test_as_avx2: {message}")


def run(command, env):
    return subprocess.run(command, input="hello over stdin\n", capture_output=True, text=True, env=env, timeout=600)


def bits(stdout):
    """{"leaf7 avx512f": "0", "builtin avx512f": "1", ...} from the probe's lines."""
    found = {}
    for line in stdout.splitlines():
        words = line.split()
        for word in words[1:]:
            if "=" in word:
                key, value = word.split("=", 1)
                found[f"{words[0]} {key}"] = value
    return found


env = dict(os.environ, HOME=tempfile.mkdtemp())  # a cold cache of cpuid sites
plain = run([probe, library], env)
if plain.returncode != 7 or "read hello over stdin" not in plain.stdout:
    fail(f"the probe itself: exit {plain.returncode}, {plain.stdout!r} {plain.stderr!r}")
has_avx512 = bits(plain.stdout).get("builtin avx512f") == "1"

masked = run([sys.executable, TOOL, "--", probe, library], env)
if masked.returncode != 7:
    fail(f"the exit code is {masked.returncode}, not the program's 7: {masked.stderr[-2000:]}")
want_lines = plain.stdout.splitlines()
got_lines = masked.stdout.splitlines()
if len(got_lines) != len(want_lines) or got_lines[0] != want_lines[0]:
    fail(f"stdout is not the program's own: {masked.stdout!r}")
got = bits(masked.stdout)
for key in ("leaf7 avx512f", "leaf7 avx512bw", "builtin avx512f", "dlopened avx512f"):
    if got.get(key) != "0":
        fail(f"{key} is {got.get(key)} under as_avx2, not 0: {masked.stdout!r}")
if got.get("leaf7 avx2") != bits(plain.stdout).get("leaf7 avx2"):
    fail(f"AVX2 changed: {plain.stdout!r} -> {masked.stdout!r}")
summary = re.search(r"as_avx2: (\d+) cpuid answers masked at (\d+) sites", masked.stderr)
if not summary or int(summary.group(2)) == 0:
    fail(f"no summary of the sites: {masked.stderr[-2000:]}")
if has_avx512 and int(summary.group(1)) == 0:
    fail(f"an AVX-512 CPU and no answer masked: {masked.stderr[-2000:]}")

# A child started with the prefix the tool exports is masked too; one started without it is not.
script = 'exec $TD_BENCH_CHILD_PREFIX "$0" "$1"'
child = run([sys.executable, TOOL, "--quiet", "--", "/bin/sh", "-c", script, probe, library], env)
if child.returncode != 7 or bits(child.stdout).get("dlopened avx512f") != "0" \
        or bits(child.stdout).get("builtin avx512f") != "0":
    fail(f"a child with TD_BENCH_CHILD_PREFIX: exit {child.returncode}, {child.stdout!r} {child.stderr[-2000:]}")
if "as_avx2:" in child.stderr:
    fail(f"--quiet printed the summary: {child.stderr[-2000:]}")
# The program an exec turns the process into is masked by the same gdb (its old breakpoints gone,
# the new image's set); a child forked without the prefix is not (on an AVX-512 CPU it sees AVX-512).
execed = run([sys.executable, TOOL, "--quiet", "--", "/bin/sh", "-c", 'exec "$0" "$1"', probe, library], env)
if execed.returncode != 7 or bits(execed.stdout).get("dlopened avx512f") != "0" or bits(execed.stdout).get("builtin avx512f") != "0":
    fail(f"an exec'd program: exit {execed.returncode}, {execed.stdout!r} {execed.stderr[-2000:]}")
forked = run([sys.executable, TOOL, "--quiet", "--", "/bin/sh", "-c", '"$0" "$1"; exit $?', probe, library], env)
if forked.returncode != 7 or bits(forked.stdout).get("leaf7 avx512f") != ("1" if has_avx512 else "0"):
    fail(f"a child forked without the prefix: exit {forked.returncode}, {forked.stdout!r} {forked.stderr[-2000:]}")
prefix = shlex.split(subprocess.run([sys.executable, TOOL, "--quiet", "--", "/bin/sh", "-c", "echo $TD_BENCH_CHILD_PREFIX"],
                                    capture_output=True, text=True, env=env).stdout)
if prefix[-1:] != ["--"] or os.path.abspath(prefix[1]) != TOOL:
    fail(f"TD_BENCH_CHILD_PREFIX is {prefix}")

# Bad usage: no command.
usage = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
if usage.returncode == 0 or "Usage: bench/as_avx2.py" not in usage.stderr:
    fail(f"no usage without a command: {usage.returncode} {usage.stderr!r}")
print(f"as_avx2: probe masked (this CPU {'has' if has_avx512 else 'has no'} AVX-512); "
      f"{summary.group(1)} answers masked at {summary.group(2)} sites")
