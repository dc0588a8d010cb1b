"""Structured output: grammars (JSON schema, regex, Lark/GBNF, forced tool calls) enforced while sampling.

The grammar engine is llguidance (bench/structured/ compares it with xgrammar). Flow:
- the server compiles a request's `response_format` / forced `tool_choice` into an llguidance grammar string
  (grammars.py, tool_grammar.py; 400 naming the field when it does not compile) and puts it in
  SamplingParams.grammar;
- the engine builds one GrammarBackend per tokenizer (backend.py: the llguidance tokenizer from orcd's own
  token bytes + EOG ids) and gives each constrained Sequence a matcher;
- the sampler draws constrained rows from their unmasked logits and checks each token against its
  grammar; only rows whose token the grammar rejects (and rows with top-k / top-p / min-p, which need
  the mask first) get an allowed-token bitmask (int32 words, bit j of word w = token 32w + j), uploaded
  once and applied on the logits' device (mask.py), and are drawn again: the full mask's token, exactly
  (guide.py); free rows are not touched;
- Sequence.append_token advances the matcher; when the grammar is complete only EOS is allowed.

Import the modules (orcd.structured.backend, .grammars, ...): this package imports nothing itself, so the
server's request checks (grammars.py: llguidance only) do not load torch.
"""
