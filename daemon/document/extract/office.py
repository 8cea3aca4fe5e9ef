"""DOCX and ODT: the text of a word-processing document, read from its ZIP archive and XML parts.

Everything in the input is hostile, so the archive and its XML are read with bounds of their own,
none of them taken from the file's own claims:

* the ZIP is read here, not by :mod:`zipfile`: its central directory walked with at most
  ``max_zip_entries`` entries and no duplicate names; only stored and deflated entries read (the
  only methods OPC and ODF allow), never encrypted ones;
* entries are inflated with zlib in chunks of 64 KiB at most, and the bytes that come out are
  counted as they come: over ``max_unpacked_bytes`` in all, or over ``max_compression_ratio`` times
  the compressed bytes consumed so far (past a first MiB), the document fails ``too_large`` (a zip
  bomb stops after about a megabyte); more bytes than the header claims, fewer, or another CRC:
  ``malformed`` (a header's size is never used to size anything, only to refuse what contradicts it);
* XML is parsed as it is inflated (a pull parser), with entity substitution, DTD loading and the
  network off, and any document type declaration refused before the parser sees it (``malformed``:
  no office file has one; billion laughs and external entities need one), nesting over
  ``max_xml_depth`` refused; the body is read block by block and each block freed once written,
  so memory follows the largest paragraph or table, not the document.

An encrypted (password-protected) DOCX is not a ZIP but an OLE2 compound file holding an
``EncryptedPackage`` stream (:func:`is_encrypted_ooxml`); it fails ``encrypted``, as does an ODT
whose manifest lists encryption data.

What is read. DOCX: the main document's paragraphs and tables in order; headings from paragraph
styles (``heading 1`` to ``heading 9`` and ``Title``, resolved through ``word/styles.xml``, its
``basedOn`` chains and outline levels); list numbers and bullets from ``word/numbering.xml``;
tracked changes as accepted (insertions kept, deletions dropped); footnotes and endnotes after the
body, marked ``[1]`` and ``[E1]``. Not read: headers and footers (repeated on every page), comments,
text boxes and other drawings, the table of contents (a copy of the headings). ODT: ``content.xml``'s
headings (``text:h`` with its outline level), paragraphs, lists, tables and sections, tracked
changes as accepted, notes after the body; indexes and tables of contents left out.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from lxml import etree

from daemon.document.containers import (
    DEFLATED,
    FLAG_ENCRYPTED,
    OLE2_MAGIC,
    STORED,
    ZipEntry,
    data_span,
    is_encrypted_ooxml,
    zip_entries,
)
from daemon.document.extract.markup import TextWriter, list_label
from daemon.document.text import one_line
from daemon.document.types import Extracted, ExtractLimits, Format
from daemon.errors import DocumentError

_READ_CHUNK: Final = 64 * 1024
_RATIO_FLOOR: Final = 1024 * 1024


def _refuse_not_zip(data: bytes, what: str) -> None:
    if data.startswith(OLE2_MAGIC):
        if is_encrypted_ooxml(data):
            raise DocumentError(
                "encrypted",
                f"{what} is password-protected (an encrypted Office document: an OLE2 file holding "
                "an EncryptedPackage stream); save it without a password",
            )
        raise DocumentError("binary", f"{what} is an OLE2 file (a legacy .doc?), not a ZIP-based document")


# -- the archive, read with bounds -------------------------------------------------------------------


class _Archive:
    """A DOCX/ODT ZIP archive whose entries are inflated here, with zlib, and checked as they come:
    the claims of the headers are never used to size anything, only to refuse what contradicts them."""

    def __init__(self, data: bytes, limits: ExtractLimits, what: str) -> None:
        _refuse_not_zip(data, what)
        self.data = data
        self.what = what
        self.limits = limits
        self.unpacked = 0
        entries = zip_entries(data, limits.max_zip_entries)
        if entries is None:
            raise DocumentError("malformed", f"{what} is not a readable ZIP archive (truncated?)")
        if len(entries) > limits.max_zip_entries:
            raise DocumentError(
                "malformed", f"{what} has over {limits.max_zip_entries} ZIP entries (extract.max_zip_entries)"
            )
        self.entries = {entry.name: entry for entry in entries}
        if len(self.entries) != len(entries):
            raise DocumentError("malformed", f"{what} has two ZIP entries of the same name")

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def chunks(self, name: str) -> Iterator[bytes]:
        """The bytes of entry ``name``, in chunks, counted against the limits as they unpack."""
        entry = self.entries[name]
        part = f"{self.what}'s part {name}"
        if entry.flags & FLAG_ENCRYPTED:
            raise DocumentError("encrypted", f"{part} is encrypted (a ZIP password)")
        if entry.method not in (STORED, DEFLATED):
            raise DocumentError("malformed", f"{part} uses ZIP compression method {entry.method}")
        if entry.size > self.limits.max_unpacked_bytes - self.unpacked:
            # True or not, the claim ends it: true, the part is too large; false, the file lies.
            raise DocumentError(
                "too_large",
                f"{part} would unpack to {entry.size} bytes, its header says: over what is left of "
                f"the limit of {self.limits.max_unpacked_bytes} bytes (extract.max_unpacked_bytes)",
            )
        span = data_span(self.data, entry)
        if span is None:
            raise DocumentError("malformed", f"{part} is cut short (a truncated ZIP)")
        view = memoryview(self.data)[span[0] : span[1]]
        raw = _stored(view) if entry.method == STORED else _inflated(view, part)
        produced, crc = 0, 0
        for chunk, consumed in raw:
            produced += len(chunk)
            self.unpacked += len(chunk)
            self._check(entry, part, produced, consumed)
            crc = zlib.crc32(chunk, crc)
            yield chunk
        if produced != entry.size or crc != entry.crc:
            raise DocumentError(
                "malformed",
                f"{part} unpacks to {produced} bytes (CRC {crc:08x}) where its header says {entry.size} "
                f"(CRC {entry.crc:08x})",
            )

    def _check(self, entry: ZipEntry, part: str, produced: int, consumed: int) -> None:
        if produced > entry.size:
            raise DocumentError(
                "malformed", f"{part} unpacks to more than the {entry.size} bytes its header says"
            )
        if self.unpacked > self.limits.max_unpacked_bytes:
            self._refuse_total()
        # The ratio of what came out to what went in so far: a bomb is stopped once its first
        # megabyte is out, not after it has been allowed the whole entry's ratio.
        if produced > _RATIO_FLOOR and produced > self.limits.max_compression_ratio * max(consumed, 1):
            raise DocumentError(
                "too_large",
                f"{part} unpacks to over {self.limits.max_compression_ratio:g} times its compressed "
                "size (extract.max_compression_ratio): a zip bomb?",
            )

    def _refuse_total(self) -> None:
        raise DocumentError(
            "too_large",
            f"{self.what} unpacks to over {self.limits.max_unpacked_bytes} bytes "
            "(extract.max_unpacked_bytes)",
        )

    def tree(self, name: str) -> etree._Element:
        """The parsed XML of a (small) part, whole."""
        root: etree._Element | None = None
        for event, element, _depth in xml_events(self.chunks(name), self.limits, f"{self.what}'s {name}"):
            if event == "start" and root is None:
                root = element
        assert root is not None  # a well-formed document has a root
        return root


def _stored(view: memoryview) -> Iterator[tuple[bytes, int]]:
    """A stored entry's bytes in chunks, each with the compressed bytes consumed so far."""
    for position in range(0, len(view), _READ_CHUNK):
        chunk = bytes(view[position : position + _READ_CHUNK])
        yield chunk, position + len(chunk)


