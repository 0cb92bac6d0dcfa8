"""Two real users on one node: another user's shared memory is never
mapped, a name cannot be taken from its owner, a segment of the job's cannot
be cut by anyone else, and sharing between users happens only when both ask
for it (serve --group, attach "OWNER:NAME" with the consumer's own spec).

The tests run as root and make a second user (and a group) with useradd;
elsewhere they are skipped, saying why."""
import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import nostall
from conftest import write_jpeg_folder

NOSTALL = Path(sys.executable).parent / "nostall"
OTHER, GROUP = "nostall-other", "nostall-share"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd to make a second user")


@pytest.fixture(scope="module")
def other():
    """(uid, gid of the shared group, home) of a second user, made once."""
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True)
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-G", GROUP, OTHER], check=True)
    home = Path(tempfile.mkdtemp(prefix="nostall-other-home-"))
    os.chown(home, pwd.getpwnam(OTHER).pw_uid, -1)
    yield pwd.getpwnam(OTHER).pw_uid, grp.getgrnam(GROUP).gr_gid, home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def data():
    """An image folder both users can read."""
    root = Path(tempfile.mkdtemp(prefix="nostall-two-users-"))
    write_jpeg_folder(root / "train", classes=2, per_class=8, seed=4, min_side=40, max_side=80)
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root / "train"
    shutil.rmtree(root, ignore_errors=True)


def reachable(path):
    """Whether another user may reach `path` (every folder above it searchable)."""
    path = Path(path).resolve()
    return path.exists() and all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


_COPIES = {}


def for_others():
    """(PYTHONPATH, nostall CLI) the other user can reach: this
    environment's, or copies of nostall and NumPy in a folder open to all
    (a checkout under root's 0700 home is not)."""
    import numpy
    site = Path(numpy.__file__).parent.parent
    if reachable(site) and reachable(NOSTALL):
        return str(site), str(NOSTALL)
    if "dir" not in _COPIES:
        d = Path(tempfile.mkdtemp(prefix="nostall-two-users-env-"))
        for pkg in ("nostall", "numpy", "numpy.libs"):
            if (site / pkg).exists():
                shutil.copytree(site / pkg, d / pkg, symlinks=True)
        shutil.copy2(NOSTALL, d / "nostall-cli")
        for p in [d, *d.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o005 | (0o010 if p.is_dir() else 0))
        _COPIES["dir"] = d
    return str(_COPIES["dir"]), str(_COPIES["dir"] / "nostall-cli")


def other_python():
    """An interpreter the other user can run, of this one's version."""
    for candidate in (sys.executable, os.path.realpath(sys.executable),
                      f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        if reachable(candidate):
            return candidate
    pytest.skip("no Python interpreter the second user may run (this one is under a private directory)")


def as_other(other, code, *args, groups=True, timeout=60):
    uid, gid, home = other
    site = for_others()[0]
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "PYTHONPATH": site,
           "NOSTALL_CACHE_DIR": str(home / "cache")}
    return subprocess.run([other_python(), "-c", code, *args], user=uid,
                          extra_groups=[gid] if groups else [], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=str(home))


def spec(data):
    return {"source": str(data), "batch_size": 4, "transforms": [{"type": "Resize", "size": [16, 16]}],
            "seed": 3}


def shm(kind, uid, name):
    return Path(f"/dev/shm/nostall-{kind}-{uid}-{name}")


def test_another_users_segment_under_your_name_is_never_mapped(other, data):
    uid = other[0]
    name = f"two-users-{os.getpid()}"
    # The other user makes a segment where the job's would be (a copy of a
    # real one of theirs, world-writable): attach, serve and a cache refuse
    # it, naming them and its mode.
    made = as_other(other, "import os, sys\n"
                    "for kind in ('shared', 'cache'):\n"
                    f"    p = f'/dev/shm/nostall-{{kind}}-0-{name}'\n"
                    "    with open(p, 'wb') as f: f.write(b'NSTRING1' + bytes(1 << 16))\n"
                    "    os.chmod(p, 0o666)\n")
    assert made.returncode == 0, made.stderr
    try:
        for call in (lambda: nostall.Loader.attach(name, 4, output="numpy"),
                     lambda: nostall.serve(spec(data), name, block=False, verbose=False),
                     lambda: nostall.Loader(str(data), batch_size=4, transforms=[nostall.Resize((16, 16))],
                                            cache=nostall.Cache(name, "1MiB"))):
            with pytest.raises(PermissionError) as e:
                call()
            assert f"uid {uid} ({OTHER})" in str(e.value), str(e.value)
            assert "0666" in str(e.value), str(e.value)
    finally:
        for kind in ("shared", "cache"):
            shm(kind, 0, name).unlink(missing_ok=True)


