#!/usr/bin/env bash
# One visit to a lent NVIDIA GPU machine (no internet): install what .gpu/ carries, then probe,
# check that the Triton sampler builds for every dtype, JIT-build FlashInfer's sampling kernels,
# run the conformance suite for every sampler implementation and dtype, and time FlashInfer,
# triton and torch interleaved call by call. Everything lands under $OUT (at most 8 files). The
# recipe is explained in docs/gpu.md.
# Knobs: IMPLS=flashinfer,triton,torch, NO_JIT=1 (skip FlashInfer), SKIP_VERIFY=1, BATCHES,
# VOCABS, DTYPES, SCALES, REPEAT.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 KERNELPOLICY_LOG_FORMAT=off XDG_CACHE_HOME=/tmp/kpcache
site=/tmp/site
gpu=${GPU_DIR:-.gpu}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$gpu"/wheels/*.whl || exit 1
[ -n "${NO_JIT:-}" ] || tar xJf "$gpu"/flashinfer-slim.tar.xz -C "$site" || exit 1
export PYTHONPATH=$site:$PWD
impls=${IMPLS:-flashinfer,triton,torch}
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
stage() { echo "== $1 ($(date +%T))"; }
stage compile
timeout 240 python3 scripts/gpu_compile_check.py > "$out/compile.txt" 2>&1; echo "compile exit $?"
cat "$out/compile.txt"
if [ -z "${NO_JIT:-}" ]; then
  stage jit
  timeout 200 python3 -c "
import time, torch; t = time.perf_counter(); import flashinfer.sampling as s
x = torch.randn(4, 128256, device='cuda')
s.top_k_top_p_sampling_from_logits(x, torch.full((4,), 50, device='cuda'), torch.full((4,), 0.9, device='cuda'), deterministic=True)
torch.cuda.synchronize(); print('flashinfer JIT build + first call', round(time.perf_counter() - t, 1), 's')" 2>&1 | tail -2
fi
if [ -z "${SKIP_VERIFY:-}" ]; then
  stage verify
  impl_args=(); for i in ${impls//,/ }; do impl_args+=(--impl "$i"); done
  timeout 300 python3 -m kernelpolicy verify --json --feature sampler.top_k_top_p \
      "${impl_args[@]}" > "$out/verify.json" 2> "$out/verify.err"
  echo "verify exit $?"; python3 - "$out/verify.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    bad = [c["check"] + ": " + c["detail"] for c in r["checks"] if not c["passed"]]
    print(r["impl"], r["status"], r["skipped"] or "", r["seconds"], "passed:",
          r.get("dtypes_passed"), "failed:", r.get("dtypes_failed"), len(bad), bad[:6])
PY
fi
stage bench
timeout 400 python3 benchmarks/bench_samplers.py --device cuda --impls "$impls" \
    --batches "${BATCHES:-1,32,256,1024}" --vocabs "${VOCABS:-128256,151936}" \
    --dtypes "${DTYPES:-float32,bfloat16}" --scales "${SCALES:-5,1}" --repeat "${REPEAT:-15}" \
    --json > "$out/samplers.json" 2> "$out/samplers.err"
echo "bench exit $?"; tail -3 "$out/samplers.err"
python3 - "$out/samplers.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["device"], "copy GB/s", round(d["copy_gb_per_s"] or 0))
for r in d["rows"]:
    print(f"{r['impl']:<10} {r['path']:<12} {r['dtype']:<8} {r['scale']:>3g} {r['batch']:>5} {r['vocab']:>7} {r['ms']:8.3f} ms {r['x_floor']:7.1f}x")
PY
stage done
