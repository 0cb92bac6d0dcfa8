"""Input a hostile or careless hand writes: specs, patterns, command-line
numbers, resume states, names and image files built to crash, hang or
exhaust the process. Each is a clear error, in bounded time and memory."""
import io
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import nostall
from nostall import _nostall
from conftest import write_jpeg_folder
import warm

NOSTALL = Path(sys.executable).parent / "nostall"


def run_cli(*args, cwd=None, timeout=60):
    return subprocess.run([str(NOSTALL), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_a_spec_nested_200000_deep_is_an_error_not_a_crash(tmp_path):
    deep = '{"source": "x", "batch_size": ' + "[" * 200000 + "]" * 200000 + "}"
    with pytest.raises(ValueError, match="nested over"):
        _nostall.spec_fingerprint(deep)
    with pytest.raises(ValueError, match="nested over"):
        nostall.Loader.attach("nobody", 4, spec=deep)
    spec = tmp_path / "deep.json"
    spec.write_text(deep)
    done = run_cli("bench", str(tmp_path), "--spec", str(spec))
    assert done.returncode in (1, 2), (done.returncode, done.stderr[-500:])
    assert "nested over" in done.stderr


@pytest.mark.parametrize("pattern, message", [
    ("{}" * 60000 + ".tar", "does not exist"),
    ("x{0..9999999}{0..9999999}.tar", "over 10000000 shards"),
    ("x{0..99999999999}.tar", "bad brace range"),
])
def test_brace_patterns_that_explode_are_errors(tmp_path, pattern, message):
    t0 = time.monotonic()
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        nostall.Loader(str(tmp_path / pattern), batch_size=4)
    assert time.monotonic() - t0 < 10


def test_a_throttle_of_1e300_ms_is_refused(jpeg_folder):
    with pytest.raises(ValueError, match="throttle_latency_ms"):
        nostall.Loader.from_spec({"source": {"uri": str(jpeg_folder),
                                             "options": {"throttle_latency_ms": 1e300}},
                                  "batch_size": 4})


@pytest.mark.parametrize("option, value", [("--size", "4294967520"), ("--threads", "4294967297"),
                                            ("--batch-size", "99999999999999999999999")])
def test_command_line_numbers_out_of_range_are_refused(jpeg_folder, option, value):
    done = run_cli("bench", str(jpeg_folder), option, value)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert option in done.stderr and "must be an integer in" in done.stderr


@pytest.mark.parametrize("field, value", [("epoch", 3.7), ("batch", 2.9), ("epoch", 1e19),
                                           ("epoch", 2**63 - 1), ("batch", -1), ("epoch", "3")])
def test_a_resume_state_with_a_bad_number_is_refused(jpeg_folder, field, value):
    loader = nostall.Loader(str(jpeg_folder), batch_size=4, transforms=[nostall.Resize((8, 8))])
    state = loader.state_dict()
    state[field] = value
    with pytest.raises(ValueError, match=f"state {field}"):
        loader.load_state_dict(state)


@pytest.mark.parametrize("field, value", [("subset", 20), ("drop_last", True), ("shuffle_block", 2)])
def test_a_resume_state_of_another_order_is_refused(jpeg_folder, field, value):
    taken = nostall.Loader.from_spec({"source": str(jpeg_folder), "batch_size": 4,
                                      "transforms": [{"type": "Resize", "size": [8, 8]}], field: value})
    state = taken.state_dict()
    other = nostall.Loader(str(jpeg_folder), batch_size=4, transforms=[nostall.Resize((8, 8))])
    with pytest.raises(ValueError, match=field):
        other.load_state_dict(state)
    del state[field]  # an older state, without the field: the default is assumed
    with pytest.raises(ValueError, match=field):
        other.load_state_dict(dict(state, **{field: value}))
    other.load_state_dict(state)  # the defaults match this loader


def test_analyze_does_not_import_modules_from_the_current_folder(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n")
    done = run_cli("analyze", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


def test_names_cannot_rewrite_the_terminal(tmp_path):
    root = tmp_path / "data"
    write_jpeg_folder(root, classes=1, per_class=2, seed=1, min_side=20, max_side=30)
    (root / "class_0").rename(root / "\x1b[2J\x1b]0;owned\x07evil\u009b31m")
    done = run_cli("inspect", str(root))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\u009b" not in done.stdout
    assert "\\x1b[2J" in done.stdout
    bad = root / "\x1b[2Jevil\u009b31m"
    with pytest.raises(FileNotFoundError) as e:
        nostall.Loader(str(bad), batch_size=2)
    assert "\x1b" not in str(e.value) and "\\x1b" in str(e.value)


def test_resize_max_size_must_exceed_the_size_as_in_torchvision(jpeg_folder):
    with pytest.raises(ValueError, match="strictly greater"):
        nostall.Resize(256, max_size=10)
    with pytest.raises(ValueError, match="one number"):
        nostall.Resize((256, 256), max_size=300)
    with pytest.raises(ValueError, match="strictly greater"):
        nostall.Loader.from_spec({"source": str(jpeg_folder), "batch_size": 4,
                                  "transforms": [{"type": "Resize", "size": 256, "max_size": 10}]})
    nostall.Resize(256, max_size=300)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def test_a_truncated_png_claiming_a_huge_image_allocates_nothing_big(tmp_path):
    # 8000 x 8000 RGBA (256 MB of samples) claimed by a file of a few KB.
    root = tmp_path / "data" / "c"
    root.mkdir(parents=True)
    raw = zlib.compress(b"\0" * (8000 * 4 + 1) * 4)  # four rows of the 8000
    png = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 8000, 8000, 8, 6, 0, 0, 0))
           + png_chunk(b"IDAT", raw) + png_chunk(b"IEND", b""))
    (root / "huge.png").write_bytes(png)
    # VmHWM: this process's own peak (getrusage's ru_maxrss starts from the
    # parent's, carried over fork and exec, and would hide the loader's).
    hwm = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]) // 1024"
    # torch first: the loader's batches need it, and its import is not the loader's.
    code = ("import torch\nimport nostall\n"
            f"print('base', {hwm})\n"
            f"l = nostall.Loader({str(tmp_path / 'data')!r}, batch_size=1, transforms=[nostall.Resize((8, 8))],"
            " num_threads=1)\n"
            "try:\n    next(iter(l))\nexcept nostall.DataError as e:\n    print('error', e)\n"
            f"print('peak', {hwm})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "error" in done.stdout and "truncated" in done.stdout, (done.stdout, done.stderr)
    base, peak = int(done.stdout.split()[1]), int(done.stdout.split()[-1])
    assert peak - base < 100, f"peak resident {peak} MB, {base} MB before the loader"


@pytest.mark.slow
def test_a_progressive_jpeg_of_too_many_scans_is_refused(tmp_path):
    # jpegtran writes at most 100 scans; the limit (500 by default) is
    # lowered for the test through NOSTALL_JPEG_MAX_SCANS.
    jpegtran = "/usr/bin/jpegtran"
    if not os.path.exists(jpegtran):
        pytest.skip("jpegtran (libjpeg-turbo-progs, installed by the test command) is not here")
    root = tmp_path / "data" / "c"
    root.mkdir(parents=True)
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "in.jpg", quality=95)
    # A valid progression of 100 scans: DC, then single AC coefficients of
    # each component, then their last bit.
    lines = ["0,1,2: 0-0, 0, 0;"]
    for k in range(1, 34):
        lines += [f"{comp}: {k}-{k}, 0, 0;" for comp in range(3)]
    lines += [f"{comp}: 34-63, 0, 0;" for comp in range(3)][:99 - len(lines) + 1]
    assert len(lines) <= 100
    script = tmp_path / "scans.txt"
    script.write_text("\n".join(lines) + "\n")
    subprocess.run([jpegtran, "-scans", str(script), "-outfile", str(root / "many.jpg"),
                    str(tmp_path / "in.jpg")], check=True)
    code = ("import sys, nostall\n"
            f"l = nostall.Loader({str(tmp_path / 'data')!r}, batch_size=1, transforms=[nostall.Resize((8, 8))])\n"
            "try:\n    print('decoded', len(list(l)))\nexcept nostall.DataError as e:\n    print('error', e)\n")
    fine = warm.run(code=code, timeout=60)
    assert fine.stdout.startswith("decoded 1"), (fine.stdout, fine.stderr)
    limited = warm.run(code=code, timeout=60, env={**os.environ, "NOSTALL_JPEG_MAX_SCANS": "50"})
    assert "over 50 scans" in limited.stdout, (limited.stdout, limited.stderr)


