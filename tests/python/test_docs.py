"""The documentation runs: every code block of README.md, docs/*.md and the
package's docstrings (docs_runner.py says how each kind of block runs), and
every public name has a docstring."""

import inspect
import subprocess
import textwrap

import pytest

from docs_runner import (BIN, ROOT, SnippetFailed, docstring_snippets, make_workspace,
                         markdown_files, markdown_snippets, public_objects, run_snippet)
import warm

SNIPPETS = [s for path in markdown_files() for s in markdown_snippets(path)] + docstring_snippets()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("docs"))


def _marks(snippet):
    marks = [pytest.mark.slow] if snippet.mark("slow") else []
    if snippet.mark("gpu"):  # a block for a CUDA device: run where torch sees one
        import torch

        marks.append(pytest.mark.skipif(not torch.cuda.is_available(),
                                        reason=f"torch {torch.__version__} sees no CUDA device"))
    return marks


@pytest.mark.parametrize("snippet", [pytest.param(s, marks=_marks(s)) for s in SNIPPETS],
                         ids=[s.where for s in SNIPPETS])
def test_the_block_runs(snippet, workspace):
    run_snippet(snippet, workspace)


def test_every_document_and_the_docstrings_are_covered():
    where = {s.where.split(":")[0].split(" ")[0] for s in SNIPPETS}
    for name in ("README.md", "docs/from_torch.md", "docs/trainers.md", "docs/transforms.md",
                 "docs/analyze.md", "docs/spec.md", "docs/s3.md", "docs/cluster_cache.md"):
        assert name in where, f"{name} has no code block"
    assert any(w.startswith("nostall") for w in where), "no docstring example found"
    assert len([s for s in SNIPPETS if s.syntax in ("python", "sh")]) >= 25


def _broken_doc(tmp_path, text):
    path = tmp_path / "broken.md"
    path.write_text(textwrap.dedent(text))
    return markdown_snippets(path)


def test_a_broken_python_block_fails_naming_its_place(workspace, tmp_path):
    ok, broken = _broken_doc(tmp_path, """\
        # A page

        ```python
        import nostall
        loader = nostall.Loader("data/train", batch_size=8)
        assert len(loader) == 8
        ```

        ```python
        import nostall
        loader = nostall.Loader("data/train", batch_size=8, suffle=True)
        ```
        """)
    run_snippet(ok, workspace)
    with pytest.raises(SnippetFailed, match=r"broken.md:9(.|\n)*unexpected keyword argument 'suffle'"):
        run_snippet(broken, workspace)


def test_a_block_after_the_previous_one_runs_it_first_wherever_it_runs(tmp_path):
    # pytest-xdist may run two blocks of one page on two workers, each with
    # its own workspace: a block that reads what the one before it wrote
    # says so, and its test runs that block first.
    writes, reads, alone = _broken_doc(tmp_path, """\
        ```python
        open("made.txt", "w").write("made")
        ```

        <!--pytest.mark.after_previous-->
        ```sh
        test "$(cat made.txt)" = made
        ```

        ```sh
        cat made.txt
        ```
        """)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    run_snippet(reads, tmp_path / "a")  # a workspace where nothing ran before
    assert (tmp_path / "a" / "made.txt").read_text() == "made"
    with pytest.raises(SnippetFailed, match="made.txt: No such file"):
        run_snippet(alone, tmp_path / "b")


def test_a_broken_shell_block_and_an_unlabelled_block_fail(workspace, tmp_path):
    sh, unlabelled = _broken_doc(tmp_path, """\
        ```sh
        nostall bench data/train --bogus 1
        ```

        ```
        nostall bench data/train
        ```
        """)
    with pytest.raises(SnippetFailed, match="unknown option --bogus"):
        run_snippet(sh, workspace)
    with pytest.raises(SnippetFailed, match="must say its language"):
        run_snippet(unlabelled, workspace)


