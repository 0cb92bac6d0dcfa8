"""nostall's duration-bucketed speech batches vs lhotse's, on the same cores,
alternating rounds, medians.

    python bench/bench_speech.py [--rounds 3] [--data DIR] [--utterances 400] [--max-duration 200]

A speech-recognition set of spoken sentences of 1-20 s, 16 kHz FLAC, each
with its transcript beside it (datasets.make_speech_corpus: espeak-ng).
Both sides batch by duration with the same budget (``max_duration`` seconds
a batch, 10 buckets, at most 64 utterances), decode each whole utterance,
compute 80 log-mel features at a 25 ms window and a 10 ms hop, pad each
batch to its longest with the lengths beside it, and turn the transcripts
into character ids:

- nostall: ``bucketing={"by": "duration", ...}``, ``MelSpectrogram(n_fft=400,
  hop_length=160, n_mels=80)`` + ``AmplitudeToDB()``, ``text.CharTokenizer``;
  its budget counts the padded seconds (a batch's count times its longest);
- lhotse: ``DynamicBucketingSampler(max_duration=..., num_buckets=10,
  max_cuts=64, shuffle=True)`` over a CutSet of the folder,
  ``K2SpeechRecognitionDataset`` with ``OnTheFlyFeatures(Fbank(80 bins))``
  (Kaldi's fbank in torch: the same frame geometry; it also dithers and
  pre-emphasises), a DataLoader with one worker per core, each worker at one
  torch thread; its budget counts the seconds without padding.

Each round runs each side's epoch in a fresh process (the order swapped
every round), after a warm-up epoch; the table gives median utterances/s,
the ratio, and the padding (padded frames / real frames) each side's
batches carried.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUCKETS, MAX_COUNT = 10, 64


def run_nostall(root, max_duration, epochs, threads):
    import nostall
    from nostall import audio, text

    tok = text.CharTokenizer()
    loader = nostall.Loader(str(root), fields={"audio": "flac", "text": "txt"},
                            transforms={"audio": [audio.Decode(sample_rate=16000, max_seconds=30),
                                                  audio.MelSpectrogram(n_fft=400, hop_length=160, n_mels=80),
                                                  audio.AmplitudeToDB()],
                                        "text": tok},
                            batch_size=MAX_COUNT, shuffle=True, num_threads=threads, autotune=False,
                            bucketing={"by": "duration", "max_duration": max_duration, "num_buckets": BUCKETS})
    for _ in loader:  # warm-up epoch
        pass
    start, n, padded, real = time.perf_counter(), 0, 0, 0
    for e in range(epochs):
        loader.set_epoch(e + 1)
        for b in loader:
            lengths = b["audio_lengths"]
            n += len(lengths)
            padded += b["audio"].shape[0] * b["audio"].shape[-1]
            real += int(lengths.sum())
    return n / (time.perf_counter() - start), padded / real


def _init_worker(_):
    import torch

    torch.set_num_threads(1)


def run_lhotse(root, max_duration, epochs, threads):
    import torch
    from lhotse import CutSet, Fbank, FbankConfig, Recording, RecordingSet, SupervisionSegment, SupervisionSet
    from lhotse.dataset import DynamicBucketingSampler, K2SpeechRecognitionDataset, OnTheFlyFeatures

    recordings, supervisions = [], []
    for path in sorted(Path(root).glob("*/*.flac")):
        rec = Recording.from_file(path)
        recordings.append(rec)
        supervisions.append(SupervisionSegment(id=rec.id, recording_id=rec.id, start=0, duration=rec.duration,
                                               text=path.with_suffix(".txt").read_text().strip()))
    cuts = CutSet.from_manifests(recordings=RecordingSet.from_recordings(recordings),
                                 supervisions=SupervisionSet.from_segments(supervisions))
    sampler = DynamicBucketingSampler(cuts, max_duration=max_duration, max_cuts=MAX_COUNT, num_buckets=BUCKETS,
                                      shuffle=True, seed=0)
    dataset = K2SpeechRecognitionDataset(input_strategy=OnTheFlyFeatures(Fbank(FbankConfig(num_mel_bins=80))))
    letters = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz' ")}
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=threads,
                                         persistent_workers=True, worker_init_fn=_init_worker)

    def epoch(e, count):
        sampler.set_epoch(e)
        n = padded = real = 0
        for b in loader:
            frames = b["supervisions"]["num_frames"]
            ids = [torch.tensor([letters[c] for c in t if c in letters]) for t in b["supervisions"]["text"]]
            torch.nn.utils.rnn.pad_sequence(ids, batch_first=True)
            if count:
                n += len(frames)
                padded += b["inputs"].shape[0] * b["inputs"].shape[1]
                real += int(frames.sum())
        return n, padded, real

    epoch(0, False)  # warm-up epoch: the workers start
    start, n, padded, real = time.perf_counter(), 0, 0, 0
    for e in range(epochs):
        en, ep, er = epoch(e + 1, True)
        n, padded, real = n + en, padded + ep, real + er
    return n / (time.perf_counter() - start), padded / real


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", default="bench_data/speech", help="where the utterances are made")
    parser.add_argument("--utterances", type=int, default=400)
    parser.add_argument("--max-duration", type=float, default=200.0, help="seconds a batch holds")
    parser.add_argument("--epochs", type=int, default=1, help="epochs timed per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(args.data)
    if args.child:
        threads = len(os.sched_getaffinity(0))
        fn = run_nostall if args.child == "nostall" else run_lhotse
        rate, padding = fn(root, args.max_duration, args.epochs, threads)
        print(json.dumps({"rate": rate, "padding": padding}))
        return 0
    from nostall.datasets import make_speech_corpus

    make_speech_corpus(root, count=args.utterances, seconds=(1.0, 20.0))
    cores = len(os.sched_getaffinity(0))
    print(f"{args.utterances} utterances (1-20 s, 16 kHz FLAC), max_duration {args.max_duration:.0f} s, "
          f"80 log-mels, {cores} cores", flush=True)
    runs = {"nostall": [], "lhotse": []}
    for r in range(args.rounds):
        order = ["nostall", "lhotse"] if r % 2 == 0 else ["lhotse", "nostall"]
        for which in order:
            cmd = [sys.executable, __file__, "--data", str(root), "--max-duration", str(args.max_duration),
                   "--epochs", str(args.epochs), "--child", which]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[which].append(json.loads(out.strip().splitlines()[-1]))
        print(f"  round {r}: nostall {runs['nostall'][-1]['rate']:.0f}/s, "
              f"lhotse {runs['lhotse'][-1]['rate']:.0f}/s", flush=True)
    med = {k: statistics.median(x["rate"] for x in v) for k, v in runs.items()}
    pad = {k: statistics.median(x["padding"] for x in v) for k, v in runs.items()}
    print()
    print("| pipeline | nostall utt/s | lhotse utt/s | ratio | padding nostall | padding lhotse |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| duration buckets, {args.max_duration:.0f} s | {med['nostall']:.0f} | {med['lhotse']:.0f} | "
          f"{med['nostall'] / med['lhotse']:.2f}x | {pad['nostall']:.3f} | {pad['lhotse']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
