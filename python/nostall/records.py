"""Samples as records: a batch of named fields, and Python hooks on them.

``Loader(..., fields={"image": "jpg;png", "label": "cls", "meta": "json"})``
yields a dict per batch: the image field as one tensor ``(B, C, H, W)`` made
by nostall's C++ threads, the label field as ``(B,)`` int64, and every other
field as a list of ``B`` values: ``json`` parsed (``json.loads``), ``text``
decoded as UTF-8, ``bytes`` as they are, ``None`` where an optional field's
member is absent. See docs/records.md.

A field's value in ``transforms`` may be a Python callable (or a list of
them): it is applied to each sample's value of that field after nostall's
own work, by a small pool of Python threads (``hook_threads``). A callable
that releases the GIL (a tokenizer written in Rust or C++, NumPy) runs in
parallel; a pure-Python one runs one at a time, on the training process's
time: its cost is in ``stats()["stages"]["hooks"]``. ``batch_transform``
takes the whole dict once per batch.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from .errors import DataError

MEDIA_KINDS = ("image", "audio", "video")


def media_field(fields) -> dict:
    """The field the batch's tensor is made from (an image or audio field);
    None when there is none (the core then says what is missing)."""
    return next((f for f in fields if f["kind"] in MEDIA_KINDS), None)


def _extensions(value, name):
    if isinstance(value, str):
        exts = [e.strip().lstrip(".").lower() for e in value.replace(",", ";").split(";")]
    elif isinstance(value, (list, tuple)):
        exts = [str(e).strip().lstrip(".").lower() for e in value]
    else:
        raise TypeError(f"fields[{name!r}]: the member extensions are a string such as "
                        f"\"jpg;png\" or a list of them, not {value!r}")
    exts = [e for e in exts if e]
    if not exts:
        raise ValueError(f"fields[{name!r}] names no member extension (e.g. \"jpg;png\", \"json\")")
    return exts


def field_specs(fields) -> list:
    """``fields`` as the spec's list: each ``{"name", "ext", "kind",
    "optional"}``. A value is extensions (``"jpg;png"``, a list) or a dict
    with ``ext`` and optionally ``kind`` (image, audio, label, bytes, json,
    text, targets) and ``optional`` (an absent member is None rather than an
    error). A kind not given is the core's to infer (from the extensions,
    then the field's name), as it infers it for a spec written by hand: the
    list comes back from it with every kind stated and every field checked."""
    if not isinstance(fields, dict):
        raise TypeError(f"fields must be a dict of field name to member extensions, "
                        f"e.g. {{\"image\": \"jpg;png\", \"label\": \"cls\"}}, not {fields!r}")
    out = []
    for name, value in fields.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"a field's name is a non-empty string, not {name!r}")
        entry = {"name": name, "optional": False}
        if isinstance(value, dict):
            unknown = set(value) - {"ext", "kind", "optional", "batch", "masks", "box_format",
                                    "max_annotations"}
            if unknown:
                raise ValueError(f"fields[{name!r}]: unknown keys {sorted(unknown)} (ext, kind, optional, "
                                 "batch; masks, box_format, max_annotations for targets)")
            if ({"masks", "box_format", "max_annotations"} & set(value)) and value.get("kind") != "targets":
                raise ValueError(f"fields[{name!r}]: masks, box_format and max_annotations are a "
                                 "targets field's (kind \"targets\")")
            if value.get("kind") == "clip_audio":  # the video's own audio: no member
                entry["ext"] = _extensions(value["ext"], name) if "ext" in value else []
            elif "ext" not in value:
                raise ValueError(f"fields[{name!r}] needs \"ext\": the member extensions")
            else:
                entry["ext"] = _extensions(value["ext"], name)
            entry.update({k: value[k] for k in ("kind", "optional", "batch", "max_annotations") if k in value})
        else:
            entry["ext"] = _extensions(value, name)
        if not isinstance(entry["optional"], bool):
            raise TypeError(f"fields[{name!r}]: optional must be True or False, not {entry['optional']!r}")
        out.append(entry)
    from . import _nostall

    return json.loads(_nostall.resolve_fields(json.dumps(out)))


def detection_options(fields) -> dict:
    """A targets field's masks and box_format (the spec's "detection"
    object carries them), from the fields as the user gave them."""
    for value in (fields or {}).values():
        if isinstance(value, dict) and value.get("kind") == "targets":
            return {"masks": value.get("masks", False), "box_format": value.get("box_format", "XYXY")}
    return {"masks": False, "box_format": "XYXY"}


def decode_targets(raw, torch=True) -> dict:
    """One sample's transformed annotations (the core's output form,
    docs/detection.md) as torchvision's detection models take them:
    ``boxes`` (N, 4) float32, ``labels`` (N,) int64, ``iscrowd`` (N,) int64
    and, when masks were asked, ``masks`` (N, H, W) uint8."""
    import numpy as np

    head = np.frombuffer(raw, dtype="<u4", count=4)
    if bytes(raw[:4]) != b"NSTO":
        raise ValueError("not nostall's transformed annotations")
    n, mh, mw = int(head[1]), int(head[2]), int(head[3])
    at = 16
    boxes = np.frombuffer(raw, dtype="<f4", count=4 * n, offset=at).reshape(n, 4)
    at += 16 * n
    labels = np.frombuffer(raw, dtype="<i8", count=n, offset=at)
    at += 8 * n
    crowd = np.frombuffer(raw, dtype=np.uint8, count=n, offset=at).astype(np.int64)
    at += (n + 7) // 8 * 8
    out = {"boxes": boxes.copy(), "labels": labels.copy(), "iscrowd": crowd}
    if mh and mw:
        per = (mh * mw + 63) // 64 * 8
        bits = np.frombuffer(raw, dtype=np.uint8, count=per * n, offset=at).reshape(n, per)
        out["masks"] = np.unpackbits(bits, axis=1, count=mh * mw).reshape(n, mh, mw)
    if torch:
        import torch as _torch

        out = {k: _torch.from_numpy(v) for k, v in out.items()}
    return out


def pad_targets(samples, torch=True) -> dict:
    """A batch's targets as padded tensors: ``boxes`` (B, M, 4), ``labels``
    (B, M) (-1 past a sample's count), ``iscrowd`` (B, M), ``counts`` (B,),
    ``masks`` (B, M, H, W) when asked (images of many sizes: each sample's at
    the top left, zeros around), and ``image_id`` (B,) and ``orig_size``
    (B, 2) where the dataset gives them; M is the batch's largest count."""
    import numpy as np

    b = len(samples)
    m = max((len(s["labels"]) for s in samples), default=0)
    out = {"boxes": np.zeros((b, m, 4), np.float32), "labels": np.full((b, m), -1, np.int64),
           "iscrowd": np.zeros((b, m), np.int64), "counts": np.zeros(b, np.int64)}
    masks = [s.get("masks") for s in samples]
    if b and masks[0] is not None:
        h, w = max(x.shape[1] for x in masks), max(x.shape[2] for x in masks)
        out["masks"] = np.zeros((b, m, h, w), np.uint8)
    if b and "image_id" in samples[0]:
        out["image_id"] = np.stack([s["image_id"] for s in samples])
        out["orig_size"] = np.stack([s["orig_size"] for s in samples])
    for i, s in enumerate(samples):
        n = len(s["labels"])
        out["counts"][i] = n
        out["boxes"][i, :n] = np.asarray(s["boxes"])
        out["labels"][i, :n] = np.asarray(s["labels"])
        out["iscrowd"][i, :n] = np.asarray(s["iscrowd"])
        if "masks" in out:
            mask = np.asarray(s["masks"])
            out["masks"][i, :n, :mask.shape[1], :mask.shape[2]] = mask
    if torch:
        import torch as _torch

        out = {k: _torch.from_numpy(v) for k, v in out.items()}
    return out


def _decode(kind, raw):
    if raw is None:
        return None
    if kind == "json":
        return json.loads(raw)
    if kind == "text":
        return raw.decode("utf-8")
    return raw


class Records:
    """Turns the core's batches into dicts of fields, and runs the hooks."""

    def __init__(self, fields, hooks, batch_transform, hook_threads, on_error, key_of,
                 return_indices, torch=True, image_meta=None, clip_audio_shape=None):
        self.fields = fields
        self.clip_audio_shape = clip_audio_shape  # a sample's clip audio: ([clips,] channels, samples)
        self.torch = torch
        self.image = media_field(fields)["name"]
        self.label = next((f["name"] for f in fields if f["kind"] == "label"), None)
        self.extra = [f for f in fields if f["kind"] not in MEDIA_KINDS + ("label",)]
        self.hooks = hooks  # field name -> list of callables
        self.batch_transform = batch_transform
        self.on_error = on_error
        self.key_of = key_of
        self.return_indices = return_indices
        self._pool = None
        self._threads = hook_threads
        self.hook_items = 0
        self.hook_batches = 0
        self.hook_ns = 0
        self.decode_ns = 0
        self.skipped = 0  # samples dropped here (on_error="skip")
        # Each item's image id and (height, width), read once when targets
        # first need them (a COCO dataset's; None: the source has none).
        self._image_meta, self._meta = image_meta, False

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _map(self, fn, values):
        if self._threads <= 1 or len(values) < 2:
            return [fn(v) for v in values]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="nostall-hook")
        return list(self._pool.map(fn, values))

    def _bad(self, pos, indices, name, error):
        key = self.key_of(int(indices[pos]))
        return DataError(f"{key}: field {name!r}: {type(error).__name__}: {error}", key,
                         "hooks" if name in self.hooks or name == "batch" else "decode")

    def batch(self, images, labels, indices, raw_fields, sizes=None):
        """The dict of one batch (samples whose fields cannot be decoded
        dropped under on_error="skip", else a DataError naming the sample)."""
        t0 = time.perf_counter_ns()
        values, drop = {}, set()
        for f, raw in zip(self.extra, raw_fields or [[] for _ in self.extra]):
            if f["kind"] == "targets":
                samples = [decode_targets(r, torch=False) for r in raw]
                self._add_image_meta(samples, indices)
                if f.get("batch") == "padded":
                    values[f["name"]] = pad_targets(samples, torch=self.torch)
                elif self.torch:
                    import torch

                    values[f["name"]] = [{k: torch.from_numpy(v) for k, v in s.items()} for s in samples]
                else:
                    values[f["name"]] = samples
                continue
            if f.get("batch") == "padded":
                values[f["name"]] = self._padded(raw)
                continue
            if f["kind"] == "clip_audio":  # float32 (clips?, channels, samples) per sample, stacked
                values[f["name"]] = self._stacked_audio(raw)
                continue
            out = []
            for pos, r in enumerate(raw):
                try:
                    out.append(_decode(f["kind"], r))
                except (ValueError, UnicodeDecodeError, RecursionError) as e:
                    # (json.loads of a value nested thousands deep: RecursionError;
                    # of an integer of 5,000 digits: ValueError)
                    if isinstance(e, RecursionError):
                        e = ValueError("JSON nested too deep to parse")
                    if self.on_error != "skip":
                        raise self._bad(pos, indices, f["name"], e) from None
                    drop.add(pos)
                    out.append(None)
            values[f["name"]] = out
        t1 = time.perf_counter_ns()
        self.decode_ns += t1 - t0
        batch = {self.image: images}
        if sizes is not None:  # samples of many sizes, padded: each one's own
            batch[self.image + ("_lengths" if sizes.ndim == 1 else "_sizes")] = sizes
        if self.label is not None:
            batch[self.label] = labels
        batch.update(values)
        if sizes is not None and self.image in self.hooks:
            raise ValueError(
                f"the samples of {self.image!r} are of many sizes, padded per batch: a per-sample "
                "hook on them would see the padding; use batch_transform (it gets the batch with "
                f"{self.image + '_sizes'!r}) or nostall's own transforms")
        if self.hooks:
            for name, fns in self.hooks.items():
                if name == self.image:
                    samples = list(batch[name])
                else:
                    samples = batch[name]
                for fn in fns:
                    samples = self._apply(fn, samples, name, indices, drop)
                batch[name] = _stack_like(samples, batch[name]) if name == self.image else samples
                self.hook_items += len(samples)
        if drop:
            self.skipped += len(drop)  # counted with the core's skips in stats()
            batch, indices = _without(batch, indices, drop)
        for name, fns in self.hooks.items():  # a hook that batches its field (a tokenizer)
            collate = getattr(fns[-1], "collate", None)
            if collate is not None and name != self.image:
                batch[name] = collate(batch[name])
        if self.return_indices:
            batch["__index__"] = indices
        if self.batch_transform is not None:
            batch = self.batch_transform(batch)
            self.hook_batches += 1
        self.hook_ns += time.perf_counter_ns() - t1
        return batch

    def _add_image_meta(self, samples, indices):
        """torchvision's and DETR's target keys: ``image_id`` (the COCO id)
        and ``orig_size`` ((height, width) before the transforms)."""
        import numpy as np

        if self._meta is False:
            self._meta = self._image_meta() if self._image_meta is not None else None
        if self._meta is None:
            return
        ids, sizes = self._meta
        for s, i in zip(samples, np.asarray(indices).tolist()):
            if 0 <= i < len(ids):  # (a buffered epoch's keys name shards: none there)
                s["image_id"] = np.array(ids[i], dtype=np.int64)
                s["orig_size"] = sizes[i].copy()

    def _stacked_audio(self, raw):
        import numpy as np

        shape = (len(raw),) + tuple(self.clip_audio_shape or (-1,))
        out = np.stack([np.frombuffer(r, dtype=np.float32) for r in raw]).reshape(shape)
        if self.torch:
            import torch

            return torch.from_numpy(out)
        return out

    def _padded(self, raw):
        """A padded field: (B, longest) uint8 and (B,) int64 lengths (-1: absent)."""
        import numpy as np

        lengths = np.array([-1 if r is None else len(r) for r in raw], dtype=np.int64)
        out = np.zeros((len(raw), max(0, int(lengths.max(initial=0)))), dtype=np.uint8)
        for pos, r in enumerate(raw):
            if r:
                out[pos, :len(r)] = np.frombuffer(r, dtype=np.uint8)
        if self.torch:
            import torch

            return torch.from_numpy(out), torch.from_numpy(lengths)
        return out, lengths

    def _apply(self, fn, samples, name, indices, drop):
        def one(pos_value):
            pos, value = pos_value
            if pos in drop:
                return value
            try:
                return fn(value)
            except Exception as e:  # the user's code: name the sample, keep the cause
                if self.on_error == "skip":
                    drop.add(pos)
                    return value
                raise self._bad(pos, indices, name, e) from e
        return self._map(one, list(enumerate(samples)))

    def stats(self):
        return {"items": self.hook_items, "batches": self.hook_batches,
                "work_s": self.hook_ns / 1e9, "decode_s": self.decode_ns / 1e9,
                "threads": self._threads}


