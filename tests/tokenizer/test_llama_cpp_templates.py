"""Every chat template of llama.cpp's collection (real models' templates) renders in orcd's sandbox
exactly as transformers renders it, or both refuse."""

from __future__ import annotations

from tokenizer_testdata import Vocabs

from orcd.tokenizer.chat import ChatTemplate

USER, ASSISTANT = {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}
CONVERSATIONS = [
    [USER],
    [USER, ASSISTANT, {"role": "user", "content": "Bye, naïve 🦙"}],
    [{"role": "system", "content": "Be brief."}, USER, ASSISTANT],
]


def _render(render, messages: list, add_generation_prompt: bool) -> str | None:
    try:
        return render(messages, add_generation_prompt)
    except Exception:
        return None  # refused: compared only as "refused"


def test_templates_render_like_transformers(vocabs: Vocabs) -> None:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    templates = vocabs.templates()
    assert len(templates) == 70
    mismatched, rendered = [], 0
    for path in templates:
        source = path.read_text(encoding="utf-8")
        ours = ChatTemplate(source, "<s>", "</s>")
        ref = _compile_jinja_template(source)

        def theirs(m: list, g: bool, ref=ref) -> str:
            return ref.render(messages=m, add_generation_prompt=g, bos_token="<s>", eos_token="</s>")
        for messages in CONVERSATIONS:
            for gen in (True, False):
                want = _render(theirs, messages, gen)
                got = _render(ours.render, messages, gen)
                rendered += got is not None
                if got != want:
                    mismatched.append(f"{path.name} {len(messages)} messages, generation prompt {gen}")
    assert not mismatched, mismatched
    assert rendered >= 0.9 * len(templates) * len(CONVERSATIONS) * 2
