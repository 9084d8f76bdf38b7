#!/usr/bin/env python3
"""Achieved bandwidth of the tuned plan and the default plan against the floor, from one tuner run.

Reads the tuner's Google Benchmark JSON (exercise_03_autotune_tuner
--benchmark_out=...): its plan/default and plan/tuned rows, and the read
probe of the same run (context read_bandwidth_GBps), which is the floor's
bandwidth. With --torch, PyTorch SDPA's cuDNN rows of bench/torch_reference.py's
JSON (decode/torch_cudnn/batch:B/ctx:C) join the panel of their context. One
panel per context; each tuned point is labelled with its split count.
--md writes the same numbers as a markdown table.

    python3 exercises/03_autotune/plot_autotune.py --run autotune.json [--torch torch.json] \\
        --out autotune.png [--md autotune.md]
"""
import argparse
import json
import re
import sys

ROW = re.compile(r"^plan/(default|tuned)/batch:(\d+)/ctx:(\d+)/group:(\d+)(?:/(?:iterations|repeats|threads|min_time|"
                 r"min_warmup_time):[^/]*|/manual_time|/real_time|/process_time)*$")
TORCH = re.compile(r"^(?:decode|long)/torch_cudnn/batch:(\d+)/ctx:(\d+)$")


def ok(b):
    return not b.get("error_occurred") and b.get("run_type", "iteration") == "iteration"


def read_plans(path):
    with open(path) as f:
        doc = json.load(f)
    plans = {}  # (ctx, group) -> {"default"|"tuned": {batch: row}}
    for b in doc.get("benchmarks", []):
        m = ROW.match(b.get("name", ""))
        if m and ok(b):
            kind, batch, ctx, group = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
            plans.setdefault((ctx, group), {}).setdefault(kind, {})[batch] = b
    return doc.get("context", {}), plans


def read_torch(path):
    with open(path) as f:
        doc = json.load(f)
    out = {}  # ctx -> {batch: GBps}
    for b in doc.get("benchmarks", []):
        m = TORCH.match(b.get("name", ""))
        if m and ok(b) and "GBps" in b:
            out.setdefault(int(m.group(2)), {})[int(m.group(1))] = b["GBps"]
    return out


def markdown(plans):
    lines = ["| batch x context | default: splits, GB/s, floor | tuned: splits, GB/s, floor | tuned / default |",
             "|---|---|---|---|"]
    for (ctx, group), kinds in sorted(plans.items()):
        for batch in sorted(kinds.get("default", {})):
            d, t = kinds["default"][batch], kinds.get("tuned", {}).get(batch)
            cell = lambda r: f"{int(r['num_splits'])}, {r['GBps']:.0f}, {r['floor_fraction']:.2f}"
            speed = f"{d['ms_median'] / t['ms_median']:.2f}x" if t else "-"
            lines.append(f"| {batch} x {ctx} | {cell(d)} | {cell(t) if t else '-'} | {speed} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="the tuner's Google Benchmark JSON")
    ap.add_argument("--torch", help="bench/torch_reference.py's JSON (optional)")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--md", help="markdown table to write (optional)")
    args = ap.parse_args()
    context, plans = read_plans(args.run)
    if not plans:
        print(f"plot_autotune: {args.run} has no plan/default or plan/tuned rows", file=sys.stderr)
        return 1
    torch = read_torch(args.torch) if args.torch else {}
    floor = float(context.get("read_bandwidth_GBps", 0) or 0)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(plans)
    fig, axes = plt.subplots(1, len(keys), figsize=(6.2 * len(keys), 4.6), squeeze=False)
    for ax, key in zip(axes[0], keys):
        ctx, group = key
        kinds = plans[key]
        for kind, style in (("default", dict(marker="o", color="tab:gray", label="default plan (stage 04's rule)")),
                            ("tuned", dict(marker="s", color="tab:blue", label="tuned plan"))):
            rows = kinds.get(kind, {})
            xs = sorted(rows)
            ax.plot(xs, [rows[x]["GBps"] for x in xs], **style)
            if kind == "tuned":
                for x in xs:
                    ax.annotate(f"x{int(rows[x]['num_splits'])}", (x, rows[x]["GBps"]), textcoords="offset points",
                                xytext=(0, 6), ha="center", fontsize=7, color="tab:blue")
        if ctx in torch:
            xs = sorted(torch[ctx])
            ax.plot(xs, [torch[ctx][x] for x in xs], marker="^", color="tab:green", label="PyTorch SDPA cuDNN")
        if floor > 0:
            ax.axhline(floor, linestyle="--", color="black", linewidth=1,
                       label=f"floor: read probe {floor:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("decode batch (requests)")
        ax.set_ylabel("K/V bytes read once / step time (GB/s)")
        ax.set_title(f"context {ctx}, group {group}")
        top = max([floor] + [r["GBps"] for k in kinds.values() for r in k.values()] + list(torch.get(ctx, {}).values()))
        ax.set_ylim(0, 1.12 * top)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    device = context.get("device", "?")
    flavor = context.get("flavor", "?")
    fig.suptitle(f"Autotuned decode plan, Qwen3-8B layer (32 q / 8 kv heads, D 128, bf16), "
                 f"{device} ({flavor}), {context.get('date', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    table = markdown(plans)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
