"""HTML -> text through lxml (libxml2's HTML parser): visible text only, each run traced to its element's XPath.

lxml only parses: scripts, styles and event handlers are never run, and their text is dropped
with ``<head>``, ``<template>`` and hidden inputs. Whitespace collapses as a browser collapses it;
block elements and ``<br>`` start a new line. Navigation, headers and footers are kept (a value
may sit there): this is the page's text, not a guess at its main content.
"""

from __future__ import annotations

import re

import lxml.etree
import lxml.html

from extractor.documents.model import HTML, Document, Limits, Segment
from extractor.errors import DocumentError, DocumentTooLargeError

_SKIPPED = frozenset({"script", "style", "noscript", "template", "head", "title", "meta", "link", "iframe", "object"})
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "html",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    ]
)
_SPACE = re.compile(r"[ \t\n\r\f]+")


def _decode(data: bytes) -> str | bytes:
    """UTF-8 (with or without a byte-order mark) as text; else bytes, for lxml to read the ``<meta charset>``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data


def convert(data: bytes, *, limits: Limits, name: str | None = None) -> Document:
    """The page's visible text, one segment per text run, each naming its element's XPath."""
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, no_network=True, huge_tree=False)
    try:
        root = lxml.html.document_fromstring(_decode(data), parser=parser)
    except (lxml.etree.ParserError, ValueError) as error:
        raise DocumentError(f"not readable HTML ({error})") from None
    tree = root.getroottree()
    builder = _Builder(limits)
    skipping = 0
    for event, element in lxml.etree.iterwalk(root, events=("start", "end")):
        tag = element.tag if isinstance(element.tag, str) else ""
        tag = tag.lower()
        hidden = tag in _SKIPPED or element.get("hidden") is not None
        if event == "start":
            if hidden:
                skipping += 1
            if skipping:
                continue
            if tag in _BLOCKS or tag == "br":
                builder.newline()
            if element.text:
                builder.add(element.text, tree.getpath(element))
        else:
            if hidden:
                skipping -= 1
            if skipping:
                continue
            if tag in _BLOCKS:
                builder.newline()
            parent = element.getparent()
            if element.tail and parent is not None:
                builder.add(element.tail, tree.getpath(parent))
    text = "".join(builder.out).rstrip()  # never leading whitespace: nothing is put before the first run
    if not text:
        raise DocumentError("the HTML has no visible text")
    return Document(text, HTML, tuple(builder.segments), name=name)


class _Builder:
    """The text so far: collapsed whitespace, one newline between blocks."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.out: list[str] = []
        self.length = 0
        self.segments: list[Segment] = []
        self.at_line_start = True
        self.space_due = False

    def newline(self) -> None:
        if not self.at_line_start:
            self._put("\n")
            self.at_line_start = True
        self.space_due = False

    def add(self, raw: str, element: str) -> None:
        collapsed = _SPACE.sub(" ", raw)
        if collapsed.startswith(" "):
            self.space_due = True
            collapsed = collapsed[1:]
        if not collapsed:
            return
        if self.space_due and not self.at_line_start:
            self._put(" ")
        self.space_due = collapsed.endswith(" ")
        collapsed = collapsed.rstrip(" ")
        start = self.length
        self._put(collapsed)
        self.segments.append(Segment(start, self.length, element=element))
        self.at_line_start = False

    def _put(self, piece: str) -> None:
        self.out.append(piece)
        self.length += len(piece)
        if self.length > self.limits.max_chars:
            raise DocumentTooLargeError(
                f"the HTML's text is over {self.limits.max_chars} characters (EXTRACTOR_MAX_DOCUMENT_CHARS); split it"
            )
