#!/usr/bin/env bash
# Builds Horovod from its PyPI sdist against the torch in the given venv and installs it.
#
# Two patches of Horovod 0.28.1's sources, each checked to have applied:
# - CMAKE_CXX_STANDARD 14 -> 17 in both CMakeLists.txt files: PyTorch >= 2.1 headers need C++17.
# - GlooContext::InitializeForProcessSet builds its device with the interface of its own, never set,
#   gloo_iface_ instead of the global context's: with HOROVOD_GLOO_IFACE set it then falls back to the
#   hostname, which on many hosts (Debian/Ubuntu defaults, cloud images, containers) resolves to
#   127.0.0.1, and every multi-host launch aborts connecting to [127.0.0.1]:port. The patch hands the
#   global context's interface to the process-set context, as the global, local and cross contexts get it.
# PATCH_LEVEL names this set of patches: it is part of the wheel cache's name, which pip records as the
# installed wheel's origin (direct_url.json), so a build without the current patches is rebuilt. The wheel is cached by Horovod,
# torch and Python versions (a build takes minutes on two cores); a second run installs the cached wheel.
#
# Usage: scripts/build_horovod.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail

PYTHON=${1:-.venv/bin/python}
HOROVOD_VERSION=$(sed -n 's/^horovod==//p' "$(dirname "$0")/../constraints.txt")
CACHE_ROOT=${SPARKML_PAR_WHEEL_CACHE:-$HOME/.cache/sparkml_par/wheels}
PATCH_LEVEL=2

die() { echo "build_horovod: $*" >&2; exit 1; }

command -v "${CXX:-g++}" >/dev/null || die "no C++ compiler found (${CXX:-g++}). Install one: apt-get install g++"
command -v cmake >/dev/null || die "cmake not found. Install it: apt-get install cmake (3.13 or newer)"
[ -x "$PYTHON" ] || die "python '$PYTHON' not found. Run 'make setup' to create the virtual environment"
TORCH_VERSION=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
  || die "torch is not importable by $PYTHON: install the pinned torch first (pip install -c constraints.txt torch)"
PY_TAG=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
HAS_CUDA=$("$PYTHON" -c 'import torch; print(int(torch.version.cuda is not None and torch.cuda.is_available()))')

if "$PYTHON" - "$HOROVOD_VERSION" "$PATCH_LEVEL" <<'PY' 2>/dev/null
import importlib.metadata, sys, horovod, horovod.torch as hvd
# pip records the wheel it installed from: one of this script's, built with this patch level.
source = importlib.metadata.distribution("horovod").read_text("direct_url.json") or ""
built_here = f"/horovod-{sys.argv[1]}-patch{sys.argv[2]}-" in source
sys.exit(0 if horovod.__version__ == sys.argv[1] and hvd.gloo_built() and built_here else 1)
PY
then
  echo "build_horovod: horovod $HOROVOD_VERSION (patch level $PATCH_LEVEL) with Gloo and PyTorch is already installed"
  exit 0
fi

CACHE_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-patch$PATCH_LEVEL-torch$TORCH_VERSION-$PY_TAG"
WHEEL=$(ls "$CACHE_DIR"/horovod-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$WHEEL" ]; then
  echo "build_horovod: building horovod $HOROVOD_VERSION for torch $TORCH_VERSION ($PY_TAG); this takes a few minutes"
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$WORK" \
    || die "could not download the horovod $HOROVOD_VERSION sdist from the package index"
  tar -xzf "$WORK"/horovod-*.tar.gz -C "$WORK"
  SRC="$WORK/horovod-$HOROVOD_VERSION"
  sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$SRC/horovod/torch/CMakeLists.txt" \
    || die "the C++17 patch did not apply: horovod/torch/CMakeLists.txt changed upstream"
  "$PYTHON" - "$SRC/horovod/common/gloo/gloo_context.cc" <<'PY' \
    || die "the process-set interface patch did not apply: horovod/common/gloo/gloo_context.cc changed upstream"
import sys
path = sys.argv[1]
source = open(path).read()
unpatched = ("  attr device_attr;\n  device_attr.iface = gloo_iface_;\n  device_attr.ai_family = AF_UNSPEC;\n"
             "  auto dev = CreateDevice(device_attr);\n\n  global_ctx = global_context.ctx;\n")
if source.count(unpatched) != 1:
    sys.exit(1)
patched = unpatched.replace("  attr device_attr;\n", "  gloo_iface_ = global_context.gloo_iface_;\n  attr device_attr;\n")
open(path, "w").write(source.replace(unpatched, patched))
PY
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
         HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
  if [ "$HAS_CUDA" = 1 ]; then
    export HOROVOD_GPU_OPERATIONS=NCCL
    echo "build_horovod: CUDA found, building with NCCL"
  fi
  export MAKEFLAGS="-j$(nproc)"
  "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$WORK/dist" "$SRC" > "$WORK/build.log" 2>&1 || {
    tail -n 40 "$WORK/build.log" >&2
    die "horovod build failed (log above). Check: a C++17 compiler (g++ >= 7), cmake >= 3.13, torch installed in $PYTHON"
  }
  mkdir -p "$CACHE_DIR"
  cp "$WORK"/dist/horovod-*.whl "$CACHE_DIR/"
  WHEEL=$(ls "$CACHE_DIR"/horovod-*.whl | head -n 1)
else
  echo "build_horovod: reusing cached wheel $WHEEL"
fi
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
"$PYTHON" -m pip install --quiet -c "$(dirname "$0")/../constraints.txt" cloudpickle psutil pyyaml packaging
"$PYTHON" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "horovod was built without Gloo"'
echo "build_horovod: installed $(basename "$WHEEL")"
