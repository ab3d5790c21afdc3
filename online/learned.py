"""The learned scorers: candidates weighed by how well each has predicted this stream.

``ensemble`` (the default) weighs the candidates of `online.candidates` (NNL-Av, NNL-Pr, LBLA
and CCR as Bühlmann-credible rates, the online River learner, the refreshed batch model) with
AdaHedge on their Poisson deviance (`online.hedge`): what predicts this site best gets the
weight as fast as the stream shows it, whatever the kind of site. ``online`` and ``batch``
weigh LBLA against one learner only.

Learning happens in epochs. A label (the new outlinks found at a page's next fetch) becomes
usable for events fetched after it, never at the same moment, and the scorer takes in what has
arrived at most every ``epoch_fraction`` of the site's typical interval: a snapshot crawl is
scored as a whole by one state of the scorer, and a continuous one changes state about twice
per revisit cycle. At an epoch the scorer learns, from the labelled rows it has gathered:

1. the candidates' losses on them, as the candidates stood (progressive), into AdaHedge, and
   how well each ranking option ranked them (`online.blending`);
2. the site's rates, rhythm and content coupling (`online.site`) and the credibility of each
   prior (`online.credibility`): the priors' strength is estimated, not set in days;
3. the River learner (mini-batches of ``learn_every``);
4. the batch refresher's training rows, and maybe a refreshed batch model
   (`online.refresh`).

Everything depends on the order of events only, so the replay and the workers agree and the
batching does not matter. `state` / `restore` give the learned state (`online.ensemble_state`)
to the store.

The priority (`online.priority`): the mixture's rate per day, the expected new outlinks over
the horizon, P(>= 1) at the page's next usual interval (`online.calibration`), an exploration
bonus for short histories, reason codes and the model versions behind the score
(`online.attribution`).

This module is the scorer's life cycle (epochs, learning, scoring); how candidates are blended
is `online.blending`, what is stored `online.ensemble_state`, where a score comes from
`online.attribution`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from online.attribution import reason_shares, row_models
from online.blending import (
    MIX,
    Blender,
    choose,
    default_option,
    deviance,
    hedge_rounds,
    lift_thresholds,
    measure_options,
)
from online.candidates import (
    CANDIDATES,
    Evidence,
    Priors,
    candidate_rates,
    evidence,
    prior_rates,
)
from online.credibility import CredibilityTerms, credibility_terms, joined_terms
from online.ensemble_state import EnsembleState, TakenRows
from online.features import feature_column
from online.hedge import AdaHedge
from online.history import DEFAULT_HISTORY
from online.learners import Label, LinkLearner
from online.priority import DEFAULT_EXPLORATION, DEFAULT_HORIZON_DAYS, reasons_of
from online.ranking import significant
from online.refresh import BatchRefresher
from online.scoring import Scores, _MatrixScorer

ModelSource = Callable[[], Any]
_DAY = 86_400.0
#: rows an epoch works out at a time (`EnsembleScorer._epoch_seen`)
EPOCH_CHUNK = 16_384
#: The typical interval assumed before the first label (a weekly crawl); no row with an interval
#: is scored in it (`_first_round_days`).
DEFAULT_INTERVAL_DAYS = 7.0
#: Labels the typical interval must be measured on before it is taken up (the first few labels
#: of a crawl whose fetches spread over days are its shortest intervals).
_INTERVAL_MIN_LABELS = 50
#: How far the measured typical interval may move before the scorer takes it up.
_INTERVAL_TOLERANCE = 1.25


class EnsembleScorer(_MatrixScorer):
    """Candidates weighed by AdaHedge, learned in epochs (see the module docstring).

    >>> s = EnsembleScorer()
    >>> names = ["dp_new_internal_1", "dp_new_external_1", "dp_content_changed_1",
    ...          "dp_interval_days_1"]
    >>> cols = {n: j for j, n in enumerate(names)}
    >>> busy, quiet = [4.0, 0.0, 1.0, 7.0], [0.0, 0.0, 0.0, 7.0]
    >>> X = np.array([busy, quiet])
    >>> out = s.score_and_learn(X, cols, [None, None], [None, None], [0.0, 0.0])
    >>> bool(out.score[0] > out.score[1]), out.reasons[0][0]
    (True, 'own_history')
    """

    name = "ensemble"
    version = "2"
    learns = True
    #: The candidates this scorer weighs (a subset of `online.candidates.CANDIDATES`).
    uses: tuple[str, ...] = CANDIDATES

    def __init__(
        self,
        *,
        model_source: ModelSource | None = None,
        refresher: BatchRefresher | None = None,
        horizon_days: float = DEFAULT_HORIZON_DAYS,
        exploration: float = DEFAULT_EXPLORATION,
        history: int = DEFAULT_HISTORY,
        epoch_fraction: float = 0.5,
        learn_every: int = 64,
        learner: LinkLearner | None = None,
        budget_share: float = 0.10,
        switch_evidence: float = 2.0,
    ) -> None:
        self.model_source = model_source
        self.refresher = refresher
        self.horizon_days = horizon_days
        self.exploration = exploration
        self.history = history
        self.epoch_fraction = epoch_fraction
        self.learn_every = learn_every
        self._learner_template = learner
        self.budget_share = budget_share
        self.switch_evidence = switch_evidence
        self._uses = np.array([name in self.uses for name in CANDIDATES])
        self._used = [n for n, u in zip(CANDIDATES, self._uses, strict=True) if u]
        self.learned = EnsembleState(AdaHedge(len(self._used)))

    # -- state -------------------------------------------------------------------------------

    def state(self) -> EnsembleState:
        return self.learned

    def restore(self, state: object) -> None:
        if not isinstance(state, EnsembleState):
            raise TypeError(f"expected an EnsembleState, got {type(state).__name__}")
        if state.hedge.k != self.learned.hedge.k:
            raise TypeError("the stored scorer state weighs other candidates")
        self.learned = state

    def weights(self) -> dict[str, float]:
        """The current weight of each candidate this scorer weighs."""
        return dict(zip(self._used, self.learned.hedge.weights().tolist(), strict=True))

    # -- scoring -----------------------------------------------------------------------------

    def score_matrix(self, X: np.ndarray, columns: Mapping[str, int]) -> Scores:
        """Scores by the state as it stands (nothing learned)."""
        return self._scores(X, columns)

    def score_and_learn(
        self,
        X: np.ndarray,
        columns: Mapping[str, int],
        previous: Sequence[np.ndarray | None],
        labels: Sequence[Label | None],
        times: Sequence[float] | None = None,
    ) -> Scores:
        """Scores for rows ``X`` in stream order. Row i brings ``labels[i]``, the label of
        ``previous[i]`` (its page's row at the previous fetch), observed at ``times[i]``
        (epoch seconds); it is learned at the first epoch boundary after that time."""
        n = len(X)
        times = np.zeros(n) if times is None else np.asarray(times, dtype=np.float64)
        state = self.learned
        names = sorted(columns, key=columns.__getitem__)
        if state.feature_names is None:
            state.feature_names = names
        elif state.feature_names != names:
            raise ValueError("the scorer learned on other features")
        if n and state.first_seen is None:
            state.first_seen = float(times[0])
        parts: list[Scores] = []
        start = 0
        held: list[int] = []  # rows labelled since the last hand-over to the pending labels
        held_first = None  # the first of them's label, as the pending labels keep it
        for i in range(n):
            if self._epoch_due(times[i], held_first):
                if i > start:
                    parts.append(self._scores(X[start:i], columns, record=True))
                    start = i
                self._hold(previous, labels, times, held)
                held_first = None
                self._epoch(times[i], columns)
            if labels[i] is not None and previous[i] is not None:
                if state.interval_days is None:
                    state.interval_days = _first_round_days(state.first_seen, times[i], labels[i])
                if not held:
                    held_first = _label_row(labels, times, i)
                held.append(i)
        self._hold(previous, labels, times, held)
        if start < n or not parts:
            parts.append(self._scores(X[start:], columns, record=True))
        return _concat(parts)

    def _hold(
        self,
        previous: Sequence[np.ndarray | None],
        labels: Sequence[Label | None],
        times: np.ndarray,
        held: list[int],
    ) -> None:
        """The rows labelled at positions ``held`` wait for the next epoch, as one block."""
        if held:
            rows = np.stack([np.asarray(previous[i], np.float32) for i in held])
            block = np.array([_label_row(labels, times, i) for i in held], np.float64)
            self.learned.pending.add(rows, block)
            held.clear()

    # -- epochs ------------------------------------------------------------------------------

    def _epoch_due(self, now: float, held_first: tuple | None = None) -> bool:
        """Whether an epoch falls before ``now``; ``held_first``: the oldest label of this
        batch not yet handed to the pending labels (they come after those waiting)."""
        state = self.learned
        first = state.pending.first()
        if first is None:
            first = held_first
        if first is None or first[4] >= now:
            return False
        # The site's rhythm as measured so far (before the first epoch: the first label's).
        interval = (
            float(first[2])
            if state.last_epoch is None
            else state.site.typical_interval_days(DEFAULT_INTERVAL_DAYS)
        )
        since = state.first_seen if state.last_epoch is None else state.last_epoch
        return now - (since if since is not None else now) >= self.epoch_fraction * interval * _DAY

    def _epoch(self, now: float, columns: Mapping[str, int]) -> None:
        """Learn every pending label observed before ``now``."""
        state = self.learned
        taken, labels = state.pending.take(state.pending.count_before(now))
        info = labels[:, :4]
        counts, days, changed = info[:, :2], info[:, 2], info[:, 3] > 0
        seen = self._epoch_seen(taken, columns, counts, days)
        self._measure(seen, counts, days)
        state.hedge.learn(hedge_rounds(seen.losses))
        for cred, terms in zip(state.credibility, seen.credibility, strict=True):
            cred.learn_terms(terms)
        state.site.learn(counts, days, changed, first=seen.first)
        measured = state.site.typical_interval_days()
        ratio = measured / self._interval_days()
        away = not 1 / _INTERVAL_TOLERANCE <= ratio <= _INTERVAL_TOLERANCE
        if away and state.site.labels >= _INTERVAL_MIN_LABELS:
            state.interval_days = measured
        self._learn_online(taken, counts, days)
        if self.refresher is not None:
            keep = self.refresher.policy.max_rows  # it keeps no more of them
            self.refresher.add(taken.tail(keep), counts[-keep:], days[-keep:])
            self.refresher.at_epoch(state.feature_names or [])
        state.lift_thresholds.update(
            lift_thresholds(state.lift_histograms, state.scored, self.budget_share)
        )
        state.lift_histograms = {}
        state.scored = [0, 0]
        state.last_epoch = now
        state.epochs += 1
        choice = choose(state.measured, self._used, self.switch_evidence)
        if choice != state.choice or not state.choices:
            state.choices.append((state.epochs, choice))
        state.choice = choice

    def _epoch_seen(
        self, taken: TakenRows, columns: Mapping[str, int], counts: np.ndarray, days: np.ndarray
    ) -> _EpochSeen:
        """What the epoch learns from its rows, as the state stood before it: the candidates'
        losses, the ranking options' rates and the credibility terms. Worked out
        ``EPOCH_CHUNK`` rows at a time, inflated from the waiting blocks as they go: an epoch
        holds about one label a page, and at a million pages its rows, their float64 copies
        and their model inputs would take gigabytes at once. Every step is row by row, so the
        chunks give the bits the whole would."""
        state = self.learned
        blender, priors = self._blender(), self._priors()
        losses, in_use, first = [], [], []
        totals: dict[str, list[np.ndarray]] = {}
        terms: list[list[CredibilityTerms]] = [[] for _ in state.credibility]
        start = 0
        for run in taken.runs(EPOCH_CHUNK):
            at = slice(start, start + len(run))
            start = at.stop
            rows = run.astype(np.float64)
            ev = evidence(rows, columns)
            first.append(ev.intervals == 0)
            rates = self._candidate_rates(rows, columns, ev)[:, self._uses]
            losses.append(deviance(counts[at], rates, days[at]))
            options = blender.option_rates(rates, ev)
            for name, option in options.items():
                totals.setdefault(name, []).append(option.sum(axis=1))
            in_use.append(options.get(state.choice, options[MIX]).sum(axis=1))
            for side, part in enumerate(_credibility_terms(ev, priors, counts[at], days[at])):
                terms[side].append(part)
        return _EpochSeen(
            losses=np.concatenate(losses),
            option_totals={name: np.concatenate(parts) for name, parts in totals.items()},
            in_use=np.concatenate(in_use),
            credibility=[joined_terms(parts) for parts in terms],
            first=np.concatenate(first) if first else np.zeros(0, bool),
        )

    def _measure(self, seen: _EpochSeen, counts: np.ndarray, days: np.ndarray) -> None:
        """How each ranking option (as it stood) ranks the pages whose labels arrived
        (`online.blending.measure_options`); and how often the option in use's expectation
        came true (P(>= 1) calibration)."""
        state = self.learned
        truth = counts.sum(axis=1)
        state.calibration.learn(seen.in_use * days, truth > 0)
        for name, quality in measure_options(seen.option_totals, truth).items():
            state.measured.setdefault(name, []).append(quality)

    def _learn_online(self, taken: TakenRows, counts: np.ndarray, days: np.ndarray) -> None:
        if not (self._uses_candidate("online")):
            return
        state = self.learned
        if state.learner is None:
            state.learner = self._learner_template or LinkLearner(reference_days=1.0)
        names = state.feature_names or []
        step = self.learn_every
        at = 0
        for run in taken.runs(step * max(1, EPOCH_CHUNK // step)):  # whole mini-batches
            for lo in range(0, len(run), step):
                rows = run[lo : lo + step]
                labelled = slice(at, at + len(rows))
                state.learner.learn_array(
                    rows.astype(np.float64),
                    names,
                    counts[labelled, 0],
                    counts[labelled, 1],
                    days[labelled],
                )
                at = labelled.stop

    # -- estimates ---------------------------------------------------------------------------

    def default_option(self) -> str:
        """The ranking option this scorer starts from (`online.blending.default_option`)."""
        return default_option(self._used)

    def _blender(self) -> Blender:
        """How the candidates blend under each ranking option, as the learned state stands."""
        state = self.learned
        return Blender(self._used, state.hedge.weights(), state.lift_thresholds)

    def _uses_candidate(self, name: str) -> bool:
        return bool(self._uses[CANDIDATES.index(name)])

    def _priors(self) -> Priors:
        site = self.learned.site
        changed, unchanged = site.content_rates()
        k = np.stack([cred.k() for cred in self.learned.credibility], axis=1)  # (priors, 2)
        return Priors(
            site.rate_per_day(),
            changed,
            unchanged,
            k,
            self._interval_days(),
            newcomer_rate=site.newcomer_rate_per_day(),
        )

    def _interval_days(self) -> float:
        """The site's typical interval in use (a week until the first label)."""
        return self.learned.interval_days or DEFAULT_INTERVAL_DAYS

    def _online_rates(self, X: np.ndarray) -> np.ndarray | None:
        learner = self.learned.learner
        if not self._uses_candidate("online") or learner is None or not learner.n_learned:
            return None
        pred = learner.predict_array(X, self.learned.feature_names or [])
        return np.column_stack([pred["internal"], pred["external"]]) / learner.reference_days

    def _batch(self) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str | None]:
        """The batch model's rates per day and its version: the refreshed model, else a
        registered one."""
        if not self._uses_candidate("batch"):
            return None, None
        if self.refresher is not None and self.refresher.model is not None:
            return self.refresher.predict_rates, self.refresher.version  # type: ignore[return-value]
        artifact = None if self.model_source is None else self.model_source()
        if artifact is None:
            return None, None
        return _artifact_rates(artifact, self.learned.feature_names or []), str(artifact.version)

    def _candidate_rates(
        self, X: np.ndarray, columns: Mapping[str, int], ev: Evidence
    ) -> np.ndarray:
        batch, _ = self._batch()
        return candidate_rates(
            X,
            columns,
            self._priors(),
            online=self._online_rates(X),
            batch=None if batch is None else batch(X),
            ev=ev,
        )

    def _scores(self, X: np.ndarray, columns: Mapping[str, int], record: bool = False) -> Scores:
        """Scores by the state as it stands; ``record``: rows of the stream (their estimates
        set the next epoch's lift thresholds)."""
        X = np.asarray(X, dtype=np.float64)
        ev = evidence(X, columns)
        all_rates = self._candidate_rates(X, columns, ev)
        rates = all_rates[:, self._uses]
        state = self.learned
        blender = self._blender()
        if record:
            blender.record_silent(rates, ev, state.scored, state.lift_histograms)
        choice = state.choice if state.choice in blender.options() else self.default_option()
        weights = blender.weights(choice, rates, ev)
        # Summation order must not split ties: equal estimates reached by different sums
        # (7/8 + 0/8 against 5/8 + 2/8) are made equal again.
        rate = significant(np.einsum("mk,mks->ms", weights, np.nan_to_num(rates)))
        horizon = self.horizon_days
        expected = rate * horizon
        interval = feature_column(X, columns, "dp_interval_days_mean")
        interval = np.where(np.isnan(interval), self._interval_days(), interval)
        total = significant(expected.sum(axis=1))
        shortness = 1.0 - np.minimum(ev.intervals, self.history) / max(self.history, 1)
        bonus = self.exploration * np.sqrt(np.maximum(total, 0.0)) * shortness
        score = total + bonus
        share = reason_shares(ev, self._used, weights, self._priors().k.mean(axis=1))
        models_of_rows = self._row_models(weights)
        models = {k: v for m in {id(m): m for m in models_of_rows}.values() for k, v in m.items()}
        return Scores(
            score=score,
            expected_new_internal=expected[:, 0],
            expected_new_external=expected[:, 1],
            p_new=state.calibration.predict(rate.sum(axis=1) * interval),
            rate_per_day=total / horizon,
            reasons=reasons_of(share, bonus, score),
            models=models,
            candidates={name: all_rates[:, j].sum(axis=1) for j, name in enumerate(CANDIDATES)},
            row_models=models_of_rows,
        )

    def _row_models(self, weights: np.ndarray) -> list[dict[str, str]]:
        """Per row, the versions of the models that carry weight in its estimate
        (`online.attribution.row_models`)."""
        learner = self.learned.learner
        _, batch_version = self._batch()
        versions = {
            "online": None
            if learner is None or not learner.n_learned
            else f"river-{learner.kind}-{self.version}",
            "batch": batch_version,
        }
        return row_models(weights, self._used, versions)


