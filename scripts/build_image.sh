#!/usr/bin/env bash
# Build Reveal's OCI image from Debian's packages and the project's wheel, with no base
# image pulled from a registry: a Debian root filesystem made by debootstrap (minbase:
# Python 3, its venv module, CA certificates, mount), a virtual environment at /opt/reveal
# holding the wheel built from this clone (with its C extension) and the node agent's
# dependencies from PyPI (no extras: docs/deploy.md), trimmed (apt lists, documentation,
# tests of the libraries, sources of compiled libraries), then imported by podman
# with `reveal` as its entrypoint, the user `reveal` (65532) by default and the OCI labels
# of its version, revision and build date.
#
# usage: bash scripts/build_image.sh [--tag NAME:TAG] [--save FILE] [--with-bpftrace]
#   --tag NAME:TAG    the image's name (default: localhost/reveal:VERSION)
#   --save FILE       also write the image as an OCI archive (podman save --format oci-archive)
#   --with-bpftrace   add Debian's bpftrace for the opt-in eBPF probe (about +250 MB)
# environment:
#   MIRROR     the Debian mirror (default: http://deb.debian.org/debian)
#   SUITE      the Debian release (default: bookworm; its Python must match the wheel's)
#   CACHE_DIR  debootstrap's package cache, kept between builds
#              (default: /var/cache/reveal-image)
#   PYTHON     the interpreter that builds the wheel (default: python3)
#   PIP_CERT   the CA bundle pip trusts while it installs into the image (default: this
#              host's /etc/ssl/certs/ca-certificates.crt, so that a host whose egress
#              goes through a TLS-inspecting proxy builds too; not kept in the image)
# Needs root (debootstrap, chroot), debootstrap, podman and a C compiler with the Python
# headers (the wheel's C extension). Prints the image's name, size and build time, and
# writes them to build/image.json.
set -euo pipefail

say() { echo "build_image: $*" >&2; }
fail() { echo "build_image: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

tag="" save="" bpftrace=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=${2:?--tag needs NAME:TAG}; shift 2 ;;
    --save) save=${2:?--save needs FILE}; shift 2 ;;
    --with-bpftrace) bpftrace=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; fail "unknown option $1" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap and chroot)"
for tool in debootstrap podman chroot; do
  command -v "$tool" >/dev/null || fail "$tool not found (apt-get install debootstrap podman)"
done

here=$(cd "$(dirname "$0")/.." && pwd -P)
py=${PYTHON:-python3}
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
cache=${CACHE_DIR:-/var/cache/reveal-image}
version=$("$py" -c "import re,sys; print(re.search(r'__version__ = \"([^\"]+)\"', open(sys.argv[1]).read())[1])" "$here/src/reveal/_version.py")
revision=$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
tag=${tag:-localhost/reveal:$version}
started=$(date +%s)
work=$(mktemp -d /var/tmp/reveal-image.XXXXXX)
root="$work/rootfs"
cleanup() {
  for m in proc dev/pts; do mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"; done
  rm -rf "$work"
}
trap cleanup EXIT
# commands in the image's root, with none of this host's environment (its pip settings)
inroot() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 chroot "$root" "$@"; }

say "the wheel of reveal $version ($revision)"
"$py" -m pip wheel --quiet --no-deps -w "$work/dist" "$here" >&2 \
  || fail "the wheel did not build (needs setuptools, wheel, gcc and the Python headers)"
wheel=$(ls "$work"/dist/reveal-*.whl)
wheel_py=$(basename "$wheel" | sed -E 's/.*-(cp[0-9]+)-.*/\1/')

say "a Debian $suite root filesystem from $mirror"
mkdir -p "$cache"
packages=python3,python3-venv,ca-certificates,mount
[ "$bpftrace" -eq 1 ] && packages="$packages,bpftrace"
debootstrap --variant=minbase --include="$packages" --cache-dir="$cache" \
  "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
