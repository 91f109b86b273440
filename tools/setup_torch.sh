#!/usr/bin/env bash
# tools/setup_torch.sh: a virtual environment with a PyTorch 2.x CPU build, in .venv/ at the
# repository root, for tools/bench_torch.py (--mode compile needs 2.x) and tools/bench_cpu_table.sh.
# Nothing in the build, the tests or CI uses it; .venv/ is git-ignored.
#
#   bash tools/setup_torch.sh          # create .venv/ and install torch (once); print its version
#   .venv/bin/python tools/bench_torch.py vit --mode compile --steps 3
#
# Idempotent: when .venv/bin/python already imports torch 2.x (and numpy, which torch warns about
# when it is missing) it installs nothing and only prints the version. The wheel comes from
# PyTorch's CPU-only index (https://download.pytorch.org/whl/cpu) when that answers, else from the
# default package index, whose Linux wheel also pulls the CUDA libraries as dependencies (a few
# GB, unused on the CPU; torch.__version__ then ends in +cuNNN).
#
# Needs Debian's python3-venv; as root the script installs it with apt-get when it is missing,
# otherwise it stops and says so. torch.compile's inductor backend compiles C++ that includes
# Python.h, so python3-dev is installed (or asked for) the same way.
# Environment: PYTHON (the interpreter the venv is made from, default /usr/bin/python3),
# VENV (default .venv at the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-/usr/bin/python3}
VENV=${VENV:-.venv}
CPU_INDEX=https://download.pytorch.org/whl/cpu

has_torch2() {
    "$VENV/bin/python" -c 'import sys, numpy, torch; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' \
        2>/dev/null
}
print_version() {
    "$VENV/bin/python" -c 'import sys, torch; print("tools/setup_torch.sh: torch", torch.__version__, "in", sys.prefix)'
}

if [ -x "$VENV/bin/python" ] && has_torch2; then
    print_version
    exit 0
fi

[ -x "$PYTHON" ] || { echo "tools/setup_torch.sh: $PYTHON not found (set PYTHON=/path/to/python3)" >&2; exit 2; }

# Debian packages: python3-venv (ensurepip, without which `python3 -m venv` fails) and python3-dev
# (Python.h, for torch.compile). Installed as `make deps` installs the build's packages.
missing=""
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing="$missing python3-venv"
inc=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -e "$inc/Python.h" ] || missing="$missing python3-dev"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "tools/setup_torch.sh: installing:$missing"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    else
        echo "tools/setup_torch.sh: missing Debian packages:$missing" >&2
        echo "  install them first (as root): apt-get install -y$missing" >&2
        exit 2
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "tools/setup_torch.sh: creating $VENV from $PYTHON ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
fi

# Is PyTorch's CPU-only index reachable? (A quick probe: pip itself would retry for minutes.)
if "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=15)' \
        "$CPU_INDEX" 2>/dev/null; then
    echo "tools/setup_torch.sh: installing torch 2.x from $CPU_INDEX"
    "$VENV/bin/python" -m pip install --index-url "$CPU_INDEX" --extra-index-url https://pypi.org/simple "torch>=2" numpy
else
    echo "tools/setup_torch.sh: $CPU_INDEX does not answer; installing torch 2.x from the default index"
    echo "  (its Linux wheel brings the CUDA libraries too: a few GB to download)"
    "$VENV/bin/python" -m pip install "torch>=2" numpy
fi

has_torch2 || { echo "tools/setup_torch.sh: $VENV/bin/python does not import torch 2.x and numpy after the install" >&2; exit 1; }
print_version
