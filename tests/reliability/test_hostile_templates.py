"""Hostile chat templates (issue 8 item 3), through a real model file and a real `orcd serve`.

The GGUF's tokenizer.chat_template picks an attack by the user message: reach Python internals, loop
(nested ranges), or build a huge string / list in one C-level call, which neither a wall-clock tracer
nor an output check can stop (it holds the GIL while it allocates). Each chat request must get a 400 with
a one-line message naming the template, within a generous client timeout; the server must still serve
/health, raw /v1/generate and a harmless chat afterwards. The same attacks rendered in-process stay
under a memory bound (tracemalloc peak).
"""

from __future__ import annotations

import tracemalloc

import httpx
import pytest
from live_server import LiveServer, tiny_model

from orcd.errors import TemplateError
from orcd.tokenizer.chat import ChatTemplate

BIG = "{% set s = 'a' * 1000000 %}"
ATTACKS = {
    "mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ raise_exception.__globals__ }}",
    "cycler": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "attr": "{{ ''|attr('__class__') }}",
    "format_attr": "{{ '{0.__class__}'.format('') }}",
    "range": "{% for i in range(10**9) %}{% for j in range(10**9) %}{% endfor %}{% endfor %}",
    "loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "mul": "{{ 'a' * 10**9 }}",
    "pow": "{{ 10 ** (10 ** 7) }}",
    "percent_pad": "{{ '%0999999999d' % 1 }}",
    "format_filter_pad": "{{ '%.999999999f'|format(1.0) }}",
    "brace_pad": "{{ '{:>999999999}'.format(1) }}",
    "center": "{{ 'a'|center(10**9) }}",
    "batch": "{{ range(10)|batch(10**9, 'x')|list }}",
    "doubling": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                "{% endfor %}{{ ns.s }}",
    "list_of_big": BIG + "{{ [s] * 1000 }}",
    "join_of_big": BIG + "{{ ([s] * 1000)|join }}",
    "string_of_big": BIG + "{{ ([s] * 1000)|string }}",
    "indent": "{{ ('a\n' * 500000)|indent(1000) }}",
}
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _dispatching_template() -> str:
    """One template holding every attack, chosen by the first message's content; else plain ChatML."""
    branches = "".join(f"{{% elif messages[0]['content'] == '{name}' %}}{body}"
                       for name, body in ATTACKS.items())
    return "{% if false %}" + branches + "{% else %}" + CHATML + "{% endif %}"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_fails_in_process_with_bounded_memory(name):
    template = ChatTemplate(ATTACKS[name], "<s>", "</s>")
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as err:
            template.render([{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(err.value) and "chat template" in str(err.value)
    assert peak < 64 * 2**20, f"{name}: {peak / 2**20:.0f} MiB traced"


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    srv = LiveServer(tiny_model(tmp / "hostile-template.gguf", _dispatching_template()), tmp / "serve.log",
                     "--no-warmup")
    try:
        srv.wait_ready()
        yield srv
    finally:
        assert srv.stop() == 0, srv.log()


def test_hostile_chat_requests_get_400_and_the_server_keeps_serving(hostile_server):
    url = hostile_server.url
    with httpx.Client(base_url=url, timeout=30) as c:  # a hang or a minute-long stall fails here
        for name in ATTACKS:
            body = {"model": hostile_server.model_id, "max_tokens": 2,
                    "messages": [{"role": "user", "content": name}]}
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 400, (name, r.status_code, r.text[:300])
            message = r.json()["error"]["message"]
            assert "chat template" in message and "\n" not in message, (name, message)
            # /v1/generate with chat:true goes through the same template
            r = c.post("/v1/generate", json={"prompt": name, "chat": True, "max_tokens": 2, "stream": False})
            assert r.status_code == 400, (name, r.text[:300])
            assert c.get("/health").json()["status"] == "ok"
        raw = c.post("/v1/generate", json={"prompt": "hello", "max_tokens": 4, "ignore_eos": True,
                                           "stream": False})
        assert raw.status_code == 200 and raw.json()["tokens_out"] == 4
        ok = c.post("/v1/chat/completions", json={"model": hostile_server.model_id, "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "hello"}]})
        assert ok.status_code == 200, ok.text
        assert c.get("/health").json()["active_requests"] == 0
    assert "Traceback" not in hostile_server.log()


def test_the_bounds_leave_ordinary_templates_alone():
    """Large numbers as values, a 512 KiB message, tojson and %-formatting of normal size still render."""
    source = ("{{ '%d'|format(2000000) }} {{ x|default(5000000) }} {{ '{:>8}'.format(3000000) }} "
              "{{ messages|tojson(indent=2)|length }} {{ '%-10s|' % 'ab' }}{{ 'ab'|center(6) }}"
              "{% for m in messages %}{{ m['content']|length }}{% endfor %}")
    out = ChatTemplate(source, "<s>", "</s>").render([{"role": "user", "content": "é" * (1 << 19)}])
    assert out.startswith("2000000 5000000  3000000 ") and out.endswith("ab        |  ab  524288")


@pytest.mark.parametrize("source, words", [("{% for x in %}", "does not compile"),
                                           ("a" * (2 << 20), "larger than 1 MiB")], ids=["syntax", "2MiB"])
def test_serve_refuses_a_template_that_cannot_compile(tmp_path, source, words):
    """Checked at load: `orcd serve` exits 1 with one line naming the template, before binding a port."""
    srv = LiveServer(tiny_model(tmp_path / "bad-template.gguf", source), tmp_path / "serve.log")
    assert srv.proc.wait(120) != 0
    errors = [ln for ln in srv.log().splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and "chat template" in errors[0] and words in errors[0], srv.log()
    assert "Traceback" not in srv.log()
    srv.stop()