def _inflated(view: memoryview, part: str) -> Iterator[tuple[bytes, int]]:
    """A deflated entry inflated in chunks of at most :data:`_READ_CHUNK` bytes (zlib's
    ``max_length``: never more at once, whatever the stream holds), each with the compressed
    bytes consumed so far."""
    inflater = zlib.decompressobj(-15)
    position = 0
    tail = b""
    while not inflater.eof:
        if tail:
            feed: bytes | memoryview = tail
        elif position < len(view):
            feed = view[position : position + _READ_CHUNK]
            position += len(feed)
        else:
            raise DocumentError("malformed", f"{part} ends before its compressed data does (truncated?)")
        try:
            chunk = inflater.decompress(feed, _READ_CHUNK)
        except zlib.error as exc:
            raise DocumentError("malformed", f"{part} cannot be inflated: {exc}") from None
        tail = inflater.unconsumed_tail
        if chunk:
            yield chunk, position - len(tail)


# -- XML, parsed with bounds ----------------------------------------------------------------------

_DOCTYPES: Final = (b"<!DOCTYPE", "<!DOCTYPE".encode("utf-16-le"), "<!DOCTYPE".encode("utf-16-be"))


def xml_events(
    chunks: Iterable[bytes], limits: ExtractLimits, what: str
) -> Iterator[tuple[str, etree._Element, int]]:
    """``("start" | "end", element, depth)`` for the XML document in ``chunks`` (the root at depth 1),
    parsed as it arrives, with entities, DTDs and the network off. Raises
    ``DocumentError("malformed")`` for XML that is not well-formed, a document type declaration
    (looked for in the bytes before the parser sees them: only a DTD can declare entities), or
    nesting deeper than ``limits.max_xml_depth``."""
    parser = etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
        collect_ids=False,
    )
    depth = 0
    rooted = False
    tail = b""
    try:
        for chunk in _and_end(chunks):
            if not rooted:
                _refuse_doctype(tail + chunk, what)
                tail = chunk[-16:]
            if chunk:
                parser.feed(chunk)
            else:
                parser.close()
            for event, element in parser.read_events():
                if event == "start":
                    depth += 1
                    if not rooted:
                        rooted = True
                        _refuse_doctype_info(element, what)
                    if depth > limits.max_xml_depth:
                        raise DocumentError(
                            "malformed", f"{what} nests elements over {limits.max_xml_depth} deep"
                        )
                    yield event, element, depth
                else:
                    yield event, element, depth
                    depth -= 1
    except etree.LxmlError as exc:  # XMLSyntaxError and its kin
        raise DocumentError("malformed", f"{what} is not well-formed XML: {exc}") from None


