"""torchvision's transforms given to a Loader: nostall's namesake, or a Python hook.

A torchvision transform (``torchvision.transforms`` or ``.v2``) in a Loader's
``transforms`` becomes nostall's transform of the same name, built from the
arguments the object holds; an argument nostall does not take, set to
anything but torchvision's default, is an error naming it (never dropped).
Compose is unrolled, ToTensor / PILToTensor / ToImage / ToDtype /
ConvertImageDtype say the output dtype. A transform nostall has no
namesake for (``Lambda``, ``RandomApply``, ...) runs as a Python hook on each
sample after nostall's transforms, which a warning says once.
"""

from __future__ import annotations

import inspect
import warnings

_warned = set()


def is_torchvision(t) -> bool:
    return type(t).__module__.startswith("torchvision.")


def _value(name, v):
    """What torchvision holds, in the form its constructor takes."""
    if name == "size" and isinstance(v, (list, tuple)) and len(v) == 1:
        return int(v[0])  # v2's Resize keeps Resize(256) as [256]
    if isinstance(v, list):
        return tuple(v)
    return v


def _dtype_marker(t, name):
    """The ToTensor / PILToTensor a dtype conversion means, None for a no-op."""
    from . import transforms as nt

    if name in ("ToTensor",):
        return nt.ToTensor()
    if name in ("PILToTensor",):
        return nt.PILToTensor()
    if name in ("ToImage", "ToPureTensor"):  # uint8 tensors already
        return None
    dtype = getattr(t, "dtype", None)
    scale = getattr(t, "scale", True) if name == "ToDtype" else True
    text = str(dtype).replace("torch.", "")
    if text == "uint8":
        return nt.PILToTensor()
    if text == "float32" and scale:
        return nt.ToTensor()
    raise ValueError(f"torchvision's {name}(dtype={dtype}{', scale=False' if not scale else ''}) "
                     "has no nostall equivalent: batches are uint8, float32 in [0, 1] "
                     "(ToTensor, ToDtype(torch.float32, scale=True)) or normalised (Normalize)")


_DTYPES = ("ToTensor", "PILToTensor", "ToImage", "ToPureTensor", "ToDtype", "ConvertImageDtype")


def convert(t):
    """nostall's transforms for torchvision's transform ``t`` (a list: Compose
    gives several, a no-op none), or None when nostall has no namesake."""
    from . import transforms as nt

    name = type(t).__name__
    if name == "Compose":
        out = []
        for inner in t.transforms:
            got = convert(inner) if is_torchvision(inner) else [inner]
            if got is None:
                return None  # the Compose runs as one hook
            out += got
        return out
    if name in _DTYPES:
        marker = _dtype_marker(t, name)
        return [] if marker is None else [marker]
    ours = getattr(nt, name, None)
    if not (isinstance(ours, type) and issubclass(ours, nt._Op)):
        return None
    theirs = inspect.signature(type(t)).parameters
    mine = inspect.signature(ours).parameters
    for arg, p in theirs.items():  # what nostall does not take must be torchvision's default
        if arg in mine or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or not hasattr(t, arg):
            continue
        held = getattr(t, arg)
        if p.default is not inspect.Parameter.empty and _value(arg, held) != _value(arg, p.default):
            raise ValueError(f"torchvision's {name}({arg}={held!r}): nostall.transforms.{name} "
                             f"has no {arg}; drop it, or run torchvision's after nostall's "
                             "transforms as a Python callable (docs/from_torch.md)")
    args = {arg: _value(arg, getattr(t, arg)) for arg in mine if hasattr(t, arg)}
    try:
        return [ours(**args)]
    except (TypeError, ValueError) as e:
        raise type(e)(f"torchvision's {name} as nostall.transforms.{name}: {e}") from None


def resolve(transforms):
    """The list with each torchvision transform replaced by nostall's; one
    nostall cannot run stays (the Loader runs it as a Python hook, if it comes
    after nostall's transforms), said once per class."""
    out = []
    for t in transforms:
        if not is_torchvision(t):
            out.append(t)
            continue
        got = convert(t)
        if got is not None:
            out += got
            continue
        name = type(t).__name__
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"torchvision's {name} has no nostall equivalent: it runs as a Python hook on each "
                "sample's image tensor after nostall's transforms, on the training process "
                "(hook_threads=; docs/records.md)", UserWarning, stacklevel=4)
        out.append(t)
    return out
