"""The llama.cpp test data for tokenizer tests: the session fixture `vocabs`, the parametrization of
`vocab_name` / `vocab_case` (at collection, from the fetched data; one skipped case when it is missing),
and a summary line with the number of llama.cpp cases that ran. Helpers live in tokenizer_testdata.py."""

from __future__ import annotations

import pytest
from tokenizer_testdata import Vocabs, fetched

CASES_TEST = "test_vocab_cases.py::test_encode_matches_llama_cpp["
_ran: dict[str, int] = {}


@pytest.fixture(scope="session")
def vocabs() -> Vocabs:
    data, why = fetched()
    if data is None:
        pytest.skip(why)
    return Vocabs(data)


def _params(argname: str, v: Vocabs) -> list:
    if argname == "vocab_name":
        return [pytest.param(name, id=name) for name in v.names]
    return [pytest.param((name, i), id=f"{name}-{i}") for name in v.names for i in range(len(v.cases(name)))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argname in ("vocab_name", "vocab_case"):
        if argname in metafunc.fixturenames:
            data, why = fetched()
            params = (_params(argname, Vocabs(data)) if data is not None else
                      [pytest.param(None, id="no-testdata", marks=pytest.mark.skip(reason=why))])
            metafunc.parametrize(argname, params)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if CASES_TEST in report.nodeid and (report.when == "call" or report.skipped):
        key = report.outcome if not hasattr(report, "wasxfail") else "xpassed" if report.passed else "xfailed"
        _ran[key] = _ran.get(key, 0) + 1


def pytest_terminal_summary(terminalreporter) -> None:
    if not _ran:
        return
    data, why = fetched()
    run = sum(n for k, n in _ran.items() if k != "skipped")
    detail = ", ".join(f"{n} {k}" for k, n in sorted(_ran.items()))
    where = (f"{len(data.vocabs())} vocabularies in {data.root} ({len(Vocabs(data).refused)} refused by name)"
             if data else why)
    terminalreporter.write_line(f"llama.cpp tokenizer cases (encode) run: {run} ({detail}); {where}")
