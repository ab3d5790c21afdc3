"""Permutation importance of the refreshed model (`batch.importance`), on a generated crawl
whose new links come from each page's own rate and its neighbours'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batch.evaluate import load_rows
from batch.generate import GeneratorConfig, write_events
from batch.importance import family, permutation_importance, poisson_deviance
from streams.replay import replay


def test_poisson_deviance_is_zero_only_for_the_truth() -> None:
    observed = np.array([0.0, 1.0, 4.0])
    assert poisson_deviance(observed, observed) == pytest.approx(0.0, abs=1e-8)
    assert poisson_deviance(observed + 0.5, observed) > 0.0
    assert family("dp_new_external_12") == "dp_new_external"


def test_link_history_carries_the_weight_on_a_generated_crawl(tmp_path: Path) -> None:
    events = tmp_path / "crawl.jsonl.gz"
    write_events(events, GeneratorConfig(pages=800, crawls=6, seed=3), progress=False)
    replay(events, tmp_path / "run", progress=False)
    rows = load_rows(tmp_path / "run")
    table = permutation_importance(rows, holdout_crawls=2, repeats=2)
    assert len(table) > 10 and table["importance"].is_monotonic_decreasing
    top = table.head(3)["family"].tolist()
    # the generator's links come from each page's rate and its neighbours': what the page and
    # its related pages showed before must be what the model leans on
    assert any(f.startswith(("dp_new", "dp_rate", "dp_lcr", "dn_related")) for f in top), table
    # a family the model cannot use (never varies) moves nothing when shuffled
    features = [c for c in rows.columns if c.startswith(("sp_", "sn_", "dp_", "dn_"))]
    varying = {family(c) for c in features if rows[c].nunique(dropna=False) > 1}
    constant = {family(c) for c in features} - varying
    assert constant, "the crawl has features that never vary (e.g. the semantic ones)"
    for name in constant & set(table["family"]):
        assert table.loc[table["family"] == name, "importance"].iloc[0] == 0.0, name
