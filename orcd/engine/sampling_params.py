"""Per-request sampling parameters. Nothing about sampling is fixed in code."""

from __future__ import annotations

from dataclasses import dataclass, field

from orcd.errors import RequestError

MAX_LOGPROBS = 20  # most top logprobs one token may return (OpenAI's top_logprobs bound)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0  # 0 -> greedy
    top_k: int = 0  # 0 -> off
    top_p: float = 1.0  # 1 -> off
    min_p: float = 0.0  # 0 -> off
    repetition_penalty: float = 1.0  # 1 -> off (llama.cpp/HF style: divide positive logits)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # same seed + same inputs -> same tokens, alone or batched
    stop: tuple[str, ...] = ()  # stop strings; the matched string is not returned
    stop_token_ids: tuple[int, ...] = ()  # extra stop ids besides the tokenizer's EOS/EOT
    ignore_eos: bool = False
    # Log-probabilities to return with each token: None = none; k >= 0 = the sampled token's and the k most
    # likely (log-softmax of the logits the sampler used, after penalties, before temperature/filters)
    logprobs: int | None = None
    # llguidance grammar the output must match (orcd.structured: response_format, forced tool calls);
    # None: free. Logprobs stay the model's (before the grammar's mask).
    grammar: str | None = field(default=None, repr=False)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> SamplingParams:
        """Raise RequestError naming the field when a value is out of range."""
        checks = [
            ("max_tokens", self.max_tokens >= 1),
            ("temperature", 0.0 <= self.temperature <= 100.0),
            ("top_k", self.top_k >= 0),
            ("top_p", 0.0 < self.top_p <= 1.0),
            ("min_p", 0.0 <= self.min_p <= 1.0),
            ("repetition_penalty", 0.0 < self.repetition_penalty <= 10.0),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0),
            ("seed", self.seed is None or 0 <= self.seed < 2**63),
            ("stop", len(self.stop) <= 16 and all(0 < len(s) <= 256 for s in self.stop)),
            ("logprobs", self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS),
        ]
        if self.grammar is not None and self.ignore_eos:
            raise RequestError("ignore_eos cannot be combined with a grammar (response_format or a forced "
                               "tool call): the grammar ends with EOS", param="ignore_eos")
        for name, ok in checks:
            if not ok:
                raise RequestError(f"{name}={getattr(self, name)!r} is out of range", param=name)
        return self
