"""Video clips/s: nostall against torchcodec, PyAV and decord, each with
torch's DataLoader, on the Kinetics-style recipe.

    python bench/bench_video.py [--rounds 3] [--data DIR] [--videos 36] [--epochs 2] [--clips N]

The recipe (torchvision's video classification references): a clip of 16
frames 4 apart at a random start, the short side resized to 128
(bilinear, antialiased), a random 112 x 112 crop, a horizontal flip and
Normalize, batch 8, float32 (B, C, T, H, W). The videos: 10 s of H.264 in
MP4 (B-frames), 320x240, 640x360 and 1280x720, keyframes every 12 or 250
frames (nostall.datasets.make_videos: FFmpeg's test sources with noise).

The DataLoader pipelines decode the clip's frames on the CPU, one decoder
thread each, one worker per core:
  torchcodec  VideoDecoder (exact seeks) + samplers.clips_at_random_indices
  PyAV        seek to the keyframe before the clip, decode to its last frame
  decord      VideoReader.get_batch
then resize (torch's interpolate with antialias, as torchvision's Resize on
tensors), crop, flip and normalize in torch. Each round runs every
pipeline's epochs in a fresh process, the order rotated every round; the
table gives median clips/s and nostall's ratio to each. nostall's decoded
frames per clip frame (the waste) are printed too.

--clips N: N clips of each video per sample (the views of multi-view
training), each with its own start, crop and flip: nostall's
Clip(clips=N), decoded in one pass; torchcodec's clips_at_random_indices
(num_clips=N), one call; decord's get_batch of the N clips' frames, one
call; PyAV one seek and decode per clip. The rate counts clips (views).

--long MINUTES: instead, 8 videos of that many minutes (640x360 H.264, a
keyframe every 2 s, 2 Mbit/s: ~15 MB a minute), batch 2, where what a clip
reads of its file and whether the file is scanned again for each clip is
what counts: torchcodec is run both with its default exact seeks (a scan of
the file's packets when a decoder is made) and with seek_mode="approximate"
(none: the header's frame count and rate). The peak RSS of the run (the
process and its workers) is printed beside each rate. --old SITE adds
"nostall_old": the nostall package importable from SITE (an earlier build),
side by side.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MEAN, STD = [0.43216, 0.394666, 0.37645], [0.22803, 0.22145, 0.216989]
FRAMES, STEP, SHORT, CROP = 16, 4, 128, 112
BATCH = int(os.environ.get("BENCH_VIDEO_BATCH", "8"))
CLIPS = int(os.environ.get("BENCH_VIDEO_CLIPS", "1"))  # clips per sample (--clips)


def finish(frames):
    """(T, H, W, 3) uint8 frames -> the recipe's (3, T, 112, 112) float32."""
    import torch
    import torch.nn.functional as F

    x = torch.as_tensor(frames).permute(0, 3, 1, 2).float()
    h, w = x.shape[-2:]
    size = (SHORT, int(SHORT * w / h)) if h <= w else (int(SHORT * h / w), SHORT)
    x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False).clamp_(0, 255)
    top = int(torch.randint(0, size[0] - CROP + 1, (1,)))
    left = int(torch.randint(0, size[1] - CROP + 1, (1,)))
    x = x[..., top:top + CROP, left:left + CROP]
    if torch.rand(1) < 0.5:
        x = x.flip(-1)
    x = (x / 255 - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    return x.permute(1, 0, 2, 3).contiguous()


def clip_indices(n):
    import torch

    span = (FRAMES - 1) * STEP + 1
    start = int(torch.randint(0, max(n - span, 0) + 1, (1,)))
    return [min(start + i * STEP, n - 1) for i in range(FRAMES)]


class Videos:
    def __init__(self, files, decoder):
        self.files, self.decoder = files, decoder
        self.classes = sorted({f.parent.name for f in files})

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import torch

        path = self.files[i]
        clips = getattr(self, "_" + self.decoder)(str(path))  # CLIPS x (T, H, W, 3)
        out = [finish(frames) for frames in clips]
        return (out[0] if CLIPS == 1 else torch.stack(out)), self.classes.index(path.parent.name)

    @classmethod
    def _torchcodec_approx(cls, path):
        return cls._torchcodec(path, seek_mode="approximate")

    @staticmethod
    def _torchcodec(path, seek_mode="exact"):
        from torchcodec.decoders import VideoDecoder
        from torchcodec.samplers import clips_at_random_indices

        d = VideoDecoder(path, dimension_order="NHWC", num_ffmpeg_threads=1, seek_mode=seek_mode)
        out = clips_at_random_indices(d, num_clips=CLIPS, num_frames_per_clip=FRAMES,
                                      num_indices_between_frames=STEP)
        # (A FrameBatch of (clips, T, H, W, 3), or a list of one FrameBatch a clip.)
        return list(out.data) if hasattr(out, "data") else [c.data for c in out]

    @classmethod
    def _pyav(cls, path):
        return [cls._pyav_clip(path) for _ in range(CLIPS)]

    @staticmethod
    def _pyav_clip(path):
        import av
        import numpy as np

        with av.open(path) as c:
            s = c.streams.video[0]
            s.thread_type, s.thread_count = "SLICE", 1
            n = s.frames
            want = clip_indices(n)
            rate = s.average_rate
            first = int(want[0] / rate / s.time_base)  # the clip's first frame's pts (constant rate)
            c.seek(first + (s.start_time or 0), stream=s, backward=True)
            out, stop = {}, want[-1]
            for f in c.decode(s):
                i = int(round(float((f.pts - (s.start_time or 0)) * s.time_base * rate)))
                if i in want:
                    out[i] = f.to_ndarray(format="rgb24")
                if i >= stop:
                    break
            return np.stack([out.get(i, out[max(k for k in out if k <= i)]) for i in want])

    @staticmethod
    def _decord(path):
        import decord

        r = decord.VideoReader(path, num_threads=1)
        wanted = [clip_indices(len(r)) for _ in range(CLIPS)]
        frames = r.get_batch(sum(wanted, [])).asnumpy()
        return [frames[k * FRAMES:(k + 1) * FRAMES] for k in range(CLIPS)]


def _init_worker(_):
    import torch

    torch.set_num_threads(1)


def run_dataloader(files, decoder, epochs, threads):
    import torch

    loader = torch.utils.data.DataLoader(Videos(files, decoder), batch_size=BATCH, shuffle=True, num_workers=threads,
                                         persistent_workers=True, worker_init_fn=_init_worker)
    for _ in loader:  # warm-up epoch: the workers start
        pass
    start, n = time.perf_counter(), 0
    for _ in range(epochs):
        for clips, labels in loader:
            n += len(labels) * CLIPS
    return {"rate": n / (time.perf_counter() - start)}


def run_nostall(root, epochs, threads):
    import nostall
    from nostall import video

    transforms = [video.Clip(FRAMES, step=STEP, clips=CLIPS if CLIPS > 1 else None), nostall.Resize(SHORT),
                  video.RandomCrop(CROP), nostall.RandomHorizontalFlip(), nostall.Normalize(MEAN, STD)]
    loader = nostall.Loader(str(root), transforms=transforms, batch_size=BATCH, shuffle=True, num_threads=threads,
                            autotune=False)
    for _ in loader:  # warm-up epoch: the index, the threads
        pass
    start, n = time.perf_counter(), 0
    for e in range(epochs):
        loader.set_epoch(e + 1)
        for clips, labels in loader:
            n += len(labels) * CLIPS
    rate = n / (time.perf_counter() - start)
    if os.environ.get("BENCH_VIDEO_LONG"):
        return {"rate": rate}
    files = sorted(p for p in Path(root).glob("*/*.mp4"))
    decoded = [video.apply(transforms, f, index=i)[1]["decoded"] / (FRAMES * CLIPS) for i, f in enumerate(files)]
    return {"rate": rate, "waste": statistics.mean(decoded)}


def peak_rss_mb():
    """The peak resident memory of this process and of its finished workers, MB."""
    import resource

    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss +
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def make_long_videos(root, minutes, count=8):
    """`count` videos of `minutes` minutes in two class folders (ffmpeg's
    test sources with moving noise, 640x360 H.264, a keyframe every 2 s)."""
    sources = ["testsrc2", "testsrc", "smptehdbars", "rgbtestsrc"]
    for k in range(count):
        path = root / f"c{k % 2}" / f"long{k}.mp4"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        src = f"{sources[k % len(sources)]}=s=640x360:r=25:d={minutes * 60}"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", src, "-vf",
                        "noise=alls=12:allf=t,format=yuv420p", "-c:v", "libx264", "-preset", "ultrafast", "-g", "50",
                        "-b:v", "2M", str(path) + ".part.mp4"], check=True)
        os.replace(str(path) + ".part.mp4", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", default="bench_data/video", help="where the videos are made")
    parser.add_argument("--videos", type=int, default=36)
    parser.add_argument("--epochs", type=int, default=2, help="epochs timed per run")
    parser.add_argument("--only", default="nostall,torchcodec,pyav,decord", help="the pipelines to run")
    parser.add_argument("--clips", type=int, default=1, help="clips (views) of each video per sample")
    parser.add_argument("--long", type=float, default=0, help="MINUTES: 8 videos this long instead")
    parser.add_argument("--old", help="SITE: also run the nostall importable from there (nostall_old)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(args.data)
    os.environ["BENCH_VIDEO_CLIPS"] = str(args.clips)  # (the children read it)
    if args.child:
        threads = len(os.sched_getaffinity(0))
        files = sorted(root.glob("*/*.mp4"))
        out = (run_nostall(root, args.epochs, threads) if args.child.startswith("nostall") else
               run_dataloader(files, args.child, args.epochs, threads))
        out["rss_mb"] = peak_rss_mb()
        print(json.dumps(out))
        return 0
    cores = len(os.sched_getaffinity(0))
    names = args.only.split(",")
    if args.long:
        os.environ.update(BENCH_VIDEO_LONG="1", BENCH_VIDEO_BATCH="2")
        root = root.with_name(root.name + f"_long{args.long:g}")
        make_long_videos(root, args.long)
        if args.only == parser.get_default("only"):
            names = ["nostall", "torchcodec", "torchcodec_approx", "pyav", "decord"]
        print(f"8 videos of {args.long:g} min (640x360 H.264, a keyframe every 2 s, 2 Mbit/s), 16 frames x 4, "
              f"short side 128, crop 112, flip, normalize, batch 2, {cores} cores", flush=True)
    else:
        from nostall.datasets import make_videos

        per_class = max(1, args.videos // 4)
        make_videos(root, per_class=per_class, classes=4, seconds=(10.0, 10.0),
                    sizes=((320, 240), (640, 360), (1280, 720)), codecs=(("h264", "mp4"),), gops=(12, 250))
        print(f"{4 * per_class} videos (10 s H.264, 320x240-1280x720, GOP 12/250), 16 frames x 4, short side 128, "
              f"crop 112, flip, normalize, batch {BATCH}, {args.clips} clip(s) per video, {cores} cores", flush=True)
    if args.old:
        names.insert(1, "nostall_old")
    rates = {k: [] for k in names}
    rss = {k: [] for k in names}
    waste = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for which in order:
            cmd = [sys.executable, __file__, "--data", str(root), "--epochs", str(args.epochs), "--child", which]
            env = dict(os.environ)
            if which == "nostall_old":
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.old, env.get("PYTHONPATH")]))
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                            env=env).stdout.splitlines()[-1])
            rates[which].append(out["rate"])
            rss[which].append(out["rss_mb"])
            if "waste" in out:
                waste.append(out["waste"])
        print(f"  round {r}: " + ", ".join(f"{k} {rates[k][-1]:.1f}/s" for k in names), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print()
    print(f"| pipeline ({args.clips} clip(s) a sample) | clips/s | nostall's ratio | peak RSS (MB) |")
    print("|---|---:|---:|---:|")
    for k in names:
        ratio = f"{med['nostall'] / med[k]:.2f}x" if "nostall" in med and k != "nostall" else ""
        print(f"| {k} | {med[k]:.1f} | {ratio} | {statistics.median(rss[k]):,.0f} |")
    if waste:
        print(f"\nnostall's decoded frames per clip frame: {statistics.median(waste):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
