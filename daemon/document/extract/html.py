"""HTML: the main content of a page as text in the heading-line convention.

Read with lxml's HTML parser (libxml2) and a walk of our own, not with trafilatura: on real
documentation pages (Sphinx, DocBook, Publican) the figures favoured it for speed and for keeping
every heading and the whole body (the comparison is in the report of issue 22, and
``tests/unit/document/test_extract_html.py`` holds the pages). The steps:

1. Bytes to text: a byte-order mark, else the ``<meta charset>`` (or ``http-equiv``) or XML
   declaration in the first 1024 bytes, else UTF-8, WHATWG's label aliases applied (``iso-8859-1``
   is windows-1252). A declared encoding counts only if it is one of the WHATWG Encoding
   Standard's (what browsers read); any other (``punycode``, ``idna``, ``base64``, EBCDIC) is
   ignored, as browsers ignore it. Bytes that do not decode are replaced, and
   ``details["decode_errors"]`` says so.
2. Hostile structure refused before parsing (``malformed``): a tag with more than
   :data:`MAX_TAG_TOKENS` attribute-like tokens (libxml2's HTML parser checks each attribute
   against all the others: 40,000 attributes on one tag take seconds), and, after parsing, what is
   over the parser's own limits (nesting over 256, an attribute value or a run of text over
   10,000,000 characters: libxml2 drops the rest of the page) or nesting over ``max_xml_depth``.
3. What is never content goes: scripts, styles, templates, forms' controls, embedded objects,
   hidden elements (``hidden``, ``aria-hidden``, ``display: none``), Sphinx's heading anchors.
4. The main content is chosen: the largest ``<main>`` or ``role="main"`` element if it holds a fair
   share of the page's text, else the page's only (or dominant) ``<article>``, else ``<body>``.
   Inside it, page furniture goes: navigation, page headers and footers, sidebars, breadcrumbs,
   cookie and consent banners, share buttons (by element, ARIA role, and class or id words). If
   nothing is left, the whole body is read instead (``details["content"] == "body (fallback)"``).
5. Written: ``h1``-``h6`` as heading lines (recorded in the layout), paragraphs and other blocks as
   paragraphs, lists one item a line (``-`` or the ``<ol>`` number, nested items indented), tables
   one row a line with cells joined by ``" | "``, ``<pre>`` with its lines, ``<br>`` as a space.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from typing import Any, Final

from lxml import etree

from daemon.document.extract.markup import TextWriter, list_label
from daemon.document.text import one_line, replace_each
from daemon.document.types import Extracted, ExtractLimits, Format
from daemon.errors import DocumentError

MAX_TAG_TOKENS: Final = 500
"""Whitespace-separated tokens (an attribute is one to three) in one tag, at most: no real page comes
near it, and libxml2's HTML parser spends time quadratic in a tag's attribute count."""
_PRESCAN_BYTES: Final = 1024
_MAIN_SHARE: Final = 0.2
"""A ``<main>`` holding less of the page's text than this is a wrapper of something else."""
_ARTICLE_SHARE: Final = 0.5

# -- bytes to text --------------------------------------------------------------------------------

