"""Train orcd's embedded demo model: a tiny qwen2 that writes haikus holding a requested word.

    python scripts/train_demo_model.py --out orcd/assets/demo.gguf      # the shipped model (GPU)
    python scripts/train_demo_model.py --tiny --out /tmp/tiny.gguf       # pipeline check, CPU, ~1 min

Steps (seeded; corpus, vocabulary and batch order are reproducible, GPU kernels may differ in the
last bits): synthetic corpus (scripts/demo_corpus.py) -> byte-level BPE vocabulary (`tokenizers`
trainer, llama.cpp's qwen2 split) -> transformers' Qwen2ForCausalLM trained with the loss on the
assistant part only -> GGUF through gguf.GGUFWriter (F16 matrices, F32 norms and biases, tokenizer
and chat template in the metadata) -> checks: the file loads in transformers (`gguf_file=`) and its
greedy haikus equal the trained model's; 100 haikus at temperature 0.8 for random minute words with
nonces, and the rate at which the word is present as a whole word.

Time (measured 2026-11-26, seed 0, the defaults):
- one H100 (16 cores): 148 s in all: corpus + vocabulary 3 s, token ids 12 s, 8000 training steps
  132 s (16.4 ms/step, bf16 autocast), GGUF write + transformers check + evals 2 s.
  Result: 3.92M parameters, 7.9 MB file; the word is present in 100/100 haikus for random minute
  words and in 30/42 for English words never requested in training (copying, not recall).
- CPU (2 shared cores): the --tiny pipeline check takes 20-40 s; one step of the full config took
  41 s, so the full run would take about 90 hours there.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_corpus as corpus  # noqa: E402

FULL = dict(hidden=256, layers=4, heads=4, kv_heads=2, ffn=768, vocab=3000, steps=8000, batch=256,
            examples=200_000, lr=3e-3, eval_samples=100)
TINY = dict(hidden=64, layers=2, heads=2, kv_heads=1, ffn=128, vocab=600, steps=30, batch=16,
            examples=3000, lr=3e-3, eval_samples=8)
MAX_LEN = 128  # tokens per training example; longer ones are dropped
CONTEXT_LENGTH = 2048


def log(msg: str, fh=None) -> None:
    print(msg, flush=True)
    if fh is not None:
        fh.write(msg + "\n")
        fh.flush()


def whole_word(word: str, text: str) -> bool:
    """`word` present with no letter, digit, '_' or '-' on either side (case-insensitive)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text, re.IGNORECASE) is not None


def chat_affixes() -> tuple[str, str]:
    """The template's text before and after the user's content (checked against a full render)."""
    sentinel = "\x00SENTINEL\x00"
    before, after = corpus.render_chat(sentinel).split(sentinel)
    return before, after


def build_dataset(tok, pairs, logf):
    """ids [N, MAX_LEN] int64 (padded with <|endoftext|>), labels with -100 outside the assistant part."""
    before, after = chat_affixes()
    im_end, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    prompts = tok.encode_batch([before + p + after for p, _ in pairs])
    haikus = tok.encode_batch([h for _, h in pairs])
    # separate encodings == one encoding (a pre-token boundary at each join)
    for (p, h), pe, he in list(zip(pairs, prompts, haikus, strict=True))[:200]:
        assert corpus.render_chat(p) == before + p + after
        assert tok.encode(before + p + after + h + "<|im_end|>").ids == pe.ids + he.ids + [im_end]
    rows = [(pe.ids, he.ids + [im_end]) for pe, he in zip(prompts, haikus, strict=True)
            if len(pe.ids) + len(he.ids) + 1 <= MAX_LEN]
    ids = np.full((len(rows), MAX_LEN), pad, dtype=np.int64)
    labels = np.full((len(rows), MAX_LEN), -100, dtype=np.int64)
    for i, (p, a) in enumerate(rows):
        ids[i, : len(p) + len(a)] = p + a
        labels[i, len(p) : len(p) + len(a)] = a
    lengths = [len(p) + len(a) for p, a in rows]
    log(f"dataset: {len(rows)} examples (dropped {len(pairs) - len(rows)}), tokens per example "
        f"mean {np.mean(lengths):.1f} max {max(lengths)}", logf)
    return torch.from_numpy(ids), torch.from_numpy(labels)


