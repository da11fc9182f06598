"""A resumable SQLite store of results for every method: one row per cell.

A *cell* is one independent unit of work of an experiment: a (model, class, approach, k,
repetition) of a DeepFault grid, a target model of a DeepXplore run, a campaign of a
fuzzer (whose checkpoints overwrite its row). Cells are keyed by ``(experiment, method,
cell_id)``, where ``experiment`` is the hash of the experiment's configuration, so a
changed configuration never reuses old cells. Each cell is written in its own
transaction: a run killed at any moment (``kill -9`` included) leaves only whole cells
behind, and rerunning the same experiment skips them.

The schema is plain SQL, so other tools can read it with nothing but ``sqlite3``:

- ``meta(key, value)``: ``app = deepfault``, ``schema = 2``.
- ``experiments(experiment, method, name, config, provenance, created)``: JSON texts;
  ``created`` in Unix seconds (sub-second).
- ``cells(experiment, method, cell_id, data, arrays, created)``: ``data`` is the method's
  own JSON; ``arrays`` an ``.npz`` blob of named arrays (examples, inputs, checkpoints).

Stores written by deepfault 0.1 (schema 1: DeepFault cells only) are migrated in place,
in one transaction, the first time they are opened for writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError

__all__ = ["Record", "ResultStore", "SCHEMA_VERSION", "choose_experiment", "require_fields"]

SCHEMA_VERSION = 2

log = logging.getLogger(__name__)

SQL_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS experiments (
    experiment  TEXT PRIMARY KEY,
    method      TEXT NOT NULL,
    name        TEXT NOT NULL,
    config      TEXT NOT NULL,
    provenance  TEXT NOT NULL,
    created     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
    experiment  TEXT NOT NULL REFERENCES experiments(experiment),
    method      TEXT NOT NULL,
    cell_id     TEXT NOT NULL,
    data        TEXT NOT NULL,
    arrays      BLOB,
    created     REAL NOT NULL,
    PRIMARY KEY (experiment, method, cell_id)
);
"""


