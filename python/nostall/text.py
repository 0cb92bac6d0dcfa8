"""Transcripts as token ids, for speech recognition (docs/audio.md).

A tokenizer is a hook on a text field (``transforms={"text": tok}``): each
sample's string becomes its ids, and the batch's ids come padded, with their
lengths, as CTC losses take them:

```python
from nostall import text

tok = text.CharTokenizer()
ids = tok("yes no")
assert tok.decode(ids) == "yes no"
padded, lengths = tok.collate([tok("up"), tok("down")])
assert padded.shape == (2, 4) and lengths.tolist() == [2, 4]
```
"""

from __future__ import annotations

__all__ = ["CharTokenizer"]

LETTERS = "abcdefghijklmnopqrstuvwxyz' "


class CharTokenizer:
    """Characters to ids: ``blank`` (CTC's, 0 by default) is no character,
    the vocabulary's characters are 1, 2, ... in its order.

    Args:
        vocabulary: the characters kept (default: lower-case letters,
            apostrophe and space, as LibriSpeech's transcripts use).
        lowercase: lower-case each transcript first.
        unknown: ``"drop"`` characters outside the vocabulary (default), or
            ``"error"``: a ValueError naming the character (the sample is then
            a DataError, or skipped with ``on_error="skip"``).
        pad: the id the padded batch is filled with past each length.
    """

    def __init__(self, vocabulary: str = LETTERS, lowercase: bool = True, unknown: str = "drop",
                 blank: int = 0, pad: int = 0):
        if len(set(vocabulary)) != len(vocabulary) or not vocabulary:
            raise ValueError("vocabulary must be a string of distinct characters")
        if unknown not in ("drop", "error"):
            raise ValueError(f'unknown must be "drop" or "error", not {unknown!r}')
        self.vocabulary, self.lowercase, self.unknown = vocabulary, lowercase, unknown
        self.blank, self.pad = blank, pad
        self._ids = {c: i + 1 for i, c in enumerate(vocabulary)}

    def __len__(self):
        """Classes a model outputs: the characters and the blank."""
        return len(self.vocabulary) + 1

    def __call__(self, transcript: str):
        import torch

        if not isinstance(transcript, str):
            raise TypeError(f"a transcript is a str, not {type(transcript).__name__}")
        s = transcript.strip()
        if self.lowercase:
            s = s.lower()
        ids = []
        for c in s:
            i = self._ids.get(c)
            if i is None:
                if self.unknown == "error":
                    raise ValueError(f"character {c!r} is not in the vocabulary")
                continue
            ids.append(i)
        return torch.tensor(ids, dtype=torch.int64)

    def decode(self, ids, collapse: bool = False) -> str:
        """The characters of ``ids``; with ``collapse``, CTC's greedy rule
        first (repeats merged, blanks dropped)."""
        out, last = [], None
        for i in (int(x) for x in ids):
            if collapse and i == last:
                continue
            last = i
            if 1 <= i <= len(self.vocabulary):
                out.append(self.vocabulary[i - 1])
        return "".join(out)

    def collate(self, samples):
        """A batch's ids: ``(padded (B, longest) int64, lengths (B,) int64)``."""
        import torch

        lengths = torch.tensor([len(s) for s in samples], dtype=torch.int64)
        out = torch.full((len(samples), int(lengths.max()) if len(samples) else 0), self.pad, dtype=torch.int64)
        for k, s in enumerate(samples):
            out[k, :len(s)] = s
        return out, lengths

    def __repr__(self):
        return f"CharTokenizer(vocabulary={self.vocabulary!r})"
