r"""Keyword matching for the in-memory memory service, with google-adk 2.13's Unicode rules.

A query and a remembered text are compared word by word:

* both are NFC-normalised first, so ``cafe\u0301`` (e + combining accent) and ``café``
  (one precomposed letter) are the same word;
* words are ``\w+`` runs, lower-cased;
* a remembered word mixing Latin and non-Latin letters (``私はpythonを使う``: Japanese and
  Chinese are written without spaces, so a whole sentence is one ``\w+`` run) is also
  split into its single-script runs, so ``python`` finds it while ``thon`` still does not;
* a query word that is not pure ASCII also matches anywhere inside the remembered text
  (``東京`` finds ``東京に行きました``), since such scripts have no word boundaries to
  rely on.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass

_WORD_RE = re.compile(r"\w+")


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def query_words(query: str) -> frozenset[str]:
    r"""The lower-cased, NFC-normalised ``\w+`` words of a search query."""
    return frozenset(word.lower() for word in _WORD_RE.findall(_nfc(query)))


def _is_latin(char: str) -> bool:
    # ASCII letters, digits and "_" count as Latin so that "python3" stays one run.
    if char.isascii():
        return char.isalnum() or char == "_"
    return unicodedata.name(char, "").startswith("LATIN")


@dataclass(frozen=True, slots=True)
class SearchableText:
    """A remembered text prepared for matching: its words and its normalised lower-case form."""

    words: frozenset[str]
    """Every word the text can be found by (mixed-script words also by their runs)."""
    lowered: str
    """The whole text, NFC-normalised and lower-cased, for substring matches."""

    @classmethod
    def of(cls, text: str) -> SearchableText:
        """Prepare ``text`` for matching."""
        normalised = _nfc(text)
        words = {word.lower() for word in _WORD_RE.findall(normalised)}
        for word in list(words):
            if not word.isascii():
                # Latin runs and non-Latin runs of the word each become words of their own.
                words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
        return cls(words=frozenset(words), lowered=normalised.lower())

    def match_count(self, words: frozenset[str]) -> int:
        """How many of the query ``words`` this text contains (0: it does not match)."""
        if not self.words:
            return 0
        return sum(
            1
            for word in words
            if word in self.words or (not word.isascii() and word in self.lowered)
        )
