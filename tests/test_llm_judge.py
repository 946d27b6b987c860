"""bench/llm_judge.py: the LLM triage measured on a labelled set, through the real client and path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_modules import bench_module
from fake_llm import FakeLLM, Reply, answer

from digest.write import prompts

llm_judge = bench_module("llm_judge")
quality = bench_module("quality")
SET = "double-9"


def _answering(verdict: Callable[[int], dict[str, Any]]) -> Callable[[dict[str, Any]], Reply]:
    """A triage that answers each asked id (the set's entries are 1..n in file order) by ``verdict``."""
    def respond(body: dict[str, Any]) -> Reply:
        assert body["messages"][0]["content"] == prompts.TRIAGE_SYSTEM
        asked = json.loads(body["messages"][-1]["content"])["items"]
        return answer({"items": [{"id": row["id"], **verdict(row["id"])} for row in asked]})
    return respond


def _run(server: FakeLLM, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
         capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.chdir(tmp_path)  # no digest.toml
    monkeypatch.setenv("DIGEST_LLM_API_KEY", "sk-test")
    monkeypatch.setenv("DIGEST_LLM_BASE_URL", server.base_url)
    monkeypatch.setenv("DIGEST_LLM_MODEL", "judge-model")
    assert llm_judge.main(["--sets", SET, "--cache", str(tmp_path / "answers.sqlite")]) == 0
    return capsys.readouterr().out


def test_an_llm_that_answers_as_the_readers_scores_what_they_agree_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gold = quality.load_double(SET)

    def readers(n: int) -> dict[str, Any]:
        return {"relevant": gold[n - 1].relevant, "layers": sorted(gold[n - 1].layers)}

    with FakeLLM(default=_answering(readers)) as server:
        out = _run(server, monkeypatch, tmp_path, capsys)
        asked = sum(len(json.loads(seen.user)["items"]) for seen in server.requests)
    assert asked == len(gold), "every entry is asked about, once"
    assert f"the LLM answered for {len(gold)} of {len(gold)}" in out
    assert "relevance precision 1.000 recall 1.000\nlayer micro-F1 1.000" in out
    assert "judge-model" in out and "failures: none" in out

    with FakeLLM(default=_answering(readers)) as server:  # the same answers, from the cache
        again = _run(server, monkeypatch, tmp_path, capsys)
        assert server.requests == []
    figures = [text.split("######## cost")[0].split("\n", 1)[1] for text in (out, again)]
    assert figures[0] == figures[1] and "0 request(s)" in again


def test_an_llm_that_never_answers_leaves_the_rules_figures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeLLM(default=answer({"items": []})) as server:
        out = _run(server, monkeypatch, tmp_path, capsys)
    judged = out.split(f"== {SET} (LLM triage)")[1].splitlines()[1]
    rules = next(line for line in out.splitlines() if "the rules alone" in line)
    assert "the LLM answered for 0 of" in out
    assert judged.replace("relevance precision", "P").replace("recall", "R").split() == \
        rules.split("relevance")[1].split("layer")[0].split(), "the rules decide every entry"


def test_without_a_key_it_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DIGEST_LLM_API_KEY", raising=False)
    assert llm_judge.main(["--sets", SET]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DIGEST_LLM_API_KEY" in err