_BOMS: Final = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_META_CHARSET: Final = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([-\w.:]+)", re.IGNORECASE)
_XML_ENCODING: Final = re.compile(rb"\s*<\?xml[^>]*?encoding\s*=\s*[\"']([-\w.:]+)", re.IGNORECASE)
_XML_DECLARATION: Final = re.compile(r"\A\s*<\?xml[^>]*>")
# WHATWG's Encoding standard folds these labels into another encoding: pages say "iso-8859-1" and
# mean windows-1252, say "utf-16" in a meta (which a UTF-16 page cannot have) and mean UTF-8.
_LABEL_ALIASES: Final = {
    **dict.fromkeys(
        ("iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii", "cp819", "ibm819"),
        "cp1252",
    ),
    **dict.fromkeys(("utf-16", "utf-16le", "utf-16be", "utf-32", "utf-7", "unicode"), "utf-8"),
    **dict.fromkeys(("gb2312", "gbk", "x-gbk", "chinese", "csgb2312"), "gb18030"),
    **dict.fromkeys(("iso-8859-9", "latin5", "l5"), "cp1254"),
    **dict.fromkeys(("tis-620", "iso-8859-11"), "cp874"),
    **dict.fromkeys(("euc-kr", "ks_c_5601-1987", "korean"), "cp949"),
    **dict.fromkeys(("x-mac-cyrillic", "x-mac-ukrainian"), "mac-cyrillic"),
    **dict.fromkeys(("windows-31j", "x-sjis", "ms932", "csshiftjis"), "cp932"),
    "windows-874": "cp874",
    "iso-8859-8-i": "iso8859-8",
}
# The encodings of the WHATWG Encoding Standard, as Python's codecs name them: a declared encoding
# must be one of these. Python's codecs also decode with "punycode", "idna", "undefined" (which
# raise errors other than a decoding error) and bytes-to-bytes codecs such as "base64".
_WEB_ENCODINGS: Final = frozenset(
    codecs.lookup(name).name
    for name in (
        "utf-8", "cp866", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6",
        "iso8859-7", "iso8859-8", "iso8859-10", "iso8859-13", "iso8859-14", "iso8859-15",
        "iso8859-16", "koi8-r", "koi8-u", "mac-roman", "mac-cyrillic", "cp874", "cp1250", "cp1251",
        "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258", "gbk", "gb18030",
        "big5", "big5hkscs", "euc_jp", "iso2022_jp", "shift_jis", "cp932", "euc_kr", "cp949",
    )
)  # fmt: skip


def decode_html(data: bytes) -> tuple[str, str, dict[str, Any]]:
    """``(text, encoding, problems)``: the page as text, the encoding it was read in, and, if some
    bytes did not decode (they are replaced by U+FFFD), ``{"decode_errors": {...}}``."""
    encoding = _declared_encoding(data)
    body = data
    for bom, codec in _BOMS:
        if data.startswith(bom):
            encoding, body = codec, data[len(bom) :]
            break
    try:
        return body.decode(encoding), encoding, {}
    except UnicodeDecodeError as error:
        text = body.decode(encoding, "replace")
        problem = {"encoding": encoding, "first_byte": error.start, "replaced": text.count("\ufffd")}
        return text, encoding, {"decode_errors": problem}


def _declared_encoding(data: bytes) -> str:
    head = data[:_PRESCAN_BYTES]
    found = _XML_ENCODING.match(head) or _META_CHARSET.search(head)
    if found is None:
        return "utf-8"
    label = found.group(1).decode("ascii", "replace").lower()
    label = _LABEL_ALIASES.get(label, label)
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return "utf-8"
    return name if name in _WEB_ENCODINGS else "utf-8"


# -- hostile structure ---------------------------------------------------------------------------

# A start tag, possessive throughout (linear on any input): name, then unquoted runs and quoted
# strings up to the closing ">"; an unclosed quote ends the match where it starts.
_START_TAG: Final = re.compile(r"<[A-Za-z][^\s/>]*+((?:[^>\"']++|\"[^\"]*+\"|'[^']*+')*+)")
# What a tag's attributes are made of: whitespace, quoted values, and runs of anything else.
_TAG_PIECE: Final = re.compile(r"\s++|\"[^\"]*+\"|'[^']*+'|[^\s\"']++")
_RAW_TEXT_END: Final = {
    "script": re.compile(r"</script", re.IGNORECASE),
    "style": re.compile(r"</style", re.IGNORECASE),
}


def refuse_hostile_tags(text: str) -> None:
    """``DocumentError("malformed")`` if a tag has over :data:`MAX_TAG_TOKENS` tokens outside its
    quoted values. Script and style contents are skipped as the parser skips them."""
    position = 0
    while True:
        match = _START_TAG.search(text, position)
        if match is None:
            return
        # A token takes two characters at least (itself and a space): shorter tags need no count.
        long_tag = match.end(1) - match.start(1) > 2 * MAX_TAG_TOKENS
        if long_tag and _over_max_tokens(text, match.start(1), match.end(1)):
            raise DocumentError(
                "malformed",
                f"this HTML has a tag with over {MAX_TAG_TOKENS} attributes (at character {match.start()})",
            )
        position = max(match.end(), match.start() + 1)
        if text[match.start() + 1] in "sS":
            position = _after_raw_text(text, match.start(), position)


