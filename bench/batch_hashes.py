"""A hash of every batch two epochs give, per pipeline: that a restructuring
changed no byte a user receives.

    python bench/batch_hashes.py --data DIR [--old /path/to/old/site]

Makes (once, under DIR) a JPEG folder, its tar shards and Parquet files, a
COCO-style detection set (polygons and RLE crowds), and a folder of spoken
words; serves the JPEG folder from moto's S3 server; then runs each pipeline
for two epochs (shuffled, seeded, augmented) in a fresh process per build and
prints one SHA-256 per pipeline and build. With --old (a folder holding another
build's `nostall` package, as bench_ab.py takes), the two builds' hashes are
compared and the exit status is 1 if any differs.

  image      RandomResizedCrop + flip + ColorJitter + Normalize (float32) and
             a uint8 NHWC variant, from the folder
  records    the same from tar shards (WebDataset layout)
  parquet    the same from Parquet files (Hugging Face layout)
  s3         the same from s3:// (moto on loopback)
  detection  SSD's recipe on COCO: images, boxes, labels, masks
  audio      resample, random crop, gain, mel spectrogram, dB, masking
"""
import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

PIPELINES = ("image", "records", "parquet", "s3", "detection", "audio")


def make_data(root):
    from nostall import datasets

    root = Path(root)
    done = root / ".done"
    if done.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    datasets.make_imagenet_like(root / "images", num_images=96, num_classes=4, seed=1, min_side=160,
                                max_side=420)
    datasets.folder_to_shards(root / "images", root / "shards", shards=3)
    datasets.folder_to_parquet(root / "images", root / "parquet", files=2, row_group_size=16)
    datasets.make_detection_scenes(root / "coco", num_images=32, seed=2, min_side=160, max_side=320)
    datasets.make_spoken_words(root / "words", words=["yes", "no", "up", "down"], voices=2)
    done.touch()


def digest(h, value):
    import torch

    if isinstance(value, torch.Tensor):
        h.update(str((tuple(value.shape), str(value.dtype))).encode())
        h.update(value.contiguous().numpy().tobytes())
    elif isinstance(value, dict):
        for k in sorted(value):
            h.update(str(k).encode())
            digest(h, value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}".encode())
        for v in value:
            digest(h, v)
    else:
        h.update(repr(value).encode())


def run_one(name, data):
    import nostall
    from nostall import audio
    from nostall.datasets import Coco
    from nostall.transforms import (ColorJitter, RandomIoUCrop, RandomPhotometricDistort, RandomZoomOut,
                                    SanitizeBoundingBoxes)

    data = Path(data)
    image_kw = dict(batch_size=8, shuffle=True, seed=7, return_indices=True,
                    transforms=[nostall.RandomResizedCrop(64), nostall.RandomHorizontalFlip(),
                                ColorJitter(0.4, 0.4, 0.4, 0.1),
                                nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)])
    if name == "image":
        loaders = [nostall.Loader(str(data / "images"), **image_kw),
                   nostall.Loader(str(data / "images"), batch_size=8, shuffle=True, seed=3, layout="NHWC",
                                  transforms=[nostall.Resize(72), nostall.CenterCrop(64)])]
    elif name == "records":
        loaders = [nostall.Loader(str(data / "shards" / "train-{0000..0002}.tar"), **image_kw)]
    elif name == "parquet":
        loaders = [nostall.Loader(str(data / "parquet" / "*.parquet"), **image_kw)]
    elif name == "s3":
        loaders = [nostall.Loader("s3://hashes/images/", **image_kw)]
    elif name == "detection":
        coco = data / "coco"
        ssd = [RandomPhotometricDistort(), RandomZoomOut(fill=(123, 117, 104)), RandomIoUCrop(),
               nostall.RandomHorizontalFlip(), nostall.Resize((160, 160)), SanitizeBoundingBoxes()]
        loaders = [nostall.Loader(Coco(coco / "images", coco / "instances.json", masks=True), transforms=ssd,
                                  batch_size=4, shuffle=True, seed=11, return_indices=True)]
    elif name == "audio":
        chain = [audio.Resample(16000), audio.RandomCrop(seconds=1.0), audio.Gain((-6, 6)),
                 audio.MelSpectrogram(n_mels=64), audio.AmplitudeToDB(), audio.FrequencyMasking(8),
                 audio.TimeMasking(20)]
        loaders = [nostall.Loader(str(data / "words"), fields={"audio": "flac;wav;mp3;ogg;opus", "label": "cls"},
                                  transforms={"audio": chain}, batch_size=4, shuffle=True, seed=5,
                                  return_indices=True)]
    else:
        raise SystemExit(f"unknown pipeline {name}")
    h = hashlib.sha256()
    batches = 0
    for loader in loaders:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                digest(h, batch)
                batches += 1
        loader.close()
    return {"sha256": h.hexdigest(), "batches": batches}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3(data):
    import boto3

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    env = {"AWS_ACCESS_KEY_ID": "AKIDHASH", "AWS_SECRET_ACCESS_KEY": "hash", "AWS_ENDPOINT_URL": endpoint,
           "AWS_REGION": "us-east-1"}
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="AKIDHASH", aws_secret_access_key="hash")
    client.create_bucket(Bucket="hashes")
    images = Path(data) / "images"
    for path in sorted(images.rglob("*.jpg")):
        client.upload_file(str(path), "hashes", "images/" + str(path.relative_to(images)))
    return proc, env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", required=True, help="where the generated data is kept (made once)")
    ap.add_argument("--old", help="a folder holding another build's nostall package, to compare with")
    ap.add_argument("--which", default=",".join(PIPELINES), help="pipelines, comma-separated")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.data)))
        return 0
    make_data(args.data)
    which = args.which.split(",")
    s3 = start_s3(args.data) if "s3" in which else None
    builds = ["new"] + (["old"] if args.old else [])
    results = {}
    try:
        for name in which:
            for build in builds:
                env = dict(os.environ, **(s3[1] if s3 else {}))
                env.pop("PYTHONPATH", None)
                if build == "old":
                    env["PYTHONPATH"] = args.old
                out = subprocess.run([sys.executable, __file__, "--data", args.data, "--child", name], env=env,
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{name} ({build}) failed:\n{out.stderr[-3000:]}")
                results.setdefault(name, {})[build] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if s3:
            s3[0].kill()
    differ = 0
    for name, r in results.items():
        line = f"{name:10s} {r['new']['batches']:4d} batches  new {r['new']['sha256'][:16]}"
        if "old" in r:
            same = r["old"]["sha256"] == r["new"]["sha256"] and r["old"]["batches"] == r["new"]["batches"]
            differ += not same
            line += f"  old {r['old']['sha256'][:16]}  {'same' if same else 'DIFFERENT'}"
        print(line)
    print(json.dumps(results))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
