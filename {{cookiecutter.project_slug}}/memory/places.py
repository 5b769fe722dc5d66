"""Where memory keeps its local files: the data folder.

The SQLite memory file (the embedded default), a hosted backend's outbox, the
PostgreSQL store's spool (spool.py), and any other file memory writes on the worker
machine go in one folder, outside the source
tree and the image: ``data/`` in the project's root (the nearest folder above this
package that holds a ``pyproject.toml``: for agent-starter-python's layout,
``src/memory/`` -> ``data/`` beside ``src/``), or the folder ``MEMORY_DATA_DIR``
names. Git-ignore and docker-ignore it (``data/``); in a container, mount a volume
there (the generated Dockerfile sets ``MEMORY_DATA_DIR=/data``).

Which store a project uses when ``MEMORY_URL`` is unset is the project's own
setting: ``url`` in its pyproject.toml's ``[tool.livekit-memory]`` table (a project
generated for PostgreSQL or a hosted service has it), else the embedded default.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tomllib
from pathlib import Path

from .errors import InvalidStoreUrlError

logger = logging.getLogger("memory")

DATA_DIR_SETTING = "MEMORY_DATA_DIR"
DEFAULT_FILE = "memory.db"
PROJECT_TABLE = "livekit-memory"
"""The project's settings: ``[tool.livekit-memory]`` in its pyproject.toml."""
EARLIER_FILES = ("memory.db", "memory-outbox.db")
"""Where the memory file and a hosted backend's outbox were kept before the data
folder: in the project's root, beside agent.py."""


def project_dir() -> Path:
    """The project's root: the nearest folder above this package holding a
    ``pyproject.toml``, else the folder this package sits in (so never the working
    directory). Relative paths in a ``sqlite:///`` URL or an outbox setting are
    relative to it."""
    here = Path(__file__).resolve().parent
    for folder in here.parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    return here.parent


def data_dir() -> Path:
    """The data folder: ``MEMORY_DATA_DIR`` (absolute, or relative to
    ``project_dir()``), else ``project_dir()/data``. Not created here; a store
    creates it when it first writes."""
    setting = os.getenv(DATA_DIR_SETTING, "").strip()
    if setting:
        return project_dir() / Path(setting).expanduser()
    return project_dir() / "data"


def default_url() -> str:
    """The store used when ``MEMORY_URL`` is unset or empty: the project's
    ``[tool.livekit-memory] url``, else SQLite, ``memory.db`` in the data folder (an
    absolute path, so four slashes). Raises ``InvalidStoreUrlError`` naming the file
    when the project's pyproject.toml cannot be read or its ``url`` is not a string."""
    project = project_dir() / "pyproject.toml"
    if project.is_file():
        try:
            tool = tomllib.loads(project.read_text(encoding="utf-8")).get("tool", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidStoreUrlError(f"{project} cannot be read: {exc}") from None
        url = tool.get(PROJECT_TABLE, {}).get("url", "")
        if not isinstance(url, str):
            raise InvalidStoreUrlError(
                f"{project}: [tool.{PROJECT_TABLE}] url is not a string"
            )
        if url.strip():
            return url.strip()
    path = data_dir() / DEFAULT_FILE
    warn_of_earlier_file(path)
    return f"sqlite:///{path.as_posix()}"


def warn_of_earlier_file(path: Path) -> None:
    """Say (WARNING, once a process) if ``path`` (a default file in the data folder)
    is not there but a file of that name is in the project's root, where it was kept
    before the data folder: memory would start empty, and an outbox's undelivered
    writes would wait there for ever."""
    earlier = project_dir() / path.name
    if path.name not in EARLIER_FILES or path.exists() or not earlier.is_file():
        return
    if earlier in _warned:
        return
    _warned.add(earlier)
    logger.warning(
        "memory: %s is where memory was kept before the data folder; memory now opens "
        "%s: stop the workers and move %s (with its -wal and -shm files) there, or "
        "set MEMORY_URL to the old file",
        earlier,
        path,
        earlier.name,
    )


_warned: set[Path] = set()


def spool_in_data_dir(*identity: str) -> Path:
    """The spool file (spool.py) in the data folder of the store ``identity`` names
    (e.g. its server, database, schema and tenant): ``memory-spool-<12 hex digits of
    SHA-256 over identity>.db``, so one store's spool is never another's."""
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:12]
    return data_dir() / f"memory-spool-{digest}.db"


def local_path(path: str) -> Path:
    """A path from a setting: absolute as it is, relative to ``project_dir()``."""
    given = Path(path).expanduser()
    return given if given.is_absolute() else project_dir() / given
