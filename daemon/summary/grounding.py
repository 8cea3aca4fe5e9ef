"""The grounding check: what a summary states that can be checked exactly, looked up in its source.

A summary's **items** are found sentence by sentence (:mod:`daemon.summary.sentences`), of these
kinds (:class:`Kind`; the values are written into results):

==============  =============================================================================
``money``       an amount with a currency: ``$1,000``, ``EUR 5 million``, ``300 dollars``
``percent``     ``45%``, ``45 per cent``, ``forty-five percent``
``date``        ``1 January 2024``, ``January 1, 2024``, ``2024-01-01``, ``01/02/2024``,
                ``March 2007``, ``1 January`` (no year), or a year alone (``in 2007``)
``duration``    a number and a unit of time: ``30 days``, ``thirty (30) days``, ``a 6-month term``
``section``     a reference: ``Section 4.2``, ``§ 4.2``, ``clause 3(a)``, ``Article V``,
                ``Appendix B``, ``Sections 3 and 4`` (one item per number)
``number``      any other number: ``119``, ``1,000,000``, ``1.5 million``, ``twelve``, ``0.82``
``term``        a defined or quoted term (``"Licensed Work"``) and an abbreviation (``GPL``, ``CC0``)
``name``        a proper noun: a run of capitalised words (``Free Software Foundation``,
                ``University of California``), or one capitalised word inside a sentence
==============  =============================================================================

Each item is **supported** when the source holds it, both sides normalised the same way:

* numbers by value: ``1,000,000`` = ``1000000`` = ``1 million`` = ``one million``; ``4.50`` = ``4.5``;
  ``thirty (30)`` is one number; number words up to the trillions; 0 and 1 are not checked (``one of``,
  ``a single``), nor ordinals (``first``);
* a percentage only by a percentage of the same value (``45%`` = ``45 percent``), an amount only by an
  amount of the same value and currency (``$`` is read as US dollars), a duration only by a duration of
  the same length (``2 weeks`` = ``14 days`` = ``fourteen days``; ``12 months`` = ``1 year``;
  business, working and calendar days are days);
* dates by their parts: ``1 January 2024`` = ``January 1, 2024`` = ``2024-01-01``; a date is supported
  by any source date at least as precise that agrees (``March 2007`` by ``12 March 2007``; a year by any
  four-digit number of the source); ``01/02/2024`` may be either day-month or month-day;
* section references by number, not by the word before it: ``Section 4.2`` = ``§ 4.2`` = ``clause 4.2``
  = ``Article 4.2`` = ``paragraph 4.2`` (documents name their numbered units either way), and a
  numbered heading or line of the source (``4.2 Scope``, ``## 4.2``) is such a unit; roman numbers are
  read (``Article V`` = ``Article 5``); ``3(a)`` is supported by ``3(a)`` or by a unit ``3`` and an
  ``(a)`` anywhere. Chapters, parts, schedules, annexes, appendices and exhibits are each their own
  family (``Appendix B`` is not ``Section B``). It is checked that the source has such a unit, not what
  the unit says;
* terms and names as text: case, accents, punctuation and line breaks are ignored, a possessive or a
  plural ``s`` on the last word too; a name of several words must be found as those words in that order
  (``Creative Commons Zero Foundation`` is not supported by ``Creative Commons``); names joined by
  ``and`` or ``&`` may be found apart.

What is not checked, to keep false alarms rare on what people write: a capitalised word that opens a
sentence (or follows a colon, a quote or a line break) when it is alone (``Contributors provide ...``)
unless the summary capitalises it inside a sentence too; the opening word of a run when the source writes
it in lower case (``Use CC0``: "use"); small words at either end of a run (``The``, ``This``); in a line
in title case (``What Is The GPL``), anything but its abbreviations; ``I'm``; months and weekdays as
names; quoted addresses and markup (``"https://..."``). A heading (a short line that is only
capitalised words, without a full stop: ``License Terms``) is supported when each of its words is in
the source, in any order.

The check says whether an item is *somewhere* in the source, not that the source says what the
summary says about it: a number taken from another clause of the same document passes. The
benchmark (``bench/grounding.py``) measures both.
"""

from __future__ import annotations

import bisect
import enum
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from daemon.summary.sentences import Sentence, split_sentences

MAX_CHECKED_ITEMS: Final = 2000
"""A summary's first this many items are looked up in its source, the others only counted
(``counts.unchecked``): a bound on the work a hostile summary can ask for."""

CHECKER_VERSION: Final = "grounding-1"
"""Written into each result's ``checks``: a change to what is extracted or how it is matched bumps it."""


class Kind(enum.StrEnum):
    """What an item is. The values are written into results (``checks``) and metric labels: keep them."""

    MONEY = "money"
    PERCENT = "percent"
    DATE = "date"
    DURATION = "duration"
    SECTION = "section"
    NUMBER = "number"
    TERM = "term"
    NAME = "name"


@dataclass(frozen=True, slots=True)
class Item:
    """One checkable thing a summary states.

    ``needs``: the item is supported when every key of any one of these groups is in the source
    (:class:`SourceIndex`). A key is a normalised value (``n:30``, ``dur:30:day``) or, starting with
    ``p:``, a phrase of folded words looked up in the source's folded text."""

    kind: Kind
    text: str
    """As written in the summary."""
    sentence: int
    """Index of its sentence in :func:`~daemon.summary.sentences.split_sentences` of the summary."""
    start: int
    end: int
    needs: tuple[tuple[str, ...], ...]

    def as_record(self) -> dict[str, Any]:
        """The item as a result's ``checks.unsupported`` lists it."""
        return {
            "text": self.text,
            "kind": self.kind.value,
            "sentence": self.sentence,
            "chars": [self.start, self.end],
        }


