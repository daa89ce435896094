#!/usr/bin/env bash
# Builds Horovod from its PyPI sdist against the torch in the given venv and installs it.
#
# Four patches of Horovod 0.28.1's sources, each checked to have applied:
# - CMAKE_CXX_STANDARD 14 -> 17 in both CMakeLists.txt files: PyTorch >= 2.1 headers need C++17; -> 20 for an
#   NCCL build, whose sources include torch's CUDA headers (torch 2.14's c10/util/intrusive_ptr.h uses
#   std::strong_ordering, "only available from C++20 onwards"; torch's own extensions build with C++20).
# - GlooContext::InitializeForProcessSet builds its device with the interface of its own, never set,
#   gloo_iface_ instead of the global context's: with HOROVOD_GLOO_IFACE set it then falls back to the
#   hostname, which on many hosts (Debian/Ubuntu defaults, cloud images, containers) resolves to
#   127.0.0.1, and every multi-host launch aborts connecting to [127.0.0.1]:port. The patch hands the
#   global context's interface to the process-set context, as the global, local and cross contexts get it.
# - The background thread of a rank with no tensor in any queue waits for the next enqueue (or 100 ms)
#   instead of running a cycle every HOROVOD_CYCLE_TIME (1 ms): each cycle is a collective with every
#   other rank, so two ranks sharing two cores woke each other a thousand times a second while they
#   computed, and a rank's request waited half a cycle on average for the next one. No cycle can
#   complete anything while a rank has nothing queued (every operation needs every rank's request), and
#   a rank with work queued, joined, autotuning or with dynamic process sets cycles as before.
# - hvd.init() after hvd.shutdown() in the same process starts from Horovod's defaults. Spark reuses its
#   Python workers, so the ranks of a later launch run in the same processes. Unpatched, the settings that
#   only a set variable writes stayed from an earlier launch: a 5 ms HOROVOD_CYCLE_TIME slowed the next
#   launch's MLP from 90,000 to 49,000 samples/s, and a process whose first init had both HOROVOD_CYCLE_TIME
#   and HOROVOD_FUSION_THRESHOLD crashed (SIGSEGV) in its next init: the ParameterManager drops fixed
#   values from its vectors, and the next init's defaults wrote past their end.
# And one of its CMake modules:
# - FindPytorch.cmake treats a CUDA build of torch as a request for Horovod's CUDA operations whenever a CUDA
#   toolkit directory exists, and the build then fails where that toolkit does not match (a CPU cluster's
#   image, this project's CI: torch 2.3.1+cu121 beside CUDA 13 found "FOUND_LIB_cudart NOTFOUND"). Patched,
#   Horovod gets GPU operations only when HOROVOD_GPU_OPERATIONS asks for them (this script sets it where
#   torch sees a GPU); otherwise it is the same Gloo build a CPU torch gets.
# The wheel's version carries the torch it was built against as a local label (0.28.1+torch2.13.0.cpu; pip's
# `horovod==0.28.1` still matches it), so `sparkml-par doctor` can tell a Horovod built for another torch.
# PATCH_LEVEL names this set of patches: it is part of the wheel cache's name, which pip records as the
# installed wheel's origin (direct_url.json), so a build without the current patches is rebuilt. The wheel is cached by Horovod,
# torch and Python versions (a build takes minutes on two cores); a second run installs the cached wheel.
#
# Usage: scripts/build_horovod.sh [PYTHON [CONSTRAINTS]]   (default: .venv/bin/python constraints.txt)
set -euo pipefail

PYTHON=${1:-.venv/bin/python}
CONSTRAINTS=${2:-$(dirname "$0")/../constraints.txt}
[ -f "$CONSTRAINTS" ] || { echo "build_horovod: constraints file '$CONSTRAINTS' not found" >&2; exit 1; }
HOROVOD_VERSION=$(sed -n 's/^horovod==//p' "$CONSTRAINTS")
CACHE_ROOT=${SPARKML_PAR_WHEEL_CACHE:-$HOME/.cache/sparkml_par/wheels}
PATCH_LEVEL=6

die() { echo "build_horovod: $*" >&2; exit 1; }

command -v "${CXX:-g++}" >/dev/null || die "no C++ compiler found (${CXX:-g++}). Install one: apt-get install g++"
command -v cmake >/dev/null || die "cmake not found. Install it: apt-get install cmake (3.13 or newer)"
[ -x "$PYTHON" ] || die "python '$PYTHON' not found. Run 'make setup' to create the virtual environment"
TORCH_VERSION=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
  || die "torch is not importable by $PYTHON: install the pinned torch first (pip install -c $CONSTRAINTS torch)"
