"""nostall audio example: train a keyword-spotting CNN on spoken words.

Makes a spoken-words set with Debian's espeak-ng (real speech: 30 keywords in
several voices and speeds, over background noise, at 8-48 kHz in FLAC, WAV,
MP3, Ogg Vorbis and Opus), writes it as WebDataset shards, and trains a small
CNN on log-mel spectrograms with SpecAugment, every step of the input
pipeline (decode, resample, crop, gain, mel, dB, masks) in nostall's C++
threads. Prints the throughput, how long the loop waited on data, the stall
report and, unless --no-analyze, nostall.analyze's what-ifs.

    .venv/bin/python examples/audio.py [--voices 4] [--epochs 15] [--model m5]
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import nostall
from nostall import audio, datasets


def cnn(classes):
    """A small CNN on (1, 64, 101) log-mel spectrograms."""
    return nn.Sequential(
        nn.BatchNorm2d(1),  # the dB values' scale
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d((4, 4)),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(64 * 16, classes))


def m5(classes):
    """M5 (Dai et al., 2017) on the raw 16 kHz waveform, as in torchaudio's
    speech-command tutorial."""
    def block(i, o, k, s=1):
        return [nn.Conv1d(i, o, k, stride=s, padding=k // 2), nn.BatchNorm1d(o), nn.ReLU(),
                nn.MaxPool1d(4)]
    return nn.Sequential(*block(1, 32, 80, 16), *block(32, 32, 3), *block(32, 64, 3),
                         *block(64, 64, 3), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                         nn.Linear(64, classes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/spoken-words", help="where to write the set")
    parser.add_argument("--voices", type=int, default=4, help="espeak-ng voices per word")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--model", choices=("cnn", "m5"), default="cnn",
                        help="cnn: log-mel spectrograms; m5: raw waveforms")
    parser.add_argument("--no-analyze", action="store_true", help="skip nostall.analyze at the end")
    args = parser.parse_args()

    t0 = time.time()
    print(f"making spoken words with espeak-ng in {args.data} ...", flush=True)
    root = Path(args.data)
    words = datasets.make_spoken_words(root / "words", voices=args.voices, speeds=(130, 160, 190),
                                       rates=(8000, 16000, 22050, 44100, 48000),
                                       formats=("flac", "wav", "mp3", "ogg", "opus"))
    shards = datasets.folder_to_shards(words, root / "shards", shards=4)
    print(f"  done in {time.time() - t0:.1f}s: {shards}")

    train = [audio.Resample(16000), audio.SpeedPerturbation([0.9, 1.0, 1.1]),
             audio.RandomCrop(seconds=1.0), audio.Gain((-6, 6)), audio.TimeShift(0.1)]
    if args.model == "cnn":
        train += [audio.MelSpectrogram(n_mels=64, hop_length=160), audio.AmplitudeToDB(top_db=80),
                  audio.FrequencyMasking(8), audio.TimeMasking(20)]
    loader = nostall.Loader(shards, fields={"audio": "flac;wav;mp3;ogg;opus", "label": "cls"},
                            transforms={"audio": train}, batch_size=args.batch_size,
                            shuffle=True, seed=0)
    classes = len(datasets.SPOKEN_WORDS)
    print(f"nostall loader: {loader.num_items} clips, {classes} words, batches of "
          f"{tuple(loader.sample_shape)} samples")

    torch.manual_seed(0)
    torch.set_num_threads(max(1, nostall.available_cores()))
    model = cnn(classes) if args.model == "cnn" else m5(classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss, out

    seen, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        correct = total = 0
        for batch in loader:
            x, y = batch["audio"], batch["label"]
            loss, out = train_step(x, y)
            correct += int((out.argmax(1) == y).sum())
            total += len(y)
            seen += len(y)
        rate = seen / (time.perf_counter() - start)
        print(f"  epoch {epoch}: loss {loss.item():.3f}, train accuracy {100 * correct / total:5.1f}%, "
              f"{rate:6.0f} clips/s, waiting on data "
              f"{100 * loader.stats()['consumer']['stall_fraction']:4.1f}%", flush=True)
    elapsed = time.perf_counter() - start

    stats = loader.stats()
    print()
    print(f"trained {args.epochs} epochs: {seen} clips in {elapsed:.1f}s = {seen / elapsed:.0f} clips/s")
    print(f"training loop waited on data {100 * stats['consumer']['stall_fraction']:.1f}% of the time")
    print()
    print("where the time went (nostall stall report):")
    print(loader.stats_table())
    if not args.no_analyze:
        print("stall analysis (nostall.analyze, writes audio-analysis.html):")
        analysis = nostall.analyze(loader, lambda b: train_step(b["audio"], b["label"]), items=512)
        print(analysis.table())
        analysis.save_html("audio-analysis.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
