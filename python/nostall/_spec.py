"""What the Loader's constructor makes of its arguments: the JSON spec C++
reads (LoaderSpec), and the Python hooks that run on its batches. The spec's
values go to C++ as given; what C++ never sees (Python callables, torch
dtypes, torchvision's transforms, the DataLoader's arguments) is decided
here."""

from __future__ import annotations

import json
import operator
import os
import warnings

from . import _nostall, _ranks, _torchvision
from .audio import AudioTransform
from .cache import Cache
from .detection import Coco
from .records import detection_options, field_specs, media_field, split_transforms
from .transforms import Normalize, Transform, _flatten


def _sharding(rank, world_size):
    """The rank and world size a loader uses: the arguments given, the rest
    from torch.distributed or the launcher's environment (nostall/_ranks.py),
    else 0 and 1; and where they came from."""
    return _ranks.resolve(rank, world_size)


def _dtype_name(dtype):
    """A dtype as the spec names it: "float32" from torch.float32,
    numpy.float32, numpy.dtype("float32") or the string itself."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    if type(dtype).__module__ == "torch":  # torch.float32
        return str(dtype).replace("torch.", "")
    if type(dtype).__module__.startswith("numpy"):  # numpy.dtype("float32")
        return dtype.name
    if isinstance(dtype, type) and dtype.__module__ == "numpy":  # numpy.float32
        return dtype.__name__
    raise TypeError(f'dtype must be "uint8" or "float32" (a string, torch or NumPy dtype), '
                    f"not {dtype!r}")


_NORMALIZE_WARNED = [False]


def _check_normalize_units(transforms):
    """Warns once when Normalize's mean is in 0-255 units: nostall's, as
    torchvision's after ToTensor, is in [0, 1] units (x / 255 - mean)."""
    for t in transforms:
        if isinstance(t, Normalize) and not _NORMALIZE_WARNED[0]:
            mean = list(t.mean) if isinstance(t.mean, (list, tuple)) else [t.mean]
            if any(abs(m) > 1 for m in mean):
                _NORMALIZE_WARNED[0] = True
                warnings.warn(
                    f"Normalize(mean={mean}, ...): a mean above 1 looks like 0-255 units, but "
                    "nostall's Normalize, as torchvision's after ToTensor, computes "
                    "(x / 255 - mean) / std: give it in [0, 1] units (e.g. "
                    "nostall.IMAGENET_MEAN, nostall.IMAGENET_STD); the batches are otherwise "
                    "far from zero mean", UserWarning, stacklevel=6)  # Loader()'s caller


def _plain(value):
    """A numpy scalar as the Python value it holds (JSON has no numpy types);
    anything else as it is, for the spec's own check to accept or name."""
    return value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value


