"""How the learned scorer blends its candidates into one rate per row, and which blend it uses.

The candidates (`online.candidates`) each estimate a page's rate of new outlinks per day; a
*ranking option* says how much each weighs in a row's estimate:

* ``mix``: the AdaHedge mixture (`online.hedge`) of every candidate that does not abstain;
* a candidate alone (``nnl-av``, ``lbla`` ...), the mixture standing in where it abstains;
* ``nnl-av+T``: NNL-Av, its silent pages (no new link in their own history, so they tie)
  lifted to the tie-breaker ``T``'s estimate where that estimate reaches a threshold learned
  from the budget (`lift_thresholds`).

The scorer (`online.learned`) ranks by one option at a time, NNL-Av lifted by LBLA until
another option has ranked this stream's labels better by enough evidence (`choose`). At each
epoch it measures every option on the labels that arrived (`measure_options`), charges the
candidates their Poisson deviance in AdaHedge rounds (`deviance`, `hedge_rounds`) and learns
the lift thresholds from the silent pages scored since the last epoch (`Blender.record_silent`).

These rules live apart from the scorer's epochs and stored state so that how a score is put
together can be read, and tested, on its own: every function here is a pure function of its
arguments (`Blender.record_silent` adds to the counts it is given).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from online.candidates import Evidence
from online.ranking import DEFAULT_BUDGETS, Ranked, spearman, yield_at_budget

#: The ranking option a site starts from unless its own history leaves most pages tied.
ANCHOR = "nnl-av"
#: The AdaHedge mixture of all candidates, as a ranking option.
MIX = "mix"
#: Candidates that may break NNL-Av's ties among silent pages (with the mixture).
TIE_BREAKERS = ("lbla", "siblings", "ccr", "online", "batch")
#: Histogram of tie-breaker estimates (rates per day): log10 from 1e-9 to 1e6, 40 bins a decade.
_LOG_LOW, _LOG_HIGH, _PER_DECADE = -9.0, 6.0, 40
_BINS = int((_LOG_HIGH - _LOG_LOW) * _PER_DECADE)
#: Rows per AdaHedge round: small rounds let the learning rate adapt at the pace of the
#: evidence rather than of the epochs.
HEDGE_ROUND = 16
#: Epochs an option must have been measured in before it may replace the default.
MIN_EPOCHS = 3


def ranking_options(used: Sequence[str]) -> list[str]:
    """Ranking options over the candidates ``used``: the mixture, each candidate alone, and
    NNL-Av with its silent pages (no new link in their history) lifted by each tie-breaker."""
    lifts = [f"{ANCHOR}+{t}" for t in (*TIE_BREAKERS, MIX) if t in (*used, MIX)]
    return [MIX, *used, *(lifts if ANCHOR in used else [])]


def default_option(used: Sequence[str]) -> str:
    """NNL-Av, its ties broken by the related pages as far as the budget reaches into them
    (the mixture where NNL-Av is not weighed)."""
    lift = f"{ANCHOR}+lbla"
    return lift if lift in ranking_options(used) else MIX


@dataclass(frozen=True)
class Blender:
    """The weight of each candidate in each row's estimate, under each ranking option, as the
    scorer's learned state stands: the candidates ``used`` (the order of the rate matrix's
    second axis), their AdaHedge weights ``hedge`` and the learned lift ``thresholds``."""

    used: Sequence[str]
    hedge: np.ndarray
    thresholds: Mapping[str, float]

    def options(self) -> list[str]:
        return ranking_options(self.used)

    def weights(self, option: str, rates: np.ndarray, ev: Evidence) -> np.ndarray:
        """(m, k) weight of each candidate in each row's estimate under ``option``."""
        if option == MIX:
            return awake_weights(rates, self.hedge)
        base, _, tie_breaker = option.partition("+")
        one = awake_weights(rates, np.array([n == base for n in self.used], np.float64))
        weights = np.where(
            one.sum(axis=1, keepdims=True) > 0, one, awake_weights(rates, self.hedge)
        )
        if not tie_breaker:
            return weights
        lifter = self.weights(tie_breaker, rates, ev)
        lifted = self._lifted(tie_breaker, np.einsum("mk,mks->m", lifter, np.nan_to_num(rates)), ev)
        return np.where(lifted[:, None], lifter, weights)

    def _lifted(self, tie_breaker: str, values: np.ndarray, ev: Evidence) -> np.ndarray:
        """Silent pages whose tie-breaker estimate reaches the threshold learned for it."""
        threshold = self.thresholds.get(tie_breaker, np.inf)
        return (ev.own_mean.sum(axis=1) == 0) & (values >= threshold) & (values > 0)

    def option_rates(self, rates: np.ndarray, ev: Evidence) -> dict[str, np.ndarray]:
        """(m, 2) rates per day of every ranking option."""
        filled = np.nan_to_num(rates)
        return {
            name: np.einsum("mk,mks->ms", self.weights(name, rates, ev), filled)
            for name in self.options()
        }

    def record_silent(
        self,
        rates: np.ndarray,
        ev: Evidence,
        scored: list[int],
        histograms: dict[str, np.ndarray],
    ) -> None:
        """Add to ``scored`` the pages scored that have a history (``[silent, all]``), and to
        ``histograms`` each tie-breaker's estimates of the silent ones (a page's first fetch
        tells nothing of how the budget divides): what `lift_thresholds` learns from."""
        seen = ev.intervals > 0
        silent = seen & (ev.own_mean.sum(axis=1) == 0)
        scored[0] += int(silent.sum())
        scored[1] += int(seen.sum())
        if not silent.any():
            return
        for name in self.options():
            base, _, tie_breaker = name.partition("+")
            if base != ANCHOR or not tie_breaker:
                continue
            weights = self.weights(tie_breaker, rates[silent], _take(ev, silent))
            values = np.einsum("mk,mks->m", weights, np.nan_to_num(rates[silent]))
            values = values[values > 0]
            at = np.floor((np.log10(values) - _LOG_LOW) * _PER_DECADE).astype(np.int64)
            histogram = histograms.setdefault(tie_breaker, np.zeros(_BINS, np.int64))
            np.add.at(histogram, np.clip(at, 0, _BINS - 1), 1)