def _artifact_rates(artifact: Any, names: list[str]) -> Callable[[np.ndarray], np.ndarray]:
    """A registered model's rates per day on rows in the pipeline's column order."""
    model = artifact.model
    columns = {name: j for j, name in enumerate(names)}
    idx = [columns.get(name, -1) for name in model.feature_names_]
    have = [j for j, i in enumerate(idx) if i >= 0]

    def rates(X: np.ndarray) -> np.ndarray:
        Xm = np.full((len(X), len(idx)), np.nan)
        Xm[:, have] = X[:, [idx[j] for j in have]]
        pred = model.predict(Xm)
        return np.column_stack([pred.internal, pred.external]) / float(model.interval_days_)

    return rates


def _concat(parts: list[Scores]) -> Scores:
    if len(parts) == 1:
        return parts[0]

    def cat(name: str) -> np.ndarray | None:
        values = [getattr(p, name) for p in parts]
        return None if values[0] is None else np.concatenate(values)

    models: dict[str, str] = {}
    for p in parts:
        models.update(p.models or {})
    candidates = parts[0].candidates or {}
    return Scores(
        score=np.concatenate([p.score for p in parts]),
        expected_new_internal=cat("expected_new_internal"),
        expected_new_external=cat("expected_new_external"),
        p_new=np.concatenate([p.p_new for p in parts]),
        rate_per_day=cat("rate_per_day"),
        reasons=[r for p in parts for r in (p.reasons or [])],
        models=models,
        candidates={k: np.concatenate([p.candidates[k] for p in parts]) for k in candidates},  # type: ignore[index]
        row_models=[m for p in parts for m in (p.row_models or [p.models or {}] * len(p.score))],
    )


