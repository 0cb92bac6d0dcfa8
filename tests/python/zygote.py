"""Starts Python scripts from one warm interpreter.

Importing torch costs seconds, and the tests start dozens of Python
processes (the documentation's blocks, ranks of a job, a second process
that must find what the first left): this interpreter imports torch, numpy,
PIL and nostall once (and runs nothing), then forks a process per script.
Each is still a script in a process of its own: it takes its working
folder, environment, argv and sys.path, runs the file as ``__main__`` and
exits as an interpreter does (threads joined, atexit handlers run). What
differs from ``python script.py`` is only that those modules are already
imported (a name a script does not import is still undefined in it).

The fork is safe because nothing here has started a thread: the parent
starts this interpreter with OpenBLAS on one thread and Arrow's jemalloc
without its background thread.

Protocol, one JSON object a line: a request on stdin
``{"script", "argv", "cwd", "env", "out", "err", "status"}`` is answered
``{"pid": N}`` at once: N leads a process group of its own (a keeper) whose
child runs the script; the keeper writes the script's exit status (as
os.waitstatus_to_exitcode gives it: minus the signal's number if killed) to
the file ``status`` when it ends. Several scripts may run at once; killing
the group kills both. End of input ends this interpreter.
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


def _reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _keep(req):
    """The keeper: a group of its own, the script's process in it, its status written."""
    os.setsid()
    pid = os.fork()
    if pid == 0:
        return
    _, status = os.waitpid(pid, 0)
    tmp = req["status"] + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))
    os.rename(tmp, req["status"])
    os._exit(0)


def serve():
    """Forks a keeper per request; returns the request in the script's process only."""
    assert threading.active_count() == 1, "a thread would not survive the fork"
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _keep(req)
            return req
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _reap()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return None


def become(req):
    """The script's process: takes its state as `python script args` would have it."""
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
    sys.argv = [script, *req.get("argv", [])]
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