def lift_thresholds(
    histograms: Mapping[str, np.ndarray], scored: Sequence[int], budget_share: float
) -> dict[str, float]:
    """How far NNL-Av's ties are broken: a crawler recrawling ``budget_share`` of the pages
    fills its budget from the pages with new links in their history first; the silent ones
    (none yet) fill the rest, best by the tie-breaker. A tie-breaker's threshold is its
    estimate at that many silent pages among those scored (``histograms`` and ``scored`` as
    `Blender.record_silent` counted them since the last epoch)."""
    silent, total = scored
    room = min(max(budget_share * total - (total - silent), 0.0), float(silent))
    out = {}
    for name, histogram in histograms.items():
        from_top = np.cumsum(histogram[::-1])
        # Room for more than the tie-breaker ranks above zero: all of those.
        at = min(int(np.searchsorted(from_top, room)), _BINS - 1) if room >= 1 else -1
        out[name] = np.inf if at < 0 else float(10.0 ** (_LOG_LOW + (_BINS - 1 - at) / _PER_DECADE))
    return out


def measure_options(option_totals: Mapping[str, np.ndarray], truth: np.ndarray) -> dict[str, float]:
    """How each ranking option ranks the pages whose labels arrived, by its rates per day
    summed over both sides (``option_totals``): the mean yield over budgets of 1 to 20% plus
    Spearman's rho, against ``truth``, the new outlinks found (nothing when all pages or none
    found any: such labels rank nothing)."""
    if not (truth > 0).any() or (truth > 0).all():
        return {}
    true = Ranked(truth)
    out = {}
    for name, total in option_totals.items():
        ranked = Ranked(total)
        found = yield_at_budget(ranked, truth, DEFAULT_BUDGETS)
        quality = np.mean([found[b]["relative"] for b in DEFAULT_BUDGETS])
        quality += spearman(ranked, true) or 0.0
        out[name] = float(quality)
    return out


