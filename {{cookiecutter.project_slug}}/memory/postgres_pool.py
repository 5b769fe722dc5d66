"""How the PostgreSQL store's work reaches the server: one psycopg pool per event
loop, the schema's version checked (and looked at again a while after a mismatch),
one caller's writes applied in order, every read and write within its time bound,
and a change of health logged once per process, not once per call or query.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]
from psycopg_pool import (  # type: ignore[import-not-found, unused-ignore]
    AsyncConnectionPool,
    PoolTimeout,
)

from .errors import SchemaMismatchError, StoreUnavailableError
from .postgres_schema import (
    CONNECT_TIMEOUT,
    SCHEMA_VERSION,
    Target,
    one_row,
    read_version,
)

T = TypeVar("T")
Work = Callable[[psycopg.AsyncConnection], Awaitable[T]]
logger = logging.getLogger("memory.postgres")

POOL_SIZE = 4
"""Connections per worker process, at most. LiveKit runs each call in its own process;
its preload, recalls and background saves need a few. The server needs
max_connections >= processes per machine x machines x POOL_SIZE."""
READ_TIMEOUT = 1.0
"""Seconds a read may take. A reply stops waiting after RECALL_BUDGET; this
bounds the work left behind, so slow queries cannot pile up on the pool."""
SAVE_TIMEOUT = 5.0
"""Seconds one exchange or summary save may take (ExchangeWriter retries)."""
STATEMENT_TIMEOUT = 5.0
"""The server stops any statement of ours after this, even if we are gone."""
COMMIT_MARGIN = 0.1
"""A write bounded by a timeout sends COMMIT only while this much time is left."""
RECHECK_AFTER = 30.0
"""Seconds before a missing or mismatched schema is looked at again."""


class Pool:
    """The server as one store uses it (``PostgresStore`` has one): ``read`` and
    ``write`` run work on a pooled connection of the running event loop. Raises
    ``StoreUnavailableError`` when the server, the pool or the schema cannot be used
    now or a time bound ran out, ``SchemaMismatchError``, and psycopg errors."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._connections: AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schema_ok = False
        self._schema_error: SchemaMismatchError | None = None
        self._recheck_at = 0.0
        self._problem: str | None = None  # what was last logged, so it is logged once
        self._in_use = (
            0  # connections running our work (all busy: the pool is exhausted)
        )
        # One caller's writes apply in the order they were made (a save already under
        # way lands before a forget that follows it), whichever connection each gets.
        self._order: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self.closed = False

    def check_now(self) -> None:
        """Look at the server and the schema once, synchronously (``open_store``, in
        prewarm, has no event loop). A server that is down or a schema that is missing
        or at another version is logged once (finding out takes at most
        ``CONNECT_TIMEOUT`` s), and work is refused until that is fixed. Never raises."""
        try:
            with self.target.connect() as conn:
                self._schema_at(read_version(conn, self.target.schema))
        except psycopg.Error as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self._report(
                f"cannot reach PostgreSQL at {self.target.where}", f" ({reason})"
            )
        except SchemaMismatchError:
            pass  # logged

    async def read(self, work: Work[T]) -> T:
        """``work`` on a pooled connection, within READ_TIMEOUT."""
        return await _bounded(self._run(work, READ_TIMEOUT), READ_TIMEOUT, "a read")

    async def write(
        self,
        caller_id: str,
        statements: list[tuple[str, dict]]
        | Callable[[psycopg.AsyncConnection, dict], Awaitable[Any]],
        what: str,
        timeout: float | None = None,
    ) -> Any:
        """Run ``statements`` ((sql, arguments) pairs) after the caller's earlier writes;
        returns the rows changed. ``statements`` may instead be a coroutine function
        (connection, {"t": tenant, "c": caller id}) whose result is returned, for a
        write that reads first; it needs ``timeout``. With ``timeout``: in one
        transaction, applied within that many seconds or not at all (the server stops
        its statements at the deadline; COMMIT is sent only while time is left).
        Without: each statement on its own, within SAVE_TIMEOUT (a save can be
        repeated, so a lost answer is no harm), in one round trip."""
        loop = asyncio.get_running_loop()
        bound = SAVE_TIMEOUT if timeout is None else timeout
        deadline = loop.time() + bound
        lock = self._order.setdefault(caller_id, asyncio.Lock())
        try:
            async with asyncio.timeout(
                bound
            ):  # a free lock is taken at once, in call order
                await lock.acquire()
        except TimeoutError:
            raise StoreUnavailableError(
                f"{what} waited {bound:g} s for earlier writes"
            ) from None

        async def run(conn: psycopg.AsyncConnection) -> Any:
            scope = {"t": self.target.tenant, "c": caller_id}
            if timeout is None:
                assert not callable(statements)
                return sum(
                    [
                        (await conn.execute(sql, {**scope, **a})).rowcount
                        for sql, a in statements
                    ]
                )
            changed: Any = 0
            async with conn.transaction():
                ms = max(1, int((deadline - loop.time()) * 1000))
                await conn.execute(
                    "SELECT set_config('statement_timeout', %s, true)", [str(ms)]
                )
                if callable(statements):
                    changed = await statements(conn, scope)
                for sql, args in [] if callable(statements) else statements:
                    changed += (await conn.execute(sql, {**scope, **args})).rowcount
                if loop.time() > deadline - COMMIT_MARGIN:
                    raise StoreUnavailableError(
                        f"{what} ran out of time; nothing was written"
                    )
            return changed

        try:
            left = deadline - loop.time()
            return await _bounded(self._run(run, left), left, what)
        finally:
            lock.release()

    async def _run(self, work: Work[T], timeout: float) -> T:
        """``work`` on a pooled connection. A connection that a server restart broke
        fails on its next use: the broken ones are dropped and the work tried once
        more (every statement here can be repeated: reads, upserts, deletes)."""
        if self._schema_error is not None and time.monotonic() < self._recheck_at:
            raise self._schema_error
        pool = await self._pool_for_this_loop()
        for attempt in (1, 2):
            conn = None
            try:
                # Half the time for a connection, so a pool with none to give is
                # told apart from a slow query.
                async with pool.connection(timeout=timeout / 2) as conn:
                    self._in_use += 1
                    try:
                        if not self._schema_ok:
                            await self._check_schema(conn)
                        result = await work(conn)
                    finally:
                        self._in_use -= 1
            except PoolTimeout:
                problem = (
                    f"all {POOL_SIZE} connections to {self.target.where} are busy"
                    if self._in_use >= POOL_SIZE
                    else f"cannot reach PostgreSQL at {self.target.where}"
                )
                self._report(problem)
                raise StoreUnavailableError(problem) from None
            except psycopg.OperationalError:
                if attempt == 2 or conn is None or not conn.broken:
                    raise
                await pool.check()
                continue
            self._report(None)
            return result
        raise AssertionError("unreachable")

    async def _pool_for_this_loop(self) -> AsyncConnectionPool:
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        loop = asyncio.get_running_loop()
        if self._connections is None or self._loop is not loop:
            # A pool belongs to the loop that opened it: the call's, made after prewarm.
            # (A store used from another loop, as in tests, gets a pool of its own.)
            self._loop = loop
            self._connections = AsyncConnectionPool(
                self.target.conninfo,
                min_size=1,
                max_size=POOL_SIZE,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": CONNECT_TIMEOUT,
                    "application_name": "livekit-memory",
                },
                configure=_configure,
                # A failed connection is retried after 1 s, then 2 s; after that the
                # pool gives up and the next query asks again at once, so a server
                # that is back is used within ~2 s however long it was away.
                reconnect_timeout=3.0,
                name=POOL_NAME,
                open=False,
            )
            await self._connections.open(wait=False)
        return self._connections

    async def _check_schema(self, conn: psycopg.AsyncConnection) -> None:
        name = f"{self.target.schema}.schema_version"
        version = 0
        if one_row(
            await (await conn.execute("SELECT to_regclass(%s)", [name])).fetchone()
        )[0]:
            version = one_row(
                await (await conn.execute(f"SELECT version FROM {name}")).fetchone()
            )[0]
        self._schema_at(version)

    def _schema_at(self, version: int) -> None:
        """Take the version found; raises SchemaMismatchError (logged once) unless current."""
        if version == SCHEMA_VERSION:
            self._schema_ok, self._schema_error = True, None
            return
        why = f"memory schema version {version} at {self.target.where}"
        todo = "run `uv run -m memory.postgres_store upgrade` with this MEMORY_URL"
        if version == 0:
            why = f"no memory schema at {self.target.where}"
        elif version < SCHEMA_VERSION:
            why += f", this code needs {SCHEMA_VERSION}"
        else:
            why += f" is newer than this code's {SCHEMA_VERSION}"
            todo = "deploy the newer agent"
        self._schema_error = SchemaMismatchError(f"{why}; {todo}")
        self._recheck_at = time.monotonic() + RECHECK_AFTER
        self._report(why, f": {todo}")
        raise self._schema_error

    def _report(self, problem: str | None, more: str = "") -> None:
        """Log a change of health once per process, not once per call or query."""
        if problem != self._problem:
            if problem is not None:
                logger.error("memory: %s; calls go on without memory%s", problem, more)
            else:
                logger.warning(
                    "memory: PostgreSQL at %s works again", self.target.where
                )
            self._problem = problem

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            if (
                self._connections is not None
                and self._loop is asyncio.get_running_loop()
            ):
                await self._connections.close()


async def _bounded(work: Awaitable[T], timeout: float, what: str) -> T:
    # The work runs as a task of its own and we stop waiting at the bound. Cancelling
    # it makes psycopg cancel the query on the server, which can take a while when the
    # network is gone; the caller does not wait for that.
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except BaseException as exc:
        task.cancel()
        if isinstance(exc, TimeoutError):
            raise StoreUnavailableError(
                f"{what} did not finish within {timeout:.2f} s"
            ) from None
        raise


async def _configure(conn: psycopg.AsyncConnection) -> None:
    ms = int(STATEMENT_TIMEOUT * 1000)
    await conn.execute(f"SET statement_timeout = {ms}")
    await conn.execute(f"SET idle_in_transaction_session_timeout = {2 * ms}")


POOL_NAME = "livekit-memory"


class _OncePerOutage(logging.Filter):
    # psycopg_pool warns at every failed reconnection attempt; the store says once
    # that the server is down and once that it is back.
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or POOL_NAME not in record.getMessage()


logging.getLogger("psycopg.pool").addFilter(_OncePerOutage())
