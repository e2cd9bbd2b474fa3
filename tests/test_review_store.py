"""The review queue's store on SQLite and on PostgreSQL: migrations, add/list/filter/page/get, atomic decisions."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from extractor import Settings
from extractor.errors import ConfigError, InputError, ReviewConflictError, ReviewNotFoundError, ReviewStoreError
from extractor.jobs.gold import load_gold
from extractor.review import corrections, database
from extractor.review.export import write_gold
from extractor.review.store import ReviewItem, ReviewStore
from extractor.review.tables import TABLE, VERSION_TABLE, metadata


def settings_for(tmp_path: Path, database_url: str | None) -> Settings:
    return Settings.from_env({}, home=tmp_path / "home", engine="scripted", database_url=database_url)


@pytest.fixture
def store(tmp_path: Path, database_url: str | None) -> Iterator[ReviewStore]:
    opened = ReviewStore.from_settings(settings_for(tmp_path, database_url))
    yield opened
    opened.close()


def result(data: dict[str, Any], confidence: float | None) -> dict[str, Any]:
    return {"task": "landmark_slots", "data": data, "confidence": confidence, "attempts": []}


def add(store: ReviewStore, text: str, confidence: float | None, *, task: str = "landmark_slots") -> ReviewItem:
    data = {"name": text[:3]}
    return store.add(task=task, task_version="v1", text=text, result=result(data, confidence), confidence=confidence)


def test_migrations_bring_the_database_to_the_tables(store: ReviewStore) -> None:
    store.open()
    with store.engine.connect() as connection:
        assert database.current_revision(connection) == "0001"
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE, "compare_type": True})
        assert compare_metadata(context, metadata) == []  # the migration creates exactly what the store uses
    store.open()  # idempotent; a second store on the same database migrates nothing
    again = ReviewStore(database.create(store.engine.url))
    again.open()
    again.close()


def test_sqlite_lives_under_home_in_wal_mode(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, None)
    store = ReviewStore.from_settings(settings)
    add(store, "阿尔罕布拉宫是宫殿。", 0.5)
    store.close()
    assert settings.review_database == tmp_path / "home" / "review.sqlite3"
    with sqlite3.connect(settings.review_database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0] == 1


def test_add_get_and_filters(store: ReviewStore) -> None:
    first = add(store, "吴哥窟是柬埔寨的寺庙。", 0.42)
    second = add(store, "科隆大教堂位于德国科隆。", None)
    third = add(store, "泰姬陵是印度的一座陵墓。", 0.91, task="other_task")
    assert (first.id < second.id < third.id) and first.status == "pending" and first.version == 1
    got = store.get(first.id)
    assert got == first and got.result["data"] == {"name": "吴哥窟"} and got.created_at.tzinfo is not None
    assert [i.id for i in store.page().items] == [third.id, second.id, first.id]  # newest first
    assert [i.id for i in store.page(task="landmark_slots").items] == [second.id, first.id]
    assert [i.id for i in store.page(below=0.5).items] == [first.id]  # no confidence: never "below"
    assert [i.id for i in store.page(order="confidence").items] == [first.id, third.id, second.id]
    store.decide(first.id, "reject", reviewer="ann")
    assert [i.id for i in store.page(status="pending").items] == [third.id, second.id]
    assert [i.id for i in store.page(status="rejected", task="landmark_slots").items] == [first.id]
    with pytest.raises(ReviewNotFoundError, match="no review item 999"):
        store.get(999)


@pytest.mark.parametrize("order", ["newest", "confidence"])
def test_paging_visits_every_item_once_in_order(store: ReviewStore, order: str) -> None:
    confidences = [0.3, None, 0.1, 0.3, 0.9, None, 0.3, 0.05]
    items = [add(store, f"text {n}", c) for n, c in enumerate(confidences)]
    seen: list[int] = []
    cursor = None
    while True:
        page = store.page(order=order, limit=3, cursor=cursor)  # type: ignore[arg-type]
        seen += [i.id for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    if order == "newest":
        expected = sorted((i.id for i in items), reverse=True)
    else:
        expected = [i.id for i in sorted(items, key=lambda i: (2.0 if i.confidence is None else i.confidence, i.id))]
    assert seen == expected


def test_a_bad_cursor_or_limit_names_the_parameter(store: ReviewStore) -> None:
    add(store, "x", 0.5)
    for cursor in ("nonsense", "W10", corrections.line_id(3)):
        with pytest.raises(InputError, match="cursor: not a next_cursor"):
            store.page(cursor=cursor)
    cursor = store.page(limit=1, order="newest").next_cursor
    assert cursor is None  # one item only
    add(store, "y", 0.5)
    newest_cursor = store.page(limit=1).next_cursor
    with pytest.raises(InputError, match="order=confidence"):
        store.page(order="confidence", cursor=newest_cursor)
    with pytest.raises(InputError, match=r"limit: must be 1\.\.500"):
        store.page(limit=0)


def test_decisions_record_who_what_and_when(store: ReviewStore) -> None:
    accepted, corrected, rejected = (add(store, t, 0.5) for t in ("a", "b", "c"))
    done = store.decide(accepted.id, "accept", reviewer="ann")
    assert (done.status, done.corrected, done.reviewer, done.version) == ("accepted", None, "ann", 2)
    assert done.reviewed_at is not None and done.answer == {"name": "a"}
    fixed = store.decide(corrected.id, "correct", reviewer="bob", data={"name": "B", "city": None})
    assert fixed.status == "corrected" and fixed.answer == {"name": "B", "city": None}
    assert list(store.get(corrected.id).corrected) == ["name", "city"]  # field order kept (plain JSON, not JSONB)
    assert store.decide(rejected.id, "reject", reviewer=None).status == "rejected"
    with pytest.raises(ReviewConflictError, match=rf"review item {accepted.id} was already accepted by ann"):
        store.decide(accepted.id, "reject", reviewer="bob")
    with pytest.raises(ReviewNotFoundError):
        store.decide(12345, "accept", reviewer="ann")
    stale = add(store, "d", 0.5)
    with pytest.raises(ReviewConflictError, match="is at version 1, not 7"):
        store.decide(stale.id, "accept", reviewer="ann", version=7)
    assert store.decide(stale.id, "accept", reviewer="ann", version=1).version == 2
    assert [i.id for i in store.decided("landmark_slots")] == [accepted.id, corrected.id, stale.id]


def test_concurrent_decisions_one_wins(tmp_path: Path, database_url: str | None) -> None:
    """Reviewers in separate engines (as separate server processes would be) race on each item."""
    settings = settings_for(tmp_path, database_url)
    stores = [ReviewStore.from_settings(settings) for _ in range(4)]
    items = [add(stores[0], f"item {n}", 0.5) for n in range(6)]
    outcomes: dict[int, list[str]] = {i.id: [] for i in items}
    lock = threading.Lock()

    def reviewer(number: int, store: ReviewStore, barrier: threading.Barrier, item_id: int) -> None:
        barrier.wait()
        try:
            store.decide(item_id, "accept" if number % 2 else "reject", reviewer=f"r{number}")
            outcome = "won"
        except ReviewConflictError:
            outcome = "409"
        with lock:
            outcomes[item_id].append(outcome)

    for item in items:
        barrier = threading.Barrier(len(stores))
        threads = [threading.Thread(target=reviewer, args=(n, s, barrier, item.id)) for n, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    for store in stores:
        store.close()
    for item_id, seen in outcomes.items():
        assert sorted(seen) == ["409", "409", "409", "won"], (item_id, seen)
        assert stores[0].get(item_id).version == 2  # decided once


def test_a_failure_before_commit_leaves_the_item_pending(store: ReviewStore) -> None:
    item = add(store, "x", 0.5)

    def fail(_: ReviewItem) -> None:
        raise ReviewStoreError("cannot append to the pool")

    with pytest.raises(ReviewStoreError):
        store.decide(item.id, "accept", reviewer="ann", before_commit=fail)
    again = store.get(item.id)
    assert (again.status, again.version, again.reviewer) == ("pending", 1, None)


def test_items_survive_a_new_store(tmp_path: Path, database_url: str | None) -> None:
    settings = settings_for(tmp_path, database_url)
    first = ReviewStore.from_settings(settings)
    ids = [add(first, f"t{n}", 0.1 * n).id for n in range(5)]
    first.close()
    second = ReviewStore.from_settings(settings)
    assert sorted(i.id for i in second.page().items) == ids
    second.close()


def test_an_unreachable_database_is_one_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://someone:s3cret-pw@/nowhere?host={tmp_path}&port=1"
    store = ReviewStore.from_settings(settings_for(tmp_path, url))
    with pytest.raises(ReviewStoreError, match=r"the review database \(postgresql\+psycopg://someone:\*\*\*@") as error:
        store.open()
    assert "s3cret" not in str(error.value) and "\n" not in str(error.value)


def test_database_urls() -> None:
    def url(raw: str | None) -> str:
        settings = Settings.from_env({}, home=Path("/h"), database_url=raw)
        return database.database_url(settings).render_as_string(hide_password=False)

    assert url(None) == "sqlite+pysqlite:////h/review.sqlite3"
    assert url("postgresql://u:p@db/x") == "postgresql+psycopg://u:p@db/x"
    assert url("postgres://u@db:6543/x") == "postgresql+psycopg://u@db:6543/x"
    assert url("sqlite:////tmp/r.db") == "sqlite:////tmp/r.db"
    env = {"EXTRACTOR_DATABASE_URL": "mysql://u:hunter2@db/x"}
    with pytest.raises(ConfigError, match="EXTRACTOR_DATABASE_URL: use postgresql://") as error:
        Settings.from_env(env)
    assert "hunter2" not in str(error.value)
    assert "hunter2" not in repr(Settings.from_env({"EXTRACTOR_DATABASE_URL": "postgresql://u:hunter2@db/x"}))


def line(item_id: int, text: str) -> dict[str, Any]:
    return {"id": corrections.line_id(item_id), "text": text, "output": {"v": text}}


def test_pool_append_keeps_every_line(tmp_path: Path) -> None:
    pool = tmp_path / "pools" / "t.jsonl"
    seed = [{"text": "a", "output": {"v": "a"}}]
    assert corrections.append(pool, line(7, "b"), seed=seed)
    assert [json.loads(line)["text"] for line in pool.read_text().splitlines()] == ["a", "b"]
    assert not corrections.append(pool, line(7, "b"), seed=seed)  # already there
    with pool.open("a") as handle:
        handle.write('{"text": "c", "output": {"v": "c"}}')  # an editor left no newline at the end
    assert corrections.append(pool, line(70, "d"), seed=seed)  # 70 is not 7
    lines = [json.loads(line) for line in pool.read_text().splitlines()]
    assert [line["text"] for line in lines] == ["a", "b", "c", "d"] and lines[-1]["id"] == "review-70"


def test_export_writes_a_gold_file_eval_reads(store: ReviewStore, tmp_path: Path) -> None:
    accepted, corrected, rejected, pending = (add(store, t, 0.5) for t in ("吴哥窟", "故宫", "x", "y"))
    store.decide(accepted.id, "accept", reviewer="ann")
    store.decide(corrected.id, "correct", reviewer="ann", data={"name": "故宫"})
    store.decide(rejected.id, "reject", reviewer="ann")
    out = tmp_path / "gold.jsonl"
    done = write_gold(out, store.decided("landmark_slots"))
    assert (done.written, done.skipped) == (2, 0)
    gold = load_gold(out, task=None, known=["landmark_slots"])
    assert [(g.task, g.text, g.expected) for g in gold] == [
        ("landmark_slots", "吴哥窟", {"name": "吴哥窟"}),
        ("landmark_slots", "故宫", {"name": "故宫"}),
    ]
    assert pending.status == "pending"


def test_a_nul_character_is_refused_by_postgresql_only(store: ReviewStore) -> None:
    if store.engine.dialect.name == "postgresql":
        with pytest.raises(InputError, match="NUL character"):
            add(store, "a\x00b", 0.5)
    else:
        assert store.get(add(store, "a\x00b", 0.5).id).text == "a\x00b"
