"""Time to evaluate one paper-sized ranking round (384,323 pages; floor: 30 s).

Synthetic round: heavy-tailed new-outlink counts (about 70 % zeros internal, 92 % external),
six rankings whose scores are noisy views of the truth (plus random and the oracle), all seven
targets (NNL / NL / LCR, internal and external, NNL total).

    python bench/evaluate_round.py
"""

from __future__ import annotations

import time

import numpy as np

from batch.evaluate import Prediction, evaluate_arrays

PAGES = 384_323
FLOOR_S = 30.0


def counts(rng: np.random.Generator, zeros: float, scale: float) -> np.ndarray:
    tail = np.floor(rng.pareto(1.3, PAGES) * scale) + 1
    return np.where(rng.random(PAGES) < zeros, 0.0, tail)


def main() -> None:
    rng = np.random.default_rng(0)
    internal, external = counts(rng, 0.70, 3.0), counts(rng, 0.92, 1.0)
    lcr_i = np.clip((internal > 0) * 0.6 + rng.random(PAGES) * 0.4, 0, 1)
    lcr_e = np.clip((external > 0) * 0.6 + rng.random(PAGES) * 0.4, 0, 1)
    truths = {
        "nnl_internal": internal,
        "nnl_external": external,
        "nnl_total": internal + external,
        "nl_internal": (internal > 0).astype(float),
        "nl_external": (external > 0).astype(float),
        "lcr_internal": lcr_i,
        "lcr_external": lcr_e,
    }
    predictions: dict[str, Prediction] = {}
    for j, noise in enumerate((0.3, 0.6, 1.0, 1.5, 2.0, 3.0)):
        # rounded like real baseline counts, so scores tie too
        ei = np.round(np.maximum(internal * np.exp(rng.normal(0, noise, PAGES)), 0), 1)
        ee = np.round(np.maximum(external * np.exp(rng.normal(0, noise, PAGES)), 0), 1)
        predictions[f"scorer{j}"] = Prediction(ei + ee, 1 - np.exp(-(ei + ee)), ei, ee)
    u = rng.random(PAGES)
    predictions["random"] = Prediction(u, u, None, None)
    began = time.perf_counter()
    records = evaluate_arrays(truths, predictions)
    seconds = time.perf_counter() - began
    print(
        f"{PAGES:,} pages, {len(predictions) + 1} rankings x {len(truths)} targets "
        f"= {len(records)} evaluations: {seconds:.2f} s "
        f"({seconds / FLOOR_S:.3f} of the {FLOOR_S:.0f} s floor)"
    )


if __name__ == "__main__":
    main()
