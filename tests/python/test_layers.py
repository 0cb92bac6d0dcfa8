"""The engine's layers: a folder of src/ includes only its own layer's
headers and the layers below it (docs/design.md draws them).

A public header (include/nostall/X.h) belongs to the folder that implements
it. Tests and fuzz targets may reach any layer: they are not part of it.
A new folder or public header must be placed here before it builds a test
run that passes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. Folders of one layer do not include each other.
LAYERS = [
    ["common"],
    ["stats"],
    ["sampler", "ring", "ops", "source", "cache"],
    ["pipeline"],
    ["shared", "analyze"],
    ["python", "cli"],
]
LAYER = {folder: i for i, folders in enumerate(LAYERS) for folder in folders}
OWNER = {  # include/nostall/NAME.h -> the folder that implements it
    "status": "common", "stats": "stats", "sampler": "sampler", "ring_consumer": "ring",
    "source": "source", "cache": "cache", "transforms": "ops", "loader": "pipeline",
    "bench": "pipeline", "shared": "shared", "resume": "shared", "analyze": "analyze",
}
INCLUDE = re.compile(r'^#include "([a-z_]+)/([a-z_]+)\.h"', re.M)


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
        if path.suffix not in (".cc", ".h") or path.parent.name == "testing" or _is_test(path):
            continue
        for bad in upward_includes(path.parent.name, path.read_text()):
            problems.append(f"{path.relative_to(ROOT)} (layer {LAYER[path.parent.name]}): {bad}")
    for path in sorted((ROOT / "include" / "nostall").glob("*.h")):
        for bad in upward_includes(OWNER[path.stem], path.read_text()):
            problems.append(f"{path.relative_to(ROOT)} ({OWNER[path.stem]}): {bad}")
    assert not problems, "upward includes:\n" + "\n".join(problems)


def test_only_tests_use_the_test_helpers():
    users = [p.relative_to(ROOT) for p in (ROOT / "src").rglob("*.cc")
             if p.parent.name != "testing" and not _is_test(p)
             and '#include "testing/' in p.read_text()]
    assert not users, f"library code including src/testing: {users}"


def test_the_check_sees_an_upward_include():
    assert upward_includes("ring", '#include "nostall/shared.h"\n')
    assert upward_includes("pipeline", '#include "shared/consumer.h"\n')
    assert upward_includes("source", '#include "cache/driver.h"\n')  # sideways
    assert not upward_includes("shared", '#include "pipeline/pipeline.h"\n#include "common/fd.h"\n')
