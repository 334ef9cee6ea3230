#!/usr/bin/env bash
# Install everything (system packages included) into the virtual environment that
# scripts/install.sh makes (REVEAL_VENV, default .venv in this clone), then run the whole
# test suite with its Python. Arguments go to pytest.
set -euo pipefail
REVEAL_VENV="$(realpath -m "${REVEAL_VENV:-$(dirname "$0")/../.venv}")"
export REVEAL_VENV
cd "$(dirname "$0")/.."
bash scripts/install.sh --test --no-link
set +e
"$REVEAL_VENV/bin/python" -m pytest -q "$@"
rc=$?
set -e
# pytest exit 5 means "no tests collected": that is a failure here.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