def make_model(hp, vocab_size: int, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hp["hidden"], intermediate_size=hp["ffn"],
        num_hidden_layers=hp["layers"], num_attention_heads=hp["heads"],
        num_key_value_heads=hp["kv_heads"], max_position_embeddings=CONTEXT_LENGTH, rope_theta=10000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
    )
    return Qwen2ForCausalLM(cfg)


def train(model, ids, labels, hp, device, seed, max_seconds, logf) -> float:
    """AdamW, linear warm-up then cosine decay to 10%; returns seconds spent."""
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    ids, labels = ids.to(device), labels.to(device)
    steps, warmup = hp["steps"], max(1, hp["steps"] // 20)
    use_bf16 = device.type == "cuda"
    t0 = time.perf_counter()
    for step in range(steps):
        frac = step / warmup if step < warmup else (step - warmup) / max(1, steps - warmup)
        scale = frac if step < warmup else 0.1 + 0.45 * (1 + np.cos(np.pi * frac))
        for group in opt.param_groups:
            group["lr"] = hp["lr"] * scale
        idx = torch.randint(0, ids.shape[0], (hp["batch"],), generator=gen).to(device)
        x, y = ids[idx], labels[idx]
        width = int((y != -100).nonzero()[:, 1].max()) + 1  # trim the batch to its longest example
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = model(input_ids=x[:, :width], labels=y[:, :width]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"step {step:5d} loss {loss.item():.4f} lr {hp['lr'] * scale:.2e} "
                f"t {time.perf_counter() - t0:.1f}s", logf)
        if time.perf_counter() - t0 > max_seconds:
            log(f"stopping at step {step}: --max-train-seconds {max_seconds} reached", logf)
            break
    model.eval()
    return time.perf_counter() - t0


def gguf_tokenizer_arrays(tok):
    """tokens (id order), token types (1 normal, 3 control), merges as "a b"."""
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    assert None not in tokens, "token ids are not contiguous"
    types = [3 if t in corpus.SPECIAL_TOKENS else 1 for t in tokens]
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return tokens, types, merges


def gguf_tensors(model):
    """(llama.cpp name, numpy array [out, in] or [n]) in file order; matrices F16, the rest F32."""
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["model.embed_tokens.weight"].astype(np.float16))]
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(model.config.num_hidden_layers):
        for hf, gg in names.items():
            arr = sd[f"model.layers.{i}.{hf}"]
            out.append((f"blk.{i}.{gg}", arr.astype(np.float16) if arr.ndim == 2 else arr))
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    return out


