"""One schema per transform: the C++ declarations, the generated Python classes
and docs/transforms.md agree, and arguments are checked in C++ only."""

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import nostall
from nostall import _nostall
from nostall import audio
from nostall import transforms as T

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = json.loads(_nostall.transform_schemas())
AUDIO = json.loads(_nostall.audio_schemas())


def test_the_generated_classes_and_docs_are_current():
    done = subprocess.run([sys.executable, "-m", "nostall._schema", "--root", str(ROOT)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module, schema, doc", [(T, s, "transforms.md") for s in SCHEMAS] +
                         [(audio, s, "audio.md") for s in AUDIO],
                         ids=[s["name"] for s in SCHEMAS] + ["audio." + s["name"] for s in AUDIO])
def test_each_class_has_its_schemas_signature_and_doc(module, schema, doc):
    cls = getattr(module, schema["name"])
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == [a["name"] for a in schema["args"]]
    for p, a in zip(params, schema["args"]):
        if a["required"]:
            assert p.default is inspect.Parameter.empty, a["name"]
        else:
            want = tuple(a["default"]) if isinstance(a["default"], list) else a["default"]
            assert p.default == want, a["name"]
        assert a["name"] in cls.__doc__ and a["doc"].split()[0] in cls.__doc__
    assert cls.__doc__.startswith(schema["doc"].split(".")[0][:40])
    # The docs table names every argument of it.
    table = (ROOT / "docs" / doc).read_text().split("# Arguments", 1)[1]
    assert f"**{schema['name']}**" in table
    for a in schema["args"]:
        assert f"`{a['name']}`" in table


@pytest.mark.parametrize("make, message", [
    (lambda: T.RandomResizedCrop(224, scale=(0, 1)), "RandomResizedCrop: scale must satisfy"),
    (lambda: T.RandomResizedCrop(224, antialias=False), "antialias=False is not supported"),
    (lambda: T.Resize(224, interpolation="nearest"), "bilinear only"),
    (lambda: T.Resize((224, 224), max_size=300), "max_size needs size to be one number"),
    (lambda: T.RandomHorizontalFlip(p=1.5), "RandomHorizontalFlip: p must be in [0, 1]"),
    (lambda: T.Normalize([0.5, 0.5], [0.2]), "mean and std need the same length"),
    (lambda: T.Normalize([0.5], [0]), "std must be positive"),
    (lambda: T.CenterCrop(0), "size must be an integer or [height, width]"),
    (lambda: T.RandomRotation(10, expand=True), "a batch has one size"),
    (lambda: T.ColorJitter(hue=0.7), "hue values should be between"),
    (lambda: T.RandAugment(magnitude=40), "magnitude must be in [0, num_magnitude_bins - 1"),
])
def test_arguments_are_checked_in_cpp_and_named(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert message in str(e.value)


def test_a_spec_written_by_hand_is_checked_by_the_same_schema():
    with pytest.raises(ValueError, match=r"transforms\[0\] \(RandomResizedCrop\): scale"):
        nostall.Loader.from_spec({"source": ".", "transforms": [
            {"type": "RandomResizedCrop", "size": 8, "scale": [0, 1]}]})
    with pytest.raises(ValueError, match="unknown argument 'sizes'.*it takes: size"):
        nostall.Loader.from_spec({"source": ".", "transforms": [
            {"type": "CenterCrop", "sizes": 8}]})


def test_classes_hold_their_arguments_resolved():
    t = T.RandomResizedCrop(64)
    assert t.size == [64, 64] and t.scale == [0.08, 1.0]
    assert t.to_dict() == {"type": "RandomResizedCrop", "size": [64, 64], "scale": [0.08, 1.0],
                           "ratio": [0.75, 4 / 3]}
    assert repr(T.RandomHorizontalFlip()) == "RandomHorizontalFlip(p=0.5)"
    assert T.RandomErasing(inplace=True).to_dict()["p"] == 0.5  # accepted, changes nothing
    with pytest.raises(AttributeError, match="no argument 'sigma'"):
        T.RandomHorizontalFlip().sigma


def test_an_audio_transform_has_one_default_for_python_and_a_spec_written_by_hand():
    # Gain's and AddNoise's ranges were defaults in Python but required in a
    # spec; from one schema, both have them.
    def by_hand(entries):  # what a loader does with a spec's "audio" list
        return json.loads(_nostall.audio_check(json.dumps(entries), False)[0])

    assert by_hand([{"type": "Gain"}])[1] == {"type": "Gain", "gain_db": [-6.0, 6.0]}
    assert by_hand([{"type": "Gain"}]) == audio.check([audio.Gain()], fixed=False)[0]
    with pytest.raises(ValueError, match=r"audio\[0\] Gain: unknown argument 'gain'.*it takes gain_db"):
        by_hand([{"type": "Gain", "gain": 3}])
    with pytest.raises(ValueError, match=r"audio\[1\] Gain: works on a waveform"):
        audio.check([audio.Spectrogram(), audio.Gain()], fixed=False)
