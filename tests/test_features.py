from __future__ import annotations

import math

import numpy as np
import pytest

from online.events import parse_event
from online.features import (
    FEATURE_SETS,
    N_STATS,
    STATS_FIELDS,
    feature_names,
    feature_vector,
    look_around,
    page_features,
    page_stats,
)
from online.history import update
from online.links import link_info

DAY = 86_400
T0 = 1_767_225_600  # 2026-01-01: fetch times lie after 1990 (the contract's bound)
PAGE = "https://www.site.org/a/b/"


def history(counts: list[int]):
    state = None
    links: list[str] = []
    for d, n in enumerate([0, *counts]):
        links = links + [f"https://site.org/n{d}-{i}" for i in range(n)]
        state, _ = update(
            state,
            parse_event(
                {
                    "url": PAGE,
                    "fetched_at": T0 + d * 7 * DAY,
                    "outlinks": links,
                    "content_size": 100 + d,
                }
            ),
        )
    return state


def test_look_back_features() -> None:
    state = history([1, 0, 4])
    f = page_features(state, link_info(PAGE))
    assert [f["dp_new_internal_1"], f["dp_new_internal_2"], f["dp_new_internal_3"]] == [4, 0, 1]
    assert "dp_new_internal_4" not in f
    assert f["dp_new_internal_mean"] == pytest.approx(5 / 3)
    assert f["dp_lcr_internal"] == pytest.approx(2 / 3)
    assert f["dp_intervals_since_new"] == 0
    assert f["sp_content_size"] == 103 and f["dp_previous_content_size"] == 102
    assert f["sp_url_path_depth"] == 2 and f["sp_domain_depth"] == 2
    assert "sp_text_size" not in f  # missing stays missing
    assert set(f) <= set(feature_names())


def test_history_size_limits_lags() -> None:
    state = history([1, 2, 3, 4])
    f = page_features(state, link_info(PAGE), history=2)
    assert f["dp_new_internal_1"] == 4 and f["dp_new_internal_2"] == 3
    assert "dp_new_internal_3" not in f


def test_page_stats_row() -> None:
    row = page_stats(history([2, 0]), link_info(PAGE))
    assert row.shape == (N_STATS,) and row.dtype == np.float32
    named = dict(zip(STATS_FIELDS, row.tolist(), strict=True))
    assert named["lcr_internal"] == 0.5 and named["new_internal_last"] == 0
    assert named["intervals"] == 2 and named["url_path_depth"] == 2
    fresh = page_stats(history([]), link_info(PAGE))
    assert math.isnan(fresh[0]) and fresh[STATS_FIELDS.index("intervals")] == 0


def test_look_around_weighted_means_skip_unknown() -> None:
    stats = np.full((3, N_STATS), np.nan, dtype=np.float32)
    lcr = STATS_FIELDS.index("lcr_internal")
    size = STATS_FIELDS.index("content_size")
    stats[0, lcr], stats[1, lcr] = 1.0, 0.0  # third neighbour has no history
    stats[:, size] = [100, 200, 400]
    weights = np.array([0.5, 0.25, 0.25], dtype=np.float32)
    out = look_around(weights, stats)
    assert out["dn_related_lcr_internal"] == pytest.approx(0.5 / 0.75)
    assert out["sn_related_content_size"] == pytest.approx(50 + 50 + 100)
    assert out["dn_related_coverage"] == pytest.approx(0.75)
    assert out["sn_related_count"] == 3
    assert "dn_related_lcr_external" not in out
    assert look_around(np.empty(0), np.empty((0, N_STATS))) == {}


def test_feature_sets() -> None:
    names = feature_names()
    lbla = FEATURE_SETS["LBLA"](names)
    assert "dn_related_lcr_internal" in lbla and "dp_new_internal_1" in lbla
    assert not any(n.startswith(("sp_", "sn_")) for n in lbla)
    assert all(n.startswith("sp_") for n in FEATURE_SETS["SP"](names))
    h1 = FEATURE_SETS["SP+SN+DP+DN/1"](names)
    assert "dp_new_internal_1" in h1 and "dp_new_internal_2" not in h1
    assert "dp_new_internal_mean" not in h1  # summarises 8 lags
    h0 = FEATURE_SETS["SP+SN+DP+DN/0"](names)
    assert not any(n.startswith("dp_new_") for n in h0)
    assert FEATURE_SETS["SP+SN+DP+DN/8"](names) == FEATURE_SETS["SP+SN+DP+DN"](names)


def test_feature_vector_fills_nan() -> None:
    vec = feature_vector({"b": 2.0}, ["a", "b"])
    assert math.isnan(vec[0]) and vec[1] == 2.0
