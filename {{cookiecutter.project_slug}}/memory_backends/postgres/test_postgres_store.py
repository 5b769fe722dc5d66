"""What only the PostgreSQL backend does. The store contract (tests/test_store_contract.py)
covers what every backend does."""

from __future__ import annotations

import postgres_store


def test_a_query_of_only_function_words_searches_nothing():
    assert postgres_store.tsquery("what did you ... do?") is None
