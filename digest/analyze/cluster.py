"""Group entries about the same piece of work into clusters (events), purely.

Two entries are one piece of work when they share an identity key (the same
arXiv id in any version, DOI, GitHub repo@tag or canonical URL), when one
links the other and is about it, or when their titles are near-identical. A
link is evidence, not identity: a post linking arxiv.org/abs/<id> (or the
other entry's URL) joins it only when it is about it (:func:`is_about`: the
titles share most of their words, the post quotes the paper's whole title, or
its lead names what sets the paper apart; a GSoC post citing "our paper" is
not that paper).
Links from round-ups (a post whose links reach more than two other works) join
nothing; a link to an already known event joins it (its text is not at hand). Union-find over
entry indices; titles are compared only inside small blocks of entries that
share one of their rarest words, so thousands of entries take well under a
second.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from itertools import combinations
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rapidfuzz import fuzz

from digest.domain.items import Item

TITLE_SIMILARITY = 92.0
MAX_LINK_TARGETS = 2
MAX_ARXIV_REFS = 2
MAX_URL_REFS = 12
_MIN_TITLE_WORDS = 4
_MIN_TITLE_CHARS = 20
_BLOCK_WORDS = 3
_MAX_BLOCK = 400
_STRONG = ("arxiv:", "doi:")
_KEY_ORDER = ("arxiv", "doi", "gh", "url", "title")
_ARXIV = re.compile(
    r"arxiv\.org/(?:abs|pdf|html)/([a-z\-]+(?:\.[a-z]{2})?/\d{7}|\d{4}\.\d{4,5})|"
    r"10\.48550/arxiv\.(\d{4}\.\d{4,5})",
    re.IGNORECASE,
)
_VERSION = re.compile(r"v\d+$")
_WORD = re.compile(r"[a-z0-9]+(?:\.[a-z0-9]+)*|[^\W\d_a-z]")
_TRACKING = re.compile(r"^(utm_|fbclid$|gclid$|ref$|ref_src$)")


def normalise_arxiv_id(raw: str) -> str:
    """An arXiv id without its version ("2409.01234v2" -> "2409.01234")."""
    return _VERSION.sub("", raw.strip().lower())


def arxiv_id_in(url: str) -> str | None:
    """The arXiv id an arxiv.org (or arXiv DOI) link points to, if any."""
    match = _ARXIV.search(url)
    if not match:
        return None
    return normalise_arxiv_id(match.group(1) or match.group(2))


def normalise_url(url: str) -> str:
    """A comparable form of a URL: no scheme, www, fragment, tracking query or trailing slash."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower().removeprefix("www.")
    if parts.port and parts.port not in (80, 443):
        host = f"{host}:{parts.port}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not _TRACKING.match(k)])
    path = parts.path.rstrip("/") or ""
    return urlunsplit(("", host, path, query, "")).removeprefix("//")


def title_words(title: str) -> list[str]:
    """Lower-case words of a title (version numbers kept whole, CJK per character)."""
    return _WORD.findall(unicodedata.normalize("NFKC", title).lower())


def _fuzzy_title(item: Item) -> str | None:
    """The normalised title when it may identify the work (long enough, not a release)."""
    if item.kind == "github-releases":
        return None  # releases are named by repo@tag; their titles repeat across repos
    words = title_words(item.title)
    text = " ".join(words)
    if len(words) < _MIN_TITLE_WORDS or len(text) < _MIN_TITLE_CHARS:
        return None
    return text


def _title_key(text: str) -> str:
    return "title:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_keys(item: Item) -> list[str]:
    """The keys naming the work an item is itself (arXiv id, DOI, repo@tag, URL, title)."""
    keys: list[str] = []
    arxiv = item.arxiv_id or (arxiv_id_in(item.url) if item.url else None)
    if arxiv:
        keys.append(f"arxiv:{normalise_arxiv_id(arxiv)}")
    if item.doi:
        keys.append(f"doi:{item.doi.strip().lower()}")
    if item.repo and item.tag:
        keys.append(f"gh:{item.repo.strip().lower()}@{item.tag.strip()}")
    if item.url:
        keys.append(f"url:{normalise_url(item.url)}")
    title = _fuzzy_title(item)
    if title:
        keys.append(_title_key(title))
    return keys


def _host(url: str) -> str:
    return normalise_url(url).split("/", 1)[0]