image_py=$(inroot python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[ "$image_py" = "$wheel_py" ] || fail "the wheel is for $wheel_py but $suite's Python is $image_py (PYTHON=...)"

say "the virtual environment /opt/reveal"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
cp "$wheel" "$root/tmp/"
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/tmp/build-ca.crt"
inroot python3 -m venv /opt/reveal
inroot /opt/reveal/bin/pip install --quiet --no-cache-dir \
  --disable-pip-version-check --cert /tmp/build-ca.crt "/tmp/$(basename "$wheel")" >&2 \
  || fail "pip could not install the wheel and its dependencies in the image"
inroot /opt/reveal/bin/reveal --version >/dev/null || fail "reveal does not run in the image"
umount "$root/proc"

say "trimmed"
rm -rf "$root/tmp/"* "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin \
  "$root/var/cache/apt/archives/"*.deb "$root/usr/share/doc" "$root/usr/share/man" \
  "$root/usr/share/info" "$root/usr/share/locale" "$root/var/log/"* "$root/etc/resolv.conf" \
  "$root"/usr/lib/*-linux-gnu/gconv \
  "$root"/usr/lib/python3*/lib2to3 "$root"/usr/lib/python3*/pydoc_data \
  "$root"/usr/lib/python3*/ensurepip
# (glibc's iconv charsets: Python has its own codecs; of Python's library, the 2to3
# converter, pydoc's help topics and pip's bootstrap, the venv being made)
site=$(echo "$root"/opt/reveal/lib/python3*/site-packages)
# the libraries' own test suites, and the installers (the image installs nothing more)
find "$site" -depth -type d \( -name tests -o -name __pycache__ \) -path "$site/*/*" \
  ! -path "$site/reveal/*" -exec rm -rf {} +
rm -rf "$site"/pip "$site"/pip-* "$site"/setuptools "$site"/setuptools-* \
  "$site"/pkg_resources "$site"/_distutils_hack "$site"/distutils-precedence.pth \
  "$root/opt/reveal/bin/pip"* "$root/usr/share/python-wheels"
# pyarrow's parts Reveal never loads (Arrow Flight, the S3 filesystem, its C++ tests, the
# headers), and each library's link-time and full-version copies beside the name it is
# loaded by (a wheel holds copies, not links)
pa="$site/pyarrow"
rm -rf "$pa"/include "$pa"/src "$pa"/libarrow_flight.so* "$pa"/libarrow_python_flight.so* \
  "$pa"/_flight.*.so "$pa"/flight.py "$pa"/libarrow_s3.so* "$pa"/_s3fs.*.so \
  "$pa"/_pyarrow_cpp_tests.*.so "$pa"/_substrait.*.so "$pa"/substrait.py \
  "$pa"/_azurefs.*.so "$pa"/_gcsfs.*.so "$pa"/_hdfs.*.so "$pa"/_orc.*.so \
  "$pa"/_dataset_orc.*.so "$pa"/orc.py
# scikit-learn's sample data sets
rm -rf "$site"/sklearn/datasets/data "$site"/sklearn/datasets/descr \
  "$site"/sklearn/datasets/images
for f in "$pa"/lib*.so.*.*.*; do [ -e "${f%.*.*}" ] && rm -f "$f"; done
for f in "$pa"/lib*.so; do compgen -G "$f.*" >/dev/null && rm -f "$f"; done
# the compiled extensions' sources and headers, type stubs, and their symbol tables
find "$site" -path "$site/reveal" -prune -o -type f \( -name '*.pyx' -o -name '*.pxd' \
  -o -name '*.pxi' -o -name '*.h' -o -name '*.hpp' -o -name '*.c' -o -name '*.cpp' \
  -o -name '*.pyi' \) -print0 | xargs -0 rm -f
# (never those a wheel's repair rewrote, in its *.libs folder or with a run path: strip
# misaligns their load segments)
if command -v strip >/dev/null && command -v readelf >/dev/null; then
  find "$site" -type f -name '*.so*' ! -path '*.libs/*' -print0 |
    while IFS= read -r -d '' f; do
      readelf -d "$f" 2>/dev/null | grep -qE 'R(UN)?PATH' || strip --strip-unneeded "$f" 2>/dev/null || true
    done
fi
# compiled once here, so that each start of a read-only container does not compile again.
# Python's library and the libraries are kept as their compiled files alone, beside where
# their sources were (nothing reads a library's source at run time; a traceback into one
# names its file and line); Reveal's own modules keep their sources, and Python keeps
# os.py, the file it finds its library by
stdlib=$(echo "$root"/usr/lib/python3.[0-9]*)
pyver=$(basename "$stdlib")
inroot /opt/reveal/bin/python -m compileall -q -b -j 0 -x '/site-packages/reveal/' \
  /opt/reveal/lib "/usr/lib/$pyver" >/dev/null || true
for tree in "$site" "$stdlib"; do
  find "$tree" -path "$site/reveal" -prune -o -type f -name '*.py' ! -path "$stdlib/os.py" \
    -print0 | while IFS= read -r -d '' f; do [ -f "${f}c" ] && rm -f "$f"; done
  find "$tree" -path "$site/reveal" -prune -o -type d -name __pycache__ -print0 |
    xargs -0 rm -rf
done
inroot /opt/reveal/bin/python -m compileall -q -j 0 \
  "/opt/reveal/lib/$pyver/site-packages/reveal" >/dev/null || true
# files two wheels both carry (NumPy's and SciPy's copy of one libgfortran) stored once
command -v hardlink >/dev/null && hardlink -c -q "$root/opt/reveal" >/dev/null 2>&1 || true
echo "reveal:x:65532:65532:reveal:/home/reveal:/usr/sbin/nologin" >>"$root/etc/passwd"
echo "reveal:x:65532:" >>"$root/etc/group"
install -d -o 65532 -g 65532 "$root/home/reveal" "$root/var/lib/reveal"

say "imported as $tag"
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
tar -C "$root" -c . | podman import \
  --change 'ENTRYPOINT ["/opt/reveal/bin/reveal"]' \
  --change 'CMD ["--help"]' \
  --change 'USER 65532' \
  --change 'WORKDIR /home/reveal' \
  --change 'ENV PATH=/opt/reveal/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change "LABEL org.opencontainers.image.title=reveal" \
  --change "LABEL org.opencontainers.image.version=$version" \
  --change "LABEL org.opencontainers.image.revision=$revision" \
  --change "LABEL org.opencontainers.image.created=$created" \
  --change "LABEL org.opencontainers.image.description=Performance anomalies of ML hosts from hardware and OS telemetry" \
  - "$tag" >/dev/null
if [ -n "$save" ]; then
  rm -f "$save"
  podman save --quiet --format oci-archive -o "$save" "$tag"
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
seconds=$(( $(date +%s) - started ))
mkdir -p "$here/build"
printf '{"image": "%s", "version": "%s", "revision": "%s", "created": "%s", "size_bytes": %s, "build_s": %s, "suite": "%s", "bpftrace": %s}\n' \
  "$tag" "$version" "$revision" "$created" "$size" "$seconds" "$suite" \
  "$([ "$bpftrace" -eq 1 ] && echo true || echo false)" | tee "$here/build/image.json"
say "$tag: $((size / 1000000)) MB in ${seconds} s"
