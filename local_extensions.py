"""Jinja extension the template loads (cookiecutter.json `_extensions`).

It tells the hooks where this repository is, so post_gen_project.py can copy the
chosen recipe from recipes/ into the generated project. (`_repo_dir` is relative
when someone runs `cookiecutter .`, and hooks run inside the generated folder.)
"""

from pathlib import Path

from jinja2.ext import Extension

KIT_DIR = Path(__file__).resolve().parent


class KitExtension(Extension):
    def __init__(self, environment):
        super().__init__(environment)
        environment.globals["kit_dir"] = str(KIT_DIR)
