"""The evaluation on a slice of the real crawl S (skips where ../shared is absent)."""

from __future__ import annotations

import gzip
import math
from itertools import islice
from pathlib import Path

import pytest

from batch.evaluate import evaluate_rounds, load_rows, summarise
from streams.replay import replay

SHARED_S = Path(__file__).resolve().parents[2] / "shared" / "data" / "S" / "crawls.jsonl.gz"
PAGES = 2485
CRAWLS = 7  # crawls 0..6: rounds 1..6; in round 1 no page gained an internal link


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory):
    if not SHARED_S.exists():
        pytest.skip(f"real crawl S not present at {SHARED_S}")
    work = tmp_path_factory.mktemp("s-slice")
    events = work / "slice.jsonl.gz"
    with gzip.open(SHARED_S, "rb") as src, gzip.open(events, "wb") as dst:
        dst.writelines(islice(src, PAGES * CRAWLS))  # the file is sorted by crawl, then URL
    replay(events, work / "run", progress=False)
    return evaluate_rounds(load_rows(work / "run"), ("lbla", "nnl-pr", "nnl-av", "ccr"))


def test_rounds_without_new_links_are_reported_as_such(table) -> None:
    first = table[(table["view"] == "round") & (table["round"] == 1)]
    internal = first[first["target"] == "nnl_internal"]
    assert len(internal) and internal["no_new_links"].all()
    assert all(v is None for v in internal["p_auc"])
    external = first[first["target"] == "nnl_external"]
    assert not external["no_new_links"].any()  # seven pages gained external links


def test_every_round_and_ranking_is_judged_and_the_oracle_is_perfect(table) -> None:
    rounds = table[table["view"] == "round"]
    assert sorted(set(rounds["round"].dropna().astype(int))) == list(range(1, CRAWLS))
    assert {"lbla", "nnl-pr", "nnl-av", "ccr", "random", "oracle"} <= set(table["ranking"])
    oracle = table[(table["ranking"] == "oracle") & ~table["no_new_links"].astype(bool)]
    for value in oracle["p_auc"]:
        assert value == pytest.approx(1.0)
    for column in ("p_auc", "spearman", "yield_relative_10"):
        for value in summarise(table)[column]:
            assert value is None or not math.isnan(value), column
