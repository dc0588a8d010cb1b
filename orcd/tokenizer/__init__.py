"""Tokenizer from GGUF metadata, token for token equal to llama.cpp; streaming detokenizer; chat templates.

    tok = load_tokenizer(open_gguf(path).metadata)
    ids = tok.encode("Hello")                 # no BOS, special-token text stays text (llama.cpp default)
    ids = tok.encode_chat(messages)           # template rendered in a sandbox, BOS once
    det = tok.detokenizer(); text = "".join(det.push(i) for i in ids) + det.flush()
"""

from orcd.tokenizer.chat import DEFAULT_TEMPLATE
from orcd.tokenizer.detokenizer import StreamingDetokenizer
from orcd.tokenizer.tokenizer import GGUFTokenizer, load_tokenizer

__all__ = ["DEFAULT_TEMPLATE", "GGUFTokenizer", "StreamingDetokenizer", "load_tokenizer"]
