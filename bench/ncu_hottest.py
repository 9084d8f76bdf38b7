#!/usr/bin/env python3
"""The hottest SASS instructions of one kernel profile.

Reads the CSV that Nsight Compute writes for its source page
(`ncu --section SourceCounters --section WarpStateStats --page source
--print-source sass --csv ...`, bench/run_gpu.sh --ncu writes it as
ncu_source.csv) and prints the instructions with the most warp-state samples,
with their share of all samples, their two largest stall reasons and how often
they ran. Where the warps of a kernel wait shows there: a wait on a barrier
sits on the branch after its try_wait, a wait on the tensor core on its
WARPGROUP.DEPBAR.

    python3 bench/ncu_hottest.py ncu_source.csv [--top 40]
"""
import argparse
import csv
import sys


def rows_of(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    # ncu prints the program's own output and its log before the table; the
    # table's header row is the one that starts with "Address".
    for i, line in enumerate(lines):
        if line.startswith('"Address"'):
            return list(csv.reader(lines[i:]))
    sys.exit(f"{path}: no source table (was ncu run with --page source --print-source sass --csv?)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    rows = rows_of(args.csv)
    header, data = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    col = {h: i for i, h in enumerate(header)}
    samples = col["Warp Stall Sampling (All Samples)"]
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def count(r, c):
        try:
            return int(r[c] or 0)
        except ValueError:
            return 0

    total = sum(count(r, samples) for r in data) or 1
    per_reason = sorted(((sum(count(r, col[s]) for r in data), s[6:]) for s in stalls), reverse=True)
    print(f"{len(data)} instructions, {total} samples; by reason: " +
          ", ".join(f"{name} {100 * n / total:.1f}%" for n, name in per_reason[:8]))
    print("address  samples  share  reasons                      executed  instruction")
    for r in sorted(data, key=lambda r: -count(r, samples))[:args.top]:
        s = count(r, samples)
        top2 = sorted(((count(r, col[k]), k[6:]) for k in stalls), reverse=True)[:2]
        reasons = " ".join(f"{name}:{n}" for n, name in top2 if n)
        executed = r[col["Instructions Executed"]] if "Instructions Executed" in col else ""
        print(f"{r[0][-6:]:>7} {s:8d} {100 * s / total:5.1f}%  {reasons:28s} {executed:>9}  {r[1].strip()}")


if __name__ == "__main__":
    main()
