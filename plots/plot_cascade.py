#!/usr/bin/env python3
"""bench_cascade JSON -> a plot and two tables.

Reads bench_cascade's Google Benchmark JSON (names family/backend/field:value/...,
e.g. cascade_grid/07_cascade/shape:qwen3/P:4000/B:64/S:128) and
  - draws cascade_speedup.png: 07_plain's time / 07_cascade's time against the
    prefix length P (log x) over the grid, one line per (B, S): colour = B,
    marker and line style = S; above 1 the cascade wins;
  - prints the dispatch accuracy over the grid: per cell the faster of 07_cascade
    and 07_plain, the path 07_auto's plan chose (its cascaded_groups counter),
    the fraction of cells where that is the faster path, and the worst slowdown
    of 07_auto against the faster path;
  - prints the main case (64 requests sharing a 4000-token prefix): ms of
    07_cascade, 07_auto and 04_split_kv on the shared and the private layout,
    the cascade's speedup over both, and its fraction of the cascade floor.
  - fits where a cascaded step's time goes (time_model): per shape and group
    size, over the grid and the cascade_fit family, 07_cascade's time = a fixed
    part + a cost per prefix position + a cost per suffix position (least
    squares), with the rates those slopes imply; and per shape, on the main
    case, the part the suffix positions do not explain against what the S = 128
    target leaves for it.
Each table states its target beside the figures. --md FILE also writes the
tables as markdown. Cells that did not run (skipped, failed, or a partial run)
are left out or shown blank.

    python3 plots/plot_cascade.py --bench cascade.json --out plots/ [--md cascade.md]
"""
import argparse
import json
import os
import sys

# matplotlib and numpy are imported where they are used, so that
# plots/update_readmes.py can read the tables' rules without them.

# The targets the tables are judged by.
FLOOR_TARGET = 1.5          # main case, S = TARGET_S: 07_cascade within 1.5x of its floor's time
TARGET_S = 128
FASTER_TARGET = 0.90        # the cost model picks the faster path in >= 90% of the grid's cells
SLOWDOWN_TARGET = 1.10      # and 07_auto is never more than 10% slower than the faster path
TIE = 0.02                  # paths this close (relative) are a tie: either choice is right


def load(path):
    with open(path) as f:
        return json.load(f)


def entries(doc):
    """(family, backend, fields) -> the benchmark's entry, errors included."""
    out = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        if len(parts) < 3:
            continue
        fields = tuple(p for p in parts[2:] if ":" in p)
        out[(parts[0], parts[1], fields)] = b
    return out


def ok(b):
    return b is not None and not b.get("error_occurred") and b.get("ms_median", 0) > 0


def field(fields, key):
    for f in fields:
        k, v = f.split(":", 1)
        if k == key:
            return v
    return None


def grid_cells(runs):
    """{(shape, P, B, S): {backend: entry}} for the grid."""
    cells = {}
    for (family, backend, fields), b in runs.items():
        if family != "cascade_grid":
            continue
        key = (field(fields, "shape"), int(field(fields, "P")), int(field(fields, "B")), int(field(fields, "S")))
        cells.setdefault(key, {})[backend] = b
    return cells


def plot_speedup(cells, title, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    lines = {}
    for (shape, P, B, S), by in cells.items():
        c, p = by.get("07_cascade"), by.get("07_plain")
        if ok(c) and ok(p):
            lines.setdefault((shape, B, S), []).append((P, p["ms_median"] / c["ms_median"]))
    if not lines:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    batches = sorted({k[1] for k in lines})
    suffixes = sorted({k[2] for k in lines})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers, styles = ["o", "s", "^", "D", "v"], ["-", "--", ":", "-."]
    shapes = sorted({k[0] for k in lines})
    for (shape, B, S), pts in sorted(lines.items()):
        pts.sort()
        bi, si = batches.index(B), suffixes.index(S)
        label = f"B {B}, S {S}" + (f" ({shape})" if len(shapes) > 1 else "")
        ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle=styles[si % len(styles)],
                marker=markers[si % len(markers)], color=colours[bi % len(colours)], label=label)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    prefixes = sorted({P for pts in lines.values() for P, _ in pts})
    ax.set_xticks(prefixes, [str(P) for P in prefixes])
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("shared prefix length P (tokens)")
    ax.set_ylabel("07_plain time / 07_cascade time")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def dispatch_picks(cells):
    """Per grid cell with 07_cascade and 07_plain measured: (key, cascade, plain, auto, faster, chose, tie).

    chose is None where 07_auto did not run or does not say what it chose (its cascaded_groups counter)."""
    out = []
    for key in sorted(cells):
        by = cells[key]
        c, p, a = by.get("07_cascade"), by.get("07_plain"), by.get("07_auto")
        if not (ok(c) and ok(p)):
            continue
        faster = "cascade" if c["ms_median"] <= p["ms_median"] else "plain"
        chose = None
        if ok(a) and "cascaded_groups" in a:
            chose = "cascade" if a["cascaded_groups"] > 0 else "plain"
        tie = max(c["ms_median"], p["ms_median"]) / min(c["ms_median"], p["ms_median"]) <= 1 + TIE
        out.append((key, c, p, a, faster, chose, tie))
    return out


