#!/usr/bin/env bash
# One run (at most 8 minutes) that proves Reveal's GPU paths on a host with an NVIDIA GPU,
# its driver, nvidia-smi, bpftrace (as root) and a CUDA build of PyTorch, and keeps what it
# saw in OUTDIR:
#   nvml/             the NVML probes against nvidia-smi (tests/test_gpu_real.py: pytest.txt,
#                     pytest.rc) and the NVML fixtures re-recorded from the driver under a
#                     training load (recorded.json, recorded_procs.json: the format of
#                     tests/fixtures/nvml and tests/fixtures/nvml_procs)
#   trace.json        Reveal's eBPF capture of a PyTorch training job with one NCCL rank
#                     against the job's own counts (torch.profiler and its counters), and
#                     the capture's cost on its step time (scripts/gpu_trace_check.py)
#   alarms/           the GPU fault kinds against a live `reveal watch` and in batch, after
#                     a clean span (scripts/gpu_alarms.py --kinds ...: summary.json, the
#                     watch's log and alerts)
#   gpu_proof.json    all of it in one file: revision (commit, dirty paths), date, host,
#                     driver, GPU, every setting, every figure with its target and pass/fail
#                     (scripts/gpu_proof.py)
# The GPU's clocks and power limit are always restored at the end (trap).
#
# Usage: bash scripts/gpu_proof.sh [--cpu] OUTDIR
#   --cpu   a dry run without a GPU, so that the script cannot rot: the replayed-NVML tests,
#           no NVML recording ("refused: no GPU"), the eBPF step against the stand-in
#           libraries of tests/fixtures/ebpf with a NumPy job, the fault kinds that have a
#           CPU stand-in (tenant: a NumPy job; h2d: a memory copy loop; loader: busy loops)
#           and the others refused "no GPU"; held to dry-run targets (the counts still
#           exact, the alarms' verdicts recorded rather than judged).
# Settings (environment): WARMUP_S LEARN_S CLEAN_S FAULT_S GAP_S RESOLVE_S (the alarms
#   step, seconds), STEPS (training steps per phase of the eBPF step), KINDS (fault kinds),
#   TESTS (the NVML test files), PROOF_ARGS (more targets for scripts/gpu_proof.py: a later
#   option wins), PYTHON.
# Exit status: 0 when every check met its target, 1 when one did not (scripts/gpu_proof.py);
#   2 on a usage error; a step's own status when a step could not run at all.
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
cpu=""
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --cpu) cpu=1; shift ;;
esac
if [ $# -ne 1 ] || [ -z "$1" ]; then usage >&2; exit 2; fi
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
started=$(date +%s.%N)
mode=gpu
if [ -n "$cpu" ]; then mode=cpu; fi
if [ -n "$cpu" ]; then
  warmup_s=${WARMUP_S:-1} learn_s=${LEARN_S:-15} clean_s=${CLEAN_S:-5} fault_s=${FAULT_S:-3}
  gap_s=${GAP_S:-5} resolve_s=${RESOLVE_S:-2} steps=${STEPS:-200}
  tests=${TESTS:-tests/test_probes_gpu.py::test_channels_identity_and_values tests/test_probes_gpu.py::test_a_captured_h200_replays_with_what_it_lacks_named}
  targets=(--alarm-verdicts recorded --max-cost 100 --max-alert-s 1000 --max-clean-alerts 100
           --max-clean-share 1 --min-clean-s "$clean_s" --max-total-s 600)
else
  warmup_s=${WARMUP_S:-10} learn_s=${LEARN_S:-63} clean_s=${CLEAN_S:-60} fault_s=${FAULT_S:-12}
  gap_s=${GAP_S:-20} resolve_s=${RESOLVE_S:-10} steps=${STEPS:-300}
  tests=${TESTS:-tests/test_gpu_real.py}
  targets=(--min-clean-s "$clean_s")
fi
kinds=${KINDS:-throttle,tenant,memfull,h2d,loader,nccl_stall}
# shellcheck disable=SC2206  # PROOF_ARGS are words
targets+=(${PROOF_ARGS:-})
mkdir -p "$out/nvml" "$out/alarms"
step() { echo "== $* ($(date +%T))"; }

power_limit=""
restore() {
  if [ -z "$cpu" ] && command -v nvidia-smi > /dev/null; then
    nvidia-smi -i 0 -rgc > /dev/null 2>&1 || true
    if [ -n "$power_limit" ]; then nvidia-smi -i 0 -pl "$power_limit" > /dev/null 2>&1 || true; fi
  fi
}
cleanup() {
  restore
  if [ -n "${train:-}" ]; then kill "$train" 2>/dev/null || true; wait "$train" 2>/dev/null || true; fi
  rm -rf "${work:-}"
}
work=$(mktemp -d)
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ -z "$cpu" ]; then
  power_limit=$(nvidia-smi -i 0 --query-gpu=power.limit --format=csv,noheader,nounits | tr -d ' ')