def _and_end(chunks: Iterable[bytes]) -> Iterator[bytes]:
    yield from (chunk for chunk in chunks if chunk)
    yield b""  # the end: the parser is closed


def _refuse_doctype(head: bytes, what: str) -> None:
    if any(pattern in head for pattern in _DOCTYPES):
        raise DocumentError(
            "malformed", f"{what} has a document type declaration (DTD), which no office file has"
        )


def _refuse_doctype_info(root: etree._Element, what: str) -> None:
    info = root.getroottree().docinfo
    if info.doctype or info.internalDTD is not None:
        _refuse_doctype(b"<!DOCTYPE", what)


def _release(element: etree._Element) -> None:
    """Free a block that has been written, and the blocks before it (the pull parser's tree would
    otherwise keep the whole document)."""
    element.clear(keep_tail=False)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


def _local(element: etree._Element) -> tuple[str, str]:
    """An element's namespace and local name (``("", "")`` for what is not an element)."""
    tag = element.tag
    if not isinstance(tag, str):
        return "", ""
    if tag[:1] == "{":
        namespace, _, local = tag[1:].partition("}")
        return namespace, local
    return "", tag


# -- DOCX ----------------------------------------------------------------------------------------

_W_TRANSITIONAL: Final = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_W_NAMESPACES: Final = frozenset({_W_TRANSITIONAL, "http://purl.oclc.org/ooxml/wordprocessingml/main"})
_RELS_NS: Final = "http://schemas.openxmlformats.org/package/2006/relationships"
_REL_TYPES: Final = {
    "officeDocument": "document",
    "styles": "styles",
    "numbering": "numbering",
    "footnotes": "footnotes",
    "endnotes": "endnotes",
}
_MC_NS: Final = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# Run-level content that is not text the reader sees: deletions (tracked), field instructions,
# properties, drawings and objects (text boxes included), comment marks.
_DOCX_SKIP: Final = frozenset(
    {
        "del", "moveFrom", "delText", "delInstrText", "instrText", "pPr", "rPr", "sectPr", "drawing",
        "pict", "object", "commentReference", "annotationRef", "sdtPr", "sdtEndPr", "fldData",
        "footnoteRef", "endnoteRef", "separator", "continuationSeparator", "lastRenderedPageBreak",
    }
)  # fmt: skip
_HEADING_NAME: Final = re.compile(r"heading ([1-9])")