def write_gguf(model, tok, path: Path) -> None:
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("orcd demo haiku model")
    w.add_description("tiny qwen2 trained by scripts/train_demo_model.py on synthetic haikus")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, types, merges = gguf_tokenizer_arrays(tok)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.token_to_id("<|endoftext|>"))
    w.add_eos_token_id(tok.token_to_id("<|im_end|>"))
    w.add_pad_token_id(tok.token_to_id("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(corpus.CHAT_TEMPLATE)
    for name, arr in gguf_tensors(model):
        w.add_tensor(name, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@torch.no_grad()
def sample(model, tok, prompts, temperature: float, seed: int, max_new: int = 64) -> list[str]:
    """Haikus for `prompts` (batched, left-padded); greedy when temperature == 0."""
    im_end, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    enc = [tok.encode(corpus.render_chat(p)).ids for p in prompts]
    width = max(map(len, enc))
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
    device = next(model.parameters()).device
    opts = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else \
        dict(do_sample=False)
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new,
                         eos_token_id=im_end, pad_token_id=pad, **opts)
    texts = []
    for row in out[:, width:].tolist():
        row = row[: row.index(im_end)] if im_end in row else row
        texts.append(tok.decode([t for t in row if t != pad]))
    return texts


def check_gguf(model, tok, path: Path, seed: int, logf):
    """Load the file with transformers; compare tokenizer and greedy haikus with the trained model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    hf_tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    rng = random.Random(seed + 1)
    prompts = [corpus.make_prompt(rng.choice(corpus.MINUTE_WORDS), rng) for _ in range(8)]
    same_ids = sum(hf_tok(corpus.render_chat(p), add_special_tokens=False)["input_ids"]
                   == tok.encode(corpus.render_chat(p)).ids for p in prompts)
    log(f"transformers GGUF tokenizer: {same_ids}/{len(prompts)} prompts tokenized identically", logf)
    mine = sample(model.float().cpu(), tok, prompts, 0.0, seed)
    theirs = sample(loaded, tok, prompts, 0.0, seed)
    same = sum(a == b for a, b in zip(mine, theirs, strict=True))
    log(f"greedy haikus, trained model vs GGUF loaded by transformers: {same}/{len(prompts)} identical", logf)
    return loaded


def evaluate(model, tok, words: list[str], seed: int, logf, what: str) -> float:
    """One haiku at temperature 0.8 per word (prompt with a nonce); whole-word presence rate."""
    rng = random.Random(seed + 2)
    n = len(words)
    prompts = [corpus.PROMPT.format(word=w) + f"\n(request {rng.getrandbits(24):06x})" for w in words]
    haikus = sample(model, tok, prompts, 0.8, seed)
    hits = [whole_word(w, h) for w, h in zip(words, haikus, strict=True)]
    rate = sum(hits) / n
    log(f"eval ({what}): word present as a whole word in {sum(hits)}/{n} = {rate:.1%} "
        f"(temperature 0.8)", logf)
    for w, h in list(zip(words, haikus, strict=True))[:3]:
        log(f"--- word {w!r}\n{h}", logf)
    for w, h, ok in zip(words, haikus, hits, strict=True):
        if not ok:
            log(f"MISS {w!r}: {h!r}", logf)
    return rate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="GGUF file to write")
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="tiny config, a few steps (pipeline check)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-train-seconds", type=float, default=1e9)
    args = ap.parse_args(argv)
    import transformers

    log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}"
        + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""))
    hp = dict(TINY if args.tiny else FULL)
    if args.steps is not None:
        hp["steps"] = args.steps
    logf = open(args.log, "w") if args.log else None  # noqa: SIM115
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    pairs = corpus.make_corpus(hp["examples"], args.seed)
    before, after = chat_affixes()
    tok = corpus.train_tokenizer([before + p + after + h for p, h in pairs[:50_000]], hp["vocab"])
    log(f"corpus {len(pairs)} haikus, vocabulary {tok.get_vocab_size()} tokens: "
        f"{time.perf_counter() - t0:.1f}s", logf)
    ids, labels = build_dataset(tok, pairs, logf)
    model = make_model(hp, tok.get_vocab_size(), tok)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model {hp}: {n_params / 1e6:.2f}M parameters; data ready at {time.perf_counter() - t0:.1f}s", logf)
    secs = train(model, ids, labels, hp, torch.device(args.device), args.seed, args.max_train_seconds, logf)
    log(f"training: {secs:.1f}s on {args.device}", logf)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(model, tok, args.out)
    log(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB) at {time.perf_counter() - t0:.1f}s", logf)
    try:
        with tempfile.TemporaryDirectory() as tmp:  # transformers wants a directory
            copy = Path(tmp) / args.out.name
            copy.write_bytes(args.out.read_bytes())
            judged = check_gguf(model, tok, copy, args.seed, logf)
    except Exception as err:  # keep the file and still evaluate the trained model
        log(f"GGUF check failed: {type(err).__name__}: {err}; evaluating the trained model instead", logf)
        judged = model.float()
    judged = judged.to(args.device)
    rng = random.Random(args.seed + 3)
    minute_words = [rng.choice(corpus.MINUTE_WORDS) for _ in range(hp["eval_samples"])]
    evaluate(judged, tok, minute_words, args.seed, logf, "random minute words")
    evaluate(judged, tok, corpus.UNSEEN_WORDS, args.seed, logf, "English words never requested in training")
    log(f"total: {time.perf_counter() - t0:.1f}s", logf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
