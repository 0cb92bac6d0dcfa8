"""Video clips (docs/video.md): frames as FFmpeg's own program decodes them,
the clip's draws, the loader's batches, damaged files."""
import shutil
import subprocess

import numpy as np
import pytest

import nostall
from nostall import video
from nostall.datasets import make_videos

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg program (apt-get install ffmpeg)")

KINETICS = [video.Clip(8, step=4), nostall.Resize(64), video.RandomCrop(56), nostall.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Three classes: H.264 in MP4 (B-frames, GOP 12) and VP9 in WebM (GOP 25),
    MPEG-4 in AVI and H.264 in Matroska, 2-3 s, two frame sizes."""
    root = tmp_path_factory.mktemp("videos")
    return make_videos(root, per_class=4, classes=3, seconds=(2.0, 3.0), sizes=((320, 240), (256, 320)),
                       codecs=(("h264", "mp4"), ("vp9", "webm"), ("mpeg4", "avi"), ("h264", "mkv")),
                       gops=(12, 25), fps=(25, 30))


def ffmpeg_frames(path, indices, w, h):
    """The frames FFmpeg's own program gives for these indices (n: the
    frame's number in presentation order), RGB24."""
    sel = "+".join(f"eq(n\\,{i})" for i in indices)
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-vf", f"select={sel}", "-vsync", "0", "-f",
                          "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(out, np.uint8).reshape(-1, h, w, 3)


def all_files(root):
    return sorted(p for p in root.glob("*/*") if p.suffix in (".mp4", ".webm", ".avi", ".mkv"))


def test_frames_equal_ffmpegs_own_decode(videos):
    files = all_files(videos)
    assert {p.suffix for p in files} == {".mp4", ".webm", ".avi", ".mkv"}
    for path in files:
        info = video.info(path)
        n = info["frames"]
        assert n > 40 and info["keyframes"] >= 2, info
        wanted = [0, 7, n // 2, n // 2 + 1, n - 1]
        ours, decoded = video.frames(path, wanted)
        ref = ffmpeg_frames(path, wanted, info["width"], info["height"])
        assert ours.shape == ref.shape == (5, info["height"], info["width"], 3)
        assert np.array_equal(ours, ref), f"{path.name}: frames differ from ffmpeg's"
        assert decoded >= 5


def test_a_clip_decodes_little_more_than_its_frames_on_gop_12(videos):
    """The waste: frames the decoder produced per frame of the clip, on
    H.264 with keyframes every 12 frames (the frames before the clip back to
    its keyframe; the frames between a strided clip's that nothing refers
    to are skipped)."""
    mp4 = [p for p in all_files(videos) if p.suffix == ".mp4"]
    ratios = []
    for path in mp4:
        n = video.info(path)["frames"]
        for start in range(0, n - 16, 5):
            _, decoded = video.frames(path, list(range(start, start + 16)))
            ratios.append(decoded / 16)
    assert np.mean(ratios) <= 1.5, np.mean(ratios)
    assert min(ratios) == 1.0  # a clip starting at a keyframe decodes only its own


def assert_resize_and_crop_of_ffmpegs_frames(path, clip, params, short=64, crop=56):
    """`clip` (C, T, crop, crop) is PIL's resize of FFmpeg's frames to the
    short side `short`, cropped at the drawn box and flipped as drawn (within 1)."""
    from PIL import Image

    info = video.info(path)
    frames = params["frames"]
    ref = ffmpeg_frames(path, frames, info["width"], info["height"])
    w, h = info["width"], info["height"]
    rw, rh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)  # torchvision's Resize(short)
    x, y = params["box"][0] * rw / w, params["box"][1] * rh / h
    left, top = round(x), round(y)
    for t in range(len(frames)):
        img = Image.fromarray(ref[t]).resize((rw, rh), Image.BILINEAR).crop((left, top, left + crop, top + crop))
        want = np.asarray(img)
        if params["flip"]:
            want = want[:, ::-1]
        got = clip[:, t].transpose(1, 2, 0)
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1, f"frame {t}"


def test_clip_is_resize_and_crop_of_ffmpegs_frames(videos):
    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    clip, params = video.apply(KINETICS, path, seed=3, epoch=1, index=2)
    assert clip.shape == (3, 8, 56, 56) and clip.dtype == np.uint8
    frames = params["frames"]
    assert np.all(np.diff(frames) == 4) and 0 <= frames[0] and frames[-1] < video.info(path)["frames"]
    assert_resize_and_crop_of_ffmpegs_frames(path, clip, params)


def test_random_resize_draws_the_short_side_per_clip(videos):
    """PyTorchVideo's RandomShortSideScale as v2's RandomResize(min, max):
    a short side from [min, max) for each clip, then the crop; each clip is
    PIL's resize of FFmpeg's frames to its side."""
    from nostall.transforms import RandomResize

    path = next(p for p in all_files(videos) if p.suffix == ".webm")
    info = video.info(path)
    ts = [video.Clip(8, step=2), RandomResize(60, 72), video.RandomCrop(56), nostall.RandomHorizontalFlip()]
    sides = set()
    for index in range(24):
        clip, params = video.apply(ts, path, seed=1, index=index)
        assert clip.shape == (3, 8, 56, 56)
        side = round(56 * min(info["width"], info["height"]) / params["box"][3 if info["height"] <= info["width"] else 2])
        assert 60 <= side < 72
        sides.add(side)
        if index < 3:
            assert_resize_and_crop_of_ffmpegs_frames(path, clip, params, short=side)
    assert len(sides) >= 6  # drawn, not fixed
    # Grayscale that keeps three channels is an op on the pixels like the others.
    gray, _ = video.apply([video.Clip(4), nostall.Resize((48, 64)), nostall.transforms.Grayscale(3)], path)
    assert np.array_equal(gray[0], gray[1]) and np.array_equal(gray[1], gray[2])
    with pytest.raises(ValueError, match="min_size < max_size"):
        video.apply([video.Clip(4), RandomResize(64, 64), video.RandomCrop(56)], path)


def test_several_clips_of_a_video_are_decoded_in_one_pass(videos):
    """Clip(clips=3): three clips of the video in each sample, each with its
    own start, crop and flip, each equal to FFmpeg's frames resized and
    cropped; the first is the one clip of the same list without `clips`;
    the decoder runs once through the frames of all three."""
    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    three = [video.Clip(8, step=4, clips=3)] + KINETICS[1:]
    clips, params = video.apply(three, path, seed=5, index=4)
    assert clips.shape == (3, 3, 8, 56, 56) and len(params["clips"]) == 3
    for c in range(3):
        assert_resize_and_crop_of_ffmpegs_frames(path, clips[c], params["clips"][c])
    draws = [(p["frames"][0], tuple(p["box"]), p["flip"]) for p in params["clips"]]
    assert len(set(draws)) == 3  # three draws, not one
    one, one_params = video.apply(KINETICS, path, seed=5, index=4)
    assert np.array_equal(clips[0], one) and one_params["frames"] == params["clips"][0]["frames"]
    apart = sum(video.frames(path, p["frames"])[1] for p in params["clips"])
    assert params["decoded"] <= apart
    together = sorted(f for p in params["clips"] for f in p["frames"])
    assert params["decoded"] == video.frames(path, together)[1]
    loader = nostall.Loader(str(videos), transforms=three, batch_size=2, seed=5, return_indices=True)
    batch, labels, indices = next(iter(loader))
    assert tuple(batch.shape) == (2, 3, 3, 8, 56, 56) and tuple(loader.sample_shape) == (3, 3, 8, 56, 56)
    files = all_files(videos)
    for b in range(2):
        want, _ = video.apply(three, files[int(indices[b])], seed=5, index=int(indices[b]))
        assert np.array_equal(batch[b].numpy(), want)


def test_uniform_clips_are_evenly_spaced_from_first_to_last(videos):
    """sampling="uniform" with clips=N: starts at floor(c * last / (N - 1)),
    last the latest start that keeps the clip inside the video (torchcodec's
    clips_at_regular_indices); one uniform clip is the central one."""
    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    n = video.info(path)["frames"]
    span = (8 - 1) * 2 + 1
    last = n - span
    _, params = video.apply([video.Clip(8, step=2, sampling="uniform", clips=4), nostall.Resize((32, 32))], path)
    starts = [p["frames"][0] for p in params["clips"]]
    assert starts == [c * last // 3 for c in range(4)] and starts[-1] + span == n
    for p in params["clips"]:
        assert np.all(np.diff(p["frames"]) == 2)
    _, central = video.apply([video.Clip(8, step=2, sampling="uniform"), nostall.Resize((32, 32))], path)
    assert central["frames"][0] == last // 2


def test_frame_rate_resamples_the_video_first(videos):
    """Clip(frame_rate=r): torchvision's VideoClips rule, position k is frame
    floor(k * fps / r), over floor(frames * r / fps) positions; the clip's
    frames are num_frames consecutive positions (step 1)."""
    import math

    for path in [p for p in all_files(videos) if p.suffix in (".mp4", ".webm")][:4]:
        info = video.info(path)
        fps, n = info["fps"], info["frames"]
        for rate in (10.0, 12.5, fps):
            ratio = fps / rate
            positions = math.floor(n * rate / fps)
            for index in range(3):
                _, params = video.apply([video.Clip(6, frame_rate=rate), nostall.Resize((32, 32))], path,
                                        seed=1, index=index)
                frames = params["frames"]
                matches = [s for s in range(positions - 5)
                           if frames == [math.floor((s + t) * ratio) for t in range(6)]]
                assert matches, (path.name, rate, frames)
    with pytest.raises(ValueError, match="frame_rate"):
        video.apply([video.Clip(6, frame_rate=-1), nostall.Resize((32, 32))], all_files(videos)[0])
    with pytest.raises(ValueError, match="clips"):
        video.apply([video.Clip(6, clips=0), nostall.Resize((32, 32))], all_files(videos)[0])


def test_loader_batches_are_the_clips_apply_makes(videos):
    files = all_files(videos)
    seen = 0
    for clips, labels, indices in nostall.Loader(str(videos), transforms=KINETICS, batch_size=4, shuffle=True,
                                                  seed=7, num_threads=2, return_indices=True):
        assert clips.shape[1:] == (3, 8, 56, 56) and clips.dtype.is_floating_point is False
        for b in range(len(indices)):
            one, _ = video.apply(KINETICS, files[int(indices[b])], seed=7, epoch=0, index=int(indices[b]))
            assert np.array_equal(clips[b].numpy(), one)
            assert int(labels[b]) == sorted({p.parent.name for p in files}).index(files[int(indices[b])].parent.name)
            seen += 1
    assert seen == len(files)


def test_normalized_clips_in_either_layout(videos):
    norm = nostall.Normalize(mean=[0.45, 0.45, 0.45], std=[0.225, 0.225, 0.225])
    a = next(iter(nostall.Loader(str(videos), transforms=[video.Clip(4, step=2, sampling="uniform"), nostall.Resize((48, 64)), norm],
                                 batch_size=2)))[0]
    b = next(iter(nostall.Loader(str(videos), transforms=[video.Clip(4, step=2, sampling="uniform", layout="TCHW"),
                                                          nostall.Resize((48, 64)), norm], batch_size=2)))[0]
    assert a.shape == (2, 3, 4, 48, 64) and b.shape == (2, 4, 3, 48, 64) and a.dtype == b.dtype
    assert str(a.dtype) == "torch.float32"
    assert np.allclose(a.permute(0, 2, 1, 3, 4).numpy(), b.numpy())
    assert -2.5 < float(a.min()) < float(a.max()) < 2.5


def test_a_short_video_repeats_its_last_frame(videos):
    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    n = video.info(path)["frames"]
    clip, params = video.apply([video.Clip(20, step=n // 10), nostall.Resize((32, 32))], path)
    assert params["frames"][-1] == n - 1 and params["frames"].count(n - 1) >= 2
    assert np.array_equal(clip[:, -1], clip[:, -2])


def test_a_phone_videos_rotation_is_applied_as_ffmpeg_shows_it(videos, tmp_path):
    """A portrait video recorded as landscape frames and a display matrix
    (what phones write): frames come out turned as FFmpeg's own program
    (and torchcodec) shows them, not sideways; the clip's geometry is drawn
    on the turned frames."""
    src = next(p for p in all_files(videos) if p.suffix == ".mp4")
    plain = video.info(src)
    root = tmp_path / "phone"
    (root / "a").mkdir(parents=True)
    for degrees in (90, 180, 270):
        path = root / "a" / f"turned{degrees}.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-i", str(src), "-c", "copy", "-metadata:s:v:0",
                        f"rotate={degrees}", str(path)], check=True)
        info = video.info(path)
        turned = degrees in (90, 270)
        assert (info["width"], info["height"]) == ((plain["height"], plain["width"]) if turned else
                                                    (plain["width"], plain["height"]))
        # ffmpeg writes the tag as the display matrix's counter-clockwise turn (ffprobe's "rotation")
        assert info["rotation"] == degrees and not info["mirrored"]
        wanted = [0, 9, info["frames"] - 1]
        ours, _ = video.frames(path, wanted)
        ref = ffmpeg_frames(path, wanted, info["width"], info["height"])
        assert ours.shape == ref.shape and np.array_equal(ours, ref), f"{degrees}: not as ffmpeg turns it"
        # A clip of the turned frames.
        clip, params = video.apply([video.Clip(4, step=3), nostall.Resize((64, 48))], path)
        assert clip.shape == (3, 4, 64, 48)
    batch = next(iter(nostall.Loader(str(root), transforms=KINETICS, batch_size=3, return_indices=True)))
    assert batch[0].shape == (3, 3, 8, 56, 56)


# What users' folders hold beyond the fixture's four: (name, ffmpeg's output arguments).
USERS_FILES = [
    ("ts_h264.ts", ["-c:v", "libx264", "-g", "20"]),  # MPEG-TS seeks by decoding time
    ("xvid_packed.avi", ["-c:v", "libxvid", "-bf", "2", "-g", "12"]),  # DivX-style packed B-frames, no pts
    ("hevc10.mkv", ["-c:v", "libx265", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=none:keyint=15"]),
    ("h264_444_10bit.mp4", ["-c:v", "libx264", "-pix_fmt", "yuv444p10le", "-g", "15"]),
    ("vp8.webm", ["-c:v", "libvpx", "-b:v", "400k", "-g", "15"]),
    ("mjpeg.avi", ["-c:v", "mjpeg", "-q:v", "4"]),
    ("gray.mkv", ["-c:v", "ffv1", "-pix_fmt", "gray"]),
    ("mpeg2.mpg", ["-c:v", "mpeg2video", "-bf", "2", "-g", "12", "-q:v", "4"]),
]


@pytest.fixture(scope="module")
def users_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("users")
    for k, (name, args) in enumerate(USERS_FILES):
        (root / f"c{k % 2}").mkdir(exist_ok=True)
        src = f"testsrc2=size=320x240:rate=25:duration={2 + k % 2}"
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", src, "-f", "lavfi", "-i",
                        "nullsrc=size=320x240:rate=25", "-filter_complex",
                        "[0]noise=alls=20:allf=t[v]", "-map", "[v]", *args, str(root / f"c{k % 2}" / name)],
                       check=True)
    # A cover picture as a second video stream (what downloaders write), and
    # the audio as the file's first stream.
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=duration=2", "-f", "lavfi", "-i",
                    "testsrc2=size=320x240:rate=25:duration=2", "-f", "lavfi", "-i",
                    "testsrc=size=64x64:duration=0.04", "-map", "0:a", "-map", "1:v", "-map", "2:v", "-c:a", "aac",
                    "-c:v:0", "libx264", "-c:v:1", "png", "-disposition:v:1", "attached_pic",
                    str(root / "c0" / "cover_audio_first.mp4")], check=True)
    return root


def test_the_containers_and_codecs_users_have_decode_as_ffmpeg_shows_them(users_files):
    """Beyond the fixture's four: MPEG-TS (whose seeks land past a keyframe
    asked for by its presentation time), AVI with packed B-frames (packets
    without presentation times: frames numbered as they come out), HEVC
    10-bit, 4:4:4 10-bit H.264, VP8, MJPEG, FFV1 gray, MPEG-2 in PS, a cover
    picture and the audio first: frames equal to ffmpeg's, wherever the
    clip starts; a folder of them loads."""
    files = sorted(users_files.glob("*/*"))
    assert len(files) == len(USERS_FILES) + 1
    for path in files:
        info = video.info(path)
        n = info["frames"]
        assert n in (50, 75) and (info["width"], info["height"]) == (320, 240), (path.name, info)
        for wanted in ([0, 1, 2], [n // 2 - 1, n // 2 + 3], [n - 2, n - 1], [5, 31, n - 1]):
            ours, _ = video.frames(path, wanted)
            ref = ffmpeg_frames(path, wanted, 320, 240)
            assert ours.shape == ref.shape and np.array_equal(ours, ref), f"{path.name} {wanted}: differs from ffmpeg's"
    (users_files / "c1" / "notes.txt").write_text("not a video")
    seen = 0
    with pytest.warns(UserWarning, match=r"1 file left out, not videos nostall reads: 1 \.txt"):
        for batch, labels in nostall.Loader(str(users_files), transforms=KINETICS, batch_size=3, shuffle=True, seed=3):
            assert batch.shape[1:] == (3, 8, 56, 56)
            seen += len(labels)
    assert seen == len(files)


@pytest.fixture(scope="module")
def long_files(tmp_path_factory):
    """30 s files of a few MB (a local file this long is read in parts):
    MP4 with its index at the end (ffmpeg's default), MP4 with it first and
    AAC audio, H.264 in Matroska."""
    root = tmp_path_factory.mktemp("long")
    (root / "a").mkdir()
    src = ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25:duration=30"]
    enc = ["-vf", "noise=alls=15:allf=t", "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-b:v", "1M"]
    for name, extra in (("end.mp4", []), ("mkv.mkv", []),
                        ("first.mp4", ["-f", "lavfi", "-i", "sine=frequency=440:duration=30", "-c:a", "aac",
                                       "-movflags", "+faststart"])):
        subprocess.run(["ffmpeg", "-v", "error", *src, *extra, *enc, str(root / "a" / name)], check=True)
    return root


def test_long_files_are_read_in_parts_and_give_the_clips_of_their_whole_bytes(long_files):
    """A clip of a long local file reads its container's index and the
    packets from its keyframe on, not the whole file; after the first
    epoch the file's scan is kept, so its packets are not read again: the
    clips (and their audio) are those of the whole file's bytes."""
    files = sorted(long_files.glob("a/*"))
    sizes = [p.stat().st_size for p in files]
    assert min(sizes) > 2_000_000
    spec = [video.Clip(16, step=2), nostall.Resize(64), video.RandomCrop(56), nostall.RandomHorizontalFlip(),
            video.Audio(seconds=0.5, sample_rate=16000)]
    loader = nostall.Loader(str(long_files), transforms=spec, batch_size=1, shuffle=True, seed=3, num_threads=2,
                            return_indices=True)
    read = []
    for epoch in range(3):
        read.append(loader.stats()["stages"]["fetch"]["bytes"])
        for clip, audio, labels, indices in loader:
            i = int(indices[0])
            want, params = video.apply(spec, files[i], seed=3, epoch=epoch, index=i)
            assert np.array_equal(clip[0].numpy(), want), f"{files[i].name} epoch {epoch}: not the whole file's clip"
            assert np.array_equal(audio[0].numpy(), params["audio"]), f"{files[i].name} epoch {epoch}: not its audio"
    read.append(loader.stats()["stages"]["fetch"]["bytes"])
    # Epochs after the first read a part of each file (~20%: its index, and a
    # clip of 1.3 s from its keyframe, one a second, of 30 s, in blocks of
    # 256 kB), where reading them whole would be 100% an epoch (the count
    # may hold the next epoch's first reads: three epochs' parts at most).
    assert read[3] - read[1] < sum(sizes), (read, sizes)


def test_a_video_over_the_item_limit_is_read_in_parts(long_files, tmp_path):
    """An item read whole may be at most 256 MB; a video is read in parts,
    so a longer file (an hour of 720p is a gigabyte or more) loads."""
    root = tmp_path / "big"
    (root / "a").mkdir(parents=True)
    big = root / "a" / "big.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-stream_loop", "70", "-i", str(long_files / "a" / "end.mp4"),
                    "-c", "copy", str(big)], check=True)
    assert big.stat().st_size > 256 << 20
    spec = [video.Clip(4, step=2), nostall.Resize((32, 32))]
    loader = nostall.Loader(str(root), transforms=spec, batch_size=1, seed=1, return_indices=True)
    for epoch in range(2):
        clip, _, _ = next(iter(loader))
        assert clip.shape == (1, 3, 4, 32, 32)
    info = video.info(big)
    assert info["frames"] == 71 * 750


def test_a_long_file_cut_short_is_a_data_error_naming_it(long_files, tmp_path):
    root = tmp_path / "cut"
    (root / "a").mkdir(parents=True)
    whole = (long_files / "a" / "first.mp4").read_bytes()  # its index first: it opens, its packets end early
    (root / "a" / "cut.mp4").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(nostall.DataError, match="cut.mp4"):
        for _ in nostall.Loader(str(root), transforms=[video.Clip(4), nostall.Resize((32, 32))], batch_size=1):
            pass


def test_damaged_videos_are_data_errors_naming_the_file(videos, tmp_path):
    root = tmp_path / "set"
    shutil.copytree(videos, root)
    victim = next(p for p in all_files(root) if p.suffix == ".mp4")
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 3])  # truncated: the moov atom (at the end) is gone
    with pytest.raises(nostall.DataError, match=victim.name):
        for _ in nostall.Loader(str(root), transforms=KINETICS, batch_size=4):
            pass
    n = sum(len(b[1]) for b in nostall.Loader(str(root), transforms=KINETICS, batch_size=4, on_error="skip"))
    assert n == len(all_files(root)) - 1
    with pytest.raises(nostall.DataError):
        video.info(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    with pytest.raises(nostall.DataError, match="empty"):
        video.info(b"")


def test_bad_lists_say_what_is_wrong(videos):
    with pytest.raises(ValueError, match="starts with a Clip"):
        nostall.Loader(str(videos), transforms=[nostall.Resize(64)], fields={"video": "mp4;webm;avi;mkv", "label": "cls"})
    with pytest.raises(ValueError, match="one frame size"):
        nostall.Loader(str(videos), transforms=[video.Clip(4), nostall.Resize(64)])
    with pytest.raises(ValueError, match="order"):
        nostall.Loader(str(videos), transforms=[video.Clip(4), video.RandomCrop(32), nostall.Resize(64)])
    path = all_files(videos)[0]
    with pytest.raises(nostall.DataError, match="larger than"):
        video.apply([video.Clip(2), video.RandomCrop(4000)], path)


def test_torchvisions_reference_order_gives_the_same_clips(videos):
    """torchvision's video classification recipe writes Resize, flip,
    Normalize, RandomCrop: the flip and Normalize may go anywhere after the
    Clip, and give the clips of the order nostall runs them in."""
    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    norm = nostall.Normalize(mean=[0.43216, 0.394666, 0.37645], std=[0.22803, 0.22145, 0.216989])
    theirs = [video.Clip(8, step=2), nostall.Resize((64, 86)), nostall.RandomHorizontalFlip(), norm,
              video.RandomCrop(56)]
    ours = [video.Clip(8, step=2), nostall.Resize((64, 86)), video.RandomCrop(56), nostall.RandomHorizontalFlip(), norm]
    for index in range(4):
        a, pa = video.apply(theirs, path, index=index)
        b, pb = video.apply(ours, path, index=index)
        assert a.dtype == np.float32 and np.array_equal(a, b) and pa == pb
    with pytest.raises(ValueError, match="before Normalize"):
        video.apply([video.Clip(4), nostall.Resize((48, 64)), norm, nostall.transforms.ColorJitter(0.4)], path)
    with pytest.raises(ValueError, match="one RandomHorizontalFlip"):
        video.apply([video.Clip(4), nostall.Resize((48, 64)), nostall.RandomHorizontalFlip(),
                     nostall.RandomHorizontalFlip()], path)


def test_frames_by_time_on_a_variable_frame_rate(tmp_path):
    """Clip(seconds_between_frames=s), torchcodec's clips_at_random_timestamps:
    the frames shown at start + k * s, on a video whose frame rate changes
    (25 fps, then 10): one start in seconds explains every frame chosen."""
    path = tmp_path / "vfr.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-t", "5", "-vf",
                    "setpts='if(lt(N,30),N/25,1.2+(N-30)/10)/TB'", "-vsync", "vfr", "-c:v", "libx264", "-g", "12",
                    str(path)], check=True)
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time",
                          "-of", "csv=p=0", str(path)], capture_output=True, text=True, check=True).stdout
    times = sorted(float(t) for t in out.split())
    s = 0.07  # under the 10 fps part's spacing, over the 25 fps part's
    ts = [video.Clip(8, seconds_between_frames=s), nostall.Resize((32, 32))]
    for index in range(12):
        clip, params = video.apply(ts, path, index=index)
        f = params["frames"]
        assert clip.shape == (3, 8, 32, 32) and f == sorted(f)
        # A start t0 with times[f_k] <= t0 + k*s < times[f_k + 1] for every k.
        lo = max(times[fk] - k * s for k, fk in enumerate(f))
        hi = min((times[fk + 1] - k * s for k, fk in enumerate(f) if fk + 1 < len(times)), default=lo + 1)
        assert lo < hi + 1e-6, (f, lo, hi)
        assert params["time"] == pytest.approx(times[f[0]], abs=1e-3)
    # Where the rate drops, frames by time repeat a frame; frames by index never do.
    starts = [video.apply(ts, path, index=i)[1]["frames"] for i in range(40)]
    assert any(len(set(fr)) < len(fr) for fr in starts)
    with pytest.raises(ValueError, match="one or the other"):
        video.apply([video.Clip(8, step=2, seconds_between_frames=s), nostall.Resize((32, 32))], path)


