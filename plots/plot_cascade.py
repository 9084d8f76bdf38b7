#!/usr/bin/env python3
"""bench_cascade JSON -> a plot and four tables.

Reads bench/bench_cascade's Google Benchmark JSON (names family/backend/field:value/...,
e.g. cascade_grid/07_cascade/shape:qwen3/P:4000/B:64/S:128). Its variants (the
header comment of bench/bench_cascade.cpp):

    07_cascade      stage 07's own cascade, forced (stage07::plan, force 1): the prefix
                    pass on stage 03's tiles reads the prefix once for the group
    07_plain        the same plan forced plain (force 0): each request reads the prefix itself
    07_auto         stage 07's cost model (choose_path) picks per group (force -1); its
                    cascaded_groups counter says what it chose
    engine_cascade  the engine's cascade, forced (engine::plan_cascade + run_cascade): stage
                    09's tile (TMA, mbarriers, wgmma) as the prefix pass, the two-warp suffix
                    tile (before 2026-12-07: the engine's own wgmma prefix kernel)
    engine_auto     the engine's cost model picks per group
    04_split_kv     stage 04 on the same batch

and its families: cascade_grid (Qwen3-8B shape, P x B x S, every variant),
cascade_fit (the MHA shape at B = 64, engine_cascade only) and cascade_main (64
requests sharing a 4000-token prefix, S in {1, 128, 512}, Qwen3-8B and MHA shapes:
engine_cascade, engine_auto, 07_cascade and 04_split_kv on the shared layout,
04_split_kv on the private one). It
  - draws cascade_speedup.png: 07_plain's time / 07_cascade's time (the stage's
    own paths) against the prefix length P (log x) over the grid, one line per
    (B, S): colour = B, marker and line style = S; above 1 the cascade wins;
  - prints the main case: ms of every variant on the shared layout and of 04_split_kv
    on the private one, 07_cascade's speed-up over stage 04 on both layouts, the
    fraction of the cascade floor that 07_cascade and engine_cascade reach, and the
    target at S = 128. The main case does not time 07_plain or 07_auto: where the
    grid has the same batch (the Qwen3-8B shape) they are taken from that cell;
  - prints the dispatch accuracy of each cost model over the grid (MODELS): per cell
    the faster of its two forced paths, the path its plan chose, the fraction of
    cells where that is the faster path, and the worst slowdown against it. The
    engine's own plain path (the two-warp tile over each member's keys) is not a
    variant of the bench: 07_plain stands in for it, which a near-tie may misjudge;
  - fits where a cascaded step's time goes (time_model): per variant (07_cascade,
    engine_cascade), shape and group size, over the grid and the cascade_fit
    family, its time = a fixed part + a cost per prefix position + a cost per
    suffix position (least squares), with the rates those slopes imply; and per
    shape, on the main case, the part the suffix positions do not explain against
    what the S = 128 target leaves for it.
Each table states its target beside the figures. --md FILE also writes the
tables as markdown. Cells that did not run (skipped, failed, or a partial run,
e.g. --benchmark_filter=cascade_main) are left out or shown blank, and a family
the run lacks is named.

A run of the older bench_cascade (before the going_further move of 2026-12-02:
07_classic and 07_classic_auto were the stage's own pass, 07_cascade and 07_auto
the warpgroup pass; plots/h200/cascade.json, notes/data/cascade_*.json) is read
with its names mapped to today's (LEGACY_NAMES), and the output says so.

    python3 plots/plot_cascade.py --bench cascade.json --out plots/ [--md cascade.md]
"""
import argparse
import json
import os
import sys

# matplotlib is imported where it is used, so that plots/update_readmes.py can
# read the tables' rules without it; the fits need no numpy.

