"""Starts the documentation's Python blocks from one warm interpreter.

Importing torch costs seconds, and the documentation has dozens of Python
blocks: this interpreter imports torch, numpy, PIL and nostall once (and
runs nothing), then forks one process per block. Each block is still a
script in a process of its own: the child takes the block's working folder,
environment, argv and sys.path, runs the file as ``__main__`` and exits as
an interpreter does (threads joined, atexit handlers run). What differs
from ``python snippet.py`` is only that those modules are already imported
(a name a block does not import is still undefined in it).

The fork is safe because nothing here has started a thread: the parent
starts this interpreter with OpenBLAS on one thread and Arrow's jemalloc
without its background thread.

Protocol, one JSON object a line: a request on stdin
``{"script", "cwd", "env", "out", "err"}`` is answered ``{"pid": N}`` when
the block's process started, then ``{"status": S}`` when it ended (S as
os.waitstatus_to_exitcode gives it: minus the signal's number if killed).
End of input ends this interpreter.
"""

import json
import os
import runpy
import sys
import threading
import traceback

import numpy  # noqa: F401  (imported to be inherited)
import PIL.Image  # noqa: F401
import torch  # noqa: F401

import nostall  # noqa: F401
import nostall.analyze  # noqa: F401
import nostall.datasets  # noqa: F401


def _answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve():
    """Forks a child per request; returns the request in the child only."""
    assert threading.active_count() == 1, "a thread would not survive the fork"
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return req
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"status": os.waitstatus_to_exitcode(status)})
    return None


def become(req):
    """The child: takes the block's process state, as `python script` would have it."""
    os.setsid()  # its own group: a timeout kills what it started too
    for fd, path in ((1, req["out"]), (2, req["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    script = req["script"]
    sys.argv = [script]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:1] = [os.path.dirname(os.path.abspath(script))] + extra


def main():
    req = serve()
    if req is None:
        return 0
    become(req)
    try:
        runpy.run_path(req["script"], run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
