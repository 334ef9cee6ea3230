#!/usr/bin/env bash
# Install everything Reveal needs on a fresh Debian machine: system packages, then the
# Python package with its test extras. Idempotent; run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="bpftrace stress-ng fio iproute2 iputils-ping prometheus-node-exporter linux-perf procps util-linux gcc libc6-dev binutils kmod nftables python3-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing system packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
# The reference training workloads use PyTorch's CPU build when it is available.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check "torch==2.13.0" \
  || echo "PyTorch not installed: the NumPy reference workload will be used"
