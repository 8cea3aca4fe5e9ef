"""Unit tests for daemon.document.extract.html: the main content of real pages from Debian
documentation packages (Sphinx, DocBook, Publican; see tests/fixtures/documents/html/manifest.jsonl),
generated pages with page furniture, odd encodings, and hostile HTML. Time bounds are on CPU time,
which waiting for a core on a loaded machine does not stretch.
"""

from __future__ import annotations

import time
from pathlib import Path

import lxml.html
import pytest

from daemon.document.extract import extract
from daemon.document.extract.html import MAX_TAG_TOKENS, decode_html, extract_html, refuse_hostile_tags
from daemon.document.types import Extracted, ExtractLimits, Format
from daemon.errors import DocumentError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents" / "html"
LIMITS = ExtractLimits()


def _extract(name: str, limits: ExtractLimits = LIMITS) -> Extracted:
    return extract((FIXTURES / name).read_bytes(), Format.HTML, limits)


def _refusal(data: bytes, limits: ExtractLimits = LIMITS) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        extract_html(data, limits)
    return caught.value


def _assert_heading_lines(extracted: Extracted) -> None:
    for heading in extracted.layout.headings:
        line = "#" * heading.level + " " + heading.title
        assert extracted.text[heading.start :].startswith(line)
        assert heading.start == 0 or extracted.text[heading.start - 2 : heading.start] == "\n\n"


def _page_headings(name: str, region: str) -> list[str]:
    """The h1-h6 of a page's content region, read independently with lxml (the titles as shown)."""
    root = lxml.html.document_fromstring((FIXTURES / name).read_bytes())
    found = root.xpath(f"{region}//*[self::h1 or self::h2 or self::h3 or self::h4 or self::h5 or self::h6]")
    return [" ".join(element.text_content().split()).rstrip("¶").rstrip() for element in found]


# (page, XPath of its content region, first heading, a phrase of its body, furniture that must be gone)
REAL_PAGES = [
    (
        "python-tutorial-appetite.html",
        "//*[@role='main']",
        "1. Whetting Your Appetite",
        "you may wish to perform a search-and-replace over a large number of text files",
        ["Previous topic", "Quick search", "Report a Bug", "This Page"],
    ),
    (
        "python-tutorial-controlflow.html",
        "//*[@role='main']",
        "4. More Control Flow Tools",
        "Perhaps the most well-known statement type is the if statement.",
        ["Previous topic", "Quick search", "Navigation"],
    ),
    (
        "debian-policy-ch-binary.html",
        "//*[@role='main']",
        "3. Binary packages",
        "all packages in the Debian distribution must be provided in the .deb file format",
        ["Table of Contents", "Previous topic", "Quick search"],
    ),
    (
        "developers-reference-l10n.html",
        "//*[@role='main']",
        "8. Internationalization and Translations",
        "it is part of your duty as a maintainer to be aware of issues of internationalization",
        ["Previous topic", "Quick search"],
    ),
    (
        "debian-reference-apa.en.html",
        "//body",
        "Appendix A. Appendix",
        "Setting up the LPR printer queue with a non-PostScript printer",
        ["Table of Contents", "Prev", "Home"],
    ),
    (
        "debian-faq-basic-defs.en.html",
        "//body",
        "Chapter 1. Definitions and overview",
        "This document gives frequently asked questions (with their answers!)",
        ["Table of Contents", "Prev", "Next"],
    ),
    (
        "debian-handbook-sect.apt-get.html",
        "//body",
        "6.2. aptitude, apt-get, and apt Commands",
        "APT is a vast project, whose original plans included a graphical interface.",
        ["Download the ebook", "Prev", "Next"],
    ),
]


@pytest.mark.parametrize(
    ("name", "region", "first", "phrase", "furniture"), REAL_PAGES, ids=[p[0] for p in REAL_PAGES]
)
def test_real_pages_keep_every_heading_and_the_body_but_not_the_furniture(
    name: str, region: str, first: str, phrase: str, furniture: list[str]
) -> None:
    started = time.process_time()
    extracted = _extract(name)
    assert time.process_time() - started < 2
    titles = [heading.title for heading in extracted.layout.headings]
    assert titles[0] == first
    # Every heading of the content region, in order (outside it: sidebars, "Navigation" and the like).
    expected = [
        title for title in _page_headings(name, region) if not title.startswith(("Table of Contents",))
    ]
    assert titles == expected
    assert phrase in extracted.text
    lines = {line.strip("- ").strip() for line in extracted.text.splitlines()}
    for word in furniture:
        assert word not in lines, word
    _assert_heading_lines(extracted)
    assert extracted.details["extractor"] == "docsumd-html"
    assert extracted.details["encoding"] == "utf-8"
    assert "decode_errors" not in extracted.details


def test_sphinx_pages_are_read_from_their_main_element() -> None:
    assert _extract("python-tutorial-controlflow.html").details["content"] == "main"
    assert _extract("debian-reference-apa.en.html").details["content"] == "body"