class OnlineScorer(EnsembleScorer):
    """The River learner weighed against LBLA (which speaks while the learner is cold)."""

    name = "online"
    uses = ("lbla", "online")


class BatchScorer(EnsembleScorer):
    """The batch model (refreshed, or registered) weighed against LBLA."""

    name = "batch"
    uses = ("lbla", "batch")


__all__ = [
    "DEFAULT_INTERVAL_DAYS",
    "BatchScorer",
    "EnsembleScorer",
    "OnlineScorer",
]


def _first_round_days(first_seen: float | None, now: float, label: Label) -> float:
    """The site's rhythm as the first label shows it, until the labels measure it: the time
    from the stream's first fetch to the first refetch, the length of a round where the first
    round's fetches spread over time (the first refetched page need not be the first one
    fetched), and at least the label's own interval. Taken at the first label's place in
    the stream, so every row with an interval is scored in the same unit whatever the
    batching, and the measured interval rarely moves it by more than the tolerance."""
    since = (now - first_seen) / _DAY if first_seen is not None else 0.0
    return max(since, float(label.interval_days), 1e-6)


def _label_row(
    labels: Sequence[Label | None], times: np.ndarray, at: int
) -> tuple[float, float, float, float, float]:
    """Row ``at``'s label as the pending labels keep it (`online.ensemble_state.PendingLabels`)."""
    label = labels[at]
    assert label is not None
    return (
        float(label.new_internal),
        float(label.new_external),
        float(label.interval_days),
        float(bool(label.content_changed)),
        float(times[at]),
    )


