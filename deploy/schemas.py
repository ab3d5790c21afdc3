"""JSON Schema files of the crawler's side of the contract, generated from the pydantic models.

    python -m deploy.schemas           # (re)write schemas/*.schema.json
    python -m deploy.schemas --check   # exit 1 if a committed file differs from the models

* ``schemas/fetched-page.schema.json``: what the crawler produces (``online.events.FetchedPage``,
  validation mode: what lookaround accepts). ``fetched_at`` also accepts epoch seconds, as the
  model does (a number above 2x10^10 is read as milliseconds).
* ``schemas/priority-update.schema.json``: what lookaround publishes
  (``online.priority_update.PriorityUpdate``, serialisation mode: what the crawler reads).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = ROOT / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def fetched_page_schema() -> dict[str, Any]:
    from online.events import FetchedPage

    schema = FetchedPage.model_json_schema(mode="validation")
    fetched_at = schema["properties"]["fetched_at"]
    schema["properties"]["fetched_at"] = {
        "anyOf": [
            {"type": "string", "format": "date-time"},
            {"type": "number", "description": "Epoch seconds (above 2e10: milliseconds)."},
        ],
        **{k: v for k, v in fetched_at.items() if k not in ("type", "format")},
    }
    return _wrap(schema, "fetched-page", "Fetched-page event (crawler -> lookaround)")


def priority_update_schema() -> dict[str, Any]:
    from online.priority_update import PriorityUpdate

    schema = PriorityUpdate.model_json_schema(mode="serialization")
    return _wrap(schema, "priority-update", "Priority update (lookaround -> crawler)")


def _wrap(schema: dict[str, Any], name: str, title: str) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        **schema,
        "title": title,
    }


SCHEMAS = {
    "fetched-page.schema.json": fetched_page_schema,
    "priority-update.schema.json": priority_update_schema,
}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def generate(out_dir: Path = SCHEMA_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in SCHEMAS.items():
        path = out_dir / name
        path.write_text(render(build()), encoding="utf-8")
        written.append(path)
    return written


def stale(out_dir: Path = SCHEMA_DIR) -> list[str]:
    """Names of committed schema files that differ from freshly generated ones."""
    out = []
    for name, build in SCHEMAS.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != render(build()):
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for name in bad:
            print(f"schemas/{name} is out of date: run python -m deploy.schemas", file=sys.stderr)
        return 1 if bad else 0
    for path in generate():
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
