"""The files of a run directory, named once: the replay writes them, evaluation reads them.

Kept free of heavy imports so the evaluation side can use it without loading FAISS.
"""

from __future__ import annotations

PRIORITIES_FILE = "priorities.jsonl.gz"
REJECTS_FILE = "rejects.jsonl"
#: Related-page updates (`online.related_updates`): a sibling's priority revised when its page
#: showed new links.
RELATED_FILE = "related.jsonl.gz"
FEATURES_FILE = "features.parquet"
SUMMARY_FILE = "summary.json"
#: Model registry of the batch models a replay refreshed (`batch.registry` layout).
MODELS_DIR = "models"
