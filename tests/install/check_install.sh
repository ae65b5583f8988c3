#!/usr/bin/env bash
# Installs torch-delegate into a DESTDIR inside the build directory, then builds and runs the
# two consumer projects (Meson via pkg-config, CMake via find_package) against that tree; or
# ("subproject") builds a Meson project that uses this checkout, uninstalled, as a subproject.
# Usage: check_install.sh <source root> <build dir> meson|cmake|subproject
set -euo pipefail
source_root=$1 build=$2 kind=$3
log="$build/install-$kind.log"
quiet() { "$@" >"$log" 2>&1 || { cat "$log"; echo "FAILED: $*"; exit 1; }; }
if [[ $kind == subproject ]]; then
  project="$build/consumer-subproject-src"
  rm -rf "$project" "$build/consumer-subproject"
  mkdir -p "$project/subprojects"
  ln -s "$source_root" "$project/subprojects/torch-delegate"
  cp "$source_root/examples/consumer_app.cpp" "$project/"
  cat >"$project/meson.build" <<'MESON'
project('torch-delegate-subproject-consumer', 'cpp', default_options: ['cpp_std=c++20', 'debug=false'])
torch_delegate = dependency('torch_delegate', fallback: ['torch-delegate', 'torch_delegate_dep'],
  default_options: ['tests=false', 'examples=false', 'bench=disabled',
                    'pointwise_fusion=disabled', 'xnnpack=disabled', 'onednn=disabled', 'python=disabled'])
executable('consumer', 'consumer_app.cpp', dependencies: torch_delegate)
MESON
  quiet meson setup "$build/consumer-subproject" "$project"
  # Configured without warnings, and with only the library: no example, and no shipped backend
  # the consumer turned off (pointwise_fusion's per-ISA kernels), is part of a consumer's build.
  if grep -E "WARNING|DEPRECATION" "$log"; then echo "FAILED: the subproject configures with warnings"; exit 1; fi
  if meson introspect "$build/consumer-subproject" --targets | grep -q pointwise; then
    echo "FAILED: a consumer's build has the disabled pointwise_fusion backend's targets"; exit 1
  fi
  # The consumer's own program (header-only): what a consumer waits for.
  quiet ninja -C "$build/consumer-subproject" consumer
  "$build/consumer-subproject/consumer"
  exit 0
fi
stage="$build/install-staging-$kind"
rm -rf "$stage" "$build/consumer-$kind"
quiet meson install -C "$build" --destdir "$stage" --no-rebuild --skip-subprojects
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
installed="$stage$prefix"
test -f "$installed/include/torch_delegate/torch_delegate.hpp"
pc=$(find "$installed" -name torch_delegate.pc); test -n "$pc"
config=$(find "$installed" -name torch_delegateConfig.cmake); test -n "$config"
echo "installed: $(cd "$installed" && find . -name '*.pc' -o -name '*Config*.cmake' | tr '\n' ' ')"
# The shipped backends this build made (backends/): each installed with its library, its header
# directory and its pkg-config file (docs/backends.md).
backends=()
for library in "$build"/backends/*/lib*.so; do
  [[ -e $library ]] || continue
  name=$(basename "$(dirname "$library")")
  backends+=("$name")
  test -f "$installed/lib/"*/"$(basename "$library")" || test -f "$installed/lib/$(basename "$library")" \
    || { echo "FAILED: $(basename "$library") is not installed"; exit 1; }
  test -d "$installed/include/torch_delegate/backends/$name" || { echo "FAILED: no headers for $name"; exit 1; }
  test -n "$(find "$installed" -name "torch_delegate_$name.pc")" || { echo "FAILED: no torch_delegate_$name.pc"; exit 1; }
done
echo "installed backends: ${backends[*]}"

case "$kind" in
  meson)
    PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$stage" \
      quiet meson setup "$build/consumer-meson" "$source_root/examples/consumer_meson"
    quiet ninja -C "$build/consumer-meson"
    # Separately compiled mode: the staged libtorch_delegate.so, which has no rpath to be found by.
    library=$(find "$installed" -name 'libtorch_delegate.so*' | head -1); test -n "$library"
    LD_LIBRARY_PATH="$(dirname "$library")" "$build/consumer-meson/consumer"
    # The Python package, when the build has it (-Dpython): installed with its stubs, importable.
    package=$(find "$installed" -path '*/torch_delegate/__init__.py' | head -1)
    if [[ -n $package ]]; then
      package=$(dirname "$package")
      test -f "$package/_C.pyi" && test -f "$package/py.typed" && ls "$package"/_C.*.so >/dev/null
      PYTHONPATH="$(dirname "$package")" LD_LIBRARY_PATH="$(dirname "$library")" /usr/bin/python3 -c \
        'import torch_delegate; assert isinstance(torch_delegate.backends(), list); print("python package:", torch_delegate.__file__)'
      # Each installed backend library registers its backend when loaded (its run path finds the
      # installed libtorch_delegate; LD_LIBRARY_PATH stands in for the staging directory).
      loads=()
      for name in "${backends[@]}"; do
        loads+=("$name" "$(find "$installed" -name "lib${name}.so" -o -name "lib${name}_backend.so" | head -1)")
      done
      PYTHONPATH="$(dirname "$package")" LD_LIBRARY_PATH="$(dirname "$library")" /usr/bin/python3 -c '
import sys, torch, torch_delegate
pairs = sys.argv[1:]
for name, file in zip(pairs[::2], pairs[1::2]):
    torch.ops.load_library(file)
    names = [b.name for b in torch_delegate.backends()]
    assert name in names, (name, file, names)
    print("installed backend:", name)' "${loads[@]}"
    fi
    ;;
  cmake)
    quiet cmake -S "$source_root/examples/consumer_cmake" -B "$build/consumer-cmake" -G Ninja \
      -DCMAKE_PREFIX_PATH="$installed"
    # Every shipped backend this build has, as a CMake target (the consumer checks their files).
    for name in "${backends[@]}"; do
      grep -q "torch_delegate backends: .*\b$name\b" "$log" || { cat "$log"; echo "FAILED: no CMake target torch_delegate::$name"; exit 1; }
    done
    quiet cmake --build "$build/consumer-cmake"
    "$build/consumer-cmake/consumer"
    ;;
esac
