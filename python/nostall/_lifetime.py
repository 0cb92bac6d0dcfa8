"""Shared by the package's objects that own native resources."""


class Closeable:
    """``with obj:`` closes it on exit, and so does garbage collection; ``close()`` is idempotent."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