fi

step "NVML probes against ${cpu:+the replayed }NVML ($tests)"
rc=0
# shellcheck disable=SC2086  # the test files are words
(cd "$here" && "$py" -m pytest -q -p no:cacheprovider $tests) > "$out/nvml/pytest.txt" 2>&1 || rc=$?
echo "$rc" > "$out/nvml/pytest.rc"
tail -1 "$out/nvml/pytest.txt"
if [ -z "$cpu" ]; then
  step "NVML recording under a training load"
  "$py" -m reveal.inject.workloads.torch_train --device cuda --duration 120 \
    --data-dir "$work/data" > "$out/nvml/train.jsonl" 2>&1 &
  train=$!
  sleep "$warmup_s"
  "$py" "$here/tests/fixtures/nvml/record_nvml.py" "$out/nvml/recorded.json" --ticks 4 \
    --interval 0.2 --procs "$out/nvml/recorded_procs.json" > "$out/nvml/record.txt" 2>&1 \
    || echo "the NVML recording failed (see nvml/record.txt)"
  kill "$train" 2>/dev/null || true
  wait "$train" 2>/dev/null || true
  train=""
else
  echo "NVML recording: refused: no GPU (dry run, --cpu)"
fi

step "eBPF capture against the training job's own counts ($steps steps per phase)"
"$py" "$here/scripts/gpu_trace_check.py" "$out" ${cpu:+--cpu} --steps "$steps" \
  > "$out/trace.txt" 2>&1 || true
grep -E '^(ok|FAILED)' "$out/trace.txt" || tail -5 "$out/trace.txt"

step "fault kinds ($kinds) against a live watch and in batch"
rc=0
"$py" "$here/scripts/gpu_alarms.py" "$out/alarms" ${cpu:+--cpu} --kinds "$kinds" \
  --learn-s "$learn_s" --clean-s "$clean_s" --fault-s "$fault_s" --warmup-s "$warmup_s" \
  --gap-s "$gap_s" --resolve-after-s "$resolve_s" > "$out/alarms/run.txt" 2>&1 || rc=$?
echo "$rc" > "$out/alarms/exit_status"
grep -E '^== ' "$out/alarms/run.txt" || tail -5 "$out/alarms/run.txt"
restore

step "judging"
settings=$(printf '{"mode": "%s", "WARMUP_S": %s, "LEARN_S": %s, "CLEAN_S": %s, "FAULT_S": %s, "GAP_S": %s, "RESOLVE_S": %s, "STEPS": %s, "KINDS": "%s", "TESTS": "%s", "PROOF_ARGS": "%s"}' \
  "$mode" "$warmup_s" "$learn_s" "$clean_s" "$fault_s" "$gap_s" "$resolve_s" \
  "$steps" "$kinds" "$tests" "${PROOF_ARGS:-}")
status=0
"$py" "$here/scripts/gpu_proof.py" "$out" ${cpu:+--cpu} --started "$started" \
  --settings "$settings" "${targets[@]}" || status=$?
step "done: $out/gpu_proof.json (exit $status)"
exit "$status"
