#!/usr/bin/env bash
# One visit to a lent NVIDIA GPU machine (no internet): install what .gpu/ carries, then probe,
# explain, JIT-build FlashInfer's sampling kernels, run the conformance suite and the sampler
# benchmark on CUDA. Everything lands under $OUT. The recipe is explained in docs/gpu.md.
# Knobs: IMPLS=torch,triton (only these implementations), NO_JIT=1 (skip the FlashInfer build),
# SKIP_EARLY=1 (only the benchmarks), BATCHES, VOCABS, NO_MICRO=1.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 KERNELPOLICY_LOG_FORMAT=off XDG_CACHE_HOME=/tmp/kpcache
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .gpu/wheels/*.whl || exit 1
tar xJf .gpu/flashinfer-slim.tar.xz -C "$site" || exit 1
export PYTHONPATH=$site:$PWD
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvcc --version | tail -2
  python3 -c "import torch, scipy, numpy; print('torch', torch.__version__, 'scipy', scipy.__version__)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
stage() { echo "== $1 ($(date +%T))"; }
stage probe;   python3 -m kernelpolicy probe --json > "$out/probe.json"
stage explain; python3 -m kernelpolicy explain --json > "$out/explain.json"; echo "explain exit $?"
impl_args=(); for i in ${IMPLS//,/ }; do impl_args+=(--impl "$i"); done
if [ -n "${SKIP_EARLY:-}" ]; then stage skip-to-bench; else
if [ -n "${NO_JIT:-}" ]; then stage no-jit; else
stage jit
python3 - > "$out/jit.txt" 2>&1 <<'PY'
import time, torch
t = time.perf_counter()
import flashinfer.sampling as s
logits = torch.randn(4, 128256, device="cuda")
ids = s.top_k_top_p_sampling_from_logits(logits, torch.full((4,), 50, device="cuda"), torch.full((4,), 0.9, device="cuda"), deterministic=True)
torch.cuda.synchronize()
print("flashinfer sampling JIT build + first call:", round(time.perf_counter() - t, 1), "s", ids.tolist())
PY
tail -3 "$out/jit.txt"
fi
stage verify
python3 -m kernelpolicy verify --json --feature sampler.top_k_top_p --feature sampler.greedy \
    --feature rmsnorm --feature topk_per_row "${impl_args[@]}" > "$out/verify.json" 2> "$out/verify.err"
echo "verify exit $?"; python3 - "$out/verify.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    bad = [c["check"] + ": " + c["detail"] for c in r["checks"] if not c["passed"]][:3]
    print(r["feature"], r["impl"], r["status"], r["skipped"] or "", r["seconds"], bad)
PY
fi
stage bench
timeout 420 python3 benchmarks/bench_samplers.py --device cuda --batches "${BATCHES:-1,32,256,1024}" \
    --vocabs "${VOCABS:-128256,151936}" --repeat 20 ${IMPLS:+--impls "$IMPLS"} --json > "$out/samplers.json" 2> "$out/samplers.err"
echo "bench exit $?"; tail -3 "$out/samplers.err"
stage micro
[ -n "${NO_MICRO:-}" ] || python3 scripts/gpu_microbench.py > "$out/micro.json" 2> "$out/micro.err"; cat "$out/micro.json"
stage done
