"""nostall's audio pipeline vs the DataLoader pipeline users write today, on
the same cores, alternating rounds, medians.

    python bench/bench_audio.py [--rounds 5] [--data DIR] [--voices 8]

Two situations:

- clips: 1 s spoken words (espeak-ng, FLAC at 16, 22.05 and 44.1 kHz), each
  Resample(16000) -> RandomCrop(1 s) -> Gain -> MelSpectrogram(64) ->
  AmplitudeToDB -> FrequencyMasking(8) -> TimeMasking(20). The DataLoader
  decodes the whole file with soundfile and runs the same ops in torch
  (torchaudio's formulas: its resampling kernel through conv1d, torch.stft,
  the mel bank as a matmul), one worker per core, batch 64.
- long: 10-30 s FLAC and MP3 recordings, a random 3 s crop at 16 kHz, then the
  same features. The DataLoader reads only the crop's frames
  (``SoundFile.seek`` + ``read(n)``, with the resampler's margin): the best a
  careful user writes today.

Each round runs nostall's epoch and then the DataLoader's (the order swapped
every round), each in a fresh process; the table gives median samples/s and
the ratio. Threads: nostall's prep threads = DataLoader workers = the cores
this process may use.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
N_MELS = 64


def make_data(root: Path, voices: int):
    from nostall import datasets

    clips = datasets.make_spoken_words(root / "clips", voices=voices, speeds=(140, 180),
                                       rates=(16000, 22050, 44100), formats=("flac",))
    longs = datasets.make_long_recordings(root / "long", count=16, seconds=(10, 30),
                                          formats=("flac", "mp3"))
    # 30 s recordings, one format each: the crop's cost against the file's.
    long30 = {fmt: datasets.make_long_recordings(root / f"long30-{fmt}", count=16, seconds=(30, 30),
                                                 formats=(fmt,), seed=1)
              for fmt in ("flac", "mp3")}
    return clips, longs, long30


# ------------------------------------------------ the DataLoader pipeline
def _kernel(orig, new, width=6, rolloff=0.99):
    """torchaudio's sinc_interp_hann kernel (float32), cached per rate pair."""
    import torch

    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    base = min(orig, new) * rolloff
    w = math.ceil(width * orig / base)
    idx = torch.arange(-w, w + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t = (t * base).clamp_(-width, width)
    window = torch.cos(t * math.pi / width / 2) ** 2
    t = t * math.pi
    k = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t)
    return (k * window * base / orig).float(), w, orig, new


