#!/usr/bin/env bash
# issue 27 visit: install what .gpu/ carries, then scripts/gpu_cold_start.py into $OUT.
# VISIT=full (default): the worker, cold and warm stages (about 9 minutes of device time);
# VISIT=short: two empty-cache first calls and the warm-one stage (a cache holding the measured
# variant only; about 2 minutes after the install); VISIT=worker: the worker stage (with and
# without a KERNELPOLICY_ variable) and warm-one with a profile of the first call;
# VISIT=warm-one: that last stage alone; VISIT=warm: kernelpolicy warm, then three processes;
# VISIT=resolve: the worker stage alone, with its profile.
set -uo pipefail
site=/tmp/site; gpu=.gpu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$gpu"/wheels/*.whl >/dev/null 2>&1
tar xJf "$gpu"/flashinfer-slim.tar.xz -C "$site"
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1 KERNELPOLICY_LOG_FORMAT=off
# The lent machine sets PYTHONDONTWRITEBYTECODE=1 and its venv has no bytecode: every process
# would compile every module it imports (torch's, Triton's, pydantic's, kernelpolicy's) from
# source, which a node whose packages pip installed never does. Compile them once, as pip's
# install does, under a prefix (the venv is left as it is); processes read it from there. The
# prefix holds the standard library's bytecode too: a process with a prefix reads bytecode only
# from it (without, six standard modules took 47-144 ms to import instead of about 13).
export PYTHONPYCACHEPREFIX=/tmp/pycache
venv=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
stdlib=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
python3 -m compileall -q -j 16 "$stdlib" "$venv" "$site" kernelpolicy >/dev/null 2>&1
echo "bytecode compiled under $PYTHONPYCACHEPREFIX: $(find /tmp/pycache -name '*.pyc' | wc -l) files"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "${VISIT:-full}" = warm ]; then
    KP_WARM_CACHE=${KP_WARM_CACHE:-/tmp/kp-warm-fixed} timeout 400 python3 scripts/gpu_cold_start.py --out $OUT --stage warm --runs 3
elif [ "${VISIT:-full}" = warm-one ]; then
    PROFILE_FIRST_CALL=1 timeout 240 python3 scripts/gpu_cold_start.py --out $OUT --stage warm-one --runs 3
elif [ "${VISIT:-full}" = resolve ]; then
    PROFILE_RESOLVE=1 timeout 150 python3 scripts/gpu_cold_start.py --out $OUT --stage worker --runs 3
elif [ "${VISIT:-full}" = worker ]; then
    PROFILE_RESOLVE=1 timeout 150 python3 scripts/gpu_cold_start.py --out $OUT --stage worker --runs 3
    PROFILE_FIRST_CALL=1 timeout 240 python3 scripts/gpu_cold_start.py --out $OUT --stage warm-one --runs 3
elif [ "${VISIT:-full}" = short ]; then
    COLD_WAIT_S=0 timeout 90 python3 scripts/gpu_cold_start.py --out $OUT --stage cold --runs 2
    timeout 200 python3 scripts/gpu_cold_start.py --out $OUT --stage warm-one --runs 3
else
    timeout 60 python3 scripts/gpu_cold_start.py --out $OUT --stage worker --runs 3
    COLD_WAIT_S=110 timeout 290 python3 scripts/gpu_cold_start.py --out $OUT --stage cold --runs 2
    KP_WARM_CACHE=/tmp/kp-warm-fixed timeout 230 python3 scripts/gpu_cold_start.py --out $OUT --stage warm --runs 3
fi
echo done
