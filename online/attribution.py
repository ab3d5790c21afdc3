"""Where a learned score comes from: the sources behind each row's estimate, and the models.

A priority says why it is what it is. Given the weight each candidate carries in a row's
estimate (`online.blending`), this module splits the estimate by source: the page's own
history, its related pages, its content changes, a model, the site's flat prior
(`reason_shares`, which `online.priority.reasons_of` turns into reason codes); and names the
model versions that carry weight in it (`row_models`), so that a priority can be traced to the
batch model or River learner behind it.

Kept apart from the scorer: it reads the weights and the evidence, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from online.blending import ANCHOR
from online.candidates import CONTENT, FLAT, RELATED, SIBLINGS, Evidence

#: Which prior each formula candidate shrinks towards (`online.candidates`).
_PRIOR_OF = {"nnl-av": FLAT, "nnl-pr": FLAT, "lbla": RELATED, "ccr": CONTENT, "siblings": SIBLINGS}
#: The source a prior's share is counted under.
_SOURCE_OF = {
    FLAT: "prior",
    RELATED: "related_pages",
    CONTENT: "content_changes",
    SIBLINGS: "related_pages",
}
#: The learners: their whole weight is the model's.
_MODELS = ("online", "batch")


def reason_shares(
    ev: Evidence, used: Sequence[str], weights: np.ndarray, k: np.ndarray
) -> dict[str, np.ndarray]:
    """How much of each row's estimate comes from where: the page's own history, its
    related pages, its content changes, a model, the site's flat prior. ``weights``: (m, k)
    weight of each candidate ``used``; ``k``: each prior's credibility constant (in
    intervals, the two sides' mean)."""
    n = ev.intervals
    out = {key: np.zeros(len(n)) for key in ("own_history", "related_pages",
                                              "content_changes", "model", "prior")}  # fmt: skip
    related_known = ~np.isnan(ev.related_rate[:, 0])
    for j, name in enumerate(used):
        w = weights[:, j]
        if name in _MODELS:
            out["model"] += w
            continue
        prior = _PRIOR_OF[name]
        z = (n > 0).astype(np.float64) if name == ANCHOR else n / (n + k[prior])
        out["own_history"] += w * z
        target = _SOURCE_OF[prior]
        if prior == RELATED:
            target_share = np.where(related_known, w * (1 - z), 0.0)
            out["related_pages"] += target_share
            out["prior"] += w * (1 - z) - target_share
        else:
            out[target] += w * (1 - z)
    return out


def row_models(
    weights: np.ndarray, used: Sequence[str], versions: Mapping[str, str | None]
) -> list[dict[str, str]]:
    """Per row, the versions of the models that carry weight in its estimate (rows with
    the same models share one dict). ``versions``: per learner candidate, the version of
    its model in use (None: none yet)."""
    used = list(used)
    carried = [
        (name, weights[:, used.index(name)] > 0)
        for name, version in versions.items()
        if version is not None and name in used
    ]
    if not carried:
        return [{}] * len(weights)
    code = sum(mask.astype(np.int64) << i for i, (_, mask) in enumerate(carried))
    patterns = {
        c: {name: versions[name] for i, (name, _) in enumerate(carried) if c >> i & 1}
        for c in np.unique(code).tolist()
    }
    return [patterns[c] for c in code.tolist()]  # type: ignore[misc]


__all__ = ["reason_shares", "row_models"]
