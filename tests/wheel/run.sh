#!/usr/bin/env bash
# The wheel on a clean system (`make wheel-test`, as root): a minimal Debian
# made by debootstrap holding Python, venv and pip, and Debian's Fashion-MNIST
# files (test data) - no compiler, no -dev package, no libjpeg or libcurl. The
# wheel is installed there into a fresh venv with pip, then the Python tests
# run against it, from a copy of tests/ (never the build tree), except what
# needs more than the wheel:
#   servers: test_s3, test_s3_signed, test_hostile_s3 (an S3 server),
#     test_cluster_cache, test_newcomer (memcached), and every test whose
#     name says s3 or memcached;
#   programs from Debian: test_audio (espeak-ng speaks its words), test_video
#     (ffmpeg makes its videos and is the reference: it skips, saying so);
#   the build tree or make: test_docs, test_layers;
#   other users: test_two_users (useradd inside the chroot);
#   the trainers' packages: test_trainers (lightning, accelerate), and the
#     Lightning launch in test_launchers;
#   torchvision's wheel (make test downloads it): test_dataloader_habits.
#   usage: tests/wheel/run.sh dist/nostall-VERSION-cp311-cp311-manylinux_*.whl
# NOSTALL_WHEEL_ROOT: where the system is made (kept between runs; default
# /var/tmp/nostall-wheel-root); NOSTALL_WHEEL_SUITE (default: bookworm).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
WHEEL=$(realpath "$1")
REPO=$(cd "$(dirname "$0")/../.." && pwd)
ROOT=${NOSTALL_WHEEL_ROOT:-/var/tmp/nostall-wheel-root}
SUITE=${NOSTALL_WHEEL_SUITE:-bookworm}
MIRROR=${NOSTALL_WHEEL_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" != 0 ]; then echo "$0: debootstrap and chroot need root" >&2; exit 2; fi
command -v debootstrap >/dev/null || \
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }

if [ ! -x "$ROOT/usr/bin/python3" ] || [ ! -e "$ROOT/.nostall-ready" ]; then
  rm -rf "$ROOT"
  echo "making a minimal $SUITE in $ROOT (debootstrap)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,dataset-fashion-mnist \
    "$SUITE" "$ROOT" "$MIRROR" >/dev/null
  touch "$ROOT/.nostall-ready"
fi
for bad in gcc cc g++ libjpeg62-turbo libjpeg62-turbo-dev libcurl4 libpng-dev; do
  if chroot "$ROOT" dpkg-query -W -f='${Status}' "$bad" 2>/dev/null | grep -q "ok installed"; then
    echo "$0: $bad is installed in $ROOT: not a clean system" >&2
    exit 1
  fi
done

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind SRC DST [ro]
  mkdir -p "$ROOT$2"
  mount --rbind "$1" "$ROOT$2"
  mounted+=("$ROOT$2")
  [ "${3:-}" = ro ] && mount -o remount,bind,ro "$ROOT$2" || true
}
bind /proc /proc
bind /dev /dev            # /dev/shm: the loaders' rings and caches
bind /sys /sys
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
# This machine's certificate authorities (a proxy's among them, where there is one).
cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
# pip's local wheels (torch's CPU build) and configuration, where this machine has them.
for d in /opt/wheels /opt/pypi /opt/pypi-more; do [ -d "$d" ] && bind "$d" "$d" ro; done
for f in /etc/pip.conf /etc/xdg/pip/constraints.txt; do
  [ -f "$f" ] && mkdir -p "$ROOT$(dirname "$f")" && cp "$f" "$ROOT$f"
done

work=$ROOT/work
rm -rf "$work" && mkdir -p "$work"
cp "$WHEEL" "$work/"
# The repository's files the tests read (documents, examples, the version;
# the package's sources only as text to compare with: nostall is the wheel's).
cp -r "$REPO/tests" "$REPO/bench" "$REPO/docs" "$REPO/examples" "$REPO/python" "$REPO/constraints.txt" \
  "$REPO/VERSION" "$REPO/README.md" "$work/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +

chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
  bash -euo pipefail -c '
cd /work
rm -rf /venv
python3 -m venv /venv
start=$(date +%s.%N)
/venv/bin/pip install -q -c constraints.txt ./'"$(basename "$WHEEL")"'
end=$(date +%s.%N)
echo "installed the wheel (and numpy, pyarrow) in $(echo "$end - $start" | bc 2>/dev/null || python3 -c "print(round($end - $start, 1))") s"
/venv/bin/python -X importtime -c "import nostall" 2> /tmp/importtime.txt
/venv/bin/python -c "
import time; t = time.perf_counter(); import nostall; print(f\"import nostall: {time.perf_counter() - t:.2f} s, version {nostall.__version__}\")"
/venv/bin/nostall --version
/venv/bin/pip install -q -c constraints.txt torch==2.13.0 pytest pillow pycocotools soundfile \
  tokenizers datasets pandas
cd tests/python
/venv/bin/python -m pytest -q -ra -p no:cacheprovider \
  --ignore=test_s3.py --ignore=test_s3_signed.py --ignore=test_hostile_s3.py \
  --ignore=test_cluster_cache.py --ignore=test_newcomer.py --ignore=test_audio.py \
  --ignore=test_docs.py --ignore=test_layers.py --ignore=test_two_users.py \
  --ignore=test_trainers.py --ignore=test_dataloader_habits.py \
  -k "not s3 and not memcached and not lightning_ddp" .
'
