"""The base of nostall's transforms; the classes themselves are generated
(``_ops.py``, from the C++ schemas), and re-exported by ``nostall.transforms``."""

from __future__ import annotations

import json
import math


class Transform:
    """Base of nostall's transforms: a declaration the loader's C++ threads run.

    ``to_dict()`` is the transform as it appears in a loader spec (docs/spec.md).
    """

    def to_dict(self) -> dict:  # pragma: no cover - every subclass overrides it
        """The transform as a loader spec writes it: ``{"type": NAME, argument: value, ...}``."""
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        """Raises TypeError: a transform is not applied to one tensor or image at a time."""
        raise TypeError(
            f"nostall.{type(self).__name__} is not applied to tensors or images one by one: the "
            "loader's C++ threads run it on every sample. Pass it in "
            "nostall.Loader(..., transforms=[...]); nostall.transforms.sample_params(transforms, "
            "width, height, index=...) shows what it draws for an item")

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "type")
        return f"{type(self).__name__}({fields})"


# PIL's resampling filters, which torchvision's interpolation also takes.
_PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _plain(key, v):
    """JSON-ready values: torchvision's enums by value, tuples as lists, PIL's
    filters by name."""
    if hasattr(v, "value") and isinstance(v.value, str):  # torchvision's enums
        return v.value.lower()
    if key == "interpolation" and isinstance(v, int) and not isinstance(v, bool):
        return _PIL_FILTERS.get(int(v), v)
    if isinstance(v, (tuple, list)):
        return [_plain(None, x) for x in v]
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return v.item()
    return v


def _finite(v):
    """False for a NaN or an infinity anywhere in an argument (JSON has neither)."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_finite(x) for x in v)
    return True


class _Op(Transform):
    """A transform of the C++ registry: its arguments are checked there, by its
    schema (src/ops/schema.h), the one place they are; it holds them resolved,
    every default spelled out, as a loader spec writes them."""

    def __init__(self, **args):
        from . import _nostall

        name = type(self).__name__
        given = {k: _plain(k, v) for k, v in args.items() if v is not None}
        for key, value in given.items():
            if not _finite(value):
                raise ValueError(f"{name}: {key} must be finite, not {value!r}")
        try:
            resolved = _nostall.check_transform(json.dumps({"type": name, **given}))
        except (ValueError, TypeError) as e:
            # "InvalidArgument: transforms[0] (Name): why" -> "Name: why"
            raise type(e)(f"{name}: {str(e).split('): ', 1)[-1]}") from None
        self._resolved = json.loads(resolved)

    def __getattr__(self, key):
        resolved = self.__dict__.get("_resolved", {})
        if key in resolved and key != "type":
            return resolved[key]
        raise AttributeError(f"{type(self).__name__} has no argument {key!r}")

    def to_dict(self):
        return dict(self._resolved)


def _audio_plain(v):
    """An audio argument as JSON holds it: paths as strings, tuples as lists."""
    import os

    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, (tuple, list)):
        return [_audio_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _audio_plain(x) for k, x in v.items()}
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        return v.item()
    return v


class AudioTransform:
    """An audio transform: its arguments, as the spec's ``audio`` list holds them.

    The classes (``nostall.audio``) are generated from the C++ schemas
    (src/audio/schemas.cc), where the arguments are checked when a loader, or
    ``nostall.audio.check``, reads the list.
    """

    def __init__(self, **args):
        self._args = {k: _audio_plain(v) for k, v in args.items()}

    def to_dict(self) -> dict:
        """The spec entry: ``{"type": name, argument: value, ...}``."""
        return {"type": type(self).__name__, **self._args}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._args.items())
        return f"{type(self).__name__}({args})"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is run by the loader's C++ threads; pass it in "
                        "transforms={'audio': [...]}, or run a list on one file with "
                        "nostall.audio.apply")
