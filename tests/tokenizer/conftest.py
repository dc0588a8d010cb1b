"""Fixtures for tokenizer tests; data helpers live in tokenizer_testdata.py."""

from __future__ import annotations

import pytest
from tokenizer_testdata import VOCABS


@pytest.fixture(params=VOCABS)
def vocab_name(request: pytest.FixtureRequest) -> str:
    return request.param