# The targets the tables are judged by.
FLOOR_TARGET = 1.5          # main case, S = TARGET_S: the cascade within 1.5x of its floor's time
TARGET_S = 128
FASTER_TARGET = 0.90        # stage 07's cost model picks the faster path in >= 90% of the grid's cells
SLOWDOWN_TARGET = 1.10      # and its pick is never more than 10% slower than the faster path
ENGINE_FASTER = (39, 45)    # the engine's model: >= 39 of 45 cells (tests/test_cascade_model.cpp)
TIE = 0.02                  # paths this close (relative) are a tie: either choice is right

# bench_cascade's variant names before the going_further move -> today's. 07_plain kept its name (it
# then ran the two-warp decode tile, which is now the engine's plain path).
LEGACY_NAMES = {"07_classic": "07_cascade", "07_classic_auto": "07_auto",
                "07_cascade": "engine_cascade", "07_auto": "engine_auto"}
LEGACY_NOTE = ("this run is of the older bench_cascade (before the going_further move of 2026-12-02), "
               "its names mapped to today's: its 07_classic / 07_classic_auto are shown as 07_cascade / "
               "07_auto, its 07_cascade / 07_auto (the warpgroup pass) as engine_cascade / engine_auto; "
               "its 07_plain, suffix passes and 04_split_kv ran the two-warp decode tile")
LEGACY_NOTE_SHORT = ("a run of the older bench_cascade, names mapped: its 07_classic / 07_classic_auto shown as "
                     "07_cascade / 07_auto, its 07_cascade / 07_auto (the warpgroup pass) as the engine's; its plain "
                     "and suffix passes and stage 04 ran the two-warp decode tile")


class Model:
    """One cost model of the bench: its forced cascade and plain variants, its own pick, its bound."""

    def __init__(self, title, cascade, plain, auto, min_fraction, bound):
        self.title, self.cascade, self.plain, self.auto = title, cascade, plain, auto
        self.min_fraction, self.bound = min_fraction, bound


STAGE_MODEL = Model("stage 07's cost model", "07_cascade", "07_plain", "07_auto", FASTER_TARGET,
                    f">= {FASTER_TARGET:.0%}")
# The engine's plain path (the two-warp tile over each member's keys) is not a variant of the bench:
# 07_plain (stage 03/04's tiles over the same batch) stands in for it.
ENGINE_MODEL = Model("the engine's cost model", "engine_cascade", "07_plain", "engine_auto",
                     ENGINE_FASTER[0] / ENGINE_FASTER[1],
                     f">= {ENGINE_FASTER[0]} of {ENGINE_FASTER[1]}, as tests/test_cascade_model.cpp asks")
MODELS = [STAGE_MODEL, ENGINE_MODEL]
FITTED = ["07_cascade", "engine_cascade"]  # the variants time_model fits


def load(path):
    with open(path) as f:
        return json.load(f)


def is_legacy(doc):
    """True for a run of the older bench_cascade (07_classic*, or cascade_fit timing 07_cascade)."""
    for b in doc.get("benchmarks", []):
        parts = b.get("run_name", b["name"]).split("/")
        if len(parts) >= 2 and (parts[1] in ("07_classic", "07_classic_auto") or
                                (parts[0] == "cascade_fit" and parts[1] == "07_cascade")):
            return True
    return False


def entries(doc):
    """(family, backend, fields) -> the benchmark's entry, errors included; an older run's names mapped."""
    rename = LEGACY_NAMES if is_legacy(doc) else {}
    out = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        if len(parts) < 3:
            continue
        fields = tuple(p for p in parts[2:] if ":" in p)
        out[(parts[0], rename.get(parts[1], parts[1]), fields)] = b
    return out


def families(runs):
    return {family for family, _, _ in runs}


def backends(runs, family):
    return sorted({backend for f, backend, _ in runs if f == family})


def ok(b):
    return b is not None and not b.get("error_occurred") and b.get("ms_median", 0) > 0


def field(fields, key):
    for f in fields:
        k, v = f.split(":", 1)
        if k == key:
            return v
    return None


def cell_key(fields):
    return (field(fields, "shape"), int(field(fields, "P")), int(field(fields, "B")), int(field(fields, "S")))


