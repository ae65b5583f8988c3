#!/usr/bin/env bash
# Builds examples/out_of_tree_backend as its author would, against this build tree uninstalled
# (PKG_CONFIG_PATH=<build>/meson-uninstalled: torch_delegate_toolkit.pc, torch_delegate_compiled.pc),
# then runs its check: the backend loaded beside the Python package, a model lowered partially to it.
# Usage: check_out_of_tree.sh <source root> <build dir>
set -euo pipefail
source_root=$1 build=$2
out="$build/out-of-tree-backend"
log="$build/out-of-tree-backend.log"
quiet() { "$@" >"$log" 2>&1 || { cat "$log"; echo "FAILED: $*"; exit 1; }; }
rm -rf "$out"
PKG_CONFIG_PATH="$build/meson-uninstalled" quiet meson setup "$out" "$source_root/examples/out_of_tree_backend"
quiet ninja -C "$out"
if grep -n "warning:" "$log"; then echo "FAILED: the out-of-tree backend builds with warnings"; exit 1; fi
PYTHONPATH="$build/python" /usr/bin/python3 "$source_root/examples/out_of_tree_backend/check.py" "$out/libcblas_linear.so" "$out"