def test_random_erasing_erases_one_box_in_every_frame(videos):
    """RandomErasing after Normalize, as torchvision's on a video tensor: one
    box per clip, the same in every frame and channel; the rest untouched."""
    from nostall.transforms import RandomErasing

    path = next(p for p in all_files(videos) if p.suffix == ".webm")
    norm = nostall.Normalize(mean=[0.45] * 3, std=[0.225] * 3)
    base = [video.Clip(4, step=2), nostall.Resize(64), video.RandomCrop(56), norm]
    boxes = set()
    for index in range(6):
        plain, _ = video.apply(base, path, index=index, dtype="float32")
        erased, _ = video.apply(base + [RandomErasing(p=1.0, value=[1.0, 2.0, 3.0])], path, index=index,
                                dtype="float32")
        changed = np.any(erased != plain, axis=(0, 1))  # (H, W): where any frame or channel changed
        ys, xs = np.nonzero(changed)
        assert len(ys) > 0
        top, left, bottom, right = ys.min(), xs.min(), ys.max() + 1, xs.max() + 1
        assert changed[top:bottom, left:right].all()  # one rectangle
        for ch, v in enumerate((1.0, 2.0, 3.0)):
            assert np.all(erased[ch, :, top:bottom, left:right] == v)  # every frame
        assert np.array_equal(erased[:, :, ~changed], plain[:, :, ~changed])
        boxes.add((top, left, bottom, right))
    assert len(boxes) > 1  # drawn per sample
    with pytest.raises(ValueError, match="goes last"):
        video.apply([video.Clip(4), nostall.Resize((48, 64)), RandomErasing(), norm], path, dtype="float32")
    with pytest.raises(ValueError, match="float32"):
        nostall.Loader(str(videos), transforms=[video.Clip(4), nostall.Resize((48, 64)), RandomErasing(value="random")])


