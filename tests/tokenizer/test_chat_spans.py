"""ChatTemplate.render_spans renders once when the template only prints, compares or trims contents,
and gives exactly what rendering twice (plain, then marked, compared) gives: on all 70 real templates
of llama.cpp's collection and on templates that do everything else with a content or with text made
from one."""

from __future__ import annotations

import pytest
from tokenizer_testdata import Vocabs

from orcd.tokenizer.chat import ChatTemplate
from orcd.tokenizer.chat_spans import Probe, spans, wrap_message

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi  "},
     {"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "Bye, naïve 🦙"}],
]
REWRITING = [  # each does something with a content other than print / compare / trim it
    "{{ messages[0]['content'][1:] }}", "{{ messages[0]['content']|upper }}",
    "{% for c in messages[0].content %}{{ c }}{% endfor %}", "{{ messages[0].content.find('i') }}",
    "{{ messages[0]['content']|tojson(ensure_ascii=True) }}", "{{ '%5s' % messages[0].content }}",
    "{{ '{:>6}'.format(messages[0].content) }}", "{{ 'xHiy'.find(messages[0].content) }}",
    "{{ messages[0].content|replace('', '-') }}", "{{ messages[0].content|int }}",
    "{{ messages|tojson(ensure_ascii=True) }}", "{{ messages[0].content < 'H' }}",
    "{{ messages[0].content|list|join('.') }}", "{{ messages[0].content.split('i')|join }}",
    "{% set c = '' + messages[0].content %}{% if c == 'Hi' %}Y{% endif %}{% if c %}Z{% endif %}",
    "{% set c = messages[0].content ~ '' %}{{ c|trim }}{{ c|length }}{{ 'i' in c }}",
    "{% set x %}{{ messages[0].content }}{% endset %}{{ x|trim }}",
    "{% macro r(c) %}{{ c }}{% endmacro %}{% if r(messages[0].content) %}{{ r(messages[0].content) }}"
    "{% endif %}",
    "{% filter trim %}{{ messages[0].content }}{% endfilter %}",
    "{{ ('[' + messages[0].content + ']').replace('[', '') }}",
    "{{ messages|map(attribute='content')|join('|') }}",
]
PRINTING = [  # only print, compare, measure or trim: one render
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% endfor %}",
    "{% for m in messages %}{{ '[' + m['content'].strip() + ']' if m.content else '' }}{% endfor %}",
    "{% for m in messages %}{{ m.content ~ (m.content|length) }}{% if m.content == 'Hi' %}!{% endif %}"
    "{% endfor %}",
    "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content + '<|end|>' }}{% if 'i' in m.content %}i"
    "{% endif %}{% endfor %}",
]


def two_renders(tpl: ChatTemplate, messages: list, gen: bool = True):
    """What render_spans gave before it could render once: the plain render, and the marked one's spans
    when its text matches."""
    text = tpl.render(messages, gen)
    found = spans(tpl.render([wrap_message(m, Probe()) for m in messages], gen))
    return (text, None) if found is None or found[0] != text else (text, found[1])


def renders(tpl: ChatTemplate) -> int:
    """Renders one render_spans call makes (counted on the template's compiled generator)."""
    calls = [0]
    inner = tpl._template.generate

    def counting(*args, **kwargs):
        calls[0] += 1
        return inner(*args, **kwargs)
    tpl._template.generate = counting
    return calls


@pytest.mark.parametrize("source", REWRITING + PRINTING)
def test_same_as_two_renders(source: str) -> None:
    tpl = ChatTemplate(source, "<s>", "</s>")
    for messages in CONVERSATIONS:
        want = two_renders(tpl, messages)
        calls = renders(tpl)
        assert tpl.render_spans(messages) == want
        assert calls[0] == (1 if source in PRINTING else 2)
        del tpl._template.generate


def test_real_templates_same_as_two_renders(vocabs: Vocabs) -> None:
    once = total = 0
    for path in vocabs.templates():
        tpl = ChatTemplate(path.read_text(encoding="utf-8"), "<s>", "</s>")
        for messages in CONVERSATIONS:
            for gen in (True, False):
                try:
                    want = two_renders(tpl, messages, gen)
                except Exception:
                    continue  # the template refuses this conversation
                calls = renders(tpl)
                assert tpl.render_spans(messages, gen) == want, path.name
                total += 1
                once += calls[0] == 1
                del tpl._template.generate
    print(f"{once} of {total} renders of real templates took one render")
    assert total >= 200 and once >= total // 3  # 114 of 274 when written
