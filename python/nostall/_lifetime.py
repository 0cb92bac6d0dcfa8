"""Shared by the package's objects that own native resources."""

import os


class Closeable:
    """``with obj:`` closes it on exit, and so does garbage collection; ``close()`` is idempotent."""

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Not in a forked child: its copy shares the parent's memory and
        # names but none of its threads; closing it there would stop or
        # remove what the parent still uses.
        if getattr(self, "_owner_pid", None) not in (None, os.getpid()):
            return
        try:
            self.close()
        except Exception:
            pass
