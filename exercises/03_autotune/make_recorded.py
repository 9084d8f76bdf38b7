#!/usr/bin/env python3
"""Writes recorded.json and expected_table.json: a synthetic tuner run for the CPU test.

Not a measurement. The times come from a small model of a decode step on a
132-SM GPU with 4 decode programs per SM (stage 04's PROGRAMS_PER_SM) and
~4.5 TB/s, plus fixed-seed noise of +-0.8%, so the choices look like a real
run's without claiming to be one:
  - a program streams at most 1/264 of the bandwidth (half a wave saturates);
  - programs past one wave run in more waves, and a ragged last wave costs;
  - each wave pays a pipeline prologue, every split count > 1 a merge launch and
    its partials' traffic.
The expected table is chosen here by the exercise's rules (TIE_MARGIN, the
default's split count among the tied, else the fewest splits; stretches of
equal choices merged), independently of the C++ solution the test checks.

    python3 exercises/03_autotune/make_recorded.py
"""
import json
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
SMS, PER_SM, BW = 132, 4, 4.5e12
KV_HEADS, Q_HEADS, HEAD_DIM, BLOCK = 8, 32, 128, 16
GROUP = Q_HEADS // KV_HEADS
CANDIDATES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
KEYS = [(b, 4096) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)] + [(b, 32768) for b in (1, 4, 32)]
TIE_MARGIN = 0.02


def effective_splits(ctx, splits):
    blocks = max(1, -(-ctx // BLOCK))
    per = -(-blocks // splits)
    return -(-blocks // per)


def rule_splits(batch, ctx):
    # stage 04's plan_rule at 132 SMs
    programs = max(1, batch * KV_HEADS)
    one_wave = max(1, PER_SM * SMS // programs)
    min_size = max(1, ctx // 256)
    return effective_splits(ctx, max(1, min(64, min(one_wave, min_size))))


def model_ms(batch, ctx, splits, rng):
    kv_bytes = batch * ctx * 2 * KV_HEADS * HEAD_DIM * 2
    programs = batch * KV_HEADS * splits
    slots = SMS * PER_SM
    waves = -(-programs // slots)
    bw = BW * min(1.0, programs / (slots / 2))
    if programs > slots:
        bw *= 1.0 - 0.3 * (1.0 - programs / (waves * slots))
    t = 5e-6 + kv_bytes / bw + waves * 1.0e-6
    if splits > 1:
        partials = batch * Q_HEADS * splits * (HEAD_DIM + 1) * 4
        t += 3e-6 + 2 * partials / BW
    return t * 1e3 * (1.0 + rng.uniform(-0.008, 0.008))


def pick(rows, default):
    best = min(ms for _, ms in rows)
    tied = [s for s, ms in rows if ms <= best * (1 + TIE_MARGIN)]
    return default if default in tied else min(tied)


def row(label, batch, ctx, splits, ms, read_gbps):
    iterations = 20 if ctx <= 4096 else 10
    name = f"{label}/iterations:{iterations}/manual_time"  # as Google Benchmark names a row
    kv_bytes = batch * ctx * 2 * KV_HEADS * HEAD_DIM * 2
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1, "repetition_index": 0,
            "threads": 1, "iterations": iterations, "real_time": round(ms, 6), "cpu_time": round(ms, 6), "time_unit": "ms",
            "GBps": round(kv_bytes / (ms * 1e-3) / 1e9, 3), "batch": batch, "context": ctx, "group": GROUP,
            "floor_fraction": round(kv_bytes / (read_gbps * 1e9) / (ms * 1e-3), 4), "kv_bytes": kv_bytes,
            "ms_median": round(ms, 6), "num_splits": splits}


def main():
    rng = random.Random(3)
    read_gbps = 4510.0
    benchmarks, choices = [], []
    for batch, ctx in KEYS:
        label = f"batch:{batch}/ctx:{ctx}/group:{GROUP}"
        measured = []
        for s in CANDIDATES:
            ran = effective_splits(ctx, s)
            ms = model_ms(batch, ctx, ran, rng)
            measured.append((ran, ms))
            benchmarks.append(row(f"sweep/engine/{label}/splits:{s}", batch, ctx, ran, ms, read_gbps))
        default = rule_splits(batch, ctx)
        benchmarks.append(row(f"plan/default/{label}", batch, ctx, default, model_ms(batch, ctx, default, rng),
                              read_gbps))
        chosen = pick(measured, default)
        choices.append((batch, ctx, chosen))
        benchmarks.append(row(f"plan/tuned/{label}", batch, ctx, chosen, model_ms(batch, ctx, chosen, rng),
                              read_gbps))
        print(f"{label}: default {default}, chosen {chosen}")
    entries = []
    for ctx in sorted({c for _, c, _ in choices}):
        run = sorted((b, s) for b, c, s in choices if c == ctx)
        for i, (b, s) in enumerate(run):
            if i + 1 < len(run) and run[i + 1][1] == s:
                continue
            entries.append({"max_batch": b, "max_context": ctx, "group": GROUP, "num_splits": s})
    context = {"date": "synthetic", "executable": "exercise_03_autotune_tuner", "num_cpus": 16,
               "library_build_type": "release", "device": "synthetic (make_recorded.py model, not a measurement)",
               "flavor": "gpu", "num_sms": str(SMS), "read_bandwidth_GBps": str(read_gbps)}
    with open(os.path.join(HERE, "recorded.json"), "w") as f:
        f.write('{\n"context": ' + json.dumps(context) + ',\n"benchmarks": [\n')
        f.write(",\n".join(json.dumps(b) for b in benchmarks))
        f.write("\n]\n}\n")
    table = {"tuned_plan_version": 1, "device": context["device"],
             "shape": {"num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "block_size": BLOCK, "kv_format": "bf16"},
             "entries": entries}
    with open(os.path.join(HERE, "expected_table.json"), "w") as f:
        json.dump(table, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
