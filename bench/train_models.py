"""Batch model training times (issue 4, item 7) and NGBoost's quality against its row count.

    python bench/train_models.py RUN_DIR [--rows 384323] [--ngboost-rows 2500,5000,...]

* ExtraTrees (LinkModel kind "extratrees": a 2-output regressor and two balanced classifiers)
  on ``--rows`` training rows: the paper's data set size is 384,323 pages, its training took
  ~1.5 h on 16 cores; the floor here is <= 10 min on 2 cores. The rows are the run's
  labelled training rows (time split, last crawl held out), drawn with replacement up to
  ``--rows`` when the run has fewer.
* HGB (Poisson counts + NL classifiers) and the hurdle model on the same rows.
Wall and process CPU seconds are printed: on a shared machine the wall time is inflated by
other load; CPU seconds / cores is the wall time on an idle machine with perfect scaling.

* NGBoost (Poisson) trained on growing samples of the training rows: time, held-out Poisson
  log-likelihood and yield@10% on the held-out crawl, to find the row count it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch.datasets import split_by_time, training_set
from batch.evaluate import load_rows
from batch.metrics import yield_at_budget
from batch.models import LinkModel


def _held_out(model: LinkModel, test) -> dict[str, float]:
    pred = model.predict(test.X)
    ll = model.log_likelihood(test.X, test.counts)
    y = test.y["nnl_total"]
    return {
        "loglik_internal": ll["internal"],
        "loglik_external": ll["external"],
        "yield_10": float(yield_at_budget(pred.total, y, (0.10,))[0.10]["share"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--rows", type=int, default=384_323)
    ap.add_argument("--ngboost-rows", default="2500,5000,10000,20000,40000")
    ap.add_argument("--ngboost-estimators", type=int, default=300)
    ap.add_argument("--skip", default="", help="comma list of: extratrees,hgb,hurdle,ngboost")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    train_rows, test_rows = split_by_time(load_rows(args.run_dir), holdout_crawls=1)
    train, test = training_set(train_rows), training_set(test_rows)
    rng = np.random.default_rng(0)
    pick = (
        rng.choice(len(train), args.rows, replace=True)
        if args.rows > len(train)
        else rng.choice(len(train), args.rows, replace=False)
    )
    big = train.take(np.sort(pick))
    print(
        f"cpus={os.cpu_count()} train rows available={len(train):,} bench rows={len(big):,} "
        f"({'drawn with replacement' if args.rows > len(train) else 'sampled'}), "
        f"features={big.X.shape[1]}, held-out rows={len(test):,}",
        flush=True,
    )
    out: dict[str, object] = {"rows": len(big), "features": big.X.shape[1]}
    for kind in ("extratrees", "hgb", "hurdle"):
        if kind in skip:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        model = LinkModel(kind=kind).fit(big)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        quality = _held_out(model, test)
        predict_s = time.perf_counter() - t0
        out[kind] = {
            "fit_seconds": seconds,
            "fit_cpu_seconds": cpu,
            "predict_seconds": predict_s,
            **quality,
        }
        print(
            f"{kind:>10}: fit {seconds:7.1f} s wall, {cpu:7.1f} s CPU on {len(big):,} rows "
            f"(predict {len(test):,} rows {predict_s:.1f} s); held-out {quality}",
            flush=True,
        )
    if "ngboost" not in skip:
        curve = []
        for n in (int(x) for x in args.ngboost_rows.split(",") if x):
            n = min(n, len(train))
            sub = train.take(np.sort(rng.choice(len(train), n, replace=False)))
            t0, c0 = time.perf_counter(), time.process_time()
            model = LinkModel(kind="ngboost", n_estimators=args.ngboost_estimators, max_rows=n).fit(
                sub
            )
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            quality = _held_out(model, test)
            curve.append({"rows": n, "fit_seconds": seconds, "fit_cpu_seconds": cpu, **quality})
            print(
                f"   ngboost: fit {seconds:7.1f} s wall, {cpu:7.1f} s CPU on {n:,} rows "
                f"({args.ngboost_estimators} rounds x 2 sides); held-out {quality}",
                flush=True,
            )
        out["ngboost"] = curve
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
