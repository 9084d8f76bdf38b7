#!/usr/bin/env python3
"""Reference points measured in the same run: PyTorch SDPA on contiguous caches.

Times torch.nn.functional.scaled_dot_product_attention with its cuDNN and
FlashAttention backends on the benchmark's decode, long-context and prefill
cases (Qwen3-8B attention shape: 32 query heads, 8 KV heads, head_dim 128,
bf16; and the prefill cases in GQA group 16 at head_dim 64 and 256), with the same method as bench_attention: CUDA events around the call
alone, L2 emptied before each iteration by reading a buffer twice its size
(as bench/probe.h explains, a read leaves no dirty lines to write back), median. Writes JSON in the shape
of Google Benchmark's output (a "benchmarks" list whose entries carry the same
counters), so plots/plot_bench.py reads both the same way. These backends read
contiguous [batch, heads, seq, dim] tensors, not a paged cache.

    python3 bench/torch_reference.py --out torch.json
"""
import argparse
import json
import statistics
import sys

HQ, HKV, D = 32, 8, 128


def kv_bytes(batch, ctx, hkv=HKV, d=D):
    return batch * ctx * 2 * hkv * d * 2


def time_ms(fn, iters, flush):
    import torch
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # warm-up
    times = []
    for _ in range(iters):
        flush.max()  # a read pass: the L2 ends up holding only clean lines
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer sizes (decode 1/8/64/256, long 1/4/32)")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"torch_reference: PyTorch not available ({e}); nothing measured", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torch_reference: no CUDA device; nothing measured", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    flush = torch.full((2 * props.L2_cache_size,), 0x3C, dtype=torch.uint8, device=dev)
    backends = {"torch_cudnn": SDPBackend.CUDNN_ATTENTION, "torch_flash": SDPBackend.FLASH_ATTENTION}
    sweep = [1, 8, 64, 256] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256]
    longs = [1, 4, 32] if args.quick else [1, 2, 4, 8, 16, 32]
    qwen3 = (HQ, HKV, D, "")
    cases = [("decode", b, 4096, 1, qwen3) for b in sweep] + [("long", b, 32768, 1, qwen3) for b in longs]
    cases += [("prefill", 1, n, n, qwen3) for n in (4096, 16384)]
    # bench_attention's prefill shapes: GQA group 16 at head_dim 64 and 256.
    cases += [("prefill", 1, 4096, 4096, (64, 4, 64, "/model:g16-d64")),
              ("prefill", 1, 4096, 4096, (32, 2, 256, "/model:g16-d256"))]
    results = []
    gen = torch.Generator(device=dev).manual_seed(1)
    for family, batch, ctx, q_len, (hq, hkv, d, tag) in cases:
        q = torch.randn(batch, hq, q_len, d, device=dev, dtype=torch.bfloat16, generator=gen)
        k = torch.randn(batch, hkv, ctx, d, device=dev, dtype=torch.bfloat16, generator=gen)
        v = torch.randn(batch, hkv, ctx, d, device=dev, dtype=torch.bfloat16, generator=gen)
        causal = q_len > 1
        label = (f"batch:{batch}/len:{ctx}" if family == "prefill" else f"batch:{batch}/ctx:{ctx}") + tag
        for name, backend in backends.items():
            entry = {"name": f"{family}/{name}/{label}", "run_type": "iteration", "batch": batch}
            try:
                with sdpa_kernel([backend]):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                    ms = time_ms(fn, 5 if family == "prefill" else 20, flush)
                entry.update(ms_median=ms, kv_bytes=kv_bytes(batch, ctx, hkv, d),
                             GBps=kv_bytes(batch, ctx, hkv, d) / (ms * 1e-3) / 1e9)
                if family == "prefill":
                    entry["TFLOPs"] = 4.0 * d * hq * ctx * (ctx + 1) / 2 / (ms * 1e-3) / 1e12
                print(f"[torch] {entry['name']}: {ms:.3f} ms", file=sys.stderr)
            except Exception as e:  # a backend that refuses a shape is recorded, not fatal
                entry["error_occurred"] = True
                entry["error_message"] = str(e).splitlines()[0][:200]
                print(f"[torch] {entry['name']}: {entry['error_message']}", file=sys.stderr)
            results.append(entry)
        del q, k, v
        torch.cuda.empty_cache()
    context = {"device": props.name, "source": f"torch {torch.__version__}", "library": "PyTorch SDPA"}
    with open(args.out, "w") as f:
        json.dump({"context": context, "benchmarks": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