def reference_keys(item: Item) -> list[str]:
    """Keys of the works an item links to (none from round-ups that link many papers).

    Links to the item's own site are navigation ("related posts"), not the work.
    """
    own = set(identity_keys(item))
    home = _host(item.url) if item.url else None
    arxiv: dict[str, None] = {}
    urls: dict[str, None] = {}
    for link in item.links:
        paper = arxiv_id_in(link)
        key = f"arxiv:{paper}" if paper else f"url:{normalise_url(link)}"
        if key in own or (not paper and _host(link) == home):
            continue
        (arxiv if paper else urls)[key] = None
    refs = list(arxiv) if len(arxiv) <= MAX_ARXIV_REFS else []
    return refs + (list(urls) if len(urls) <= MAX_URL_REFS else [])


def cluster_keys(item: Item) -> list[str]:
    """Every key under which an existing event may know this item: identity, then links."""
    return list(dict.fromkeys(identity_keys(item) + reference_keys(item)))


def _key_rank(key: str) -> tuple[int, str]:
    kind = key.split(":", 1)[0]
    return (_KEY_ORDER.index(kind) if kind in _KEY_ORDER else len(_KEY_ORDER), key)


def _when(item: Item) -> float:
    if item.published is None:
        return float("inf")
    stamp = item.published if item.published.tzinfo else item.published.replace(tzinfo=UTC)
    return stamp.timestamp()


def primary_order(item: Item) -> tuple[float, float, str, int]:
    """Sort key making the best item first: highest source weight, then earliest, then source, then id.

    The source key comes before the entry id: sources are fetched concurrently, so ids follow
    the order the feeds arrived in, and a paper cross-listed in two categories (same weight,
    same time) would otherwise name them in a different order from run to run.
    """
    return (-item.source_weight, _when(item), item.source_key, item.entry_id)


@dataclass(frozen=True)
class Cluster:
    """Entries about one piece of work; ``event_id`` is set when it joins a known event."""

    key: str
    items: tuple[Item, ...]
    primary: Item
    event_id: int | None = None
    keys: tuple[str, ...] = field(default=())


class _UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))
        self.strong: dict[int, set[str]] = {}  # root -> arXiv ids / DOIs of its component

    def find(self, node: int) -> int:
        root = node
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[node] != root:
            self.parent[node], node = root, self.parent[node]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            low, high = min(ra, rb), max(ra, rb)
            self.parent[high] = low
            self.strong.setdefault(low, set()).update(self.strong.pop(high, ()))

    def union_if_compatible(self, a: int, b: int) -> None:
        """Union unless both sides are already known to be different papers."""
        sa, sb = self.strong.get(self.find(a)), self.strong.get(self.find(b))
        if not (sa and sb and sa.isdisjoint(sb)):
            self.union(a, b)


def _join_identities(uf: _UnionFind, ids: list[list[str]]) -> dict[str, int]:
    owner: dict[str, int] = {}
    for index, keys in enumerate(ids):
        strong = {k for k in keys if k.startswith(_STRONG)}
        if strong:
            uf.strong.setdefault(uf.find(index), set()).update(strong)
        for key in keys:
            if not key.startswith("title:"):  # titles join later, guarded
                uf.union(owner.setdefault(key, index), index)
    return owner


def _join_references(uf: _UnionFind, items: Sequence[Item], refs: list[list[str]],
                     owner: dict[str, int], nodes: dict[str, int]) -> None:
    for index, keys in enumerate(refs):
        targets = {owner.get(key, nodes.get(key, index)) for key in keys} - {index}
        if len(targets) <= MAX_LINK_TARGETS:
            for target in targets:
                if target >= len(items) or is_about(items[index], items[target]):
                    uf.union(index, target)


_MIN_WORD = 3
_STOPWORDS = frozenset(str.split("the and for with from via into our its are new how what why"))
TITLE_OVERLAP = 2 / 3  # of the content words of a title
LEAD_OVERLAP = 0.5
LEAD_CHARS = 400


def _content_words(title: str) -> set[str]:
    """A title's words that can name a work: three letters or more, or with a digit."""
    return {w for w in title_words(title)
            if (len(w) >= _MIN_WORD and w not in _STOPWORDS) or any(c.isdigit() for c in w)}