TORCH_LABEL="torch${TORCH_VERSION//+/.}"
PY_TAG=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
HAS_CUDA=$("$PYTHON" -c 'import torch; print(int(torch.version.cuda is not None and torch.cuda.is_available()))')
# NCCL where the stack asks for it (a "# horovod gpu operations: NCCL" line in its constraints file) or torch sees
# a GPU; the wheel of an NCCL build is cached apart from the Gloo-only one.
GPU_OPERATIONS=$(sed -n 's/^# horovod gpu operations: *//p' "$CONSTRAINTS")
[ "$HAS_CUDA" = 1 ] && GPU_OPERATIONS=NCCL
case "$GPU_OPERATIONS" in
  "") BUILD_KIND="" ;;
  NCCL) BUILD_KIND="-nccl" ;;
  *) die "$CONSTRAINTS asks for horovod gpu operations '$GPU_OPERATIONS'; this script builds NCCL or none" ;;
esac

if "$PYTHON" - "$HOROVOD_VERSION" "$PATCH_LEVEL" "$TORCH_LABEL" "$GPU_OPERATIONS" <<'PY' 2>/dev/null
import importlib.metadata, sys, horovod, horovod.torch as hvd
# pip records the wheel it installed from: one of this script's, built with this patch level.
source = importlib.metadata.distribution("horovod").read_text("direct_url.json") or ""
built_here = f"/horovod-{sys.argv[1]}-patch{sys.argv[2]}-" in source
nccl = bool(hvd.nccl_built()) == (sys.argv[4] == "NCCL")
sys.exit(0 if horovod.__version__ == f"{sys.argv[1]}+{sys.argv[3]}" and hvd.gloo_built() and built_here and nccl else 1)
PY
then
  echo "build_horovod: horovod $HOROVOD_VERSION (patch level $PATCH_LEVEL) with Gloo${GPU_OPERATIONS:+ and $GPU_OPERATIONS} and PyTorch is already installed"
  exit 0
fi