def _clips(loader, limit=None):
    import itertools

    out = []
    for b in itertools.islice(loader, limit):  # (takes no batch past the limit)
        clips = b["video"] if isinstance(b, dict) else b[0]
        out.append(clips.numpy().copy())
    return out


def test_shards_a_cache_and_a_resume_give_the_folders_clips(videos, tmp_path):
    import uuid

    from nostall import datasets

    small = [video.Clip(4, step=3), nostall.Resize(40), video.RandomCrop(32), nostall.RandomHorizontalFlip()]
    kw = dict(transforms=small, batch_size=3, shuffle=True, seed=11, num_threads=2)
    folder = _clips(nostall.Loader(str(videos), **kw))
    shards = datasets.folder_to_shards(videos, tmp_path / "shards", shards=3)
    by_index = {}
    for b in nostall.Loader(shards, fields={"video": video.EXTENSIONS, "label": "cls"}, return_indices=True, **kw):
        assert b["video"].shape[1:] == (3, 4, 32, 32)
        by_index.update({int(i): c for i, c in zip(b["__index__"], b["video"].numpy())})
    assert len(by_index) == len(all_files(videos))
    cache = nostall.Cache(f"video-{uuid.uuid4().hex[:8]}", "64MB")
    try:
        cached = nostall.Loader(str(videos), cache=cache, **kw)
        for e in range(2):  # the second epoch from the cache
            cached.set_epoch(0)
            assert all(np.array_equal(a, b) for a, b in zip(_clips(cached), folder))
        cached.close()
    finally:
        cache.remove()
    first = nostall.Loader(str(videos), **kw)
    head = _clips(first, limit=2)
    state = first.state_dict()
    first.close()
    again = nostall.Loader(str(videos), **kw)
    again.load_state_dict(state)
    rest = _clips(again)
    assert len(head + rest) == len(folder)
    assert all(np.array_equal(a, b) for a, b in zip(head + rest, folder))


