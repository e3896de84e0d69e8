#!/usr/bin/env bash
# A whole GPU visit in one call (docs/gpu.md): STAGE=all of scripts/gpu_visit.sh (compile,
# verify, the per-call bench of FlashInfer, triton and torch), then, on the same warm machine,
# an optional profile (PROFILE_ARGS, e.g. an A/B by --versus), the per-call bench once more
# (FlashInfer and triton, float32, vocab 128256: "run 2", to see the host's drift) and the
# same back to back. One call, so the machine's short idle release cannot end the visit
# between stages; everything is packed into $OUT/visit.tgz (a call brings back few files).
# Knobs: those of gpu_visit.sh, PROFILE_ARGS (empty: no profile), VISIT_TIMEOUT (default 560).
set -uo pipefail
final=${OUT:?set OUT to the folder that comes back}
work=$(mktemp -d)
export GPU_DIR=${GPU_DIR:-.gpu} IMPLS=${IMPLS:-flashinfer,triton,torch}
export DTYPES=${DTYPES:-float32,bfloat16} VOCABS=${VOCABS:-128256,151936} SCALES=${SCALES:-5,1}
export work
stages() {
  OUT=$work/all STAGE=all REPEAT=15 WARM_TIMEOUT=${WARM_TIMEOUT:-260} \
      VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-100} BENCH_TIMEOUT=${BENCH_TIMEOUT:-90} \
      bash scripts/gpu_visit.sh > "$work/all.log" 2>&1
  echo "== all done $(date +%T)"; grep -v "^ " "$work/all.log" | tail -120
  if [ -n "${PROFILE_ARGS:-}" ]; then
    OUT=$work/profile STAGE=profile IMPLS=triton BATCHES=${PROFILE_BATCHES:-32,256,1024} \
        PROFILE_TIMEOUT=110 bash scripts/gpu_visit.sh > "$work/profile.log" 2>&1
    echo "== profile done $(date +%T)"; grep -v "^ " "$work/profile/profile.txt" | grep ":" | head -60
  fi
  OUT=$work/run2 STAGE=bench IMPLS=flashinfer,triton DTYPES=float32 VOCABS=128256 REPEAT=15 \
      BENCH_TIMEOUT=60 bash scripts/gpu_visit.sh > "$work/run2.log" 2>&1
  echo "== run 2 done $(date +%T)"; grep -v "^ " "$work/run2.log" | tail -40
  OUT=$work/b2b STAGE=bench IMPLS=flashinfer,triton DTYPES=float32 VOCABS=128256 REPEAT=9 \
      BACK_TO_BACK=10 BENCH_TIMEOUT=60 bash scripts/gpu_visit.sh > "$work/b2b.log" 2>&1
  echo "== back to back done $(date +%T)"; grep -v "^ " "$work/b2b.log" | tail -40
}
export -f stages
timeout "${VISIT_TIMEOUT:-560}" bash -c stages
tar czf "$final/visit.tgz" -C "$work" .
echo "packed $(date +%T): $final/visit.tgz"