def test_a_continued_block_sees_the_one_before(workspace, tmp_path):
    (block,) = _broken_doc(tmp_path, """\
        ```python
        x = 41
        ```

        <!--pytest-codeblocks:cont-->

        ```python
        assert x + 1 == 42
        ```
        """)
    run_snippet(block, workspace)


def test_every_public_name_has_a_docstring():
    missing = []
    for name, obj in public_objects():
        # As help() shows it: an override without its own text has its base's.
        doc = inspect.getdoc(obj) if not isinstance(obj, property) else obj.fget.__doc__
        if not (doc or "").strip():
            missing.append(name)
    assert not missing, f"no docstring: {', '.join(missing)}"


def test_the_op_docstrings_come_from_the_registry_and_show_the_signature():
    import nostall

    doc = nostall.transforms.ColorJitter.__doc__
    assert doc.startswith("Brightness, contrast, saturation and hue")
    assert "brightness" in str(inspect.signature(nostall.transforms.ColorJitter))


def test_no_doc_calls_a_module_attribute_that_is_not_there():
    # `nostall.analyze` is the function; its helpers live on the Analysis.
    for path in markdown_files():
        assert "nostall.analyze.contradictions" not in path.read_text(), path


@pytest.mark.parametrize("command", [
    ["bench"], ["bench", "--spec", "x.json", "a", "b"], ["bench", "data/train", "--bogus"],
    ["inspect"], ["index"], ["index", "a", "b"], ["serve", "--spec", "train.json"], ["cache"], ["cache", "ls", "extra"],
    ["cache", "inspect"], ["cache", "rm"], ["cache", "serve"], ["shared"], ["shared", "rm"],
    ["shared", "frob"], ["frob"], [], ["analyze"], ["analyze", "--spec", "train.json"],
    ["analyze", "--spec", "train.json", "--step", "train:step", "--bogus"],
])
def test_every_cli_mistake_is_one_line_before_any_usage(command, workspace):
    r = subprocess.run(["nostall", *command], cwd=workspace, capture_output=True, text=True,
                       env={"PATH": f"{BIN}:/usr/bin:/bin"})
    assert r.returncode == 2, r
    first = r.stderr.splitlines()[0]
    assert first.startswith("nostall") and "usage" not in first, r.stderr
    assert any(w in first for w in ("missing", "unknown", "unexpected")), first
    assert "usage" in r.stderr  # then the synopsis
    if "--bogus" in command:
        assert "unknown option --bogus" in first


@pytest.mark.parametrize("command", [
    ["bench"], ["inspect"], ["index"], ["serve"], ["analyze"], ["cache", "ls"], ["cache", "inspect"],
    ["cache", "rm"], ["cache", "serve"], ["shared", "ls"], ["shared", "inspect"], ["shared", "rm"],
])
def test_every_subcommand_has_its_own_help(command):
    r = subprocess.run(["nostall", *command, "--help"], capture_output=True, text=True,
                       env={"PATH": f"{BIN}:/usr/bin:/bin"})
    assert r.returncode == 0, r
    assert r.stdout.startswith("usage: nostall " + " ".join(command)), r.stdout[:200]


def test_every_code_block_is_fenced_and_found():
    # Indented code blocks would escape the runner; so would a fence its
    # parser missed. markdown-it (CommonMark) is the reference.
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    for path in markdown_files():
        tokens = md.parse(path.read_text())
        indented = [t.map[0] + 1 for t in tokens if t.type == "code_block"]
        assert not indented, f"{path.name}: indented code blocks at lines {indented}; fence them"
        fences = len([t for t in tokens if t.type == "fence"])
        found = len(markdown_snippets(path))
        assert found == fences, f"{path.name}: {fences} fenced blocks, {found} found by the runner"


