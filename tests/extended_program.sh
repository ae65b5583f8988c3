#!/bin/sh
# Runs a program of the extended setup's tests (benchmarks, leak cycles, the -O2 quickstart).
# They are not part of the default build, as `meson compile` builds every program a test names:
# `meson compile -C <build> extended` builds them (tools/bootstrap does, for --setup extended).
# Usage: extended_program.sh <program> [arguments...]
program=$1
shift
if [ ! -x "$program" ]; then
  echo "$program is not built: the extended setup's programs are built by 'meson compile -C <build dir> extended'" >&2
  exit 1
fi
exec "$program" "$@"
