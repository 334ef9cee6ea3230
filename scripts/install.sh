#!/usr/bin/env bash
# Install Reveal on a Debian or Ubuntu machine: the system packages its probes, faults and
# tests use, then a virtual environment holding Reveal (editable, from this clone), its C
# extension and PyTorch's CPU build, and a `reveal` link on PATH. Idempotent: run it again
# to update. Run as root, or as a user with sudo for the system packages.
#
# usage: bash scripts/install.sh [--test] [--no-link] [--no-torch] [--force]
#   --test      also install the test extras (pytest, ruff, ...); scripts/test.sh does
#   --no-link   put no `reveal` link on PATH (run REVEAL_VENV/bin/reveal)
#   --no-torch  leave PyTorch out (the reference workloads then use NumPy)
#   --force     replace a `reveal` on PATH that belongs to another installation
# environment:
#   PYTHON          interpreter the environment is made from (default: /usr/bin/python3
#                   when present, else the first python3 on PATH); Python >= 3.11
#   REVEAL_VENV     the environment's directory (default: .venv in this clone)
#   REVEAL_BIN_DIR  where the `reveal` link goes (default: ~/.local/bin when it is on
#                   PATH, else /usr/local/bin as root, else ~/.local/bin)
set -euo pipefail

say() { echo "install: $*"; }
fail() { echo "install: error: $*" >&2; exit 1; }

TEST=0; LINK=1; TORCH=1; FORCE=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 ;;
    --no-link) LINK=0 ;;
    --no-torch) TORCH=0 ;;
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown option $arg (see --help)" ;;
  esac
done

# Paths given relative to where the script was called from, before moving to the clone.
VENV="$(realpath -m "${REVEAL_VENV:-$(dirname "$0")/../.venv}")"
BIN_DIR="${REVEAL_BIN_DIR:+$(realpath -m "$REVEAL_BIN_DIR")}"
cd "$(dirname "$0")/.."
ROOT="$(pwd -P)"

