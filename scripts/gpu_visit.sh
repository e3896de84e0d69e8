#!/usr/bin/env bash
# A visit to a lent NVIDIA GPU machine (no internet): install what .gpu/ carries, then, by stage,
# build the Triton sampler's kernels (running its conformance checks per dtype while they build)
# and FlashInfer's JIT module, run `kernelpolicy verify`, and time FlashInfer, triton and torch
# interleaved call by call. Everything lands under $OUT. The recipe is explained in docs/gpu.md.
#
# STAGE=all (default) runs compile, verify, tests and bench in one call; STAGE=compile,
# STAGE=verify, STAGE=tests and STAGE=bench run one each, so that a visit can be split into calls each well under the
# 10-minute limit on one warm machine: the installed wheels (/tmp/site), Triton's kernel cache
# (TRITON_CACHE_DIR, default /tmp/kp-triton-cache) and FlashInfer's JIT build (under
# XDG_CACHE_HOME=/tmp/kpcache) stay on the machine between calls.
# Knobs: IMPLS=flashinfer,triton,torch, NO_JIT=1 (skip FlashInfer), VERIFY_IMPLS (default IMPLS),
# WARM_DTYPES (the dtypes whose Triton checks run while compiling; default all three), BATCHES,
# VOCABS, DTYPES (benchmark), SCALES, PATHS, REPEAT, BACK_TO_BACK (calls per timed sample).
# STAGE=profile (never part of all): scripts/gpu_profile_samplers.py with PROFILE_ARGS.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 KERNELPOLICY_LOG_FORMAT=off XDG_CACHE_HOME=/tmp/kpcache
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/kp-triton-cache}
site=/tmp/site
gpu=${GPU_DIR:-.gpu}
stage=${STAGE:-all}
impls=${IMPLS:-flashinfer,triton,torch}
[ -n "${NO_JIT:-}" ] && impls=${impls//flashinfer/} && impls=${impls//,,/,} && impls=${impls#,} && impls=${impls%,}
if [ ! -f "$site/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$gpu"/wheels/*.whl || exit 1
  touch "$site/.installed"
fi
if [ -z "${NO_JIT:-}" ] && [ ! -d "$site/flashinfer" ]; then
  tar xJf "$gpu"/flashinfer-slim.tar.xz -C "$site" || exit 1
fi
export PYTHONPATH=$site:$PWD
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
say() { echo "== $1 ($(date +%T))"; }
want() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }

if want compile; then
  say compile
  if [ -z "${NO_JIT:-}" ]; then  # FlashInfer's JIT build (~100 s) beside the Triton builds
    timeout 240 python3 -c "
import time, torch; t = time.perf_counter(); import flashinfer.sampling as s
x = torch.randn(4, 128256, device='cuda')
s.top_k_top_p_sampling_from_logits(x, torch.full((4,), 50, device='cuda'), torch.full((4,), 0.9, device='cuda'), deterministic=True)
torch.cuda.synchronize(); print('flashinfer JIT build + first call', round(time.perf_counter() - t, 1), 's')" \
      > "$out/jit.txt" 2>&1 &
    jit=$!
  fi
  timeout "${WARM_TIMEOUT:-400}" python3 scripts/gpu_warm_triton.py \
      --dtypes "${WARM_DTYPES:-float32,bfloat16,float16}" --bench-dtypes "${DTYPES:-float32,bfloat16}" \
      --bench-vocabs "${VOCABS:-128256,151936}" > "$out/warm.txt" 2>&1
  echo "warm exit $?"; cat "$out/warm.txt"
  if [ -n "${jit:-}" ]; then wait "$jit"; echo "jit exit $?"; tail -2 "$out/jit.txt"; fi
fi

if want verify; then
  say verify
  vimpls=${VERIFY_IMPLS:-$impls}
  impl_args=(); for i in ${vimpls//,/ }; do impl_args+=(--impl "$i"); done
  # --out: rewritten as each implementation finishes, so a timeout keeps what finished
  timeout "${VERIFY_TIMEOUT:-400}" python3 -m kernelpolicy verify --out "$out/verify.json" \
      --feature sampler.top_k_top_p "${impl_args[@]}" > "$out/verify.txt" 2> "$out/verify.err"
  echo "verify exit $?"; python3 - "$out/verify.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
print("complete:", doc.get("complete"))
for r in doc["results"]:
    bad = [c["check"] + ": " + c["detail"] for c in r["checks"] if not c["passed"]]
    print(r["impl"], r["status"], r["skipped"] or "", r["seconds"], "passed:",
          r.get("dtypes_passed"), "failed:", r.get("dtypes_failed"), len(bad), bad[:6])
PY
fi

if want tests; then  # the tests that need a GPU (CUDA graphs replayed against the eager path)
  say tests
  timeout "${TESTS_TIMEOUT:-200}" python3 -m pytest -p no:xdist -q -rs \
      tests/test_kernels_triton_graphs_cuda.py > "$out/cuda-tests.txt" 2>&1
  echo "tests exit $?"; tail -5 "$out/cuda-tests.txt"
fi

if want bench; then
  say bench
  timeout "${BENCH_TIMEOUT:-400}" python3 benchmarks/bench_samplers.py --device cuda \
      --impls "$impls" --batches "${BATCHES:-1,32,256,1024}" --vocabs "${VOCABS:-128256,151936}" \
      --dtypes "${DTYPES:-float32,bfloat16}" --scales "${SCALES:-5,1}" \
      --paths "${PATHS:-top_k,top_p,top_k_top_p}" --repeat "${REPEAT:-15}" \
      --back-to-back "${BACK_TO_BACK:-1}" \
      --json > "$out/samplers.json" 2> "$out/samplers.err"
  echo "bench exit $?"; tail -3 "$out/samplers.err"
  python3 - "$out/samplers.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["device"], "copy GB/s", round(d["copy_gb_per_s"] or 0))
for r in d["rows"]:
    print(f"{r['impl']:<10} {r['path']:<12} {r['dtype']:<8} {r['scale']:>3g} {r['batch']:>5} {r['vocab']:>7} {r['ms']:8.3f} ms {r['x_floor'] or 0:7.1f}x")
PY
fi
if [ "$stage" = profile ]; then  # not part of "all": where the time of a call goes
  say profile
  timeout "${PROFILE_TIMEOUT:-400}" python3 scripts/gpu_profile_samplers.py --impls "$impls" \
      --batches "${BATCHES:-1,32,256,1024}" --scales "${SCALES:-5,1}" ${PROFILE_ARGS:-} \
      > "$out/profile.txt" 2>&1
  echo "profile exit $?"; grep -v "^ " "$out/profile.txt" | grep ":" | head -80
fi
say done