class TorchAudioOps:
    """The pipeline as torchaudio's functional code computes it, in torch."""

    def __init__(self):
        import torch

        self.kernels = {}
        self.window = torch.hann_window(400)
        n_freqs, sr = 201, 16000
        all_f = torch.linspace(0, sr // 2, n_freqs)
        mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
        m = torch.linspace(mel(0.0), mel(sr / 2), N_MELS + 2)
        f_pts = 700.0 * (10 ** (m / 2595.0) - 1.0)
        f_diff = f_pts[1:] - f_pts[:-1]
        slopes = f_pts.unsqueeze(0) - all_f.unsqueeze(1)
        self.fb = torch.clamp(torch.min(-slopes[:, :-2] / f_diff[:-1], slopes[:, 2:] / f_diff[1:]), min=0)

    def resample(self, x, orig, new):
        import torch.nn.functional as F

        if orig == new:
            return x
        if (orig, new) not in self.kernels:
            self.kernels[(orig, new)] = _kernel(orig, new)
        k, w, o, n = self.kernels[(orig, new)]
        length = x.shape[-1]
        y = F.conv1d(F.pad(x, (w, w + o))[:, None], k, stride=o).transpose(1, 2).reshape(x.shape[0], -1)
        return y[..., :math.ceil(n * length / o)]

    def features(self, x, g):
        import torch

        x = x * (10 ** (float(g.uniform(-6, 6)) / 20))
        spec = torch.stft(x, 400, 200, 400, self.window, center=True, pad_mode="reflect",
                          return_complex=True).abs().pow(2)
        mel = (spec.transpose(-1, -2) @ self.fb).transpose(-1, -2)
        db = 10 * torch.log10(torch.clamp(mel, min=1e-10))
        for axis, param in ((1, 8), (2, 20)):
            value = float(g.uniform(0, 1)) * param
            start = int(float(g.uniform(0, 1)) * (db.shape[axis] - value))
            end = start + int(value)
            if axis == 1:
                db[:, start:end, :] = 0
            else:
                db[:, :, start:end] = 0
        return db


class ClipDataset:
    def __init__(self, files):
        self.files = files
        self.ops = None

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import numpy as np
        import soundfile
        import torch

        if self.ops is None:
            self.ops = TorchAudioOps()
        g = np.random.default_rng(i)
        x, rate = soundfile.read(self.files[i][0], dtype="float32", always_2d=True)
        x = torch.from_numpy(x.T).mean(0, keepdim=True)
        x = self.ops.resample(x, rate, 16000)
        start = int(g.integers(0, max(0, x.shape[-1] - 16000) + 1))
        x = x[:, start:start + 16000]
        if x.shape[-1] < 16000:
            x = torch.nn.functional.pad(x, (0, 16000 - x.shape[-1]))
        return self.ops.features(x, g), self.files[i][1]


class CropDataset(ClipDataset):
    """Reads only the crop (and the resampler's margin) with SoundFile.seek."""

    seconds = 3.0

    def __getitem__(self, i):
        import numpy as np
        import soundfile
        import torch

        if self.ops is None:
            self.ops = TorchAudioOps()
        g = np.random.default_rng(i)
        with soundfile.SoundFile(self.files[i][0]) as f:
            rate, n = f.samplerate, f.frames
            want = int(self.seconds * rate)
            start = int(g.integers(0, max(0, n - want) + 1))
            f.seek(start)
            x = f.read(min(want, n - start), dtype="float32", always_2d=True)
        x = torch.from_numpy(x.T).mean(0, keepdim=True)
        x = self.ops.resample(x, rate, 16000)[:, :int(self.seconds * 16000)]
        if x.shape[-1] < int(self.seconds * 16000):
            x = torch.nn.functional.pad(x, (0, int(self.seconds * 16000) - x.shape[-1]))
        return self.ops.features(x, g), self.files[i][1]


def files_of(root):
    root = Path(root)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    return [(str(f), c) for c, name in enumerate(classes)
            for f in sorted((root / name).iterdir()) if f.is_file()]


def _init_worker(_):
    import torch

    torch.set_num_threads(1)


def run_dataloader(kind, root, epochs, threads):
    import torch

    files = files_of(root)
    ds = ClipDataset(files) if kind == "clips" else CropDataset(files)
    if kind != "clips":
        ds.files = files * 8  # 128 crops an epoch
    loader = torch.utils.data.DataLoader(ds, batch_size=64 if kind == "clips" else 16, shuffle=True,
                                         num_workers=threads, persistent_workers=True,
                                         worker_init_fn=_init_worker)
    n = 0
    for batch in loader:  # warm-up epoch: the workers start
        n += len(batch[1])
    start, n = time.perf_counter(), 0
    for _ in range(epochs):
        for x, y in loader:
            n += len(y)
    return n / (time.perf_counter() - start)


def run_nostall(kind, root, epochs, threads):
    import nostall
    from nostall import audio

    crop = 1.0 if kind == "clips" else CropDataset.seconds
    ts = [audio.Resample(16000), audio.RandomCrop(seconds=crop), audio.Gain((-6, 6)),
          audio.MelSpectrogram(n_mels=N_MELS), audio.AmplitudeToDB(), audio.FrequencyMasking(8),
          audio.TimeMasking(20)]
    loader = nostall.Loader(str(root), fields={"audio": "flac;mp3", "label": "cls"},
                            transforms={"audio": ts}, batch_size=64 if kind == "clips" else 16,
                            shuffle=True, num_threads=threads, autotune=False)
    reps = 1 if kind == "clips" else 8
    for batch in loader:  # warm-up epoch: index, threads
        pass
    start, n = time.perf_counter(), 0
    for e in range(epochs * reps):
        loader.set_epoch(e + 1)
        for batch in loader:
            n += len(batch["label"])
    return n / (time.perf_counter() - start)


def child(which, kind, root, epochs):
    threads = len(os.sched_getaffinity(0))
    fn = run_nostall if which == "nostall" else run_dataloader
    print(json.dumps({"rate": fn(kind, root, epochs, threads)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", default="bench_data/audio", help="where the data is made")
    parser.add_argument("--voices", type=int, default=8, help="espeak-ng voices per word (clips)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed per run")
    parser.add_argument("--only", default="", help="comma-separated situations to run (clips, long, "
                        "long30-flac, long30-mp3); default all")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], args.epochs)
        return 0
    clips, longs, long30 = make_data(Path(args.data), args.voices)
    print(f"clips: {len(files_of(clips))} 1 s words; long: {len(files_of(longs))} 10-30 s recordings; "
          f"{len(os.sched_getaffinity(0))} cores", flush=True)
    results = {}
    situations = [("clips", clips), ("long", longs), ("long30-flac", long30["flac"]),
                  ("long30-mp3", long30["mp3"])]
    wanted = [w for w in args.only.split(",") if w]
    for kind, root in situations:
        if wanted and kind not in wanted:
            continue
        rates = {"nostall": [], "DataLoader": []}
        for r in range(args.rounds):
            order = ["nostall", "DataLoader"] if r % 2 == 0 else ["DataLoader", "nostall"]
            for which in order:
                out = subprocess.run([sys.executable, __file__, "--epochs", str(args.epochs),
                                      "--child", which, kind, str(root)],
                                     check=True, capture_output=True, text=True).stdout
                rates[which].append(json.loads(out.strip().splitlines()[-1])["rate"])
            print(f"  {kind} round {r}: nostall {rates['nostall'][-1]:.0f}/s, "
                  f"DataLoader {rates['DataLoader'][-1]:.0f}/s", flush=True)
        results[kind] = {k: statistics.median(v) for k, v in rates.items()}
    print()
    print("| situation | nostall samples/s | DataLoader samples/s | ratio |")
    print("|---|---:|---:|---:|")
    names = {"clips": "1 s clips (FLAC, 16-44.1 kHz), whole-file decode",
             "long": "10-30 s FLAC/MP3, 3 s crops, DataLoader seeks",
             "long30-flac": "30 s FLAC, 3 s crops, DataLoader seeks",
             "long30-mp3": "30 s MP3, 3 s crops, DataLoader seeks"}
    for kind, r in results.items():
        print(f"| {names[kind]} | {r['nostall']:.0f} | {r['DataLoader']:.0f} | "
              f"{r['nostall'] / r['DataLoader']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