def test_a_list_ending_in_a_video_transform_keeps_it(videos):
    """(A video transform is not a Python hook on the batch, wherever it stands.)"""
    loader = nostall.Loader(str(videos), transforms=[video.Clip(4), nostall.Resize(64), video.RandomCrop(40)],
                            batch_size=2)
    assert tuple(loader.sample_shape) == (3, 4, 40, 40)
    clips, labels = next(iter(loader))
    assert clips.shape == (2, 3, 4, 40, 40)


def test_color_jitter_draws_once_for_the_whole_clip(videos):
    from nostall import transforms as T

    path = next(p for p in all_files(videos) if p.suffix == ".mp4")
    base = [video.Clip(6, step=3), nostall.Resize((48, 64))]
    factors = []
    for seed in range(4):
        plain, _ = video.apply(base, path, seed=seed, index=1)
        jit, _ = video.apply(base + [T.ColorJitter(brightness=0.6)], path, seed=seed, index=1)
        per_frame = []
        for t in range(6):
            p, j = plain[:, t].astype(float), jit[:, t].astype(float)
            mid = (p > 30) & (p < 150)  # neither end clips at a factor in [0.4, 1.6]
            per_frame.append(float(np.median(j[mid] / p[mid])))
        assert max(per_frame) - min(per_frame) < 0.03, per_frame
        factors.append(per_frame[0])
    assert max(factors) - min(factors) > 0.05  # each clip its own draw
    with pytest.raises(ValueError, match="keep 3 channels"):
        video.apply(base + [T.Grayscale(1)], path)


