"""What a release changes: its version, breaking changes, deprecations and removals, from its notes.

Pure (no I/O). Release notes arrive as stored text: paragraphs separated by
blank lines when the feed kept them, else one line where the headings of the
notes are flattened into the sentences they head ("Breaking changes The foo
API ..."). Both are read the same way: the text is cut into sentences, a
heading ("Breaking changes", "Deprecations", "Removed", "Fixes", ...) sets the
section the following sentences belong to, and a sentence outside such a
section counts by its own words ("BREAKING:", "is deprecated", "was removed").
Fixes are never counted, even when they name a deprecated API. Every item is
the notes' own sentence, cut at a word to ``ITEM_CHARS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from digest.domain.daytext import clip_line

BREAKING, DEPRECATED, REMOVED, FIXES, ADDITIONS, OTHER = (
    "breaking", "deprecated", "removed", "fixes", "additions", "other")
ITEM_CHARS = 100

_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?:[-.]?(?:rc|alpha|beta|a|b|post|dev)\.?\d*)?(?![\w.])",
                      re.I)
_TAG_URL = re.compile(r"/releases/tag/([^/?#]+)")
# Headings, longest first; the section each one opens.
_HEADINGS: tuple[tuple[str, str], ...] = (
    (r"breaking changes?|backwards?[- ]incompatible changes|incompatible changes|breaking|"
     r"api changes|migration notes?|upgrade notes?|potentially breaking changes", BREAKING),
    (r"deprecations?|deprecated features|deprecated", DEPRECATED),
    (r"removals?|removed features|removed", REMOVED),
    (r"bug fixes|bugfixes|fixes|fixed|bug-fix release", FIXES),
    (r"highlights|new features|features|improvements|enhancements|what'?s new|added|changed",
     ADDITIONS),
    (r"what'?s changed|other changes|changes|performance|documentation|docs|known issues|"
     r"new contributors|contributors|full changelog|security|download links for common platforms",
     OTHER),
)
_HEADING_WORDS = "|".join(words for words, _ in _HEADINGS)
# A heading alone (a paragraph of its own, or ending in a colon) ...
_ALONE = re.compile(rf"^(?:#+\s*)?(?P<h>{_HEADING_WORDS})\s*:?\s*$", re.I)
# ... or flattened into the sentence it heads: "Breaking changes The foo API ...".
# One-word headings that also start sentences ("Removed the X option") need a colon here.
_FLAT = re.compile(
    rf"^(?:#+\s*)?(?P<h>{_HEADING_WORDS})(?::\s*|\s+(?=[A-Z`*]))(?P<rest>\S.*)$", re.I | re.S)
_AMBIGUOUS = re.compile(r"^(?:removed|deprecated|fixed|added|changed|breaking|security|docs|"
                        r"performance|documentation|features|changes)$", re.I)
_BREAKING_WORDS = re.compile(r"\bBREAKING\b|\bbreaking[- ]changes?\b|\bbackwards?[- ]incompatible\b|"
                             r"\bno longer backwards?[- ]compatible\b", re.I)
_BREAKING_UPPER = re.compile(r"\bBREAKING\b")
_DEPRECATED_WORDS = re.compile(r"\bdeprecat(?:e|ed|es|ing|ion|ions)\b", re.I)
_REMOVED_WORDS = re.compile(
    r"^(?:remove[sd]?|drop(?:s|ped)?)\b|\b(?:is|are|was|were|been|has|have)\s+(?:now\s+)?"
    r"(?:removed|dropped)\b|\b(?:removed|dropped)\s+support\b|\bno longer (?:supported|available|"
    r"provided|ships?)\b", re.I)
_FIX_START = re.compile(r"^(?:fix(?:e[sd])?|resolved?|corrected)\b", re.I)
_LABEL = re.compile(r"^(?:\*\*)?(?:BREAKING(?: CHANGES?)?|DEPRECATED|REMOVED)(?:\*\*)?\s*[:!-]\s*", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*#(\[])|(?<=[。！？])")


@dataclass(frozen=True)
class ReleaseNotes:
    """What a release's notes say it changes; each item is the notes' own (shortened) sentence."""

    version: str | None
    breaking: tuple[str, ...] = ()
    deprecated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def changes(self) -> int:
        """How many breaking changes, deprecations and removals the notes list."""
        return len(self.breaking) + len(self.deprecated) + len(self.removed)


def release_version(title: str, url: str | None = None) -> str | None:
    """The version as written: from the release's tag in its URL, else from its title."""
    tag = _TAG_URL.search(url or "")
    for text in ([tag.group(1)] if tag else []) + [title]:
        found = _VERSION.search(text.replace("%2B", "+"))
        if found:
            return found.group(0)
    return None


def release_notes(title: str, text: str, url: str | None = None) -> ReleaseNotes:
    """The version, breaking changes, deprecations and removals that ``text`` (the notes) lists."""
    found: dict[str, list[str]] = {BREAKING: [], DEPRECATED: [], REMOVED: []}
    section = OTHER
    for sentence in _sentences(text):
        heading, rest = _heading(sentence)
        if heading is not None:
            section = heading
            if not rest:
                continue
            sentence = rest
        kind = _kind(sentence, section)
        if kind in found:
            item = _item(sentence)
            if item and item.casefold() not in {i.casefold() for i in found[kind]}:
                found[kind].append(item)
    return ReleaseNotes(release_version(title, url), tuple(found[BREAKING]),
                        tuple(found[DEPRECATED]), tuple(found[REMOVED]))


