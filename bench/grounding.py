"""The grounding check, measured: recall on injected errors, flags on untouched summaries.

Summaries (``--sets``):

* ``corpus-references``: the human references of the shared corpus (``reference_summary`` in
  ``../shared/corpus/docs/manifest.jsonl``: 11 licence descriptions, and for 12 papers the authors'
  abstract plus, for the 8 ACLSum ones, the challenge/approach/outcome summaries), against the document's
  text. The checker was developed on these (the development set).
* ``aclsum-references``: held out. The ACLSum test split's papers (the ``aclsum==0.1.2`` wheel, as
  ``bench/quality.py --dataset aclsum`` reads it) but the 3 that are corpus documents too, 97: their
  abstracts and human aspect summaries against the paper's text built from its S2ORC parse (abstract left
  out). Not looked at while the checker was written (bench/RESULTS.md says what was changed after the
  first look).
* ``source-sentences``: sentences of the corpus documents themselves that state a duration or a
  section reference (at most 8 a document, chosen with the seed), each checked as a one-sentence
  summary of its document: human references hardly have those, legal texts are full of them. Untouched
  they are supported by construction (a check of the checker); the injections into them measure the
  recall on durations and section numbers.
* ``demo-<strategy>``: the demo model's summaries of the corpus documents from ``bench/quality.py``'s
  JSON (``--quality``: each run's ``documents[].summary``), one set per strategy.

PMC abstracts in the manifest have their section labels glued to the next word (``BackgroundDespite``,
an artefact of how the corpus was made, not of the writing): those labels are set apart as headings
(blank lines around them) before anything is checked.

For each summary: its sentences (:func:`daemon.summary.sentences.split_sentences`) and the check
(:func:`daemon.summary.grounding.check_summary`); a sentence is **flagged** when one of its items is
unsupported. Then **injections**, one at a time, each into a fresh copy of the summary: a number, a date,
a duration, a section reference or a name of the summary (found by this file's own patterns, not the
checker's) is changed, seeded (``--seed``), into

* ``absent``: a value the source does not hold (checked here with plain text searches), what a model
  that invents a detail writes: the errors the check is for;
* ``swap``: a value of the same kind that the source holds elsewhere (another of its numbers, years or
  names): a misattribution, which a check of presence cannot see; measured to show that limit.

An injection is **caught** when the checker reports an unsupported item that overlaps the changed
characters. Every injection is recorded in the JSON (summary, sentence, kind, mode, before, after, caught).

    .venv/bin/python -m bench.grounding [--quality FILE] [--aclsum-wheel PATH] [--seed N] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
import sys
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.lib import REPO
from bench.lib.results import result_path, write_result
from daemon.summary.grounding import CHECKER_VERSION, SourceIndex, check_summary
from daemon.summary.sentences import split_sentences

CORPUS_DOCS: Final = Path("/work/shared/corpus/docs")
DEFAULT_QUALITY: Final = REPO / "bench" / "results" / "2026-12-05_cpu2_quality_smollm2-2048-issue40.json"
ADJUDICATION: Final = REPO / "bench" / "results" / "2026-12-05_cpu2_grounding_adjudication.json"
ACLSUM_ASPECTS: Final = ("challenge", "approach", "outcome")
_PMC_LABEL: Final = (
    r"(Background|Methods|Methodology|Methodology/Principal Findings|Principal Findings|Results|"
    r"Conclusions?|Conclusions/Significance|Significance)"
)
PMC_LABELS: Final = re.compile(rf"\b{_PMC_LABEL}(?=[A-Z])")
PMC_LABEL_LINE: Final = re.compile(_PMC_LABEL)

# -- what this file injects, found by its own patterns -------------------------------------------------

MONTHS: Final = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
NUMBER_WORDS: Final = [
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]
# Numbers a source may spell out, which the checker reads as numbers too.
# fmt: off
_SPELLED_WORDS: Final = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
)
# fmt: on
SPELLED: Final = dict(
    zip([str(n) for n in range(21)] + [str(n) for n in range(30, 100, 10)], _SPELLED_WORDS, strict=True)
)
UNITS: Final = r"(?:days?|weeks?|months?|years?|hours?|minutes?|seconds?)"
PATTERNS: Final = {
    "duration": re.compile(
        rf"\b(?P<n>\d+|{'|'.join(NUMBER_WORDS)})(?P<rest>[ -](?:calendar |business |working )?{UNITS})\b",
        re.IGNORECASE,
    ),
    "section": re.compile(
        r"(?P<word>\b(?:[Ss]ections?|[Cc]lauses?|[Aa]rticles?|[Pp]aragraphs?)|§)[ \t]*(?P<n>\d+(?:\.\d+)*)"
    ),
    "date": re.compile(
        rf"(?:\b(?P<month>{'|'.join(MONTHS)})[ \t]+(?:\d{{1,2}},?[ \t]+)?)?"
        r"(?<![\w.,])(?P<n>(?:19|20)\d\d)(?![\w]|[.,]\d)"
    ),
    "number": re.compile(r"(?<![\w.,/-])(?P<n>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w/]|[.,]\d)"),
}
NAME_RUN: Final = re.compile(
    r"\b[A-Z][a-zA-Z'-]+(?:[ \t]+(?:of[ \t]+|for[ \t]+|and[ \t]+)?[A-Z][a-zA-Z'-]+)+"
)
NAME_WORD: Final = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]{2,}(?:[ \t]+[A-Z][a-z]+)*\b")
# fmt: off
SMALL_START: Final = frozenset(
    [
        "The", "A", "An", "This", "These", "That", "In", "On", "For", "Our", "Their", "Its", "We",
        "It", "As", "At", "By", "Because", "When", "While", "Since", "If", "With",
    ]
)
# fmt: on
NAME_POOL: Final = (
    "Oracle Corporation",
    "Siemens",
    "Deutsche Telekom",
    "Stanford University",
    "the Linux Foundation",
    "Mozilla Foundation",
    "European Commission",
    "World Health Organization",
    "Carnegie Mellon University",
    "Microsoft Research",
    "IBM",
    "Google DeepMind",
    "Harvard Medical School",
    "Kenya",
    "Brazil",
    "Peter Novak",
    "Maria Lopez",
    "Acme Holdings",
    "Northwind Traders",
    "Globex Corporation",
    "Open Source Initiative",
    "Eclipse Foundation",
    "Max Planck Institute",
    "University of Toronto",
    "Tokyo",
)
NAME_WORD_POOL: Final = [
    "Foundation",
    "Institute",
    "Alliance",
    "Consortium",
    "Society",
    "Council",
    "Group",
    "Trust",
    "Agency",
    "Association",
    "Network",
    "Initiative",
    "Project",
    "Center",
    "Laboratory",
]


@dataclass(frozen=True)
class Summary:
    """One summary to check, with its source."""

    set: str
    doc: str
    kind: str  # "reference/abstract", "map_reduce", ...
    text: str
    source_key: str  # the document whose text is the source


@dataclass
class Injection:
    set: str
    doc: str
    summary_kind: str
    sentence: int
    kind: str
    mode: str
    before: str
    after: str
    chars: list[int] = field(default_factory=list)
    caught: bool = False
    flagged: list[str] = field(default_factory=list)


# -- loading -----------------------------------------------------------------------------------------


def clean_reference(text: str) -> str:
    """A reference as a person wrote it: PMC's glued section labels set on lines of their own."""
    return PMC_LABELS.sub(lambda match: f"\n\n{match.group(1)}\n\n", text).strip()


