"""``digest sources ...``: list, check, and edit the source file in use; OPML in and out.

Edits go to the file a run loads: the ``DIGEST_SOURCES`` file when that is set
(it replaces the built-in list), else the ``DIGEST_SOURCES_EXTRA`` file
(default ``./var/sources.toml``, created on the first edit), which is added to
the built-in list; a built-in source is turned off there by an ``[[override]]``
(:class:`digest.ingest.sources.SourceEditor`). Every value from the command
line or an OPML file is checked by the source file's own rules; a bad one is a
one-line usage error (exit 2).

OPML (2.0, what feed readers exchange): ``import-opml`` adds every outline
with an ``xmlUrl`` (folders are flattened), keys made from the titles, and
skips the URLs already configured; ``export-opml`` prints the enabled web
sources. The reader is expat with any DOCTYPE refused, so no entity is ever
declared, expanded or fetched (no billion laughs, no external entities).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import unicodedata
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from digest import bootstrap
from digest.cli.output import format_table, print_json
from digest.domain.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.ingest.sources import SourceEditor, SourceSpec

MAX_OPML_BYTES = 10 * 1024 * 1024
_SLUG_DROP = re.compile(r"[^a-z0-9]+")


def add_commands(sub: Any) -> None:
    """Register ``sources list|check|add|remove|enable|disable|import-opml|export-opml``."""
    from digest.cli import ingest

    sources = sub.add_parser("sources", help="list, check and edit the configured sources; OPML in and out")
    src = sources.add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    listing = src.add_parser("list", help="each source, its last outcome and failure run")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(handler=list_cmd)
    check = src.add_parser("check", help="fetch each source once; store nothing")
    check.add_argument("--json", action="store_true", help="print a JSON array")
    check.set_defaults(handler=ingest.sources_check)

    add = src.add_parser("add", help="add a web feed to the source file in use")
    add.add_argument("key", metavar="KEY", help="a stable id: lowercase letters, digits, '.', '_', '-'")
    add.add_argument("url", metavar="URL", help="the feed's http:// or https:// URL")
    add.add_argument("--name", help="display name (default: the key)")
    add.add_argument("--kind", help="rss, atom, arxiv or github-releases (default: guessed from the URL)")
    add.add_argument("--weight", type=float, default=0.5, help="authority from 0 to 1 (default 0.5)")
    add.set_defaults(handler=add_cmd)
    remove = src.add_parser("remove", help="delete a source from the source file in use (not a built-in one)")
    remove.add_argument("key", metavar="KEY", help="the source's key")
    remove.set_defaults(handler=remove_cmd)
    for action, verb in (("enable", "turn a source on"), ("disable", "turn a source off (built-ins too)")):
        toggle = src.add_parser(action, help=verb)
        toggle.add_argument("key", metavar="KEY", help="the source's key")
        toggle.set_defaults(handler=toggle_cmd, enabled=action == "enable")
    imp = src.add_parser("import-opml", help="add every feed of an OPML file but the URLs already there")
    imp.add_argument("file", metavar="FILE", type=Path, help="the OPML file (from a feed reader's export)")
    imp.set_defaults(handler=import_cmd)
    exp = src.add_parser("export-opml", help="print the enabled web sources as OPML 2.0 on stdout")
    exp.set_defaults(handler=export_cmd)


def _editing(settings: Settings) -> AbstractContextManager[SourceEditor]:
    """The source file in use, read and written under its lock (one edit at a time)."""
    from digest.ingest.sources import edit_sources

    return edit_sources(settings.sources, settings.sources_extra)


def _checked(fields: dict[str, Any]) -> SourceSpec:
    """The source ``fields`` describe, or a usage error (exit 2) saying what is wrong."""
    from digest.ingest.sources import check_source

    try:
        return check_source(fields)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


async def add_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources add KEY URL``."""
    from digest.ingest.sources import check_web_url, clean_name, guess_kind

    try:
        url = check_web_url(args.url.strip())
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    spec = _checked({"key": args.key.strip(), "url": url, "weight": args.weight,
                     "name": clean_name(args.name or "", args.key.strip()),
                     "kind": args.kind or guess_kind(url)})
    with _editing(settings) as editor:
        editor.add(spec)
        editor.save()
    print(f"added {spec.key} ({spec.kind}, weight {spec.weight:g}) {spec.url} to {editor.path}")
    return 0


async def remove_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources remove KEY``."""
    with _editing(settings) as editor:
        editor.remove(args.key)
        editor.save()
    print(f"removed {args.key} from {editor.path}")
    return 0


async def toggle_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources enable|disable KEY``."""
    state = "enabled" if args.enabled else "disabled"
    with _editing(settings) as editor:
        if not editor.set_enabled(args.key, args.enabled):
            print(f"{args.key} is already {state}")
            return 0
        editor.save()
    print(f"{state} {args.key} in {editor.path}")
    return 0


# -- OPML --------------------------------------------------------------------------

@dataclass(frozen=True)
class Outline:
    """One feed of an OPML file: its title (text or title attribute) and xmlUrl."""

    title: str
    url: str