def _integer(name, value):
    """An integer argument (None: 0, the default), never silently truncated:
    2.5 or "4" is an error naming the argument, as the spec's JSON is."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {value!r}") from None


# The Loader's keyword arguments that became a source driver's options
# (the old flat spec fields of the same names; docs/spec.md).
_OLD_SOURCE_KWARGS = {
    "throttle_bandwidth": "throttle_bandwidth", "throttle_latency_ms": "throttle_latency_ms",
    "drop_page_cache": "drop_page_cache", "s3_endpoint": "endpoint", "s3_region": "region",
    "s3_profile": "profile", "s3_addressing": "addressing", "s3_unsigned": "unsigned",
}


def spec_uri(spec: dict) -> str:
    """The dataset path of a spec, whether ``source`` is the path or
    ``{"uri": ..., "driver": ..., "options": ...}``."""
    source = spec.get("source")
    return source.get("uri", "") if isinstance(source, dict) else source


def read_spec(spec, stacklevel: int = 3) -> dict:
    """A loader spec as a dict, from a dict, its JSON text, a path to a JSON
    file or a Loader: what from_spec, serve and analyze take. A spec of the
    old flat form (``s3_endpoint``, ``throttle_bandwidth``, ``cache_name``...
    at the top level) comes back in the new one, with a FutureWarning."""
    if isinstance(getattr(type(spec), "spec", None), property):  # a Loader (or a loader like it)
        return spec.spec
    if isinstance(spec, dict):
        return _upgraded(dict(spec), stacklevel + 1)
    if isinstance(spec, os.PathLike) or (isinstance(spec, str)
                                         and not spec.lstrip().startswith("{")):
        with open(spec) as f:  # a path; FileNotFoundError names it
            text, where = f.read(), os.fspath(spec)
    elif isinstance(spec, str):
        text, where = spec, "the loader spec"
    else:
        raise TypeError("spec must be a dict, JSON text, a path to a JSON file or a Loader, "
                        f"not {type(spec).__name__}")
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not a JSON loader spec: {e}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: a loader spec is a JSON object, not {type(spec).__name__}")
    return _upgraded(spec, stacklevel + 1)


def _upgraded(spec: dict, stacklevel: int) -> dict:
    """`spec` with the old flat storage fields in the new form (C++ rewrites
    them: LoaderSpec::UpgradeJson), each rewrite warned."""
    if not any(k in spec for k in (*_OLD_SOURCE_KWARGS, "cache_name", "cache_bytes",
                                   "cache_policy", "cache_servers", "cache_local_bytes")):
        return spec
    try:
        text = json.dumps(spec)
    except (TypeError, ValueError):
        return spec  # not JSON: C++ says what is wrong with it
    upgraded, notes = _nostall.upgrade_spec(text)
    for note in notes:
        warnings.warn(note, FutureWarning, stacklevel=stacklevel)
    return json.loads(upgraded)


def _source_spec(source, options, old):
    """The spec's "source": the path alone, or {"uri", "driver", "options"}
    with `options` (source_options=) and the deprecated keyword arguments in
    `old` merged into the driver's options (C++ checks them)."""
    if isinstance(source, dict):
        source = dict(source)
    else:
        source = {"uri": os.fspath(source)}
    merged = dict(source.get("options") or {})
    if options is not None:
        if not isinstance(options, dict):
            raise TypeError(f"source_options must be a dict of the driver's options, not {options!r}")
        for key, value in options.items():
            if key in merged and merged[key] != value:
                raise ValueError(f"source option {key!r} is given twice: in source and in "
                                 "source_options")
            merged[key] = value
    if old:
        warnings.warn("Loader(" + ", ".join(f"{k}=" for k in old) + ") is deprecated: these are "
                      "the source driver's options now, source_options={" +
                      ", ".join(f"{_OLD_SOURCE_KWARGS[k]!r}: ..." for k in old) + "} (docs/spec.md)",
                      FutureWarning, stacklevel=4)  # Loader()'s caller
        for key, value in old.items():
            name = _OLD_SOURCE_KWARGS[key]
            if name in merged:
                raise ValueError(f"{key}= and source_options {name!r} both given: give one")
            merged[name] = value
    if merged:
        source["options"] = merged
    return source if len(source) > 1 else source["uri"]


def _cache_tiers(cache) -> list:
    """The spec's "cache" from a nostall.Cache, or tiers as a spec writes them."""
    if cache is None:
        return []
    if isinstance(cache, Cache):
        return cache.tiers()
    if isinstance(cache, dict):
        return [cache]
    if isinstance(cache, (list, tuple)):
        return list(cache)
    raise TypeError(f"cache must be a nostall.Cache or a list of cache tiers, not {cache!r}")


# torch DataLoader's arguments that nostall has no argument of that name for:
# what to write instead (docs/from_torch.md).
_DATALOADER_ARGS = {
    "num_workers": "nostall has no worker processes: C++ threads decode and augment; "
                   "num_threads= sets how many (default: tuned while it runs)",
    "persistent_workers": "the loader's threads live as long as it does: nothing to set",
    "prefetch_factor": "prefetch= is the number of batches prepared ahead (default: tuned)",
    "collate_fn": "samples are written straight into the batch tensor: batch_transform= runs a "
                  "callable on each batch, fields= gives records (docs/records.md)",
    "sampler": "the loader draws its own order from (seed, epoch) and shards itself by rank and "
               "world_size; subset= takes a fixed random subset",
    "batch_sampler": "the loader batches itself: batch_size=, drop_last=",
    "generator": "seed= fixes the order and every augmentation",
    "worker_init_fn": "there are no worker processes to initialise",
    "multiprocessing_context": "there are no worker processes",
    "pin_memory_device": "pin_memory=True pins for CUDA, the only device it pins for",
    "timeout": "a read that hangs is an error naming the file after the storage's own timeout",
    "in_order": "batches always come in the epoch's order",
    "dataset": "the data is the first argument: a folder, shards, s3:// or "
               "nostall.datasets.Coco(...)",
}


