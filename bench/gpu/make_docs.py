"""Documents for the GPU runs: every corpus text with its paragraphs in a shuffled order of its own.

    python bench/gpu/make_docs.py SRC_DIR DEST_DIR [--seed N]

The GPU check is meant to be re-run on documents the project has not seen; shuffling the corpus's
paragraphs with a seed of one's own gives such a set of the same kind and size without new texts.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--seed", type=int, default=2027)
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    files = sorted(args.source.glob("*.txt"))
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        paragraphs = [paragraph for paragraph in text.split("\n\n") if paragraph.strip()]
        random.Random(f"{args.seed}:{path.name}").shuffle(paragraphs)
        (args.dest / path.name).write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    print(f"{len(files)} documents, paragraphs shuffled with seed {args.seed}, in {args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
