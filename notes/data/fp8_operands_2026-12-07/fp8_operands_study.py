"""Would FP8 tensor-core operands (issue #30's optional FP8 path) meet the tolerance table?

A numerical emulation, not a kernel: the values each path feeds its products are
rounded as the hardware would round them, the sums are fp32 (np.float32), and
the result is compared with the oracle the tests use for 8-bit caches (fp64
attention over the dequantized cache, exact bf16 queries), under the bf16 row of
common/compare.cpp (|got - want| <= 2^-8 + 2^-7 |want|).

Paths:
  bf16_operands  today's fp8 cache path: codes dequantized to bf16 operands,
                 Q bf16, P bf16, fp32 accumulation, out rounded to bf16
  fp8_qk         S = Q K^T on FP8 operands: Q quantized per 128-row tile to e4m3
                 (FlashAttention-3's per-tile scale), K's e4m3 codes as they are,
                 their scales applied to S in fp32; P V as bf16_operands
  fp8_qk_pv      also O += P V on FP8 operands: V's codes as they are, each key's
                 V scale folded into P's column, P scaled per tile into e4m3

Inputs as make_problem draws them: q, k, v ~ N(0, 1) rounded to bf16; K/V rows
quantized per (token, head) with scale = amax / 448. Qwen3-8B's head: GQA group
4, head_dim 128. Run: python3 fp8_operands_study.py
"""
import numpy as np

E4M3_MAX = 448.0


def round_bf16(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return b.astype(np.uint32).view(np.float32)


def round_e4m3(x):
    """Round to the nearest e4m3 value (even on ties), saturating at +-448."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    # exponent of each value, clamped to the normal range's bottom (2^-6): below
    # it the spacing is the subnormals' 2^-9
    e = np.floor(np.log2(np.maximum(a, 2.0**-6)))
    step = 2.0 ** (e - 3)  # 3 mantissa bits
    r = np.round(a / step) * step  # np.round: half to even
    return (np.sign(x) * np.minimum(r, E4M3_MAX)).astype(np.float64)


def quantize_rows(x):
    """Per-row e4m3 codes (as their values) and scales: scale = amax / 448."""
    scale = np.abs(x).max(axis=-1, keepdims=True) / E4M3_MAX
    scale = np.where(scale == 0, 1.0, scale)
    return round_e4m3(x / scale), scale


def attention(path, q, k_code, k_scale, v_code, v_scale, causal_pos, scale):
    """q [rows, D] bf16 values; codes/scales of n keys; causal_pos[row]: its last visible key."""
    rows, n = q.shape[0], k_code.shape[0]
    mask = np.arange(n)[None, :] > causal_pos[:, None]
    if path == "oracle":
        kd, vd = k_code * k_scale, v_code * v_scale
        s = (q.astype(np.float64) @ kd.T) * scale
        s[mask] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        return (p @ vd) / p.sum(axis=1, keepdims=True)
    if path == "bf16_operands" or path == "fp8_qk":
        vd = round_bf16(v_code * v_scale).astype(np.float32)
    if path == "bf16_operands":
        kd = round_bf16(k_code * k_scale).astype(np.float32)
        s = (q.astype(np.float32) @ kd.T) * np.float32(scale)
    else:
        # Q per 128-row tile (one tile here: the rows of one KV head's group)
        q_scale = np.float32(np.abs(q).max() / E4M3_MAX)
        q_code = round_e4m3(q / q_scale).astype(np.float32)
        s = (q_code @ k_code.T.astype(np.float32)) * (q_scale * k_scale.T.astype(np.float32)) * np.float32(scale)
    s = s.astype(np.float32)
    s[mask] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True)).astype(np.float32)
    l = p.sum(axis=1, keepdims=True, dtype=np.float32)
    if path == "fp8_qk_pv":
        # column j of P carries key j's V scale; the tile's largest value maps to 448
        pv = p * v_scale.T.astype(np.float32)
        p_scale = np.float32(max(pv.max(), 1e-30) / E4M3_MAX)
        p_code = round_e4m3(pv / p_scale).astype(np.float32)
        o = (p_code @ v_code.astype(np.float32)) * p_scale
    else:
        o = round_bf16(p) @ vd
    return round_bf16(o / l)


def case(rng, group, head_dim, n_keys, n_queries):
    """One KV head: n_keys cached keys, the last n_queries of them this step's queries (causal)."""
    rows = group * n_queries
    q = round_bf16(rng.standard_normal((rows, head_dim), dtype=np.float32))
    k = round_bf16(rng.standard_normal((n_keys, head_dim), dtype=np.float32))
    v = round_bf16(rng.standard_normal((n_keys, head_dim), dtype=np.float32))
    k_code, k_scale = quantize_rows(k.astype(np.float64))
    v_code, v_scale = quantize_rows(v.astype(np.float64))
    token = np.repeat(np.arange(n_queries), group)  # rows: (token, head in group)
    causal_pos = n_keys - n_queries + token
    return q, k_code, k_scale, v_code, v_scale, causal_pos


def main():
    rng = np.random.default_rng(7)
    group, head_dim = 4, 128
    scale = 1.0 / np.sqrt(head_dim)
    shapes = [("decode, 16 keys", 16, 1, 64), ("decode, 128 keys", 128, 1, 64), ("decode, 1024 keys", 1024, 1, 32),
              ("decode, 4096 keys", 4096, 1, 8), ("prefill, 256 tokens", 256, 256, 1),
              ("chunk of 128 after 896", 1024, 128, 2)]
    paths = ["bf16_operands", "fp8_qk", "fp8_qk_pv"]
    print("| case | path | elements | over tolerance | max abs error | rms error | max error / tolerance |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for label, n_keys, n_queries, reps in shapes:
        acc = {path: [0, 0, 0.0, 0.0, 0.0] for path in paths}
        for _ in range(reps):
            inputs = case(rng, group, head_dim, n_keys, n_queries)
            want = attention("oracle", *inputs, scale)
            tol = 2.0**-8 + 2.0**-7 * np.abs(want)
            for path in paths:
                err = np.abs(attention(path, *inputs, scale).astype(np.float64) - want)
                a = acc[path]
                a[0] += err.size
                a[1] += int((err > tol).sum())
                a[2] = max(a[2], float(err.max()))
                a[3] += float((err**2).sum())
                a[4] = max(a[4], float((err / tol).max()))
        for path in paths:
            n, bad, mx, sq, ratio = acc[path]
            print(f"| {label} | {path} | {n} | {bad} ({100.0 * bad / n:.2f}%) | {mx:.2e} | {np.sqrt(sq / n):.2e} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
