#!/usr/bin/env python3
"""Benchmark JSON -> PNG plots.

Reads bench_attention's Google Benchmark JSON (and, optionally, the JSON of
bench/torch_reference.py measured in the same run) and draws:
  decode_sweep.png   K/V GB/s against batch size at 4096 tokens, one line per backend,
                     with the probe's read bandwidth as the floor line and, dotted, what a
                     plain streaming read of the same (bf16) bytes reaches with the same method
  long_context.png   the same for 32768-token contexts
  prefill.png        causal prefill TFLOP/s per backend and case (one prompt of 4096 or 16384
                     tokens; at 4096 also the group-16 shapes and 256-token blocks)
  quantized.png      decode step time at 4096 tokens: the bf16 kernel (stage 04) against the
                     8-bit caches (stage 05 backends), with each one's fraction of its own floor
  sinks.png          stage 08 at 4096 tokens: the time of learned sinks over split-KV
                     (08_attention_sinks / 04_split_kv, target <= 1.02) against batch size, and the
                     step times of 04_split_kv, 08_attention_sinks and 08_sinks_window (window 128 +
                     4 sink tokens, which reads 132 positions per request whatever the context)
  decode_vs_cudnn.png  with --torch: PyTorch's cuDNN SDPA time over each engine backend's and
                     stage 04's, at 4096- and 32768-token contexts, against batch size (above 1:
                     faster than cuDNN; issue #31's target is 1 at every size)
  batches.png        the mixed batch (2 chunks + 30 decodes) and the skewed one (1 x 32768 +
                     63 x 512) by backend: step time, and each one's fraction of its floor
                     (08_sinks_window and the windowed backends read fewer bytes: their own floor)
The bandwidth plots leave out 08_sinks_window: its bytes are a window's, not the context's.
Titles carry the device and the date of the run.

    python3 plots/plot_bench.py --bench bench.json [--torch torch.json] --out plots/
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def rows(doc):
    out = []
    for b in doc.get("benchmarks", []):
        if b.get("error_occurred") or b.get("run_type", "iteration") != "iteration":
            continue
        parts = b["name"].split("/")
        if len(parts) < 3:
            continue
        fields = dict(p.split(":", 1) for p in parts[2:] if ":" in p)
        out.append({"family": parts[0], "backend": parts[1], "fields": fields, **b})
    return out


# Backends whose bytes on the sweeps are a short window's, not the context's.
NOT_ON_SWEEPS = {"08_sinks_window"}
SINKS_MAX_TIME_RATIO = 1.02


def plot_bandwidth(data, family, read_gbps, title, path, xlabel):
    fig, ax = plt.subplots(figsize=(8, 5))
    backends = sorted({r["backend"] for r in data if r["family"] == family} - NOT_ON_SWEEPS)
    if not backends:
        plt.close(fig)
        return False
    for name in backends:
        pts = sorted((int(r["fields"]["batch"]), r["GBps"]) for r in data if r["family"] == family and r["backend"] == name)
        style = "--" if name.startswith("torch") else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=name)
    if read_gbps:
        ax.axhline(read_gbps, color="black", linewidth=1, label=f"floor: read probe {read_gbps:.0f} GB/s")
    # A plain read of each case's bytes (bench_attention's plain_read_fraction):
    # the floor plus the launch and ramp-up that no kernel escapes at that size.
    ref = next((n for n in ["04_split_kv", "03_gqa_packing"] if n in backends), None)
    plain = sorted((int(r["fields"]["batch"]), r["GBps"] / r["plain_read_fraction"]) for r in data
                   if r["family"] == family and r["backend"] == ref and r.get("plain_read_fraction", 0) > 0)
    if plain:
        ax.plot([p[0] for p in plain], [p[1] for p in plain], ":", color="black",
                label=f"plain read of the same bytes ({ref}'s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("K/V bytes / time (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def prefill_case(r):
    """A prefill row's case: its length and what else its label names (shape, block size, contiguous)."""
    extra = [part.replace(":", " ") for part in r["name"].split("/")[2:]
             if not part.startswith(("batch:", "len:", "iterations:", "manual_time", "repeats:"))]
    return int(r["fields"]["len"]), " ".join(extra)


