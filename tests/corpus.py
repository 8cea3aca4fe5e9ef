"""Where the shared corpus is, and what each of its bad inputs must give (shared by unit and e2e tests)."""

from __future__ import annotations

from pathlib import Path

# The corpus lives in shared/ beside the repository checkout (in CI too).
CORPUS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

# shared/corpus/bad: the failure reason each refused input must get.
BAD_CORPUS_REASONS = {
    "empty.txt": "empty",
    "whitespace_only.txt": "whitespace_only",
    "binary_garbage.txt": "binary",
    "binary_gzip_as_txt.txt": "binary",
    "invalid_utf8_latin1.txt": "invalid_utf8",
    "invalid_utf8_midstream.txt": "invalid_utf8",
    "truncated_utf8_tail.txt": "invalid_utf8",
    "nul_bytes.txt": "nul_bytes",
}
# shared/corpus/bad: odd but valid inputs, with the encodings they may decode as.
BAD_CORPUS_DECODABLE = {
    "utf16_bom.txt": {"utf-16-le", "utf-16-be"},
    "one_giant_line.txt": {"utf-8"},
}


def corpus_text(corpus: Path, name: str) -> bytes:
    """The bytes of the corpus document ``docs/NAME``."""
    return (corpus / "docs" / name).read_bytes()