@dataclass(frozen=True, slots=True)
class Checks:
    """The outcome of :func:`check_summary`: every item found, and which of them the source lacks."""

    items: tuple[Item, ...]
    unsupported: tuple[Item, ...]
    unchecked: int = 0
    """Items found beyond :data:`MAX_CHECKED_ITEMS`, not looked up."""

    @property
    def supported_count(self) -> int:
        """Items the source holds."""
        return len(self.items) - len(self.unsupported)

    def by_kind(self) -> dict[str, dict[str, int]]:
        """Supported and unsupported counts per kind (kinds with no item left out)."""
        total = Counter(item.kind.value for item in self.items)
        missing = Counter(item.kind.value for item in self.unsupported)
        return {
            kind.value: {"supported": total[kind] - missing[kind], "unsupported": missing[kind]}
            for kind in Kind
            if total[kind]
        }

    def as_record(self) -> dict[str, Any]:
        """The result's ``checks`` object (its field names are docsumd's interface)."""
        return {
            "version": CHECKER_VERSION,
            "counts": {
                "supported": self.supported_count,
                "unsupported": len(self.unsupported),
                "unchecked": self.unchecked,
            },
            "by_kind": self.by_kind(),
            "unsupported": [item.as_record() for item in self.unsupported],
        }


# -- folding: how text is compared ----------------------------------------------------------------

_APOSTROPHES: Final = re.compile(r"['’ʼ`´]")
_NOT_WORD: Final = re.compile(r"[^0-9a-z]+")


def fold(text: str) -> str:
    """``text`` as names and terms are compared: accents off, case folded, apostrophes dropped
    (``Licensor's`` is ``licensors``), every other run of non-alphanumerics one space."""
    if text.isascii():
        plain = text.lower()
    else:
        decomposed = unicodedata.normalize("NFKD", text)
        # One table of the text's combining marks, deleted in one pass (not a test per character).
        marks = {ord(char): None for char in set(decomposed) if unicodedata.combining(char)}
        plain = decomposed.translate(marks).casefold()
    return " ".join(_NOT_WORD.sub(" ", _APOSTROPHES.sub("", plain)).split())


# -- numbers ------------------------------------------------------------------------------------------

# fmt: off
_UNIT_WORDS: Final = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)
# fmt: on
_UNITS: Final = {word: value for value, word in enumerate(_UNIT_WORDS)}
_TENS: Final = {
    word: 10 * value
    for value, word in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2
    )
}
_SCALES: Final = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_SCALE_SHORT: Final = {"k": 10**3, "m": 10**6, "mn": 10**6, "bn": 10**9, "b": 10**9}
_NUMBER_WORD: Final = "|".join(sorted([*_UNITS, *_TENS, "hundred", *_SCALES], key=len, reverse=True))
_WORDS_NUMBER: Final = (
    # Whole words only: no "tenant", no "weight", no "canine".
    rf"(?<![a-z])(?:{_NUMBER_WORD})(?:(?:[ \t-]+|[ \t]+and[ \t]+)(?:{_NUMBER_WORD}))*+(?![a-z])"
)
_WORDS_NUMBER_PATTERN: Final = re.compile(_WORDS_NUMBER, re.IGNORECASE)
_DIGITS: Final = r"\d{1,3}(?:,\d{3})++(?:\.\d+)?|\d+(?:\.\d+)?"
# A number as a summary writes it: digits (with thousands separators and decimals, and a scale word
# after them), or words, with the digits repeated in brackets after the words ("thirty (30)").
_NUMBER: Final = (
    rf"(?:(?P<digits>{_DIGITS})(?:[ \t]?(?P<scale>thousand|million|billion|trillion)\b)?"
    rf"|(?P<words>{_WORDS_NUMBER})(?:[ \t]*\((?P<echo>{_DIGITS})\))?)"
)


def canonical(value: Decimal) -> str:
    """A number as keys hold it: no exponent, no trailing zeros (``4.50`` → ``4.5``, ``1E+6`` →
    ``1000000``)."""
    normal = value.normalize()
    text = format(normal, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def words_value(text: str) -> int | None:
    """The value of a run of English number words (``one hundred and twenty-five`` → 125), or None."""
    total = current = 0
    seen = False
    for word in re.split(r"[\s-]+", text.lower()):
        if word in ("", "and"):
            continue
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in _SCALES:
            total += max(current, 1) * _SCALES[word]
            current = 0
        else:
            return None
        seen = True
    return total + current if seen else None


def number_value(match: re.Match[str]) -> Decimal | None:
    """The value of a :data:`_NUMBER` match (the bracketed digits win over the words they repeat)."""
    groups = match.groupdict()
    digits = groups.get("echo") or groups.get("digits")
    if digits:
        try:
            value = Decimal(digits.replace(",", ""))
        except InvalidOperation:
            return None
        scale = groups.get("scale")
        return value * _SCALES[scale.lower()] if scale and not groups.get("echo") else value
    words = groups.get("words")
    number = words_value(words) if words else None
    return Decimal(number) if number is not None else None


# -- patterns of the numeric kinds --------------------------------------------------------------------

_MONTHS: Final = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for name in names
}
_MONTH: Final = (
    r"(?P<month>(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?)(?![a-z])"
)
_DAY: Final = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR: Final = r"(?P<year>1[6-9]\d\d|20\d\d)"
# Not inside a word or another number; a hyphen only after a digit (a range: "2-12 months").
_NO_DIGIT_BEFORE: Final = r"(?<![\w.,/])(?<![^\W\d]-)"
_NO_DIGIT_AFTER: Final = r"(?![\w/]|[.,]\d)"
_DATE_PATTERNS: Final = tuple(
    re.compile(pattern)
    for pattern in (
        rf"{_NO_DIGIT_BEFORE}{_DAY}(?:[ \t]+of)?[ \t]+{_MONTH},?[ \t]+{_YEAR}{_NO_DIGIT_AFTER}",
        rf"\b{_MONTH}[ \t]+{_DAY},?[ \t]+{_YEAR}{_NO_DIGIT_AFTER}",
        rf"{_NO_DIGIT_BEFORE}{_YEAR}-(?P<mm>[01]\d)-(?P<dd>[0-3]\d){_NO_DIGIT_AFTER}",
        rf"{_NO_DIGIT_BEFORE}(?P<a>[0-3]?\d)[/.](?P<b>[0-3]?\d)[/.]{_YEAR}{_NO_DIGIT_AFTER}",
        rf"\b{_MONTH}(?:[ \t]+of)?,?[ \t]+{_YEAR}{_NO_DIGIT_AFTER}",
        rf"{_NO_DIGIT_BEFORE}{_DAY}(?:[ \t]+of)?[ \t]+{_MONTH}",
        rf"\b{_MONTH}[ \t]+{_DAY}{_NO_DIGIT_AFTER}",
        rf"{_NO_DIGIT_BEFORE}{_YEAR}{_NO_DIGIT_AFTER}",
    )
)