def corpus_references(docs_dir: Path) -> tuple[list[Summary], dict[str, str]]:
    """The corpus's human references and the texts of their documents."""
    summaries, sources = [], {}
    for line in (docs_dir / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        reference = row.get("reference_summary")
        if not reference:
            continue
        name = str(row["file"])
        sources[name] = (docs_dir / name).read_text(encoding="utf-8")
        if isinstance(reference, str):
            texts = {"description": reference}
        else:
            texts = {key: reference[key] for key in ("abstract", *ACLSUM_ASPECTS) if reference.get(key)}
        for key, text in texts.items():
            summaries.append(Summary("corpus-references", name, key, clean_reference(text), name))
    return summaries, sources


def aclsum_references(
    wheel: Path, split: str, skip: frozenset[str] = frozenset()
) -> tuple[list[Summary], dict[str, str]]:
    """ACLSum's ``split`` papers but those in ``skip`` (lower-case ids: the corpus's, so that the
    held-out set holds no development document): abstract and aspect summaries, and each paper's text."""
    from bench.quality import _aclsum_text

    summaries, sources = [], {}
    with zipfile.ZipFile(wheel) as archive:
        for line in archive.read(f"aclsum/dataset/{split}.jsonl").decode("utf-8").splitlines():
            row = json.loads(line)
            if str(row["id"]).lower() in skip:
                continue
            paper = json.loads(archive.read(f"aclsum/dataset/paper_jsons/{row['id']}.json"))
            name = f"aclsum-{row['id']}"
            sources[name] = _aclsum_text(paper)
            texts = {"abstract": paper.get("abstract") or ""}
            texts.update({key: row["summary"].get(key) or "" for key in ACLSUM_ASPECTS})
            for key, text in texts.items():
                if text.strip():
                    summaries.append(Summary("aclsum-references", name, key, text, name))
    return summaries, sources


def source_sentences(sources: dict[str, str], seed: int, per_document: int = 8) -> list[Summary]:
    """Sentences of each source that state a duration or a section reference, as one-sentence summaries."""
    chosen = []
    for name, text in sorted(sources.items()):
        found = [
            sentence.text
            for sentence in split_sentences(text)
            if len(sentence.text) < 400
            and (PATTERNS["duration"].search(sentence.text) or PATTERNS["section"].search(sentence.text))
        ]
        rng = random.Random(f"{seed}|{name}")
        for index, sentence in enumerate(sorted(rng.sample(found, min(per_document, len(found))))):
            chosen.append(Summary("source-sentences", name, f"sentence-{index}", sentence, name))
    return chosen


def demo_summaries(quality: Path) -> list[Summary]:
    """The demo model's summaries from a ``bench/quality.py`` JSON, a set per strategy."""
    data = json.loads(quality.read_text(encoding="utf-8"))
    summaries = []
    for run in data["runs"]:
        for row in run["documents"]:
            if row.get("summary"):
                name = f"demo-{run.get('label', run['strategy'])}"
                summaries.append(Summary(name, row["id"], run["strategy"], row["summary"], row["id"]))
    return summaries


# -- injecting ---------------------------------------------------------------------------------------


def candidates(summary: str, source: str) -> Iterator[tuple[str, int, int, str]]:
    """(kind, start, end, written) of each injectable span of ``summary``: durations, section numbers,
    years, other numbers and names, each character in at most one."""
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    sentences = split_sentences(summary)

    def in_sentence(start: int) -> bool:  # not a list marker ("2." of a numbered list)
        return any(sentence.start <= start < sentence.end for sentence in sentences)

    for kind in ("duration", "section", "date", "number"):
        for match in PATTERNS[kind].finditer(summary):
            start, end = match.span("n")
            if free(*match.span()) and in_sentence(start):
                taken.append(match.span())
                value = match.group("n")
                if kind == "number" and value.replace(",", "") in ("0", "1"):
                    continue
                yield kind, start, end, value
    for pattern in (NAME_RUN, NAME_WORD):
        for match in pattern.finditer(summary):
            start, end = match.span()
            written = match.group()
            first, _, rest = written.partition(" ")
            if first in SMALL_START and rest:
                start += len(first) + 1
                written = rest
            if free(start, end) and in_sentence(start) and len(written) > 3 and _is_name_in(written, source):
                taken.append((start, end))
                yield "name", start, end, written


def _is_name_in(written: str, source: str) -> bool:
    """Whether the source writes ``written`` capitalised inside a sentence: a name there, not a word
    that a summary's heading capitalised ("History")."""
    pattern = r"[\s]+".join(map(re.escape, written.split()))
    return re.search(rf"(?<=[a-z,;(] ){pattern}\b", source) is not None


def replacement(kind: str, written: str, source: str, rng: random.Random, mode: str) -> str | None:
    """What ``written`` (of ``kind``) becomes: a value the source lacks (``absent``) or one it holds
    elsewhere (``swap``); None when there is none."""
    if mode == "swap":
        pool = [value for value in _source_values(kind, source) if value.lower() != written.lower()]
        return rng.choice(sorted(pool)) if pool else None
    for _ in range(50):
        candidate = _invented(kind, written, rng)
        if candidate is not None and candidate != written and not _in_source(kind, candidate, source):
            return candidate
    return None


def _invented(kind: str, written: str, rng: random.Random) -> str | None:
    if kind == "name":
        words = written.split()
        if len(words) > 1 and rng.random() < 0.5:  # one word of the name changed: "... Zero Foundation"
            position = rng.randrange(len(words))
            words[position] = rng.choice(NAME_WORD_POOL)
            return " ".join(words)
        return rng.choice(NAME_POOL)
    if written.lower() in NUMBER_WORDS:
        return rng.choice([word for word in NUMBER_WORDS if word != written.lower()])
    if kind == "date":
        return str(int(written) + rng.choice([-7, -5, -3, -2, -1, 1, 2, 3, 5, 7]))
    return _changed_number(written, rng)


def _changed_number(written: str, rng: random.Random) -> str:
    """Another number written the same way: one digit changed (not the leading one to zero)."""
    digits = [i for i, char in enumerate(written) if char.isdigit()]
    position = rng.choice(digits)
    options = [d for d in "0123456789" if d != written[position] and not (position == digits[0] and d == "0")]
    return written[:position] + rng.choice(options) + written[position + 1 :]


def _in_source(kind: str, value: str, source: str) -> bool:
    """Whether the source holds ``value`` in any way the checker could read it (plain searches)."""
    if kind == "name":
        return value.lower().removeprefix("the ") in " ".join(source.split()).lower()
    if value.lower() in NUMBER_WORDS:
        value = str(NUMBER_WORDS.index(value.lower()) + 2)
    word = SPELLED.get(value)
    if word is not None and re.search(rf"\b{word}\b", source, re.IGNORECASE):
        return True
    plain = value.replace(",", "")
    numbers = set()
    for match in re.findall(r"\d[\d,]*(?:\.\d+)?", source):  # "1,250,000" and "[18,19]" alike
        numbers |= {match.replace(",", ""), *match.split(",")}
    numbers |= {n.rstrip("0").rstrip(".") for n in numbers if "." in n}
    return plain in numbers or plain.rstrip("0").rstrip(".") in numbers


def _source_values(kind: str, source: str) -> set[str]:
    if kind == "name":
        return {match.group() for match in NAME_RUN.finditer(source) if len(match.group()) < 40}
    if kind == "section":
        return set(re.findall(r"(?m)^\s*(\d+(?:\.\d+)*)[.)]?\s+[A-Z]", source))
    if kind == "date":
        return set(re.findall(r"\b(?:19|20)\d\d\b", source))
    return {
        value for value in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])", source) if value not in ("0", "1")
    }


