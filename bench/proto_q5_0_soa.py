"""Layout experiment (not used by orcd): Q5_0 GEMV over a per-row repack of the blocks.

GGUF stores a Q5_0 row as 22-byte blocks (d f16 | qh u32 | qs 16 B), so the GEMV kernels read it in
2-byte units. Repacked per row as [all qs | all qh | all d] (same size; rows of K = 896 stay 8-byte
aligned) a kernel can read the quants as int32. This times such a kernel (sweeping G, BO, warps; no PDL)
against orcd's own kernels (with PDL) for attn 896x896, gate+up 2x4864x896 and attn_k 128x896, N = 1,
each launch from a CUDA graph over weight copies beyond the L2, and checks both against the torch
dequantize reference. Usage (GPU): python bench/proto_q5_0_soa.py OUT_DIR -> OUT_DIR/soa_proto.json.
Result on an H100 (bench/results/proto_q5_0_soa.json): gate+up 9.1 -> 8.1 us, the small ones slower.
"""

import itertools
import json
import os
import sys

import torch
import triton
import triton.language as tl

from orcd.quant.dequant import dequantize
from orcd.quant.kernels.fused_linear import fused_glu, gemv_plan, launch_gemv

QT = 6  # Q5_0


@triton.jit
def _w(p16, p32, row32, nb, blk, j, m):
    q = tl.load(p32 + row32 + blk * 4 + j, mask=m, other=0)  # bytes 4j..4j+3 of the block's qs
    qh = tl.load(p32 + row32 + nb * 4 + blk, mask=m, other=0)
    d = tl.load(p16 + (row32 + nb * 5) * 2 + blk, mask=m, other=0).to(tl.float16, bitcast=True).to(tl.float32)
    return q, qh, d


@triton.jit
def _dot(q, qh, d, j, xs_lo, xs_hi):
    acc = tl.zeros(q.shape, tl.float32)
    for t in tl.static_range(4):
        e = 4 * j + t
        lo = ((q >> (8 * t)) & 0xF) | (((qh >> e) & 1) << 4)
        hi = ((q >> (8 * t + 4)) & 0xF) | (((qh >> (e + 16)) & 1) << 4)
        acc += (lo - 16).to(tl.float32) * xs_lo[t] + (hi - 16).to(tl.float32) * xs_hi[t]
    return d * acc


@triton.jit
def soa_gemv(
    x_ptr,
    p16,
    p32,
    y_ptr,
    OUT,
    K,
    row_words,
    G: tl.constexpr,
    BO: tl.constexpr,
    q16=None,
    q32=None,
    GLU: tl.constexpr = False,
):
    rows = tl.program_id(0) * BO + tl.arange(0, BO)
    rmask = (rows < OUT)[:, None, None]
    row32 = rows.to(tl.int64)[:, None, None] * row_words
    nb = K // 32
    g = tl.arange(0, G)[None, :, None]
    j = tl.arange(0, 4)[None, None, :]
    acc = tl.zeros([BO, G, 4], tl.float32)
    acc2 = tl.zeros([BO, G, 4], tl.float32)
    for b0 in range(0, nb, G):
        blk = b0 + g
        km = blk < nb
        m = rmask & km
        q, qh, d = _w(p16, p32, row32, nb, blk, j, m)
        if GLU:
            q2, qh2, d2 = _w(q16, q32, row32, nb, blk, j, m)
        kx = blk * 32 + 4 * j
        x0 = tl.load(x_ptr + kx, mask=km, other=0.0).to(tl.float32)
        x1 = tl.load(x_ptr + kx + 1, mask=km, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + kx + 2, mask=km, other=0.0).to(tl.float32)
        x3 = tl.load(x_ptr + kx + 3, mask=km, other=0.0).to(tl.float32)
        h0 = tl.load(x_ptr + kx + 16, mask=km, other=0.0).to(tl.float32)
        h1 = tl.load(x_ptr + kx + 17, mask=km, other=0.0).to(tl.float32)
        h2 = tl.load(x_ptr + kx + 18, mask=km, other=0.0).to(tl.float32)
        h3 = tl.load(x_ptr + kx + 19, mask=km, other=0.0).to(tl.float32)
        acc += _dot(q, qh, d, j, (x0, x1, x2, x3), (h0, h1, h2, h3))
        if GLU:
            acc2 += _dot(q2, qh2, d2, j, (x0, x1, x2, x3), (h0, h1, h2, h3))
    a = tl.sum(tl.sum(acc, axis=2), axis=1)
    if GLU:
        b = tl.sum(tl.sum(acc2, axis=2), axis=1)
        a = a / (1.0 + tl.exp(-a)) * b
    tl.store(y_ptr + rows, a.to(y_ptr.dtype.element_ty), mask=rows < OUT)


