"""The engine's layers: a folder of src/ includes only its own layer's
headers and the layers below it (docs/design.md draws them).

A public header (include/nostall/X.h) belongs to the folder that implements
it. Tests and fuzz targets may reach any layer: they are not part of it.
A new folder or public header must be placed here before it builds a test
run that passes."""

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The layers as CMakeLists.txt declares them (nostall_layer(NAME HEADERS ..
# DEPENDS ..)): the build compiles each folder against a view holding only
# its layers, this test reads the same table. A layer is one above the
# highest it depends on; folders of one layer do not include each other.
def _declared_layers():
    text = (ROOT / "CMakeLists.txt").read_text()
    layer, owner = {}, {}
    for name, args in re.findall(r"^nostall_layer\((\w+)([^)]*)\)", text, re.M):
        words = args.split()
        section, deps = None, []
        for w in words:
            if w in ("HEADERS", "DEPENDS", "LIBS", "EXECUTABLE", "MODULE"):
                section = w
            elif section == "HEADERS":
                owner[w] = name
            elif section == "DEPENDS":
                deps.append(w)
        layer[name] = 1 + max((layer[d] for d in deps), default=-1)
    return layer, owner


LAYER, OWNER = _declared_layers()
LAYERS = [sorted(f for f, n in LAYER.items() if n == i) for i in range(max(LAYER.values()) + 1)]
# An include's first folder is its layer: "source/index/tar_index.h" is the
# source layer's, whatever subfolder of it holds the file.
INCLUDE = re.compile(r'^#include "([a-z_]+)/(?:[a-z_]+/)*([a-z_]+)\.h"', re.M)


def layer_of(path):
    """The folder of src/ that holds `path` (a file of a subfolder, such as
    src/source/index/tar_index.cc, is its top folder's)."""
    return path.relative_to(ROOT / "src").parts[0]


def owner(directory, name):
    return OWNER.get(name) if directory == "nostall" else directory


def upward_includes(folder, text):
    """The includes of a file of `folder` that go up a layer or sideways."""
    bad = []
    for directory, name in INCLUDE.findall(text):
        target = owner(directory, name)
        if target in (None, folder) or directory == "testing":
            continue
        if LAYER[target] >= LAYER[folder]:
            bad.append(f'#include "{directory}/{name}.h" ({target}, layer {LAYER[target]})')
    return bad


def _is_test(path):
    return re.search(r"_(test|fuzz)\.cc$|_(test|fuzz)_support\.h$", path.name) is not None


def test_every_folder_and_public_header_has_a_place():
    folders = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()} - {"testing"}
    assert folders == set(LAYER), f"place these folders in LAYERS: {folders ^ set(LAYER)}"
    headers = {p.stem for p in (ROOT / "include" / "nostall").glob("*.h")}
    assert headers == set(OWNER), f"give these public headers an OWNER: {headers ^ set(OWNER)}"


def test_no_include_goes_up_a_layer():
    problems = []
    for path in sorted((ROOT / "src").rglob("*")):
        if path.suffix not in (".cc", ".h") or layer_of(path) == "testing" or _is_test(path):
            continue
        for bad in upward_includes(layer_of(path), path.read_text()):
            problems.append(f"{path.relative_to(ROOT)} (layer {LAYER[layer_of(path)]}): {bad}")
    for path in sorted((ROOT / "include" / "nostall").glob("*.h")):
        for bad in upward_includes(OWNER[path.stem], path.read_text()):
            problems.append(f"{path.relative_to(ROOT)} ({OWNER[path.stem]}): {bad}")
    assert not problems, "upward includes:\n" + "\n".join(problems)


def test_only_tests_use_the_test_helpers():
    users = [p.relative_to(ROOT) for p in (ROOT / "src").rglob("*.cc")
             if layer_of(p) != "testing" and not _is_test(p)
             and '#include "testing/' in p.read_text()]
    assert not users, f"library code including src/testing: {users}"


def test_the_check_sees_an_upward_include():
    assert upward_includes("ring", '#include "nostall/shared.h"\n')
    assert upward_includes("pipeline", '#include "shared/consumer.h"\n')
    assert upward_includes("source", '#include "ops/op.h"\n')  # sideways
    # A store knows bytes, not formats: the source layer is above it.
    assert upward_includes("store", '#include "source/driver.h"\n')
    assert not upward_includes("source", '#include "store/object_store.h"\n')
    # A subfolder is its layer's: the formats in src/source/*/ include the
    # store below them and each other, never a layer beside or above.
    assert not upward_includes("source", '#include "source/index/indexed_source.h"\n')
    assert upward_includes("store", '#include "source/index/tar_index.h"\n')
    assert upward_includes("ops", '#include "source/columnar/parquet_file.h"\n')
    # The model is below the tuner that asks it and the analyzer that calibrates it.
    assert upward_includes("model", '#include "pipeline/autotune.h"\n')
    assert upward_includes("model", '#include "nostall/analyze.h"\n')
    assert not upward_includes("shared", '#include "pipeline/pipeline.h"\n#include "common/fd.h"\n')
    # The decoders know images, not the op interface; the kernels know neither
    # the decoders nor the ops.
    assert upward_includes("codecs", '#include "ops/op.h"\n')
    assert not upward_includes("codecs", '#include "kernels/image.h"\n')
    assert upward_includes("kernels", '#include "codecs/decode.h"\n')
    # The kinds of sample sit above the ops that prepare images: ops names
    # neither audio nor detection, and they do not know each other.
    assert upward_includes("ops", '#include "audio/pipeline.h"\n')
    assert upward_includes("ops", '#include "detect/detect.h"\n')
    assert upward_includes("audio", '#include "detect/detect.h"\n')
    assert not upward_includes("audio", '#include "ops/sample_kind.h"\n')


def test_the_public_transforms_header_names_nothing_above_its_layer():
    text = (ROOT / "include" / "nostall" / "transforms.h").read_text()
    for above in ("audio", "detect"):
        assert f"namespace {above}" not in text and f"{above}::" not in text, above


def test_layers_are_the_ones_docs_design_md_draws():
    assert LAYERS == [["common"], ["annotations", "geometry", "kernels", "model", "ring", "sampler", "stats",
                                   "trace"],
                      ["cache", "codecs", "store"], ["ops", "source"], ["audio", "detect", "video"], ["pipeline"],
                      ["analyze", "shared"], ["cli", "python"]]
    text = (ROOT / "docs" / "design.md").read_text()
    for i, folders in enumerate(LAYERS):
        assert f"{i}  " + "  ".join(folders) in text, f"layer {i} ({folders}) is not drawn"


BUILD = ROOT / "build" / "py"


def _commands():
    path = BUILD / "compile_commands.json"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make install` first (it builds the tree)")
    return json.loads(path.read_text())


def test_each_folder_compiles_against_its_layers_only():
    """The build sees no more than the layer rules allow: every library
    file's include path is its folder's view (layers/NAME), never src/ or
    include/ whole."""
    seen = set()
    for entry in _commands():
        path = Path(entry["file"])
        folder = _folder_of(entry)
        if folder is None:
            continue
        args = shlex.split(entry["command"])
        includes = {a[2:] for a in args if a.startswith("-I")}
        includes |= {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-I", "-isystem")}
        assert str(BUILD / "layers" / folder) in includes, f"{path}: {sorted(includes)}"
        assert str(ROOT / "src") not in includes and str(ROOT / "include") not in includes, path
        seen.add(folder)
    assert seen == set(LAYER), f"folders not built: {set(LAYER) - seen}"


def _folder_of(entry):
    """The folder of src/ a compile command builds, or None (tests, fuzz
    targets, test helpers, precompiled headers). A unity build's batch
    (CMakeFiles/TARGET.dir/Unity/unity_N_cxx.cxx) is its target's folder."""
    path = Path(entry["file"])
    if ROOT / "src" in path.parents:
        if _is_test(path) or layer_of(path) == "testing":
            return None
        return layer_of(path)
    target = next((p[:-4] for p in path.parts if p.endswith(".dir")), None)
    if path.parent.name != "Unity" or target is None:
        return None
    folder = {"nostall_cli": "cli", "_nostall": "python"}.get(target, target.removeprefix("nostall_"))
    return folder if folder in LAYER else None


def _compile_in(folder, source, tmp_path):
    """Compiles `source` as a file of `folder` would be, with its exact flags."""
    entry = next(e for e in _commands() if _folder_of(e) == folder)
    args = shlex.split(entry["command"])
    probe = tmp_path / "probe.cc"
    probe.write_text(source)
    out = [a for i, a in enumerate(args) if a != "-o" and (i == 0 or args[i - 1] != "-o")]
    out = [str(probe) if a == entry["file"] or a.endswith(Path(entry["file"]).name) else a
           for a in out if a not in ("-c",) and not a.startswith("-M")]
    out = [a for i, a in enumerate(out) if not (i > 0 and out[i - 1] in ("-MF", "-MT", "-MQ"))]
    return subprocess.run(out + ["-fsyntax-only"], cwd=entry["directory"], capture_output=True,
                          text=True)


@pytest.mark.parametrize("folder,upward", [
    ("ring", "shared/consumer.h"), ("ring", "nostall/shared.h"), ("pipeline", "shared/consumer.h"),
    ("source", "cache/driver.h"), ("ops", "nostall/loader.h"), ("common", "stats/stats.h"),
    ("ops", "audio/pipeline.h"), ("ops", "detect/detect.h"), ("audio", "detect/detect.h"),
    ("store", "source/driver.h"), ("store", "source/columnar/parquet_file.h"), ("store", "nostall/source.h"),
    ("ops", "source/index/tar_index.h")])
def test_an_upward_include_fails_to_build(folder, upward, tmp_path):
    fine = _compile_in(folder, f'#include "{folder}/{_a_header(folder)}"\n', tmp_path)
    assert fine.returncode == 0, fine.stderr
    bad = _compile_in(folder, f'#include "{upward}"\n', tmp_path)
    assert bad.returncode != 0 and upward in bad.stderr, bad.stderr


def _a_header(folder):
    return sorted(p.name for p in (ROOT / "src" / folder).glob("*.h"))[0]
