#!/usr/bin/env bash
# Installs torch-delegate into a DESTDIR inside the build directory, then builds and runs the
# two consumer projects (Meson via pkg-config, CMake via find_package) against that tree.
# Usage: check_install.sh <source root> <build dir> meson|cmake
set -euo pipefail
source_root=$1 build=$2 kind=$3
log="$build/install-$kind.log"
quiet() { "$@" >"$log" 2>&1 || { cat "$log"; echo "FAILED: $*"; exit 1; }; }
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

case "$kind" in
  meson)
    PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$stage" \
      quiet meson setup "$build/consumer-meson" "$source_root/examples/consumer_meson"
    quiet ninja -C "$build/consumer-meson"
    "$build/consumer-meson/consumer"
    ;;
  cmake)
    quiet cmake -S "$source_root/examples/consumer_cmake" -B "$build/consumer-cmake" -G Ninja \
      -DCMAKE_PREFIX_PATH="$installed"
    quiet cmake --build "$build/consumer-cmake"
    "$build/consumer-cmake/consumer"
    ;;
esac