def inject(summary: Summary, source: str, index: SourceIndex, rng: random.Random) -> list[Injection]:
    """One injection per injectable span and mode."""
    sentences = split_sentences(summary.text)
    done = []
    for kind, start, end, written in candidates(summary.text, source):
        for mode in ("absent", "swap"):
            new = replacement(kind, written, source, rng, mode)
            if new is None:
                continue
            changed = summary.text[:start] + new + summary.text[end:]
            checks = check_summary(changed, index)
            span = (start, start + len(new))
            caught = [item for item in checks.unsupported if item.start < span[1] and item.end > span[0]]
            sentence = next((s.index for s in sentences if s.start <= start < s.end), -1)
            done.append(
                Injection(
                    set=summary.set,
                    doc=summary.doc,
                    summary_kind=summary.kind,
                    sentence=sentence,
                    kind=kind,
                    mode=mode,
                    before=written,
                    after=new,
                    chars=list(span),
                    caught=bool(caught),
                    flagged=[f"{item.kind.value}:{item.text}" for item in caught],
                )
            )
    return done


# -- measuring ---------------------------------------------------------------------------------------


def untouched(summary: Summary, index: SourceIndex, adjudicated: dict[str, str]) -> dict[str, Any]:
    """The check of an untouched summary: its sentences, the flagged ones, each unsupported item with
    the adjudication of it when there is one (``absent``: the source really lacks it)."""
    checks = check_summary(summary.text, index)
    # The PMC labels set apart by clean_reference are headings the writer did not write as sentences.
    split = split_sentences(summary.text)
    sentences = [s for s in split if not PMC_LABEL_LINE.fullmatch(s.text)]
    labels = {s.index for s in split} - {s.index for s in sentences}
    items = []
    for item in checks.unsupported:
        if item.sentence in labels:
            continue
        key = f"{summary.doc}|{summary.kind}|{item.text}"
        items.append({**item.as_record(), "adjudication": adjudicated.get(key)})
    # A false alarm: an item the source holds in a form a reader accepts ("checker"), or a misspelling
    # ("typo"), or one no person has read yet (counted against the check).
    false_sentences = {item["sentence"] for item in items if item["adjudication"] != "absent"}
    checker_sentences = {item["sentence"] for item in items if item["adjudication"] not in ("absent", "typo")}
    return {
        "set": summary.set,
        "doc": summary.doc,
        "summary_kind": summary.kind,
        "sentences": len(sentences),
        "items": len(checks.items),
        "supported": checks.supported_count,
        "flagged_sentences": len({item["sentence"] for item in items}),
        "flagged_not_adjudicated_absent": len(false_sentences),
        "flagged_checker_error": len(checker_sentences),
        "unsupported": items,
    }