def _batch_pair(spec: dict):
    """The fields a loader's batches are, as a tuple, where a dataset object
    chose them (nostall.datasets.Coco: images and targets) or a folder of
    class folders holds videos (clips and labels; clips, their audio and
    labels with video.Audio), else None (a tuple of images and labels
    without fields; a dict with them). Read from the spec, so that
    from_spec, analyze and a served loader's consumers give the batches the
    loader they copy gives."""
    source = spec.get("source")
    fields = spec.get("fields") or []
    driver = source.get("driver", "") if isinstance(source, dict) else ""
    names = [f.get("name") for f in fields]
    if driver == "coco" and names == ["image", "targets"]:
        return ("image", "targets")
    kinds = [f.get("kind") for f in fields]
    if driver.endswith("image-folder") and kinds in (["video", "label"], ["video", "clip_audio", "label"]):
        return tuple(names)
    return None


def _check_hook_args(batch_transform, hook_threads):
    if batch_transform is not None and not callable(batch_transform):
        raise TypeError(f"batch_transform must be a callable, not {batch_transform!r}")
    if isinstance(hook_threads, bool) or not isinstance(hook_threads, int) or hook_threads < 1:
        raise ValueError(f"hook_threads must be an integer >= 1, not {hook_threads!r}")


def _consumer_hooks(spec: dict, transforms, batch_transform, hook_threads):
    """The Python hooks a consumer of a served `spec` runs (Loader.attach)."""
    _check_hook_args(batch_transform, hook_threads)
    hooks = {}
    if transforms is not None:
        fields = spec.get("fields") or [{"name": "image", "kind": "image"},
                                        {"name": "label", "kind": "label"}]
        if not isinstance(transforms, dict):
            media = media_field(fields)
            transforms = {media["name"] if media is not None else "image": transforms}
        native, hooks = split_transforms(transforms, fields)
        if native:
            raise TypeError(f"attach(transforms=...) takes Python callables; nostall's transforms "
                            f"({native[0]!r}) are the served spec's: the producer runs them")
    return hooks, batch_transform, hook_threads


def _refuse_dataloader_args(given: dict):
    """A TypeError naming nostall's way for each DataLoader argument given."""
    for name in given:
        why = _DATALOADER_ARGS.get(name)
        if why is None:
            raise TypeError(f"Loader() got an unexpected keyword argument {name!r}")
        raise TypeError(f"Loader({name}=...) is torch DataLoader's: {why} (docs/from_torch.md "
                        "maps every DataLoader argument)")


# The Loader's deprecated keyword arguments, in the order they are named.
_OLD_KWARGS = ("throttle_bandwidth", "throttle_latency_ms", "drop_page_cache", "s3_endpoint", "s3_region",
               "s3_profile", "s3_addressing", "s3_unsigned")


def build_spec(a: dict):
    """The spec and the per-field Python hooks of Loader(**a), with where
    the rank came from: (spec, hooks, ranks_from)."""
    if a["dataloader_args"]:
        _refuse_dataloader_args(a["dataloader_args"])
    old = {name: a[name] for name in _OLD_KWARGS if a[name] is not None}
    source, fields = a["source"], a["fields"]
    if isinstance(source, Coco):  # batches (images, targets): _batch_pair
        if fields is not None:
            raise ValueError("a Coco dataset names its fields itself (image and targets); "
                             "give masks= and box_format= to nostall.datasets.Coco")
        fields = source.fields()
        source = source.source()
    source = _source_spec(source, a["source_options"], old)
    # The spec's fields go to C++ as given (numbers and flags as plain
    # Python values): LoaderSpec checks and defaults them, and its error
    # is the one raised. Only what C++ never sees is checked here.
    if a["output"] not in ("torch", "numpy"):
        raise ValueError(f'output must be "torch" or "numpy", not {a["output"]!r}')
    rank, world_size, ranks_from = _sharding(a["rank"], a["world_size"])
    if fields is None and _is_video_list(a["transforms"]):  # a Clip: the folder's items are videos
        from .video import EXTENSIONS

        fields = {"video": EXTENSIONS, "label": "cls"}
        if _has_clip_audio(a["transforms"]):  # video.Audio: the clip's audio beside it
            fields = {"video": EXTENSIONS, "audio": {"kind": "clip_audio"}, "label": "cls"}
    elif fields is not None and _has_clip_audio(a["transforms"]):
        fields = _with_clip_audio(fields)
    field_list = field_specs(fields) if fields is not None else None
    routed = _route_transforms(a["transforms"], fields, field_list, _dtype_name(a["dtype"]))
    spec = _spec_fields(a, source, rank, world_size, routed)
    if field_list is not None:
        spec["fields"] = field_list
    if routed["detection"] is not None:
        spec["detection"] = routed["detection"]
    if a["max_field_bytes"] is not None:
        spec["max_field_bytes"] = _integer("max_field_bytes", a["max_field_bytes"])
    return spec, routed["hooks"], ranks_from


