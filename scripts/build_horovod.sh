#!/usr/bin/env bash
# Builds Horovod from its PyPI sdist against the torch in the given venv and installs it.
#
# Horovod 0.28.1 sets CMAKE_CXX_STANDARD 14, but PyTorch >= 2.1 headers need C++17, so both
# CMakeLists.txt files are patched. The wheel is cached by Horovod, torch and Python versions
# (a build takes minutes on two cores); a second run installs the cached wheel.
#
# Usage: scripts/build_horovod.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail

PYTHON=${1:-.venv/bin/python}
HOROVOD_VERSION=$(sed -n 's/^horovod==//p' "$(dirname "$0")/../constraints.txt")
CACHE_ROOT=${SPARKML_PAR_WHEEL_CACHE:-$HOME/.cache/sparkml_par/wheels}

die() { echo "build_horovod: $*" >&2; exit 1; }

command -v "${CXX:-g++}" >/dev/null || die "no C++ compiler found (${CXX:-g++}). Install one: apt-get install g++"
command -v cmake >/dev/null || die "cmake not found. Install it: apt-get install cmake (3.13 or newer)"
[ -x "$PYTHON" ] || die "python '$PYTHON' not found. Run 'make setup' to create the virtual environment"
TORCH_VERSION=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
  || die "torch is not importable by $PYTHON: install the pinned torch first (pip install -c constraints.txt torch)"
PY_TAG=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
HAS_CUDA=$("$PYTHON" -c 'import torch; print(int(torch.version.cuda is not None and torch.cuda.is_available()))')

if "$PYTHON" - "$HOROVOD_VERSION" <<'PY' 2>/dev/null
import sys, horovod, horovod.torch as hvd
sys.exit(0 if horovod.__version__ == sys.argv[1] and hvd.gloo_built() else 1)
PY
then
  echo "build_horovod: horovod $HOROVOD_VERSION with Gloo and PyTorch is already installed"
  exit 0
fi

CACHE_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-torch$TORCH_VERSION-$PY_TAG"
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
"$PYTHON" -m pip install --quiet --no-deps "$WHEEL"
"$PYTHON" -m pip install --quiet -c "$(dirname "$0")/../constraints.txt" cloudpickle psutil pyyaml packaging
"$PYTHON" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "horovod was built without Gloo"'
echo "build_horovod: installed $(basename "$WHEEL")"