def figures(rows: Sequence[dict[str, Any]], injections: Sequence[Injection]) -> dict[str, Any]:
    """Per summary set: flag rates on untouched summaries, recall per kind and mode."""
    out: dict[str, Any] = {}
    sets = sorted({row["set"] for row in rows} | {injection.set for injection in injections})
    for name in sets:
        mine = [row for row in rows if row["set"] == name]
        sentences = sum(row["sentences"] for row in mine)
        flagged = sum(row["flagged_sentences"] for row in mine)
        false = sum(row["flagged_not_adjudicated_absent"] for row in mine)
        checker = sum(row["flagged_checker_error"] for row in mine)
        items = sum(row["items"] for row in mine)
        supported = sum(row["supported"] for row in mine)
        entry: dict[str, Any] = {
            "summaries": len(mine),
            "sentences": sentences,
            "flagged_sentences": flagged,
            "flagged_share": round(flagged / sentences, 4) if sentences else None,
            "false_alarm_sentences": false,
            "false_alarm_share": round(false / sentences, 4) if sentences else None,
            "checker_error_sentences": checker,
            "checker_error_share": round(checker / sentences, 4) if sentences else None,
            "summaries_with_unsupported": sum(1 for row in mine if row["flagged_sentences"]),
            "items": items,
            "grounding_precision": round(supported / items, 4) if items else None,
            "unsupported_by_kind": dict(Counter(i["kind"] for row in mine for i in row["unsupported"])),
            "recall": {},
        }
        for mode in ("absent", "swap"):
            chosen = [i for i in injections if i.set == name and i.mode == mode]
            by_kind: dict[str, list[bool]] = defaultdict(list)
            for injection in chosen:
                by_kind[injection.kind].append(injection.caught)
            entry["recall"][mode] = {
                "injections": len(chosen),
                "caught": sum(i.caught for i in chosen),
                "recall": round(statistics.fmean(i.caught for i in chosen), 4) if chosen else None,
                "by_kind": {
                    kind: {"n": len(flags), "recall": round(statistics.fmean(flags), 4)}
                    for kind, flags in sorted(by_kind.items())
                },
            }
        out[name] = entry
    return out