def test_a_served_video_loader_hands_each_consumer_the_clips_of_its_own(videos):
    import os

    import torch

    kw = dict(transforms=[video.Clip(4, step=2), nostall.Resize(40), video.RandomCrop(32)], batch_size=3,
              shuffle=True, seed=2)
    own = nostall.Loader(str(videos), return_indices=True, **kw)
    mine = {}
    for clips, labels, indices in own:
        mine.update({int(k): clips[i].clone() for i, k in enumerate(indices)})
    name = f"video-shared-{os.getpid()}"
    with nostall.serve(own.spec, name, chunk=3, block=False, verbose=False):
        attached = nostall.Loader.attach(name, 3, return_indices=True)
        seen = {}
        for b in attached:
            x, idx = (b["video"], b["__index__"]) if isinstance(b, dict) else (b[0], b[-1])
            for i, k in enumerate(idx.tolist()):
                assert k not in seen
                seen[k] = x[i].clone()
        attached.close()
    own.close()
    assert sorted(seen) == sorted(mine) == list(range(len(all_files(videos))))
    for k in mine:
        assert torch.equal(seen[k], mine[k])


@pytest.fixture(scope="module")
def videos_with_audio(tmp_path_factory):
    """Two classes, one file of each container, each with an audio track:
    AAC in MP4 and Matroska, Opus in WebM, MP3 in AVI; 44.1 and 48 kHz,
    mono and stereo."""
    root = tmp_path_factory.mktemp("videos_audio")
    return make_videos(root, per_class=2, classes=2, seconds=(2.0, 3.0), sizes=((320, 240),),
                       codecs=(("h264", "mp4"), ("vp9", "webm"), ("mpeg4", "avi"), ("h264", "mkv")),
                       gops=(12, 25), fps=(25,), audio=True)