def choose(measured: Mapping[str, list[float]], used: Sequence[str], switch_evidence: float) -> str:
    """The default ranking option, or another that has ranked this stream's labels better (its
    ``measured`` quality per epoch) in a paired comparison with the default.

    The comparison is a one-sided paired t-test over the epochs both were measured in, at the
    level that ``switch_evidence`` standard errors give under a normal law, with Student's law
    for the spread estimated from those epochs: with a handful of epochs that spread is itself
    noise (two epochs that happen to agree give any ratio), and a switch on it costs a site
    the ranking that was right for it. An option measured in fewer than `MIN_EPOCHS` epochs
    is not compared. Of the options past the bar, the one with the largest t."""
    default = default_option(used)
    base = np.array(measured.get(default, []))
    level = float(norm.sf(switch_evidence))
    best, best_t = default, -np.inf
    for name in ranking_options(used):
        values = np.array(measured.get(name, []))
        if name == default or len(values) < MIN_EPOCHS or len(values) != len(base):
            continue
        diff = values - base
        spread = diff.std(ddof=1)
        if spread == 0:  # the same difference every epoch: no spread to judge it by
            continue
        t = diff.mean() / (spread / np.sqrt(len(diff)))
        if t > student_t.isf(level, len(diff) - 1) and t > best_t:
            best, best_t = name, t
    return best


def awake_weights(rates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row, the weights of the candidates that did not abstain, summing to 1 (equal
    weights among them where all that carry weight abstain)."""
    nan = np.isnan(rates)
    # An "or" of the sides' slices: `any` along an axis of two is several times slower.
    awake = ~functools.reduce(np.logical_or, [nan[:, :, s] for s in range(nan.shape[2])])
    w = weights[None, :] * awake
    w = np.where(w.sum(axis=1, keepdims=True) > 0, w, awake.astype(np.float64))
    total = w.sum(axis=1, keepdims=True)
    return np.where(total > 0, w / np.maximum(total, 1e-300), 0.0)


def deviance(counts: np.ndarray, rates: np.ndarray, days: np.ndarray) -> np.ndarray:
    """(m, k) Poisson deviance of each candidate's expected counts over each label's interval,
    summed over the two sides; NaN where the candidate abstained."""
    mu = np.maximum(rates * days[:, None, None], 1e-9)
    y = counts[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        term = np.where(y > 0, y * np.log(np.maximum(y, 1e-300) / mu), 0.0)
    return (2.0 * (term - (y - mu))).sum(axis=2)


def hedge_rounds(losses: np.ndarray) -> np.ndarray:
    """Rows summed into AdaHedge rounds of `HEDGE_ROUND` (NaN: abstained in the whole round;
    a partly abstaining candidate is charged the awake ones' mean there)."""
    rounds = []
    for lo in range(0, len(losses), HEDGE_ROUND):
        chunk = losses[lo : lo + HEDGE_ROUND]
        awake = ~np.isnan(chunk)
        mixed = np.nanmean(np.where(awake.any(axis=1, keepdims=True), chunk, 0.0), axis=1)
        filled = np.where(awake, chunk, mixed[:, None])
        rounds.append(np.where(awake.any(axis=0), filled.sum(axis=0), np.nan))
    return np.array(rounds).reshape(-1, losses.shape[1])


def _take(ev: Evidence, rows: np.ndarray) -> Evidence:
    """The evidence of some rows only."""
    return Evidence(
        *(getattr(ev, f)[rows] if f != "window" else _take_window(ev.window, rows)
          for f in Evidence.__dataclass_fields__)
    )  # fmt: skip


def _take_window(window: Any, rows: np.ndarray) -> Any:
    return type(window)(*(part[rows] for part in window))


__all__ = [
    "ANCHOR",
    "MIX",
    "TIE_BREAKERS",
    "Blender",
    "choose",
    "default_option",
    "deviance",
    "hedge_rounds",
    "lift_thresholds",
    "measure_options",
    "ranking_options",
]
