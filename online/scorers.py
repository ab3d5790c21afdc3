"""Every scorer by name, in one place: the formulas and the learned scorers.

The name a user gives (``--scorer``, ``LOOKAROUND_SCORER``) is looked up here and nowhere else.
It sits above both `online.scoring` (the formulas) and `online.learned` (the learned scorers,
which build on the formulas), so neither of them needs to import the other's names.

>>> get_scorer("lbla").name
'lbla'
>>> SCORER_NAMES
('lbla', 'nnl-pr', 'nnl-av', 'ccr', 'online', 'batch', 'ensemble')
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DEFAULT_SCORER", "LEARNED", "LEARNED_SCORERS", "SCORERS", "SCORER_NAMES", "get_scorer"]

from online.learned import BatchScorer, EnsembleScorer, OnlineScorer
from online.scoring import (
    DEFAULT_SCORER,
    CCRScorer,
    LBLAScorer,
    NNLAverageScorer,
    NNLPreviousScorer,
    Scorer,
)

#: The formula scorers: no options, no learned state.
SCORERS: dict[str, Callable[[], Scorer]] = {
    "lbla": LBLAScorer,
    "nnl-pr": NNLPreviousScorer,
    "nnl-av": NNLAverageScorer,
    "ccr": CCRScorer,
}
#: The learned scorers (`online.learned`): they take options (model source, history ...).
LEARNED_SCORERS: dict[str, type[EnsembleScorer]] = {
    "online": OnlineScorer,
    "batch": BatchScorer,
    "ensemble": EnsembleScorer,
}
LEARNED = tuple(LEARNED_SCORERS)
SCORER_NAMES = (*SCORERS, *LEARNED)


def get_scorer(name: str, **options: object) -> Scorer:
    """The scorer registered under ``name``; ValueError lists the known names.

    ``options`` go to the learned scorers (``model_source``, ``history``, ``exploration`` ...);
    the formula scorers take none and ignore them.
    """
    if name in LEARNED_SCORERS:
        return LEARNED_SCORERS[name](**options)  # type: ignore[arg-type]
    try:
        return SCORERS[name]()
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; choose one of {list(SCORER_NAMES)}") from None
