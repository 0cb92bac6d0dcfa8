"""Exceptions raised by nostall."""


class NostallError(RuntimeError):
    """Base class of nostall's own errors."""


class DataError(NostallError):
    """A data item is bad: corrupt, truncated, empty, not an image, missing or too big.

    ``item`` names the item (a file path, or ``shard.tar:member``) and ``stage``
    the pipeline stage that met it (``index``, ``fetch`` or ``decode``).
    Pass ``on_error="skip"`` to the loader to skip such items instead; they are
    counted in ``loader.stats()["skipped"]``.
    """

    def __init__(self, message, item=None, stage=None):
        super().__init__(message)
        self.item = item or None
        self.stage = stage or None


class ResourceError(NostallError, MemoryError):
    """Not enough of a resource (shared memory, file descriptors) to start."""
