"""The files of a run directory, named once: the replay writes them, evaluation reads them.

Kept free of heavy imports so the evaluation side can use it without loading FAISS.
"""

from __future__ import annotations

PRIORITIES_FILE = "priorities.jsonl.gz"
REJECTS_FILE = "rejects.jsonl"
FEATURES_FILE = "features.parquet"
SUMMARY_FILE = "summary.json"