@dataclass(frozen=True, slots=True)
class _Style:
    name: str
    based_on: str | None
    outline: int | None
    numbering: tuple[str, int] | None


@dataclass(slots=True)
class _DocxStyles:
    """Paragraph styles by id: what makes a paragraph a heading, a list item, or a TOC entry."""

    styles: dict[str, _Style] = field(default_factory=dict)
    default: str | None = None

    def _chain(self, style_id: str | None) -> Iterator[_Style]:
        seen: set[str] = set()
        while style_id is not None and style_id not in seen and len(seen) < 32:
            seen.add(style_id)
            style = self.styles.get(style_id)
            if style is None:
                return
            yield style
            style_id = style.based_on

    def heading_level(self, style_id: str | None) -> int | None:
        """1 for Title and heading 1 (and outline level 0), ... 9; None for body text."""
        for style in self._chain(style_id or self.default):
            name = style.name.lower()
            if name == "title":
                return 1
            match = _HEADING_NAME.fullmatch(name)
            if match:
                return int(match.group(1))
            if style.outline is not None:
                return style.outline + 1 if style.outline < 9 else None
        return None

    def numbering(self, style_id: str | None) -> tuple[str, int] | None:
        for style in self._chain(style_id or self.default):
            if style.numbering is not None:
                return style.numbering
        return None

    def is_toc(self, style_id: str | None) -> bool:
        return any(style.name.lower().startswith("toc ") for style in self._chain(style_id))


@dataclass(frozen=True, slots=True)
class _Level:
    start: int
    fmt: str
    text: str


@dataclass(slots=True)
class _Numbering:
    """List numbering (``word/numbering.xml``): each list's levels, and the counters as they run."""

    levels: dict[str, dict[int, _Level]] = field(default_factory=dict)
    counters: dict[str, list[int | None]] = field(default_factory=dict)

    def label(self, num_id: str, level: int) -> str:
        """The next label of list ``num_id`` at ``level`` ("3.", "(b)", "-"), counting it."""
        levels = self.levels.get(num_id, {})
        counters = self.counters.setdefault(num_id, [None] * 9)
        current = levels.get(level, _Level(1, "decimal", f"%{level + 1}."))
        if current.fmt == "bullet":
            return "-"
        counted = counters[level]
        counters[level] = current.start if counted is None else counted + 1
        for deeper in range(level + 1, 9):
            counters[deeper] = None

        def number(match: re.Match[str]) -> str:
            index = int(match.group(1)) - 1
            if not 0 <= index <= level:
                return ""
            shown = levels.get(index, _Level(1, "decimal", ""))
            value = counters[index]
            return list_label(shown.start if value is None else value, shown.fmt)

        return re.sub(r"%([1-9])", number, current.text).strip() or "-"