def parse_opml(data: bytes, name: str) -> list[Outline]:
    """Every outline with an ``xmlUrl``; ConfigError (one line) for a file that is no safe OPML."""
    from xml.parsers import expat

    outlines: list[Outline] = []
    root: list[str] = []

    def refuse(*_: object) -> NoReturn:
        raise ConfigError(f"{name}: refused: OPML needs no DOCTYPE or entity declarations "
                          "(they can expand or fetch without limit)")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if not root:
            root.append(tag)
        if tag.lower() != "outline":
            return
        fields = {k.lower(): v for k, v in attrs.items()}
        if fields.get("xmlurl", "").strip():
            outlines.append(Outline((fields.get("title") or fields.get("text") or "").strip(),
                                    fields["xmlurl"].strip()))

    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.StartElementHandler = start
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ConfigError(f"{name}: line {exc.lineno}: not well-formed XML "
                          f"({expat.errors.messages[exc.code]})") from None
    if root != ["opml"]:
        found = repr(root[0]) if root else "missing"
        raise ConfigError(f"{name}: not an OPML file (the root element is {found})")
    return outlines


def _read_opml(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_OPML_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_OPML_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_OPML_BYTES // (1024 * 1024)} MiB; not an OPML export")
    return data


def key_from(title: str, url: str, taken: set[str]) -> str:
    """A free source key from a feed's title (its URL's host and path when the title has no ASCII)."""
    def slug(text: str) -> str:
        ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
        return _SLUG_DROP.sub("-", ascii_text).strip("-")[:48].rstrip("-")

    parts = urlsplit(url)
    base = slug(title) or slug(f"{(parts.hostname or '').removeprefix('www.')} {parts.path}") or "feed"
    key, n = base, 1
    while key in taken:
        n += 1
        key = f"{base}-{n}"
    return key


async def import_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources import-opml FILE``: add what is new, say what was added and skipped."""
    from digest.ingest.sources import check_web_url, clean_name, guess_kind

    outlines = parse_opml(_read_opml(args.file), str(args.file))
    added: list[SourceSpec] = []
    skipped = 0
    with _editing(settings) as editor:
        taken = {spec.key for spec in editor.specs()}
        for outline in outlines:
            try:
                url = check_web_url(outline.url)
            except ConfigError as exc:
                print(f"skipped {outline.url[:100]!r}: {exc}")
                skipped += 1
                continue
            known = editor.key_of_url(url)
            if known is not None:
                print(f"skipped {url}: already configured as {known}")
                skipped += 1
                continue
            key = key_from(outline.title, url, taken)
            spec = _checked({"key": key, "name": clean_name(outline.title, key), "url": url,
                             "kind": guess_kind(url)})
            editor.add(spec)
            taken.add(key)
            added.append(spec)
            print(f"added {key} ({spec.kind}) {url}")
        if added:
            editor.save()
    where = f" to {editor.path}" if added else ""
    print(f"{len(added)} added{where}, {skipped} skipped, of {len(outlines)} feeds in {args.file}")
    return 0


def opml_document(specs: list[SourceSpec], now: dt.datetime) -> str:
    """OPML 2.0 of ``specs`` (every value escaped by ElementTree)."""
    import email.utils
    import xml.etree.ElementTree as ET

    from digest.ingest.sources import clean_name

    root = ET.Element("opml", version="2.0")
    head = ET.SubElement(root, "head")
    ET.SubElement(head, "title").text = "compiler-digest sources"
    ET.SubElement(head, "dateCreated").text = email.utils.format_datetime(now.astimezone(dt.UTC))
    body = ET.SubElement(root, "body")
    for spec in specs:
        name = clean_name(spec.name, spec.key)
        ET.SubElement(body, "outline", type="rss", text=name, title=name, xmlUrl=spec.url)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


async def export_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources export-opml``: the enabled http(s) sources on stdout."""
    specs = bootstrap.sources(settings)
    shown = [s for s in specs if s.enabled and not s.is_local]
    sys.stdout.write(opml_document(shown, bootstrap.clock(settings)()))
    left = len(specs) - len(shown)
    if left:
        print(f"{len(shown)} sources exported; {left} left out (disabled or local files)", file=sys.stderr)
    return 0


async def list_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources list``: the configured sources and their last outcome."""
    from digest.ingest.pipeline import source_states, sync_sources

    specs = bootstrap.sources(settings)
    async with bootstrap.database(settings) as sessions:
        async with sessions.begin() as session:
            await sync_sources(session, specs)
        states = {state.key: state for state in await source_states(sessions)}
    rows = [_source_row(spec, states.get(spec.key)) for spec in specs]
    if args.json:
        print_json(rows)
    else:
        headers = ("source", "kind", "weight", "enabled", "last fetch", "outcome", "failures",
                   "entries", "error")
        print(format_table(headers, [tuple(r.values())[:9] for r in rows], right=(2, 6, 7)))
    return 0


def _source_row(spec: SourceSpec, state: object) -> dict[str, object]:
    last = getattr(state, "last_fetched_at", None)
    return {
        "key": spec.key,
        "kind": spec.kind,
        "weight": spec.weight,
        "enabled": spec.enabled,
        "last_fetched_at": last.isoformat(timespec="seconds") if last else None,
        "last_status": getattr(state, "last_status", None),
        "consecutive_failures": getattr(state, "consecutive_failures", 0),
        "entries": getattr(state, "entries", 0),
        "last_error": (getattr(state, "last_error", None) or "")[:60] or None,
        "name": spec.name,
        "url": spec.url,
        "last_http_status": getattr(state, "last_http_status", None),
    }