def test_a_segment_the_other_user_serves_is_theirs_alone(other, data):
    # Served by the other user under the same name: a different segment (the
    # uid is in the name), which the job does not see.
    name = f"two-users-own-{os.getpid()}"
    other_python()  # skips if the other user cannot run Python here
    spec_path = other[2] / "spec.json"
    spec_path.write_text(json.dumps(spec(data)))
    os.chown(spec_path, other[0], -1)
    proc = subprocess.Popen([for_others()[1], "serve", "--spec", str(spec_path), "--name", name, "--quiet"],
                            user=other[0], env={"HOME": str(other[2]), "PATH": os.environ["PATH"]},
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not shm("shared", other[0], name).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert shm("shared", other[0], name).exists()
        assert stat_mode(shm("shared", other[0], name)) == 0o600
        with pytest.raises(FileNotFoundError):
            nostall.Loader.attach(name, 4, output="numpy")
        # Naming its owner without a group shared: refused (and no spec).
        with pytest.raises(PermissionError):
            nostall.Loader.attach(f"{OTHER}:{name}", 4, output="numpy")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


def test_no_one_else_can_cut_or_write_the_jobs_segment(other, data):
    name = f"two-users-cut-{os.getpid()}"
    with nostall.serve(spec(data), name, block=False, verbose=False):
        path = shm("shared", 0, name)
        assert stat_mode(path) == 0o600
        tried = as_other(other, "import os, sys\n"
                         "for how in (lambda: os.truncate(sys.argv[1], 0), lambda: open(sys.argv[1], 'r+b')):\n"
                         "    try:\n        how(); print('done')\n"
                         "    except PermissionError:\n        print('refused')\n", str(path))
        assert tried.stdout.split() == ["refused", "refused"], (tried.stdout, tried.stderr)
        consumer = nostall.Loader.attach(name, 4, output="numpy")
        assert sum(len(y) for _, y in consumer) == 16
        consumer.close()


def test_sharing_with_a_group_is_explicit_and_needs_the_consumers_own_spec(other, data, tmp_path):
    uid, gid, home = other
    name = f"two-users-group-{os.getpid()}"
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec(data)))
    proc = subprocess.Popen([str(NOSTALL), "serve", "--spec", str(spec_path), "--name", name, "--quiet",
                             "--group", GROUP], stderr=subprocess.PIPE, text=True)
    try:
        path = shm("shared", 0, name)
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert stat_mode(path) == 0o660 and os.stat(path).st_gid == gid
        attach = ("import json, sys, numpy as np, nostall\n"
                  "spec = json.loads(sys.argv[1]) if sys.argv[1] != 'none' else None\n"
                  "try:\n"
                  "    l = nostall.Loader.attach(sys.argv[2], 4, spec=spec, output='numpy')\n"
                  "except Exception as e:\n"
                  "    print(type(e).__name__, e); sys.exit(0)\n"
                  "x, y = next(iter(l))\n"
                  "try:\n    x[...] = 0; print('written')\n"
                  "except ValueError:\n    print('read-only')\n"
                  "print('ok', int(x.astype(np.int64).sum()) > 0)\n")
        # Without the group: the kernel refuses (0660).
        alone = as_other(other, attach, json.dumps(spec(data)), f"root:{name}", groups=False)
        assert alone.stdout.startswith("PermissionError"), (alone.stdout, alone.stderr)
        # In the group, without a spec of its own: refused, saying why.
        no_spec = as_other(other, attach, "none", f"root:{name}")
        assert no_spec.stdout.startswith("PermissionError") and "own spec" in no_spec.stdout, no_spec
        # With another spec: refused.
        other_spec = as_other(other, attach, json.dumps(dict(spec(data), seed=4)), f"root:{name}")
        assert "another pipeline" in other_spec.stdout, other_spec
        # With its own, the same: it reads, and cannot write the batches.
        ok = as_other(other, attach, json.dumps(spec(data)), f"root:{name}")
        assert ok.stdout.split() == ["read-only", "ok", "True"], (ok.stdout, ok.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_an_index_beside_the_data_is_trusted_as_the_data_is(other, data, tmp_path):
    """The data's owner writes the index beside it and another user's job
    starts from it; an index another user leaves in a folder anyone may
    write to is never used."""
    subprocess.run([str(NOSTALL), "index", str(data)], check=True, capture_output=True, timeout=60)
    code = ("import sys, nostall\n"
            "l = nostall.Loader(sys.argv[1], batch_size=4, transforms=[nostall.Resize((16, 16))])\n"
            "print(l.index_origin, l.num_items)")
    out = as_other(other, code, str(data))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"beside the data: {data}/.nostall-index 16"
    # A copy in a folder open to all (sticky, as /tmp): the other user's
    # loader writes its index there; this user's never uses it.
    open_root = Path(tempfile.mkdtemp(prefix="nostall-open-"))
    try:
        copy = open_root / "train"
        shutil.copytree(data, copy)
        (copy / ".nostall-index").unlink()
        for p in [open_root, *open_root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        copy.chmod(0o1777)
        code = ("import sys, nostall\n"
                "l = nostall.Loader(sys.argv[1], batch_size=4, index_beside='write',"
                " transforms=[nostall.Resize((16, 16))])\n"
                "print(l.index_origin)")
        out = as_other(other, code, str(copy))
        assert out.returncode == 0, out.stderr
        assert "written beside the data" in out.stdout
        assert (copy / ".nostall-index").stat().st_uid == other[0]
        with pytest.warns(UserWarning, match=r"not used: index file .* is owned by uid"):
            ld = nostall.Loader(str(copy), batch_size=4, transforms=[nostall.Resize((16, 16))],
                                index_cache=False)
        assert ld.index_origin.startswith("built in") and ld.num_items == 16
        ld.close()
    finally:
        shutil.rmtree(open_root, ignore_errors=True)