_DATES_FROM_DIGITS: Final = frozenset(_DATE_PATTERNS[i] for i in (0, 2, 3, 5, 7))
"""The date patterns whose matches open with a digit (the others with a month's name)."""

_DURATION_UNITS: Final = {
    "second": "second",
    "sec": "second",
    "secs": "second",
    "minute": "minute",
    "min": "minute",
    "mins": "minute",
    "hour": "hour",
    "hr": "hour",
    "hrs": "hour",
    "day": "day",
    "week": "week",
    "wk": "week",
    "wks": "week",
    "month": "month",
    "mo": "month",
    "mos": "month",
    "year": "year",
    "yr": "year",
    "yrs": "year",
    "decade": "decade",
}
_DURATION: Final = re.compile(
    rf"{_NO_DIGIT_BEFORE}{_NUMBER}[ \t-]*(?:(?:calendar|business|working|consecutive)[ \t]+)?"
    r"(?P<unit>seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|wks?|months?|mos?|years?|yrs?|"
    r"decades?)(?:'|’)?(?![a-z])",
    re.IGNORECASE,
)
# Each unit in smaller units, for the equivalences a duration has (2 weeks = 14 days).
_UNIT_IN: Final = {
    "minute": ("second", 60),
    "hour": ("minute", 60),
    "day": ("hour", 24),
    "week": ("day", 7),
    "year": ("month", 12),
    "decade": ("year", 10),
}
_PERCENT: Final = re.compile(
    rf"{_NO_DIGIT_BEFORE}{_NUMBER}[ \t]*(?:%|(?:percent|per[ \t]cent|pct)\b)", re.IGNORECASE
)
_CURRENCY_CODES: Final = {
    "$": "USD",
    "us$": "USD",
    "usd": "USD",
    "dollar": "USD",
    "€": "EUR",
    "eur": "EUR",
    "euro": "EUR",
    "£": "GBP",
    "gbp": "GBP",
    "pound": "GBP",
    "¥": "JPY",
    "jpy": "JPY",
    "yen": "JPY",
    "chf": "CHF",
    "cad": "CAD",
    "aud": "AUD",
    "inr": "INR",
    "rs": "INR",
}
_MONEY_BEFORE: Final = re.compile(
    rf"(?P<currency>US\$|\$|€|£|¥|\b(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|INR|Rs\.?))[ \t]?"
    rf"(?P<digits>{_DIGITS})(?:[ \t]?(?P<scale>thousand|million|billion|trillion|bn|mn|[mkb])\b)?"
    rf"{_NO_DIGIT_AFTER}"
)
_MONEY_AFTER: Final = re.compile(
    rf"{_NO_DIGIT_BEFORE}{_NUMBER}[ \t]+(?P<currency>dollars?|euros?|pounds?(?![ \t]*(?:of|per))|yen|"
    r"USD|EUR|GBP|JPY|CHF|CAD|AUD|INR)\b",
    re.IGNORECASE,
)
_SECTION_WORDS: Final = {
    "section": "",
    "sections": "",
    "sec": "",
    "secs": "",
    "§": "",
    "§§": "",
    "subsection": "",
    "subsections": "",
    "clause": "",
    "clauses": "",
    "cl": "",
    "article": "",
    "articles": "",
    "art": "",
    "paragraph": "",
    "paragraphs": "",
    "para": "",
    "paras": "",
    "¶": "",
    "rule": "",
    "rules": "",
    "chapter": "chapter",
    "chapters": "chapter",
    "ch": "chapter",
    "part": "part",
    "parts": "part",
    "schedule": "schedule",
    "schedules": "schedule",
    "annex": "annex",
    "annexes": "annex",
    "appendix": "appendix",
    "appendices": "appendix",
    "exhibit": "exhibit",
    "exhibits": "exhibit",
}
_SECTION_ID: Final = r"(?:\d+(?:\.\d+)*+[a-z]?(?:\([a-z0-9]{1,4}\))*|[IVXLC]{1,7}\b|[A-Z]\b(?:\.\d+)*)"
_SECTION: Final = re.compile(
    r"(?P<word>§§?|¶|\b(?i:sections?|secs?\.?|subsections?|clauses?|cl\.|articles?|art\.|paragraphs?|"
    r"paras?\.?|rules?|chapters?|ch\.|parts?|schedules?|annex(?:es)?|appendix|appendices|exhibits?)"
    rf"(?![a-z]))[ \t]*(?P<ids>{_SECTION_ID}(?:[ \t]*(?:,|and|or|to|through|&|-|–)[ \t]*{_SECTION_ID})*)"
)
_ONE_SECTION_ID: Final = re.compile(_SECTION_ID)
# A numbered unit of the source: a line (or a Markdown heading) that starts with its number.
_NUMBERED_LINE: Final = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]+)?(?:(?:section|article|clause|§)[ \t]*)?(?P<id>\d+(?:\.\d+)*+)[.)]?[ \t]+\S",
    re.IGNORECASE | re.MULTILINE,
)
_SUBCLAUSE: Final = re.compile(r"\(([a-z0-9]{1,4})\)", re.IGNORECASE)
_ROMAN: Final = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


def roman_value(text: str) -> int | None:
    """The value of a roman number (``XIV`` → 14), or None when ``text`` is not one."""
    values = [_ROMAN.get(char) for char in text.upper()]
    if not values or None in values:
        return None
    digits = [value for value in values if value is not None]
    total = sum(-a if a < b else a for a, b in zip(digits, [*digits[1:], 0], strict=True))
    return total if total > 0 else None


def _section_keys(family: str, ident: str) -> tuple[tuple[str, ...], ...]:
    """What supports a reference to unit ``ident`` of ``family`` ("" for the section-like words)."""
    prefix = f"sec:{family}:" if family else "sec:"
    base, *subs = re.split(r"(?=\()", ident.lower())
    if re.fullmatch(r"[ivxlc]+", base) and family not in ("appendix", "annex", "schedule", "exhibit"):
        roman = roman_value(base)
        base = str(roman) if roman is not None else base
    full = prefix + base + "".join(subs)
    if not subs:
        return ((full,),)
    return ((full,), (prefix + base, *(f"sub:{sub.strip('()')}" for sub in subs)))


