"""Exercise 02: attention-output error and KL divergence against bits per value.

Reads the JSON that exercise_02_kv_quant_quality_report writes and draws one
line per family (K per token, K per channel, stage 05's int8 and fp8 rows, bf16):

    python3 plot_quant_quality.py quant_quality.json quant_quality.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt

MARKERS = {
    "K per token": "o",
    "K per channel (KIVI)": "s",
    "int8 per token (stage 05)": "^",
    "fp8 e4m3 per token (stage 05)": "v",
    "bf16": "D",
}


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    rows = data["formats"]
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [("out_rel_l2", "attention output: relative L2 error"), ("kl_mean", "KL(P || P_quant), nats, mean per query")]
    for ax, (key, title) in zip(axes, panels):
        for fam in families:
            pts = sorted((r["bits_per_value"], r[key], r["name"]) for r in rows if r["family"] == fam and r[key] > 0)
            if not pts:
                continue
            xs, ys, names = zip(*pts)
            ax.plot(xs, ys, marker=MARKERS.get(fam, "x"), label=fam, markersize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([2.5, 3.5, 4.5, 8.5, 16])
        ax.set_xticklabels(["2.5", "3.5", "4.5", "8.5", "16"])
        ax.set_xlabel("bits per cached value (codes + scales)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    w = data["workload"]
    fig.suptitle(
        f"KV-cache formats on keys with outlier channels: {w['num_kv_heads']} heads x {w['num_queries']} queries x "
        f"{w['num_keys']} keys, head_dim {w['head_dim']}, per-channel groups of {w['group_tokens']} tokens",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_quant_quality.py quant_quality.json out.png")
    main(sys.argv[1], sys.argv[2])
