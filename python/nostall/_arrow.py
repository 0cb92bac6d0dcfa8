"""Apache Arrow's libraries, from pyarrow, loaded before nostall's module.

nostall reads Parquet with Arrow's C++ library, which it does not carry: it
is pyarrow's (a dependency), in pyarrow's folder. The module finds it there
when pyarrow sits beside nostall (an RPATH of $ORIGIN/../pyarrow); loading
it here by its path first makes it found wherever pyarrow is installed (a
--target folder, the user's site, a system site), without importing
pyarrow. Loaded locally (RTLD_LOCAL): pyarrow's libparquet carries OpenSSL
symbols that must never stand in for the system's."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

# The Arrow release nostall is built against (pyproject.toml: pyarrow>=26,<27).
ARROW_SO = "2600"


def _pyarrow_dir():
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def load():
    """Loads libarrow and libparquet of the installed pyarrow; a clear
    ImportError where pyarrow is missing or of another Arrow release."""
    where = _pyarrow_dir()
    if where is None:
        raise ImportError("nostall needs pyarrow (Apache Arrow reads its Parquet datasets): "
                          "pip install 'pyarrow>=26,<27'")
    for name in ("libarrow", "libparquet"):
        path = os.path.join(where, f"{name}.so.{ARROW_SO}")
        if not os.path.exists(path):
            found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(where, f"{name}.so.*")))
            raise ImportError(f"nostall is built against Apache Arrow {ARROW_SO[:-2]} ({name}.so.{ARROW_SO}); "
                              f"the pyarrow in {where} has {', '.join(found) or 'none'}: "
                              "pip install 'pyarrow>=26,<27'")
        ctypes.CDLL(path)


load()
