"""Shared by the benchmark scripts: put a report into docs/benchmarks.md."""

from pathlib import Path


def write_block(path, marker, report):
    """Replaces the block between <!-- marker:begin/end --> (or appends one)."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    block = f"{begin}\n{report}{end}"
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += "\n" + block + "\n"
    path.write_text(text)
    print(f"written to {path}")
