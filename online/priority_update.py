"""The priority update: what lookaround tells the crawler, as a validated model.

The pipeline builds priority updates as plain dicts (`online.scored`,
`online.related_updates`) for speed; this model is their contract: the JSON Schema the
crawler reads (``schemas/priority-update.schema.json``, `deploy/schemas.py`) and what the tests
validate the published updates against.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ScorerRef(BaseModel):
    """Which scorer produced a priority, so a crawler can audit and compare."""

    name: str
    version: str
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Versions of the learned models behind the score (online, batch).",
    )


class RelatedTo(BaseModel):
    """The fetch that announced a related update: a sibling of the page showed new links."""

    url: str = Field(description="The sibling whose fetch showed new links.")
    fetched_at: datetime = Field(description="That fetch.")
    new_links: int = Field(ge=1, description="The new outlinks it showed.")


class PriorityUpdate(BaseModel):
    """What lookaround tells the crawler after each accepted fetch, and (``kind`` related)
    for a page whose sibling's fetch showed new links."""

    model_config = ConfigDict(extra="allow")

    url: str = Field(description="Normalised URL of the page.")
    fetched_at: datetime = Field(description="The fetch this score follows.")
    scored_at: datetime = Field(description="When the score was computed (UTC).")
    score: float = Field(description="Recrawl priority: higher = recrawl sooner.")
    expected_new_internal: float | None = Field(
        description="Expected new internal outlinks at the next fetch; null when the scorer "
        "makes no count estimate (ccr)."
    )
    expected_new_external: float | None = Field(
        description="Expected new external outlinks at the next fetch; null as above."
    )
    p_new: float = Field(ge=0.0, le=1.0, description="P(>= 1 new outlink at the next fetch).")
    rate_per_day: float | None = Field(
        None,
        ge=0.0,
        description="Expected new outlinks per day since this fetch: the expected count at a "
        "later time t is rate_per_day x (t - fetched_at) in days, so pages fetched at "
        "different times compare fairly.",
    )
    next_fetch_at: datetime | None = Field(
        None,
        description="Suggested time of the next fetch: when the expected number of new "
        "outlinks reaches the deployment's target (default 1), capped to a maximum interval.",
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="What drove the score, strongest first: own_history, related_pages, "
        "model, exploration; prior alone when nothing is known of the page yet.",
    )
    scorer: ScorerRef
    crawl: int | None = None
    status: int = 200
    kind: Literal["fetch", "related"] = Field(
        "fetch",
        description="fetch (absent): the update that follows a fetch of this page; related: "
        "the priority of this page's last fetch (fetched_at) revised because a sibling (a "
        "translation) showed new links: due at once, with the links expected to wait.",
    )
    related_to: RelatedTo | None = Field(
        None, description="With kind related: the sibling's fetch that announced it."
    )
    expected_waiting: float | None = Field(
        None,
        ge=0.0,
        description="With kind related: new outlinks expected to wait at the page because of "
        "the sibling's (the share that followed such announcements, learned from the stream).",
    )
