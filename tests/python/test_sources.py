"""WebDataset tar shards give the same samples as the image folder they came from."""

import io
import tarfile

import numpy as np
import torch
from PIL import Image

import nostall


def write_shards(folder, out, shards=3):
    files = sorted(p for p in folder.rglob("*.jpg"))
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    for s in range(shards):
        with tarfile.open(out / f"train-{s:04d}.tar", "w") as tar:
            for i, path in enumerate(files[s::shards]):
                key = f"sample{s}_{i:05d}"
                for name, data in ((f"{key}.jpg", path.read_bytes()),
                                   (f"{key}.cls", str(classes.index(path.parent.name)).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(out / ("train-{0000..%04d}.tar" % (shards - 1)))


def samples(source):
    loader = nostall.Loader(source, batch_size=7, transforms=[nostall.Resize((24, 24))])
    out = []
    for images, labels in loader:
        out += [(int(l), images[i].numpy().tobytes()) for i, l in enumerate(labels)]
    return sorted(out)


def test_tar_shards_match_the_folder(jpeg_folder, tmp_path):
    pattern = write_shards(jpeg_folder, tmp_path)
    assert samples(pattern) == samples(jpeg_folder)


def test_png_and_grayscale_sources(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "a").mkdir()
    pixels = rng.integers(0, 255, (20, 30), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(tmp_path / "a" / "x.png")
    gray = nostall.Loader(tmp_path, mode="L", output="numpy")
    images, _ = next(iter(gray))
    assert images.shape == (1, 1, 20, 30)
    assert np.array_equal(images[0, 0], pixels)  # PNG is lossless: exact pixels
    rgb, _ = next(iter(nostall.Loader(tmp_path, output="numpy", layout="NHWC")))
    assert np.array_equal(rgb[0, ..., 1], pixels)


def test_storage_throttle_bounds_the_epoch_time(jpeg_folder):
    import time

    total = sum(p.stat().st_size for p in jpeg_folder.rglob("*.jpg"))
    loader = nostall.Loader(jpeg_folder, batch_size=6,
                            source_options={"throttle_bandwidth": total / 0.6},
                            reads_in_flight=8, transforms=[nostall.Resize((16, 16))])
    assert loader.spec["source"]["options"]["throttle_bandwidth"] == total / 0.6
    t0 = time.perf_counter()
    n = sum(len(labels) for _, labels in loader)
    elapsed = time.perf_counter() - t0
    assert n == 36
    assert elapsed > 0.55  # every byte through a pipe of total/0.6 bytes per second


def test_each_driver_owns_its_options_and_old_specs_still_load(jpeg_folder, tmp_path):
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    kw = dict(batch_size=6, transforms=[nostall.Resize((16, 16))])
    loader = nostall.Loader(jpeg_folder, source_options={"throttle_latency_ms": 1}, **kw)
    assert loader.spec["source"] == {
        "uri": str(jpeg_folder), "driver": "image-folder",
        "options": {"throttle_bandwidth": 0.0, "throttle_latency_ms": 1.0, "drop_page_cache": False}}
    assert loader.spec["cache"] == []
    want = [(x.clone(), y.clone()) for x, y in loader]

    # A spec saved in the flat form, as every spec was written before:
    # read, warned once, and the same pipeline in the new form.
    old = {k: v for k, v in loader.spec.items() if k not in ("source", "cache")}
    old.update(source=str(jpeg_folder), throttle_bandwidth=0.0, throttle_latency_ms=1.0,
               drop_page_cache=False, s3_endpoint="", s3_addressing="auto", cache_name="",
               cache_bytes=0)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.warns(FutureWarning, match="the flat fields throttle_bandwidth, throttle_latency_ms, "
                      "drop_page_cache, s3_endpoint, s3_addressing, cache_name, cache_bytes are read"):
        again = nostall.Loader.from_spec(path)
    assert again.spec == loader.spec
    got = list(again)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, want))
    assert len(got) == len(want)
    # The command line reads it too, and says so.
    cli = shutil.which("nostall", path=str(Path(sys.executable).parent)) or shutil.which("nostall")
    r = subprocess.run([cli, "bench", "--spec", str(path), "--max-batches", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "old.json: the flat fields throttle_bandwidth" in r.stderr

    # The old keyword arguments: the same spec, with a FutureWarning.
    with pytest.warns(FutureWarning, match=r"Loader\(throttle_latency_ms=\) is deprecated"):
        kwargs = nostall.Loader(jpeg_folder, throttle_latency_ms=1, **kw)
    assert kwargs.spec == loader.spec

    # An option of another driver is named with the driver that refuses it.
    with pytest.raises(ValueError, match="unknown key 'endpoint' in the image-folder driver's "
                       r"options \(it takes: throttle_bandwidth, throttle_latency_ms, drop_page_cache\)"):
        nostall.Loader(jpeg_folder, source_options={"endpoint": "http://127.0.0.1:9"})
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="both given"):
        nostall.Loader(jpeg_folder, source_options={"throttle_latency_ms": 1}, throttle_latency_ms=2)
