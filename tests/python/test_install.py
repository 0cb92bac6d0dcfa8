"""Installing nostall: a source build that lacks a library says which Debian
package to install; the version is one, from the VERSION file."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nostall

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CMAKE = shutil.which("cmake", path=str(BIN)) or shutil.which("cmake")


def configure(tmp_path, *args, env=None):
    import os

    return subprocess.run([CMAKE, "-S", str(ROOT), "-B", str(tmp_path / "b"), *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=120)


@pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")
@pytest.mark.parametrize("args, env, package", [
    (["-DCMAKE_DISABLE_FIND_PACKAGE_JPEG=ON"], None, "libjpeg62-turbo-dev"),
    (["-DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON"], None, "libcurl4-openssl-dev"),
    ([], {"PKG_CONFIG_LIBDIR": "/nonexistent", "PKG_CONFIG_PATH": ""}, "libmemcached-dev"),
])
def test_a_missing_library_names_the_debian_package(tmp_path, args, env, package):
    out = configure(tmp_path, *args, env=env)
    assert out.returncode != 0
    text = re.sub(r"\s+", " ", out.stderr)
    assert f"install the Debian package {package} (apt-get install {package}" in text
    assert "binary wheel" in text


def test_the_version_is_the_version_files():
    version = (ROOT / "VERSION").read_text().strip()
    assert nostall.__version__ == version
    cli = shutil.which("nostall", path=str(BIN)) or shutil.which("nostall")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"nostall {version}"
    from importlib.metadata import version as installed
    assert installed("nostall") == version


def test_a_missing_or_other_arrow_is_an_import_error_saying_what_to_install(tmp_path):
    # A pyarrow of another Arrow release (its libraries named otherwise), found first.
    fake = tmp_path / "pyarrow"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "libarrow.so.2700").write_bytes(b"")
    out = subprocess.run([sys.executable, "-c", "import nostall"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert out.returncode != 0
    assert "ImportError: nostall is built against Apache Arrow 26 (libarrow.so.2600)" in out.stderr
    assert "libarrow.so.2700" in out.stderr and "pip install 'pyarrow>=26,<27'" in out.stderr
