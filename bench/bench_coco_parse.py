"""The annotation file parsed once: a COCO-sized instances JSON opened by
``nostall.datasets.Coco`` in fresh processes, first (parse and save) and
again (the saved table mapped), with and without segmentations.

    python bench/bench_coco_parse.py [--images 118287] [--data DIR]

The JSON is generated (COCO's train2017 shape: 118,287 images of 640x480,
0-14 annotations each with one 8-40 point polygon, 90 categories; about
435 MB) and written streaming. Each open runs in its own process, whose
peak RSS is reported (it includes the mapped JSON's pages while parsing).
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_instances(path: Path, images: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    n = 0
    with open(path, "w") as f:
        f.write('{"info": {"year": 2017}, "images": [')
        for i in range(images):
            f.write(("," if i else "") + json.dumps({"id": i + 1, "file_name": f"{i + 1:012d}.jpg",
                                                     "width": 640, "height": 480}))
        f.write('], "annotations": [')
        for i in range(images):
            for _ in range(rng.randint(0, 14)):
                x, y = rng.uniform(0, 500), rng.uniform(0, 400)
                pts = []
                for _ in range(rng.randint(8, 40)):
                    pts += [round(x + rng.uniform(0, 100), 2), round(y + rng.uniform(0, 80), 2)]
                f.write(("," if n else "") + json.dumps({
                    "id": n + 1, "image_id": i + 1, "category_id": rng.randint(1, 90), "iscrowd": 0,
                    "area": 8000.0, "bbox": [round(x, 2), round(y, 2), 100.0, 80.0], "segmentation": [pts]}))
                n += 1
        f.write('], "categories": [' + ",".join(json.dumps({"id": c, "name": f"c{c}"}) for c in range(1, 91)))
        f.write("]}")
    return n


def child(images_dir, ann, masks):
    import nostall
    from nostall.datasets import Coco

    t = time.perf_counter()
    loader = nostall.Loader(Coco(images_dir, ann, masks=masks), transforms=[nostall.Resize((300, 300))],
                            batch_size=32)
    print(json.dumps({"seconds": time.perf_counter() - t, "items": loader.num_items,
                      "origin": loader.index_origin,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=118287)
    parser.add_argument("--data", default="bench_data/coco-parse", help="where the JSON is written")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2] == "masks")
        return 0
    root = Path(args.data)
    (root / "images").mkdir(parents=True, exist_ok=True)
    ann = root / f"instances-{args.images}.json"
    if not ann.exists():
        print(f"writing {ann} ...", flush=True)
        n = write_instances(ann, args.images)
        print(f"  {args.images} images, {n} annotations", flush=True)
    print(f"{ann}: {ann.stat().st_size / 1e6:.0f} MB")
    print("| | open | seconds | peak RSS MB | from |")
    print("|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NOSTALL_CACHE_DIR=cache)
        for kind in ("boxes", "masks"):
            for which in ("first", "again"):
                out = subprocess.run([sys.executable, __file__, "--child", str(root / "images"), str(ann), kind],
                                     check=True, capture_output=True, text=True, env=env).stdout
                r = json.loads(out.strip().splitlines()[-1])
                origin = "parsed, saved" if r["origin"].startswith("parsed") else "mapped"
                print(f"| {kind} | {which} | {r['seconds']:.2f} | {r['rss_mb']:.0f} | {origin} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