def repack(raw: torch.Tensor) -> torch.Tensor:
    rows, rb = raw.shape
    nb = rb // 22
    b = raw.view(rows, nb, 22)
    return torch.cat(
        [b[:, :, 6:].reshape(rows, -1), b[:, :, 2:6].reshape(rows, -1), b[:, :, :2].reshape(rows, -1)], dim=1
    ).contiguous()


def random_q5_0(rows, k, dev):
    raw = torch.randint(0, 256, (rows, k // 32, 22), dtype=torch.uint8, device=dev)
    d = (torch.rand(rows, k // 32, device=dev) * 0.01 + 0.001).half().view(torch.uint8).view(rows, k // 32, 2)
    raw[:, :, :2] = d
    return raw.view(rows, -1)


def graph_time(fn, copies):
    """µs per call of fn(i) over the copies, from a CUDA graph, median of 15 replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(copies):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(copies):
            fn(i)
    g.replay()
    ts = []
    for _ in range(15):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / copies)
    return sorted(ts)[len(ts) // 2]


def current_kernel(x, ws, us, y, out, k, glu):
    """orcd's own kernel on copy i, as the decoder launches it."""
    if glu:
        return lambda i: fused_glu(x, ws[i], us[i], out, k, QT)
    g, bo, warps, splits = gemv_plan(QT, out, k)
    return lambda i: launch_gemv(x, ws[i], y, QT, out, k, g, bo, warps, splits)


def soa_kernel(x, soa_w, soa_u, ys, out, k, G, BO, warps):
    """The repacked-layout kernel on copy i."""

    def run(i):
        w = soa_w[i]
        extra = {}
        if soa_u is not None:
            u = soa_u[i]
            extra = dict(q16=u.view(-1).view(torch.int16), q32=u.view(-1).view(torch.int32), GLU=True)
        soa_gemv[(triton.cdiv(out, BO),)](x, w.view(-1).view(torch.int16), w.view(-1).view(torch.int32), ys,
                                          out, k, w.shape[1] // 4, G=G, BO=BO, num_warps=warps, **extra)
    return run


def bench_shape(name, out, k, glu, x, dev):
    nbytes = out * k // 32 * 22 * (2 if glu else 1)
    copies = max(4, int(200e6 // nbytes))
    ws = [random_q5_0(out, k, dev) for _ in range(copies)]
    us = [random_q5_0(out, k, dev) for _ in range(copies)] if glu else None
    soa_w = [repack(w) for w in ws]
    soa_u = [repack(u) for u in us] if glu else None
    ref = x.float() @ dequantize(ws[0], QT, (out, k)).float().t()
    if glu:
        up = x.float() @ dequantize(us[0], QT, (out, k)).float().t()
        ref = ref * torch.sigmoid(ref) * up
    y = torch.empty(1, out, device=dev, dtype=torch.bfloat16)
    cur = current_kernel(x, ws, us, y, out, k, glu)
    t_cur = graph_time(cur, copies)
    ycur = (cur(0) if glu else (cur(0), y)[1]).float()
    res = {"current_us": round(t_cur, 2), "current_err": ((ycur - ref).norm() / ref.norm()).item(),
           "bytes": nbytes}
    best = None
    for G, BO, warps in itertools.product((2, 4, 8), (1, 2, 4, 8), (1, 2, 4)):
        ys = torch.empty(1, out, device=dev, dtype=torch.bfloat16)
        run = soa_kernel(x, soa_w, soa_u, ys, out, k, G, BO, warps)
        try:
            run(0)
            err = ((ys.float() - ref).norm() / ref.norm()).item()
            t = graph_time(run, copies)
        except Exception as e:  # noqa: BLE001
            print(name, G, BO, warps, "failed", str(e)[:200])
            continue
        if best is None or t < best[0]:
            best = (t, G, BO, warps, err)
    res.update(soa_best_us=round(best[0], 2), soa_G_BO_warps=best[1:4], soa_err=best[4],
               speedup=round(t_cur / best[0], 3))
    return res


def main():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(1, 896, device=dev, dtype=torch.bfloat16)
    res = {}
    for name, out, k, glu in [("attn_896x896", 896, 896, False), ("gate_up_2x4864x896", 4864, 896, True),
                              ("k_128x896", 128, 896, False)]:
        res[name] = bench_shape(name, out, k, glu, x, dev)
        print(name, res[name], flush=True)
    os.makedirs(sys.argv[1], exist_ok=True)
    with open(os.path.join(sys.argv[1], "soa_proto.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
