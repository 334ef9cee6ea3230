#!/usr/bin/env bash
# Checks Reveal's GPU paths on a host with an NVIDIA GPU, its driver, nvidia-smi and a
# CUDA build of PyTorch, and keeps what it saw in OUTDIR:
#   host.txt         GPU, driver, kernel, PyTorch, bpftrace and BTF as this host has them
#   pytest.txt       tests/test_gpu_real.py (the gpu and gpu_procs probes against nvidia-smi)
#   nvml.json        every NVML answer the gpu probe uses, recorded under a training load
#   nvml_procs.json  the per-process answers the gpu_procs probe uses, same moment
#   smi.csv          nvidia-smi's own readings every 0.5 s during the two recordings
#   runs.tgz         a baseline and a fault run (a second process contends for the GPU
#                    from FAULT_AT_S for FAULT_S seconds: FAULT_KIND=matmul, bf16 matrix
#                    products, or copy, 32 GiB held and copied), their analysis (report.json,
#                    report.html, analyze.txt) and the training job's progress lines
# Usage: bash scripts/gpu_check.sh [--cpu] OUTDIR   (BASELINE_S, RUN_S, FAULT_AT_S, FAULT_S
#        in s, FAULT_KIND, WARMUP_S, TESTS (the test files), SKIP_TESTS=1 to leave out the
#        tests and the NVML recording, SKIP_BUILD=1 to leave the C extension as it is)
# --cpu: a dry run without a GPU, so that the script cannot rot: the replayed-NVML tests
#        (tests/test_probes_gpu.py, tests/test_gpu_procs_poll.py) instead of the real ones,
#        no NVML recording or nvidia-smi, a NumPy training job and a busy loop for the
#        contention.
# Exit status: pytest's (0 when SKIP_TESTS); any other step that fails ends the check with
# its own status.
set -euo pipefail
cpu=""
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
out=${1:?usage: bash scripts/gpu_check.sh [--cpu] OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
baseline_s=${BASELINE_S:-75} run_s=${RUN_S:-60} fault_at_s=${FAULT_AT_S:-20} fault_s=${FAULT_S:-20}
fault_kind=${FAULT_KIND:-matmul} warmup_s=${WARMUP_S:-10}
if [ -n "$cpu" ]; then
  tests=${TESTS:-tests/test_probes_gpu.py tests/test_gpu_procs_poll.py}
else
  tests=${TESTS:-tests/test_gpu_real.py}
fi
work=$(mktemp -d)
runs=$work/runs
mkdir -p "$runs"
step() { echo "== $* ($(date +%T))"; }
cleanup() {
  kill ${train:-} ${smi:-} 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'cleanup; rm -rf "$work"' EXIT

step host
{
  uname -a
  echo "CPUs $(nproc)"
  if [ -n "$cpu" ]; then
    echo "dry run without a GPU (--cpu)"
    "$py" -c "import numpy; print('numpy', numpy.__version__)"
  else
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max --format=csv
    "$py" -c "import torch, pynvml; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.version.cuda)"
    "$py" -c "import torch, glob, os; print('libcudart', glob.glob(os.path.dirname(torch.__file__) + '/../nvidia/*/lib/libcudart*'))"
  fi
  command -v bpftrace || echo "bpftrace: not installed"
  ls -l /sys/kernel/btf/vmlinux 2>&1 || true
  echo "perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>&1)"
} 2>&1 | tee "$out/host.txt"
if [ -z "$cpu" ]; then nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1; fi

if [ -z "${SKIP_BUILD:-}" ]; then
  step "C extension"
  (cd "$here" && "$py" setup.py -q build_ext --inplace) > "$work/build.log" 2>&1 \
    || echo "C extension not built: the collector uses its pure-Python readers"
fi

rc=0
if [ -z "${SKIP_TESTS:-}" ]; then
  step "GPU tests ($tests)"
  # shellcheck disable=SC2086  # the test files are words
  (cd "$here" && "$py" -m pytest -q -p no:cacheprovider $tests) 2>&1 | tee "$out/pytest.txt" \
    || rc=$?
fi

if [ -n "$cpu" ]; then
  step "training job (NumPy, on the CPUs)"
  # BLAS on one core, as the workloads' launcher runs it: one CPU's job, not the host's
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$py" -m reveal.inject.workloads.numpy_train --duration 900 --data-dir "$work/data" \
    > "$runs/train.jsonl" 2>&1 &
  train=$!
  sleep "$warmup_s"
else
  step "training job on the GPU"
  "$py" -m reveal.inject.workloads.torch_train --device cuda --duration 900 \
    --data-dir "$work/data" > "$runs/train.jsonl" 2>&1 &
  train=$!
  sleep "$warmup_s"
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm,clocks.mem --format=csv -lms 500 > "$out/smi.csv" 2>&1 &
  smi=$!
  if [ -z "${SKIP_TESTS:-}" ]; then
    step "NVML recording"
    "$py" "$here/tests/fixtures/nvml/record_nvml.py" "$out/nvml.json" --ticks 4 --interval 0.2 \
      --procs "$out/nvml_procs.json" 2>&1 | tail -5
  fi
fi

step "baseline (${baseline_s} s)"
"$py" -m reveal collect --duration "$baseline_s" --out "$runs/baseline" --quiet 2>&1 | tail -5
step "fault run (${run_s} s; contention ($fault_kind${cpu:+, a busy loop}) at ${fault_at_s} s for ${fault_s} s)"
(sleep "$fault_at_s"; date +%s.%N > "$runs/fault_start"
 if [ -n "$cpu" ]; then
   "$py" -c "import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end: pass" "$fault_s"
 else
   "$py" - "$fault_s" "$fault_kind" <<'PY'
import sys, time, torch
deadline = time.monotonic() + float(sys.argv[1])
if sys.argv[2] == "copy":  # hold 32 GiB and copy it back and forth: memory and DRAM
    a = torch.empty(16 * 2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    while time.monotonic() < deadline:
        b.copy_(a)
        a.copy_(b)
        torch.cuda.synchronize()
else:  # bf16 matrix products: the SMs
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.monotonic() < deadline:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
PY
 fi
 date +%s.%N > "$runs/fault_end") &
contend=$!
"$py" -m reveal collect --duration "$run_s" --out "$runs/fault" --quiet 2>&1 | tail -5
wait "$contend"

step analysis
analysed=0
"$py" -m reveal analyze "$runs/fault" --baseline "$runs/baseline" --json "$runs/report.json" \
  --html "$runs/report.html" > "$runs/analyze.txt" 2>&1 || analysed=$?
tail -40 "$runs/analyze.txt"
if [ "$analysed" -ne 0 ]; then echo "reveal analyze failed (exit $analysed)" >&2; exit "$analysed"; fi
cleanup
tar czf "$out/runs.tgz" -C "$work" runs
ls -l "$out"
step "done (pytest exit status $rc)"
exit "$rc"