def write_labelled_shard(path, labels, image):
    import tarfile
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, label in enumerate(labels):
            for name, data in ((f"s{i}.jpg", image), (f"s{i}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))


def test_a_shard_rebuilt_with_the_same_size_and_mtime_is_indexed_again(tmp_path, monkeypatch):
    # Reproducible builds and container layers keep mtime and size: the
    # index must follow the content, not the stamps.
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "index-cache"))
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(buf, format="JPEG")
    shard = tmp_path / "train-0.tar"
    write_labelled_shard(shard, [0, 1, 2, 3], buf.getvalue())

    def labels():
        loader = nostall.Loader(str(shard), batch_size=4, transforms=[nostall.Resize((8, 8))],
                                return_indices=True)
        return [int(v) for _, y, _ in loader for v in y]

    assert labels() == [0, 1, 2, 3]
    stat = shard.stat()
    write_labelled_shard(shard, [3, 2, 1, 0], buf.getvalue())
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert shard.stat().st_size == stat.st_size and shard.stat().st_mtime_ns == stat.st_mtime_ns
    assert labels() == [3, 2, 1, 0]
    cache = tmp_path / "index-cache"
    assert (cache.stat().st_mode & 0o777) == 0o700
    assert all((f.stat().st_mode & 0o777) == 0o600 for f in cache.iterdir())
