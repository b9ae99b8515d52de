"""The bulletin board's data: SQLite schema, deterministic seed data and the named queries.

Design decision: the database tier runs *named* queries only (the app sends a name and
arguments, never SQL), like prepared statements; every query is real SQL on indexed tables, so
the database tier does real work (index lookups, sorts, a LIKE scan for search, writes that go to
the journal) in addition to any configured cost. The seeded database is built once per size and
cached, then copied for each run and replica (a run's writes never leak into the next run).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
from pathlib import Path

#: Rows of the seeded database (RUBBoS uses ~500k users and ~200k stories; these sizes keep the
#: database a few MB so that runs start in well under a second, while indexes still matter).
SIZES = {"users": 2000, "categories": 20, "stories": 6000, "comments": 30000}
WORDS = (
    "queue",
    "latency",
    "tier",
    "cache",
    "kernel",
    "thread",
    "socket",
    "packet",
    "cluster",
    "replica",
    "index",
    "shard",
    "commit",
    "rollback",
    "scheduler",
    "buffer",
    "quota",
    "stall",
    "spike",
    "bottleneck",
    "throughput",
    "capacity",
    "cloud",
    "server",
    "client",
    "proxy",
    "database",
    "storage",
    "network",
    "memory",
    "processor",
    "workload",
)
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE users(id INTEGER PRIMARY KEY, nickname TEXT NOT NULL, rating INTEGER NOT NULL,
                   created REAL NOT NULL);
CREATE TABLE categories(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE stories(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL,
                     author INTEGER NOT NULL, category INTEGER NOT NULL, date REAL NOT NULL,
                     rating INTEGER NOT NULL DEFAULT 0);
CREATE TABLE comments(id INTEGER PRIMARY KEY, story INTEGER NOT NULL, parent INTEGER NOT NULL,
                      author INTEGER NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
                      date REAL NOT NULL, rating INTEGER NOT NULL DEFAULT 0);
CREATE INDEX stories_date ON stories(date);
CREATE INDEX stories_category_date ON stories(category, date);
CREATE INDEX stories_author ON stories(author);
CREATE INDEX comments_story_date ON comments(story, date);
CREATE INDEX comments_author_date ON comments(author, date);
"""

#: name -> (SQL, writes?). Arguments are positional.
QUERIES: dict[str, tuple[str, bool]] = {
    "stories_of_the_day": (
        "SELECT s.id, s.title, s.date, u.nickname FROM stories s JOIN users u ON u.id = s.author "
        "ORDER BY s.date DESC LIMIT 10",
        False,
    ),
    "categories": ("SELECT id, name FROM categories ORDER BY name", False),
    "stories_in_category": (
        "SELECT s.id, s.title, s.date, u.nickname FROM stories s JOIN users u ON u.id = s.author "
        "WHERE s.category = ? ORDER BY s.date DESC LIMIT 20 OFFSET ?",
        False,
    ),
    "story": (
        "SELECT s.id, s.title, s.body, s.date, s.rating, u.id, u.nickname FROM stories s "
        "JOIN users u ON u.id = s.author WHERE s.id = ?",
        False,
    ),
    "comments_of_story": (
        "SELECT c.id, c.subject, c.date, c.rating, u.nickname FROM comments c "
        "JOIN users u ON u.id = c.author WHERE c.story = ? ORDER BY c.date LIMIT 50",
        False,
    ),
    "comment": (
        "SELECT c.id, c.story, c.subject, c.body, c.date, c.rating, u.nickname FROM comments c "
        "JOIN users u ON u.id = c.author WHERE c.id = ?",
        False,
    ),
    "search_stories": (
        "SELECT id, title, date FROM stories WHERE title LIKE ? ORDER BY date DESC LIMIT 20",
        False,
    ),
    "user": ("SELECT id, nickname, rating, created FROM users WHERE id = ?", False),
    "comments_of_user": (
        "SELECT id, story, subject, date FROM comments WHERE author = ? ORDER BY date DESC "
        "LIMIT 10",
        False,
    ),
    "insert_comment": (
        "INSERT INTO comments(story, parent, author, subject, body, date) VALUES (?,?,?,?,?,?)",
        True,
    ),
    "insert_story": (
        "INSERT INTO stories(title, body, author, category, date) VALUES (?,?,?,?,?)",
        True,
    ),
    "rate_comment": ("UPDATE comments SET rating = rating + ? WHERE id = ?", True),
    "rate_user": ("UPDATE users SET rating = rating + ? WHERE id = ?", True),
}


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def seed_database(path: Path, *, seed: int = 1) -> None:
    """Create and fill a bulletin-board database at ``path`` (deterministic in ``seed``)."""
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(SCHEMA)
        t0 = 1.7e9
        con.executemany(
            "INSERT INTO users VALUES (?,?,?,?)",
            (
                (i, f"user{i}", rng.randint(-5, 50), t0 - rng.random() * 3e7)
                for i in range(1, SIZES["users"] + 1)
            ),
        )
        con.executemany(
            "INSERT INTO categories VALUES (?,?)",
            ((i, f"{rng.choice(WORDS)}-{i}") for i in range(1, SIZES["categories"] + 1)),
        )
        con.executemany(
            "INSERT INTO stories VALUES (?,?,?,?,?,?,?)",
            (
                (
                    i,
                    _text(rng, 6),
                    _text(rng, 80),
                    rng.randint(1, SIZES["users"]),
                    rng.randint(1, SIZES["categories"]),
                    t0 - rng.random() * 3e6,
                    rng.randint(0, 20),
                )
                for i in range(1, SIZES["stories"] + 1)
            ),
        )
        con.executemany(
            "INSERT INTO comments VALUES (?,?,?,?,?,?,?,?)",
            (
                (
                    i,
                    rng.randint(1, SIZES["stories"]),
                    0,
                    rng.randint(1, SIZES["users"]),
                    _text(rng, 4),
                    _text(rng, 30),
                    t0 - rng.random() * 3e6,
                    rng.randint(-3, 10),
                )
                for i in range(1, SIZES["comments"] + 1)
            ),
        )
        con.commit()
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("ANALYZE")
        con.commit()
    finally:
        con.close()
    os.replace(tmp, path)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tierscope"


def database_copy(dest: Path, *, seed: int = 1) -> Path:
    """A fresh copy of the seeded database at ``dest`` (the seeded original is cached)."""
    key = hashlib.sha1(f"{SCHEMA_VERSION}{sorted(SIZES.items())}{seed}".encode()).hexdigest()[:12]
    cached = cache_dir() / f"bboard-{key}.sqlite"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        seed_database(cached, seed=seed)
    shutil.copyfile(cached, dest)
    return dest
