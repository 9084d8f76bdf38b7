#!/usr/bin/env python3
"""What the bit-exact build costs: the engine's rows of bench_attention timed in
the default build (twice, before and after, for the run's spread) and in the
bit-exact build (PA_BIT_EXACT), from one run of bench/run_gpu.sh --bit-exact.

  compare_bit_exact.py --default RUN0.json RUN2.json --bit-exact RUN1.json [--out bit_exact.json]

Prints a markdown table (case, default ms, bit-exact ms, cost, the default
runs' spread) and a summary line per family; --out writes the same as JSON.
"""
import argparse
import json
import re


def rows(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        # decode/engine/batch:64/ctx:4096/iterations:20/manual_time -> decode engine batch:64 ctx:4096
        parts = [p for p in b["name"].split("/") if not re.match(r"(iterations|manual_time|repeats)", p)]
        key = " ".join(parts)
        ms = b.get("ms_median", b["real_time"])
        if ms > 0:  # (a case the build could not run reports 0)
            out[key] = ms
    return out, data.get("context", {})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--default", nargs="+", required=True, help="the default build's JSON (one or more runs)")
    ap.add_argument("--bit-exact", required=True, help="the bit-exact build's JSON")
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args()

    defaults = [rows(p)[0] for p in args.default]
    exact, context = rows(args.bit_exact)
    table = []
    for key, ms_exact in exact.items():
        ms_def = [d[key] for d in defaults if key in d]
        if not ms_def:
            continue
        best = min(ms_def)
        table.append({
            "case": key,
            "default_ms": best,
            "bit_exact_ms": ms_exact,
            "cost": ms_exact / best - 1.0,
            "spread": max(ms_def) / best - 1.0,
        })
    if not table:
        raise SystemExit("compare_bit_exact.py: no case in both builds' JSON")

    print(f"Bit-exact build against the default, engine rows, {context.get('date', '')[:10]}; "
          "cost = bit-exact ms / the faster default run's ms - 1; spread = the two default runs apart.\n")
    print("| case | default ms | bit-exact ms | cost | default runs' spread |")
    print("|---|---|---|---|---|")
    for r in table:
        print(f"| {r['case']} | {r['default_ms']:.4g} | {r['bit_exact_ms']:.4g} | {100 * r['cost']:+.1f}% "
              f"| {100 * r['spread']:.1f}% |")
    print()
    summary = {}
    for family in sorted({r["case"].split()[0] for r in table}):
        costs = [r["cost"] for r in table if r["case"].split()[0] == family]
        summary[family] = {"worst": max(costs), "mean": sum(costs) / len(costs), "cases": len(costs)}
        print(f"{family}: worst {100 * max(costs):+.1f}%, mean {100 * sum(costs) / len(costs):+.1f}% "
              f"over {len(costs)} cases")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"context": context, "rows": table, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