def ffmpeg_audio(path, rate, channels):
    """FFmpeg's own decode and resample of the whole audio stream, (channels, n)."""
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-vn", "-ac", str(channels), "-ar", str(rate),
                          "-f", "f32le", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(out, np.float32).reshape(-1, channels).T


def test_a_clips_audio_is_ffmpegs_from_its_first_frame(videos_with_audio):
    """video.Audio: `seconds` of the file's audio from the clip's first frame,
    as FFmpeg resamples the whole stream: the same samples where the
    container's clock counts samples (MP4, AVI), within a millisecond where
    it counts milliseconds (Matroska, WebM: FFmpeg's own program places the
    stream's start to within a millisecond too); mono mixed down as FFmpeg
    mixes it; silence after the stream's end."""
    files = all_files(videos_with_audio)
    assert {video.info(p)["audio"]["codec"] for p in files} == {"aac", "opus", "mp3"}
    for path in files:
        exact = path.suffix in (".mp4", ".avi")
        for channels in (1, 2):
            ref = ffmpeg_audio(path, 16000, channels)
            # three clips at random starts, and one longer than the video (it starts at its first frame)
            for index, frames in ((0, 8), (1, 8), (2, 8), (0, 200)):
                clip, params = video.apply([video.Clip(frames, step=2), nostall.Resize((32, 32)),
                                            video.Audio(seconds=0.5, channels=channels)], path, seed=1, index=index)
                sound = params["audio"]
                assert sound.shape == (channels, 8000) and sound.dtype == np.float32
                at = int(np.floor(params["time"] * 16000 + 0.5))
                lags = [0] if exact else range(-24, 25)  # 1.5 ms
                errors = [np.abs(sound[:, 50:-50] - ref[:, at + lag + 50:at + lag + 7950]).max() for lag in lags]
                peak = np.abs(ref).max()
                assert min(errors) <= (1e-4 if exact else 0.1 * peak), (path.name, channels, min(errors), peak)
    path = next(p for p in files if p.suffix == ".mp4")
    tail, params = video.apply([video.Clip(4, sampling="uniform"), nostall.Resize((32, 32)),
                                video.Audio(seconds=30.0)], path)
    ends = ffmpeg_audio(path, 16000, 1).shape[1] - int(np.floor(params["time"] * 16000 + 0.5))
    assert np.abs(params["audio"][0, :ends - 10]).max() > 0.1 and not params["audio"][0, ends + 10:].any()