@pytest.mark.slow
def test_the_demo_runs_as_the_readme_says(workspace):
    # `make demo` on fewer images (the README's first command, above, is checked with make -n)
    r = warm.run(ROOT / "examples" / "demo.py", ["--images", "512", "--data", workspace / "fashion-mnist",
                                                 "--no-analyze"], cwd=workspace, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "images/s" in r.stdout and "stall" in r.stdout, r.stdout


def test_every_parameter_of_the_main_entry_points_is_documented():
    import nostall

    entry_points = [(nostall.Loader, nostall.Loader.__init__), (nostall.Loader.attach,) * 2,
                    (nostall.Loader.from_spec,) * 2, (nostall.serve,) * 2,
                    (nostall.Server, nostall.Server.__init__), (nostall.analyze,) * 2,
                    (nostall.Cache, nostall.Cache.__init__)]
    undocumented = []
    for documented, function in entry_points:
        doc = (documented.__doc__ or "") + (function.__doc__ or "")
        for name in inspect.signature(function).parameters:
            if name not in ("self", "cls") and name not in doc:
                undocumented.append(f"{documented.__qualname__}({name})")
    assert not undocumented, f"parameters without a word: {', '.join(undocumented)}"


def test_the_type_stubs_name_every_native_function_and_its_parameters():
    # python/nostall/_nostall.pyi is what editors and type checkers read of
    # the binding: every function and method, with the binding's own names.
    import ast

    import nostall._nostall as native

    tree = ast.parse((ROOT / "python" / "nostall" / "_nostall.pyi").read_text())
    stubs = {}
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        prefix = node.name + "." if isinstance(node, ast.ClassDef) else ""
        for f in members:
            if isinstance(f, ast.FunctionDef):
                stubs[prefix + f.name] = [a.arg for a in f.args.args if a.arg != "self"]

    def params(fn):
        sig = fn.__doc__.splitlines()[0]
        inner, parts, depth, cur = sig[sig.index("(") + 1:sig.rindex(")")], [], 0, ""
        for ch in inner + ",":  # split at the commas outside brackets
            depth += ch in "[(" and 1 or (ch in "])" and -1 or 0)
            if ch == "," and depth == 0:
                parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        names = [p.split(":")[0].split("=")[0].strip() for p in parts if p]
        return [n for n in names if n not in ("self", "/", "*")]

    problems = []
    for name in dir(native):
        obj = getattr(native, name)
        if name.startswith("_"):
            continue
        members = ([(f"{name}.{m}", v) for m, v in vars(obj).items() if not m.startswith("_")]
                   if isinstance(obj, type) else [(name, obj)])
        for qual, fn in members:
            if isinstance(fn, property) or not callable(fn):
                if qual not in stubs:
                    problems.append(f"{qual}: not in the stubs")
                continue
            fn = getattr(native, name) if "." not in qual else getattr(obj, qual.split(".")[1])
            if qual not in stubs:
                problems.append(f"{qual}: not in the stubs")
                continue
            bound = params(fn)
            unnamed = any(n == "arg" or (n.startswith("arg") and n[3:].isdigit()) for n in bound)
            if not unnamed and bound != stubs[qual]:
                problems.append(f"{qual}: the binding takes {bound}, the stubs say {stubs[qual]}")
    assert not problems, "\n".join(problems)


def test_the_design_page_maps_every_source_folder_and_names_only_files_that_exist():
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    block = text[text.index("## Modules and seams"):]
    block = block[block.index("```text"):]
    block = block[:block.index("```", 3)]
    folders = sorted(p.name for p in (ROOT / "src").iterdir() if p.is_dir())
    missing = [f for f in folders if f"src/{f}/" not in block]
    assert not missing, f"docs/design.md does not map src/{', src/'.join(missing)}"
    files = {p.name for p in (ROOT / "src").rglob("*") if p.is_file()}
    files |= {p.name for p in (ROOT / "include").rglob("*.h")}
    files |= {p.name for p in (ROOT / "python" / "nostall").iterdir()}
    named = set()
    for word in re.findall(r"[\w.]+\.(?:cc|h|pyi)\b|[\w]+\.\{h,cc\}", block):
        named |= ({word.replace("{h,cc}", "h"), word.replace("{h,cc}", "cc")}
                  if "{h,cc}" in word else {word})
    gone = sorted(n for n in named if n not in files)
    assert not gone, f"docs/design.md names files that do not exist: {gone}"
