"""Runs the code blocks of README.md, docs/*.md and the package's docstrings.

The blocks are found by pytest-codeblocks' parser (``extract_from_file``):
fenced blocks, ``<!--pytest-codeblocks:cont-->`` to continue the block
before, ``<!--pytest.mark.NAME(...)-->`` to mark the next one. Every block
says its language, and each language has one meaning here:

- ``python``: run as a script in a fresh interpreter, in a workspace that
  holds what the documentation names (``data/train``, ``train.json``,
  ``train.py`` with ``step``), with the ``nostall`` command on PATH.
- ``sh``: run by bash (``-e -o pipefail``) in the same workspace.
- ``json``: parsed.
- ``text``: not code (diagrams, layouts, file formats); nothing runs.

Marks, for blocks that need more than the workspace:

- ``server("s3", bucket="B")``: an S3 server (moto) holding the workspace's
  images under ``imagenet/train/`` and tar shards under ``shards/`` of
  bucket B, with the environment pointing at it.
- ``server("memcached", hosts=["node1:11211", ...])``: one memcached per
  host named, each name in the block standing for its server.
- ``server("http", url="https://host")``: a web server (nginx) serving
  the workspace, the URL in the block standing for it.
- ``server("nostall", spec="train.json", name="N")``: ``nostall serve`` of
  that spec under that name, for the block to attach to.
- ``until_sigterm(ready="TEXT")``: a command that serves until stopped: it
  must print TEXT, then exit 0 on SIGTERM.
- ``dry_run``: the build's and the benchmarks' commands (``make test`` is
  the command that runs this file; a benchmark takes minutes): ``make -n``
  shows each target exists and parses, ``bash -n`` checks a script, and a
  Python script's ``--help`` must name every option the block gives it.
- ``gpu``: a block that needs a CUDA device: skipped, with the reason,
  where torch sees none.
- ``after_previous``: a block that uses what the block before it made (a
  file it wrote): its test runs that block first, in the same workspace, so
  that it passes wherever and in whatever order the tests run.
- ``slow``: a block that takes many seconds (a training, a whole analysis):
  its test is marked ``slow``, which ``make check`` leaves out (``make test``
  runs it).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_codeblocks import extract_from_buffer, extract_from_file

sys.path.insert(0, str(Path(__file__).parent))
from conftest import Memcached, Nginx, fresh_bucket, moto_endpoint, write_jpeg_folder  # noqa: E402
import warm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "sh", "json", "text")
BIN = Path(sys.executable).parent


@dataclass
class Snippet:
    where: str      # "README.md:42" or "nostall.shared (docstring)"
    syntax: str
    code: str
    marks: list = field(default_factory=list)  # (name, args, kwargs)
    previous: "Snippet | None" = None  # run first (``after_previous``)

    def mark(self, name):
        for m in self.marks:
            if m[0] == name:
                return m
        return None


class _MarkRecorder:
    """``pytest.mark.NAME(*args, **kw)`` as written in a doc comment, as data."""

    def __getattr__(self, name):
        class _Call(tuple):
            def __call__(self, *args, **kw):
                return (name, args, kw)

        return _Call((name, (), {}))


def _parse_marks(marks):
    ns = {"pytest": type("P", (), {"mark": _MarkRecorder()})()}
    out = []
    for text in marks:
        m = eval(text, ns)  # noqa: S307 - the repository's own docs
        out.append(m if len(m) == 3 and isinstance(m[1], tuple) else (m[0], (), {}))
    return out


def _snippets(blocks, where):
    out = []
    for b in blocks:
        s = Snippet(f"{where}:{b.lineno}" if isinstance(b.lineno, int) else where,
                    (b.syntax or "").strip(), b.code, _parse_marks(b.marks))
        if s.mark("after_previous"):
            if not out:
                raise ValueError(f"{s.where}: marked after_previous, but it is the first block")
            s.previous = out[-1]
        out.append(s)
    return out


def markdown_snippets(path: Path):
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return _snippets(extract_from_file(path), str(rel))


def markdown_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def public_objects():
    """(qualified name, object) of every public module, class, function,
    method and property of the package, as a user reaches them."""
    import importlib

    import nostall

    modules = ["nostall", "nostall.transforms", "nostall.loader", "nostall.shared",
               "nostall.cache", "nostall.errors", "nostall.mix", "nostall.analyze",
               "nostall.datasets"]
    seen, out = set(), []
    for mod_name in modules:
        mod = importlib.import_module(mod_name)
        out.append((mod_name, mod))
        names = getattr(mod, "__all__", None) or [
            n for n, v in vars(mod).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == mod_name]
        for name in names:
            obj = getattr(mod, name)
            if getattr(obj, "__module__", "").split(".")[0] != "nostall" or id(obj) in seen:
                continue
            if not (isinstance(obj, type) or callable(obj)):
                continue
            seen.add(id(obj))
            out.append((f"{mod_name}.{name}", obj))
            if isinstance(obj, type):
                for attr, value in vars(obj).items():
                    if attr in ("__init_subclass__", "__weakref__", "__dict__"):
                        continue
                    if attr.startswith("_") and attr not in ("__len__", "__iter__", "__call__"):
                        continue
                    if isinstance(value, (classmethod, staticmethod)):
                        value = value.__func__
                    if isinstance(value, property) or callable(value):
                        out.append((f"{mod_name}.{name}.{attr}", value))
    return out


def docstring_snippets():
    out = []
    for name, obj in public_objects():
        doc = getattr(obj, "__doc__", None)
        if not doc or "```" not in doc:
            continue
        # A docstring's first line has no indent, the rest has the code's.
        first, _, rest = doc.partition("\n")
        text = first + "\n" + textwrap.dedent(rest)
        out += _snippets(extract_from_buffer(io.StringIO(text)), f"{name} (docstring)")
    return out


# --------------------------------------------------------------- workspace
def make_workspace(root: Path):
    """What the documentation's blocks name: data/train (4 classes of 16
    natural-looking JPEGs), train.json (a spec over it), train.py (a step),
    speech/ (spoken words as a folder and as shards), videos/train (short
    H.264 videos in class folders), parquet/ (data/train as Parquet shards)."""
    write_jpeg_folder(root / "data" / "train", classes=4, per_class=16, seed=3,
                      min_side=120, max_side=320)
    spec = {"source": "data/train", "batch_size": 16, "shuffle": True, "seed": 0,
            "transforms": [{"type": "RandomResizedCrop", "size": [64, 64]},
                           {"type": "RandomHorizontalFlip"},
                           {"type": "Normalize", "mean": [0.485, 0.456, 0.406],
                            "std": [0.229, 0.224, 0.225]}]}
    (root / "train.json").write_text(json.dumps(spec, indent=1))
    # speech/words (4 spoken words x 2 voices x 2 speeds, espeak-ng) and the
    # same as speech/train-{0000..0003}.tar.
    from nostall import datasets
    datasets.make_spoken_words(root / "speech" / "words", words=datasets.SPOKEN_WORDS[:4],
                               voices=2, speeds=(150, 200), rates=(16000, 22050),
                               formats=("flac", "wav", "mp3", "ogg"))
    datasets.folder_to_shards(root / "speech" / "words", root / "speech", shards=4)
    # videos/train: 2 classes of 2 short H.264 videos (docs/video.md).
    datasets.make_videos(root / "videos" / "train", per_class=2, classes=2, seconds=(2.0, 3.0),
                         sizes=((320, 240),), codecs=(("h264", "mp4"),), gops=(12,))
    # parquet/train-0000{0,1}-of-00002.parquet: data/train as Hugging Face's shards.
    datasets.folder_to_parquet(root / "data" / "train", root / "parquet", files=2, row_group_size=16)
    (root / "train.py").write_text(textwrap.dedent('''\
        import torch

        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(8, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = torch.nn.CrossEntropyLoss()


        def step(images, labels):
            loss = loss_fn(model(images), labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
        '''))
    return root


def workspace_env(root: Path):
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(root)  # train.py's step, as from its folder
    env.setdefault("NOSTALL_CACHE_DIR", str(root / ".index-cache"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _Servers:
    """What a block's server marks ask for, started for it and stopped after."""

    def __init__(self, snippet: Snippet, root: Path, env: dict):
        self.procs = []
        self.code = snippet.code
        self.env = env
        for name, args, kw in snippet.marks:
            if name != "server":
                continue
            kind = args[0]
            if kind == "s3":
                self._s3(root, kw.get("bucket", "bucket"))
            elif kind == "memcached":
                for host in kw["hosts"]:
                    self.code = self.code.replace(host, self._memcached())
            elif kind == "http":
                self.code = self.code.replace(kw["url"], self._http(root))
            elif kind == "nostall":
                self._serve(root, kw["spec"], kw["name"])
            else:
                raise ValueError(f"{snippet.where}: unknown server {kind!r}")

    def _serve(self, root, spec, name):
        log = root / f"serve-{name}.log"
        with open(log, "w") as out:
            p = subprocess.Popen(["nostall", "serve", "--spec", spec, "--name", name, "--quiet"],
                                 cwd=root, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text():
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nostall serve did not start: {log.read_text()}")
            time.sleep(0.05)

    def _http(self, root):
        server = Nginx(root, root / ".nginx")
        self.procs.append(server.proc)
        return server.url

    def _memcached(self):
        server = Memcached()
        self.procs.append(server.proc)
        return server.address

    def _s3(self, root, bucket):
        import boto3

        endpoint = moto_endpoint()  # this process's, shared: the bucket is emptied first
        keys = {"AWS_ACCESS_KEY_ID": "AKIDDOCS", "AWS_SECRET_ACCESS_KEY": "docs-secret",
                "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
        self.env.update(keys)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"])
        fresh_bucket(client, bucket)
        images = sorted((root / "data" / "train").rglob("*.jpg"))
        for path in images:
            rel = path.relative_to(root / "data" / "train")
            client.upload_file(str(path), bucket, f"imagenet/train/{rel}")
        for shard in range(4):  # WebDataset: KEY.jpg + KEY.cls
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for i, path in enumerate(images[shard::4]):
                    for ext, data in ((".jpg", path.read_bytes()),
                                      (".cls", str(int(path.parent.name.split("_")[-1])).encode())):
                        info = tarfile.TarInfo(f"{shard:04d}_{i:04d}{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
            client.put_object(Bucket=bucket, Key=f"shards/train-{shard:04d}.tar", Body=buf.getvalue())

    def stop(self):
        for p in self.procs:
            p.terminate()  # nostall serve removes its segment on SIGTERM
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _dry_run(code):
    """What the build and the benchmarks run, checked without running it (it
    takes minutes, or is the command running this file): a make target with
    ``make -n``; a shell script with ``bash -n``; a Python script with
    ``--help`` (for its subcommand, if it has one), which must name every
    option the block gives it."""
    lines = []
    joined = code.replace("\\\n", " ")
    for line in joined.splitlines():
        cmd = line.split(" #", 1)[0].strip()
        if not cmd or cmd.startswith("#"):
            continue
        words = shlex.split(cmd)
        while words and re.fullmatch(r"[A-Za-z_]+=\S*", words[0]):
            words = words[1:]
        if words[0] == "make":
            lines.append(shlex.join(["make", "-n", "-C", str(ROOT), *words[1:]]) + " >/dev/null")
        elif words[0].endswith(".sh"):
            lines.append(shlex.join(["bash", "-n", str(ROOT / words[0])]))
        elif words[0] == "python" and words[1].endswith(".py"):
            script = ROOT / words[1]
            sub = [words[2]] if len(words) > 2 and re.fullmatch(r"[a-z]+", words[2]) else []
            options = sorted({w.split("=")[0] for w in words[2:] if w.startswith("--")})
            check = shlex.join([sys.executable, str(script), *sub, "--help"])
            lines.append(f"help=$({check})")
            for opt in options:
                lines.append(f"grep -q -e {shlex.quote(opt)} <<<\"$help\" || "
                             f"{{ echo {shlex.quote(f'{words[1]} takes no {opt}')}; exit 1; }}")
        else:
            raise ValueError(f"dry_run: {cmd!r} is neither a make target nor a script")
    return "\n".join(lines)


class SnippetFailed(AssertionError):
    pass


def _fail(snippet, code, result_text):
    numbered = "\n".join(f"{i:4d}  {line}" for i, line in enumerate(code.splitlines(), 1))
    raise SnippetFailed(f"{snippet.where}: this {snippet.syntax} block fails\n{numbered}\n"
                        f"--- output ---\n{result_text[-6000:]}")


def run_snippet(snippet: Snippet, root: Path, timeout=300):
    """Runs one block in the workspace `root`; raises SnippetFailed with the
    block's place, its code and its output when it does not succeed."""
    if snippet.previous is not None:
        run_snippet(snippet.previous, root, timeout)
    if snippet.syntax not in LANGUAGES:
        raise SnippetFailed(f"{snippet.where}: a code block must say its language "
                            f"({', '.join(LANGUAGES)}), not {snippet.syntax!r}")
    if snippet.syntax == "text":
        return
    if snippet.syntax == "json":
        try:
            json.loads(snippet.code)
        except json.JSONDecodeError as e:
            _fail(snippet, snippet.code, str(e))
        return
    env = workspace_env(root)
    servers = _Servers(snippet, root, env)
    code = servers.code
    try:
        if snippet.mark("dry_run"):
            code = _dry_run(code)
        if snippet.syntax == "python":
            path = root / "snippet.py"
            path.write_text(code)
            argv = [sys.executable, str(path)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        ready = snippet.mark("until_sigterm")
        if ready:
            _run_until_sigterm(snippet, code, argv, root, env, ready[2]["ready"], timeout)
            return
        try:
            if snippet.syntax == "python":
                r = warm.run(argv[1], env=env, cwd=root, timeout=timeout)
            else:
                r = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                                   timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            _fail(snippet, code, f"still running after {timeout} s\n{e.stdout or ''}{e.stderr or ''}")
        if r.returncode != 0:
            _fail(snippet, code, f"exit status {r.returncode}\n{r.stdout}{r.stderr}")
        return r
    finally:
        servers.stop()


def _run_until_sigterm(snippet, code, argv, root, env, ready, timeout):
    if snippet.syntax == "sh":
        argv = ["bash", "-c", "exec " + code.strip()]  # the command itself gets the signal
    log = root / "serving.log"
    with open(log, "w") as out:
        p = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while ready not in log.read_text():
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                p.wait()
                _fail(snippet, code, f"never printed {ready!r}\n{log.read_text()}")
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            _fail(snippet, code, f"did not stop within 30 s of SIGTERM\n{log.read_text()}")
    if rc != 0:
        _fail(snippet, code, f"exit status {rc} after SIGTERM\n{log.read_text()}")