CACHE_DIR="$CACHE_ROOT/horovod-$HOROVOD_VERSION-patch$PATCH_LEVEL-torch$TORCH_VERSION-$PY_TAG$BUILD_KIND"
WHEEL=$(ls "$CACHE_DIR"/horovod-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$WHEEL" ]; then
  echo "build_horovod: building horovod $HOROVOD_VERSION for torch $TORCH_VERSION ($PY_TAG); this takes a few minutes"
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$WORK" \
    || die "could not download the horovod $HOROVOD_VERSION sdist from the package index"
  tar -xzf "$WORK"/horovod-*.tar.gz -C "$WORK"
  SRC="$WORK/horovod-$HOROVOD_VERSION"
  CXX_STANDARD=17
  [ "$GPU_OPERATIONS" = NCCL ] && CXX_STANDARD=20
  sed -i "s/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD $CXX_STANDARD/" "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
  grep -q "CMAKE_CXX_STANDARD $CXX_STANDARD" "$SRC/horovod/torch/CMakeLists.txt" \
    || die "the C++ standard patch did not apply: horovod/torch/CMakeLists.txt changed upstream"
  sed -i "s/^__version__ = '$HOROVOD_VERSION'\$/__version__ = '$HOROVOD_VERSION+$TORCH_LABEL'/" "$SRC/horovod/__init__.py"
  grep -qF "__version__ = '$HOROVOD_VERSION+$TORCH_LABEL'" "$SRC/horovod/__init__.py" \
    || die "the version label did not apply: horovod/__init__.py changed upstream"
  FIND_TORCH="$SRC/cmake/Modules/FindPytorch.cmake"
  CUDA_TEST='print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)'
  [ "$(grep -cF "$CUDA_TEST" "$FIND_TORCH")" = 1 ] \
    || die "the GPU-operations patch did not apply: cmake/Modules/FindPytorch.cmake changed upstream"
  sed -i "s/import torch; from torch.utils.cpp_extension import CUDA_HOME; print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)/import os, torch; from torch.utils.cpp_extension import CUDA_HOME; print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None) and os.environ.get('HOROVOD_GPU_OPERATIONS')) else False)/" "$FIND_TORCH"
  grep -qF "and os.environ.get('HOROVOD_GPU_OPERATIONS')) else False)" "$FIND_TORCH" \
    || die "the GPU-operations patch did not apply: cmake/Modules/FindPytorch.cmake changed upstream"
  "$PYTHON" - "$SRC/horovod/common" <<'PY' \
    || die "a source patch did not apply (the line above names the file): horovod/common changed upstream"
import sys
root = sys.argv[1] + "/"


def patch(name, replacements):
    path = root + name
    source = open(path).read()
    for unpatched, patched in replacements:
        if source.count(unpatched) != 1:
            sys.exit(f"{name}: {unpatched[:60]!r} not found once")
        source = source.replace(unpatched, patched)
    open(path, "w").write(source)


# The process-set interface.
unpatched = ("  attr device_attr;\n  device_attr.iface = gloo_iface_;\n  device_attr.ai_family = AF_UNSPEC;\n"
             "  auto dev = CreateDevice(device_attr);\n\n  global_ctx = global_context.ctx;\n")
patched = unpatched.replace("  attr device_attr;\n", "  gloo_iface_ = global_context.gloo_iface_;\n  attr device_attr;\n")
patch("gloo/gloo_context.cc", [(unpatched, patched)])
# The idle wait.
patch("tensor_queue.h", [
    ("#include <mutex>\n", "#include <chrono>\n#include <cstdint>\n#include <mutex>\n"),
    ("  void RemoveJoinTensor();\n",
     "  void RemoveJoinTensor();\n\n"
     "  // No tensor of this queue waits for an operation.\n"
     "  bool IsIdle() const;\n\n"
     "  // Tensors enqueued into any queue so far, and a wait until that count passes `seen` or `timeout` ends.\n"
     "  static uint64_t EnqueuedCount();\n"
     "  static void WaitForEnqueue(uint64_t seen, std::chrono::milliseconds timeout);\n"),
])
patch("tensor_queue.cc", [
    ('#include <assert.h>\n',
     '#include <assert.h>\n#include <condition_variable>\n'),
    ("namespace horovod {\nnamespace common {\n",
     "namespace horovod {\nnamespace common {\n\n"
     "namespace {\nstd::mutex enqueued_mutex;\nstd::condition_variable enqueued_signal;\nuint64_t enqueued = 0;\n\n"
     "void NotifyEnqueued() {\n  {\n    std::lock_guard<std::mutex> guard(enqueued_mutex);\n    ++enqueued;\n  }\n"
     "  enqueued_signal.notify_all();\n}\n} // namespace\n\n"
     "uint64_t TensorQueue::EnqueuedCount() {\n  std::lock_guard<std::mutex> guard(enqueued_mutex);\n  return enqueued;\n}\n\n"
     "void TensorQueue::WaitForEnqueue(uint64_t seen, std::chrono::milliseconds timeout) {\n"
     "  std::unique_lock<std::mutex> lock(enqueued_mutex);\n"
     "  enqueued_signal.wait_for(lock, timeout, [seen] { return enqueued != seen; });\n}\n\n"
     "bool TensorQueue::IsIdle() const {\n  std::lock_guard<std::mutex> guard(mutex_);\n"
     "  return tensor_table_.empty() && message_queue_.empty();\n}\n"),
    ("  message_queue_.push(std::move(message));\n  return Status::OK();\n}\n",
     "  message_queue_.push(std::move(message));\n  NotifyEnqueued();\n  return Status::OK();\n}\n"),
    ("    message_queue_.push(std::move(messages[i]));\n  }\n  return Status::OK();\n}\n",
     "    message_queue_.push(std::move(messages[i]));\n  }\n  NotifyEnqueued();\n  return Status::OK();\n}\n"),
])
patch("operations.cc", [
    ("bool RunLoopOnce(HorovodGlobalState& state) {\n",
     "// A rank with no tensor in any queue has nothing a cycle could complete: every other rank's next\n"
     "// operation needs this rank's request for it too. It waits for its next enqueue (or 100 ms) instead\n"
     "// of running a cycle every HOROVOD_CYCLE_TIME, each cycle a collective with every other rank.\n"
     "void WaitWhileIdle(HorovodGlobalState& state) {\n"
     "  if (state.shut_down || state.dynamic_process_sets ||\n"
     "      state.parameter_manager.IsAutoTuning()) {\n    return;\n  }\n"
     "  uint64_t seen = TensorQueue::EnqueuedCount();\n"
     "  for (auto process_set_id : state.process_set_table.Ids()) {\n"
     "    auto& process_set = state.process_set_table.Get(process_set_id);\n"
     "    if (!process_set.initialization_done || process_set.joined ||\n"
     "        !process_set.tensor_queue.IsIdle()) {\n      return;\n    }\n  }\n"
     "  TensorQueue::WaitForEnqueue(seen, std::chrono::milliseconds(100));\n}\n\n"
     "bool RunLoopOnce(HorovodGlobalState& state) {\n  WaitWhileIdle(state);\n\n"),
    # Every init from the defaults.
    ("  // Set background thread affinity\n",
     "  // An init after hvd.shutdown() in the same process starts from the defaults: the settings below are\n"
     "  // otherwise written only where a variable is set, and the values an earlier init fixed stayed.\n"
     "  state.parameter_manager.~ParameterManager();\n"
     "  new (&state.parameter_manager) ParameterManager();\n"
     "  state.cache_capacity = 1024;\n"
     "  state.num_nccl_streams = 1;\n"
     "  state.batch_d2d_memcopies = true;\n"
     "  state.disable_group_fusion = false;\n"
     "  state.enable_async_completion = false;\n"
     "  state.elastic_enabled = false;\n\n"
     "  // Set background thread affinity\n"),
])
PY
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
         HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
  if [ "$GPU_OPERATIONS" = NCCL ]; then
    # The toolkit compiles Horovod's CUDA kernels (for every compute capability its nvcc supports) and links its
    # static runtime; NCCL is the one torch loads, from its nvidia-nccl package, linked by its soname.
    export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    NVCC="$CUDA_HOME/bin/nvcc"
    [ -x "$NVCC" ] || die "NCCL build: no nvcc at $NVCC; install the CUDA toolkit or set CUDA_HOME"
    TOOLKIT_CUDA=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
    TORCH_CUDA=$("$PYTHON" -c 'import torch; print(torch.version.cuda or "")')
    [ -n "$TORCH_CUDA" ] || die "NCCL build: torch $TORCH_VERSION is a CPU build; install the CUDA build the stack pins"
    [ "${TOOLKIT_CUDA%%.*}" = "${TORCH_CUDA%%.*}" ] \
      || die "NCCL build: the CUDA toolkit at $CUDA_HOME is $TOOLKIT_CUDA, torch was built with CUDA $TORCH_CUDA; set CUDA_HOME to a $TORCH_CUDA toolkit"
    NCCL_DIR=$("$PYTHON" -c 'import importlib.util; print(list(importlib.util.find_spec("nvidia.nccl").submodule_search_locations)[0])' 2>/dev/null) \
      || die "NCCL build: the nvidia-nccl package torch depends on is not installed in $PYTHON"
    mkdir -p "$WORK/nccl-lib"
    ln -s "$NCCL_DIR/lib/libnccl.so.2" "$WORK/nccl-lib/libnccl.so"
    export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$CUDA_HOME" HOROVOD_NCCL_LINK=SHARED \
           HOROVOD_NCCL_INCLUDE="$NCCL_DIR/include" HOROVOD_NCCL_LIB="$WORK/nccl-lib"
    echo "build_horovod: building with NCCL ($NCCL_DIR) and CUDA $TOOLKIT_CUDA ($CUDA_HOME)"
  fi
  export MAKEFLAGS="-j$(nproc)"
  "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$WORK/dist" "$SRC" > "$WORK/build.log" 2>&1 || {
    mkdir -p "$CACHE_ROOT"
    cp "$WORK/build.log" "$CACHE_ROOT/horovod-build-failed.log"
    grep -E "error|Error" "$WORK/build.log" | grep -v "^ *File " | head -n 20 >&2
    tail -n 20 "$WORK/build.log" >&2
    die "horovod build failed (its errors above; the whole log: $CACHE_ROOT/horovod-build-failed.log). Check: a C++17 compiler (g++ >= 7), cmake >= 3.13, torch installed in $PYTHON"
  }
  mkdir -p "$CACHE_DIR"
  cp "$WORK"/dist/horovod-*.whl "$CACHE_DIR/"
  WHEEL=$(ls "$CACHE_DIR"/horovod-*.whl | head -n 1)
else
  echo "build_horovod: reusing cached wheel $WHEEL"
fi
"$PYTHON" -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
"$PYTHON" -m pip install --quiet -c "$CONSTRAINTS" cloudpickle psutil pyyaml packaging cffi
"$PYTHON" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "horovod was built without Gloo"'
if [ "$GPU_OPERATIONS" = NCCL ]; then
  "$PYTHON" -c 'import horovod.torch as hvd; assert hvd.nccl_built(), "horovod was built without NCCL"'
fi
echo "build_horovod: installed $(basename "$WHEEL")"