def table(result: dict[str, Any]) -> str:
    head = f"{'set':<22} {'sents':>5} {'flag%':>6} {'FA%':>5} {'prec':>5} {'inj':>5} {'recall':>6}"
    head += "  per kind (absent)"
    lines = [head, "-" * len(head)]
    for name, entry in result.items():
        absent = entry["recall"]["absent"]
        kinds = ", ".join(f"{k} {v['recall']:.2f}/{v['n']}" for k, v in absent["by_kind"].items())
        recall = f"{absent['recall']:.3f}" if absent["recall"] is not None else "-"
        precision = entry["grounding_precision"]
        lines.append(
            f"{name:<22} {entry['sentences']:>5} {100 * (entry['flagged_share'] or 0):>6.1f} "
            f"{100 * (entry['false_alarm_share'] or 0):>5.1f} {precision or 0:>5.2f} "
            f"{absent['injections']:>5} {recall:>6}  {kinds}"
        )
        swap = entry["recall"]["swap"]
        if swap["injections"]:
            lines.append(f"{'':<22} swap (misattribution): {swap['caught']}/{swap['injections']} caught")
    return "\n".join(lines)


def _seed_for(seed: int, summary: Summary) -> int:
    digest = hashlib.sha256(f"{seed}|{summary.set}|{summary.doc}|{summary.kind}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=Path, default=CORPUS_DOCS)
    parser.add_argument("--quality", type=Path, default=DEFAULT_QUALITY, help="bench/quality.py JSON")
    parser.add_argument("--aclsum-wheel", type=Path, default=None, help="aclsum==0.1.2 wheel (held-out set)")
    parser.add_argument("--aclsum-split", default="test")
    parser.add_argument("--sets", default="all", help="comma-separated set prefixes, or all")
    parser.add_argument("--seed", type=int, default=40)
    parser.add_argument("--out", type=Path, default=result_path("grounding"))
    args = parser.parse_args(argv)

    summaries, sources = corpus_references(args.docs)
    summaries += source_sentences(sources, args.seed)
    if args.quality.is_file():
        summaries += demo_summaries(args.quality)
    if args.aclsum_wheel is not None:
        development = frozenset(name.removeprefix("paper-aclsum-").removesuffix(".txt") for name in sources)
        held, held_sources = aclsum_references(args.aclsum_wheel, args.aclsum_split, development)
        summaries += held
        sources.update(held_sources)
    if args.sets != "all":
        wanted = tuple(args.sets.split(","))
        summaries = [summary for summary in summaries if summary.set.startswith(wanted)]
    adjudicated: dict[str, str] = {}
    if ADJUDICATION.is_file():
        adjudicated = {
            f"{row['doc']}|{row['summary_kind']}|{row['text']}": row["verdict"]
            for row in json.loads(ADJUDICATION.read_text(encoding="utf-8"))["items"]
        }
    indexes = {key: SourceIndex.of(text) for key, text in sources.items()}
    rows, injections = [], []
    for summary in summaries:
        index = indexes[summary.source_key]
        rows.append(untouched(summary, index, adjudicated))
        rng = random.Random(_seed_for(args.seed, summary))
        injections += inject(summary, sources[summary.source_key], index, rng)
    result = figures(rows, injections)
    output = {
        "benchmark": "grounding",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "checker": CHECKER_VERSION,
        "seed": args.seed,
        "quality_file": str(args.quality.relative_to(REPO))
        if args.quality.is_relative_to(REPO)
        else str(args.quality),
        "figures": result,
        "summaries": rows,
        "injections": [asdict(injection) for injection in injections],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, output, indent=1)
    print(table(result))
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
