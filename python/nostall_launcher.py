#!python
"""The `nostall` command as a wheel installs it.

The program itself is inside the package (nostall/_bin/nostall), beside the
libraries the wheel carries; this runs it in its place (the same process:
exec), with pyarrow's libraries (Apache Arrow, which nostall reads Parquet
with) on the library path and this interpreter for `nostall analyze`."""

import importlib.util
import os
import sys


def _package_dir(name):
    spec = importlib.util.find_spec(name)  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def main():
    here = _package_dir("nostall")
    if here is None:
        sys.exit("nostall: the nostall package is not importable by " + sys.executable)
    program = os.path.join(here, "_bin", "nostall")
    env = dict(os.environ)
    arrow = _package_dir("pyarrow")
    if arrow is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (arrow, env.get("LD_LIBRARY_PATH", "")) if p)
    env.setdefault("NOSTALL_PYTHON", sys.executable)
    try:
        os.execve(program, [program] + sys.argv[1:], env)
    except OSError as e:
        sys.exit(f"nostall: cannot run {program}: {e.strerror}")


if __name__ == "__main__":
    main()
