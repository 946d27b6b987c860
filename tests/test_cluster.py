"""Grouping entries into events: identity keys, links, near-identical titles, known events."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from digest.analyze.cluster import (
    Cluster,
    arxiv_id_in,
    cluster,
    cluster_keys,
    normalise_url,
)
from digest.domain.items import Item

T0 = datetime(2026, 9, 28, 0, 0, tzinfo=UTC)


def make(entry_id: int, title: str, *, key: str = "arxiv-cs.pl", weight: float = 0.7,
         kind: str = "arxiv", url: str | None = None, hours: float = 0,
         **extra: object) -> Item:
    when = T0 + timedelta(hours=hours)
    summary = str(extra.pop("summary", ""))
    return Item(entry_id, key, key, weight, kind, title, summary, url, published=when,
                **extra)  # type: ignore[arg-type]


def groups(clusters: list[Cluster]) -> set[frozenset[int]]:
    return {frozenset(i.entry_id for i in c.items) for c in clusters}


def test_same_arxiv_id_in_any_version_and_feed_is_one_cluster() -> None:
    a = make(1, "Torch-PIM: Automated Profile-Guided PIM Offloading", arxiv_id="2409.01234",
             arxiv_version=1, url="https://arxiv.org/abs/2409.01234v1")
    b = make(2, "Torch-PIM (cross-list)", key="arxiv-cs.ar", arxiv_id="2409.01234v2",
             url="https://arxiv.org/abs/2409.01234v2")
    other = make(3, "Another paper about something else entirely", arxiv_id="2409.99999")
    clusters = cluster([a, b, other])
    assert groups(clusters) == {frozenset({1, 2}), frozenset({3})}
    assert clusters[0].key == "arxiv:2409.01234"


def test_same_canonical_url_is_one_cluster() -> None:
    a = make(1, "Post", kind="rss", key="nvidia", url="https://developer.nvidia.com/blog/x/")
    b = make(2, "Same post elsewhere", kind="rss", key="weekly",
             url="http://www.developer.nvidia.com/blog/x?utm_source=feed#top")
    (only,) = cluster([a, b])
    assert {i.entry_id for i in only.items} == {1, 2}
    assert only.key == "url:developer.nvidia.com/blog/x"


def test_post_linking_the_paper_joins_it() -> None:
    paper = make(1, "Learning Exact NVIDIA SASS Encoders", arxiv_id="2409.11111",
                 url="https://arxiv.org/abs/2409.11111")
    post = make(2, "F2Asm explained", kind="rss", key="nvidia", weight=0.8,
                summary="F2Asm learns exact SASS encoders for NVIDIA GPUs.",
                url="https://developer.nvidia.com/blog/f2asm",
                links=("https://arxiv.org/pdf/2409.11111v3", "https://github.com/x/f2asm"))
    follow = make(3, "Discussion of the F2Asm blog", kind="rss", key="weekly",
                  url="https://weekly.example/42", links=("https://developer.nvidia.com/blog/f2asm/",))
    (only,) = cluster([paper, post, follow])
    assert {i.entry_id for i in only.items} == {1, 2, 3}
    assert only.key == "arxiv:2409.11111"
    assert only.primary.entry_id == 2  # the highest source weight


def test_roundup_linking_many_works_joins_none() -> None:
    papers = [make(i, f"Paper number {i} on compiler things", arxiv_id=f"2409.0000{i}")
              for i in range(1, 5)]
    roundup = make(9, "This week in compilers", kind="rss", key="weekly",
                   url="https://weekly.example/1",
                   links=tuple(f"https://arxiv.org/abs/2409.0000{i}" for i in range(1, 5)))
    assert len(cluster([*papers, roundup])) == 5
    assert not any(k.startswith("arxiv:") for k in cluster_keys(roundup))


def test_near_identical_titles_join_but_short_or_numbered_ones_do_not() -> None:
    a = make(1, "Splyce: SIMD Vectorization of Sparse Coiteration", kind="rss", key="a")
    b = make(2, "SPLYCE - SIMD vectorization of sparse co-iteration!", kind="rss", key="b")
    c = make(3, "Splyce: SIMD Vectorisation of Sparse Coiteration", kind="rss", key="c")
    v1 = make(4, "v1.2", kind="rss", key="d")
    v2 = make(5, "v1.2", kind="rss", key="e")
    n1 = make(6, "LLVM 19.1.0 release notes and highlights", kind="rss", key="f")
    n2 = make(7, "LLVM 19.1.1 release notes and highlights", kind="rss", key="g")
    assert groups(cluster([a, b, c, v1, v2, n1, n2])) == {
        frozenset({1, 2, 3}), frozenset({4}), frozenset({5}), frozenset({6}), frozenset({7})}


def test_releases_cluster_by_repo_and_tag_not_by_title() -> None:
    feed = make(1, "v3.0.0", kind="github-releases", key="gh-triton", repo="triton-lang/triton",
                tag="v3.0.0")
    again = make(2, "Release v3.0.0", kind="github-releases", key="gh-mirror",
                 repo="Triton-Lang/Triton", tag="v3.0.0")
    other = make(3, "v3.0.0", kind="github-releases", key="gh-tvm", repo="apache/tvm", tag="v3.0.0")
    clusters = cluster([feed, again, other])
    assert groups(clusters) == {frozenset({1, 2}), frozenset({3})}
    assert {c.key for c in clusters} == {"gh:triton-lang/triton@v3.0.0", "gh:apache/tvm@v3.0.0"}


def test_known_keys_attach_new_entries_to_existing_events() -> None:
    replace = make(1, "Torch-PIM v2", arxiv_id="2409.01234", arxiv_version=2,
                   announce_type="replace")
    post = make(2, "A post on Torch-PIM", kind="rss", key="blog", url="https://blog.example/p",
                links=("https://arxiv.org/abs/2409.01234",))
    fresh = make(3, "Something new and unrelated to the rest", arxiv_id="2409.77777")
    clusters = cluster([replace, post, fresh], known={"arxiv:2409.01234": 42, "arxiv:x": 7})
    by_ids = {frozenset(i.entry_id for i in c.items): c for c in clusters}
    assert by_ids[frozenset({1, 2})].event_id == 42
    assert by_ids[frozenset({3})].event_id is None


def test_entries_reaching_one_known_event_by_different_keys_merge() -> None:
    a = make(1, "Paper A with a long enough title", url="https://a.example/x")
    b = make(2, "Paper B with another long title", url="https://b.example/y")
    known = {"url:a.example/x": 5, "url:b.example/y": 5}
    (only,) = cluster([a, b], known=known)
    assert only.event_id == 5


def test_cluster_keys_list_identity_then_links() -> None:
    post = make(1, "A post about Triton 3", kind="rss", key="blog", url="https://Blog.example/p/",
                links=("https://arxiv.org/abs/2409.01234v2", "https://blog.example/p"),
                doi="10.1145/ABC")
    keys = cluster_keys(post)
    assert keys[:2] == ["doi:10.1145/abc", "url:blog.example/p"]
    assert keys[2].startswith("title:")
    assert keys[3:] == ["arxiv:2409.01234"]


def test_primary_is_highest_weight_then_earliest() -> None:
    late = make(1, "Same work, a long shared title here", url="https://x.example/1", weight=0.5,
                hours=5)
    early = make(2, "Same work, a long shared title here", url="https://y.example/2", weight=0.5,
                 hours=1)
    (only,) = cluster([late, early])
    assert only.primary.entry_id == 2
    assert [i.entry_id for i in only.items] == [2, 1]


def test_helpers() -> None:
    assert arxiv_id_in("https://arxiv.org/abs/2409.01234v3") == "2409.01234"
    assert arxiv_id_in("https://doi.org/10.48550/arXiv.2409.01234") == "2409.01234"
    assert arxiv_id_in("https://arxiv.org/abs/cs/0601001v1") == "cs/0601001"
    assert arxiv_id_in("https://example.org/2409.01234") is None
    assert normalise_url("HTTPS://www.Example.org:443/a/b/?utm_medium=x&q=1#frag") == (
        "example.org/a/b?q=1")


def _generated(works: int, seed: int = 7) -> tuple[list[Item], dict[int, int]]:
    """Items for ``works`` distinct works, each seen 1-4 times in different guises."""
    rng = random.Random(seed)
    words = ["".join(chr(97 + (n // 26**k) % 26) for k in range(3)) + "on" for n in range(3000)]
    items: list[Item] = []
    work_of: dict[int, int] = {}

    def add(work: int, **kwargs: object) -> None:
        entry = make(len(items) + 1, hours=rng.random() * 24, **kwargs)  # type: ignore[arg-type]
        items.append(entry)
        work_of[entry.entry_id] = work

    for work in range(works):
        title = " ".join(rng.sample(words, 7))
        if work % 5 == 4:  # a release: short, repeated titles, identified by repo@tag
            repo, tag = f"org{work}/proj", f"v{work % 3}.0"
            add(work, title=tag, kind="github-releases", key="gh", repo=repo, tag=tag)
            add(work, title=tag, kind="github-releases", key="gh2", repo=repo, tag=tag)
            continue
        arxiv = f"2409.{work:05d}"
        add(work, title=title, arxiv_id=arxiv, url=f"https://arxiv.org/abs/{arxiv}v1")
        if rng.random() < 0.5:
            add(work, title=title.upper() + ".", key="arxiv-cs.ar", arxiv_id=f"{arxiv}v2")
        if rng.random() < 0.4:
            add(work, title=f"Blog: {rng.choice(words)}", kind="rss", key="blog",
                url=f"https://blog.example/{work}", links=(f"https://arxiv.org/abs/{arxiv}",),
                summary=f"We explain {' '.join(title.split()[:4])}.")
        if rng.random() < 0.3:
            add(work, title=title + "s!", kind="rss", key="news",
                url=f"https://news.example/{work}")
    return items, work_of


def test_five_thousand_items_group_by_work() -> None:
    items, work_of = _generated(2400)
    assert len(items) >= 5000
    clusters = cluster(items)
    expected: dict[int, set[int]] = defaultdict(set)
    for entry_id, work in work_of.items():
        expected[work].add(entry_id)
    assert groups(clusters) == {frozenset(ids) for ids in expected.values()}
    assert len({c.key for c in clusters}) == len(clusters)


def test_similar_titles_of_different_papers_stay_apart() -> None:
    one = make(1, "Scalable Sparse Compilation, Part I", arxiv_id="2409.10001")
    two = make(2, "Scalable Sparse Compilation, Part II", arxiv_id="2409.10002")
    same = make(3, "Scalable Sparse Compilation, Part I", arxiv_id="2409.10003")
    post = make(4, "Scalable sparse compilation - part I", kind="rss", key="blog",
                url="https://blog.example/sparse")
    found = groups(cluster([one, two, same, post]))
    assert frozenset({2}) in found and frozenset({3}) in found
    assert frozenset({1, 4}) in found


def test_links_within_the_same_site_are_navigation_not_identity() -> None:
    a = make(1, "Programming Blackwell with cuTile today", kind="rss", key="nvidia",
             url="https://developer.nvidia.com/blog/cutile",
             links=("https://developer.nvidia.com/blog/cutlass-4",))
    b = make(2, "What is new in CUTLASS 4 for everyone", kind="rss", key="nvidia",
             url="https://developer.nvidia.com/blog/cutlass-4")
    assert len(cluster([a, b])) == 2


def test_a_link_is_evidence_not_identity() -> None:
    paper = make(1, "Retargetable ABI Lowering for Heterogeneous Calling Conventions",
                 arxiv_id="2409.22222", url="https://arxiv.org/abs/2409.22222")
    gsoc = make(2, "GSoC 2025: Introducing an ABI Lowering Library", kind="rss", key="llvm-blog",
                url="https://blog.llvm.org/posts/abi-library",
                summary="This summer I built a library for Clang's ABI lowering; see the related "
                        "paper for background.", links=("https://arxiv.org/abs/2409.22222",))
    assert groups(cluster([paper, gsoc])) == {frozenset({1}), frozenset({2})}
    about = make(3, "Calling conventions, retargeted", kind="rss", key="blog",
                 url="https://blog.example/abi", links=("https://arxiv.org/abs/2409.22222",),
                 summary="Our paper on retargetable ABI lowering for heterogeneous calling "
                         "conventions is out.")
    assert groups(cluster([paper, about])) == {frozenset({1, 3})}


def test_a_post_citing_a_related_paper_is_not_that_paper() -> None:
    """The GSoC shuffle-cost post links "our paper" on re-rolling: two works, not one event."""
    paper = make(1, "Cost-Model-Guided Re-Rolling for the LLVM SLP Vectorizer", arxiv_id="2611.04719",
                 url="https://arxiv.org/abs/2611.04719")
    post = make(2, "GSoC 2026: Making the SLP Vectorizer's Cost Model Aware of Shuffles", kind="rss",
                key="llvm-blog", url="https://blog.llvm.org/posts/gsoc-slp",
                summary="This summer I worked on the SLP vectorizer's cost model as part of Google Summer of "
                        "Code, mentored by the LLVM vectorization working group.",
                body="Follow-up work on re-rolling partially unrolled code is described in our paper.",
                links=("https://arxiv.org/abs/2611.04719",))
    assert groups(cluster([paper, post])) == {frozenset({1}), frozenset({2})}


def test_a_post_quoting_the_papers_title_is_that_paper() -> None:
    paper = make(1, "Precompile: Compile Once, Reuse Across Ranks for SPMD Training with torch.compile",
                 arxiv_id="2611.04302", url="https://arxiv.org/abs/2611.04302")
    post = make(2, "Compile Once, Run on Every Rank: Precompile for Distributed torch.compile",
                kind="rss", key="pytorch", url="https://pytorch.org/blog/precompile",
                summary="Large training jobs compile the same model on every GPU.",
                body="Today we are sharing Precompile (paper: Precompile: Compile Once, Reuse Across Ranks "
                     "for SPMD Training with torch.compile).", links=("https://arxiv.org/abs/2611.04302",))
    assert groups(cluster([paper, post])) == {frozenset({1, 2})}


def test_the_primary_of_a_tie_does_not_depend_on_which_feed_arrived_first() -> None:
    """Cross-listed entries (same weight, same time) order by source, whatever their ids."""
    for first, second in ((1, 2), (2, 1)):
        pl = make(first, "BitSASS: exact SASS encoders", key="arxiv-cs.pl", arxiv_id="2611.04501")
        ar = make(second, "BitSASS: exact SASS encoders", key="arxiv-cs.ar", arxiv_id="2611.04501")
        (found,) = cluster([pl, ar])
        assert [i.source_key for i in found.items] == ["arxiv-cs.ar", "arxiv-cs.pl"]
        assert found.primary.source_key == "arxiv-cs.ar"
