"""One path of the loader on one prep thread for a while, to be profiled:
where a sample's time goes (docs/benchmarks.md "Where the time goes").

    perf record -o /tmp/p.data -- .venv/bin/python bench/profile_paths.py images --epochs 4
    perf report -i /tmp/p.data --no-children --sort dso

Paths: images (RandomResizedCrop(224) + flip + Normalize, float32; `make
bench`'s JPEGs), images-uint8 (the same without Normalize), audio-flac and
audio-mp3 (3 s crops of 30 s recordings at 16 kHz + the mel features of
`make bench-audio`; its data), video (the Kinetics-style clip of `make
bench-video`: 16 frames 4 apart, short side 128, crop 112, flip, Normalize;
its videos) and detection (the SSD recipe of `make bench-detection`; its
scenes). Prints the time per sample of the epochs after
the first (the interpreter's start and the first epoch are in a profile of
the whole process too: run enough epochs that they are small beside them).
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def loader_for(path, data):
    import nostall
    from nostall import audio

    if path == "video":
        from nostall import video

        ts = [video.Clip(16, step=4), nostall.Resize(128), video.RandomCrop(112), nostall.RandomHorizontalFlip(),
              nostall.Normalize((0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989))]
        return nostall.Loader(data or str(ROOT / "bench_data" / "video"), batch_size=8, shuffle=True, num_threads=1,
                              autotune=False, transforms=ts), "clips"
    if path == "detection":
        from nostall.datasets import Coco
        from nostall.transforms import RandomIoUCrop, RandomPhotometricDistort, RandomZoomOut, SanitizeBoundingBoxes

        root = Path(data or ROOT / "bench_data" / "detection")
        ts = [RandomPhotometricDistort(), RandomZoomOut(fill=(123, 117, 104)), RandomIoUCrop(),
              nostall.RandomHorizontalFlip(), nostall.Resize((300, 300)), SanitizeBoundingBoxes()]
        return nostall.Loader(Coco(str(root / "images"), str(root / "instances.json")), transforms=ts, batch_size=32,
                              shuffle=True, num_threads=1, autotune=False), "images"
    if path.startswith("images"):
        ts = [nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip()]
        if path == "images":
            ts.append(nostall.Normalize(MEAN, STD))
        return nostall.Loader(data or str(ROOT / "bench_data" / "imagenet-like"), batch_size=256, shuffle=True,
                              num_threads=1, autotune=False, transforms=ts), "images"
    fmt = path.split("-")[1]
    ts = [audio.Resample(16000), audio.RandomCrop(seconds=3.0), audio.Gain((-6, 6)),
          audio.MelSpectrogram(n_mels=64), audio.AmplitudeToDB(), audio.FrequencyMasking(8), audio.TimeMasking(20)]
    root = data or str(ROOT / "bench_data" / "audio" / f"long30-{fmt}")
    return nostall.Loader(root, fields={"audio": "flac;mp3", "label": "cls"}, transforms={"audio": ts},
                          batch_size=16, shuffle=True, num_threads=1, autotune=False), "clips"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", choices=["images", "images-uint8", "audio-flac", "audio-mp3", "video", "detection"])
    ap.add_argument("--epochs", type=int, default=4, help="epochs timed after the first")
    ap.add_argument("--data", help="the dataset (default: the benchmark's, made by make bench / bench-audio)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    loader, unit = loader_for(args.path, args.data)
    for _ in loader:
        pass
    start, n = time.perf_counter(), 0
    for e in range(args.epochs):
        loader.set_epoch(e + 1)
        for batch in loader:
            n += len(batch[1] if isinstance(batch, (tuple, list)) else batch["label"])
    secs = time.perf_counter() - start
    print(f"{args.path}: {n} {unit}, {secs / n * 1e6:.0f} us each on one prep thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
