#!/usr/bin/env bash
# One visit to a lent GPU machine: probe it through real NVML and cross-check with torch.
# Needs the wheels in .whl/ (see docs/gpu.md); writes everything under $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
out=${OUT:-/tmp/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,pci.device_id,memory.total,driver_version,compute_cap --format=csv \
    | tee "$out/nvidia-smi.csv"
python3 -m kernelpolicy probe --json > "$out/probe.json"; echo "probe exit $?"
python3 -m kernelpolicy probe
CUDA_VISIBLE_DEVICES=0,7 python3 -m kernelpolicy probe --json > "$out/probe-cvd.json"
python3 - "$out" <<'PY'
import json, sys, time, pynvml
import kernelpolicy
out = sys.argv[1]
t = time.perf_counter(); kernelpolicy.probe(); first = time.perf_counter() - t
times = []
for _ in range(50):
    t = time.perf_counter(); kernelpolicy.probe(); times.append(time.perf_counter() - t)
times.sort()
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
try:
    attrs = pynvml.nvmlDeviceGetAttributes(h).multiprocessorCount
except pynvml.NVMLError as exc:
    attrs = f"error: {exc}"
cores = pynvml.nvmlDeviceGetNumGpuCores(h)
pynvml.nvmlShutdown()
import torch  # only after the probe: it must not need a CUDA context
p = torch.cuda.get_device_properties(0)
snap = json.load(open(f"{out}/probe.json"))
dev = snap["devices"][0]
check = {
    "probe_first_call_s": first, "probe_median_s": times[len(times) // 2],
    "nvml_attributes_sm": attrs, "nvml_num_gpu_cores": cores,
    "torch": {"name": p.name, "sm": p.multi_processor_count, "cc": f"{p.major}.{p.minor}",
              "mem_mib": p.total_memory // 2**20, "cuda": torch.version.cuda},
    "agree": {"name": p.name == dev["name"], "sm": p.multi_processor_count == dev["compute_units"],
              "cc": f"{p.major}.{p.minor}" == dev["capability"],
              "torch_cuda": torch.version.cuda == snap["torch"]["cuda"]},
}
json.dump(check, open(f"{out}/crosscheck.json", "w"), indent=2)
print(json.dumps(check, indent=2))
PY
cat "$out/probe-cvd.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print('cvd:', [x['index'] for x in d['devices']], d['probe_errors'])"