# -- system packages -----------------------------------------------------------------------
# "a|b": the first of the two that this distribution has (Debian's perf is linux-perf,
# Ubuntu's linux-tools-common).
PKGS="bpftrace stress-ng fio iproute2 iputils-ping prometheus-node-exporter linux-perf|linux-tools-common procps util-linux gcc libc6-dev binutils kmod nftables python3-dev python3-venv prometheus prometheus-alertmanager chromium|chromium-browser"
# the image's tests build an OCI image (podman, runc, debootstrap); the chart's render it
# with Helm (scripts/install_helm.sh, below: it installs npm itself where the command is
# missing, since a Node.js from elsewhere carries its own npm and conflicts with Debian's)
[ "$TEST" -eq 0 ] || PKGS="$PKGS podman runc debootstrap"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi
fi
if command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for p in $PKGS; do
    have=0
    for alt in ${p//|/ }; do dpkg -s "$alt" >/dev/null 2>&1 && have=1; done
    [ "$have" -eq 1 ] || missing="$missing $p"
  done
  if [ -n "$missing" ] && [ "$SUDO" = "none" ]; then
    say "warning: not root and no sudo: cannot install the system packages${missing//|/ or }"
  elif [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    wanted=""; absent=""
    for p in $missing; do
      found=""
      for alt in ${p//|/ }; do
        if apt-cache show "$alt" >/dev/null 2>&1; then found="$alt"; break; fi
      done
      if [ -n "$found" ]; then wanted="$wanted $found"; else absent="$absent ${p//|/ or }"; fi
    done
    [ -z "$absent" ] || say "warning: not available from apt here:$absent (what needs them is skipped)"
    if [ -n "$wanted" ]; then
      say "installing system packages:$wanted"
      # shellcheck disable=SC2086  # $SUDO may be empty; $wanted is a list of names
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $wanted
    fi
  fi
else
  say "warning: no apt here: install the system packages yourself ($PKGS)"
fi

# -- the interpreter and its virtual environment -------------------------------------------
if [ -n "${PYTHON:-}" ]; then
  PY_GIVEN=1
elif [ -x /usr/bin/python3 ]; then
  PY_GIVEN=0; PYTHON=/usr/bin/python3
else
  PY_GIVEN=0; PYTHON="$(command -v python3 || true)"
fi
if [ -z "$PYTHON" ] || ! command -v "$PYTHON" >/dev/null 2>&1; then
  fail "no Python interpreter${PYTHON:+ at $PYTHON}: give one with PYTHON=/path/to/python3"
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail "Reveal needs Python 3.11 or newer; $PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())' 2>&1): give another with PYTHON=..."
# The interpreter itself (not a wrapper such as pyenv's shim, nor a link to it).
PYTHON="$("$PYTHON" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))')"

base_of() {  # the interpreter a virtual environment's python runs on
  "$1" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>/dev/null
}
VPY="$VENV/bin/python"
if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ] && [ -n "$(ls -A "$VENV" 2>/dev/null)" ]; then
  fail "$VENV exists and is not a virtual environment: remove it or choose REVEAL_VENV=..."
fi
if [ -f "$VENV/pyvenv.cfg" ]; then
  if ! "$VPY" -c 'import sys' >/dev/null 2>&1; then
    say "$VENV no longer runs (its interpreter is gone?): making it again"
    rm -rf "$VENV"
  elif [ "$PY_GIVEN" -eq 1 ] && [ "$(base_of "$VPY")" != "$PYTHON" ]; then
    say "$VENV was made from $(base_of "$VPY"): making it again from $PYTHON"
    rm -rf "$VENV"
  else
    say "using the virtual environment $VENV ($(base_of "$VPY"))"
  fi
fi
if [ ! -f "$VENV/pyvenv.cfg" ]; then
  say "creating the virtual environment $VENV from $PYTHON"
  "$PYTHON" -m venv "$VENV" \
    || fail "could not create a virtual environment with $PYTHON (on Debian/Ubuntu: apt-get install python3-venv)"
fi

PIP=("$VPY" -m pip install -q --disable-pip-version-check)
if [ "$TEST" -eq 1 ]; then
  SPEC="${ROOT}[test]"; say "installing Reveal and its test extras into $VENV"
else
  SPEC="${ROOT}[all]"; say "installing Reveal (with its report and fleet extras) into $VENV"
fi
"${PIP[@]}" -e "$SPEC"
if [ "$TEST" -eq 1 ]; then
  REVEAL_VENV="$VENV" bash "$ROOT/scripts/install_helm.sh" \
    || say "warning: helm not installed: the chart's tests will fail (scripts/install_helm.sh)"
fi

# The C extension (fast /proc readers and the tick thread), built next to its sources; where
# it cannot be built the collector uses its pure-Python readers.
say "building the C extension"
"$VPY" -c 'import setuptools' >/dev/null 2>&1 || "${PIP[@]}" setuptools wheel
if "$VPY" setup.py -q build_ext --inplace >"$VENV/build-ext.log" 2>&1 \
    && "$VPY" -c 'import reveal.collect._procread' >/dev/null 2>&1; then
  rm -f "$VENV/build-ext.log"
else
  say "warning: C extension not built (see $VENV/build-ext.log): the collector uses its pure-Python readers"
fi

# The reference training workloads use PyTorch's CPU build when it is available.
if [ "$TORCH" -eq 1 ] && ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  say "installing PyTorch (CPU build)"
  "${PIP[@]}" "torch==2.13.0" \
    || say "PyTorch not installed: the NumPy reference workload will be used"
fi

# -- `reveal` on PATH ------------------------------------------------------------------------
on_path() { case ":$PATH:" in *":$1:"*) return 0 ;; *) return 1 ;; esac; }
TARGET="$VENV/bin/reveal"
LINKED=""; REFUSED=""
if [ "$LINK" -eq 1 ]; then
  if [ -z "$BIN_DIR" ]; then
    if on_path "$HOME/.local/bin"; then BIN_DIR="$HOME/.local/bin"
    elif [ "$(id -u)" -eq 0 ]; then BIN_DIR=/usr/local/bin
    else BIN_DIR="$HOME/.local/bin"; fi
  fi
  mkdir -p "$BIN_DIR"
  link="$BIN_DIR/reveal"
  if [ -L "$link" ] && [ "$(readlink -f "$link")" = "$(readlink -f "$TARGET")" ]; then
    LINKED="$link"
  elif [ -e "$link" ] && [ "$FORCE" -eq 0 ]; then
    REFUSED="$link"
    echo "install: $link is another installation's reveal ($(readlink -f "$link")); left as it is (--force replaces it)" >&2
  else  # absent, a dangling link (its clone is gone), or --force
    ln -sfn "$TARGET" "$link"
    LINKED="$link"
  fi
fi

# -- where it went, how to run it --------------------------------------------------------------
"$VENV/bin/reveal" --version >/dev/null || fail "$VENV/bin/reveal does not run"
echo
say "$("$VENV/bin/reveal" --version) installed in $VENV (Python $("$VPY" -c 'import platform; print(platform.python_version())') from $(base_of "$VPY"))"
if [ -n "$LINKED" ]; then
  say "linked $LINKED -> $TARGET"
  if ! on_path "$BIN_DIR"; then
    say "$BIN_DIR is not on PATH: add it (export PATH=\"$BIN_DIR:\$PATH\") or run $TARGET"
  elif [ "$(command -v reveal)" != "$LINKED" ]; then
    say "note: \`reveal\` on PATH is $(command -v reveal), which comes first: run $TARGET"
  else
    say "run it:  reveal --help    (or $TARGET)"
  fi
else
  say "run it:  $TARGET --help"
fi
say "tests:   bash scripts/test.sh"
[ -z "$REFUSED" ] || exit 1