def _has_clip_audio(transforms) -> bool:
    from .video import Audio

    return _is_video_list(transforms) and any(isinstance(t, Audio) for t in transforms)


def _with_clip_audio(fields):
    """The fields with a clip_audio field for video.Audio to write (named
    "audio", or "clip_audio" where "audio" is taken), unless they have one."""
    listed = fields if isinstance(fields, (list, tuple)) else None
    items = [(f.get("name"), f) for f in listed] if listed is not None else list(dict(fields).items())
    if any(isinstance(v, dict) and v.get("kind") == "clip_audio" for _, v in items):
        return fields
    name = "audio" if "audio" not in {n for n, _ in items} else "clip_audio"
    if listed is not None:
        return list(listed) + [{"name": name, "kind": "clip_audio"}]
    return {**dict(fields), name: {"kind": "clip_audio"}}


def _is_video_list(transforms) -> bool:
    from .video import Clip

    try:
        return isinstance(transforms, (list, tuple)) and any(isinstance(t, Clip) for t in transforms)
    except TypeError:
        return False


def _shuffle_window(value):
    """The spec's "shuffle_window": 0 (off), a count of samples, or "auto"."""
    if value is None:
        return 0
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'shuffle_window must be None, "auto" or a count of samples >= 0, not {value!r}')
    return value


def _bucketing(value):
    """The spec's "bucketing": None, "aspect_ratio", or its dict."""
    if value is None or isinstance(value, dict):
        return value
    if value == "aspect_ratio":
        return {"by": "aspect_ratio"}
    raise ValueError(f'bucketing must be None, "aspect_ratio" or {{"by": "aspect_ratio", "group_factor": 3}}, '
                     f"not {value!r}")


def _spec_fields(a: dict, source, rank, world_size, routed: dict) -> dict:
    """The spec's fields from the constructor's arguments `a`, with the
    transforms `_route_transforms` gave each part of the spec."""
    prefetch, autotune, shuffle_buffer = a["prefetch"], a["autotune"], a["shuffle_buffer"]
    spec = {
        "source": source,
        "batch_size": _integer("batch_size", a["batch_size"]),
        "shuffle": _plain(a["shuffle"]),
        "seed": _integer("seed", a["seed"]),
        "rank": _integer("rank", rank),
        "world_size": _integer("world_size", world_size),
        "drop_last": _plain(a["drop_last"]),
        "pad_ranks": _plain(a["pad_ranks"]),
        "transforms": routed["transforms"],
        "layout": a["layout"],
        "mode": a["mode"],
        "max_pixels": _integer("max_pixels", a["max_pixels"]),
        "num_threads": _integer("num_threads", a["num_threads"]),
        "reads_in_flight": _integer("reads_in_flight", a["reads_in_flight"]),
        "prefetch": -1 if prefetch is None else _integer("prefetch", prefetch),
        "autotune": "auto" if autotune is None else _plain(autotune),
        "on_error": a["on_error"],
        "use_index_cache": _plain(a["index_cache"]),
        "index_beside": _plain(a["index_beside"]),
        "first_epoch": _plain(a["first_epoch"]),
        "shuffle_buffer": 0 if shuffle_buffer is None else _integer("shuffle_buffer", shuffle_buffer),
        "shard_shuffle": _plain(a["shard_shuffle"]),
        "shuffle_window": _shuffle_window(a["shuffle_window"]),
        "bucketing": _bucketing(a["bucketing"]),
        "dct_scaling": _plain(a["dct_scaling"]),
        "cache": _cache_tiers(a["cache"]),
        "subset": _integer("subset", a["subset"]),
    }
    if routed["dtype"] is not None:  # else C++'s default: float32 after Normalize, uint8 otherwise
        spec["dtype"] = routed["dtype"]
    return spec