def dispatch_score(cells):
    """The cost model over the grid: (cells judged, faster picks, slower picks that are ties,
    worst chosen path / faster path, worst 07_auto / faster path); the ratios are None when nothing was judged."""
    judged = picked_faster = ties = 0
    worst_chosen = worst_auto = None
    for _, c, p, a, faster, chose, tie in dispatch_picks(cells):
        if chose is None:
            continue
        best = min(c["ms_median"], p["ms_median"])
        chosen_ms = c["ms_median"] if chose == "cascade" else p["ms_median"]
        judged += 1
        picked_faster += chose == faster
        ties += tie and chose != faster
        worst_chosen = max(worst_chosen or 0.0, chosen_ms / best)
        worst_auto = max(worst_auto or 0.0, a["ms_median"] / best)
    return judged, picked_faster, ties, worst_chosen, worst_auto


def dispatch_table(cells):
    """Markdown lines: per grid cell the faster path and 07_auto's choice, then the summary."""
    out = ["| shape | P | B | S | 07_cascade ms | 07_plain ms | faster | 07_auto chose | 07_auto ms | "
           "chosen / faster | 07_auto / faster |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (shape, P, B, S), c, p, a, faster, chose, tie in dispatch_picks(cells):
        best = min(c["ms_median"], p["ms_median"])
        auto_ms = chosen_ratio = auto_ratio = shown = ""
        if chose is not None:
            chosen_ms = c["ms_median"] if chose == "cascade" else p["ms_median"]
            auto_ms = f"{a['ms_median']:.4f}"
            chosen_ratio, auto_ratio = f"{chosen_ms / best:.2f}", f"{a['ms_median'] / best:.2f}"
            shown = chose if chose == faster else (f"{chose} (tie)" if tie else f"**{chose}**")
        out.append(f"| {shape} | {P} | {B} | {S} | {c['ms_median']:.4f} | {p['ms_median']:.4f} | {faster} | "
                   f"{shown} | {auto_ms} | {chosen_ratio} | {auto_ratio} |")
    out.append("")
    judged, picked_faster, ties, worst_chosen, worst_auto = dispatch_score(cells)
    if judged:
        frac = picked_faster / judged
        verdict = lambda good: "met" if good else "NOT met"  # noqa: E731
        frac_ties = (picked_faster + ties) / judged
        out.append(f"The cost model picked the faster path in {picked_faster} of {judged} cells ({frac:.0%}; "
                   f"target >= {FASTER_TARGET:.0%}: {verdict(frac >= FASTER_TARGET)}); counting the {ties} "
                   f"slower picks where the paths are within {TIE:.0%} (ties) as right: {frac_ties:.0%} "
                   f"({verdict(frac_ties >= FASTER_TARGET)}).")
        out.append(f"Worst slowdown against the faster path: {worst_chosen:.2f}x by the chosen path's own time, "
                   f"{worst_auto:.2f}x by 07_auto's time (target <= {SLOWDOWN_TARGET:.2f}x: "
                   f"{verdict(worst_chosen <= SLOWDOWN_TARGET)} by the chosen path, "
                   f"{verdict(worst_auto <= SLOWDOWN_TARGET)} by 07_auto's time, which adds run-to-run noise).")
        out.append("A choice in bold is a cell where the model picked the slower path by more than the tie margin.")
    else:
        out.append("No grid cell has 07_cascade, 07_plain and 07_auto all measured: nothing to judge.")
    return out


def token_bytes(b):
    """K/V bytes of one position, all KV heads: bench_cascade counts kv_bytes = (P + B (S + 1)) positions."""
    if b.get("kv_token_bytes"):
        return b["kv_token_bytes"]
    return b["kv_bytes"] / (b["prefix_len"] + b["batch"] * (b["suffix_len"] + 1))


def fit_us(bs, columns):
    """Least squares of the entries' times (us) over [1, *columns(entry)]: the coefficients, the worst residual."""
    import numpy as np
    X = np.array([[1.0, *columns(b)] for b in bs])
    y = np.array([b["ms_median"] * 1e3 for b in bs])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return coef, float(np.max(np.abs(X @ coef - y)))


def per_second(work, us, scale):
    """`work` per `us` microseconds, in units of `scale` per second; blank when the slope is not positive."""
    return f"{work / (us * 1e-6) / scale:.0f}" if us > 0 else ""


def time_model(runs, read_gbps):
    """Markdown lines: 07_cascade's time split into a fixed part and per-position costs."""
    out = ["Per shape and group size B (the grid's cells with P >= 512: below that the prefix pass has "
           "fewer splits than the model's one wave), 07_cascade's time fitted as "
           "fixed + P x (per prefix position) + S x (per suffix position), by least squares. "
           "The rates are the slopes' work over their time: the prefix pass's FLOPs per position "
           "(when the JSON counts them) and the B suffix positions' bytes.", "",
           "| shape | B | cells | fixed us | us per 1000 prefix positions | prefix TFLOP/s | "
           "us per suffix position | suffix GB/s | worst residual us |",
           "|---|---|---|---|---|---|---|---|---|"]
    groups = {}
    for (family, backend, fields), c in runs.items():
        # cascade_fit: bench_cascade's slice of the grid in the MHA shape, cascade only.
        if family in ("cascade_grid", "cascade_fit") and backend == "07_cascade" and ok(c) and c["prefix_len"] >= 512:
            groups.setdefault((field(fields, "shape"), int(field(fields, "B"))), []).append(c)
    fitted = False
    for (shape, B), bs in sorted(groups.items()):
        if len({b["prefix_len"] for b in bs}) < 2 or len({b["suffix_len"] for b in bs}) < 2 or len(bs) < 4:
            continue
        (fixed, per_p, per_s), worst = fit_us(bs, lambda b: (b["prefix_len"], b["suffix_len"]))
        flops = [b["prefix_flops"] / b["prefix_len"] for b in bs if b.get("prefix_flops")]
        tflops = per_second(flops[0], per_p, 1e12) if flops else ""
        gbps = per_second(B * token_bytes(bs[0]), per_s, 1e9)
        out.append(f"| {shape} | {B} | {len(bs)} | {fixed:.1f} | {1000 * per_p:.2f} | {tflops} | {per_s:.3f} | "
                   f"{gbps} | {worst:.1f} |")
        fitted = True
    if not fitted:
        out.append("| (no group size has enough measured cells to fit) | | | | | | | | |")
    out += ["", "The main case per shape: 07_cascade's time fitted as T0 + S x (per suffix position) over its "
            "S values. T0 is what the suffix positions do not explain: the prefix pass, the decode tokens' own "
            "keys, launches, start-up and merges. *Room* is what the S = 128 target leaves for T0 once the "
            "suffix positions are read at the probe's rate. *Read* is what the read probe, timed the same way, "
            "takes to stream the S = 128 step's bytes once (its plain_read_fraction x its time).", "",
            "| shape | P | B | T0 us | us per suffix position | suffix GB/s | target at S = 128 us | "
            "suffix positions at the probe us | room for T0 us | read at S = 128 us |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    mains = {}
    for (family, backend, fields), b in runs.items():
        if family == "cascade_main" and backend == "07_cascade" and field(fields, "layout") == "shared" and ok(b):
            key = (field(fields, "shape"), int(field(fields, "P")), int(field(fields, "B")))
            mains.setdefault(key, []).append(b)
    for (shape, P, B), bs in sorted(mains.items(), key=lambda kv: (kv[0][0] != "qwen3", kv[0])):
        if len({b["suffix_len"] for b in bs}) < 2:
            continue
        (t0, per_s), _ = fit_us(bs, lambda b: (b["suffix_len"],))
        tb = token_bytes(bs[0])
        gbps = per_second(B * tb, per_s, 1e9)
        target = suffix = room = read = ""
        at_target = next((b for b in bs if b["suffix_len"] == TARGET_S), None)
        if at_target and at_target.get("plain_read_fraction"):
            read = f"{at_target['plain_read_fraction'] * at_target['ms_median'] * 1e3:.1f}"
        if at_target and read_gbps:
            # kv_bytes is the cascade's bytes: the prefix once, each member's own positions and decode token
            limit = FLOOR_TARGET * at_target["kv_bytes"] / (read_gbps * 1e9) * 1e6
            at_probe = B * TARGET_S * tb / (read_gbps * 1e9) * 1e6
            target, suffix, room = f"{limit:.1f}", f"{at_probe:.1f}", f"{limit - at_probe:.1f}"
        out.append(f"| {shape} | {P} | {B} | {t0:.1f} | {per_s:.3f} | {gbps} | {target} | {suffix} | {room} | "
                   f"{read} |")
    return out


def main_table(runs, read_gbps):
    """Markdown lines: the main case per shape and S."""
    rows = {}
    for (family, backend, fields), b in runs.items():
        if family != "cascade_main":
            continue
        key = (field(fields, "shape"), int(field(fields, "P")), int(field(fields, "B")), int(field(fields, "S")))
        rows.setdefault(key, {})[(backend, field(fields, "layout"))] = b
    out = ["| shape | P | B | S | floor us | 07_cascade ms | 07_classic ms | 07_auto ms | 04 shared ms | "
           "04 private ms | vs 04 shared | vs 04 private | fraction of floor | target (S = 128) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(b):
        return f"{b['ms_median']:.4f}" if ok(b) else ""

    def speedup(base, c):
        return f"{base['ms_median'] / c['ms_median']:.2f}x" if ok(base) and ok(c) else ""

    for key in sorted(rows, key=lambda k: (k[0] != "qwen3", k[0], k[1], k[2], k[3])):
        shape, P, B, S = key
        by = rows[key]
        c, a = by.get(("07_cascade", "shared")), by.get(("07_auto", "shared"))
        classic = by.get(("07_classic", "shared"))
        s04, p04 = by.get(("04_split_kv", "shared")), by.get(("04_split_kv", "private"))
        any_run = next((b for b in (c, a, s04, p04) if ok(b)), None)
        floor_us = any_run["kv_bytes"] / (read_gbps * 1e9) * 1e6 if any_run and read_gbps else None
        frac = f"{c['floor_fraction']:.2f}" if ok(c) and read_gbps else ""
        target = ""
        if S == TARGET_S and floor_us:
            limit = FLOOR_TARGET * floor_us
            target = f"<= {limit:.0f} us"
            if ok(c):
                got = c["ms_median"] * 1e3
                target += f": {got:.1f} us, " + ("met" if got <= limit else "NOT met")
        floor_cell = f"{floor_us:.1f}" if floor_us else ""
        out.append(f"| {shape} | {P} | {B} | {S} | {floor_cell} | {ms(c)} | {ms(classic)} | {ms(a)} | {ms(s04)} | "
                   f"{ms(p04)} | "
                   f"{speedup(s04, c)} | {speedup(p04, c)} | {frac} | {target} |")
    out.append("")
    out.append(f"floor = the cascade's bytes (the prefix once + every request's own positions) / the read probe; "
               f"fraction of floor = floor / 07_cascade's time. 07_classic: the same cascade with stage 03's "
               f"tiles for the prefix pass (before its going-further warpgroup kernel). Target: at S = 128, 07_cascade within "
               f"{FLOOR_TARGET}x of its floor.")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="bench_cascade's JSON")
    ap.add_argument("--out", required=True, help="directory for cascade_speedup.png")
    ap.add_argument("--md", help="also write the tables as markdown to this file")
    args = ap.parse_args()
    doc = load(args.bench)
    ctx = doc.get("context", {})
    runs = entries(doc)
    read_gbps = float(ctx.get("read_bandwidth_GBps", 0) or 0)
    device, date = ctx.get("device", "?"), ctx.get("date", "?")[:10]
    flavor = ctx.get("flavor", "")
    smoke = " (CPU smoke run: timings mean nothing)" if flavor.startswith("cpu") else ""

    os.makedirs(args.out, exist_ok=True)
    cells = grid_cells(runs)
    png = os.path.join(args.out, "cascade_speedup.png")
    title = f"Cascade over plain decode, B requests sharing a P-token prefix (Qwen3-8B shape)\n{device}, {date}{smoke}"
    if plot_speedup(cells, title, png):
        print(f"wrote {png}", file=sys.stderr)
    else:
        print("plot_cascade: no grid cell with both 07_cascade and 07_plain; no plot", file=sys.stderr)

    lines = [f"Stage 07 on {device}, {date}{smoke}; read-probe bandwidth {read_gbps:.0f} GB/s; "
             f"L2 flush: {ctx.get('l2_flush', '?')}.", "",
             "### The main case: requests sharing a prefix", ""]
    lines += main_table(runs, read_gbps)
    lines += ["", "### Dispatch: the cost model (07_auto) over the grid", ""]
    lines += dispatch_table(cells)
    lines += ["", "### Where a cascaded step's time goes", ""]
    lines += time_model(runs, read_gbps)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