# -- names and terms ----------------------------------------------------------------------------------

# fmt: off
_STOPWORDS: Final = frozenset(
    [
        "a", "an", "the", "this", "that", "these", "those", "there", "their", "they", "its", "it",
        "his", "her", "our", "your", "my", "we", "you", "he", "she", "i", "in", "on", "at", "by",
        "for", "of", "to", "from", "with", "without", "into", "onto", "upon", "over", "under",
        "about", "after", "before", "between", "and", "or", "but", "nor", "so", "yet", "if", "then",
        "than", "as", "when", "while", "where", "which", "who", "whom", "whose", "what", "why",
        "how", "is", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do",
        "does", "did", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
        "not", "no", "all", "any", "each", "every", "some", "such", "both", "either", "neither",
        "other", "another", "one", "many", "most", "more", "much", "few", "several", "also", "only",
        "just", "even", "however", "thus", "therefore", "hence", "moreover", "furthermore",
        "although", "though", "because", "since", "unless", "until", "whereas", "here", "overall",
        "finally", "first", "second", "third", "next", "last", "lastly", "additionally", "instead",
        "meanwhile", "similarly", "likewise", "specifically", "notably", "importantly", "still",
        "yes", "per", "via",
    ]
)
# fmt: on
_CONNECTORS: Final = frozenset(
    {"of", "for", "and", "the", "de", "du", "des", "la", "le", "van", "von", "der", "den", "&"}
)
_SMALL_WORDS: Final = _STOPWORDS | _CONNECTORS
_PRONOUN: Final = re.compile(r"I['’]")  # I'm, I've, I'd, I'll
_NOT_NAMES: Final = frozenset(
    {*_MONTHS, "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)
# A word: letters, digits, apostrophes and hyphens inside (no dots: "ANOVA.Results" is two), or a
# dotted abbreviation ("U.S."), or "&".
_TOKEN: Final = re.compile(r"(?:[^\W\d_]\.){2,}|[^\W\d_][\w’'-]*[\w]|[^\W\d_]|&")
_LOWER_WORD: Final = re.compile(r"(?<![\w-])[a-z][a-z'’]+(?![\w-])")
_CAPITALISED_RUN: Final = re.compile(
    r"\b[A-Z][\w'’-]*(?:[ \t]+(?:(?:of|for|and|the|on|in|&)[ \t]+)?[A-Z][\w'’-]*){1,7}"
)
_CAMEL_PARTS: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NEAR_SLACK_CHARS: Final = 12
_MAX_OCCURRENCES: Final = 10_000
_ACRONYM: Final = re.compile(r"[A-Z][A-Za-z0-9-]*[A-Z0-9][A-Za-z0-9-]*|[A-Z]{2,}")
_QUOTED: Final = re.compile(r"[\"“”](?P<term>[^\"“”\n]{1,120}?)[\"“”]")
_QUOTED_MAX_WORDS: Final = 12
_NOT_A_TERM: Final = re.compile(r"[/@=<>\\]|://")
_TITLE_MIN_WORDS: Final = 3
_HEADING_MAX_WORDS: Final = 6
_DEFINED_PRONOUNS: Final = frozenset({"you", "your", "yours", "we", "us", "our"})
"""Capitalised inside a sentence, these are a licence's defined terms ("You"), not a title's words."""
_BREAKS_BEFORE: Final = re.compile(r"(?:[:;(\[\"“‘—–]|\s-)\s*$")


@dataclass(frozen=True, slots=True)
class _Word:
    text: str
    start: int
    end: int
    opens: bool
    """Opens its sentence (or a clause after a colon, a dash or a quote): its capital says nothing."""


def _is_capitalised(word: str) -> bool:
    return word[0].isupper()


def _is_acronym(word: str) -> bool:
    """All capitals (``GPL``), or capitals inside the word (``LaTeX``, ``CC0``, ``OHIP-NL``)."""
    core = word.rstrip("s") if len(word) > 2 and word[:-1].isupper() else word
    return len(core) >= 2 and bool(_ACRONYM.fullmatch(core)) and not core.istitle()


# -- the source ---------------------------------------------------------------------------------------


class SourceIndex:
    """What a summary's items are looked up in: the source's normalised values, its folded text, the
    abbreviations its capitalised phrases spell, and the words it writes in lower case. Build it once
    per document (:meth:`of`); checking a summary against it is then cheap."""

    def __init__(self, keys: set[str], folded: str, lower_words: set[str]) -> None:
        self.keys = keys
        self.folded = f" {folded} "
        self.words = frozenset(folded.split())
        """The folded text's words: a phrase with a word outside them is not in it (no scan)."""
        self.lower_words = lower_words
        """Folded words the source writes in lower case: such a word opening a sentence of the summary
        is a common word there, not the start of a name."""
        self._occurrences: dict[str, list[int]] = {}
        self._phrases: dict[str, bool] = {}

    @classmethod
    def of(cls, text: str) -> SourceIndex:
        """The index of source ``text``."""
        keys: set[str] = set()
        starts = _Starts(text, 0, len(text))
        for item in _numeric_items(text, sentence=0, claimed=None, starts=starts):
            for group in item.needs:
                keys.update(key for key in group if not key.startswith("p:"))
            keys.update(_source_extras(item))
        for match in re.finditer(r"\d+(?:[.,]\d+)*", text):  # every number, even inside a word
            keys.update(_loose_number_keys(match.group()))
        for match in _scan(_WORDS_NUMBER_PATTERN, text, 0, len(text), starts.numbers):
            value = words_value(match.group())
            if value is not None:
                keys.add(f"n:{value}")
        for match in _NUMBERED_LINE.finditer(text):
            keys.add(f"sec:{match.group('id').lower()}")
        for match in _SUBCLAUSE.finditer(text):
            keys.add(f"sub:{match.group(1).lower()}")
        keys.update(f"acr:{initials}" for initials in _spelled_abbreviations(text))
        lower_words = {fold(word) for word in set(_LOWER_WORD.findall(text))}
        return cls(keys, fold(text), lower_words)

    def has(self, key: str) -> bool:
        """Whether the source holds ``key``: a value; a ``p:`` phrase (its last word may be plural or
        singular); a ``near:`` phrase, whose words may come in any order with a few others between."""
        if key.startswith("p:"):
            return any(self._has_phrase(variant) for variant in _variants(key[2:]))
        if key.startswith("near:"):
            return self._near(key[5:].split())
        return key in self.keys

    def supports(self, item: Item) -> bool:
        """Whether every key of one of the item's groups is in the source."""
        return any(all(self.has(key) for key in group) for group in item.needs)

    def _has_phrase(self, phrase: str) -> bool:
        """Whether the folded text holds ``phrase`` as whole words; a scan of the text only when each of
        its words is in :attr:`words`, and once per phrase."""
        found = self._phrases.get(phrase)
        if found is None:
            words = phrase.split()
            found = bool(words) and all(word in self.words for word in words)
            if found and len(words) > 1:
                found = f" {phrase} " in self.folded
            self._phrases[phrase] = found
        return found

    def _near(self, words: list[str]) -> bool:
        """Whether all ``words`` occur within a window of the folded text about twice their length."""
        if not words or not all(any(v in self.words for v in _variants(word)) for word in words):
            return False
        lists = [self._where(word) for word in words]
        if not all(lists):
            return False
        window = sum(map(len, words)) * 2 + _NEAR_SLACK_CHARS * len(words)
        for anchor in min(lists, key=len):
            nearest = [_nearest(positions, anchor) for positions in lists]
            if max(nearest) - min(nearest) <= window:
                return True
        return False

    def _where(self, word: str) -> list[int]:
        """Where ``word`` (or its plural or singular) occurs in the folded text, ascending."""
        found = self._occurrences.get(word)
        if found is None:
            found = []
            for variant in set(_variants(word)):
                needle = f" {variant} "
                at = self.folded.find(needle)
                while at >= 0 and len(found) < _MAX_OCCURRENCES:
                    found.append(at)
                    at = self.folded.find(needle, at + 1)
            found.sort()
            self._occurrences[word] = found
        return found


def _variants(phrase: str) -> Iterator[str]:
    """A folded phrase and its last word's plural or singular forms."""
    yield phrase
    head, _, last = phrase.rpartition(" ")
    lead = f"{head} " if head else ""
    if last.endswith("es") and len(last) > 3:
        yield lead + last[:-2]
    if last.endswith("s") and len(last) > 2:
        yield lead + last[:-1]
    else:
        yield lead + last + "s"
        yield lead + last + "es"


def _nearest(positions: list[int], anchor: int) -> int:
    at = bisect.bisect_left(positions, anchor)
    candidates = positions[max(0, at - 1) : at + 1]
    return min(candidates, key=lambda position: abs(position - anchor))


def _spelled_abbreviations(text: str) -> Iterator[str]:
    """The initials of each run of two to eight capitalised words of ``text`` (small words between them
    skipped), and of each part of it: ``Lesser General Public License`` spells ``lgpl``, ``gpl``, ..."""
    for match in _CAPITALISED_RUN.finditer(text):
        initials = "".join(
            word[0] for word in match.group().split() if word.lower() not in _SMALL_WORDS
        ).lower()
        for start in range(len(initials)):
            for end in range(start + 2, min(len(initials), start + 8) + 1):
                yield initials[start:end]


def _loose_number_keys(token: str) -> set[str]:
    """What a run of digits, dots and commas of the source may mean: a number with thousands
    separators (``1,250,000``) or a decimal (``4.5``); else (``4.2.1``, ``1,2,3``, ``12,5``) each of its
    numbers, and a dotted one's first two as a decimal."""
    token = token.rstrip(".,")
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?", token):
        keys = {f"n:{canonical(Decimal(token.replace(',', '')))}"}
    else:
        parts = [part for part in re.split(r"[.,]", token) if part]
        keys = {f"n:{int(part)}" for part in parts}
        if "." in token and len(parts) > 1:
            keys.add(f"n:{canonical(Decimal(parts[0] + '.' + parts[1]))}")
    if re.fullmatch(r"1[6-9]\d\d|20\d\d", token):
        keys.add(f"date:{token}")
    return keys


def _source_extras(item: Item) -> set[str]:
    """Keys a source item also stands for: a full date for its month and year, an amount, a percentage
    or a duration for its number as written (not for its other units: 1.5 years is no 18)."""
    extras: set[str] = set()
    for group in item.needs:
        for key in group:
            if key.startswith("date:") and not key.startswith("date:--"):
                parts = key[5:].split("-")
                extras.update("date:" + "-".join(parts[:n]) for n in range(1, len(parts)))
                if len(parts) == 3:
                    extras.add(f"date:--{parts[1]}-{parts[2]}")
    written = item.needs[0][0]
    if written.startswith(("dur:", "pct:", "money:")):
        extras.add("n:" + written.split(":")[-2 if written.startswith("dur:") else -1])
    return extras


# -- the summary --------------------------------------------------------------------------------------


def check_summary(summary: str, source: SourceIndex | str) -> Checks:
    """Find the items of ``summary`` (see the module's doc) and look each up in ``source`` (its text, or
    its :class:`SourceIndex` built once)."""
    index = source if isinstance(source, SourceIndex) else SourceIndex.of(source)
    items = extract_items(summary, common_words=index.lower_words)
    checked = items[:MAX_CHECKED_ITEMS]
    unsupported = tuple(item for item in checked if not index.supports(item))
    return Checks(items=tuple(checked), unsupported=unsupported, unchecked=len(items) - len(checked))


def extract_items(summary: str, common_words: Collection[str] | None = None) -> list[Item]:
    """The checkable items of ``summary``, sentence by sentence, in order. ``common_words``: folded
    words that, capitalised at the start of a sentence, are not read as a name or the start of one
    (the source's lower-case words: :attr:`SourceIndex.lower_words`); None: no word that opens a
    sentence is, unless the summary capitalises it inside a sentence too."""
    sentences = split_sentences(summary)
    capitalised_inside = _capitalised_inside(summary, sentences)
    items: list[Item] = []
    for sentence in sentences:
        claimed = _Claimed()
        found = _numeric_items(summary, sentence=sentence.index, claimed=claimed, within=sentence)
        found += _term_items(summary, sentence, claimed)
        found += _name_items(summary, sentence, claimed, _Context(capitalised_inside, common_words))
        items += sorted(found, key=lambda item: item.start)
    return items


@dataclass(frozen=True, slots=True)
class _Context:
    capitalised_inside: set[str]
    """Folded words the summary capitalises inside a sentence (names, wherever they stand)."""
    common_words: Collection[str] | None


class _Claimed:
    """Character ranges of a sentence already read as items: none overlaps another, so a range is free
    when the last one starting before its end ends before its start (a bisection, however many)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def free(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` overlaps no claimed range."""
        at = bisect.bisect_left(self._starts, end) - 1
        return at < 0 or self._ends[at] <= start

    def add(self, start: int, end: int) -> None:
        """Claim ``[start, end)`` (free: see :meth:`free`)."""
        at = bisect.bisect_left(self._starts, start)
        self._starts.insert(at, start)
        self._ends.insert(at, end)


def _numeric_items(
    text: str,
    *,
    sentence: int,
    claimed: _Claimed | None,
    within: Sentence | None = None,
    starts: _Starts | None = None,
) -> list[Item]:
    """Money, percentages, dates, durations, section references and numbers, in that order of
    precedence: with ``claimed`` (a summary's sentence), characters taken by one are not read again
    (``30 days`` is a duration, not a number); without (a source), everything is read every way."""
    start, end = (within.start, within.end) if within is not None else (0, len(text))
    items: list[Item] = []
    starts = starts or _Starts(text, start, end)

    def free(span: tuple[int, int]) -> bool:
        return claimed is None or claimed.free(*span)

    def add(kind: Kind, span: tuple[int, int], needs: tuple[tuple[str, ...], ...]) -> None:
        items.append(Item(kind, text[span[0] : span[1]], sentence, span[0], span[1], needs))
        if claimed is not None:
            claimed.add(*span)

    for pattern, at in ((_MONEY_BEFORE, None), (_MONEY_AFTER, starts.numbers)):
        for match in _scan(pattern, text, start, end, at):
            value = _money_value(match)
            if value is not None and free(match.span()):
                currency = _currency(match.group("currency"))
                add(Kind.MONEY, match.span(), ((f"money:{currency}:{canonical(value)}",),))
    for match in _scan(_PERCENT, text, start, end, starts.numbers):
        value = number_value(match)
        if value is not None and free(match.span()):
            add(Kind.PERCENT, match.span(), ((f"pct:{canonical(value)}",),))
    for pattern in _DATE_PATTERNS:
        at = starts.digits if pattern in _DATES_FROM_DIGITS else None
        for match in _scan(pattern, text, start, end, at):
            keys = _date_keys(match)
            if keys and free(match.span()):
                add(Kind.DATE, match.span(), tuple((key,) for key in keys))
    for match in _scan(_DURATION, text, start, end, starts.numbers):
        value = number_value(match)
        if value is not None and value > 0 and free(match.span()):
            unit = _DURATION_UNITS[match.group("unit").lower().rstrip("s") or "s"]
            add(Kind.DURATION, match.span(), tuple((key,) for key in _duration_keys(value, unit)))
    for match in _scan(_SECTION, text, start, end, starts.sections):
        if free(match.span()):
            items += _section_items(text, match, sentence)
            if claimed is not None:
                claimed.add(*match.span())
    for match in _scan(_PLAIN_NUMBER, text, start, end, starts.numbers):
        value = number_value(match)
        if value is not None and value not in (0, 1) and free(match.span()):
            add(Kind.NUMBER, match.span(), ((f"n:{canonical(value)}",),))
    return items


# Where a match of the patterns that open with a number can start: a digit that follows no digit, or a
# number word (of the ASCII letters that follow no ASCII letter). Trying the patterns only there gives
# the matches ``finditer`` gives, without trying their alternations at every character of a long source.
_DIGIT_RUN: Final = re.compile(r"(?<!\d)\d")
_ASCII_WORD: Final = re.compile(r"[A-Za-z]+")
_NUMBER_WORDS: Final = frozenset([*_UNITS, *_TENS, "hundred", *_SCALES])
_SECTION_MARKS: Final = re.compile(r"[§¶]")
_SECTION_PREFIXES: Final = tuple(word for word in _SECTION_WORDS if word.isalpha())


class _Starts:
    """Candidate start positions in ``text[start:end]``, computed on first use."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self._text, self._start, self._end = text, start, end
        self._digits: list[int] | None = None
        self._numbers: list[int] | None = None
        self._sections: list[int] | None = None
        self._words: list[tuple[int, str]] | None = None

    def _ascii_words(self) -> list[tuple[int, str]]:
        if self._words is None:
            self._words = [
                (match.start(), match.group().lower())
                for match in _ASCII_WORD.finditer(self._text, self._start, self._end)
            ]
        return self._words

    @property
    def digits(self) -> list[int]:
        if self._digits is None:
            self._digits = [m.start() for m in _DIGIT_RUN.finditer(self._text, self._start, self._end)]
        return self._digits

    @property
    def numbers(self) -> list[int]:
        if self._numbers is None:
            words = [at for at, word in self._ascii_words() if word in _NUMBER_WORDS]
            self._numbers = sorted([*self.digits, *words])
        return self._numbers

    @property
    def sections(self) -> list[int]:
        if self._sections is None:
            words = [at for at, word in self._ascii_words() if word.startswith(_SECTION_PREFIXES)]
            marks = [m.start() for m in _SECTION_MARKS.finditer(self._text, self._start, self._end)]
            self._sections = sorted([*words, *marks])
        return self._sections


def _scan(
    pattern: re.Pattern[str], text: str, start: int, end: int, at: list[int] | None
) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text, start, end)``, trying only the positions ``at`` (all when None): the
    leftmost match at each, no two overlapping, as ``finditer`` (no pattern here matches empty)."""
    if at is None:
        yield from pattern.finditer(text, start, end)
        return
    position = start
    for candidate in at:
        if candidate < position:
            continue
        match = pattern.match(text, candidate, end)
        if match is not None:
            yield match
            position = match.end()


_PLAIN_NUMBER: Final = re.compile(rf"{_NO_DIGIT_BEFORE}{_NUMBER}{_NO_DIGIT_AFTER}", re.IGNORECASE)


def _money_value(match: re.Match[str]) -> Decimal | None:
    groups = match.groupdict()
    if groups.get("currency") and groups.get("digits") is not None and "words" not in groups:
        value = Decimal(groups["digits"].replace(",", ""))
        scale = (groups.get("scale") or "").lower()
        return value * (_SCALES.get(scale) or _SCALE_SHORT.get(scale) or 1)
    return number_value(match)


def _currency(written: str) -> str:
    key = written.lower().rstrip(".")
    key = key[:-1] if key.endswith("s") and key[:-1] in _CURRENCY_CODES else key
    return _CURRENCY_CODES.get(key, written.upper())


def _date_keys(match: re.Match[str]) -> list[str]:
    groups = match.groupdict()
    year = groups.get("year")
    if groups.get("mm"):
        return [f"date:{year}-{groups['mm']}-{groups['dd']}"]
    if groups.get("a"):
        a, b = int(groups["a"]), int(groups["b"])
        return [f"date:{year}-{m:02d}-{d:02d}" for d, m in {(a, b), (b, a)} if 1 <= m <= 12 and 1 <= d <= 31]
    month = _MONTHS.get((groups.get("month") or "").lower().rstrip("."))
    day = int(groups["day"]) if groups.get("day") else None
    if day is not None and not 1 <= day <= 31:
        return []
    if month and day and year:
        return [f"date:{year}-{month:02d}-{day:02d}"]
    if month and day:
        return [f"date:--{month:02d}-{day:02d}"]
    if month and year:
        return [f"date:{year}-{month:02d}"]
    return [f"date:{year}", f"n:{year}"] if year else []  # a year is its number too ("1,600")


def _duration_keys(value: Decimal, unit: str) -> list[str]:
    """The duration's key in its own unit, in each smaller unit, and in a larger one it divides into."""
    keys = [f"dur:{canonical(value)}:{unit}"]
    smaller, amount = unit, value
    while smaller in _UNIT_IN:
        smaller, factor = _UNIT_IN[smaller]
        amount *= factor
        keys.append(f"dur:{canonical(amount)}:{smaller}")
    for larger, (small, factor) in _UNIT_IN.items():
        if small == unit and value % factor == 0:
            keys.append(f"dur:{canonical(value / factor)}:{larger}")
    return keys


def _section_items(text: str, match: re.Match[str], sentence: int) -> list[Item]:
    word = match.group("word").lower().rstrip(".")
    family = _SECTION_WORDS.get(word, "")
    items = []
    first = True
    offset = match.start("ids")
    for ident in _ONE_SECTION_ID.finditer(match.group("ids")):
        a = match.start() if first else offset + ident.start()
        b = offset + ident.end()
        items.append(Item(Kind.SECTION, text[a:b], sentence, a, b, _section_keys(family, ident.group())))
        first = False
    return items


def _term_items(text: str, sentence: Sentence, claimed: _Claimed) -> list[Item]:
    """Quoted terms (up to :data:`_QUOTED_MAX_WORDS` words; not addresses, paths or markup)."""
    items = []
    for match in _QUOTED.finditer(text, sentence.start, sentence.end):
        written = match.group("term")
        term = fold(written)
        if not term or len(term.split()) > _QUOTED_MAX_WORDS or _NOT_A_TERM.search(written):
            continue
        if claimed.free(*match.span()):
            items.append(Item(Kind.TERM, match.group(), sentence.index, *match.span(), ((f"p:{term}",),)))
            claimed.add(*match.span())
    return items


def _words(text: str, sentence: Sentence) -> list[_Word]:
    words: list[_Word] = []
    previous_end = sentence.start
    for match in _TOKEN.finditer(text, sentence.start, sentence.end):
        between = text[previous_end : match.start()]
        opens = not words or bool(_BREAKS_BEFORE.search(between)) or "\n" in between
        words.append(_Word(match.group(), match.start(), match.end(), opens))
        previous_end = match.end()
    return words


def _capitalised_inside(text: str, sentences: Sequence[Sentence]) -> set[str]:
    """Folded words that the summary capitalises somewhere a capital says something (inside a sentence):
    such a word at the start of another sentence is a name too."""
    inside = set()
    for sentence in sentences:
        for word in _words(text, sentence):
            if not word.opens and _is_capitalised(word.text):
                inside.add(fold(word.text))
    return inside


def _name_items(text: str, sentence: Sentence, claimed: _Claimed, context: _Context) -> list[Item]:
    words = [word for word in _words(text, sentence) if claimed.free(word.start, word.end)]
    runs = list(_capitalised_runs(text, words))
    if _is_heading(text, sentence, words, runs):
        return _heading_items(text, sentence.index, _name_piece(runs[0], context))
    title_case = _is_title_case(words)
    items = []
    for run in runs:
        items += _name_item(text, sentence.index, _name_piece(run, context), title_case, context)
    return items


def _heading_items(text: str, sentence: int, run: list[_Word]) -> list[Item]:
    """A heading's abbreviations, and its words as one item supported when each of them is somewhere
    in the source: a heading names what follows, in any words of the document (``License Terms``),
    but one that names what the document lacks (``Oracle Corporation``) is reported."""
    items = [_acronym_item(sentence, part) for word in run for part in _acronym_parts(word)]
    words = [word for word in run if not _acronym_parts(word) and not _is_small(word)]
    if words:
        a, b = words[0].start, words[-1].end
        needs = (tuple(f"p:{fold(word.text)}" for word in words),)
        items.append(Item(Kind.NAME, text[a:b], sentence, a, b, needs))
    return sorted(items, key=lambda item: item.start)


def _is_title_case(words: Sequence[_Word]) -> bool:
    """A heading or title: small words capitalised inside it (two, as in ``What Is The GPL``, or one
    among words all capitalised, as in ``Fees Are Due Yearly``). Not a line of names without a full
    stop (``- Parties: Acme Holdings and Globex``): those are checked."""
    if len(words) < _TITLE_MIN_WORDS:
        return False
    small_capitals = sum(
        1
        for word in words
        if not word.opens
        and _is_capitalised(word.text)
        and word.text.lower() in _SMALL_WORDS
        and word.text.lower() not in _DEFINED_PRONOUNS
    )
    content = [word for word in words if word.text.lower() not in _SMALL_WORDS]
    all_capitalised = all(_is_capitalised(word.text) for word in content)
    return small_capitals >= 2 or (small_capitals == 1 and all_capitalised)


def _is_heading(text: str, sentence: Sentence, words: Sequence[_Word], runs: Sequence[list[_Word]]) -> bool:
    """A short line that is one run of capitalised words and no more, without a full stop: a heading
    (``License Terms``), not a claim."""
    return (
        len(runs) == 1
        and len(runs[0]) == len(words)
        and len(words) <= _HEADING_MAX_WORDS
        and not text[sentence.start : sentence.end].rstrip().endswith((".", "!", "?"))
    )


def _capitalised_runs(text: str, words: Sequence[_Word]) -> Iterator[list[_Word]]:
    """Runs of capitalised words, with connectors (``of``, ``and``, ``&``) between two of them; a run
    ends at punctuation between words (``Adobe, Google``)."""
    run: list[_Word] = []
    pending: list[_Word] = []  # connectors waiting for a capitalised word
    for word in words:
        joined = bool(run) and _only_space(text, (pending or run)[-1].end, word.start) and not word.opens
        if _is_capitalised(word.text):
            if run and joined:
                run += [*pending, word]
            else:
                if run:
                    yield run
                run = [word]
            pending = []
        elif run and joined and word.text.lower() in _CONNECTORS and len(pending) < 2:
            pending.append(word)
        else:
            if run:
                yield run
            run, pending = [], []
    if run:
        yield run


def _only_space(text: str, start: int, end: int) -> bool:
    return not text[start:end].strip()


def _name_piece(run: list[_Word], context: _Context) -> list[_Word]:
    """A run without the small words at its ends, and without an opening word that the source writes
    in lower case (``Use CC0``: "use")."""
    if run and run[0].opens and len(run) > 1 and _is_common_opener(run[0], context):
        run = run[1:]
    return _trimmed(run)


def _is_common_opener(word: _Word, context: _Context) -> bool:
    folded = fold(word.text)
    return (
        not _is_acronym(word.text)
        and folded not in context.capitalised_inside
        and _is_common(folded, context)
    )


def _trimmed(run: list[_Word]) -> list[_Word]:
    start, end = 0, len(run)
    while start < end and _is_small(run[start]):
        start += 1
    while end > start and _is_small(run[end - 1]):
        end -= 1
    return run[start:end]


def _is_small(word: _Word) -> bool:
    return word.text.lower() in _SMALL_WORDS or bool(_PRONOUN.match(word.text))


def _name_item(text: str, sentence: int, run: list[_Word], title_case: bool, context: _Context) -> list[Item]:
    """The items of one run of capitalised words: a name, or its abbreviations one by one (all a
    title-case line is checked for)."""
    if not run:
        return []
    if title_case or len(run) == 1 or all(_acronym_parts(word) == [word] for word in run):
        return [item for word in run for item in _word_items(text, sentence, word, title_case, context)]
    a, b = run[0].start, run[-1].end
    phrase = fold(text[a:b])
    content = " ".join(word for word in phrase.split() if word not in _SMALL_WORDS)
    needs: list[tuple[str, ...]] = [(f"p:{phrase}",), (f"near:{content}",)]
    parts = [fold(part) for part in re.split(r"\s+(?:and|&)\s+", text[a:b]) if part.strip()]
    if len(parts) > 1:
        needs.append(tuple(f"p:{part}" for part in parts))
    return [Item(Kind.NAME, text[a:b], sentence, a, b, tuple(needs))]


def _word_items(text: str, sentence: int, word: _Word, title_case: bool, context: _Context) -> list[Item]:
    """One capitalised word: its abbreviations (``HMM`` of ``HMM-based``), or a one-word name."""
    acronyms = _acronym_parts(word)
    if acronyms:
        return [_acronym_item(sentence, part) for part in acronyms]
    folded = fold(word.text)
    if folded in _NOT_NAMES or len(folded) < 2 or title_case or _PRONOUN.match(word.text):
        return []
    if word.opens and folded not in context.capitalised_inside:
        return []  # its capital may only say that it opens the sentence
    return [Item(Kind.NAME, word.text, sentence, word.start, word.end, ((f"p:{folded}",),))]


def _is_common(folded: str, context: _Context) -> bool:
    """Whether a word is a common one: a small word, or one the source writes in lower case (in any
    number); every word is, without the source's words."""
    if context.common_words is None or folded in _SMALL_WORDS:
        return True
    return any(variant in context.common_words for variant in _variants(folded))


def _acronym_parts(word: _Word) -> list[_Word]:
    """The abbreviations in ``word``: the whole word (``OHIP-NL``), or its parts that are (``HMM`` of
    ``HMM-based``)."""
    if _is_acronym(word.text):
        return [word]
    parts = []
    offset = word.start
    for part in word.text.split("-"):
        if _is_acronym(part):
            parts.append(_Word(part, offset, offset + len(part), word.opens))
        offset += len(part) + 1
    return parts if "-" in word.text else []


def _acronym_item(sentence: int, word: _Word) -> Item:
    """An abbreviation: found as a word, spelled by a capitalised phrase of the source (``LGPL``), or,
    for a word with capitals inside (``BackgroundDespite``: a heading glued to the next word), as its
    parts."""
    folded = fold(word.text)
    needs: list[tuple[str, ...]] = [(f"p:{folded}",)]
    core = word.text[:-1] if word.text.endswith("s") and word.text[:-1].isupper() else word.text
    if core.isupper() or core[-1].isdigit():
        needs.append((f"acr:{fold(core).replace(' ', '')}",))
    parts = [fold(part) for part in _CAMEL_PARTS.findall(word.text)]
    if len(parts) > 1:
        needs.append(tuple(f"p:{part}" for part in parts))
    return Item(Kind.TERM, word.text, sentence, word.start, word.end, tuple(needs))


def count_by_kind(items: Iterable[Item]) -> dict[str, int]:
    """How many of ``items`` there are of each kind."""
    return dict(Counter(item.kind.value for item in items))
