"""The learned scorers' quality floors, judged on held-out crawls only (`batch.scorer_choice`).

On a generated crawl: the default learned scorer finds more new outlinks at a 10% budget than
NNL-Av and NNL-Pr; NL classification with history beats NNL-Pr on F1 and balanced accuracy;
the online learner, after one pass, reaches at least 95% of the batch ExtraTrees' yield@10%.
"""

from __future__ import annotations

import pytest

from batch.generate import GeneratorConfig, write_events
from batch.scorer_choice import compare_scorers
from online.scoring import DEFAULT_SCORER


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("floors")
    events = root / "crawl.jsonl.gz"
    write_events(events, GeneratorConfig(pages=3000, crawls=8, seed=7))
    frame, facts = compare_scorers(events, root, holdout_crawls=3)
    assert facts["held_out_crawls"] == [4, 5, 6] and facts["train_rows"] > 5000
    return frame


def test_default_learned_scorer_beats_the_link_baselines_at_10_percent(table) -> None:
    y = table["yield@10%"]
    assert y[DEFAULT_SCORER] > y["nnl-av"] and y[DEFAULT_SCORER] > y["nnl-pr"]


def test_nl_classification_beats_nnl_pr(table) -> None:
    for scorer in ("online", DEFAULT_SCORER):
        for metric in ("F1 internal", "BA internal", "F1 external", "BA external"):
            assert table.loc[scorer, metric] > table.loc["nnl-pr", metric], (scorer, metric)


def test_online_learner_reaches_95_percent_of_the_batch_model(table) -> None:
    assert table.loc["online", "yield@10%"] >= 0.95 * table.loc["batch", "yield@10%"]