def _create_schema(db: sqlite3.Connection) -> None:
    """:data:`SQL_SCHEMA`, one statement at a time, inside the caller's transaction
    (``executescript`` would commit it first).
    """
    for statement in SQL_SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk (or the database's size limit) is full."""
    import errno

    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(err, "sqlite_errorcode", None)
    return code == getattr(sqlite3, "SQLITE_FULL", 13) or "disk is full" in str(err)


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, schema changes included (Python's sqlite3 begins none for
    ``CREATE``/``ALTER``): committed whole, or rolled back on any error.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.rollback()
        raise
    db.commit()


@dataclass(frozen=True)
class Record:
    """One stored cell: its id, the method's JSON fields and its named arrays."""

    cell_id: str
    data: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


def require_fields(record: Record, fields_: tuple[str, ...], path: str | os.PathLike) -> Record:
    """``record`` when its JSON holds every one of ``fields_``; else the error that names the cell
    and the store at ``path`` (:meth:`ResultStore.require`, and a served store's).
    """
    missing = [f for f in fields_ if f not in record.data]
    if missing:
        raise DeepFaultError(f"cell {record.cell_id!r} in the results store {str(path)!r} is corrupt"
                             f" (no {', '.join(missing)}); {_FIX}")
    return record


def _blob(arrays: dict[str, np.ndarray] | None) -> bytes | None:
    if not arrays:
        return None
    buf = io.BytesIO()
    np.savez_compressed(buf, allow_pickle=True, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _unblob(blob: bytes | None, what: str = "a cell") -> dict[str, np.ndarray]:
    """The arrays of a blob, never unpickled (``allow_pickle=False``: a pickled blob is refused)."""
    if blob is None:
        return {}
    if not isinstance(blob, bytes) or not blob:
        raise DeepFaultError(f"{what}'s arrays in the results store are corrupt (not an .npz blob); {_FIX}")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            if not hasattr(npz, "files"):
                raise ValueError("a bare array, not an .npz archive")
            return {name: npz[name] for name in npz.files}
    except Exception as err:  # noqa: BLE001 - zipfile, zlib, numpy: every kind of damage
        raise DeepFaultError(f"{what}'s arrays in the results store are corrupt ({type(err).__name__}: "
                             f"{str(err)[:120]}); {_FIX}") from None


_FIX = ("rerun the same 'deepfault experiment' command to compute the cell again (corrupt cells are "
        "recomputed), or give a new --store")


def _loads(text: str, what: str, kind: type = dict):
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError) as err:
        raise DeepFaultError(f"{what} in the results store is corrupt ({str(err)[:120]}); {_FIX}") from None
    if not isinstance(value, kind):
        raise DeepFaultError(f"{what} in the results store is corrupt (JSON {type(value).__name__}, expected "
                             f"an object); {_FIX}")
    return value


# --- the store --------------------------------------------------------------------------


_SQLITE_HEADER = b"SQLite format 3\x00"


#: Seconds a store waits for another process's lock before it gives up.
_LOCK_WAIT = 60.0


def _while_locked(step: Callable[[], None], wait: float = _LOCK_WAIT) -> None:
    """Run ``step``, again after a short pause while another process holds the file's lock.

    SQLite's busy timeout does not cover every case: switching a new file to WAL, or reading it
    while another connection recovers its WAL, answers "database is locked" at once. Workers
    that open one new store together (a process pool's campaigns) meet exactly this.
    """
    deadline = time.monotonic() + wait
    pause = 0.01
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as err:
            text = str(err).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _check_header(path: Path) -> None:
    """Refuse a non-empty file that is no SQLite database: SQLite takes a file shorter than its
    header for an empty database and would write a store over it.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as err:
        raise DeepFaultError(f"cannot read the results store {str(path)!r} ({err.strerror}); "
                             "check the path") from err
    if head and head != _SQLITE_HEADER:
        raise DeepFaultError(f"cannot use {str(path)!r} as a results store (not an SQLite file); choose "
                             "another --store path, or remove the file if it is yours to lose")


def _connect_reading(path: Path) -> sqlite3.Connection:
    """A connection that only reads ``path``. Where the file and its folder are writable it is
    opened read-write (``mode=rw``: never created), so that SQLite, closing the last connection to
    a WAL store, removes the ``-wal`` and ``-shm`` files that reading made; a ``mode=ro``
    connection cannot and leaves them beside a store that a command only read.
    """
    writable = os.access(path, os.W_OK) and os.access(path.parent if str(path.parent) else ".", os.W_OK)
    return sqlite3.connect(f"file:{path}?mode={'rw' if writable else 'ro'}", uri=True, timeout=60)


class ResultStore:
    """The SQLite file behind experiments of every method; safe to reopen after any interruption.

    Args:
        path: The store file; created (with its folder) when missing, unless ``readonly``.
        readonly: Open for reading only (reports); the file must exist.

    Raises:
        DeepFaultError: The file is not a deepfault store (another program's database, a
            corrupt file), cannot be created, or was written by a newer deepfault.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock_fd: int | None = None
        #: This run made the file (so a disk-full failure may remove it, with its -wal and -shm).
        self._created = not readonly and not os.path.lexists(self.path)
        self._disk_full = False
        if self.path.is_dir():
            raise DeepFaultError(f"results store {str(self.path)!r} is a directory; give a file name")
        _check_header(self.path)
        try:
            if readonly:
                if not self.path.is_file():
                    raise DeepFaultError(
                        f"results store {str(self.path)!r} does not exist; run 'deepfault experiment' first"
                    )
                self._db = _connect_reading(self.path)
                self._check_kind(migrate=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=_LOCK_WAIT)
                _while_locked(self._set_up)
        except (sqlite3.DatabaseError, OSError) as err:
            if _disk_full(err):
                self._disk_full = True
                with contextlib.suppress(Exception):
                    self.close()
                raise DeepFaultError(self._full_message(err)) from None
            raise DeepFaultError(
                f"cannot use {str(self.path)!r} as a results store ({err}); choose another path"
            ) from err

    def _set_up(self) -> None:
        """Check the file's kind, switch it to WAL and create the schema (idempotent)."""
        self._check_kind(migrate=True)
        if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with _transaction(self._db):  # two runs creating one store never see half a schema
            _create_schema(self._db)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('app', 'deepfault')")
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    @classmethod
    def check(cls, path: str | os.PathLike) -> None:
        """Refuse, before any work, a ``path`` that exists but is no deepfault store (or one
        written by a newer deepfault); changes nothing. A missing file is fine.
        """
        path = Path(path)
        if path.is_dir():
            raise DeepFaultError(f"results store {str(path)!r} is a directory; give a file name")
        if not path.exists():
            return
        _check_header(path)
        try:
            db = _connect_reading(path)
        except sqlite3.DatabaseError as err:
            raise DeepFaultError(f"cannot use {str(path)!r} as a results store ({err})") from err
        probe = cls.__new__(cls)
        probe.path, probe.readonly, probe._db = path, False, db
        try:
            tables = probe._tables()
            if tables and not ("meta" in tables or ({"experiments", "cells"} <= tables and probe._is_v1())):
                raise DeepFaultError(
                    f"{str(path)!r} is another program's SQLite database, not a deepfault results store; "
                    "choose another --store path")
            if "meta" in tables:
                probe._check_kind(migrate=False)
        except sqlite3.DatabaseError as err:
            raise DeepFaultError(
                f"cannot use {str(path)!r} as a results store ({err}); choose another path") from err
        finally:
            db.close()

    # --- kind, version, migration ---------------------------------------------------------

    def _tables(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def _check_kind(self, *, migrate: bool) -> None:
        tables = self._tables()
        if not tables:
            if self.readonly:
                raise DeepFaultError(f"results store {str(self.path)!r} is empty; run an experiment into it")
            return
        if "meta" in tables:
            meta = dict(self._db.execute("SELECT key, value FROM meta"))
            if meta.get("app") != "deepfault":
                raise DeepFaultError(
                    f"{str(self.path)!r} is another program's SQLite database, not a deepfault results "
                    "store; choose another --store path"
                )
            try:
                version = int(meta.get("schema", "0"))
            except (TypeError, ValueError):
                raise DeepFaultError(
                    f"results store {str(self.path)!r} is corrupt (schema {meta.get('schema')!r} is no "
                    "integer); give a new --store (the damaged file is left as it is)"
                ) from None
            if version > SCHEMA_VERSION:
                raise DeepFaultError(
                    f"results store {str(self.path)!r} was written by a newer deepfault (schema {version}); "
                    "upgrade deepfault (git pull, then pip install -e . in the checkout) to read it"
                )
            return
        if {"experiments", "cells"} <= tables and self._is_v1():
            if not migrate:
                raise DeepFaultError(
                    f"results store {str(self.path)!r} has the format of deepfault 0.1; open it once for "
                    "writing to migrate it (rerun 'deepfault experiment' with --store on it), or copy it "
                    "somewhere writable"
                )
            self._migrate_v1()
            return
        raise DeepFaultError(
            f"{str(self.path)!r} is another program's SQLite database, not a deepfault results store; "
            "choose another --store path"
        )

    def _is_v1(self) -> bool:
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(cells)")}
        return {"config_hash", "approach", "repetition", "examples"} <= columns

    def _migrate_v1(self) -> None:
        """Schema 1 (deepfault 0.1) to 2, in one transaction: nothing is lost or half-done."""
        db = self._db
        with _transaction(db):
            db.execute("ALTER TABLE experiments RENAME TO experiments_v1")
            db.execute("ALTER TABLE cells RENAME TO cells_v1")
            _create_schema(db)
            now = time.time()
            db.execute(
                "INSERT INTO experiments (experiment, method, name, config, provenance, created) "
                "SELECT config_hash, 'deepfault', name, config, provenance, "
                "CAST(strftime('%s', created) AS REAL) FROM experiments_v1"
            )
            rows = db.execute(
                "SELECT config_hash, model, cls, approach, k, repetition, seed, data, examples, created "
                "FROM cells_v1"
            ).fetchall()
            for h, model, cls, approach, k, rep, seed, data, blob, _created in rows:
                fields_ = _loads(data, "a cell")
                fields_.setdefault("seed", seed)
                db.execute(
                    "INSERT INTO cells (experiment, method, cell_id, data, arrays, created) "
                    "VALUES (?, 'deepfault', ?, ?, ?, ?)",
                    (h, f"{model}/{cls}/{approach}/{k}/{rep}", json.dumps(fields_), blob, now),
                )
            db.execute("DROP TABLE cells_v1")
            db.execute("DROP TABLE experiments_v1")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('app', 'deepfault')")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    # --- one writer at a time -------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self) -> Iterator[ResultStore]:
        """Hold the store's writer lock: a second run on the same store is refused at once.

        The lock is an advisory ``flock`` on the file, released when the block ends or the
        process dies (``kill -9`` included), so a crashed run never blocks the next one.
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DeepFaultError(
                f"another deepfault process is writing to {str(self.path)!r}; wait for it to finish "
                "(rerunning afterwards resumes where it stopped) or give another --store"
            ) from None
        self._lock_fd = fd
        try:
            yield self
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._lock_fd = None

    def close(self) -> None:
        """Close the store; after a disk-full failure, a store this run made that holds no finished
        cell is removed with its ``-wal`` and ``-shm`` (one with finished cells is kept: a rerun
        resumes from it).
        """
        db = getattr(self, "_db", None)
        empty = False
        if db is not None and self._disk_full and self._created:
            try:
                empty = db.execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 0
            except sqlite3.Error:
                empty = True  # no schema yet
        if db is not None:
            db.close()
        if empty:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{self.path}{suffix}")

    def _full_message(self, err) -> str:
        return (f"the disk is full: cannot write to the results store {str(self.path)!r} ({err}); free some "
                "space and rerun the same command (finished cells are kept; a new, empty store is removed)")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write: a full disk (``SQLITE_FULL``, ``ENOSPC``) becomes one line, and marks the store
        for :meth:`close`.
        """
        try:
            yield
        except (sqlite3.DatabaseError, OSError) as err:
            if not _disk_full(err):
                raise
            self._disk_full = True
            raise DeepFaultError(self._full_message(err)) from None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def begin(self, experiment: str, name: str, config: dict, provenance: dict, *,
              method: str = "deepfault") -> None:
        """Record an experiment (once; a rerun keeps the first provenance)."""
        with self._writing(), self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO experiments (experiment, method, name, config, provenance, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (experiment, method, name, json.dumps(config, sort_keys=True), json.dumps(provenance),
                 time.time()),
            )

    def put(self, experiment: str, method: str, cell_id: str, data: dict,
            arrays: dict[str, np.ndarray] | None = None, *, replace: bool = False) -> None:
        """Write one cell atomically. Without ``replace`` an existing cell is kept as it is
        (idempotent); with it the cell is overwritten (checkpoints).
        """
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._writing(), self._db:  # one transaction
            self._db.execute(
                f"{verb} INTO cells (experiment, method, cell_id, data, arrays, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (experiment, method, cell_id, json.dumps(data, allow_nan=False), _blob(arrays), time.time()),
            )

    def delete_cells(self, experiment: str, method: str, prefix: str) -> int:
        """Delete, in one transaction, the cells of ``experiment`` whose id is ``prefix`` or starts
        with ``prefix + "/"`` (a campaign started afresh); returns how many went.
        """
        with self._db:
            cur = self._db.execute(
                "DELETE FROM cells WHERE experiment = ? AND method = ? "
                "AND (cell_id = ? OR substr(cell_id, 1, ?) = ?)",
                (experiment, method, prefix, len(prefix) + 1, prefix + "/"),
            )
        return int(cur.rowcount)

    # --- reading --------------------------------------------------------------------------

    def done(self, experiment: str, method: str = "deepfault", *, check: bool = True) -> set[str]:
        """The ids of the intact cells of ``experiment`` already in the store.

        A resumed run must not count a damaged cell as done: with ``check`` every cell's JSON
        and arrays are read (never unpickled), and a corrupt cell is logged, deleted (when the
        store is open for writing) and left out, so that the run computes it again.
        """
        rows = self._db.execute(
            "SELECT cell_id, data, arrays FROM cells WHERE experiment = ? AND method = ?",
            (experiment, method),
        )
        ids: set[str] = set()
        corrupt: list[tuple[str, DeepFaultError]] = []
        for cell_id, data, blob in rows:
            if check:
                try:
                    _loads(data, f"cell {cell_id!r}")
                    _unblob(blob, f"cell {cell_id!r}")
                except DeepFaultError as bad:
                    corrupt.append((cell_id, bad))
                    continue
            ids.add(cell_id)
        for _, err in corrupt:
            log.warning("%s; it is computed again", err)
        if corrupt and not self.readonly:
            with self._writing(), self._db:
                self._db.executemany("DELETE FROM cells WHERE experiment = ? AND method = ? AND cell_id = ?",
                                     [(experiment, method, cid) for cid, _ in corrupt])
        return ids

    def require(self, record: Record, *fields_: str) -> Record:
        """``record`` when its JSON holds every field; else the error that names the cell."""
        return require_fields(record, fields_, self.path)

    def get(self, experiment: str, method: str, cell_id: str) -> Record | None:
        row = self._db.execute(
            "SELECT data, arrays FROM cells WHERE experiment = ? AND method = ? AND cell_id = ?",
            (experiment, method, cell_id),
        ).fetchone()
        if row is None:
            return None
        return Record(cell_id, _loads(row[0], f"cell {cell_id!r}"), _unblob(row[1], f"cell {cell_id!r}"))

    def records(self, experiment: str, method: str, *, arrays: bool = True) -> Iterator[Record]:
        """Every cell of an experiment, in id order."""
        rows = self._db.execute(
            f"SELECT cell_id, data, {'arrays' if arrays else 'NULL'} FROM cells "
            "WHERE experiment = ? AND method = ? ORDER BY cell_id",
            (experiment, method),
        )
        for cell_id, data, blob in rows:
            yield Record(cell_id, _loads(data, f"cell {cell_id!r}"), _unblob(blob, f"cell {cell_id!r}"))

    def experiments(self, method: str | None = None) -> list[dict]:
        """The experiments in the store, oldest first (optionally of one method)."""
        sql = "SELECT experiment, method, name, config, provenance, created FROM experiments"
        args: tuple = ()
        if method is not None:
            sql += " WHERE method = ?"
            args = (method,)
        out = []
        for h, m, n, c, p, t in self._db.execute(sql + " ORDER BY created, rowid", args):
            out.append({"config_hash": h, "experiment": h, "method": m, "name": n,
                        "config": _loads(c, f"experiment {h}'s configuration"),
                        "provenance": _loads(p, f"experiment {h}'s provenance"),
                        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))})
        return out

    def count(self, experiment: str, method: str = "deepfault") -> int:
        return self._db.execute(
            "SELECT COUNT(*) FROM cells WHERE experiment = ? AND method = ?", (experiment, method)
        ).fetchone()[0]


def choose_experiment(store: ResultStore, config_hash: str | None) -> dict:
    """The experiment whose hash starts with ``config_hash`` (``None``: the most recent).

    Raises:
        DeepFaultError: The store holds none, or not exactly one such experiment (the
            message lists the available ones).
    """
    experiments = store.experiments()
    if not experiments:
        raise DeepFaultError(
            f"the results store {str(store.path)!r} holds no experiment; run 'deepfault experiment' first"
        )
    if config_hash is None:
        return experiments[-1]
    matches = [e for e in experiments if e["config_hash"].startswith(str(config_hash))]
    if len(matches) == 1 and config_hash:
        return matches[0]
    known = ", ".join(f"{e['config_hash']} ({e['name']}, {e['created']})" for e in experiments)
    what = "matches several experiments" if len(matches) > 1 else "is not in the store"
    raise DeepFaultError(f"config_hash {config_hash!r} {what}; available: {known}")
