"""Video clips for action recognition, decoded by FFmpeg's libraries in the
loader's C++ threads.

A clip is ``num_frames`` frames ``step`` apart, its start drawn at random
(training) or central (``sampling="uniform"``, evaluation); the decoder
starts at the keyframe before the clip, stops after its last frame, and
skips the frames nothing else needs. Every frame of a clip gets the same
draw of the geometry; the batch is ``(B, C, T, H, W)`` (``layout="CTHW"``,
what torchvision's video models take) or ``(B, T, C, H, W)``.

```python
import nostall
from nostall import video

loader = nostall.Loader("videos/train", transforms=[
    video.Clip(num_frames=16, step=4), nostall.Resize(128), video.RandomCrop(112),
    nostall.RandomHorizontalFlip(),
    nostall.Normalize(mean=[0.43, 0.39, 0.38], std=[0.23, 0.22, 0.22])], batch_size=8)
for clips, labels in loader:   # (8, 3, 16, 112, 112) float32, (8,)
    ...
```

The list takes a :class:`Clip` first, then optionally ``nostall.Resize``
(short side, or (h, w)), one crop (:class:`RandomCrop`, ``nostall.CenterCrop``,
``nostall.RandomResizedCrop``), ``nostall.RandomHorizontalFlip`` and
``nostall.Normalize``, in that order, and :class:`Audio` (the clip's own
audio, a second tensor) anywhere after the Clip. ``Clip(clips=N)`` gives N
clips of each video per sample, decoded in one pass. A folder of class folders holding
``.mp4``, ``.mkv``, ``.webm``, ``.avi``, ``.mov`` (and ``.m4v``, ``.mpg``,
``.ts``, ``.flv``, ``.ogv``, ``.3gp``, ``.wmv``) files is read as a video
dataset when the list starts with a Clip; tar shards name the member:
``fields={"video": "mp4", "label": "cls"}``. docs/video.md says more.
"""

from __future__ import annotations

import json
import math

from . import _nostall
from ._transform import Transform

__all__ = ["VideoTransform", "Clip", "RandomCrop", "Audio", "EXTENSIONS", "backend", "info", "frames", "apply"]

# The members a video field takes by default.
EXTENSIONS = "mp4;mkv;webm;avi;mov;m4v;mpg;mpeg;ts;m2ts;flv;ogv;3gp;wmv"


class VideoTransform:
    """A transform only a video list takes (the others are nostall.transforms')."""

    def __init__(self, **args):
        self._args = args

    def to_dict(self) -> dict:
        return {"type": type(self).__name__, **self._args}

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._args.items())})"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is run by the loader's C++ threads; pass it in a loader's "
                        "transforms, or run a list on one file with nostall.video.apply")


class Clip(VideoTransform):
    """``num_frames`` frames, ``step`` frames apart (torchvision's
    ``frames_per_clip`` and ``step_between_frames``, torchcodec's
    ``num_indices_between_frames``); the start drawn uniformly over the
    video (``"random"``: torchcodec's ``clips_at_random_indices``) or the
    central clip (``"uniform"``). A video shorter than the clip repeats its
    last frame. ``layout``: ``"CTHW"`` or ``"TCHW"`` per sample.

    ``clips=N`` makes each sample N clips of its video, ``(N, C, T, H, W)``
    (a batch ``(B, N, C, T, H, W)``), decoded in one pass: each clip with
    its own start and its own draws of crop, flip and ops (the views of
    multi-view training); with ``sampling="uniform"`` the N starts are
    evenly spaced from the video's first possible start to its last
    (torchcodec's ``clips_at_regular_indices``, the multi-clip evaluation of
    PyTorchVideo). ``frame_rate``: the video resampled to that many frames a
    second first, as torchvision's ``VideoClips(frame_rate=...)`` does
    (position r is frame ``floor(r * fps / frame_rate)``); ``step`` then
    counts resampled frames.

    ``seconds_between_frames``: the frames by time instead, as torchcodec's
    ``clips_at_random_timestamps``: the frames shown at ``start + t *
    seconds_between_frames``, the start drawn uniformly in seconds over the
    video less the clip's duration (``"uniform"``: the central start, or N
    evenly spaced ones); exact on variable frame rates, where frames by index
    are not evenly spaced in time. Not with ``step`` or ``frame_rate``."""

    def __init__(self, num_frames: int = 16, step: int = 1, sampling: str = "random", layout: str = "CTHW",
                 clips: int | None = None, frame_rate: float | None = None,
                 seconds_between_frames: float | None = None):
        if sampling not in ("random", "uniform"):
            raise ValueError(f'sampling is "random" or "uniform", not {sampling!r}')
        if layout not in ("CTHW", "TCHW"):
            raise ValueError(f'layout is "CTHW" or "TCHW", not {layout!r}')
        args = dict(num_frames=int(num_frames), step=int(step), sampling=sampling, layout=layout)
        if clips is not None:
            args["clips"] = int(clips)
        if frame_rate is not None:
            args["frame_rate"] = float(frame_rate)
        if seconds_between_frames is not None:
            args["seconds_between_frames"] = float(seconds_between_frames)
        super().__init__(**args)