def test_the_html_page_and_its_rst_source_have_the_same_sections() -> None:
    extracted = _extract("python-tutorial-controlflow.html")
    assert len(extracted.layout.headings) == 23  # the reST source's titles (test_extract_markup)
    assert [heading.level for heading in extracted.layout.headings][:4] == [1, 2, 2, 2]
    assert ">>> def fib(n):    # write Fibonacci series up to n" in extracted.text  # <pre> lines kept


def test_sidebar_boxes_of_the_text_are_kept() -> None:
    text = _extract("debian-handbook-sect.apt-get.html").text
    assert "TIP Incremental updates" in text  # Publican's div.sidebar is a note, not page furniture


FURNITURE_TEXT = """# Widget recall notice

By the Safety Desk

The manufacturer recalls all blue widgets made in 2023 & 2024 because of a faulty hinge.

## What to do

3. Stop using the widget.
4. Contact the seller.
  - Keep the receipt.

## Affected models

Models

Model | Years
B-100 | 2023
B-200 | 2023–2024

Refunds are paid within 14 days.

serial  model
0001    B-100"""


def test_page_furniture_goes_and_the_article_stays() -> None:
    extracted = _extract("furniture.html")
    assert extracted.text == FURNITURE_TEXT
    assert extracted.details["title"] == "Widget recall notice"
    assert extracted.details["content"] == "main"
    assert [(heading.level, heading.title) for heading in extracted.layout.headings] == [
        (1, "Widget recall notice"),
        (2, "What to do"),
        (2, "Affected models"),
    ]


def test_a_page_of_nothing_but_furniture_is_read_whole() -> None:
    page = b"<html><body><nav><ul><li><a href='/a'>Alpha</a></li><li>Beta</li></ul></nav></body></html>"
    extracted = extract_html(page, LIMITS)
    assert extracted.details["content"] == "body (fallback)"
    assert extracted.text == "- Alpha\n- Beta"


# -- encodings -------------------------------------------------------------------------------------


def test_charset_from_a_meta_with_whatwg_aliases() -> None:
    extracted = _extract("latin1-meta.html")
    assert extracted.text == "# Menü\n\nCrème brûlée € 5"  # iso-8859-1 read as windows-1252: the euro sign
    assert extracted.details["encoding"] == "cp1252"
    assert extracted.details["title"] == "Café"


def test_utf16_by_its_byte_order_mark() -> None:
    extracted = _extract("utf16-bom.html")
    assert extracted.text == "# 日本語\n\nUTF-16 page."
    assert extracted.details["encoding"] == "utf-16-le"


def test_bytes_that_do_not_decode_are_replaced_and_reported() -> None:
    extracted = _extract("bad-utf8.html")
    assert extracted.text == "# Broken bytes\n\nCaf\ufffd \ufffd au lait."
    assert extracted.details["decode_errors"] == {"encoding": "utf-8", "first_byte": 54, "replaced": 2}


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b'<meta charset="shift_jis"><p>x</p>', "shift_jis"),
        (b"<meta charset=utf-16><p>x</p>", "utf-8"),
        (b'<meta charset="base64"><p>x</p>', "utf-8"),  # a bytes codec, not a text encoding
        (b'<meta charset="no-such-thing"><p>x</p>', "utf-8"),
        (b'<?xml version="1.0" encoding="ISO-8859-2"?><html><p>x</p></html>', "iso8859-2"),
        (b'\xef\xbb\xbf<meta charset="windows-1252"><p>x</p>', "utf-8"),  # the BOM wins
        (b"<p>no declaration</p>", "utf-8"),
    ],
)
def test_declared_encodings(data: bytes, encoding: str) -> None:
    assert decode_html(data)[1] == encoding


def test_xhtml_with_an_encoding_declaration() -> None:
    page = '<?xml version="1.0" encoding="iso-8859-15"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
    page += "<body><h1>Prix</h1><p>10 \u20ac</p></body></html>"
    assert extract_html(page.encode("iso-8859-15"), LIMITS).text == "# Prix\n\n10 \u20ac"


def test_entities_are_decoded_and_a_dtd_subset_is_never_expanded() -> None:
    extracted = _extract("dtd-entities.html")
    assert "& é ☺" in extracted.text
    assert "aaaa" not in extracted.text
    assert "&b;" in extracted.text


# -- hostile HTML ------------------------------------------------------------------------------------


def test_deeply_nested_divs_are_malformed() -> None:
    started = time.process_time()
    error = _refusal((FIXTURES / "deep-divs.html").read_bytes())
    assert error.reason == "malformed"
    assert "too deep" in error.message
    assert time.process_time() - started < 2
    shallow = b"<html><body>" + b"<div>" * 30 + b"text" + b"</div>" * 30 + b"</body></html>"
    assert extract_html(shallow, LIMITS).text == "text"
    assert _refusal(shallow, ExtractLimits(max_xml_depth=20)).reason == "malformed"


