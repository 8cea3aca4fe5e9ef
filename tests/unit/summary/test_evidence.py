"""Evidence: each summary sentence is linked to the parts whose words it carries, directly or through the
combine steps of a staged summary; parts of an uncut document follow its sections and paragraphs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from daemon.document.types import Heading, Layout
from daemon.summary.evidence import (
    MAX_PARTS,
    Part,
    Step,
    content_words,
    evidence_record,
    link_evidence,
    parts_of_text,
)

PARTS = [
    Part(1, "The Licensee must give thirty (30) days' written notice before termination.", (0, 80)),
    Part(
        2,
        "Each Contributor grants You a patent licence for its Contributions.",
        (80, 150),
        (2, 3),
        ("Patents",),
    ),
    Part(3, "The Work is provided AS IS, without warranties of any kind.", (150, 210), (3, 3), ("Warranty",)),
]


def linked_parts(summary: str, tree: Step | None = None) -> list[list[int]]:
    return [[score.part.id for score in entry.parts] for entry in link_evidence(summary, PARTS, tree)]


def test_each_sentence_points_to_the_part_that_carries_its_words() -> None:
    summary = "Contributors grant a patent licence.\n- Termination needs 30 days notice.\n- No warranty."
    assert linked_parts(summary) == [[2], [1], [3]]


def test_a_sentence_no_part_carries_has_no_evidence() -> None:
    assert linked_parts("The moon is made of cheese.") == [[]]


def test_the_record_carries_sentence_characters_pages_section_and_score() -> None:
    summary = "Intro.\nEach Contributor grants a patent licence."
    record = evidence_record(link_evidence(summary, PARTS))
    assert record[1]["sentence"] == 1
    assert record[1]["text"] == "Each Contributor grants a patent licence."
    assert record[1]["chars"] == [7, len(summary)]
    (part,) = record[1]["parts"]
    assert part["part"] == 2
    assert part["chars"] == [80, 150]
    assert part["pages"] == [2, 3]
    assert part["section"] == ["Patents"]
    assert 0.3 <= part["score"] <= 1.0


def test_staged_summaries_are_followed_down_their_combine_steps() -> None:
    # Part 3's own text has only one of the sentence's words, but its summary has both, and the final
    # step read that summary: the chain of steps leads to part 3, as strongly as its weakest step.
    parts = [
        Part(1, "Definitions of the Work, the Licensor and damages.", (0, 50)),
        Part(2, "Redistribution needs the notices kept.", (50, 90)),
        Part(3, "Liability is excluded to the extent allowed by law.", (90, 140)),
    ]
    part_summaries = [
        Step("Defines terms.", (1,)),
        Step("Keep notices when redistributing.", (2,)),
        Step("Nobody is liable; damages are excluded.", (3,)),
    ]
    tree = Step(
        "final", (Step("Terms and notices.", (part_summaries[0], part_summaries[1])), part_summaries[2])
    )
    (direct,) = link_evidence("Damages are excluded.", parts)
    (chained,) = link_evidence("Damages are excluded.", parts, tree)
    direct_scores = {score.part.id: score.score for score in direct.parts}
    assert direct_scores.get(3, 0.0) < 0.75
    assert (chained.parts[0].part.id, chained.parts[0].score) == (3, 1.0)


def test_at_most_max_parts_are_listed_best_first() -> None:
    parts = [Part(i, f"notice period {i} days licence", (i * 10, i * 10 + 10)) for i in range(1, 8)]
    (entry,) = link_evidence("The licence has a notice period.", parts)
    assert len(entry.parts) == MAX_PARTS
    assert [score.score for score in entry.parts] == sorted(
        (score.score for score in entry.parts), reverse=True
    )


def test_content_words_are_folded_and_stemmed_alike() -> None:
    assert content_words("The Licensor's grants, granted, granting.") == [
        "licensor",
        "grant",
        "grant",
        "grant",
    ]


SECTIONED = (
    "# Licence\n\nPreamble text here.\n\n## 1. Definitions\n\n"
    + "A definition sentence is here. " * 20
    + "\n\n## 2. Grant\n\n"
    + "The grant is broad and sweeping. " * 80
    + "\n\nClosing words."
)


def test_parts_of_a_text_follow_its_sections_and_cover_it() -> None:
    layout = Layout(
        headings=(
            Heading(1, "Licence", 0),
            Heading(2, "1. Definitions", SECTIONED.index("## 1.")),
            Heading(2, "2. Grant", SECTIONED.index("## 2.")),
        )
    )
    parts = parts_of_text(SECTIONED, layout, target_chars=1000)
    assert [part.id for part in parts] == list(range(1, len(parts) + 1))
    assert all(len(part.text) <= 1000 for part in parts)
    assert all(SECTIONED[part.chars[0] : part.chars[1]] == part.text for part in parts)
    # The definitions are a part of their own, and the grant section starts a new one.
    starts = [part.chars[0] for part in parts]
    assert SECTIONED.index("## 2.") in starts
    assert parts[-1].section == ("Licence", "2. Grant")
    covered = "".join(part.text for part in parts)
    assert "".join(covered.split()) == "".join(SECTIONED.split())


def test_parts_carry_pages() -> None:
    text = "Page one text.\fPage two text.\fPage three."
    layout = Layout(page_starts=(0, text.index("Page two"), text.index("Page three")))
    (part,) = parts_of_text(text, layout)
    assert part.pages == (1, 3)


@given(st.text(alphabet=st.sampled_from(list("ab. \n#\f")), max_size=3000), st.integers(50, 500))
def test_parts_never_overlap_or_exceed_the_target(text: str, target: int) -> None:
    parts = parts_of_text(text, target_chars=target)
    previous = 0
    for part in parts:
        start, end = part.chars
        assert previous <= start < end <= len(text)
        assert end - start <= target
        previous = end
    assert " ".join(part.text for part in parts).split() == text.split()
