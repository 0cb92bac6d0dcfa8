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