_PATCH_VERSION = re.compile(r"^v?\d+\.\d+\.0*[1-9]\d*(?![\w.])")
# A heading that opens additions, or an item that adds: what a fix-only release's notes lack.
_ADDS = re.compile(
    r"^\W*(?:#+\s*)?(?:added|new features?|features|enhancements|improvements|highlights|what'?s new)\b"
    r"|^\W*(?:add(?:s|ed)?|new|support(?:s|ed)?|implement(?:s|ed)?|introduc\w+|enable[sd]?|"
    r"improve[sd]?|optimi[sz]\w*)\b", re.I | re.M)


# What a sentence of prose notes says a release brings, wherever it stands in the sentence
# ("This release features a new experimental scalar target", "the language now supports
# 'switch' statements", "JavaScript backend!"): projects that number every release x.y.z
# (ISPC, V) write their additions this way, not as a list under "Added".
_BRINGS = re.compile(
    r"\bnew (?:[\w\"'-]+ ){0,3}?(?:features?|targets?|back-?ends?|back ends?|keywords?|syntax|"
    r"statements?|intrinsics?|instructions?)\b|\b(?:main|major) new\b|\bnow supports?\b|"
    r"\bexperimental (?:[\w-]+ ){0,2}?support\b|\bno longer experimental\b|\bback-?end!|"
    r"\bkeywords?\b|\bcross[- ]compil\w+", re.I)
_LIST_ITEM = re.compile(r"\s+[-*•]\s+(?=\S)")


def is_fix_release(title: str, text: str, url: str | None = None) -> bool:
    """A patch release (x.y.z, z > 0) whose notes add nothing: only fixes.

    "Adds nothing": no heading that opens additions ("Added", "New features",
    "Improvements", ...), no line that starts by adding, supporting,
    implementing, introducing, enabling, improving or optimising, no item under
    an "Added" or "Changed" heading and no sentence outside the fixes that brings
    a new feature, target, back end or keyword (:func:`_brings`), and no breaking
    change, deprecation or removal (:func:`release_notes`). The readers' guide: a
    release is news for what it changes; one that only fixes bugs is not.
    """
    version = release_version(title, url)
    if not (version and _PATCH_VERSION.match(version)) or _ADDS.search(text) or _brings(text):
        return False
    return release_notes(title, text, url).changes == 0


def _brings(text: str) -> bool:
    """Whether a sentence or list item of the notes, outside their fixes, brings something new:
    any item (of three words or more) under a heading of additions or changes ("Added",
    "Changed", "New features": ``ADDITIONS``), or one whose own words say so (:data:`_BRINGS`)."""
    section = OTHER
    for sentence in _sentences(text):
        for part in _LIST_ITEM.split(f" {sentence}"):
            heading, item = _heading(part.strip())
            if heading is not None:
                section = heading
            if not item or section == FIXES or _FIX_START.match(item):
                continue
            if (section == ADDITIONS and len(item.split()) >= 3) or _BRINGS.search(item):
                return True
    return False


def _sentences(text: str) -> list[str]:
    """Paragraphs (blank-line separated) cut into sentences; a heading paragraph stays whole."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        if not flat:
            continue
        if _ALONE.match(flat):
            out.append(flat)
            continue
        out += [s.strip() for s in _SENTENCE.split(flat) if s.strip()]
    return out


def _section(heading: str) -> str:
    for words, section in _HEADINGS:
        if re.fullmatch(words, heading, re.I):
            return section
    return OTHER


def _heading(sentence: str) -> tuple[str | None, str]:
    """(the section a heading at the start of ``sentence`` opens, the rest), or (None, sentence)."""
    alone = _ALONE.match(sentence)
    if alone:
        return _section(alone.group("h")), ""
    flat = _FLAT.match(sentence)
    if flat is None:
        return None, sentence
    heading, rest = flat.group("h"), flat.group("rest")
    if heading.isupper() and " " not in heading:
        return None, sentence  # "BREAKING: ..." labels its own sentence only
    colon = re.match(rf"(?:#+\s*)?{re.escape(heading)}\s*:", sentence) is not None
    if _AMBIGUOUS.match(heading) and not colon:
        return None, sentence  # "Removed the legacy pass manager." is a sentence, not a heading
    return _section(heading), rest


def _kind(sentence: str, section: str) -> str:
    """Which list a sentence belongs to: its section's, else what its own words say."""
    if section in (BREAKING, DEPRECATED, REMOVED):
        return section
    if section == FIXES or _FIX_START.match(sentence):
        return FIXES
    if _BREAKING_UPPER.search(sentence) or _BREAKING_WORDS.search(sentence):
        return BREAKING
    if _DEPRECATED_WORDS.search(sentence) and not _REMOVED_WORDS.match(sentence):
        return DEPRECATED
    if _REMOVED_WORDS.search(sentence):
        return REMOVED
    return OTHER


def _item(sentence: str) -> str:
    """The sentence without its "BREAKING:" label or list marker, on one line, cut at a word."""
    text = _LABEL.sub("", re.sub(r"^[-*•]\s+", "", sentence.strip())).strip()
    return clip_line(text.rstrip(".。;；"), ITEM_CHARS)