def grid_cells(runs):
    """{(shape, P, B, S): {backend: entry}} for the grid."""
    cells = {}
    for (family, backend, fields), b in runs.items():
        if family == "cascade_grid":
            cells.setdefault(cell_key(fields), {})[backend] = b
    return cells


def main_cells(runs):
    """{(shape, P, B, S): {(backend, layout): entry}} for the main case, and the (key, backend) pairs taken
    from the grid: the main case does not time 07_plain or 07_auto, the grid's cell of the same batch
    (same shape, P, B, S, shared layout, same run) does."""
    rows = {}
    for (family, backend, fields), b in runs.items():
        if family == "cascade_main":
            rows.setdefault(cell_key(fields), {})[(backend, field(fields, "layout"))] = b
    borrowed = set()
    grid = grid_cells(runs)
    for key, by in rows.items():
        for backend, b in sorted(grid.get(key, {}).items()):
            if not ok(by.get((backend, "shared"))) and ok(b):
                by[(backend, "shared")] = b
                borrowed.add((key, backend))
    return rows, borrowed


def missing_families(runs, which=("cascade_grid", "cascade_main", "cascade_fit")):
    """A sentence naming the families of `which` this run lacks, or ''."""
    what = {"cascade_grid": "`cascade_grid` (the grid: the plot, the cost models' scores, the time model's fit)",
            "cascade_main": "`cascade_main` (the main case)",
            "cascade_fit": "`cascade_fit` (the MHA shape's slice of the grid, for the time model)"}
    gone = [text for family, text in what.items() if family in which and family not in families(runs)]
    return ("Not in this run: " + "; ".join(gone) + ".") if gone else ""


