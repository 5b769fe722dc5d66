"""Where memory keeps its local files: the data folder.

The SQLite memory file (the embedded default), a hosted backend's outbox, and any
other file memory writes on the worker machine go in one folder, outside the source
tree and the image: ``data/`` in the project's root (the nearest folder above this
package that holds a ``pyproject.toml``: for agent-starter-python's layout,
``src/memory/`` -> ``data/`` beside ``src/``), or the folder ``MEMORY_DATA_DIR``
names. Git-ignore and docker-ignore it (``data/``); in a container, mount a volume
there (the generated Dockerfile sets ``MEMORY_DATA_DIR=/data``).
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_SETTING = "MEMORY_DATA_DIR"
DEFAULT_FILE = "memory.db"


def project_dir() -> Path:
    """The project's root: the nearest folder above this package holding a
    ``pyproject.toml``, else the working directory. Relative paths in a
    ``sqlite:///`` URL or an outbox setting are relative to it."""
    here = Path(__file__).resolve().parent
    for folder in here.parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    return Path.cwd()


def data_dir() -> Path:
    """The data folder: ``MEMORY_DATA_DIR`` (absolute, or relative to
    ``project_dir()``), else ``project_dir()/data``. Not created here; a store
    creates it when it first writes."""
    setting = os.getenv(DATA_DIR_SETTING, "").strip()
    if setting:
        return project_dir() / Path(setting).expanduser()
    return project_dir() / "data"


def default_url() -> str:
    """The store used when ``MEMORY_URL`` is unset or empty: SQLite, ``memory.db`` in
    the data folder (an absolute path, so four slashes)."""
    return f"sqlite:///{(data_dir() / DEFAULT_FILE).as_posix()}"


def local_path(path: str) -> Path:
    """A path from a setting: absolute as it is, relative to ``project_dir()``."""
    given = Path(path).expanduser()
    return given if given.is_absolute() else project_dir() / given
