"""Batches for a CUDA device, through torch's CUDA runtime (nostall links no CUDA).

``pin_memory=True`` (docs/gpu.md): the ring's slots are registered as
page-locked memory (``cudaHostRegister``), each slot once, the first time a
batch is handed out in it, so the batch handed out *is* pinned: no copy into
a pinned buffer, and ``.cuda(non_blocking=True)`` copies asynchronously. A
slot is not refilled while a copy from it may still be running: a batch the
loop has given up (it asked for the next one) stays leased until a CUDA
event, recorded on the current stream when the next batch was asked for,
has completed.

``device="cuda"``: the loader makes the host-to-device copy itself on its own
stream, the slot is leased until that copy's event completes, the current
stream waits for the copy (not the CPU), and a trailing ``Normalize`` of
float32 image batches runs on the device: the CPU makes uint8 pixels (a
quarter of the bytes to copy) and the device finishes them.
"""

from __future__ import annotations

import collections
import warnings

# cudaHostRegisterPortable: page-locked for every CUDA context, not only the current one.
_PORTABLE = 1
# cudaHostRegisterReadOnly: memory the device only reads (a served slot,
# mapped read-only in a consumer).
_READ_ONLY = 8


class PinnedSlots:
    """The ring's slot memory registered page-locked, and the batches held
    until the copies that may read them are done."""

    def __init__(self, torch, max_held: int = 2):
        self._torch = torch
        self._cudart = torch.cuda.cudart()  # initialises CUDA
        self._registered: dict[int, int] = {}  # address -> bytes
        self._held = collections.deque()  # (event, arrays) given up, copies maybe running
        self._last = None  # the arrays of the batch last handed out
        self._max_held = max(1, int(max_held))
        self._failed = None
        self.counts = {"zero_copy_batches": 0, "host_copies": 0, "copies_waited_for": 0}

    @property
    def registered_bytes(self) -> int:
        return sum(self._registered.values())

    def pinned(self, address: int, nbytes: int, read_only: bool = False) -> bool:
        """Whether slot memory [address, address + nbytes) is page-locked
        (registered now if it was not, read-only to the device where this
        process may only read it); False for a batch not in a slot."""
        if not address or not nbytes:
            return False
        if address in self._registered:
            return True
        if self._failed is not None:
            return False
        err = self._cudart.cudaHostRegister(address, nbytes,
                                            _PORTABLE | (_READ_ONLY if read_only else 0))
        if int(getattr(err, "value", err)) != 0:
            # Said once; the loader then copies into pinned memory, as torch's DataLoader does.
            self._failed = err
            warnings.warn(f"pin_memory=True: registering the batch slots as page-locked memory "
                          f"failed ({err}); batches are copied into pinned memory instead",
                          ResourceWarning, stacklevel=4)
            return False
        self._registered[address] = nbytes
        return True

    def handed_out(self, arrays) -> None:
        """A batch is being handed out: the one before it was given up."""
        self.given_up()
        self._last = arrays

    def given_up(self, stream=None) -> None:
        """The batch last handed out is given up: it is held until an event
        recorded now on `stream` (the current one) completes. Held batches
        whose copies are done are let go; past `max_held`, the oldest is
        waited for (the pipeline needs its slots back)."""
        if self._last is not None:
            event = self._torch.cuda.Event()
            event.record(stream)
            self._held.append((event, self._last))
            self._last = None
        self.let_go()

    def hold(self, arrays, event) -> None:
        """Holds `arrays` until `event` (a copy from them) completes."""
        self._held.append((event, arrays))
        self.let_go()

    def let_go(self) -> None:
        held = self._held
        while held and held[0][0].query():
            held.popleft()
        while len(held) > self._max_held:
            event, _ = held.popleft()
            event.synchronize()
            self.counts["copies_waited_for"] += 1

    def close(self) -> None:
        """Waits for every copy that may read a slot, then unregisters the
        slots (batches still referenced stay valid, no longer page-locked)."""
        if self._registered or self._held or self._last is not None:
            self._torch.cuda.synchronize()
        self._held.clear()
        self._last = None
        for address in self._registered:
            self._cudart.cudaHostUnregister(address)
        self._registered.clear()

    def stats(self) -> dict:
        return dict(self.counts, registered_bytes=self.registered_bytes,
                    held_for_copies=len(self._held))


