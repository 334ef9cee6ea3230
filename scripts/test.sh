#!/usr/bin/env bash
# Install everything (system packages included) into the virtual environment that
# scripts/install.sh makes (REVEAL_VENV, default .venv in this clone), then run the whole
# test suite with its Python. Arguments go to pytest.
#
# The suite runs in two parts:
#   1. alone, one test at a time: the tests marked `alone` (and `quiet_host`, first), which
#      need this host to themselves: they record it at rest, count a live watch's alerts or
#      must see a CPU fault on an idle host;
#   2. the rest in parallel on REVEAL_TEST_WORKERS pytest-xdist workers (default: one more
#      than the CPUs, at most 8: many tests wait on a collector, a server or a learn, so
#      that as many workers as CPUs leave the CPUs idle much of the time), each test
#      module on one worker (--dist loadfile), so that its module fixtures are made once,
#      the modules with slow tests first (tests/conftest.py). Tests that check the host is
#      left as found compare only what their own process made.
# REVEAL_TEST_WORKERS=0 runs the whole suite in one serial pytest instead.
# REVEAL_TEST_JUNIT=DIR writes each part's JUnit XML there (DIR/all.xml, or DIR/alone.xml and
# DIR/parallel.xml; bench/bench_suite.py reads them).
#
# REVEAL_REQUIRE=all (as .ci/run sets it) requires every component the skip guard knows:
# the run stops before pytest when one is absent. The guard's summary is checked to exist
# after each part, so a guard switched off cannot pass unnoticed.
set -euo pipefail
REVEAL_VENV="$(realpath -m "${REVEAL_VENV:-$(dirname "$0")/../.venv}")"
export REVEAL_VENV
cd "$(dirname "$0")/.."
bash scripts/install.sh --test --no-link
PY="$REVEAL_VENV/bin/python"
cpus=$(nproc)
WORKERS="${REVEAL_TEST_WORKERS:-$(( cpus >= 8 ? 8 : cpus + 1 ))}"

if [ -n "${REVEAL_REQUIRE:-}" ]; then
  "$PY" tests/skip_guard.py --require "$REVEAL_REQUIRE" \
    || { echo "test: a required component is absent (above): no test was run" >&2; exit 1; }
fi

reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
started=$(date +%s)

part() {  # part NAME PYTEST-ARGS...: run pytest, check the guard ran; sets $rc
  local name="$1"; shift
  local junit=() began
  [ -z "${REVEAL_TEST_JUNIT:-}" ] || junit=(--junitxml "$REVEAL_TEST_JUNIT/$name.xml")
  began=$(date +%s)
  set +e
  REVEAL_GUARD_REPORT="$reports/$name.json" "$PY" -m pytest -q --durations=20 "${junit[@]}" "$@"
  rc=$?
  set -e
  echo "== part $name took $(( $(date +%s) - began )) s"
  if [ "$rc" -ne 5 ] && [ ! -s "$reports/$name.json" ]; then
    echo "test: the skip guard did not run in the $name part (was it switched off?)" >&2
    rc=1
  fi
}

if [ "$WORKERS" = "0" ]; then
  part all "$@"
  [ "$rc" -ne 5 ] || { echo "no tests were collected" >&2; exit 1; }
  exit "$rc"
fi

echo "== part 1: tests that need the host to themselves, one at a time"
part alone -m "alone or quiet_host" "$@"
rc_alone=$rc
echo "== part 2: the rest, $WORKERS workers"
part parallel -m "not (alone or quiet_host)" -n "$WORKERS" --dist loadfile --no-loadscope-reorder "$@"
rc_parallel=$rc
echo "== the suite took $(( $(date +%s) - started )) s"

# exit 5 is "no tests collected": fine for one part, a failure when both collected none
if [ "$rc_alone" -eq 5 ] && [ "$rc_parallel" -eq 5 ]; then
  echo "no tests were collected" >&2; exit 1
fi
for rc in "$rc_alone" "$rc_parallel"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