class _DocxReader:
    """Reads one DOCX: its parts' XML, then the body block by block into a :class:`TextWriter`."""

    def __init__(self, data: bytes, limits: ExtractLimits) -> None:
        self.archive = _Archive(data, limits, "this DOCX file")
        self.limits = limits
        self.writer = TextWriter(limits.text_cap(len(data)))
        self.w = _W_TRANSITIONAL
        self.styles = _DocxStyles()
        self.numbering = _Numbering()
        self.notes: dict[tuple[str, str], str] = {}
        self.cited: dict[tuple[str, str], str] = {}
        """The notes referred to so far, in order, with the mark each got ("1", "E1")."""
        self.cited_counts = {"footnotes": 0, "endnotes": 0}
        self.pending_list: list[tuple[int, str]] = []
        """The list items read and not yet written: (level, "label text")."""

    def read(self) -> Extracted:
        parts = self._parts()
        if parts.get("styles"):
            self._read_styles(parts["styles"])
        if parts.get("numbering"):
            self._read_numbering(parts["numbering"])
        for kind in ("footnotes", "endnotes"):
            if parts.get(kind):
                self._read_notes(parts[kind], kind)
        self._read_body(parts["document"])
        self._flush_list()
        self._write_notes()
        return self.writer.finish(Format.DOCX, "this DOCX file", {"extractor": "docsumd-docx"})

    def _parts(self) -> dict[str, str]:
        """The main document part and its styles, numbering and notes parts, by relationship."""
        parts: dict[str, str] = {}
        if "_rels/.rels" in self.archive:
            parts.update(self._relationships("_rels/.rels", ""))
        main = parts.get("document", "word/document.xml")
        if main not in self.archive:
            raise DocumentError("malformed", "this DOCX file has no main document part (word/document.xml)")
        parts = {"document": main}
        folder, _, base = main.rpartition("/")
        rels = f"{folder}/_rels/{base}.rels" if folder else f"_rels/{base}.rels"
        if rels in self.archive:
            related = self._relationships(rels, folder)
            parts.update({kind: name for kind, name in related.items() if kind != "document"})
        for kind, default in (("styles", "styles"), ("numbering", "numbering"), ("footnotes", "footnotes")):
            parts.setdefault(kind, f"{folder}/{default}.xml" if folder else f"{default}.xml")
        return {kind: name for kind, name in parts.items() if name in self.archive}

    def _relationships(self, name: str, folder: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for rel in self.archive.tree(name).iter(f"{{{_RELS_NS}}}Relationship"):
            kind = _REL_TYPES.get(rel.get("Type", "").rpartition("/")[2])
            target = rel.get("Target", "")
            if kind is None or rel.get("TargetMode") == "External" or not target:
                continue
            found.setdefault(kind, _resolve(folder, target))
        return found

    def _tag(self, local: str) -> str:
        return f"{{{self.w}}}{local}"

    def _val(self, element: etree._Element | None, child: str) -> str | None:
        if element is None:
            return None
        found = element.find(self._tag(child))
        return None if found is None else found.get(self._tag("val"))

    def _read_styles(self, name: str) -> None:
        root = self.archive.tree(name)
        self._set_namespace(root)
        for style in root.iter(self._tag("style")):
            if style.get(self._tag("type")) != "paragraph":
                continue
            style_id = style.get(self._tag("styleId"))
            if style_id is None:
                continue
            ppr = style.find(self._tag("pPr"))
            outline = _int(self._val(ppr, "outlineLvl"))
            self.styles.styles[style_id] = _Style(
                name=self._val(style, "name") or style_id,
                based_on=self._val(style, "basedOn"),
                outline=outline,
                numbering=self._numbering_of(ppr),
            )
            if style.get(self._tag("default")) in ("1", "true", "on"):
                self.styles.default = style_id

    def _numbering_of(self, ppr: etree._Element | None) -> tuple[str, int] | None:
        numpr = None if ppr is None else ppr.find(self._tag("numPr"))
        if numpr is None:
            return None
        num_id = self._val(numpr, "numId")
        level = _int(self._val(numpr, "ilvl")) or 0
        return (num_id, min(max(level, 0), 8)) if num_id is not None else None

    def _read_numbering(self, name: str) -> None:
        root = self.archive.tree(name)
        self._set_namespace(root)
        abstract: dict[str, dict[int, _Level]] = {}
        for definition in root.iter(self._tag("abstractNum")):
            levels = self._levels(definition)
            abstract[definition.get(self._tag("abstractNumId"), "")] = levels
        for num in root.iter(self._tag("num")):
            levels = dict(abstract.get(self._val(num, "abstractNumId") or "", {}))
            for override in num.iter(self._tag("lvlOverride")):
                index = _int(override.get(self._tag("ilvl"))) or 0
                start = _int(self._val(override, "startOverride"))
                if index in levels and start is not None:
                    levels[index] = _Level(start, levels[index].fmt, levels[index].text)
            self.numbering.levels[num.get(self._tag("numId"), "")] = levels

    def _levels(self, definition: etree._Element) -> dict[int, _Level]:
        levels: dict[int, _Level] = {}
        for level in definition.iter(self._tag("lvl")):
            index = _int(level.get(self._tag("ilvl")))
            if index is None or not 0 <= index <= 8:
                continue
            levels[index] = _Level(
                start=_int(self._val(level, "start")) or 1,
                fmt=self._val(level, "numFmt") or "decimal",
                text=self._val(level, "lvlText") or "",
            )
        return levels

    def _read_notes(self, name: str, kind: str) -> None:
        root = self.archive.tree(name)
        self._set_namespace(root)
        tag = self._tag("footnote" if kind == "footnotes" else "endnote")
        for note in root.iter(tag):
            if note.get(self._tag("type")) not in (None, "normal"):
                continue  # separators, not notes
            text = " ".join(self._paragraph_text(p) for p in note.iter(self._tag("p")))
            self.notes[(kind, note.get(self._tag("id"), ""))] = one_line(text)

    def _set_namespace(self, root: etree._Element) -> None:
        namespace, _ = _local(root)
        if namespace in _W_NAMESPACES:
            self.w = namespace

    def _read_body(self, name: str) -> None:
        """The body's blocks, each written and freed at its end (depth 3: document, body, block)."""
        events = xml_events(self.archive.chunks(name), self.limits, f"this DOCX's {name}")
        for event, element, depth in events:
            if depth == 1 and event == "start":
                namespace, local = _local(element)
                if namespace not in _W_NAMESPACES or local != "document":
                    raise DocumentError("malformed", f"this DOCX's {name} is not a WordprocessingML document")
                self.w = namespace
            elif depth == 3 and event == "end":
                self._block(element)
                _release(element)

    def _block(self, element: etree._Element) -> None:
        namespace, local = _local(element)
        if namespace != self.w:
            if namespace == _MC_NS:
                return  # alternate content: drawings and the like
            for child in element:
                self._block(child)
        elif local == "p":
            self._paragraph(element)
        elif local == "tbl":
            self._flush_list()
            self.writer.lines(self._table_rows(element))
        elif local in ("sdt", "sdtContent", "customXml", "ins", "moveTo", "smartTag"):
            for child in element:
                self._block(child)

    def _paragraph(self, paragraph: etree._Element) -> None:
        ppr = paragraph.find(self._tag("pPr"))
        style_id = self._val(ppr, "pStyle")
        if self.styles.is_toc(style_id):
            return
        text = one_line(self._paragraph_text(paragraph))
        outline = _int(self._val(ppr, "outlineLvl"))
        level = outline + 1 if outline is not None and outline < 9 else self.styles.heading_level(style_id)
        numbering = self._numbering_of(ppr) or self.styles.numbering(style_id)
        if numbering is not None and numbering[0] == "0":
            numbering = None  # numId 0: numbering explicitly removed
        label = self.numbering.label(*numbering) if numbering is not None and text else ""
        if level is not None and text:
            self._flush_list()
            self.writer.heading(level, f"{label} {text}" if label and label != "-" else text)
        elif numbering is not None and text:
            self.pending_list.append((numbering[1], f"{label} {text}"))
        elif text:
            self._flush_list()
            self.writer.paragraph(text)

    def _flush_list(self) -> None:
        if self.pending_list:
            # Indented by level, from the list's own top level (a list may start at level 2).
            top = min(level for level, _ in self.pending_list)
            self.writer.lines_verbatim("  " * (level - top) + item for level, item in self.pending_list)
            self.pending_list = []

    def _paragraph_text(self, element: etree._Element) -> str:
        parts: list[str] = []
        self._collect(element, parts)
        return "".join(parts)

    def _collect(self, element: etree._Element, parts: list[str]) -> None:
        for child in element:
            namespace, local = _local(child)
            if namespace == self.w:
                if local == "t":
                    parts.append(child.text or "")
                elif local in ("tab", "ptab", "br", "cr"):
                    parts.append(" ")
                elif local == "noBreakHyphen":
                    parts.append("-")
                elif local in ("footnoteReference", "endnoteReference"):
                    parts.append(self._note_mark(local, child))
                elif local in ("p", "tc", "tr"):  # paragraphs in a cell or a note: words apart
                    parts.append(" ")
                    self._collect(child, parts)
                    parts.append(" ")
                elif local not in _DOCX_SKIP and local != "softHyphen":
                    self._collect(child, parts)
            elif namespace != _MC_NS and local:
                self._collect(child, parts)  # other vocabularies (math, w14) hold runs too

    def _note_mark(self, local: str, reference: etree._Element) -> str:
        kind = "footnotes" if local == "footnoteReference" else "endnotes"
        key = (kind, reference.get(self._tag("id"), ""))
        if key not in self.notes:
            return ""
        if key not in self.cited:
            self.cited_counts[kind] += 1
            number = self.cited_counts[kind]
            self.cited[key] = str(number) if kind == "footnotes" else f"E{number}"
        return f"[{self.cited[key]}]"

    def _table_rows(self, table: etree._Element) -> list[str]:
        rows: list[str] = []
        for row in _children(table, self._tag("tr"), self._containers):
            cells = [self._paragraph_text(cell) for cell in _children(row, self._tag("tc"), self._containers)]
            if any(cell.strip() for cell in cells):
                rows.append(" | ".join(one_line(cell) for cell in cells))
        return rows

    def _containers(self, element: etree._Element) -> bool:
        namespace, local = _local(element)
        return namespace == self.w and local in ("sdt", "sdtContent", "customXml", "ins", "moveTo")

    def _write_notes(self) -> None:
        for key, mark in self.cited.items():
            if self.notes.get(key):
                self.writer.paragraph(f"[{mark}] {self.notes[key]}")


def _children(
    element: etree._Element, tag: str, container: Callable[[etree._Element], bool]
) -> Iterator[etree._Element]:
    """``element``'s children named ``tag``, looking through wrappers (content controls)."""
    for child in element:
        if child.tag == tag:
            yield child
        elif container(child):
            yield from _children(child, tag, container)


def _resolve(folder: str, target: str) -> str:
    """A relationship target as a ZIP entry name (relative to the part's folder, or absolute)."""
    if target.startswith("/"):
        return target.lstrip("/")
    parts = [part for part in f"{folder}/{target}".split("/") if part and part != "."]
    resolved: list[str] = []
    for part in parts:
        if part == "..":
            if resolved:
                resolved.pop()
        else:
            resolved.append(part)
    return "/".join(resolved)


def _int(value: str | None) -> int | None:
    if value is None or not value.strip().lstrip("-").isdigit() or len(value) > 9:
        return None
    return int(value)


def extract_docx(data: bytes, limits: ExtractLimits) -> Extracted:
    """The text of a DOCX file in the heading-line convention (see the module's doc), or
    :class:`DocumentError`: ``encrypted``, ``malformed``, ``too_large``, ``no_text``, ``binary``."""
    return _DocxReader(data, limits).read()


# -- ODT -----------------------------------------------------------------------------------------

_OFFICE: Final = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_TEXT: Final = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE: Final = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_MANIFEST: Final = "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"
# Generated copies of the text (indexes, the table of contents), the tracked deletions (kept in
# text:tracked-changes), declarations and forms: none of it is the document's own running text.
_ODT_SKIP_BLOCKS: Final = frozenset(
    {
        "table-of-content", "alphabetical-index", "illustration-index", "table-index", "object-index",
        "user-index", "bibliography", "tracked-changes", "sequence-decls", "variable-decls",
        "user-field-decls", "dde-connection-decls", "soft-page-break",
    }
)  # fmt: skip
_ODT_SKIP_INLINE: Final = frozenset({"note", "tracked-changes", "change", "change-start", "change-end"})
_MAX_SPACES: Final = 64


class _OdtReader:
    """Reads one ODT: its manifest (encryption), then ``content.xml`` block by block."""

    def __init__(self, data: bytes, limits: ExtractLimits) -> None:
        self.archive = _Archive(data, limits, "this ODT file")
        self.limits = limits
        self.writer = TextWriter(limits.text_cap(len(data)))
        self.notes: list[str] = []

    def read(self) -> Extracted:
        self._refuse_encrypted()
        if "content.xml" not in self.archive:
            raise DocumentError("malformed", "this ODT file has no content.xml")
        events = xml_events(self.archive.chunks("content.xml"), self.limits, "this ODT's content.xml")
        in_text = False
        for event, element, depth in events:
            # office:document-content / office:body / office:text / the blocks
            if depth == 3 and event == "start":
                in_text = _local(element) == (_OFFICE, "text")
            elif depth == 4 and event == "end" and in_text:
                self._block(element)
                _release(element)
        for number, note in enumerate(self.notes, start=1):
            self.writer.paragraph(f"[{number}] {note}")
        return self.writer.finish(Format.ODT, "this ODT file", {"extractor": "docsumd-odt"})

    def _refuse_encrypted(self) -> None:
        if "META-INF/manifest.xml" not in self.archive:
            return
        manifest = self.archive.tree("META-INF/manifest.xml")
        if next(manifest.iter(f"{{{_MANIFEST}}}encryption-data"), None) is not None:
            raise DocumentError(
                "encrypted", "this ODT file is password-protected (its manifest lists encryption data)"
            )

    def _block(self, element: etree._Element) -> None:
        namespace, local = _local(element)
        if namespace == _TEXT and local == "h":
            level = _int(element.get(f"{{{_TEXT}}}outline-level")) or 1
            self.writer.heading(level, self._inline(element))
        elif namespace == _TEXT and local == "p":
            self.writer.paragraph(self._inline(element))
        elif namespace == _TEXT and local == "list":
            self.writer.lines_verbatim(self._list_lines(element, 0))
        elif namespace == _TABLE and local == "table":
            self.writer.lines(self._table_rows(element))
        elif local not in _ODT_SKIP_BLOCKS and namespace in (_TEXT, _TABLE, _OFFICE):
            for child in element:  # sections and other containers
                self._block(child)

    def _list_lines(self, element: etree._Element, depth: int) -> list[str]:
        lines: list[str] = []
        for item in element:
            if _local(item) not in ((_TEXT, "list-item"), (_TEXT, "list-header")):
                continue
            for child in item:
                if _local(child) == (_TEXT, "list"):
                    lines.extend(self._list_lines(child, depth + 1))
                else:
                    text = one_line(self._flat(child))
                    if text:
                        lines.append("  " * depth + f"- {text}")
        return lines

    def _table_rows(self, table: etree._Element) -> list[str]:
        rows: list[str] = []
        for row in table.iter(f"{{{_TABLE}}}table-row"):
            if _nearest_table(row) is not table:
                continue  # a nested table's row: its text is in its cell
            cells = [self._flat(cell) for cell in row if _local(cell) == (_TABLE, "table-cell")]
            if any(cell.strip() for cell in cells):
                rows.append(" | ".join(one_line(cell) for cell in cells))
        return rows

    def _flat(self, element: etree._Element) -> str:
        """All the text in ``element`` (blocks in it joined by spaces)."""
        namespace, local = _local(element)
        if namespace == _TEXT and local in ("p", "h"):
            return self._inline(element)
        parts = [self._flat(child) for child in element if _local(child)[1] not in _ODT_SKIP_BLOCKS]
        return " ".join(part for part in parts if part)

    def _inline(self, element: etree._Element) -> str:
        parts: list[str] = []
        self._collect(element, parts)
        return "".join(parts)

    def _collect(self, element: etree._Element, parts: list[str]) -> None:
        parts.append(element.text or "")
        for child in element:
            namespace, local = _local(child)
            if namespace == _TEXT and local == "s":
                count = _int(child.get(f"{{{_TEXT}}}c")) or 1
                parts.append(" " * min(max(count, 1), _MAX_SPACES))
            elif namespace == _TEXT and local in ("tab", "line-break"):
                parts.append(" ")
            elif namespace == _TEXT and local == "note":
                parts.append(self._note(child))
            elif namespace == _OFFICE and local == "annotation":
                pass  # a comment
            elif namespace == _TEXT and local in _ODT_SKIP_INLINE:
                pass
            elif local and namespace != "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0":
                self._collect(child, parts)
            parts.append(child.tail or "")

    def _note(self, note: etree._Element) -> str:
        body = note.find(f"{{{_TEXT}}}note-body")
        if body is None:
            return ""
        self.notes.append(one_line(self._flat(body)))
        return f"[{len(self.notes)}]"


def _nearest_table(element: etree._Element) -> etree._Element | None:
    for ancestor in element.iterancestors(f"{{{_TABLE}}}table"):
        return ancestor
    return None


def extract_odt(data: bytes, limits: ExtractLimits) -> Extracted:
    """The text of an ODT file in the heading-line convention (see the module's doc), or
    :class:`DocumentError`: ``encrypted``, ``malformed``, ``too_large``, ``no_text``, ``binary``."""
    return _OdtReader(data, limits).read()
