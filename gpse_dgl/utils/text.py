"""Wording helpers for user-facing messages: counts with the right plural, and "did you mean".

Example
-------
>>> from gpse_dgl.utils.text import plural, did_you_mean
>>> plural(1, "graph"), plural(2, "graph"), plural(3071, "graph"), plural(2, "run", thousands=False)
('1 graph', '2 graphs', '3,071 graphs', '2 runs')
>>> did_you_mean("zinx", ["zinc", "csl", "ogbg-molhiv"])
" (did you mean 'zinc'?)"
>>> did_you_mean("xyz", ["zinc"])
''
"""
from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["plural", "did_you_mean", "closest", "first_line"]


def plural(count: int, word: str, plural_form: str | None = None, thousands: bool = True) -> str:
    """``"1 graph"``, ``"2 graphs"`` (``plural_form`` for irregular words such as ``"entries"``)."""
    number = f"{count:,}" if thousands else str(count)
    return f"{number} {word if count == 1 else (plural_form or word + 's')}"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice most like ``name`` (case-insensitive), or None when none is close."""
    choices = [str(c) for c in choices]
    by_lower = {c.lower(): c for c in choices}
    match = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest choice, or ``""``: append it to an unknown-name error."""
    match = closest(name, choices)
    return f" (did you mean {match!r}?)" if match else ""


def first_line(exc: BaseException, limit: int | None = 160) -> str:
    """The first line of an exception's message (its type name when empty), cut at ``limit`` characters
    (``None``: not cut), for one-line error messages that quote another error."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if limit is None else line[:limit]
