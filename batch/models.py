"""Batch link models: one artifact class, `LinkModel`, behind one prediction interface.

A `LinkModel` predicts, for each row of features (a page right after a fetch), the new internal
and external outlinks the page will show at its next fetch, in an interval of typical length
``interval_days_`` (the median label interval of its training rows): expected counts,
P(>= 1 new link) per side, and a predictive standard deviation of the total for an
exploration bonus. ``kind`` picks the learner:

* ``extratrees`` (the paper's best): ExtraTreesRegressor (both counts, multi-output) and one
  ExtraTreesClassifier(class_weight="balanced") per side for NL; ``std_total`` is the spread
  of the total across trees;
* ``ngboost``: NGBoost with a Poisson distribution per side (the paper's NNL model), trained on
  at most ``max_rows`` rows (default 20,000; see bench/train_models.py); P(>= 1) = 1 - e^-mu;
* ``hgb``: HistGradientBoostingRegressor(loss="poisson") per side and a
  HistGradientBoostingClassifier per side for NL: the fast strong option;
* ``negbin`` (beyond the paper, over-dispersed): the ``hgb`` Poisson mean plus an NB2
  dispersion alpha per side (var = mu + alpha mu^2), fitted by maximum likelihood on rows
  the mean model did not see;
* ``hurdle`` (zero-inflated): P(y > 0) from a classifier times a shifted negative binomial for
  y - 1 given y > 0 (mean model on the positive rows, alpha by maximum likelihood).

Probabilities are calibrated (the balanced classifiers' are corrected back to the training
base rate); `LinkModel.nl_scores` gives the balanced version, whose 0.5 threshold is the
paper's NL decision. NaN features are fine: the gradient boosters handle them natively, the
trees see a per-feature sentinel below the training minimum.

>>> rng = np.random.default_rng(0)
>>> X = rng.random((400, 3))
>>> Y = rng.poisson(np.column_stack([4 * X[:, 0], X[:, 1]]))
>>> model = LinkModel(kind="hgb", n_estimators=30).fit(X, Y, feature_names=["a", "b", "c"])
>>> pred = model.predict(X[:5])
>>> pred.internal.shape, bool((pred.p_external <= 1).all()), model.feature_names_
((5,), True, ['a', 'b', 'c'])
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np
import pandas as pd
import scipy
import sklearn
from sklearn.base import BaseEstimator
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from threadpoolctl import ThreadpoolController

from batch.datasets import DEFAULT_FEATURE_SET, TrainingSet, training_set
from batch.distributions import EPS, balanced, calibrated, fit_alpha, nb_logpmf, nb_p0
from online.errors import InputError

__all__ = [
    "KINDS",
    "CountPrediction",
    "LinkModel",
    "library_versions",
]

KINDS = ("extratrees", "ngboost", "hgb", "negbin", "hurdle")
#: What `lookaround train` registers by default: the hurdle model ties ExtraTrees on a
#: generated crawl's held-out yield@10%, leads on the real site S and is the best calibrated
#: count model by held-out log-likelihood (`lookaround experiment`; docs/models.md).
DEFAULT_KIND = "hurdle"
SIDES = ("internal", "external")
#: Below this many rows the gradient boosters run on one OpenMP thread: on a small or busy
#: machine OpenMP's spinning threads can make a small fit hundreds of times slower.
OPENMP_MIN_ROWS = 20_000


@functools.cache
def _thread_pools() -> ThreadpoolController:
    """This process's thread pools, found once: finding them reads every loaded library
    (milliseconds), and a model predicts on every batch a worker scores."""
    return ThreadpoolController()


def _openmp(rows: int, n_jobs: int):  # type: ignore[no-untyped-def]
    """Thread limit for the OpenMP learners (HGB) on ``rows`` rows."""
    limit = 1 if rows < OPENMP_MIN_ROWS else (None if n_jobs < 0 else n_jobs)
    return _thread_pools().limit(limits=limit, user_api="openmp")


def library_versions() -> dict[str, str]:
    """Versions that a pickled model depends on (and python, for the record). NGBoost's is
    read from its installed metadata, not by importing it: the import (SymPy's with it)
    takes about a second of CPU under the GIL, and every model fitted as the stream goes on
    (`batch.refresh`, an ExtraTrees) would pay it in its thread, stalling the pipeline."""
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "sklearn": sklearn.__version__,
        "ngboost": metadata.version("ngboost"),
        "pandas": pd.__version__,
    }


@dataclass(frozen=True)
class CountPrediction:
    """Per row: expected new internal / external outlinks in the next interval of
    ``interval_days_`` days, P(>= 1) per side, predictive std of the total."""

    internal: np.ndarray
    external: np.ndarray
    p_internal: np.ndarray
    p_external: np.ndarray
    std_total: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.internal + self.external

    @property
    def p_any(self) -> np.ndarray:
        """P(>= 1 new link of either side), the two sides taken as independent."""
        return 1.0 - (1.0 - self.p_internal) * (1.0 - self.p_external)

    def __len__(self) -> int:
        return len(self.internal)


class _Constant:
    """Stands in for a learner when a side has a single class / no positive count."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.value)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.column_stack([np.full(len(X), 1 - self.value), np.full(len(X), self.value)])


# ----------------------------------------------------------------------- the model


class LinkModel(BaseEstimator):
    """New-outlink model of one ``kind`` (see the module docstring); a registry artifact.

    Parameters left None take the kind's default: ``n_estimators`` (ExtraTrees 100 trees,
    NGBoost 500 rounds, HGB 300 iterations with early stopping), ``min_samples_leaf``
    (ExtraTrees regressor 5, HGB 25), ``max_rows`` (NGBoost 20,000: its held-out quality is
    flat from 10,000 rows; others all rows).
    ``nl_min_samples_leaf``: the ExtraTrees NL classifiers' leaf size, internal and external
    (paper: 2 and 10; on generated crawls 3 / 10 with max_features 0.3 scored best).
    """

    def __init__(
        self,
        kind: str = "hgb",
        *,
        feature_set: str = DEFAULT_FEATURE_SET,
        n_estimators: int | None = None,
        min_samples_leaf: int | None = None,
        max_features: float | str | None = 0.3,
        nl_min_samples_leaf: tuple[int, int] = (3, 10),
        classifiers: bool = True,
        learning_rate: float | None = None,
        max_rows: int | None = None,
        dispersion_fraction: float = 0.2,
        n_jobs: int = -1,
        random_state: int = 0,
    ) -> None:
        self.kind = kind
        self.feature_set = feature_set
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.nl_min_samples_leaf = nl_min_samples_leaf
        self.classifiers = classifiers
        self.learning_rate = learning_rate
        self.max_rows = max_rows
        self.dispersion_fraction = dispersion_fraction
        self.n_jobs = n_jobs
        self.random_state = random_state

    # -- fitting ---------------------------------------------------------------------------

    def fit(
        self,
        X: np.ndarray | pd.DataFrame | TrainingSet,
        y: np.ndarray | None = None,
        *,
        feature_names: list[str] | None = None,
        interval_days: np.ndarray | float | None = None,
    ) -> LinkModel:
        """Fit on a `TrainingSet`, on feature rows (a DataFrame: labelled rows only, columns of
        ``feature_set``), or on a matrix X with counts y of shape (n, 2) (internal, external)
        and ``feature_names``. Returns self."""
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; choose one of {KINDS}")
        if isinstance(X, pd.DataFrame):
            X = training_set(X, self.feature_set)
        if isinstance(X, TrainingSet):
            ts = X
            X, y = ts.X, ts.counts
            feature_names, interval_days = ts.feature_names, ts.interval_days
        if y is None or feature_names is None:
            raise ValueError("fit(X, y, feature_names=...) needs y and feature_names")
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(y, dtype=np.float64).reshape(len(X), 2)
        if len(feature_names) != X.shape[1]:
            raise ValueError(f"{X.shape[1]} columns but {len(feature_names)} feature names")
        if len(X) == 0:
            raise InputError(
                "no labelled rows to fit on (a fetch is labelled by its page's next fetch): "
                "train on the run of a crawl with more rounds"
            )
        rng = np.random.default_rng(self.random_state)
        max_rows = self.max_rows
        if max_rows is None and self.kind == "ngboost":
            max_rows = 20_000
        if max_rows is not None and len(X) > max_rows:
            pick = np.sort(rng.choice(len(X), max_rows, replace=False))
            X, Y = X[pick], Y[pick]
            if interval_days is not None and np.ndim(interval_days):
                interval_days = np.asarray(interval_days)[pick]

        self.feature_names_ = list(feature_names)
        self.n_features_in_ = X.shape[1]
        self.n_rows_ = len(X)
        days = 7.0 if interval_days is None else np.asarray(interval_days, dtype=np.float64)
        self.interval_days_ = float(np.nanmedian(days)) if np.ndim(days) else float(days)
        self.base_rate_ = [float((Y[:, s] > 0).mean()) for s in range(2)]
        self.fill_values_ = self._fill_values(X)
        self.versions_ = library_versions()
        self.alpha_ = [0.0, 0.0]
        if self.kind in ("hgb", "negbin", "hurdle"):
            X = self._native(X)
        with _openmp(len(X), self.n_jobs):
            getattr(self, f"_fit_{self.kind}")(X, Y, rng)
        return self

    def _fill_values(self, X: np.ndarray) -> np.ndarray:
        known = np.isfinite(X)
        self.empty_columns_ = np.flatnonzero(~known.any(axis=0))
        lo = np.where(known, X, np.inf).min(axis=0)
        lo = np.where(np.isinf(lo), 0.0, lo)
        return lo - 1.0 - 0.01 * np.abs(lo)

    def _filled(self, X: np.ndarray) -> np.ndarray:
        """NaN -> a sentinel below the training minimum (for the tree ensembles)."""
        return np.where(np.isnan(X), self.fill_values_, X).astype(np.float32)

    def _native(self, X: np.ndarray) -> np.ndarray:
        """NaN kept (gradient boosters), but a column never seen known is a constant 0."""
        if len(self.empty_columns_):
            X = X.copy()
            X[:, self.empty_columns_] = 0.0
        return X

    def _n(self, default: int) -> int:
        return self.n_estimators if self.n_estimators is not None else default

    def _leaf(self, default: int) -> int:
        return self.min_samples_leaf if self.min_samples_leaf is not None else default

    def _fit_extratrees(self, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> None:
        Xf = self._filled(X)
        common = dict(
            n_estimators=self._n(100),
            min_samples_leaf=self._leaf(5),
            max_features=self.max_features,
            n_jobs=self.n_jobs,
            random_state=self.random_state,
        )
        self.regressor_ = ExtraTreesRegressor(**common).fit(Xf, Y)
        self.classifiers_ = []
        if not self.classifiers:  # P(>= 1) from the Poisson of the mean (a lighter model)
            return
        for s in range(2):
            positive = Y[:, s] > 0
            if positive.all() or not positive.any():
                self.classifiers_.append(_Constant(float(positive.mean())))
                continue
            leaf = self.nl_min_samples_leaf[s]
            clf = ExtraTreesClassifier(
                class_weight="balanced", **(common | {"min_samples_leaf": leaf})
            )
            self.classifiers_.append(clf.fit(Xf, positive))

    @staticmethod
    def _no_empty(X: np.ndarray) -> np.ndarray:
        """HGB cannot bin a column without a known value; make such (near-)empty columns a
        constant (never split on, so what they hold at prediction time does not matter)."""
        # HGB bins on a sample of up to 200,000 rows; a column with fewer known values than
        # this can come out empty in it (sklearn then fails), so it becomes a constant.
        empty = (~np.isnan(X)).sum(axis=0) < 50
        if empty.any():
            X = X.copy()
            X[:, empty] = 0.0
        return X

    def _hgb_regressor(self, X: np.ndarray, y: np.ndarray) -> Any:
        X = self._no_empty(X)
        if not (y > 0).any():
            return _Constant(0.0)
        reg = HistGradientBoostingRegressor(
            loss="poisson",
            learning_rate=self.learning_rate or 0.1,
            max_iter=self._n(300),
            min_samples_leaf=self._leaf(25),
            early_stopping=len(X) >= 1000,
            random_state=self.random_state,
        )
        return reg.fit(X, y)

    def _hgb_classifier(self, X: np.ndarray, y: np.ndarray) -> Any:
        X = self._no_empty(X)
        if y.all() or not y.any():
            return _Constant(float(y.mean()))
        clf = HistGradientBoostingClassifier(
            learning_rate=self.learning_rate or 0.1,
            max_iter=self._n(300),
            min_samples_leaf=self._leaf(25),
            early_stopping=len(X) >= 1000,
            random_state=self.random_state,
        )
        return clf.fit(X, y)

    def _fit_hgb(self, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> None:
        self.regressors_ = [self._hgb_regressor(X, Y[:, s]) for s in range(2)]
        self.classifiers_ = [self._hgb_classifier(X, Y[:, s] > 0) for s in range(2)]

    def _dispersion_split(
        self, n: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray] | None:
        n_val = round(self.dispersion_fraction * n)
        if n_val < 20 or n - n_val < 20:
            return None
        perm = rng.permutation(n)
        return np.sort(perm[n_val:]), np.sort(perm[:n_val])

    def _fit_negbin(self, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> None:
        split = self._dispersion_split(len(X), rng)
        self.regressors_ = []
        for s in range(2):
            if split is not None:  # alpha from rows the mean model did not see
                fit_idx, val_idx = split
                mu = self._hgb_regressor(X[fit_idx], Y[fit_idx, s]).predict(X[val_idx])
                self.alpha_[s] = fit_alpha(Y[val_idx, s], mu)
            self.regressors_.append(self._hgb_regressor(X, Y[:, s]))

    def _fit_hurdle(self, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> None:
        split = self._dispersion_split(len(X), rng)
        self.classifiers_, self.regressors_ = [], []
        for s in range(2):
            positive = Y[:, s] > 0
            self.classifiers_.append(self._hgb_classifier(X, positive))
            if split is not None:
                fit_idx, val_idx = split
                fit_pos = fit_idx[positive[fit_idx]]
                val_pos = val_idx[positive[val_idx]]
                if len(fit_pos) and len(val_pos):
                    m = self._hgb_regressor(X[fit_pos], Y[fit_pos, s] - 1).predict(X[val_pos])
                    self.alpha_[s] = fit_alpha(Y[val_pos, s] - 1, m)
            pos = np.flatnonzero(positive)
            self.regressors_.append(
                self._hgb_regressor(X[pos], Y[pos, s] - 1) if len(pos) else _Constant(0.0)
            )

    def _fit_ngboost(self, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> None:
        from ngboost import NGBRegressor
        from ngboost.distns import Poisson

        Xf = self._filled(X)
        self.regressors_ = []
        for s in range(2):
            y = Y[:, s].astype(np.int64)
            if not (y > 0).any():
                self.regressors_.append(_Constant(0.0))
                continue
            ngb = NGBRegressor(
                Dist=Poisson,
                n_estimators=self._n(500),
                learning_rate=self.learning_rate or 0.05,
                verbose=False,
                random_state=self.random_state,
            )
            self.regressors_.append(ngb.fit(Xf, y))

    # -- prediction ------------------------------------------------------------------------

    def _check(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "feature_names_"):
            raise ValueError("this LinkModel is not fitted yet; call fit first")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names_):
            raise ValueError(
                f"expected {len(self.feature_names_)} columns in feature_names_ order, "
                f"got shape {X.shape}"
            )
        return X

    def _means(self, X: np.ndarray) -> np.ndarray:
        """(n, 2) expected counts; for a hurdle the mean of y - 1 given y > 0."""
        if self.kind == "extratrees":
            return np.maximum(self.regressor_.predict(self._filled(X)), 0.0)
        Xi = self._filled(X) if self.kind == "ngboost" else self._native(X)
        return np.column_stack([np.maximum(r.predict(Xi), 0.0) for r in self.regressors_])

    def expected(self, X: np.ndarray) -> np.ndarray:
        """(n, 2) expected new internal / external outlinks in an interval of
        ``interval_days_`` (what `predict` gives as ``internal`` / ``external``, without the
        probabilities and spreads)."""
        X = self._check(X)
        with _openmp(len(X), self.n_jobs):
            m = self._means(X)
            if self.kind == "hurdle":
                return self._positive_p(X) * (1.0 + m)
            return m

    def _positive_p(self, X: np.ndarray) -> np.ndarray:
        """(n, 2) calibrated P(y > 0) from the classifiers (extratrees, hgb, hurdle)."""
        Xi = self._filled(X) if self.kind == "extratrees" else self._native(X)
        out = np.empty((len(X), 2))
        for s, clf in enumerate(self.classifiers_):
            p = clf.predict_proba(Xi)[:, 1]
            if self.kind == "extratrees" and not isinstance(clf, _Constant):
                p = calibrated(p, self.base_rate_[s])
            out[:, s] = p
        return out

    def predict(self, X: np.ndarray) -> CountPrediction:
        """Predictions for X, columns in ``feature_names_`` order (NaN allowed)."""
        X = self._check(X)
        with _openmp(len(X), self.n_jobs):
            return self._predict(X)

    def _predict(self, X: np.ndarray) -> CountPrediction:
        if len(X) == 0:
            e = np.empty(0)
            return CountPrediction(e, e, e, e, e)
        m = self._means(X)
        a = self.alpha_
        if self.kind == "hurdle":
            pi = self._positive_p(X)
            mean = pi * (1.0 + m)
            second = 1.0 + 3.0 * m + (1.0 + np.array(a)) * m**2  # E[(1 + Z)^2], Z ~ NB(m, a)
            var = pi * second - mean**2
            return CountPrediction(
                mean[:, 0], mean[:, 1], pi[:, 0], pi[:, 1], np.sqrt(np.maximum(var.sum(1), 0))
            )
        if self.kind == "negbin":
            p = np.column_stack([1.0 - nb_p0(m[:, s], a[s]) for s in range(2)])
            var = m + np.array(a) * m**2
            return CountPrediction(m[:, 0], m[:, 1], p[:, 0], p[:, 1], np.sqrt(var.sum(1)))
        if self.kind == "ngboost":
            p = 1.0 - np.exp(-m)
            return CountPrediction(m[:, 0], m[:, 1], p[:, 0], p[:, 1], np.sqrt(m.sum(1)))
        p = self._positive_p(X) if self.classifiers_ else 1.0 - np.exp(-m)
        if self.kind == "extratrees":
            Xf = self._filled(X)
            totals = np.stack([t.predict(Xf).sum(axis=1) for t in self.regressor_.estimators_])
            std = totals.std(axis=0)
        else:
            std = np.sqrt(m.sum(1))
        return CountPrediction(m[:, 0], m[:, 1], p[:, 0], p[:, 1], std)

    def predict_frame(self, df: pd.DataFrame) -> CountPrediction:
        """Predictions for feature rows (a DataFrame with the model's columns)."""
        missing = [n for n in self.feature_names_ if n not in df.columns]
        if missing:
            raise ValueError(f"the rows lack {len(missing)} model features: {missing[:5]}")
        return self.predict(df[self.feature_names_].to_numpy(np.float64))

    def nl_scores(self, X: np.ndarray) -> np.ndarray:
        """(n, 2) class-balanced P(>= 1 new link): the paper's NL decision is score >= 0.5."""
        pred = self.predict(X)
        return np.column_stack(
            [
                balanced(pred.p_internal, self.base_rate_[0]),
                balanced(pred.p_external, self.base_rate_[1]),
            ]
        )

    @property
    def distribution_(self) -> str:
        """The count distribution behind `log_likelihood`."""
        return {"negbin": "negative binomial", "hurdle": "hurdle (shifted NB)"}.get(
            self.kind, "poisson"
        )

    def log_likelihood(self, X: np.ndarray, Y: np.ndarray) -> dict[str, float]:
        """Mean held-out log-likelihood per side of counts Y (n, 2) under the model's
        distribution (Poisson with its mean, NB2, or the hurdle)."""
        X = self._check(X)
        Y = np.asarray(Y, dtype=np.float64).reshape(len(X), 2)
        with _openmp(len(X), self.n_jobs):
            logpmf = self._logpmf(X, Y)
        return {SIDES[s]: float(v.mean()) for s, v in enumerate(logpmf.T)}

    def _logpmf(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        m = self._means(X)
        out = np.empty_like(Y)
        if self.kind == "hurdle":
            pi = np.clip(self._positive_p(X), EPS, 1 - EPS)
            for s in range(2):
                pos = Y[:, s] > 0
                shifted = nb_logpmf(np.maximum(Y[:, s] - 1, 0), m[:, s], self.alpha_[s])
                out[:, s] = np.where(pos, np.log(pi[:, s]) + shifted, np.log1p(-pi[:, s]))
            return out
        for s in range(2):
            out[:, s] = nb_logpmf(Y[:, s], m[:, s], self.alpha_[s])
        return out

    def p_zero(self, X: np.ndarray) -> np.ndarray:
        """(n, 2) P(no new link) under the model's count distribution."""
        X = self._check(X)
        with _openmp(len(X), self.n_jobs):
            if self.kind == "hurdle":
                return 1.0 - self._positive_p(X)
            m = self._means(X)
        return np.column_stack([nb_p0(m[:, s], self.alpha_[s]) for s in range(2)])
