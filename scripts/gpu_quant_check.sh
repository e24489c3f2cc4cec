#!/usr/bin/env bash
# GPU check of the Triton quantization kernels (issue #4), for a machine with a CUDA GPU. About 2 minutes on an H200.
#   1. the gpu-marked twins of tests/quant/test_triton*.py (the same bit-exactness / SQNR checks as the CPU
#      interpreter runs, compiled for the GPU, every GemmTiles variant included), with TRITON_INTERPRET=0;
#   2. benchmarks/quant_speed.py --gpu-only (QUICK=1: --quick): Triton int8/int4 GEMM (+SERQ residual), a sweep
#      of GemmTiles, fused STaMP quantize and per-token quantize vs torch bf16 matmul and cuBLAS int8.
# Results go under $OUT (default ./gpu_quant_out): pytest.log, junit.xml, quant_speed.json, env.txt.
# Usage: OUT=/some/dir scripts/gpu_quant_check.sh   [PYTHON=/path/to/python]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu_quant_out}"
mkdir -p "$OUT"
export TRITON_INTERPRET=0  # set, not unset: tests/conftest.py turns the interpreter on when /dev/nvidia0 is absent
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the checkout, not an installed copy
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  "$PYTHON" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'triton', triton.__version__)" 2>&1
} | tee "$OUT/env.txt"
if ! "$PYTHON" -c "import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_quant_check: needs torch with CUDA and triton in $PYTHON" | tee -a "$OUT/env.txt"
  exit 2
fi
rc=0
timeout 240 "$PYTHON" -m pytest -q -rfE --tb=short -p no:cacheprovider -m "gpu and kernels" -o addopts="" \
  --import-mode=importlib \
  --junitxml="$OUT/junit.xml" tests/quant/test_triton_kernels.py tests/quant/test_triton_linear.py \
  2>&1 | tee "$OUT/pytest.log" || rc=1
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
timeout 200 "$PYTHON" benchmarks/quant_speed.py --gpu-only ${QUICK:+--quick} 2> "$OUT/quant_speed.log" | tail -1 \
  > "$OUT/quant_speed.json" || rc=1
cat "$OUT/quant_speed.json"
echo "gpu_quant_check: rc=$rc (results in $OUT)"
exit $rc
