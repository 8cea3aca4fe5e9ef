"""How many parts one edit changes, and how many parts a document needs (issue 41 phase 2, issue 40
item 6): the chunking of a checkout, on corpus texts, with no engine.

Six corpus texts are joined (``--docs``); sentences are inserted one at a time at random sentence
ends (``--edits``, seeded), and each edited text is cut again: the parts (token ids) it has that the
unedited text's cut has not are the parts an edit costs. Also with every run of whitespace made one
space (``flat``: no paragraph or line breaks, as a PDF without layout gives). And the parts over the
corpus's texts longer than the budget, against the fewest possible.

``--tree DIR`` imports ``daemon`` from another checkout (e.g. ``git archive f340fe6 | tar -x -C DIR``)
to measure the chunking before a change; the tokenizer is the ``--model`` folder's (the tiny model's).

    .venv/bin/python -m bench.chunk_edits --model TINY_DIR [--tree DIR] [--budgets 600,1400] [--label L]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

from bench.lib.results import result_path, write_result

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "docs"
DOCS = (
    "legal-common-gpl-3.txt",
    "legal-common-lgpl-2.1.txt",
    "legal-cal-agpl-3.0.txt",
    "paper-pmc-pone-0000217.txt",
    "paper-aclsum-p08-1116.txt",
    "legal-cal-lppl-1.3c.txt",
)
SENTENCE = "The parties agree that this clause was amended in writing. "


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="a model folder, for its tokenizer")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose chunking is measured")
    parser.add_argument("--budgets", default="600,1400")
    parser.add_argument("--edits", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--label", default=None, help="the result file's label (e.g. before, after)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree))
    from transformers import AutoTokenizer

    from daemon.summary.chunking import min_chunks, split_into_chunks, tokenize_text

    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    tokenizer.model_max_length = 1 << 30

    def cut(text: str, budget: int) -> list[tuple[int, ...]]:
        return [tuple(c.token_ids) for c in split_into_chunks(tokenize_text(tokenizer, text), budget, 64)]

    joined = "\n\n\n".join((CORPUS / name).read_text(encoding="utf-8") for name in DOCS)
    rows: list[dict[str, Any]] = []
    for layout, text in (("as_is", joined), ("flat", re.sub(r"\s+", " ", joined))):
        ends = [m.end() for m in re.finditer(r"\. ", text)]
        for budget in (int(b) for b in args.budgets.split(",")):
            base = cut(text, budget)
            rng = random.Random(args.seed)
            changed = []
            for _ in range(args.edits):
                at = rng.choice(ends)
                changed.append(len(set(cut(text[:at] + SENTENCE + text[at:], budget)) - set(base)))
            rows.append(
                {
                    "layout": layout,
                    "budget": budget,
                    "parts": len(base),
                    "changed_per_edit_mean": round(sum(changed) / len(changed), 2),
                    "changed": changed,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    totals = []
    for budget in (int(b) for b in args.budgets.split(",")):
        parts = fewest = 0
        for path in sorted(CORPUS.glob("*.txt")):
            tokens = tokenize_text(tokenizer, path.read_text(encoding="utf-8", errors="replace"))
            if len(tokens) > budget:
                parts += len(split_into_chunks(tokens, budget, 64))
                fewest += min_chunks(len(tokens), budget, 64)
        totals.append({"budget": budget, "corpus_parts": parts, "fewest_possible": fewest})
        print(json.dumps(totals[-1]), flush=True)
    result = {"tree": str(args.tree), "docs": DOCS, "edits": rows, "corpus": totals}
    write_result(result_path("chunk_edits", args.label), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
