"""The image path on PNG and WebP files: nostall against torch's DataLoader +
PIL, the same recipe as `make bench` (RandomResizedCrop(224) + flip +
Normalize, float32, batch 256, 2 cores), on the benchmark's JPEGs saved
again as PNG (lossless, zlib level 6: PIL's default) and as WebP (lossy,
quality 90). Every contender a fresh process pinned to the same cores, one
warm-up epoch and one timed epoch, the order alternating each round;
medians (docs/benchmarks.md, "PNG and WebP").

    python bench/bench_formats.py --images 500 --rounds 3
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_loader  # noqa: E402  (its children and measure())

ROOT = Path(__file__).resolve().parent.parent


def converted(src: Path, dst: Path, fmt: str, limit: int) -> Path:
    """The first `limit` images of `src` (class folders) saved as `fmt` in `dst` (once)."""
    from PIL import Image

    done = dst / ".complete"
    if done.exists() and done.read_text() == str(limit):
        return dst
    files = sorted(src.rglob("*.jpg"))[:limit]
    for f in files:
        out = dst / f.parent.name / (f.stem + "." + fmt)
        out.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(f) as img:
            img.convert("RGB").save(out, **({"quality": 90} if fmt == "webp" else {}))
    done.write_text(str(limit))
    return dst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "bench_data" / "imagenet-like"))
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    from nostall.datasets import make_imagenet_like

    src = Path(make_imagenet_like(args.data, num_images=2000))
    rates = {}
    for fmt in ("png", "webp"):
        data = converted(src, Path(f"{args.data}-{fmt}"), fmt, args.images)
        for f in data.rglob(f"*.{fmt}"):  # the page cache warm for every contender
            f.read_bytes()
        mb = sum(f.stat().st_size for f in data.rglob(f"*.{fmt}")) / 2**20
        print(f"{fmt}: {args.images} files, {mb:.0f} MB", flush=True)
        me = [sys.executable, bench_loader.__file__, "--data", str(data), "--cores", str(args.cores),
              "--batch", str(args.batch), "--child"]
        for r in range(args.rounds):
            order = ("nostall", "torch") if r % 2 == 0 else ("torch", "nostall")
            for name in order:
                out, _ = bench_loader.measure(me + [name], args.cores)
                rate = out["images"] / out["seconds"]
                rates.setdefault((fmt, name), []).append(rate)
                print(f"round {r + 1}: {fmt} {name:8s} {rate:8.1f} images/s", flush=True)
    print("\n| format | nostall images/s | DataLoader + PIL images/s | ratio | rounds (ratio) |")
    print("|---|---:|---:|---:|---|")
    for fmt in ("png", "webp"):
        a, b = rates[(fmt, "nostall")], rates[(fmt, "torch")]
        per = ", ".join(f"{x / y:.2f}" for x, y in zip(a, b))
        print(f"| {fmt} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | "
              f"{statistics.median(a) / statistics.median(b):.2f}x | {per} |")


if __name__ == "__main__":
    main()
