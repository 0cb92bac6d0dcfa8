"""Writes the seed corpora in fuzz/corpus/ (run once; the files are kept).

    .venv/bin/python fuzz/make_seeds.py   # after `make install` and a fuzz build
"""
import io
import json
import os
import subprocess
import tarfile
import tempfile

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def out(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def image(mode, size=(23, 17), seed=0):
    rng = np.random.default_rng(seed)
    bands = len(Image.new(mode, (1, 1)).getbands())
    a = rng.integers(0, 255, (size[1], size[0], bands), dtype=np.uint8)
    return Image.fromarray(a.squeeze(-1) if bands == 1 else a, "L" if bands == 1 else None).convert(mode)


def encoded(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


# Images: the last byte picks the transforms (decode_fuzz.cc).
seeds = {
    "rgb.jpg": encoded(image("RGB"), "JPEG", quality=80),
    "gray.jpg": encoded(image("L"), "JPEG"),
    "progressive.jpg": encoded(image("RGB", (40, 33)), "JPEG", progressive=True),
    "cmyk.jpg": encoded(image("CMYK"), "JPEG"),
    "subsampled444.jpg": encoded(image("RGB"), "JPEG", subsampling=0),
    "rgb.png": encoded(image("RGB"), "PNG"),
    "gray.png": encoded(image("L"), "PNG"),
    "rgba.png": encoded(image("RGBA"), "PNG"),
    "palette.png": encoded(image("RGB").convert("P"), "PNG"),
    "interlaced.png": encoded(image("RGB"), "PNG", interlace=1),
    "gray16.png": encoded(Image.fromarray(np.arange(391, dtype=np.uint16).reshape(17, 23) * 97), "PNG"),
    "lossy.webp": encoded(image("RGB"), "WEBP", quality=70),
    "lossless_alpha.webp": encoded(image("RGBA"), "WEBP", lossless=True),
    "rgb.tif": encoded(image("RGB"), "TIFF"),
    "lzw_gray.tif": encoded(image("L"), "TIFF", compression="tiff_lzw"),
    "gray16.tif": encoded(Image.fromarray(np.arange(391, dtype=np.uint16).reshape(17, 23) * 97), "TIFF"),
    "rgb.bmp": encoded(image("RGB"), "BMP"),
    "palette.bmp": encoded(image("RGB").convert("P"), "BMP"),
    "rgb.ppm": encoded(image("RGB"), "PPM"),
    "gray.pgm": encoded(image("L"), "PPM"),
}
for i, (name, data) in enumerate(seeds.items()):
    out("decode_fuzz", name, data + bytes([i * 37 % 256]))

# Tar shards: plain, GNU long names, pax records, skipped samples.
def tar(fmt, members):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return b.getvalue()

jpg = encoded(image("RGB", (8, 8)), "JPEG", quality=50)
out("tar_index_fuzz", "plain.tar", tar(tarfile.USTAR_FORMAT, [("a.jpg", jpg), ("a.cls", b"3"), ("b.png", jpg), ("b.cls", b"1\n")]))
out("tar_index_fuzz", "gnu-long.tar", tar(tarfile.GNU_FORMAT, [("d/" + "x" * 120 + ".jpg", jpg), ("d/" + "x" * 120 + ".cls", b"0")]))
out("tar_index_fuzz", "pax.tar", tar(tarfile.PAX_FORMAT, [("p/" + "y" * 150 + ".jpeg", jpg), ("p/" + "y" * 150 + ".cls", b"7")]))
out("tar_index_fuzz", "bad-samples.tar", tar(tarfile.USTAR_FORMAT, [("n.jpg", jpg), ("n.cls", b"x"), ("m.cls", b"2"), ("k.jpg", jpg)]))

# Specs.
specs = [
    {"source": "/data/train", "batch_size": 32, "shuffle": True, "seed": 7,
     "transforms": [{"type": "RandomResizedCrop", "size": 224, "scale": [0.08, 1.0], "ratio": [0.75, 1.333]},
                    {"type": "RandomHorizontalFlip", "p": 0.5},
                    {"type": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}]},
    {"source": "s/train-{0000..0009}.tar", "batch_size": 8, "transforms": [{"type": "Resize", "size": 256, "max_size": 300},
     {"type": "CenterCrop", "size": [224, 200]}], "layout": "NHWC", "mode": "L", "dtype": "uint8", "on_error": "skip"},
    {"source": "d", "cache_name": "c", "cache_bytes": 1048576, "num_threads": 2, "reads_in_flight": 16,
     "prefetch": 3, "subset": 100, "shuffle_block": 10, "drop_last": True, "rank": 1, "world_size": 2},
    {"source": {"uri": "s3://bucket/train-{0000..0003}.tar", "driver": "s3-tar-shards",
                "options": {"endpoint": "http://127.0.0.1:8333", "addressing": "path", "unsigned": True}},
     "cache": [{"driver": "minio", "name": "node", "bytes": "64MiB"},
               {"driver": "memcached", "name": "job", "bytes": 1 << 30, "servers": ["node1:11211"]}]},
    {"source": {"uri": "d", "options": {"throttle_bandwidth": 5e7, "throttle_latency_ms": 2,
                                        "drop_page_cache": False}},
     "cache": {"driver": "lru", "name": "x", "bytes": 4096}},
]
for i, s in enumerate(specs):
    out("spec_fuzz", f"spec{i}.json", json.dumps(s).encode())

# A real MinIO cache segment (3 items, 4 KiB budget, one item cached).
import nostall  # noqa: E402
with tempfile.TemporaryDirectory() as d:
    for c in ("a", "b"):
        os.makedirs(os.path.join(d, c))
    for i, c in enumerate("aab"):
        image("RGB", (6, 5), i).save(os.path.join(d, c, f"{i}.jpg"), quality=40)
    name = f"fuzzseed{os.getpid()}"
    loader = nostall.Loader(d, batch_size=1, cache=nostall.Cache(name, size=4096),
                            transforms=[nostall.Resize((4, 4))], num_threads=1)
    for _ in loader:
        pass
    del loader
    # (Segments are named with their owner's uid: docs/security.md.)
    with open(f"/dev/shm/nostall-cache-{os.getuid()}-{name}", "rb") as f:
        out("minio_cache_fuzz", "three-items.bin", f.read())
    nostall.Cache(name, size=4096).remove()

# Real index files (format 5), as `nostall index` writes them beside the
# data: an image folder, one with files beside its images, tar shards, and
# tar samples with other members. The fuzz target supplies the first 12
# bytes (magic and version) and sets the header's hash itself.
def index_seeds():
    cli = os.path.join(os.path.dirname(__import__("sys").executable), "nostall")
    with tempfile.TemporaryDirectory() as d:
        def seed(name, path, index_file):
            subprocess.run([cli, "index", path], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            with open(index_file, "rb") as f:
                out("index_file_fuzz", name, f.read()[12:])
        for kind in ("folder", "folder-members"):
            root = os.path.join(d, kind)
            for c in ("a", "b"):
                os.makedirs(os.path.join(root, c))
                for i in range(2):
                    image("RGB", (6, 5), i).save(os.path.join(root, c, f"{i}.jpg"), quality=40)
                    if kind == "folder-members":
                        with open(os.path.join(root, c, f"{i}.json"), "w") as f:
                            f.write("{}")
            seed(kind, root, os.path.join(root, ".nostall-index"))
        jpg = encoded(image("RGB", (6, 5)), "JPEG", quality=40)
        for kind, extra in (("tar", []), ("tar-members", [("json", b"{}"), ("txt", b"hi")])):
            root = os.path.join(d, kind)
            os.makedirs(root)
            for s in range(2):
                with tarfile.open(os.path.join(root, f"t-{s}.tar"), "w") as tar:
                    for i in range(2):
                        for ext, data in [("jpg", jpg), ("cls", str(i).encode())] + extra:
                            info = tarfile.TarInfo(f"s{s}/{i:03d}.{ext}")
                            info.size = len(data)
                            tar.addfile(info, io.BytesIO(data))
            seed(kind, os.path.join(root, "t-{0..1}.tar"), os.path.join(root, "t-{0..1}.tar.nostall-index"))


index_seeds()

def parquet_seeds():
    """Small Parquet files as pyarrow and `datasets` lay them out: an image
    struct or binary column, int and string labels, with and without the
    offset index, dictionary pages, compression, several row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    jpg = encoded(image("RGB", (6, 5)), "JPEG", quality=40)
    n = 6
    struct = pa.array([{"bytes": jpg + bytes([i]), "path": f"{i}.jpg"} for i in range(n)])
    table = pa.table({"image": struct, "label": pa.array(list(range(n)), type=pa.int64()),
                      "name": pa.array([None if i == 2 else f"n{i}" for i in range(n)]),
                      "score": pa.array([i / 3 for i in range(n)])})
    for name, kw in [("hf-index", dict(row_group_size=2, write_page_index=True, write_batch_size=1,
                                       data_page_size=1)),
                     ("plain", dict(row_group_size=4, compression="none")),
                     ("zstd-dict", dict(row_group_size=3, compression="zstd", use_dictionary=True,
                                        write_page_index=True)),
                     ("binary-gzip", dict(row_group_size=6, compression="gzip"))]:
        t = table if name != "binary-gzip" else pa.table(
            {"image": pa.array([jpg] * n, type=pa.binary()), "label": pa.array([f"c{i % 2}" for i in range(n)])})
        sink = io.BytesIO()
        pq.write_table(t, sink, **kw)
        out("parquet_fuzz", name + ".parquet", sink.getvalue())


parquet_seeds()


def arrow_ipc_seeds():
    """Small Arrow IPC files as `datasets` (the stream format) and pyarrow's
    file format lay them out (one with each buffer ZSTD-compressed): an image
    struct, int and string labels with nulls, a float, a dictionary and a
    list column beside them, several record batches."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    jpg = encoded(image("RGB", (6, 5)), "JPEG", quality=40)
    n = 6
    table = pa.table({"image": pa.array([{"bytes": jpg + bytes([i]), "path": f"{i}.jpg"} for i in range(n)]),
                      "label": pa.array(list(range(n)), type=pa.int64()),
                      "name": pa.array([None if i == 2 else f"n{i}" for i in range(n)]),
                      "score": pa.array([i / 3 for i in range(n)], type=pa.float32()),
                      "kind": pa.array([f"k{i % 2}" for i in range(n)]).dictionary_encode(),
                      "boxes": pa.array([[float(i)] * (i % 3) for i in range(n)])})
    for name, new in [("stream", ipc.new_stream), ("file", ipc.new_file), ("file-zstd", ipc.new_file)]:
        sink = io.BytesIO()
        options = ipc.IpcWriteOptions(compression="zstd" if name == "file-zstd" else None)
        with new(sink, table.schema, options=options) as w:
            for b in table.to_batches(max_chunksize=4 if name == "stream" else 2):
                w.write_batch(b)
        out("arrow_ipc_fuzz", name + ".arrow", sink.getvalue())


arrow_ipc_seeds()


def published_file_seeds():
    """Damaged and hostile published files (tests/python/test_published_files.py
    makes each the same way): Parquet metadata nested too deep or of other
    types, offset indexes that lie, footers claiming rows; COCO values outside
    the format; a FLAC of unknown length and an empty WAV; a trace past the
    fuzz target's event bound."""
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import test_published_files as t  # noqa: E402  (its byte-level helpers)

    jpg = encoded(image("RGB", (6, 5)), "JPEG", quality=40)
    base = pa.table({"image": pa.array([jpg + bytes([i]) for i in range(6)], type=pa.binary()),
                     "label": pa.array([i % 2 for i in range(6)], type=pa.int64())})
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src.parquet")
        pq.write_table(base, src, row_group_size=6, compression="none", write_page_index=True,
                       write_batch_size=1, data_page_size=1)
        for name, meta in [("hf-deep", b'{"info": {"features": ' + b"[" * 100 + b"]" * 100 + b"}}"),
                           ("hf-typed", json.dumps({"info": {"features": {
                               "image": {"_type": 5}, "label": {"_type": "ClassLabel", "names": [1, None]}}}}).encode())]:
            t.with_hf_metadata(src, os.path.join(d, name), meta)
            out("parquet_fuzz", name + ".parquet", open(os.path.join(d, name), "rb").read())
        data = bytearray(open(src, "rb").read())
        col = pq.ParquetFile(src).metadata.row_group(0).column(0)
        entries = t.offset_index(data, col.data_page_offset)
        values = [list(e[2]) for e in entries]
        values[2][2] += 1
        dst = t._rewritten(data, entries, values, __import__("pathlib").Path(d) / "rows")
        out("parquet_fuzz", "index-rows.parquet", dst.read_bytes())
        claimed = t.with_rows_claimed(src, os.path.join(d, "claimed"), 1000)
        out("parquet_fuzz", "rows-claimed.parquet", open(claimed, "rb").read())
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 8, "height": 6}],
            "categories": [{"id": 1, "name": {"en": "x"}}, {"id": 2, "name": "y"}],
            "annotations": [{"id": 1, "image_id": 1, "bbox": [3e38, 0, 3e38, 2], "category_id": 2},
                            {"id": 2, "image_id": 1, "bbox": [0, 0, 2, 2], "category_id": 2 ** 64 - 1}]}
    out("annotations_fuzz", "coco-outside", b"\x01" + json.dumps(coco).encode())
    sample = {"width": 8, "height": 6, "annotations": [
        {"bbox": [3e38, 0, 3e38, 2], "category_id": 1}, {"bbox": [0, 0, 2, 2], "category_id": -4}]}
    out("annotations_fuzz", "json-outside", b"\x00" + json.dumps(sample).encode())
    with tempfile.TemporaryDirectory() as d:
        t.flac_of_unknown_length(os.path.join(d, "u.flac"), seconds=0.3)
        out("audio_fuzz", "flac-unknown-length", open(os.path.join(d, "u.flac"), "rb").read() + b"\x00")
        import soundfile
        soundfile.write(os.path.join(d, "e.wav"), np.zeros(0, dtype="float32"), 16000)
        out("audio_fuzz", "wav-empty", open(os.path.join(d, "e.wav"), "rb").read() + b"\x00")
    with tempfile.TemporaryDirectory() as d:  # tiny videos of each container, from ffmpeg's testsrc
        for enc, ext in ((["libx264", "-bf", "2", "-g", "4"], "mp4"), (["libvpx-vp9", "-g", "4"], "webm"),
                         (["mpeg4", "-g", "4"], "avi"), (["libx264", "-g", "3"], "mkv")):
            path = os.path.join(d, "seed." + ext)
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-t",
                            "1", "-c:v", *enc, "-pix_fmt", "yuv420p", path], check=True)
            out("video_fuzz", ext, open(path, "rb").read() + b"\x2a")
        for acodec, ext in (("aac", "mp4"), ("libopus", "webm"), ("libmp3lame", "avi")):  # with an audio track
            path = os.path.join(d, "seed-audio." + ext)
            venc = {"mp4": "libx264", "webm": "libvpx-vp9", "avi": "mpeg4"}[ext]
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10", "-f",
                            "lavfi", "-i", "sine=frequency=300:sample_rate=48000", "-t", "1", "-c:v", venc, "-g", "4",
                            "-c:a", acodec, "-b:a", "32k", "-pix_fmt", "yuv420p", path], check=True)
            out("video_fuzz", ext + "-audio", open(path, "rb").read() + b"\xaa")  # (the pick's bit 7: the audio)
    events = []
    for s in range(100):
        t0 = 1000 + s * 100.0
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                    "ts": t0, "dur": 100.0},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 10,
                    "dur": 80.0}]
    out("trace_fuzz", "past-the-bound.json", json.dumps({"traceEvents": events}).encode())


published_file_seeds()

# A real shared-loader segment, written by the fuzz target itself.
path = os.path.join(HERE, "corpus", "shared_fuzz", "serving.bin")
os.makedirs(os.path.dirname(path), exist_ok=True)
subprocess.run([os.path.join(ROOT, "build", "asan", "shared_fuzz")],
               env=dict(os.environ, NOSTALL_FUZZ_WRITE_SEED=path), check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("seeds written to", os.path.join(HERE, "corpus"))