def _stack_like(samples, original):
    """Per-sample results of an image hook as one batch: stacked when they
    are tensors (or arrays) of one shape, else the list."""
    try:
        import torch

        if all(isinstance(s, torch.Tensor) for s in samples) and \
                len({tuple(s.shape) for s in samples}) == 1:
            return torch.stack(samples) if samples else original
    except ImportError:
        pass
    import numpy as np

    if all(isinstance(s, np.ndarray) for s in samples) and len({s.shape for s in samples}) == 1:
        return np.stack(samples) if samples else original
    return samples


def _without(batch, indices, drop):
    """`batch` without the samples at the positions in the set `drop`."""
    keep = [p for p in range(len(indices)) if p not in drop]
    out = {}
    for name, v in batch.items():
        if isinstance(v, list):
            out[name] = [v[p] for p in keep]
        elif isinstance(v, dict):  # padded targets: a dict of tensors
            out[name] = {k: x[keep] for k, x in v.items()}
        elif isinstance(v, tuple):  # a padded field: (values, lengths)
            out[name] = tuple(x[keep] for x in v)
        else:
            out[name] = v[keep]  # torch and NumPy both index by a list
    return out, indices[keep]


def split_transforms(transforms, fields):
    """``transforms`` given as a dict per field: the image field's list (for
    nostall's C++ threads) and every callable hook, by field."""
    media = media_field(fields)
    image = media["name"] if media is not None else None
    names = {f["name"] for f in fields}
    native, hooks = [], {}
    for name, value in transforms.items():
        if name not in names:
            raise ValueError(f"transforms[{name!r}]: no such field (fields: {sorted(names)})")
        items = value if isinstance(value, (list, tuple)) else [value]
        fns = []
        for t in items:
            if callable(t) and not _is_native(t):
                fns.append(t)
            elif name == image and not fns:
                native.append(t)
            elif name == image:
                raise TypeError(f"transforms[{name!r}]: nostall's transforms come before the "
                                f"Python callables (they run first, in C++): {t!r}")
            else:
                raise TypeError(f"transforms[{name!r}]: a field other than the image takes "
                                f"Python callables, not {t!r}")
        if fns:
            hooks[name] = fns
    return native, hooks


def _is_native(t):
    from .audio import AudioTransform
    from .transforms import Transform

    return isinstance(t, (Transform, AudioTransform))
