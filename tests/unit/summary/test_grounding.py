"""The grounding check: a summary's numbers, dates, durations, references, terms and names are looked up
in the source, both sides normalised the same way; a changed one is reported with its kind and sentence."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.summary.grounding import (
    CHECKER_VERSION,
    Kind,
    SourceIndex,
    canonical,
    check_summary,
    extract_items,
    fold,
    roman_value,
    words_value,
)

SOURCE = """MASTER SERVICES AGREEMENT

1. Definitions. "Licensed Work" means the software. The Licensee is Acme Holdings Ltd.
The Licensor is the Free Software Foundation, Inc., of Boston.

2. Term. This Agreement starts on 1 January 2024 and runs for thirty-six (36) months.
Either party may terminate it on thirty (30) days' written notice.

3. Fees. The Licensee pays USD 1,250,000 a year, rising by 4.5 per cent each year.
Late payment (see Section 3(b)) costs 2% a month. The GNU Lesser General Public License applies.

4.2 Audit. Audits happen twice a year, in March 2025 and September 2025, under Article V.
"""


def unsupported(summary: str, source: str = SOURCE) -> list[tuple[str, str]]:
    return [(item.kind.value, item.text) for item in check_summary(summary, source).unsupported]


@pytest.mark.parametrize(
    "summary",
    [
        # Numbers and durations, however written.
        "Either party may end it on 30 days notice.",
        "Either party may end it on thirty days' notice.",
        "The notice period is thirty (30) days.",
        "The agreement runs for 3 years.",  # 36 months
        "It runs for thirty-six months.",
        # Amounts: separators, scale words, currency words.
        "The licensee pays $1.25 million a year.",
        "The licensee pays 1250000 dollars a year.",
        "The licensee pays USD 1,250,000.",
        # Percentages.
        "Fees rise 4.5% a year; late payment costs 2 percent a month.",
        # Dates in any common writing, and at a lower precision.
        "It starts on January 1, 2024.",
        "It starts on 2024-01-01.",
        "It starts in January 2024.",
        "Audits are in 2025.",
        "The first audit is in March of 2025.",
        # Section references: the word before the number does not matter; roman numbers are read.
        "Late fees are in section 3(b).",
        "Late fees are in § 3(b), audits in clause 4.2 and in Article 5.",
        "Audits follow Article V.",
        # Names and terms: case, possessives, plurals, accents.
        "The Free Software Foundation's licence applies; the licensee is ACME HOLDINGS.",
        'The "licensed work" is the software.',
        "The LGPL applies.",  # spelled by "Lesser General Public License"
        # Sentence openers and title-case headings are not names.
        "Licensees must pay. What Is The Term Of The Agreement",
        "## Term and Notice\n\nThe licence runs for 36 months.",
    ],
)
def test_what_the_source_says_is_supported(summary: str) -> None:
    assert unsupported(summary) == []


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ("Either party may end it on 60 days notice.", [("duration", "60 days")]),
        ("The agreement runs for 48 months.", [("duration", "48 months")]),
        ("The licensee pays $1.5 million a year.", [("money", "$1.5 million")]),
        ("Fees rise 5.4% a year.", [("percent", "5.4%")]),
        ("It starts on January 2, 2024.", [("date", "January 2, 2024")]),
        ("It starts in 2023.", [("date", "2023")]),
        ("Late fees are in section 7.", [("section", "section 7")]),
        ("Late fees are in section 3(c).", [("section", "section 3(c)")]),
        ("Audits happen 4 times a year and cost 12,400 in total.", [("number", "4"), ("number", "12,400")]),
        ("The Licensor is the Free Software Institute.", [("name", "Free Software Institute")]),
        ("The licence was written with Mozilla.", [("name", "Mozilla")]),
        ('The "Licensed Product" is the software.', [("term", '"Licensed Product"')]),
        ("The MPL applies.", [("term", "MPL")]),
    ],
)
def test_a_changed_detail_is_unsupported(summary: str, expected: list[tuple[str, str]]) -> None:
    assert unsupported(summary) == expected


def test_items_carry_their_sentence_and_characters() -> None:
    summary = "The term is 36 months.\n- Notice: 60 days.\n- Fees: USD 1,250,000."
    checks = check_summary(summary, SOURCE)
    (item,) = checks.unsupported
    assert (item.kind, item.text, item.sentence) == (Kind.DURATION, "60 days", 1)
    assert summary[item.start : item.end] == "60 days"
    record = checks.as_record()
    assert record == {
        "version": CHECKER_VERSION,
        "counts": {"supported": 2, "unsupported": 1, "unchecked": 0},
        "by_kind": {
            "money": {"supported": 1, "unsupported": 0},
            "duration": {"supported": 1, "unsupported": 1},
        },
        "unsupported": [{"text": "60 days", "kind": "duration", "sentence": 1, "chars": [33, 40]}],
    }


def test_the_same_characters_are_one_item() -> None:
    kinds = [(item.kind, item.text) for item in extract_items("Pay $300 within 30 days of 1 May 2024.")]
    assert kinds == [(Kind.MONEY, "$300"), (Kind.DURATION, "30 days"), (Kind.DATE, "1 May 2024")]


def test_zero_one_and_ordinals_are_not_checked() -> None:
    items = extract_items("One of the first two parties has no zero-day claim.")
    assert [(item.kind, item.text) for item in items] == [(Kind.NUMBER, "two")]


def test_a_multi_word_name_needs_all_its_words_near_each_other() -> None:
    source = "The French Rich Transcription program of Broadcast News. Creative Commons is a charity."
    assert unsupported("They use the French Rich Broadcast News Transcription.", source) == []
    assert unsupported("It is by the Creative Commons Zero Foundation.", source) == [
        ("name", "Creative Commons Zero Foundation")
    ]


def test_a_heading_glued_to_a_word_is_found_as_its_parts() -> None:
    assert unsupported("BackgroundDespite this, it works.", "Background. Despite that, it works.") == []


# -- normalisation round trips --------------------------------------------------------------------

# fmt: off
_UNDER_20 = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
# fmt: on


def in_words(number: int) -> str:
    """English words for 0 <= number < 10**12 (the test's own writer, not the checker's reader)."""
    if number < 20:
        return _UNDER_20[number]
    if number < 100:
        return _TENS[number // 10 - 2] + ("" if number % 10 == 0 else "-" + _UNDER_20[number % 10])
    for size, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred")):
        if number >= size:
            head, rest = divmod(number, size)
            return f"{in_words(head)} {name}" + ("" if rest == 0 else " " + in_words(rest))
    raise AssertionError(number)


@given(st.integers(min_value=0, max_value=999_999_999))
def test_number_words_read_back(number: int) -> None:
    assert words_value(in_words(number)) == number


@given(st.integers(min_value=2, max_value=10**9), st.sampled_from(["digits", "separated", "words"]))
def test_a_number_is_found_however_either_side_writes_it(number: int, style: str) -> None:
    written = {"digits": str(number), "separated": f"{number:,}", "words": in_words(number)}[style]
    source = f"The register counts {number:,} entries."
    assert unsupported(f"The register has {written} entries.", source) == []
    assert unsupported(f"The register has {number + 1:,} entries.", source) == [("number", f"{number + 1:,}")]


@given(st.integers(min_value=2, max_value=999), st.sampled_from([("million", 10**6), ("billion", 10**9)]))
def test_scale_words_are_multiplied(number: int, scale: tuple[str, int]) -> None:
    word, factor = scale
    assert unsupported(f"It holds {number} {word} records.", f"It holds {number * factor:,} records.") == []


_DATE_STYLES = ("{d} {B} {Y}", "{B} {d}, {Y}", "{Y}-{m:02d}-{d:02d}", "{d}th of {B} {Y}", "{b} {d}, {Y}")


def write_date(date: datetime.date, style: str) -> str:
    month, short = date.strftime("%B"), date.strftime("%b")
    return style.format(
        d=date.day, B=month, b=short if short == month else short + ".", Y=date.year, m=date.month
    )


@given(
    st.dates(min_value=datetime.date(1700, 1, 1), max_value=datetime.date(2099, 12, 31)),
    st.sampled_from(_DATE_STYLES),
    st.sampled_from(_DATE_STYLES),
)
def test_a_date_is_found_however_either_side_writes_it(date: datetime.date, ours: str, theirs: str) -> None:
    source = f"Signed on {write_date(date, theirs)} by both parties."
    assert unsupported(f"It was signed on {write_date(date, ours)}.", source) == []
    other = date + datetime.timedelta(days=1)
    changed = write_date(other, ours)
    assert unsupported(f"It was signed on {changed}.", source) == [("date", changed)]


@given(st.integers(min_value=1, max_value=400), st.sampled_from(["days", "weeks", "months", "years"]))
def test_durations_are_found_in_other_units(count: int, unit: str) -> None:
    days_per = {"days": 1, "weeks": 7}
    if unit in days_per:
        source = f"within {count * days_per[unit]} days"
    else:
        source = f"within {count * (12 if unit == 'years' else 1)} months"
    assert unsupported(f"It must happen within {count} {unit}.", source) == []


@given(st.decimals(min_value=Decimal("0.001"), max_value=Decimal(10**9), places=3))
def test_canonical_numbers_have_no_trailing_zeros(value: Decimal) -> None:
    text = canonical(value)
    assert Decimal(text) == value
    assert "E" not in text
    assert not (text.endswith("0") and "." in text)
    assert not text.endswith(".")


@pytest.mark.parametrize(
    ("roman", "value"), [("I", 1), ("IV", 4), ("IX", 9), ("XIV", 14), ("XL", 40), ("AB", None)]
)
def test_roman_numbers(roman: str, value: int | None) -> None:
    assert roman_value(roman) == value


def test_fold_ignores_case_accents_apostrophes_and_punctuation() -> None:
    assert fold("Zambézia’s  PROVINCE,\nMozambique") == "zambezias province mozambique"


def test_an_index_is_built_once_and_reused() -> None:
    index = SourceIndex.of(SOURCE)
    assert check_summary("Notice is 30 days.", index).as_record()["counts"] == {
        "supported": 1,
        "unsupported": 0,
        "unchecked": 0,
    }
    assert check_summary("Notice is 31 days.", index).as_record()["counts"] == {
        "supported": 0,
        "unsupported": 1,
        "unchecked": 0,
    }


def test_headings_are_not_claims_but_a_line_of_names_is_checked() -> None:
    summary = (
        "License Terms\n\nI'm sure it is fine. I'm Acme Holdings.\n"
        "- Parties: Acme Holdings and Globex Corporation.\n\n### Oracle Corporation\n\nIt pays."
    )
    assert unsupported(summary) == [
        ("name", "Acme Holdings and Globex Corporation"),
        ("name", "Oracle Corporation"),
    ]


def test_patterns_tried_only_where_a_match_can_start_find_what_finditer_finds() -> None:
    from daemon.summary import grounding

    text = (
        "Under SectionA and Sec. 4.2(b), §§ 3-5 and ¶ 7, thirty-five (35) days, a30 b 12,500.50 "
        "éone Twenty one hundred and five percent, USD 1.5 million, 300 dollars, 1 March 2024, "
        "2024-03-01, 01/02/2024, March 2007, in 1999, Article XIV, Appendix B, clause 3(a), "
        "eighteen weeks, 45 per cent, $12k, fourteen pounds of flour, 7 calendar days.\n4.2 Scope\n"
    ) * 3
    starts = grounding._Starts(text, 0, len(text))
    patterns = [
        (grounding._MONEY_AFTER, starts.numbers),
        (grounding._PERCENT, starts.numbers),
        (grounding._DURATION, starts.numbers),
        (grounding._SECTION, starts.sections),
        (grounding._PLAIN_NUMBER, starts.numbers),
        (grounding._WORDS_NUMBER_PATTERN, starts.numbers),
        *((pattern, starts.digits) for pattern in grounding._DATES_FROM_DIGITS),
    ]
    for pattern, at in patterns:
        expected = [match.span() for match in pattern.finditer(text)]
        assert expected, pattern.pattern
        assert [match.span() for match in grounding._scan(pattern, text, 0, len(text), at)] == expected


def test_a_summarys_items_beyond_the_bound_are_counted_not_looked_up() -> None:
    from daemon.summary.grounding import MAX_CHECKED_ITEMS

    summary = " ".join(str(number) for number in range(2, MAX_CHECKED_ITEMS + 102))
    checks = check_summary(summary, SourceIndex.of("Nothing numbered here."))
    assert len(checks.items) == MAX_CHECKED_ITEMS
    assert checks.as_record()["counts"] == {
        "supported": 0,
        "unsupported": MAX_CHECKED_ITEMS,
        "unchecked": 100,
    }
