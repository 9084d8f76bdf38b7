#!/usr/bin/env python3
"""Benchmark JSON -> the markdown results table shown in the README.

For the headline cases it prints each backend's median time, K/V GB/s, fraction
of the floor (K/V bytes over the read-probe bandwidth measured in the same run)
a plain streaming read of the same bytes timed the same way (plain_read_fraction:
the floor plus launch and ramp-up, which no kernel escapes) and, for prefill,
TFLOP/s; PyTorch's reference points (bench/torch_reference.py)
are printed beside ours when given.

    python3 plots/summarize.py --bench bench.json [--torch torch.json]
"""
import argparse
import json

HEADLINE = [
    ("decode", "batch:1/ctx:4096"),
    ("decode", "batch:64/ctx:4096"),
    ("long", "batch:1/ctx:32768"),
    ("long", "batch:4/ctx:32768"),
    ("window", "batch:4/ctx:32768/window:4096"),
    ("window", "batch:64/ctx:32768/window:4096"),
    ("mixed", "chunks:2/decodes:30"),
    ("prefill", "batch:1/len:4096"),
    ("prefill", "batch:1/len:16384"),
]


def entries(path):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for b in doc.get("benchmarks", []):
        name = b["name"].split("/iterations:")[0]
        parts = name.split("/")
        if len(parts) < 3:
            continue
        out[(parts[0], parts[1], "/".join(parts[2:]))] = b
    return doc.get("context", {}), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--torch")
    args = ap.parse_args()
    ctx, ours = entries(args.bench)
    theirs = entries(args.torch)[1] if args.torch else {}
    read_gbps = float(ctx.get("read_bandwidth_GBps", 0) or 0)
    print(f"Measured on {ctx.get('device', '?')}, {ctx.get('date', '?')[:10]}; "
          f"read-probe bandwidth {read_gbps:.0f} GB/s (the floor); L2 flush: {ctx.get('l2_flush', 'memset')}.\n")
    print("| case | backend | ms | K/V GB/s | fraction of floor | of a plain read | TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for family, label in HEADLINE:
        rows = [(k[1], v) for k, v in {**ours, **theirs}.items() if k[0] == family and k[2] == label]
        for backend, b in sorted(rows):
            if b.get("error_occurred"):
                msg = b.get("error_message", "")
                if msg.startswith("not run") or msg.startswith("unsupported"):
                    continue
                print(f"| {family} {label} | {backend} | error | | | | |")
                continue
            frac = b["GBps"] / read_gbps if read_gbps else 0
            tf = f"{b['TFLOPs']:.0f}" if "TFLOPs" in b else ""
            gb = f"{b['GBps']:.0f}" if family != "prefill" else ""
            fr = f"{frac:.2f}" if family != "prefill" else ""
            plain = f"{b['plain_read_fraction']:.2f}" if family != "prefill" and "plain_read_fraction" in b else ""
            print(f"| {family} {label} | {backend} | {b['ms_median']:.3f} | {gb} | {fr} | {plain} | {tf} |")


if __name__ == "__main__":
    main()
