"""The default scorer on a crawler's log rather than on snapshots: NNL-Av counted in the
site's rounds, one unit for every row from the first label on, the prior of a page without
history learned from first intervals, and a ranking switch only on evidence that holds up
over the epochs (`online.candidates`, `online.features.Window.rounds`, `online.site`,
`online.learned`, `online.blending.choose`)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pytest
from scipy.stats import t as student_t

from batch.crawl_sampling import CrawlPlan, sample_crawls
from batch.evaluate import load_rows, ranking_predictions, targets
from batch.generate import GeneratorConfig, generate_events
from batch.timeline import timeline_from_fetches
from online.blending import MIN_EPOCHS, choose, default_option
from online.candidates import CANDIDATES, Priors, candidate_rates
from online.events import parse_event
from online.features import Window
from online.ranking import Ranked, yield_at_budget
from online.site import SiteStats
from streams.replay import replay

NAMES = ["dp_new_internal_1", "dp_new_internal_2", "dp_new_external_1", "dp_new_external_2",
         "dp_interval_days_1", "dp_interval_days_2"]  # fmt: skip
COLUMNS = {name: j for j, name in enumerate(NAMES)}
NNL_AV = CANDIDATES.index("nnl-av")


def priors(interval_days: float = 7.0, newcomer: float | None = None) -> Priors:
    site = np.array([0.5, 0.1])
    newcomer_rate = None if newcomer is None else np.array([newcomer, 0.0])
    return Priors(site, site, site, np.ones((4, 2)), interval_days, newcomer_rate=newcomer_rate)


def nnl_av(rows: list[list[float]], p: Priors | None = None) -> np.ndarray:
    """The ``nnl-av`` candidate's rate per day (both sides) of rows of `NAMES`."""
    return candidate_rates(np.array(rows, np.float64), COLUMNS, p or priors())[:, NNL_AV].sum(1)


def test_an_interval_counts_the_rounds_it_spans() -> None:
    days = np.array([[7.0, 6.1, 8.4, 13.9, 21.5, 2.0, 0.0]])
    present = np.array([[True] * 6 + [False]])
    window = Window(np.zeros((1, 7, 2)), days, np.zeros((1, 7)), present)
    # 1 + 1 + 1 + 2 + 3 rounds, and two days of a seven-day round
    assert window.rounds(7.0).tolist() == pytest.approx([8.0 + 2 / 7])


def test_equal_links_over_jittered_rounds_tie_as_nnl_av_ties_them() -> None:
    rates = nnl_av([[2, 1, 0, 1, 7.0, 7.0], [3, 0, 1, 0, 5.6, 8.3], [1, 2, 0, 1, 8.9, 6.2]])
    assert rates[0] == rates[1] == rates[2] == pytest.approx(4 / 2 / 7)


def test_links_found_over_a_skipped_fetch_count_for_two_rounds() -> None:
    one_round, two_rounds = nnl_av([[4, 0, 0, 0, 7.0, 7.0], [4, 0, 0, 0, 14.0, 7.0]])
    assert two_rounds == pytest.approx(one_round * 2 / 3)  # 4 links in 3 rounds, not in 2


def test_intervals_without_a_length_count_one_round_each() -> None:
    # Fetch times of a day's resolution for a crawl within the day: NNL-Av still ranks.
    rates = nnl_av([[3, 1, 0, 0, 0.0, 0.0], [1, 0, 0, 0, 0.0, 0.0]], priors(1 / 12))
    assert rates.tolist() == pytest.approx([2 * 12, 0.5 * 12])


def test_the_rate_is_per_day_of_the_unit_it_is_given() -> None:
    weekly = nnl_av([[2, 2, 0, 0, 7.0, 7.0]], priors(7.0))
    two_hourly = nnl_av([[2, 2, 0, 0, 1 / 12, 1 / 12]], priors(1 / 12))
    assert weekly[0] == pytest.approx(2 / 7) and two_hourly[0] == pytest.approx(24.0)


def test_a_page_without_history_takes_the_rate_of_first_intervals() -> None:
    newcomer = [[np.nan] * 6]
    assert nnl_av(newcomer, priors(newcomer=0.05))[0] == pytest.approx(0.05)
    assert nnl_av(newcomer, priors())[0] == pytest.approx(0.5 + 0.1)  # the site's, untold
    with_history = nnl_av([[0, 0, 0, 0, 7.0, 7.0]], priors(newcomer=0.05))
    assert with_history[0] == 0.0  # NNL-Av's own zero, not a prior


