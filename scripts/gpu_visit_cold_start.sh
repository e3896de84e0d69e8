#!/usr/bin/env bash
# issue 27 visit: install what .gpu/ carries, then scripts/gpu_cold_start.py (worker, cold, warm stages) into $OUT.
set -uo pipefail
site=/tmp/site; gpu=.gpu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$gpu"/wheels/*.whl >/dev/null 2>&1
tar xJf "$gpu"/flashinfer-slim.tar.xz -C "$site"
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1 KERNELPOLICY_LOG_FORMAT=off
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 60 python3 scripts/gpu_cold_start.py --out $OUT --stage worker --runs 3
COLD_WAIT_S=110 timeout 290 python3 scripts/gpu_cold_start.py --out $OUT --stage cold --runs 2
KP_WARM_CACHE=/tmp/kp-warm-fixed timeout 230 python3 scripts/gpu_cold_start.py --out $OUT --stage warm --runs 3
echo done
