"""nostall speech-recognition example: train a small CTC model on whole utterances.

Makes a LibriSpeech-like set of spoken sentences (espeak-ng, 1-20 s, 16 kHz
FLAC, each with its transcript in a .txt beside it), loads it through nostall
with batches of similar durations (bucketing by duration: as many utterances
as fit a budget of padded seconds, the same number of batches on every rank),
80 log-mel features with SpecAugment's masks computed in nostall's C++
threads, each batch padded to its longest with the lengths beside it, and
the transcripts as character ids (text.CharTokenizer). Trains a small
convolution + GRU model with torch's CTC loss, printing the loss, the
throughput and how long the loop waited on data, a greedy transcription of
one utterance, and the stall report.

    .venv/bin/python examples/speech_ctc.py [--utterances 300] [--epochs 8]
"""

import argparse
import sys
import time

import torch
from torch import nn

import nostall
from nostall import audio, datasets, text


class TinyCTC(nn.Module):
    """80 log-mels -> two strided convolutions (4x fewer frames: 40 ms a
    step, room for each letter and CTC's blanks between repeats) -> a
    bidirectional GRU -> per-step character logits."""

    def __init__(self, classes, hidden=96):
        super().__init__()

        def conv(i, o):
            return [nn.Conv1d(i, o, 5, stride=2, padding=2), nn.BatchNorm1d(o), nn.ReLU()]

        self.conv = nn.Sequential(*conv(80, hidden), *conv(hidden, hidden))
        self.rnn = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, classes)

    def forward(self, x, lengths):
        h = self.conv(x).transpose(1, 2)  # (B, ceil(T / 4), hidden)
        for _ in range(2):  # each convolution: ceil(n / 2) frames
            lengths = (lengths + 1) // 2
        packed = nn.utils.rnn.pack_padded_sequence(h, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.rnn(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True)
        return self.out(h).log_softmax(-1), lengths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/speech-corpus", help="where to write the set")
    parser.add_argument("--utterances", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--max-duration", type=float, default=120.0, help="padded seconds a batch holds")
    args = parser.parse_args()

    t0 = time.time()
    print(f"making {args.utterances} spoken sentences with espeak-ng in {args.data} ...", flush=True)
    root = datasets.make_speech_corpus(args.data, count=args.utterances, seconds=(1.0, 20.0))
    print(f"  done in {time.time() - t0:.1f}s")

    tok = text.CharTokenizer()
    features = [audio.Decode(sample_rate=16000, max_seconds=30), audio.Gain((-6, 6)),
                audio.MelSpectrogram(n_fft=400, hop_length=160, n_mels=80), audio.AmplitudeToDB(top_db=80),
                audio.FrequencyMasking(15), audio.TimeMasking(40)]
    loader = nostall.Loader(str(root), fields={"audio": "flac", "text": "txt"},
                            transforms={"audio": features, "text": tok}, batch_size=64, shuffle=True, seed=0,
                            bucketing={"by": "duration", "max_duration": args.max_duration, "num_buckets": 8})
    print(f"nostall loader: {loader.num_items} utterances, {len(loader)} batches an epoch of at most "
          f"{args.max_duration:.0f} s padded")

    torch.manual_seed(0)
    torch.set_num_threads(max(1, nostall.available_cores()))
    model = TinyCTC(len(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    ctc = nn.CTCLoss(blank=tok.blank)

    def train_step(batch):
        x, lengths = batch["audio"][:, 0], batch["audio_lengths"]  # (B, 80, frames), (B,)
        ids, id_lengths = batch["text"]
        x = (x - x.mean(dim=(1, 2), keepdim=True)) / (x.std(dim=(1, 2), keepdim=True) + 1e-5)
        opt.zero_grad()
        logp, out_lengths = model(x, lengths)
        loss = ctc(logp.transpose(0, 1), ids, out_lengths, id_lengths)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss, logp

    seen, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            loss, logp = train_step(batch)
            seen += len(batch["audio_lengths"])
        rate = seen / (time.perf_counter() - start)
        ids, id_lengths = batch["text"]
        heard = tok.decode(logp[0].argmax(-1), collapse=True)
        print(f"  epoch {epoch}: CTC loss {loss.item():.3f}, {rate:5.0f} utterances/s, waiting on data "
              f"{100 * loader.stats()['consumer']['stall_fraction']:4.1f}%", flush=True)
        print(f"    said:  {tok.decode(ids[0][:id_lengths[0]])[:70]}")
        print(f"    heard: {heard[:70]}")
    elapsed = time.perf_counter() - start
    stats = loader.stats()
    print()
    print(f"trained {args.epochs} epochs: {seen} utterances in {elapsed:.1f}s = {seen / elapsed:.0f}/s")
    print(f"training loop waited on data {100 * stats['consumer']['stall_fraction']:.1f}% of the time")
    print()
    print("where the time went (nostall stall report):")
    print(loader.stats_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