def test_a_tag_with_thousands_of_attributes_is_refused_before_parsing() -> None:
    started = time.process_time()
    error = _refusal((FIXTURES / "attributes.html").read_bytes())
    assert error.reason == "malformed"
    assert f"over {MAX_TAG_TOKENS} attributes" in error.message
    assert time.process_time() - started < 1


def test_the_attribute_count_cannot_be_hidden_in_quotes() -> None:
    attributes = " ".join(f'a{i}="x>y"' if i % 50 == 0 else f"a{i}=v" for i in range(MAX_TAG_TOKENS + 10))
    with pytest.raises(DocumentError):
        refuse_hostile_tags(f"<p {attributes}>t</p>")
    # An unclosed quote ends the scan at once (the parser reads the rest as one attribute value).
    started = time.process_time()
    refuse_hostile_tags('<p a="' + "x " * 2_000_000)
    assert time.process_time() - started < 1


def test_scripts_and_quoted_values_do_not_count_as_attributes() -> None:
    script = "<script>if (a <b " + "x = y; " * 2000 + "</script><p>text</p>"
    refuse_hostile_tags(script)
    style = '<p style="' + "color: red; " * 2000 + '">text</p>'
    refuse_hostile_tags(style)
    assert extract_html(style.encode(), LIMITS).text == "text"


def test_a_page_of_scripts_only_has_no_text() -> None:
    assert _refusal((FIXTURES / "scripts-only.html").read_bytes()).reason == "no_text"
    assert _refusal(b"   ").reason == "no_text"
    assert _refusal(b"<html><body><p hidden>x</p></body></html>").reason == "no_text"


def test_output_limit() -> None:
    error = _refusal(
        (FIXTURES / "python-tutorial-controlflow.html").read_bytes(), ExtractLimits(max_output_chars=1000)
    )
    assert error.reason == "too_large"


def test_control_characters_do_not_break_the_reader() -> None:
    page = b"<p>a\x00b\x01c<script>x</script>\x0b tail\x7f</p>"
    assert extract_html(page, LIMITS).text == "a b c tail"


def test_removing_many_siblings_takes_time_linear_in_them() -> None:
    # The page: 300,000 <img> siblings. Each removal used to add its tail to the text before
    # it, copying that text each time (a minute of CPU; bench/RESULTS.md).
    page = b"<html><body><p>text " + b"<img>\n" * 300_000 + b"</p></body></html>"
    started = time.process_time()
    assert extract_html(page, LIMITS).text == "text"
    assert time.process_time() - started < 8


def test_removed_elements_leave_their_tails_in_order() -> None:
    page = (
        b"<div>a<script>x</script>b<img>c<span>d</span><img>e<button>f</button><img></div>"
        b"<p hidden>g</p>h<p>i<img>j</p>"
    )
    assert extract_html(page, LIMITS).text == "abcde\n\nh\n\nij"


@pytest.mark.parametrize(
    "label",
    [
        "punycode",
        "idna",
        "undefined",
        "base64",
        "rot13",
        "uu",
        "hex",
        "zlib",
        "unicode_escape",
        "cp037",
        "utf-7",
    ],
)
def test_a_declared_charset_that_is_no_web_encoding_is_ignored(label: str) -> None:
    # Python's codecs decode with all of these (or raise other errors than a decoding error:
    # punycode, idna and undefined ended as internal_error); browsers know none of them.
    page = f'<meta charset="{label}"><p>caf\u00e9 a-b \\x41</p>'.encode()
    assert decode_html(page)[1:] == ("utf-8", {})
    assert extract_html(page, LIMITS).text == "caf\u00e9 a-b \\x41"


@pytest.mark.parametrize(
    ("label", "encoding"),
    [
        ("windows-874", "cp874"),
        ("x-mac-cyrillic", "mac-cyrillic"),
        ("windows-31j", "cp932"),
        ("koi8-u", "koi8-u"),
    ],
)
def test_whatwg_labels_python_lacks_are_read(label: str, encoding: str) -> None:
    assert decode_html(f'<meta charset="{label}"><p>x</p>'.encode())[1] == encoding


def test_every_web_encoding_reads_any_bytes() -> None:
    from daemon.document.extract.html import _WEB_ENCODINGS

    noise = bytes(range(256)) * 4
    for encoding in sorted(_WEB_ENCODINGS):
        text, found, _ = decode_html(f'<meta charset="{encoding}"><p>'.encode() + noise)
        assert found in _WEB_ENCODINGS  # itself, or what WHATWG reads it as (gbk: gb18030)
        assert text


@pytest.mark.parametrize(
    ("page", "said"),
    [
        (b'<p title="' + b"x" * 10_000_001 + b'">t</p>', "an attribute value over its parser's limit"),
        (b"<p>" + b"word " * 2_100_000 + b"</p>", "a run of text (or a comment) over its parser's limit"),
        (b"<div>" * 300 + b"t", "nests elements too deep"),
    ],
    ids=["attribute", "text", "depth"],
)
def test_what_is_over_the_parsers_limits_is_named(page: bytes, said: str) -> None:
    error = _refusal(page)
    assert error.reason == "malformed"
    assert said in error.message
    assert len(error.message) < 300