def test_video_loaders_hand_out_clips_their_audio_and_labels(videos_with_audio, videos, tmp_path):
    from nostall import datasets

    listed = [video.Clip(4, step=2, clips=2), nostall.Resize(40), video.RandomCrop(32),
              video.Audio(seconds=0.4, sample_rate=8000, channels=2)]
    files = all_files(videos_with_audio)
    loader = nostall.Loader(str(videos_with_audio), transforms=listed, batch_size=2, shuffle=True, seed=3,
                            return_indices=True)
    seen = 0
    for clips, sound, labels, indices in loader:
        assert tuple(clips.shape[1:]) == (2, 3, 4, 32, 32) and tuple(sound.shape[1:]) == (2, 2, 3200)
        for b, i in enumerate(indices.tolist()):
            want, params = video.apply(listed, files[i], seed=3, index=i)
            assert np.array_equal(clips[b].numpy(), want)
            assert np.array_equal(sound[b].numpy(), params["audio"])
            assert [c["time"] for c in params["clips"]] != [0, 0]
            seen += 1
    assert seen == len(files)
    shards = datasets.folder_to_shards(videos_with_audio, tmp_path / "shards", shards=1)  # (the folder's order)
    by_index = {}
    for b in nostall.Loader(shards, fields={"video": video.EXTENSIONS, "label": "cls"}, transforms=listed,
                            batch_size=2, shuffle=True, seed=3, return_indices=True):
        by_index.update({int(i): a for i, a in zip(b["__index__"], b["audio"].numpy())})
    assert len(by_index) == len(files)
    for i, sound in by_index.items():
        assert np.array_equal(sound, video.apply(listed, files[i], seed=3, index=i)[1]["audio"])
    # A video without audio: silence, not an error.
    silent = [video.Clip(4), nostall.Resize((32, 32)), video.Audio(seconds=0.2)]
    clips, sound, labels = next(iter(nostall.Loader(str(videos), transforms=silent, batch_size=2)))
    assert tuple(sound.shape) == (2, 1, 3200) and not sound.any()
    with pytest.raises(ValueError, match="seconds"):
        video.apply([video.Clip(4), nostall.Resize((32, 32)), video.Audio(seconds=0)], files[0])
    with pytest.raises(ValueError, match="clip_audio"):
        nostall.Loader(str(videos), transforms=[video.Clip(4), nostall.Resize((32, 32))],
                       fields={"video": video.EXTENSIONS, "audio": {"kind": "clip_audio"}, "label": "cls"})


def test_analyze_runs_the_step_a_video_folder_feeds(videos_with_audio):
    """nostall.analyze on a folder of videos calls the step as the loader's
    batches come: (clips, audio, labels) with video.Audio; decoding is what
    a clip costs, so with a trivial step the pipeline is what limits."""
    import time

    seen = []

    def step(clips, sound, labels):
        seen.append((tuple(clips.shape), tuple(sound.shape), tuple(labels.shape)))
        time.sleep(0.001)

    loader = nostall.Loader(str(videos_with_audio), batch_size=1, transforms=[
        video.Clip(8, step=2), nostall.Resize(48), video.RandomCrop(40), video.Audio(seconds=0.3)])
    a = nostall.analyze(loader, step, progress=False, step_seconds=0.3)
    assert set(seen) == {((1, 3, 8, 40, 40), (1, 1, 4800), (1,))}
    assert a.bottleneck == "prep", a.table()