@dataclass
class _EpochSeen:
    """What an epoch keeps of its rows once their rates are worked out: a few numbers a row
    (`EnsembleScorer._epoch_seen`)."""

    losses: np.ndarray  # (m, used candidates) Poisson deviance
    option_totals: dict[str, np.ndarray]  # ranking option -> (m,) its rate per day, both sides
    in_use: np.ndarray  # (m,) the option in use's rate per day, both sides
    credibility: list[CredibilityTerms]  # per side
    first: np.ndarray  # (m,) whether the row was its page's first fetch (no interval before)


def _credibility_terms(
    ev: Evidence, priors: Priors, counts: np.ndarray, days: np.ndarray
) -> list[CredibilityTerms]:
    """Per side, the credibility terms of rows' windows with the label as one more interval."""
    prior = prior_rates(ev, priors)
    present = np.concatenate([np.ones((len(days), 1), bool), ev.window.present], axis=1)
    window_rates = ev.window.rates()
    with np.errstate(divide="ignore", invalid="ignore"):
        label_rates = np.where(days[:, None] > 0, counts / days[:, None], 0.0)
    return [
        credibility_terms(
            np.concatenate([label_rates[:, side : side + 1], window_rates[:, :, side]], 1),
            present,
            prior[:, :, side],
        )
        for side in range(counts.shape[1])
    ]
