"""What a sample's other fields cost: the same WebDataset shards loaded as
(images, labels), as records of image + label, with a .json and a .txt per
sample (parsed, decoded), and with a Python hook on the .txt (a Hugging Face
`tokenizers` tokenizer, which releases the GIL).

    python bench/bench_records.py [--images 2000] [--rounds 5] [--data DIR]

Each round runs every configuration once, each in a fresh process, in a
rotating order; the table gives the median images/s and the ratio to
(images, labels). RandomResizedCrop 224 + flip + normalize, batch 128, the
cores this process may use.
"""
import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).parent
CONFIGS = ["plain", "image+label", "+json+txt", "+json+txt+tokenizer"]
WORDS = ["red", "green", "blue", "small", "large", "cat", "dog", "car", "tree", "house"]


def make_shards(src, out, per_shard=500):
    """ImageNet-like JPEGs of `src` as shards: .jpg, .cls, .json (~300 B) and
    .txt (a caption) per sample."""
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(src).rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    n_shards = max(1, -(-len(files) // per_shard))
    for s in range(n_shards):
        with tarfile.open(out / f"rec-{s:04d}.tar", "w") as tar:
            for i, path in enumerate(files[s * per_shard:(s + 1) * per_shard]):
                k = s * per_shard + i
                meta = {"file": path.name, "label": classes.index(path.parent.name),
                        "boxes": [[k % 50, k % 30, 40 + k % 60, 30 + k % 40]] * 4,
                        "tags": WORDS[: 2 + k % 8]}
                text = " ".join(WORDS[(k * 7 + j * 3) % len(WORDS)] for j in range(4 + k % 12))
                for ext, data in (("jpg", path.read_bytes()),
                                  ("cls", str(classes.index(path.parent.name)).encode()),
                                  ("json", json.dumps(meta).encode()), ("txt", text.encode())):
                    info = tarfile.TarInfo(f"s{s:04d}/{i:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(out / ("rec-{0000..%04d}.tar" % (n_shards - 1)))


def child(config, shards, epochs):
    import nostall

    ts = [nostall.RandomResizedCrop(224), nostall.RandomHorizontalFlip(),
          nostall.Normalize(nostall.IMAGENET_MEAN, nostall.IMAGENET_STD)]
    kw = dict(batch_size=128, shuffle=True, seed=1, num_threads=os.cpu_count())
    if config == "plain":
        loader = nostall.Loader(shards, transforms=ts, **kw)
    else:
        fields = {"image": "jpg", "label": "cls"}
        transforms = {"image": ts}
        if config != "image+label":
            fields.update(meta="json", caption="txt")
        if config.endswith("tokenizer"):
            from tokenizers import Tokenizer, models, pre_tokenizers

            tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS + ["[UNK]"])},
                                             unk_token="[UNK]"))
            tok.pre_tokenizer = pre_tokenizers.Whitespace()
            transforms["caption"] = lambda text: tok.encode(text).ids
        loader = nostall.Loader(shards, fields=fields, transforms=transforms, **kw)
    with loader:
        for _ in loader:  # the first epoch warms the page cache and the pools
            pass
        n, t0 = 0, time.perf_counter()
        for epoch in range(1, 1 + epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                n += len(batch[1] if isinstance(batch, tuple) else batch["label"])
        seconds = time.perf_counter() - t0
    print(json.dumps({"images": n, "seconds": seconds}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", default="bench_data/records",
                        help="where the JPEGs and shards are made (reused when present)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--shards", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.shards, args.epochs)
    from nostall.datasets import make_imagenet_like  # ImageNet-like JPEGs (sizes, quality)

    data = Path(args.data)
    jpegs = make_imagenet_like(str(data / "jpegs"), num_images=args.images)
    shards = make_shards(jpegs, data / "shards")
    for p in (data / "shards").glob("*.tar"):  # from the page cache, every configuration
        p.read_bytes()
    rates = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        for c in CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]:
            out = subprocess.run([sys.executable, __file__, "--child", c, "--shards", shards,
                                  "--epochs", str(args.epochs)], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(out.stderr[-3000:])
            res = json.loads(out.stdout.strip().splitlines()[-1])
            rates[c].append(res["images"] / res["seconds"])
            print(f"round {r} {c}: {rates[c][-1]:.0f} images/s", flush=True)
    base = statistics.median(rates["plain"])
    print("\n| configuration | images/s (median) | / (images, labels) |\n|---|---:|---:|")
    for c in CONFIGS:
        m = statistics.median(rates[c])
        print(f"| {c} | {m:.0f} | {m / base:.3f} |")


if __name__ == "__main__":
    main()
