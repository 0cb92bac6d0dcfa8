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
    loader = nostall.Loader(jpeg_folder, batch_size=6, throttle_bandwidth=total / 0.6,
                            reads_in_flight=8, transforms=[nostall.Resize((16, 16))])
    assert loader.spec["throttle_bandwidth"] == total / 0.6
    t0 = time.perf_counter()
    n = sum(len(labels) for _, labels in loader)
    elapsed = time.perf_counter() - t0
    assert n == 36
    assert elapsed > 0.55  # every byte through a pipe of total/0.6 bytes per second