def test_the_site_learns_first_intervals_apart_and_old_states_fall_back_to_its_rate() -> None:
    site = SiteStats()
    counts = np.array([[6, 2], [0, 0], [1, 0]])
    site.learn(counts, np.array([7.0, 7.0, 7.0]), np.zeros(3, bool), first=[False, True, True])
    assert site.newcomer_rate_per_day().tolist() == pytest.approx([1 / 14, 0.0])
    assert site.rate_per_day().tolist() == pytest.approx([7 / 21, 2 / 21])
    again = SiteStats.from_state(site.state())
    assert again.newcomer_rate_per_day().tolist() == site.newcomer_rate_per_day().tolist()
    stored_before = {
        k: v for k, v in site.state().items() if k not in ("links_first", "days_first")
    }
    old = SiteStats.from_state(stored_before)
    assert old.newcomer_rate_per_day().tolist() == old.rate_per_day().tolist()


# -- the ranking switch --------------------------------------------------------------------------

USED = list(CANDIDATES)
DEFAULT = default_option(USED)


def measured(rival: list[float], base: float = 1.0) -> dict[str, list[float]]:
    return {DEFAULT: [base] * len(rival), "mix": rival}


def test_no_switch_before_min_epochs_however_wide_the_margin() -> None:
    for epochs in range(1, MIN_EPOCHS):
        assert choose(measured([1.9 + 0.01 * k for k in range(epochs)]), USED, 2.0) == DEFAULT


def test_a_switch_needs_students_t_over_the_epochs_not_two_standard_errors() -> None:
    bar = float(student_t.isf(0.0228, MIN_EPOCHS - 1))  # about 4.8 at two degrees of freedom
    diffs = np.array([0.0, 1.0, 2.0])  # t = mean / (sd / sqrt(3)) = sqrt(3)
    for t in (3.0, 0.9 * bar, 1.1 * bar, 8.0):
        shift = t * diffs.std(ddof=1) / np.sqrt(3) - diffs.mean()
        rival = (1.0 + diffs + shift).tolist()
        assert (choose(measured(rival), USED, 2.0) == "mix") == (t > bar), t


def test_of_the_options_past_the_bar_the_one_with_the_largest_t_wins() -> None:
    history = {
        DEFAULT: [1.0] * 6,
        "mix": [1.5, 1.6, 1.4, 1.5, 1.6, 1.4],  # t about 14
        "lbla": [1.2, 1.21, 1.19, 1.2, 1.21, 1.19],  # a smaller gain, but t about 55
        "ccr": [3.0, 0.5, 3.0, 0.5, 3.0, 0.5],  # the largest mean, too noisy to pass
    }
    assert choose(history, USED, 2.0) == "lbla"


# -- end to end: a staggered crawl -----------------------------------------------------------


@pytest.fixture(scope="module")
def staggered_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated news site (every 12 h) crawled with each round's fetches spread over half a
    round: the first epoch then falls inside the second round."""
    root = tmp_path_factory.mktemp("staggered")
    config = GeneratorConfig(pages=300, crawls=8, seed=5, regime="news", interval_days=0.5)
    pages = [parse_event(e) for e in generate_events(config)]
    plan = CrawlPlan(0.5 * 86_400, stagger=0.5, seed=2)
    events = root / "crawl.jsonl.gz"
    with gzip.open(events, "wb") as fh:
        for e in sample_crawls(timeline_from_fetches(pages), plan):
            fh.write(orjson.dumps(e) + b"\n")
    replay(events, root / "run", progress=False, parallel=False)
    return root / "run"


def test_every_row_with_history_is_scored_in_one_unit(staggered_run: Path) -> None:
    rows = load_rows(staggered_run)
    baseline = ranking_predictions(rows, ("nnl-av",))["nnl-av"].score
    candidate = rows["candidate_nnl_av"].to_numpy(np.float64)
    days = rows[[c for c in rows.columns if c.startswith("dp_interval_days_")
                 and c[-1].isdigit()]].to_numpy(np.float64)  # fmt: skip
    one_round = np.all(np.isnan(days) | (days < 0.749), axis=1)  # under 1.5 rounds
    answered = rows["dp_errors"].fillna(0).to_numpy() == 0  # else scaled by the share answered
    busy = (baseline > 0) & one_round & answered
    assert busy.sum() > 500
    ratio = candidate[busy] / baseline[busy]
    assert ratio.min() == pytest.approx(ratio.max(), rel=1e-6)
    assert 1 / ratio.mean() == pytest.approx(0.5, rel=0.01)  # per day of a half-day round


def test_the_default_finds_what_nnl_av_finds_in_every_round(staggered_run: Path) -> None:
    rows = load_rows(staggered_run)
    truth = targets(rows)["nnl_total"]
    preds = ranking_predictions(rows, ("nnl-av", "ensemble"))
    for crawl in range(1, int(rows["crawl"].max())):
        at = (rows["crawl"] == crawl).to_numpy() & ~np.isnan(truth)
        found = {
            name: yield_at_budget(Ranked(p.count("total")[at]), truth[at], [0.1])[0.1]["share"]  # type: ignore[index]
            for name, p in preds.items()
            if name != "random"
        }
        assert found["ensemble"] >= 0.98 * found["nnl-av"], (crawl, found)