def plot_prefill(data, title, path):
    pts = [r for r in data if r["family"] == "prefill" and "TFLOPs" in r]
    if not pts:
        return False
    cases = sorted({prefill_case(r) for r in pts}, key=lambda c: (c[1] != "", c))
    backends = sorted({r["backend"] for r in pts})
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(cases)), 5))
    width = 0.8 / max(len(backends), 1)
    for i, name in enumerate(backends):
        ys = []
        for case in cases:
            m = [r["TFLOPs"] for r in pts if r["backend"] == name and prefill_case(r) == case]
            ys.append(m[0] if m else 0)
        ax.bar([j + i * width for j in range(len(cases))], ys, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
    ax.set_xticklabels([f"1 x {n}" + (f"\n{extra}" if extra else "") for n, extra in cases], fontsize=8)
    ax.set_ylabel("causal TFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_quantized(data, read_gbps, title, path):
    names = sorted({r["backend"] for r in data if r["family"] == "decode" and r["backend"].startswith("05_")})
    if not names:
        return False
    # Stage 05 dispatches decode batches like stage 04 (split when few programs),
    # so the bf16 baseline is stage 04.
    names = ["04_split_kv"] + names
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(12, 5))
    for name in names:
        pts = sorted((int(r["fields"]["batch"]), r["ms_median"], r["GBps"]) for r in data
                     if r["family"] == "decode" and r["backend"] == name)
        if not pts:
            continue
        ax_t.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        if read_gbps:
            ax_f.plot([p[0] for p in pts], [p[2] / read_gbps for p in pts], marker="o", label=name)
    for ax in (ax_t, ax_f):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (requests)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("time per decode step (ms)")
    ax_f.set_ylabel("fraction of its own floor")
    ax_f.set_ylim(0, 1.05)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_sinks(data, title, path):
    def times(name):
        return {int(r["fields"]["batch"]): r["ms_median"] for r in data
                if r["family"] == "decode" and r["backend"] == name}

    base, sinks, window = times("04_split_kv"), times("08_attention_sinks"), times("08_sinks_window")
    batches = sorted(set(base) & set(sinks))
    if not batches:
        return False
    fig, (ax_r, ax_t) = plt.subplots(1, 2, figsize=(12, 5))
    ax_r.plot(batches, [sinks[b] / base[b] for b in batches], marker="o", label="08_attention_sinks / 04_split_kv")
    ax_r.axhline(SINKS_MAX_TIME_RATIO, color="black", linewidth=1, linestyle="--",
                 label=f"target <= {SINKS_MAX_TIME_RATIO}")
    ax_r.axhline(1.0, color="gray", linewidth=0.8)
    ax_r.set_ylabel("time ratio")
    for name, pts in [("04_split_kv", base), ("08_attention_sinks", sinks), ("08_sinks_window", window)]:
        if pts:
            xs = sorted(pts)
            ax_t.plot(xs, [pts[x] for x in xs], marker="o", label=name)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("time per decode step (ms)")
    for ax in (ax_r, ax_t):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (requests)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# The backends decode_vs_cudnn.png compares with PyTorch's cuDNN SDPA: the engine's
# bf16 paths and the split-KV stage they grew from.
AGAINST_CUDNN = ("engine", "engine_work_list", "04_split_kv")


def plot_against_cudnn(data, title, path):
    def times(family, backend):
        return {int(r["fields"]["batch"]): r["ms_median"] for r in data
                if r["family"] == family and r["backend"] == backend and r.get("ms_median", 0) > 0}
    panels = [(f, times(f, "torch_cudnn")) for f in ("decode", "long")]
    panels = [(f, ref) for f, ref in panels if ref]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    drawn = False
    for ax, (family, ref) in zip(axes[0], panels):
        for name in AGAINST_CUDNN:
            ours = times(family, name)
            pts = sorted((b, ref[b] / ours[b]) for b in ours if b in ref)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
                drawn = True
        ax.axhline(1.0, color="black", linewidth=1, label="cuDNN's time (target: at or above)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (requests)")
        ax.set_ylabel("cuDNN SDPA time / backend time")
        ax.set_title(("4096" if family == "decode" else "32768") + "-token contexts", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn


def plot_batches(data, title, path):
    panels = []
    for family, label in (("mixed", "mixed: 2 prefill chunks + 30 decodes"),
                          ("skewed", "skewed: 1 x 32768 + 63 x 512 decodes")):
        pts = sorted(((r["ms_median"], r["backend"], r.get("floor_fraction", 0)) for r in data
                      if r["family"] == family and r.get("ms_median", 0) > 0), reverse=True)
        if pts:
            panels.append((label, pts))
    if not panels:
        return False
    height = max(len(pts) for _, pts in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 1.5 + 0.3 * height), squeeze=False)
    for ax, (label, pts) in zip(axes[0], panels):
        ys = range(len(pts))
        ax.barh(ys, [p[0] for p in pts], color=["tab:orange" if p[1].startswith("vendor") else "tab:blue" for p in pts])
        ax.set_yticks(list(ys))
        ax.set_yticklabels([p[1] for p in pts], fontsize=8)
        for y, (ms, _, fraction) in zip(ys, pts):
            ax.text(ms, y, f" {ms:.3g} ms, {fraction:.2f} of floor", va="center", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("step time (ms, log scale)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_xlim(right=max(p[0] for p in pts) * 8)  # room for the labels
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="bench_attention --benchmark_out JSON")
    ap.add_argument("--torch", help="bench/torch_reference.py JSON (optional)")
    ap.add_argument("--out", required=True, help="folder for the PNGs")
    args = ap.parse_args()
    doc = load(args.bench)
    ctx = doc.get("context", {})
    data = rows(doc)
    if args.torch and os.path.exists(args.torch):
        data += rows(load(args.torch))
    read_gbps = float(ctx.get("read_bandwidth_GBps", 0) or 0)
    stamp = f"{ctx.get('device', '?')}, {ctx.get('date', '?')[:10]}"
    os.makedirs(args.out, exist_ok=True)
    made = []
    if plot_bandwidth(data, "decode", read_gbps, f"Decode, 4096-token contexts ({stamp})",
                      os.path.join(args.out, "decode_sweep.png"), "batch size (requests)"):
        made.append("decode_sweep.png")
    if plot_bandwidth(data, "long", read_gbps, f"Decode, 32768-token contexts ({stamp})",
                      os.path.join(args.out, "long_context.png"), "batch size (requests)"):
        made.append("long_context.png")
    if plot_prefill(data, f"Causal prefill ({stamp})", os.path.join(args.out, "prefill.png")):
        made.append("prefill.png")
    if plot_quantized(data, read_gbps, f"Decode at 4096 tokens: bf16 vs 8-bit KV caches ({stamp})",
                      os.path.join(args.out, "quantized.png")):
        made.append("quantized.png")
    if plot_sinks(data, f"Decode at 4096 tokens: attention sinks ({stamp})", os.path.join(args.out, "sinks.png")):
        made.append("sinks.png")
    if plot_against_cudnn(data, f"Decode against PyTorch's cuDNN SDPA ({stamp})",
                          os.path.join(args.out, "decode_vs_cudnn.png")):
        made.append("decode_vs_cudnn.png")
    if plot_batches(data, f"Mixed and skewed batches by backend ({stamp})", os.path.join(args.out, "batches.png")):
        made.append("batches.png")
    if not made:
        print("plot_bench: no plottable benchmarks in the input", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
