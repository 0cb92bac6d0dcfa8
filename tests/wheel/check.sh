#!/usr/bin/env bash
# What CI checks of the binary wheel (`make wheel-check`):
# 1. auditwheel finds no library the wheel needs outside it and outside the
#    manylinux policy, but Apache Arrow's (pyarrow's, a dependency);
# 2. it installs with pip into a fresh venv in a folder away from this tree,
#    and there imports, reports its version, loads a batch of JPEGs, reads a
#    Parquet file, and runs the `nostall` command.
#   usage: tests/wheel/check.sh dist/nostall-VERSION-cp311-cp311-manylinux_*.whl
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
WHEEL=$(realpath "$1")
REPO=$(cd "$(dirname "$0")/../.." && pwd)
AUDITWHEEL=${AUDITWHEEL:-$REPO/.venv/bin/auditwheel}

shown=$("$AUDITWHEEL" show "$WHEEL")
echo "$shown"
echo "$shown" | tr '\n' ' ' | grep -q 'constrains the platform tag to "manylinux_' || {
  echo "$0: auditwheel gives $WHEEL no manylinux tag" >&2; exit 1; }

dir=$(mktemp -d /tmp/nostall-wheel-check-XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
# The interpreter the wheel was built for (a venv made from the build's venv
# is one of its base Python, without its packages).
"${PYTHON:-$REPO/.venv/bin/python}" -m venv venv
venv/bin/pip install -q -c "$REPO/constraints.txt" "$WHEEL"
# Without torch (the nostall[torch] extra): the package imports, the command runs.
venv/bin/python -c "import nostall, sys; assert 'torch' not in sys.modules; print('import without torch: ok')"
venv/bin/pip install -q -c "$REPO/constraints.txt" torch pillow
venv/bin/python - <<'PY'
import hashlib
import os
import sys

import numpy as np
from PIL import Image

import nostall

here = os.path.realpath(os.path.dirname(nostall.__file__))
assert here.startswith(os.path.realpath(sys.prefix)), f"nostall from {here}, not the venv"
print("nostall", nostall.__version__, "from", here)
hashlib.sha256(b"x").hexdigest()  # OpenSSL after Arrow's: the system's
rng = np.random.default_rng(0)
for c in range(2):
    os.makedirs(f"data/c{c}", exist_ok=True)
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(f"data/c{c}/{i}.jpg")
loader = nostall.Loader("data", batch_size=4, transforms=[nostall.RandomResizedCrop(32)])
images, labels = next(iter(loader))
assert tuple(images.shape) == (4, 3, 32, 32), images.shape
import pyarrow as pa
import pyarrow.parquet as pq
with open("data/c0/0.jpg", "rb") as f:
    jpeg = f.read()
pq.write_table(pa.table({"image": [jpeg] * 4, "label": ["a", "b", "a", "b"]}), "t.parquet",
               write_page_index=True)
batch = next(iter(nostall.Loader("t.parquet", batch_size=2, fields={"image": "image", "label": "label"},
                                 transforms=[nostall.Resize((16, 16))])))
print("a batch of JPEGs and one from Parquet: ok")
PY
# Every library the installed programs load is in the venv (the wheel's own,
# pyarrow's) or one the manylinux policy lets a wheel take from the system.
arrow=$(venv/bin/python -c "import pyarrow; print(pyarrow.get_library_dirs()[0])")
policy='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libz|libresolv|libutil|libnsl|libcrypt|libexpat)\.so'
for elf in venv/lib/python3*/site-packages/nostall/_nostall.*so venv/lib/python3*/site-packages/nostall/_bin/nostall \
           venv/lib/python3*/site-packages/nostall.libs/*.so*; do
  LD_LIBRARY_PATH=$arrow ldd "$elf" | while read -r name arrow_ path _; do
    [ "$arrow_" = "=>" ] || continue
    case "$path" in "$dir"/venv/*) continue ;; esac
    if [ "$path" = "not" ]; then echo "$0: $elf needs $name, which is nowhere" >&2; exit 1; fi
    if ! echo "$name" | grep -qE "$policy"; then
      echo "$0: $elf loads $name from $path: outside the wheel and the manylinux policy" >&2; exit 1
    fi
  done
done
echo "every library is in the wheel, in pyarrow, or in the manylinux policy: ok"
# The video plugin alone takes FFmpeg's libraries from the system (nothing
# else loads it until a video spec is made): it needs them and no more.
video=$(echo venv/lib/python3*/site-packages/nostall/_nostall_video.so)
needed=$(readelf -d "$video" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
for name in $needed; do
  echo "$name" | grep -qE "$policy|^lib(avformat|avcodec|avutil|swscale|swresample)\.so" || {
    echo "$0: the video plugin needs $name: more than FFmpeg's libraries" >&2; exit 1; }
done
echo "the video plugin needs FFmpeg's libraries and nothing else from the system: ok"
venv/bin/python -c "from nostall import video; print('the video plugin loads:', video.backend())"
venv/bin/nostall --version
venv/bin/nostall bench data --batch-size 4 > bench.txt
grep -q "images/s" bench.txt
echo "the wheel installs and runs away from the build tree: ok"
