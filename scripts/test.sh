#!/usr/bin/env bash
# Install everything (system packages included) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
set +e
python3 -m pytest -q "$@"
rc=$?
set -e
# pytest exit 5 means "no tests collected": that is a failure here.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
