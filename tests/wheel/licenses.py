"""Puts the licence of every library auditwheel copied into a wheel beside
them (`make wheel`): nostall.libs/LICENSES/<Debian package>.copyright, from
/usr/share/doc/<package>/copyright of the package that holds the library
here, and rebuilds the wheel's RECORD.

    python tests/wheel/licenses.py dist/nostall-...-manylinux_*.whl
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def package_of(library: str) -> str | None:
    """The Debian package holding a library of this name (auditwheel's copy
    has a hash before the name's first dot: libldap-2-<8 hex>.5.so.0 ->
    libldap-2.5.so.0)."""
    original = re.sub(r"-[0-9a-f]{8}(?=\.)", "", library, count=1)
    out = subprocess.run(["dpkg", "-S", f"*/{original}"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return out.stdout.split(":", 1)[0].strip()


def main(wheel: str) -> int:
    wheel = Path(wheel).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, str(wheel)], check=True,
                       stdout=subprocess.DEVNULL)
        root = next(Path(tmp).iterdir())
        libs = root / "nostall.libs"
        if not libs.is_dir():
            print(f"{wheel.name}: no nostall.libs (was it repaired by auditwheel?)", file=sys.stderr)
            return 1
        out = libs / "LICENSES"
        out.mkdir(exist_ok=True)
        missing = []
        for lib in sorted(p.name for p in libs.glob("*.so*")):
            pkg = package_of(lib)
            src = Path(f"/usr/share/doc/{pkg}/copyright") if pkg else None
            if src is None or not src.exists():
                missing.append(lib)
                continue
            shutil.copy(src, out / f"{pkg}.copyright")
        (out / "README").write_text(
            "The licences of the libraries in nostall.libs, as Debian ships them\n"
            "(/usr/share/doc/<package>/copyright of the package each was copied from).\n"
            + "".join(f"no licence file found for {m}\n" for m in missing))
        wheel.unlink()
        subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(wheel.parent), str(root)],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"{wheel.name}: {len(list(out.glob('*.copyright')))} licence files"
              + (f"; none found for {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
