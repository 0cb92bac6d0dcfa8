"""Python processes started warm: `popen(script, args)` runs a script as
`subprocess.Popen([sys.executable, script, *args])` would, in a process
forked from one interpreter per test worker (zygote.py) that has torch,
numpy, PIL and nostall imported, seconds saved a process. Its stdout and
stderr are collected as text, its stdin is empty."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


class WarmProcess:
    """What subprocess.Popen gives, for a script started by the zygote."""

    def __init__(self, pid, args, folder: Path):
        self.pid, self.args, self._folder = pid, args, folder
        self.returncode = None

    def poll(self):
        status = self._folder / "status"
        if self.returncode is None and status.exists():
            self.returncode = int(status.read_text())
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.002
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout, *self._output())
            time.sleep(delay)
            delay = min(0.05, delay * 2)
        return self.returncode

    def communicate(self, timeout=None):
        self.wait(timeout)
        out = self._output()
        shutil.rmtree(self._folder, ignore_errors=True)
        return out

    def _output(self):
        return tuple((self._folder / n).read_text(errors="replace") if (self._folder / n).exists() else ""
                     for n in ("out", "err"))

    def kill(self):
        """Kills the script's process (and anything it started in its group)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.returncode is None:
            self.returncode = -signal.SIGKILL


class _Zygote:
    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()

    def _start(self):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", JE_ARROW_MALLOC_CONF="background_thread:false")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "zygote.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def popen(self, script, args=(), env=None, cwd=None, code=None) -> WarmProcess:
        folder = Path(tempfile.mkdtemp(prefix="warm-"))
        if code is not None:  # as `python -c code`: the code is the script
            script = folder / "code.py"
            script.write_text(code)
        req = {"script": str(script), "argv": [str(a) for a in args], "cwd": str(cwd or os.getcwd()),
               "env": dict(os.environ if env is None else env), "out": str(folder / "out"),
               "err": str(folder / "err"), "status": str(folder / "status")}
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"zygote.py ended (status {self.proc.wait()})")
        return WarmProcess(json.loads(line)["pid"], [sys.executable, str(script), *map(str, args)], folder)

    def close(self):
        """Ends zygote.py (end of its input), as the test process exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_ZYGOTE = _Zygote()
atexit.register(_ZYGOTE.close)


def popen(script=None, args=(), env=None, cwd=None, code=None) -> WarmProcess:
    """`python script *args` (or `python -c code *args`) started warm (env: the
    whole environment, default os.environ)."""
    return _ZYGOTE.popen(script, args, env, cwd, code)


def run(script=None, args=(), env=None, cwd=None, timeout=None, code=None) -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, script, *args], capture_output=True, text=True), warm
    (or [sys.executable, "-c", code, *args]); past `timeout` the process is killed and
    TimeoutExpired raised."""
    p = popen(script, args, env, cwd, code)
    try:
        out, err = p.communicate(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        shutil.rmtree(p._folder, ignore_errors=True)
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)