def device_of(torch, device):
    """torch.device for `device` ("cuda", "cuda:1", torch.device); None for
    None or the CPU. Raises a clear error without CUDA."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f'device must be "cuda", "cuda:N" or "cpu", not {device!r}')
    if dev.type == "cpu":
        return None
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r}, but torch sees no CUDA device "
                           f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}): "
                           "leave device unset for batches in host memory")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: torch sees {torch.cuda.device_count()} CUDA devices")
    return dev


def normalize_on_device(spec: dict):
    """(spec, normalize): an image spec whose transforms end in a float32
    Normalize without it, making uint8 pixels, and (mean, std) for the
    device to finish with; else (spec, None) unchanged. Records, audio and
    detection batches keep their CPU pipeline."""
    transforms = spec.get("transforms") or []
    if (not transforms or transforms[-1].get("type") != "Normalize"
            or spec.get("dtype", "float32") not in (None, "float32")
            or spec.get("fields") or spec.get("audio") or spec.get("detection")):
        return spec, None
    last = transforms[-1]
    spec = dict(spec, transforms=transforms[:-1], dtype="uint8")
    return spec, (tuple(last["mean"]), tuple(last["std"]))


def host_side(spec, *, output, pin_memory, device):
    """What the loader's ``pin_memory`` and ``device`` ask of it: (the spec
    to build, PinnedSlots or None, the torch.device to hand batches out on
    or None, the (mean, std) the device finishes with or None). Without a
    CUDA device, pin_memory warns and is ignored (as torch's DataLoader
    does); device="cuda" is an error."""
    if pin_memory not in (False, True):
        raise TypeError(f"pin_memory must be True or False, not {pin_memory!r}")
    if pin_memory and output != "torch":
        raise ValueError('pin_memory=True gives torch tensors in page-locked memory; it needs '
                         'output="torch"')
    to_device = normalize = pinned = None
    if device is not None:
        import torch

        to_device = device_of(torch, device)
        if to_device is not None:
            if output != "torch":
                raise ValueError(f'device={device!r} hands out torch tensors: it needs '
                                 'output="torch"')
            if spec is not None:
                spec, normalize = normalize_on_device(spec)
    if pin_memory or to_device is not None:
        import torch

        if torch.cuda.is_available():
            pinned = PinnedSlots(torch)
        else:  # as torch's DataLoader: said, then ignored
            warnings.warn("pin_memory=True, but no CUDA device is available: batches are "
                          "not pinned", UserWarning, stacklevel=4)
    return spec, pinned, to_device, normalize


class DeviceCopies:
    """Host batches (tensors in pinned slots) copied to the device on a side
    stream; the current stream waits for the copy, the CPU does not."""

    def __init__(self, device, pinned: PinnedSlots, normalize=None, channels_last=False):
        import torch

        self._torch = torch
        self.device = device
        self._pinned = pinned
        self._stream = torch.cuda.Stream(device)
        self._mean_std = None
        if normalize is not None:  # in 0-255 units: uint8 pixels become (x - 255m) / 255s
            mean, std = normalize
            shape = (1, 1, 1, len(mean)) if channels_last else (1, len(mean), 1, 1)
            self._mean_std = (
                torch.tensor([255.0 * m for m in mean], device=device).view(shape),
                torch.tensor([255.0 * s for s in std], device=device).view(shape))
            self._stream.wait_stream(torch.cuda.current_stream(device))  # (their copies)
        self.batches = 0

    def __call__(self, out, host_arrays):
        """`out`: the batch as handed out on the host (tuple or dict of
        tensors, others passed through); `host_arrays`: what holds its slot."""
        torch = self._torch
        current = torch.cuda.current_stream(self.device)
        stream = self._stream  # (not after the current one's work: the copy overlaps it)
        moved = []
        with torch.cuda.stream(stream):
            def move(x, image=False):
                if not isinstance(x, torch.Tensor):
                    return x
                y = x.to(self.device, non_blocking=True)
                if image and self._mean_std is not None:
                    mean, std = self._mean_std
                    y = y.float().sub_(mean).div_(std)
                moved.append(y)
                return y

            if isinstance(out, dict):
                result = {k: move(v, image=(k == "image")) for k, v in out.items()}
            else:
                result = tuple(move(v, image=(i == 0)) for i, v in enumerate(out))
        event = torch.cuda.Event()
        event.record(stream)
        current.wait_event(event)
        for y in moved:  # used on the current stream: not reused before it is done there
            y.record_stream(current)
        self._pinned.hold(host_arrays, event)
        self.batches += 1
        return result