def _route_transforms(transforms, fields, field_list, dtype) -> dict:
    """The spec's one "transforms" list, {"transforms", "hooks" (Python
    callables, per field), "dtype", "detection" (a targets field's
    box_format and masks, or None)}. The core decides which part of the
    sample the list runs on (the image, an audio clip, an image and its
    boxes: spec.cc RouteTransforms); here only the Python objects are
    checked, each against the field that will run it."""
    hooks = {}
    if isinstance(transforms, dict):
        if field_list is None:
            raise ValueError("transforms as a dict gives each field its own; name the "
                             "fields with fields=, e.g. {\"image\": \"jpg;png\", "
                             "\"label\": \"cls\"}")
        transforms, hooks = split_transforms(transforms, field_list)
    elif isinstance(transforms, Transform) or callable(transforms):
        transforms = [transforms]
    try:
        transforms = list(transforms)
    except TypeError:
        raise TypeError(f"transforms must be a list of nostall transforms, not {transforms!r}"
                        ) from None
    transforms = _torchvision.resolve(transforms)  # torchvision's: nostall's namesakes
    media = media_field(field_list) if field_list is not None else None
    # Python callables after nostall's transforms: hooks on each image.
    from .video import VideoTransform

    while (transforms and callable(transforms[-1])
           and not isinstance(transforms[-1], (Transform, AudioTransform, VideoTransform))):
        hooks.setdefault("image" if media is None else media["name"], []).insert(0, transforms.pop())
    out = {"hooks": hooks, "detection": None, "dtype": dtype}
    if field_list is not None and any(f["kind"] == "targets" for f in field_list):
        bad = [t for t in transforms if not isinstance(t, Transform)]
        if bad:
            raise TypeError(f"a detection loader takes nostall.transforms, not {bad[0]!r}")
        transforms, _ = _flatten(transforms)
        out["detection"] = detection_options(fields)
    elif media is not None and media["kind"] == "video":
        from .video import VideoTransform

        bad = [t for t in transforms if not isinstance(t, (VideoTransform, Transform))]
        if bad:
            raise TypeError(f"the video field takes nostall.video and nostall.transforms objects, not {bad[0]!r}")
    elif media is not None and media["kind"] == "audio":
        bad = [t for t in transforms if not isinstance(t, AudioTransform)]
        if bad:
            raise TypeError(f"the audio field takes nostall.audio transforms, not {bad[0]!r}")
        if dtype not in (None, "float32"):
            raise ValueError(f"audio batches are float32, not dtype={dtype!r}")
    else:
        transforms, out["dtype"] = _image_transforms(transforms, dtype)
    out["transforms"] = [t.to_dict() for t in transforms]
    return out


def _image_transforms(transforms, dtype):
    """The image list, flattened (Compose, RandomApply's own), and the dtype
    it asks for (ToTensor: float32, PILToTensor: uint8) against `dtype`."""
    if any(isinstance(t, AudioTransform) for t in transforms):
        raise TypeError("nostall.audio transforms need an audio field: fields={\"audio\": "
                        "\"flac;wav;mp3;ogg;opus\", \"label\": \"cls\"}")
    for t in transforms:
        if not isinstance(t, Transform):
            raise TypeError(f"transforms must be nostall.transforms objects, got {t!r}"
                            + (" (torchvision's " + type(t).__name__ + " has no nostall "
                               "equivalent, and a Python callable runs only after nostall's "
                               "transforms: move it to the end, or drop it)"
                               if _torchvision.is_torchvision(t) else
                               " (Python callables go after nostall's transforms, or per "
                               "field in a dict: docs/records.md)" if callable(t) else ""))
    transforms, asked_dtype = _flatten(transforms)
    _check_normalize_units(transforms)
    if asked_dtype is not None:
        if dtype is not None and dtype != asked_dtype:
            raise ValueError(f"dtype={dtype!r} contradicts the transforms' "
                             f"{'ToTensor' if asked_dtype == 'float32' else 'PILToTensor'}")
        if asked_dtype == "uint8" and any(isinstance(t, Normalize) for t in transforms):
            raise ValueError("PILToTensor (uint8) with Normalize (float32): drop one")
        dtype = asked_dtype
    return transforms, dtype
