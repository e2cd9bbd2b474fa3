"""Thin routes of the review queue: ``GET /review``, ``GET /review/{id}``, and accept / correct / reject.

API keys apply as on every route (the key gate stands in front of the whole app). Who decided is
the ``X-Reviewer`` header when given, else the fingerprint of the API key (``key:`` and 12 hex
digits of its SHA-256: it names the key without revealing it), else nobody.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from extractor.review.store import MAX_PAGE, Decision, Order, ReviewItem, Status
from extractor.server.protocol import (
    CorrectionRequest,
    DecisionOut,
    DecisionRequest,
    ErrorOut,
    PoolWriteOut,
    ReviewItemOut,
    ReviewPageOut,
)
from extractor.server.reviewing import Decided, ReviewDesk

router = APIRouter(tags=["review"])
REVIEWER_HEADER = "x-reviewer"
_MAX_REVIEWER = 200
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in [
        (400, "the body is not JSON we accept (see POST /extract/{task})"),
        (404, "no review item with this id"),
        (409, "the item was decided already (by another reviewer), or changed since the version given"),
        (422, "a bad body or parameter, or an answer that cannot be a pool line (invalid, or a value not in the text)"),
        (503, "the review database cannot be reached"),
    ]
}
ItemId = Annotated[int, Path(ge=1, le=2**53 - 1, description="the review item's id")]


def _desk(request: Request) -> ReviewDesk:
    desk: ReviewDesk = request.app.state.review
    return desk


def reviewer(request: Request) -> str | None:
    """Who is deciding: the API key's name (the ``X-Reviewer`` header after it), else the header, else None.

    With keys the name is the one the key gate vouched for (``extractor.server.access``); the header,
    which anyone may send, only adds to it.
    """
    named = "".join(c for c in request.headers.get(REVIEWER_HEADER, "") if c.isprintable()).strip()
    key: str | None = getattr(request.state, "api_key", None)
    if key is not None:
        return (f"{key} ({named})" if named else key)[:_MAX_REVIEWER]
    return named[:_MAX_REVIEWER] or None


def _out(item: ReviewItem) -> ReviewItemOut:
    return ReviewItemOut.model_validate(item, from_attributes=True)


def _decided(done: Decided) -> DecisionOut:
    pool = None
    if done.pool is not None:
        pool = PoolWriteOut(file=done.pool.file, line_id=done.pool.line_id, task_version=done.pool.task_version)
    return DecisionOut(**_out(done.item).model_dump(), pool=pool, note=done.note)


@router.get("/review", response_model=ReviewPageOut, responses={422: _ERRORS[422], 503: _ERRORS[503]})
async def review_queue(
    request: Request,
    task: Annotated[str | None, Query(description="only this task's items")] = None,
    status: Annotated[Status | None, Query(description="only items in this state")] = None,
    below: Annotated[float | None, Query(ge=0, le=1, description="only items with a confidence under this")] = None,
    order: Annotated[Order, Query(description="newest first, or the least confident first")] = "newest",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[
        str | None, Query(description="the previous page's next_cursor (same order); empty: the first page")
    ] = None,
) -> ReviewPageOut:
    """The review queue, filtered and paged."""
    # `?cursor=` is what a client sends for "no cursor yet" (a form field left empty)
    page = await _desk(request).page(
        task=task, status=status, below=below, order=order, limit=limit, cursor=cursor or None
    )
    return ReviewPageOut(items=[_out(i) for i in page.items], next_cursor=page.next_cursor)


@router.get(
    "/review/{item_id}",
    response_model=ReviewItemOut,
    responses={status: _ERRORS[status] for status in (404, 422, 503)},
)
async def review_item(item_id: ItemId, request: Request) -> ReviewItemOut:
    """One item of the queue."""
    return _out(await _desk(request).get(item_id))


async def _decide(
    request: Request, item_id: int, decision: Decision, body: DecisionRequest | None, data: Any = None
) -> DecisionOut:
    version = body.version if body is not None else None
    nothing = body.nothing_found if body is not None else False
    done = await _desk(request).decide(
        item_id, decision, reviewer=reviewer(request), data=data, version=version, nothing_found=nothing
    )
    return _decided(done)


@router.post("/review/{item_id}/accept", response_model=DecisionOut, responses=_ERRORS)
async def accept(item_id: ItemId, request: Request, body: DecisionRequest | None = None) -> DecisionOut:
    """The result is right: the item joins the task's example pool, and the catalog reloads."""
    return await _decide(request, item_id, "accept", body)


@router.post("/review/{item_id}/correct", response_model=DecisionOut, responses=_ERRORS)
async def correct(item_id: ItemId, body: CorrectionRequest, request: Request) -> DecisionOut:
    """The right answer is ``data``: checked against the task, it joins the pool, and the catalog reloads."""
    return await _decide(request, item_id, "correct", body, data=body.data)


@router.post("/review/{item_id}/reject", response_model=DecisionOut, responses=_ERRORS)
async def reject(item_id: ItemId, request: Request, body: DecisionRequest | None = None) -> DecisionOut:
    """Not worth teaching (a bad text, an ambiguous case): the item is closed and joins no pool."""
    return await _decide(request, item_id, "reject", body)