def _over_max_tokens(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (a tag's attributes) holds over :data:`MAX_TAG_TOKENS` tokens:
    runs between whitespace, a quoted value counting as part of its run. Counted piece by piece, up
    to the limit: the cost follows the limit, not the tag (whose values may be megabytes)."""
    tokens = 0
    after_space = True
    for piece in _TAG_PIECE.finditer(text, start, end):
        space = text[piece.start()].isspace()
        if after_space and not space:
            tokens += 1
            if tokens > MAX_TAG_TOKENS:
                return True
        after_space = space
    return False


def _after_raw_text(text: str, start: int, position: int) -> int:
    """Where scanning goes on after the tag at ``start``: past the end of a script's or style's
    contents (which the parser does not read as tags), else at ``position``."""
    name = text[start + 1 : start + 7].lower()
    for raw, end in _RAW_TEXT_END.items():
        if name.startswith(raw) and not name[len(raw) : len(raw) + 1].isalnum():
            closing = end.search(text, position)
            return len(text) if closing is None else closing.end()
    return position


# -- parsing and cleaning --------------------------------------------------------------------------

# Never content: code, styling, embedded objects and form controls.
_NEVER_CONTENT: Final = (
    "script", "style", "noscript", "template", "head", "iframe", "frame", "frameset", "noframes",
    "object", "embed", "applet", "svg", "canvas", "map", "audio", "video", "picture", "img",
    "button", "select", "option", "input", "textarea", "datalist", "dialog",
)  # fmt: skip
# Page furniture: dropped wherever it is, except the header and aside of the content itself.
_FURNITURE_TAGS: Final = frozenset({"nav", "header", "footer", "aside", "menu"})
_FURNITURE_ROLES: Final = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "toolbar",
     "dialog", "alertdialog", "alert"}
)  # fmt: skip
_FURNITURE_WORDS: Final = frozenset(
    {"nav", "navbar", "navigation", "menu", "menubar", "sphinxsidebar", "breadcrumb", "breadcrumbs",
     "footer", "site-footer", "page-footer", "site-header", "masthead", "related", "share",
     "sharing", "social", "skip", "skip-link", "skiplink", "advert", "advertisement", "ads",
     "newsletter", "popup", "modal", "banner", "headerlink", "toc", "list-of-tables",
     "list-of-figures", "list-of-examples", "docnav"}
)  # fmt: skip
_FURNITURE_PREFIXES: Final = ("nav", "breadcrumb", "cookie", "consent", "gdpr", "advert", "share-", "social-")
_FURNITURE_PARTS: Final = ("cookie", "consent", "gdpr")
# A class "sidebar" is as often a boxed note of the text (docutils, DocBook, Publican) as a column of
# links; an id "sidebar" is the page's own column.
_FURNITURE_IDS: Final = frozenset({"sidebar", "side-bar", "left-sidebar", "right-sidebar", "menu", "toc"})
_HIDDEN_STYLE: Final = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


_DROPPED: Final = "DOCSUMD-DROPPED"
"""What an element to remove is renamed to: the HTML parser lower-cases every name it reads."""

# Controls that XML text cannot hold (all C0 but tab, line feed, carriage return; DEL): libxml2's
# HTML parser keeps them, and lxml then refuses to move such text (dropping an element moves its tail).
_XML_INCOMPATIBLE: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _parse(text: str, limits: ExtractLimits) -> etree._Element:
    # lxml.etree's parser, not lxml.html's: the latter looks up a Python class for every element.
    parser = etree.HTMLParser(
        remove_comments=True,
        remove_pis=True,
        no_network=True,
        huge_tree=False,
        default_doctype=False,
        collect_ids=False,
    )
    # lxml takes no encoding declaration in a str (the text is decoded already).
    text = replace_each(_XML_INCOMPATIBLE, " ", _XML_DECLARATION.sub("", text, count=1))
    try:
        root = etree.fromstring(text, parser)
    except (etree.LxmlError, ValueError) as exc:
        raise DocumentError("malformed", f"this HTML cannot be parsed: {exc}") from None
    if root is None:  # nothing but whitespace
        raise DocumentError("no_text", "this HTML holds no text")
    for entry in parser.error_log:
        if entry.type_name == "ERR_RESOURCE_LIMIT":
            raise DocumentError("malformed", f"this HTML {_over_parser_limit(entry.message)}")
    # libxml2 stops at 255 levels itself (the resource limit above); a lower limit is walked here.
    if limits.max_xml_depth < 255 and _max_depth(root, limits.max_xml_depth) > limits.max_xml_depth:
        raise DocumentError("malformed", f"this HTML nests elements over {limits.max_xml_depth} deep")
    return root


def _over_parser_limit(message: str) -> str:
    """What a libxml2 resource-limit error says, in words (its messages differ between versions)."""
    said = " ".join(message.split())
    lowered = said.lower()
    if "depth" in lowered:
        what = "nests elements too deep for its parser (over 255 levels)"
    elif "value" in lowered or "attribute" in lowered:
        what = "has an attribute value over its parser's limit of 10,000,000 characters"
    elif "text" in lowered or "buffer" in lowered:
        what = "has a run of text (or a comment) over its parser's limit of 10,000,000 characters"
    else:
        what = "is over a limit of its parser"
    return f"{what}: libxml2 says {said!r}"


def _max_depth(root: etree._Element, limit: int) -> int:
    """The nesting depth of the tree (iterative; stops counting past ``limit``)."""
    deepest = 0
    stack: list[tuple[etree._Element, int]] = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in element)
    return deepest


def _drop(elements: Iterable[etree._Element]) -> None:
    """Remove the elements, keeping each one's tail text (the words after it are its parent's).

    Marked first (renamed), then each parent's children gone through once, and the texts that end
    up together joined once: adding each removed element's tail to the text before it, one at a
    time, copied that text each time (quadratic in the siblings removed), and so does lxml reading a
    text made of many text nodes (which removing without moving the tails would leave). Only one
    element object at a time is held, not one per element removed."""
    parents: dict[etree._Element, None] = {}
    for element in elements:
        parent = element.getparent()
        if parent is not None:
            element.tag = _DROPPED
            parents[parent] = None
    for parent in parents:
        _drop_children(parent)


def _drop_children(parent: etree._Element) -> None:
    before: etree._Element | None = None  # the kept child whose tail the texts join (None: parent.text)
    texts = [parent.text or ""]
    child = next(iter(parent), None)
    while child is not None:
        following = child.getnext()
        if child.tag == _DROPPED:
            texts.append(child.tail or "")
            parent.remove(child)
        else:
            _join_texts(parent, before, texts)
            before, texts = child, [child.tail or ""]
        child = following
    _join_texts(parent, before, texts)


def _join_texts(parent: etree._Element, before: etree._Element | None, texts: list[str]) -> None:
    if len(texts) == 1:
        return  # nothing removed here: the text stays as it is
    joined = "".join(texts) or None
    if before is None:
        parent.text = joined
    else:
        before.tail = joined


def _is_hidden(element: etree._Element) -> bool:
    return (
        element.get("hidden") is not None
        or (element.get("aria-hidden") or "").strip().lower() == "true"
        or bool(_HIDDEN_STYLE.search(element.get("style") or ""))
    )


def _is_furniture(element: etree._Element) -> bool:
    role = (element.get("role") or "").strip().lower()
    if role in _FURNITURE_ROLES:
        return True
    words = [word.lower() for word in (element.get("class") or "").split()]
    identifier = (element.get("id") or "").strip().lower()
    if identifier in _FURNITURE_IDS:
        return True
    return any(_furniture_word(word) for word in [*words, identifier] if word)


def _furniture_word(word: str) -> bool:
    return (
        word in _FURNITURE_WORDS
        or word.startswith(_FURNITURE_PREFIXES)
        or any(part in word for part in _FURNITURE_PARTS)
    )


def _clean(root: etree._Element) -> None:
    """Remove what is never content, hidden or not."""
    _drop(root.iter(*_NEVER_CONTENT))
    _drop(element for element in root.iter() if isinstance(element.tag, str) and _is_hidden(element))


def _main_content(root: etree._Element) -> tuple[etree._Element, str]:
    """The element holding the page's main content, and which rule chose it."""
    body = root.find("body")
    page: etree._Element = body if body is not None else root
    total = max(_length(page), 1)
    mains = [*root.iter("main"), *(e for e in root.iter() if e.get("role") == "main")]
    if mains:
        best = max(mains, key=_length)
        if _length(best) >= _MAIN_SHARE * total:
            return best, "main"
    articles = list(root.iter("article"))
    if articles:
        best = max(articles, key=_length)
        if len(articles) == 1 or _length(best) >= _ARTICLE_SHARE * total:
            return best, "article"
    return page, "body"


def _length(element: etree._Element) -> int:
    """The characters of text in ``element`` (counted by libxml2, not by joining strings here)."""
    return len(etree.tostring(element, method="text", encoding="unicode", with_tail=False))


def _words(element: etree._Element) -> str:
    return "".join(element.itertext())


def _is_page_furniture(element: etree._Element, container: etree._Element) -> bool:
    if element.tag in _FURNITURE_TAGS and not _belongs_to_content(element, container):
        return True
    return _is_furniture(element)


def _belongs_to_content(element: etree._Element, container: etree._Element) -> bool:
    """A header or aside inside an article or section (its title, a note) is content; ``nav`` and
    ``menu`` never are."""
    if element.tag in ("nav", "menu"):
        return False
    for ancestor in element.iterancestors():
        if ancestor.tag in ("article", "section", "main"):
            return True
        if ancestor is container:
            break
    return container.tag in ("article", "main") or container.get("role") == "main"


# -- writing ---------------------------------------------------------------------------------------

_HEADINGS: Final = {f"h{level}": level for level in range(1, 7)}
_LISTS: Final = frozenset({"ul", "ol", "dir"})
_BLOCKS: Final = frozenset(
    {"p", "div", "section", "article", "main", "blockquote", "figure", "figcaption", "address", "dl",
     "dt", "dd", "li", "center", "details", "summary", "caption", "body", "html", "fieldset",
     "legend", "header", "footer", "aside", "form", "hgroup", "search", "tbody", "thead", "tfoot",
     "tr", "td", "th", "noscript", "hr", "menu", "nav"}
)  # fmt: skip


class _Walker:
    """Writes an element tree's text into a :class:`TextWriter`, block by block, leaving out the
    page furniture inside ``container`` unless ``furniture`` is true (the fallback)."""

    def __init__(self, writer: TextWriter, container: etree._Element, *, furniture: bool = False) -> None:
        self.writer = writer
        self.container = container
        self.furniture = furniture
        self.inline: list[str] = []

    def block(self, element: etree._Element) -> None:
        self.flush()
        self._descend(element)
        self.flush()

    def flush(self) -> None:
        if self.inline:
            self.writer.paragraph("".join(self.inline))
            self.inline = []

    def _descend(self, element: etree._Element) -> None:
        if element.text:
            self.inline.append(element.text)
        for child in element:
            if isinstance(child.tag, str):
                self._node(child)
            if child.tail:
                self.inline.append(child.tail)

    def _node(self, element: etree._Element) -> None:
        tag = element.tag
        if not self.furniture and _is_page_furniture(element, self.container):
            return
        if tag in _HEADINGS:
            self.flush()
            self.writer.heading(_HEADINGS[str(tag)], _heading_text(element))
        elif tag in _LISTS:
            self.flush()
            self.writer.lines_verbatim(_list_lines(element, 0))
        elif tag == "table":
            self.flush()
            caption = element.find("caption")
            if caption is not None:
                self.writer.paragraph(_flat(caption))
            self.writer.lines(_table_rows(element))
        elif tag == "pre":
            self.flush()
            self.writer.preformatted(_words(element))
        elif tag == "br":
            self.inline.append(" ")
        elif tag in _BLOCKS:
            self.block(element)
        else:
            self._descend(element)  # inline markup: its words run on


def _heading_text(element: etree._Element) -> str:
    return one_line(_flat(element)).rstrip("¶").rstrip()


def _flat(element: etree._Element, nested: list[etree._Element] | None = None) -> str:
    """The words of ``element`` as one run (blocks in it set apart by a space); with ``nested``,
    the lists inside are left out and collected there (a list item's sub-lists)."""
    parts: list[str] = []
    _flat_parts(element, parts, nested)
    return "".join(parts)


def _flat_parts(element: etree._Element, parts: list[str], nested: list[etree._Element] | None) -> None:
    parts.append(element.text or "")
    for child in element:
        if nested is not None and child.tag in _LISTS:
            nested.append(child)
        elif isinstance(child.tag, str):
            spaced = child.tag in _BLOCKS or child.tag in _HEADINGS or child.tag in ("br", "table", "pre")
            if spaced:
                parts.append(" ")
            _flat_parts(child, parts, nested)
            if spaced:
                parts.append(" ")
        parts.append(child.tail or "")


def _list_lines(element: etree._Element, depth: int) -> list[str]:
    ordered = element.tag == "ol"
    style = element.get("type") or "1"
    number = (_int(element.get("start")) or 1) - 1
    lines: list[str] = []
    for item in element:
        if item.tag in _LISTS:  # a list put straight in a list (invalid, common)
            lines.extend(_list_lines(item, depth + 1))
            continue
        if item.tag != "li":
            continue
        number = _int(item.get("value")) or number + 1
        marker = f"{list_label(number, style)}." if ordered else "-"
        nested: list[etree._Element] = []
        text = one_line(_flat(item, nested))
        if text:
            lines.append("  " * depth + f"{marker} {text}")
        for sublist in nested:
            lines.extend(_list_lines(sublist, depth + 1))
    return lines


def _table_rows(table: etree._Element) -> list[str]:
    rows: list[str] = []
    for row in table.iter("tr"):
        if next(row.iterancestors("table"), None) is not table:
            continue  # a nested table's row: its words are in the outer cell
        cells = [_flat(cell) for cell in row if cell.tag in ("td", "th")]
        if any(cell.strip() for cell in cells):
            rows.append(" | ".join(one_line(cell) for cell in cells))
    return rows


def _int(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit() or len(value.strip()) > 6:
        return None
    return int(value)


def extract_html(data: bytes, limits: ExtractLimits) -> Extracted:
    """The main content of an HTML page in the heading-line convention (see the module's doc), or
    :class:`DocumentError`: ``malformed``, ``too_large``, ``no_text``."""
    text, encoding, details = decode_html(data)
    refuse_hostile_tags(text)
    root = _parse(text, limits)
    title_element = root.find(".//title")
    title = one_line(_words(title_element))[:300] if title_element is not None else ""
    _clean(root)
    body = root.find("body")
    page: etree._Element = body if body is not None else root
    container, rule = _main_content(root)
    writer = TextWriter(limits.text_cap(len(data)))
    _Walker(writer, container).block(container)
    if writer.length == 0:
        # All of it looked like furniture (a page of links, say): read the whole body after all.
        rule = "body (fallback)"
        _Walker(writer, page, furniture=True).block(page)
    recorded: dict[str, Any] = {"extractor": "docsumd-html", "encoding": encoding, "content": rule}
    if title:
        recorded["title"] = title
    recorded.update(details)
    return writer.finish(Format.HTML, "this HTML page", recorded)