def is_about(linker: Item, target: Item) -> bool:
    """Whether ``linker`` reports ``target``, rather than only citing it.

    A post names the works it links, so the words of its whole text prove little
    (a GSoC post on shuffle costs links "our paper" on re-rolling and says
    "re-rolling" in its last paragraph). It is about the target when the two
    titles share most of their words; when it quotes the target's whole title
    (link text "Precompile: Compile Once, Reuse Across Ranks ..."); or when its
    lead (the first few hundred characters) names at least half of the target's
    title words that its own title does not, so what sets the target apart
    ("guided re-rolling") is what the post opens with. A post linked by its own URL
    (not a paper, which is cited by many) needs only half of its title words named.
    """
    wanted, own = _content_words(target.title), _content_words(linker.title)
    if not wanted:
        return False
    if not target.arxiv_id:  # a link to one post's own URL is a stronger sign than a citation
        said = set(title_words(f"{linker.title} {linker.summary} {linker.body}"))
        return len(wanted & said) >= LEAD_OVERLAP * len(wanted)
    shared = len(wanted & own)
    if shared >= TITLE_OVERLAP * len(wanted) or (own and shared >= TITLE_OVERLAP * len(own)):
        return True
    quoted = " ".join(title_words(target.title))
    if len(quoted) >= _MIN_TITLE_CHARS and quoted in " ".join(title_words(f"{linker.summary} {linker.body}")):
        return True
    rest = wanted - own
    lead = set(title_words((linker.summary or linker.body)[:LEAD_CHARS]))
    return len(rest & lead) >= LEAD_OVERLAP * len(rest)


def _known_nodes(known: Mapping[str, int], count: int) -> tuple[dict[str, int], dict[int, int]]:
    """One extra union-find node per known event: key -> node, node -> event id."""
    node_of = {event: count + n for n, event in enumerate(sorted(set(known.values())))}
    nodes = {key: node_of[event] for key, event in known.items()}
    return nodes, {node: event for event, node in node_of.items()}


def _join_titles(uf: _UnionFind, items: Sequence[Item]) -> None:
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        text = _fuzzy_title(item)
        if text is not None:
            uf.union_if_compatible(first.setdefault(text, index), index)
    texts = list(first)
    for i, j in sorted(_title_pairs(texts)):
        if _same_title(texts[i], texts[j]):
            uf.union_if_compatible(first[texts[i]], first[texts[j]])


def _title_pairs(texts: list[str]) -> set[tuple[int, int]]:
    words = [sorted(set(text.split())) for text in texts]
    freq = Counter(word for ws in words for word in ws)
    blocks: dict[str, list[int]] = {}
    for index, ws in enumerate(words):
        for word in sorted(ws, key=lambda w: (freq[w], w))[:_BLOCK_WORDS]:
            blocks.setdefault(word, []).append(index)
    # a block this large means its titles share only common words: not identifying
    small = (members for members in blocks.values() if len(members) <= _MAX_BLOCK)
    return {pair for members in small for pair in combinations(members, 2)}


def _same_title(a: str, b: str) -> bool:
    numbers_a = {w for w in a.split() if any(c.isdigit() for c in w)}
    numbers_b = {w for w in b.split() if any(c.isdigit() for c in w)}
    if numbers_a != numbers_b:
        return False
    return fuzz.token_sort_ratio(a, b, score_cutoff=TITLE_SIMILARITY) > 0


def _fallback_key(item: Item) -> str:
    text = " ".join(title_words(item.title)) or str(item.entry_id)
    return _title_key(f"{item.source_key}|{text}")


def _make_cluster(
    members: list[Item], own: list[str], keys: list[str], event_id: int | None
) -> Cluster:
    ordered = tuple(sorted(members, key=primary_order))
    key = min(own, key=_key_rank) if own else _fallback_key(ordered[0])
    return Cluster(key, ordered, ordered[0], event_id, tuple(sorted(set(keys))))


def cluster(items: Sequence[Item], *, known: Mapping[str, int] | None = None) -> list[Cluster]:
    """Group items into clusters; a cluster reaching a key in ``known`` joins that event id."""
    count = len(items)
    nodes, event_of_node = _known_nodes(known or {}, count)
    uf = _UnionFind(count + len(event_of_node))
    ids = [identity_keys(item) for item in items]
    refs = [reference_keys(item) for item in items]
    owner = _join_identities(uf, ids)
    for index, keys in enumerate(ids):
        for key in keys:
            if key in nodes:
                uf.union(index, nodes[key])
    _join_references(uf, items, refs, owner, nodes)
    _join_titles(uf, items)
    return _collect(items, uf, ids, refs, event_of_node)


def _collect(
    items: Sequence[Item],
    uf: _UnionFind,
    ids: list[list[str]],
    refs: list[list[str]],
    event_of_node: dict[int, int],
) -> list[Cluster]:
    groups: dict[int, list[int]] = {}
    for index in range(len(items)):
        groups.setdefault(uf.find(index), []).append(index)
    events: dict[int, list[int]] = {}
    for node, event in event_of_node.items():
        events.setdefault(uf.find(node), []).append(event)
    return [
        _make_cluster(
            [items[i] for i in members],
            [k for i in members for k in ids[i]],
            [k for i in members for k in ids[i] + refs[i]],
            min(events[root]) if root in events else None,
        )
        for root, members in groups.items()
    ]