def plot_speedup(cells, title, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    lines = {}
    for (shape, P, B, S), by in cells.items():
        c, p = by.get(STAGE_MODEL.cascade), by.get(STAGE_MODEL.plain)
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
    ax.set_ylabel(f"{STAGE_MODEL.plain} time / {STAGE_MODEL.cascade} time")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---- Dispatch: a cost model's picks over the grid.

def dispatch_picks(cells, model=STAGE_MODEL):
    """Per grid cell with the model's cascade and plain variants measured:
    (key, cascade, plain, auto, faster, chose, tie). chose is None where the model's own variant did not
    run or does not say what it chose (no cascaded_groups counter)."""
    out = []
    for key in sorted(cells):
        by = cells[key]
        c, p, a = by.get(model.cascade), by.get(model.plain), by.get(model.auto)
        if not (ok(c) and ok(p)):
            continue
        faster = "cascade" if c["ms_median"] <= p["ms_median"] else "plain"
        chose = None
        if ok(a) and "cascaded_groups" in a:
            chose = "cascade" if a["cascaded_groups"] > 0 else "plain"
        tie = max(c["ms_median"], p["ms_median"]) / min(c["ms_median"], p["ms_median"]) <= 1 + TIE
        out.append((key, c, p, a if ok(a) else None, faster, chose, tie))
    return out


class Score:
    """A model over the grid. judged: cells with both forced paths and a recorded pick; faster: picks of the
    faster path; ties: slower picks within TIE; worst_chosen / worst_auto: the worst chosen path's time and
    the worst model variant's own time over the faster path's (None when nothing was judged); unrecorded:
    cells where the model's variant ran without saying what it chose, worst_unrecorded its worst time there
    over the faster path's."""

    def __init__(self, cells, model):
        self.model = model
        self.judged = self.faster = self.ties = self.unrecorded = 0
        self.worst_chosen = self.worst_auto = self.worst_unrecorded = None
        for _, c, p, a, faster, chose, tie in dispatch_picks(cells, model):
            best = min(c["ms_median"], p["ms_median"])
            if chose is None:
                if a is not None:
                    self.unrecorded += 1
                    self.worst_unrecorded = max(self.worst_unrecorded or 0.0, a["ms_median"] / best)
                continue
            chosen_ms = c["ms_median"] if chose == "cascade" else p["ms_median"]
            self.judged += 1
            self.faster += chose == faster
            self.ties += tie and chose != faster
            self.worst_chosen = max(self.worst_chosen or 0.0, chosen_ms / best)
            self.worst_auto = max(self.worst_auto or 0.0, a["ms_median"] / best)

    def fraction_met(self):
        return self.judged > 0 and self.faster / self.judged >= self.model.min_fraction

    def slowdown_met(self):
        return self.worst_chosen is not None and self.worst_chosen <= SLOWDOWN_TARGET


def dispatch_score(cells, model=STAGE_MODEL):
    return Score(cells, model)


def dispatch_table(cells, model=STAGE_MODEL, legacy=False):
    """Markdown lines: per grid cell the faster path and the model's choice, then the summary."""
    cas, pla, aut = model.cascade, model.plain, model.auto
    out = [f"| shape | P | B | S | {cas} ms | {pla} ms | faster | {aut} chose | {aut} ms | "
           f"chosen / faster | {aut} / faster |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (shape, P, B, S), c, p, a, faster, chose, tie in dispatch_picks(cells, model):
        best = min(c["ms_median"], p["ms_median"])
        auto_ms = chosen_ratio = auto_ratio = shown = ""
        if a is not None:
            auto_ms, auto_ratio = f"{a['ms_median']:.4f}", f"{a['ms_median'] / best:.2f}"
        if chose is not None:
            chosen_ms = c["ms_median"] if chose == "cascade" else p["ms_median"]
            chosen_ratio = f"{chosen_ms / best:.2f}"
            shown = chose if chose == faster else (f"{chose} (tie)" if tie else f"**{chose}**")
        elif a is not None:
            shown = "(not recorded)"
        out.append(f"| {shape} | {P} | {B} | {S} | {c['ms_median']:.4f} | {p['ms_median']:.4f} | {faster} | "
                   f"{shown} | {auto_ms} | {chosen_ratio} | {auto_ratio} |")
    out.append("")
    s = dispatch_score(cells, model)
    verdict = lambda good: "met" if good else "NOT met"  # noqa: E731
    if s.judged:
        frac, frac_ties = s.faster / s.judged, (s.faster + s.ties) / s.judged
        out.append(f"{model.title[0].upper() + model.title[1:]} ({aut}) picked the faster path in {s.faster} of "
                   f"{s.judged} cells ({frac:.0%}; target {model.bound}: {verdict(s.fraction_met())}); counting "
                   f"the {s.ties} slower picks where the paths are within {TIE:.0%} (ties) as right: "
                   f"{frac_ties:.0%} ({verdict(frac_ties >= model.min_fraction)}).")
        out.append(f"Worst slowdown against the faster path: {s.worst_chosen:.2f}x by the chosen path's own time, "
                   f"{s.worst_auto:.2f}x by {aut}'s time (target <= {SLOWDOWN_TARGET:.2f}x: "
                   f"{verdict(s.slowdown_met())} by the chosen path, "
                   f"{verdict(s.worst_auto <= SLOWDOWN_TARGET)} by {aut}'s time, which adds run-to-run noise).")
        out.append("A choice in bold is a cell where the model picked the slower path by more than the tie margin.")
    elif s.unrecorded:
        out.append(f"{aut} ran in {s.unrecorded} cells but its entries do not say which path it chose (no "
                   f"cascaded_groups counter), so its picks are not scored; its own time was at worst "
                   f"{s.worst_unrecorded:.2f}x the faster of {cas} and {pla}.")
    else:
        out.append(f"No grid cell has {cas}, {pla} and {aut} all measured: nothing to judge.")
    if model is ENGINE_MODEL and not legacy:
        out.append(f"The engine's own plain path (the two-warp tile over each member's keys) is not a variant of "
                   f"the bench: {pla} (stage 03/04's tiles) stands in for it, so a near-tie may be misjudged.")
    return out


def plain_wins(cells, model=STAGE_MODEL):
    """The grid cells (P, B, S) where the model's plain path beat its cascade by more than TIE."""
    return [key[1:] for key, c, p, _, faster, _, tie in dispatch_picks(cells, model) if faster == "plain" and not tie]


def cells_phrase(cells):
    """(P, B, S) cells as 'P = 128 with B = 8 (S = 1, 128) and B = 64 (S = 1); P = 512 with B = 8 (S = 512)'."""
    by_p = {}
    for P, B, S in sorted(cells):
        by_p.setdefault(P, {}).setdefault(B, []).append(S)
    return "; ".join(f"P = {P} with " + " and ".join(f"B = {B} (S = {', '.join(map(str, ss))})"
                                                     for B, ss in sorted(bs.items()))
                     for P, bs in sorted(by_p.items()))


# ---- Where a cascaded step's time goes: least-squares fits, in plain Python.

def token_bytes(b):
    """K/V bytes of one position, all KV heads: bench_cascade counts kv_bytes = (P + B (S + 1)) positions."""
    if b.get("kv_token_bytes"):
        return b["kv_token_bytes"]
    return b["kv_bytes"] / (b["prefix_len"] + b["batch"] * (b["suffix_len"] + 1))


def lstsq(rows, y):
    """The least-squares solution of rows @ x = y (normal equations, Gaussian elimination)."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * v for r, v in zip(rows, y))]
         for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if a[col][col] == 0:
            raise ValueError("singular fit")
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * z for x, z in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit_us(bs, columns):
    """Least squares of the entries' times (us) over [1, *columns(entry)]: the coefficients, the worst residual."""
    rows = [[1.0, *columns(b)] for b in bs]
    y = [b["ms_median"] * 1e3 for b in bs]
    coef = lstsq(rows, y)
    worst = max(abs(sum(c * x for c, x in zip(coef, r)) - v) for r, v in zip(rows, y))
    return coef, worst


def fit_groups(runs):
    """{(backend, shape, B): [entries]}: the fitted variants' cells with P >= 512 in the grid and cascade_fit."""
    groups = {}
    for (family, backend, fields), c in runs.items():
        # cascade_fit: bench_cascade's slice of the grid in the MHA shape, engine_cascade only.
        if family in ("cascade_grid", "cascade_fit") and backend in FITTED and ok(c) and c["prefix_len"] >= 512:
            groups.setdefault((backend, field(fields, "shape"), int(field(fields, "B"))), []).append(c)
    return groups


def fittable(bs):
    return len({b["prefix_len"] for b in bs}) >= 2 and len({b["suffix_len"] for b in bs}) >= 2 and len(bs) >= 4


def fixed_part(runs, backend, shape, B):
    """The fit's fixed part in us for one variant, shape and group size, or None where it cannot be fitted."""
    bs = fit_groups(runs).get((backend, shape, B))
    if not bs or not fittable(bs):
        return None
    (fixed, _, _), _ = fit_us(bs, lambda b: (b["prefix_len"], b["suffix_len"]))
    return fixed


def per_second(work, us, scale):
    """`work` per `us` microseconds, in units of `scale` per second; blank when the slope is not positive."""
    return f"{work / (us * 1e-6) / scale:.0f}" if us > 0 else ""


def time_model(runs, read_gbps):
    """Markdown lines: 07_cascade's and engine_cascade's times split into a fixed part and per-position costs."""
    out = ["Per variant, shape and group size B (the cells with P >= 512 of the grid and of cascade_fit: below "
           "that the prefix pass has fewer splits than the model's one wave), the cascade's time fitted as "
           "fixed + P x (per prefix position) + S x (per suffix position), by least squares. "
           "The rates are the slopes' work over their time: the prefix pass's FLOPs per position "
           "(when the JSON counts them) and the B suffix positions' bytes.", "",
           "| variant | shape | B | cells | fixed us | us per 1000 prefix positions | prefix TFLOP/s | "
           "us per suffix position | suffix GB/s | worst residual us |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    fitted = False
    for (backend, shape, B), bs in sorted(fit_groups(runs).items(),
                                          key=lambda kv: (FITTED.index(kv[0][0]), kv[0][1] != "qwen3", kv[0])):
        if not fittable(bs):
            continue
        (fixed, per_p, per_s), worst = fit_us(bs, lambda b: (b["prefix_len"], b["suffix_len"]))
        flops = [b["prefix_flops"] / b["prefix_len"] for b in bs if b.get("prefix_flops")]
        tflops = per_second(flops[0], per_p, 1e12) if flops else ""
        gbps = per_second(B * token_bytes(bs[0]), per_s, 1e9)
        out.append(f"| {backend} | {shape} | {B} | {len(bs)} | {fixed:.1f} | {1000 * per_p:.2f} | {tflops} | "
                   f"{per_s:.3f} | {gbps} | {worst:.1f} |")
        fitted = True
    if not fitted:
        out.append("| (no variant and group size has enough measured cells to fit: the grid or cascade_fit is "
                   "missing) | | | | | | | | | |")
    out += ["", "The main case per variant and shape: the cascade's time fitted as T0 + S x (per suffix position) "
            "over its S values. T0 is what the suffix positions do not explain: the prefix pass, the decode "
            "tokens' own keys, launches, start-up and merges. *Room* is what the S = 128 target leaves for T0 once "
            "the suffix positions are read at the probe's rate. *Read* is what the read probe, timed the same way, "
            "takes to stream the S = 128 step's bytes once (its plain_read_fraction x its time).", "",
            "| variant | shape | P | B | T0 us | us per suffix position | suffix GB/s | target at S = 128 us | "
            "suffix positions at the probe us | room for T0 us | read at S = 128 us |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    mains = {}
    for (family, backend, fields), b in runs.items():
        if family == "cascade_main" and backend in FITTED and field(fields, "layout") == "shared" and ok(b):
            key = (backend, field(fields, "shape"), int(field(fields, "P")), int(field(fields, "B")))
            mains.setdefault(key, []).append(b)
    shown = False
    for (backend, shape, P, B), bs in sorted(mains.items(),
                                             key=lambda kv: (FITTED.index(kv[0][0]), kv[0][1] != "qwen3", kv[0])):
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
        out.append(f"| {backend} | {shape} | {P} | {B} | {t0:.1f} | {per_s:.3f} | {gbps} | {target} | {suffix} | "
                   f"{room} | {read} |")
        shown = True
    if not shown:
        out.append("| (no variant has the main case at two or more S) | | | | | | | | | | |")
    return out


# ---- The main case.

def main_table(runs, read_gbps):
    """Markdown lines: the main case per shape and S."""
    rows, borrowed = main_cells(runs)
    out = ["| shape | P | B | S | floor us | 07_cascade ms | 07_plain ms | 07_auto ms | engine_cascade ms | "
           "engine_auto ms | 04 shared ms | 04 private ms | 07_cascade vs 04 shared | "
           "vs 04 private | 07_cascade of floor | engine_cascade of floor | "
           "target (S = 128) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    if not rows:
        out.append("| (no cascade_main entry in this run) |" + " |" * 16)

    def speedup(base, c):
        return f"{base['ms_median'] / c['ms_median']:.2f}x" if ok(base) and ok(c) else ""

    def frac(b):
        return f"{b['floor_fraction']:.2f}" if ok(b) and read_gbps and "floor_fraction" in b else ""

    for key in sorted(rows, key=lambda k: (k[0] != "qwen3", k[0], k[1], k[2], k[3])):
        shape, P, B, S = key
        by = rows[key]

        def get(backend, layout="shared"):
            return by.get((backend, layout))

        def ms(backend, layout="shared"):
            b = get(backend, layout)
            if not ok(b):
                return ""
            return f"{b['ms_median']:.4f}" + ("*" if (key, backend) in borrowed else "")

        c, e = get("07_cascade"), get("engine_cascade")
        s04, p04 = get("04_split_kv"), get("04_split_kv", "private")
        any_run = next((b for b in by.values() if ok(b)), None)
        floor_us = any_run["kv_bytes"] / (read_gbps * 1e9) * 1e6 if any_run and read_gbps else None
        target = ""
        if S == TARGET_S and floor_us:
            limit = FLOOR_TARGET * floor_us
            got = [f"{name} {b['ms_median'] * 1e3:.1f} us ({'met' if b['ms_median'] * 1e3 <= limit else 'NOT met'})"
                   for name, b in (("07_cascade", c), ("engine_cascade", e)) if ok(b)]
            target = f"<= {limit:.0f} us" + (": " + ", ".join(got) if got else "")
        floor_cell = f"{floor_us:.1f}" if floor_us else ""
        out.append(f"| {shape} | {P} | {B} | {S} | {floor_cell} | {ms('07_cascade')} | {ms('07_plain')} | "
                   f"{ms('07_auto')} | {ms('engine_cascade')} | {ms('engine_auto')} | "
                   f"{ms('04_split_kv')} | {ms('04_split_kv', 'private')} | {speedup(s04, c)} | {speedup(p04, c)} | "
                   f"{frac(c)} | {frac(e)} | "
                   f"{target} |")
    out.append("")
    out.append("floor = the cascade's bytes (the prefix once + every request's own positions) / the read probe; "
               "of floor = floor / the variant's time. 07_*: stage 07's own path (prefix pass on stage 03's tiles): "
               "forced cascade, forced plain, its cost model; engine_*: the engine's cascade (stage 09's tile, "
               "TMA, mbarriers and wgmma, as the prefix pass), forced and by its cost model; 04: stage 04 over the shared blocks and over "
               f"private copies. Target: at S = {TARGET_S}, the cascade within {FLOOR_TARGET}x of its floor.")
    if borrowed:
        out.append("* taken from the grid's cell of the same batch in the same run (the main case does not time "
                   "that variant).")
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
    if not runs:
        raise SystemExit(f"plot_cascade: {args.bench} has no bench_cascade entries")
    try:
        read_gbps = float(ctx.get("read_bandwidth_GBps", 0) or 0)
    except ValueError:
        read_gbps = 0.0
    device, date = ctx.get("device", "?"), ctx.get("date", "?")[:10]
    flavor = ctx.get("flavor", "")
    smoke = " (CPU smoke run: timings mean nothing)" if flavor.startswith("cpu") else ""
    missing = missing_families(runs)
    if missing:
        print(f"plot_cascade: {missing}", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    cells = grid_cells(runs)
    png = os.path.join(args.out, "cascade_speedup.png")
    title = (f"Stage 07's cascade over its plain path, B requests sharing a P-token prefix (Qwen3-8B shape)\n"
             f"{device}, {date}{smoke}")
    if plot_speedup(cells, title, png):
        print(f"wrote {png}", file=sys.stderr)
    else:
        print(f"plot_cascade: no grid cell with both {STAGE_MODEL.cascade} and {STAGE_MODEL.plain}; no plot",
              file=sys.stderr)

    lines = [f"Stage 07 on {device}, {date}{smoke}; read-probe bandwidth {read_gbps:.0f} GB/s; "
             f"L2 flush: {ctx.get('l2_flush', '?')}."]
    if is_legacy(doc):
        lines[0] += f" Note: {LEGACY_NOTE}."
    if missing:
        lines[0] += " " + missing
    lines += ["", "### The main case: requests sharing a prefix", ""]
    lines += main_table(runs, read_gbps)
    for model in MODELS:
        lines += ["", f"### Dispatch: {model.title} ({model.auto}) over the grid", ""]
        lines += dispatch_table(cells, model, is_legacy(doc))
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
