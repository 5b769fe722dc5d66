"""A PostgreSQL server for the generated projects' tests, when none answers.

A project generated with memory_backend=postgres tests against the server that
MEMORY_TEST_POSTGRES_URL names (default: postgresql://postgres@127.0.0.1:5432/test).
This project's machines and CI already run one there. On a fresh machine, `running()`
starts a throwaway one for the test session: Debian's `postgresql` package (installed
with apt-get when missing; that needs root), a new cluster in a temporary folder run
as the postgres user, trust authentication, listening on 127.0.0.1 only. It is
stopped and deleted afterwards. Nothing is started for a server on another host.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def test_server_url() -> str:
    return os.environ.get("MEMORY_TEST_POSTGRES_URL") or DEFAULT_URL


def answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@contextlib.contextmanager
def running(url: str) -> Iterator[str | None]:
    """Make sure a server answers at ``url`` while the block runs. Yields None when one
    does, or why none could be had (one line)."""
    if answers(url):
        yield None
        return
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        yield f"no PostgreSQL server answers at {parts.hostname}:{parts.port or 5432}"
        return
    try:
        bindir = _binaries()
    except (OSError, subprocess.SubprocessError) as exc:
        yield f"no PostgreSQL server at {url}, and it could not be installed: {exc}"
        return
    folder = Path(tempfile.mkdtemp(prefix="kit-postgres-"))
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(folder, "postgres")
    user, port = parts.username or "postgres", parts.port or 5432
    pg_ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(folder / "data"), "-w"]
    try:
        subprocess.run(
            [
                *as_postgres,
                str(bindir / "initdb"),
                "-D",
                str(folder / "data"),
                "-U",
                user,
                "-A",
                "trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {folder}"
        subprocess.run(
            [*pg_ctl, "-l", str(folder / "log"), "-o", options, "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except subprocess.SubprocessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        yield f"no PostgreSQL server at {url}, and a throwaway one did not start: {exc}"
        return
    try:
        dbname = parts.path.lstrip("/") or user
        with psycopg.connect(url.replace(parts.path, "/postgres", 1), autocommit=True) as conn:
            if dbname != "postgres":
                conn.execute(f'CREATE DATABASE "{dbname}"')
        yield None
    finally:
        subprocess.run(
            [*pg_ctl, "-m", "fast", "stop"], capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)


def _binaries() -> Path:
    """The newest installed server's bin folder, installing Debian's package first if
    none is installed."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not found:
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # Debian's package would also make and start its own cluster on port 5432,
        # where ours must go; postgresql-common reads this before it is installed.
        conf = Path("/etc/postgresql-common/createcluster.conf")
        if not conf.exists():
            subprocess.run([*sudo, "mkdir", "-p", str(conf.parent)], check=True, timeout=30)
            subprocess.run(
                [*sudo, "tee", str(conf)],
                input=b"create_main_cluster = false\n",
                check=True,
                capture_output=True,
                timeout=30,
            )
        subprocess.run(
            [*sudo, "apt-get", "update", "-q"],
            check=True,
            capture_output=True,
            env=env,
            timeout=600,
        )
        subprocess.run(
            [
                *sudo,
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "-o",
                "Dpkg::Options::=--force-confdef",
                "-o",
                "Dpkg::Options::=--force-confold",
                "postgresql",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=900,
        )
        found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not found:
        raise OSError("the postgresql package installed no initdb")
    return Path(max(found, key=lambda p: int(Path(p).parts[-3]))).parent
