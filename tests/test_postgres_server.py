"""The throwaway PostgreSQL server that README command 2 starts on a machine without one."""

from __future__ import annotations

import socket

import psycopg
from postgres_server import answers, running


def test_a_throwaway_server_starts_where_none_answers_and_is_gone_afterwards():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://postgres@127.0.0.1:{port}/kit_check"
    assert not answers(url)
    with running(url) as missing:
        assert missing is None
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("kit_check",)
    assert not answers(url)


def test_nothing_is_started_for_a_server_on_another_host():
    with running("postgresql://postgres@db.invalid:5432/test") as missing:
        assert missing == "no PostgreSQL server answers at db.invalid:5432"