class RandomCrop(VideoTransform):
    """torchvision's ``RandomCrop(size)`` without padding: the same window
    of every frame of the clip."""

    def __init__(self, size):
        size = [int(size), int(size)] if isinstance(size, int) else [int(s) for s in size]
        super().__init__(size=size)


class Audio(VideoTransform):
    """The clip's own audio beside its frames: ``seconds`` of it from the
    presentation time of the clip's first frame, resampled to
    ``sample_rate`` (libswresample, on the grid a resample of the whole
    stream from its start gives), ``channels`` 1 (mixed down) or 2, float32
    ``(channels, samples)`` per clip (``(clips, channels, samples)`` with
    ``Clip(clips=N)``), ``samples = round(seconds * sample_rate)``; silence
    before and after the audio stream and for a file without one.

    A folder of videos then gives ``(clips, audio, labels)``; with fields
    the batch's ``"audio"`` (a ``{"kind": "clip_audio"}`` field, added when
    the fields have none). ``seconds`` is asked for, not derived: clips of
    videos at different frame rates last different times."""

    def __init__(self, seconds: float, sample_rate: int = 16000, channels: int = 1):
        super().__init__(sample_rate=int(sample_rate), seconds=float(seconds), channels=int(channels))


def clip_audio_shape(spec: dict):
    """A sample's clip audio shape, ``([clips,] channels, samples)``, from a
    resolved spec's video list (None without an Audio)."""
    items = spec.get("video") or []
    audio = next((t for t in items if isinstance(t, dict) and t.get("type") == "Audio"), None)
    if audio is None:
        return None
    clip = next((t for t in items if isinstance(t, dict) and t.get("type") == "Clip"), {})
    rate = int(audio.get("sample_rate", 16000))
    shape = (int(audio.get("channels", 1)), max(1, math.floor(float(audio["seconds"]) * rate + 0.5)))
    return ((int(clip["clips"]),) if clip.get("clips") is not None else ()) + shape


def _list_json(transforms) -> str:
    items = []
    for t in transforms:
        if not isinstance(t, (VideoTransform, Transform)):
            raise TypeError(f"a video list takes nostall.video and nostall.transforms objects, not {t!r}")
        items.append(t.to_dict())
    return json.dumps(items)


def _bytes(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    with open(source, "rb") as f:
        return f.read()


def backend() -> str:
    """The FFmpeg nostall decodes with (raises, saying what to install, when
    its libraries are missing)."""
    return _nostall.video_backend()


def info(source) -> dict:
    """A video's stream: ``{"frames", "fps", "width", "height", "duration",
    "codec", "keyframes", "audio"}`` (frames counted from its packets, not
    trusted from the header; ``"audio"``: ``{"codec", "sample_rate",
    "channels"}`` of its audio stream, or None). ``source`` is a path or the
    file's bytes."""
    return json.loads(_nostall.video_info(_bytes(source)))


def frames(source, indices):
    """The frames at ``indices`` (presentation order), RGB uint8, as a
    NumPy array (n, h, w, 3), and how many frames the decoder produced to
    get them: what the loader's decoder does for a clip."""
    return _nostall.video_frames(_bytes(source), sorted(int(i) for i in indices))


def apply(transforms, source, seed: int = 0, epoch: int = 0, index: int = 0, dtype=None):
    """One clip of ``source`` through a video list, as a loader with this
    seed makes item ``index`` in ``epoch``: a NumPy array of the sample's
    shape, and the draws (``{"frames", "box", "flip", "time", "decoded"}``,
    ``time`` the first frame's presentation time in seconds; with
    ``Clip(clips=N)``, ``"clips"`` lists each clip's ``{"frames", "box",
    "flip", "time"}`` and the top holds the first's; with an :class:`Audio`,
    ``"audio"`` is the clip's audio as the loader gives it)."""
    array, params, audio = _nostall.video_apply(_list_json(transforms), _bytes(source), int(seed), int(epoch),
                                                int(index), dtype in ("float32", float))
    params = json.loads(params)
    shape = clip_audio_shape({"video": [t.to_dict() for t in transforms]})
    if shape is not None:
        params["audio"] = audio.reshape(shape)
    return array, params
