#!/usr/bin/env python3
"""Benchmark JSON -> the results tables of the READMEs.

Reads the Google Benchmark JSON that bench/bench_attention writes (benchmark
names family/backend/label, e.g. decode/04_split_kv/batch:64/ctx:4096; counters
ms_median, floor_fraction, plain_read_fraction, TFLOPs; context device, date,
read_bandwidth_GBps, l2_flush), PyTorch's reference points
(bench/torch_reference.py) and bench/bench_cascade's JSON (stage 07), and
rewrites the part of each README between the lines

    <!-- results:begin -->
    <!-- results:end -->

with one table headed by a line that names the device, the date and the
read-probe bandwidth of the run:
  - steps/NN_name/README.md: that stage's backends on a few cases (stage 07:
    its main case and the cost model's score over the grid, from the cascade
    JSON; the others from the bench JSON);
  - README.md: the headline rows, each case on the stage that teaches it,
    beside stage 01 and the vendor libraries; the full table, every backend on every
    case, is written to summary.md beside the bench JSON by plots/summarize.py
    (plots/h200/summary.md for the committed run), and checked too.
A README without the markers is left alone. Running it twice on the same JSON
changes nothing.

    python3 plots/update_readmes.py [BENCH_JSON] [--torch JSON] [--cascade JSON] [--check] [--stage 04 ...]

BENCH_JSON defaults to plots/h200/bench.json, --torch to plots/h200/torch.json
and --cascade to plots/h200/cascade.json (the last committed runs). --stage
takes a stage's number or name, or "top" for README.md and the full table.
--check writes nothing and exits 1 if any table differs from what the JSON
gives.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plots"))
import plot_cascade  # noqa: E402  (the cascade tables' rules; needs neither matplotlib nor numpy here)
import summarize  # noqa: E402  (stage 08's targets)

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
DASH = "—"


# ---- The run: (family, backend, label) -> the benchmark's entry.

class Run:
    def __init__(self, doc):
        self.context = doc.get("context", {})
        self.entries = {}
        aggregates = {}
        for b in doc.get("benchmarks", []):
            name = b.get("run_name", b["name"]).split("/iterations:")[0].split("/manual_time")[0]
            parts = name.split("/")
            if len(parts) < 3:
                continue
            key = (parts[0], parts[1], "/".join(parts[2:]))
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    aggregates[key] = b
            else:
                self.entries.setdefault(key, b)  # the first repetition
        self.entries.update(aggregates)

    def add(self, doc):
        """Another run's entries (PyTorch's reference points), where this run has none of its own."""
        for key, b in Run(doc).entries.items():
            self.entries.setdefault(key, b)

    def get(self, family, backend, label):
        b = self.entries.get((family, backend, label))
        if b is None or b.get("error_occurred") or b.get("ms_median") is None:
            return None
        return b

    def floor_fraction(self, b):
        """bench_attention counts it; PyTorch's points give their K/V GB/s, taken over this run's probe."""
        if "floor_fraction" in b:
            return b["floor_fraction"]
        try:
            return b["GBps"] / float(self.context["read_bandwidth_GBps"])
        except (KeyError, ValueError, ZeroDivisionError):
            return None

    def header(self, shape=True):
        device = self.context.get("device", "unknown device")
        date = str(self.context.get("date", "unknown date"))[:10]
        try:
            probe = f"read probe {float(self.context['read_bandwidth_GBps']):.0f} GB/s"
        except (KeyError, ValueError):
            probe = "no read-probe bandwidth in the run"
        flush = self.context.get("l2_flush", "")
        flush = "a read" if "read" in flush else ("a memset" if "memset" in flush or "dirty" in flush else flush)
        line = f"{device}, {date}, {probe}"
        if flush:
            line += f", L2 emptied by {flush} before each timed step"
        return line + ("; Qwen3-8B attention shape (Hq 32, Hkv 8, head_dim 128), block size 16" if shape else "")



# ---- Cells. Each is a function (run, family, label) -> str.

def fmt_ms(ms):
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def fmt_fraction(x):
    return f"{x:.2f}" if x >= 0.01 else f"{x:.3f}"


def fmt_tflops(x):
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _at(family, label, at):
    return at(family, label) if at else (family, label)


def ms(backends, at=None):
    """Median ms of the first of `backends` that ran this case."""
    backends = [backends] if isinstance(backends, str) else backends

    def cell(run, family, label):
        f, lab = _at(family, label, at)
        if f is None:
            return DASH
        for be in backends:
            b = run.get(f, be, lab)
            if b is not None:
                return fmt_ms(b["ms_median"])
        return DASH
    return cell


def floor(backend):
    """Fraction of the floor; TFLOP/s for prefill, where bytes are not the limit."""
    def cell(run, family, label):
        b = run.get(family, backend, label)
        if b is None:
            return DASH
        if family == "prefill":
            return f"{fmt_tflops(b['TFLOPs'])} TFLOP/s" if "TFLOPs" in b else DASH
        return fmt_fraction(run.floor_fraction(b)) if run.floor_fraction(b) is not None else DASH
    return cell


def plain(backend):
    """The time of a plain read of the same bytes over the kernel's (decode-like cases only)."""
    def cell(run, family, label):
        b = run.get(family, backend, label)
        if b is None or family == "prefill" or "plain_read_fraction" not in b:
            return DASH
        return fmt_fraction(b["plain_read_fraction"])
    return cell


def speedup(backend, baselines):
    """Baseline time over this backend's time (first baseline that ran)."""
    def cell(run, family, label):
        b = run.get(family, backend, label)
        for base in baselines:
            a = run.get(family, base, label)
            if a is not None and b is not None:
                return f"{a['ms_median'] / b['ms_median']:.2f}x"
        return DASH
    return cell


def batch_of(label):
    m = re.search(r"batch:(\d+)", label)
    return m.group(1) if m else None


def decode_4096(family, label):
    """The same batch at 4096 tokens (decode family), where a 4096 window drops no key."""
    if family not in ("window", "long"):
        return None, None
    return "decode", f"batch:{batch_of(label)}/ctx:4096"


def same_case(family_map):
    """The same batch in another family (window -> long: the context without a window)."""
    def at(family, label):
        f = family_map.get(family, family)
        return f, label.split("/window:")[0]
    return at


# ---- What each stage shows.

def decode(b, ctx=4096):
    return (f"decode {b} x {ctx}", "decode", f"batch:{b}/ctx:{ctx}")


def long(b):
    return (f"decode {b} x 32768", "long", f"batch:{b}/ctx:32768")


MIXED = ("mixed: 2 prefill chunks + 30 decodes", "mixed", "chunks:2/decodes:30")


def prefill(n):
    return (f"prefill 1 x {n} causal", "prefill", f"batch:1/len:{n}")


STAGES = {
    "01_reference_gather": {
        "note": "Floor: the K/V bytes over the probe's bandwidth.",
        "columns": [("ms", ms("01_reference_gather")), ("fraction of floor", floor("01_reference_gather"))],
        "rows": [decode(1), decode(64), long(4), prefill(4096)],
    },
    "02_fused_paged": {
        "note": "Floor: the K/V bytes over the probe's bandwidth.",
        "columns": [("ms", ms("02_fused_paged")), ("fraction of floor", floor("02_fused_paged")),
                    ("stage 01 (ms)", ms("01_reference_gather"))],
        "rows": [decode(64), decode(256), long(4), prefill(16384)],
    },
    "03_gqa_packing": {
        "note": "Floor: the K/V bytes over the probe's bandwidth; \"of a plain read\": a bare streaming read "
                "of the same bytes, timed the same way, over the kernel's time.",
        "columns": [("ms", ms("03_gqa_packing")), ("fraction of floor", floor("03_gqa_packing")),
                    ("of a plain read", plain("03_gqa_packing")), ("stage 02 (ms)", ms("02_fused_paged"))],
        "rows": [decode(1), decode(4), decode(64), decode(256), long(4), MIXED, prefill(4096), prefill(16384)],
    },
    "04_split_kv": {
        "note": "Automatic plan. Floor: the K/V bytes over the probe's bandwidth; \"of a plain read\": a bare "
                "streaming read of the same bytes, timed the same way, over the kernel's time.",
        "columns": [("ms", ms("04_split_kv")), ("fraction of floor", floor("04_split_kv")),
                    ("of a plain read", plain("04_split_kv")), ("stage 03 (ms)", ms("03_gqa_packing"))],
        "rows": [decode(1), decode(4), decode(64), decode(256), long(1), long(4), long(16)],
    },
    "05_quantized_kv": {
        "note": "Each format's floor is its own cache bytes (codes + scales for 8-bit) over the probe's "
                "bandwidth. bf16: stage 04 (stage 03 where split-KV does not apply).",
        "columns": [("bf16 (ms)", ms(["04_split_kv", "03_gqa_packing"])),
                    ("INT8 (ms)", ms("05_quantized_kv_int8")), ("INT8 of floor", floor("05_quantized_kv_int8")),
                    ("FP8 (ms)", ms("05_quantized_kv_fp8")), ("FP8 of floor", floor("05_quantized_kv_fp8")),
                    ("INT8 speed-up", speedup("05_quantized_kv_int8", ["04_split_kv", "03_gqa_packing"]))],
        "rows": [decode(1), decode(4), decode(64), decode(256), long(1), long(4), MIXED, prefill(16384)],
    },
    "06_sliding_window": {
        "note": "Every stage 06 row runs with window 4096. Floor: the bytes of the keys inside the window "
                "over the probe's bandwidth. \"no window\": the same batch without a window (stage 04 for "
                "decodes, stage 03 otherwise); \"at 4096 tokens\": stage 06 on the same batch with "
                "4096-token contexts, where the window drops no key.",
        "columns": [("ms", ms("06_sliding_window")), ("fraction of floor", floor("06_sliding_window")),
                    ("of a plain read", plain("06_sliding_window")),
                    ("no window (ms)", ms(["04_split_kv", "03_gqa_packing"], at=same_case({"window": "long"}))),
                    ("at 4096 tokens (ms)", ms("06_sliding_window", at=decode_4096))],
        "rows": [("decode 4 x 32768", "window", "batch:4/ctx:32768/window:4096"),
                 ("decode 64 x 32768", "window", "batch:64/ctx:32768/window:4096"),
                 long(1), MIXED, prefill(16384)],
    },
}


# Stage 08: each case beside the same case without sinks. The backends differ per case: learned sinks alone
# run as 08_attention_sinks (over stage 04), sinks with a window as 08_sinks_window (over stage 06).
SINKS_CASES = {
    ("decode", "batch:64/ctx:4096"): ("04_split_kv", "08_attention_sinks"),
    ("gptoss", "layer:full/batch:64/ctx:4096"): ("04_split_kv", "08_attention_sinks"),
    ("gptoss", "layer:window128/batch:64/ctx:4096"): ("06_sliding_window", "08_sinks_window"),
    ("window", "batch:64/ctx:32768/window:4096"): ("06_sliding_window", "08_sinks_window"),
}


def sinks_cell(which, kind):
    """Column `kind` (backend, ms, floor) of the case's backend `which` (0: no sinks, 1: with sinks)."""
    def cell(run, family, label):
        backend = SINKS_CASES[(family, label)][which]
        if kind == "backend":
            return f"`{backend}`"
        return (ms if kind == "ms" else floor)(backend)(run, family, label)
    return cell


def sinks_cost(run, family, label):
    base, sinks = SINKS_CASES[(family, label)]
    return speedup(base, [sinks])(run, family, label).replace("x", "") if run.get(family, sinks, label) else DASH


def sinks_targets(run):
    """Stage 08's two targets (plots/summarize.py's bounds), judged on this run."""
    out = []
    base, sinks = (run.get("decode", b, "batch:64/ctx:4096") for b in ("04_split_kv", "08_attention_sinks"))
    if base and sinks:
        ratio = sinks["ms_median"] / base["ms_median"]
        met = "met" if ratio <= summarize.SINKS_MAX_TIME_RATIO else "not met"
        out.append(f"learned sinks cost at most {summarize.SINKS_MAX_TIME_RATIO - 1:.0%} at decode 64 x 4096 "
                   f"(Qwen3-8B): {ratio:.3f}x, {met}")
    oss = run.get("gptoss", "08_attention_sinks", "layer:full/batch:64/ctx:4096")
    if oss:
        frac = run.floor_fraction(oss)
        met = "met" if frac >= summarize.GPTOSS_MIN_FLOOR else "not met"
        out.append(f"the gpt-oss full layer with sinks at >= {summarize.GPTOSS_MIN_FLOOR} of its floor: "
                   f"{frac:.2f}, {met}")
    return "Targets: " + "; ".join(out) + "." if out else ""


STAGES["08_attention_sinks"] = {
    "note": "Decodes, 64 requests. gpt-oss: 64 q / 8 kv heads, head_dim 64, full layers and 128-token windows "
            "on alternate layers. `08_sinks_window`: learned sinks, 4 sink tokens and the window. Floor: the "
            "backend's own bytes (with a window: the window's and the sink tokens') over the probe's bandwidth; "
            "\"cost\": the time with sinks over the time without.",
    "columns": [("without sinks", sinks_cell(0, "backend")), ("ms", sinks_cell(0, "ms")),
                ("of floor", sinks_cell(0, "floor")),
                ("with sinks", sinks_cell(1, "backend")), ("ms", sinks_cell(1, "ms")),
                ("of floor", sinks_cell(1, "floor")), ("cost", sinks_cost)],
    "rows": [("Qwen3-8B, 64 x 4096", "decode", "batch:64/ctx:4096"),
             ("gpt-oss full layer, 64 x 4096", "gptoss", "layer:full/batch:64/ctx:4096"),
             ("gpt-oss window-128 layer, 64 x 4096", "gptoss", "layer:window128/batch:64/ctx:4096"),
             ("Qwen3-8B, 64 x 32768, window 4096", "window", "batch:64/ctx:32768/window:4096")],
    "summary": sinks_targets,
}


# ---- The top README: one row per case, run by the stage that teaches it, beside the vendor libraries.

# The stage each family's rows show (with a window: 06; learned sinks: 08). A label may carry a tag after "|"
# to tell two rows of one case apart: "|8-bit" is the case on stage 05's INT8 cache.
TOP_STAGE = {"decode": "04_split_kv", "long": "04_split_kv", "shapes": "04_split_kv", "mixed": "03_gqa_packing",
             "prefill": "03_gqa_packing", "window": "06_sliding_window", "gptoss": "08_attention_sinks"}
TOP_TAGGED = {"8-bit": "05_quantized_kv_int8"}


def top_stage(family, label):
    """(backend, case label) of a top README row."""
    case, _, tag = label.partition("|")
    return (TOP_TAGGED[tag] if tag else TOP_STAGE[family]), case


def top_cell(kind):
    def cell(run, family, label):
        be, case = top_stage(family, label)
        if kind == "backend":
            return f"`{be}`"
        return {"ms": ms(be), "floor": floor(be), "plain": plain(be)}[kind](run, family, case)
    return cell


def reference_ms(backend):
    def cell(run, family, label):
        return DASH if "|" in label else ms(backend)(run, family, label)
    return cell


def reference(backends):
    """The first of `backends` that ran the case: its ms and, in brackets, its fraction of the floor.
    A tagged row (another cache format) has no reference: the references read the bf16 cache."""
    def cell(run, family, label):
        if "|" in label:
            return DASH
        case = label
        b = next((run.get(family, be, case) for be in backends if run.get(family, be, case)), None)
        if b is None:
            return DASH
        if family == "prefill":
            return f"{fmt_ms(b['ms_median'])} ({b['TFLOPs']:.0f} TFLOP/s)" if "TFLOPs" in b else fmt_ms(b["ms_median"])
        frac = run.floor_fraction(b)
        return f"{fmt_ms(b['ms_median'])} ({frac:.2f})" if frac is not None else fmt_ms(b["ms_median"])
    return cell


TOP = {
    "note": "Each case on the stage that teaches it (decodes: stage 04; mixed batches and prefill: stage 03; "
            "windows: stage 06; the 8-bit row: stage 05's INT8 cache; gpt-oss: stage 08, learned sinks included), "
            "its fraction of the floor (the K/V bytes a read-once kernel loads, over the probe's bandwidth) and of a "
            "plain read (a bare streaming read of the same bytes, timed the same way, over the kernel's time). "
            "Beside it, ms (fraction of the floor): PyTorch's cuDNN SDPA on a contiguous cache with no block "
            "table (`torch_cudnn`) and cuDNN's fused attention over the same paged cache (`vendor_cudnn`).",
    "columns": [("stage", top_cell("backend")), ("ms", top_cell("ms")), ("fraction of floor", top_cell("floor")),
                ("of a plain read", top_cell("plain")), ("stage 01 (ms)", reference_ms("01_reference_gather")),
                ("torch_cudnn", reference(["torch_cudnn"])),
                ("vendor_cudnn", reference(["vendor_cudnn", "vendor_cudnn_window"]))],
    "rows": [decode(1), decode(64), decode(256),
             ("decode 64 x 4096, 8-bit cache", "decode", "batch:64/ctx:4096|8-bit"),
             long(1), long(4),
             ("decode 4 x 32768, window 4096", "window", "batch:4/ctx:32768/window:4096"),
             ("decode 64 x 32768, window 4096", "window", "batch:64/ctx:32768/window:4096"),
             MIXED, prefill(4096), prefill(16384),
             ("gpt-oss full layer with sinks, 64 x 4096", "gptoss", "layer:full/batch:64/ctx:4096"),
             ("Qwen3-235B shape (group 16), 64 x 4096", "shapes", "model:qwen3-235b/batch:64/ctx:4096"),
             ("Phi-3-mini shape (head_dim 96), 64 x 4096", "shapes", "model:phi3-mini/batch:64/ctx:4096")],
}


def table(run, spec):
    head = ["case"] + [c[0] for c in spec["columns"]]
    lines = [run.header(spec.get("shape", True)) + ". " + spec["note"], "",
             "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for title, family, label in spec["rows"]:
        cells = [title] + [fn(run, family, label) for _, fn in spec["columns"]]
        lines.append("| " + " | ".join(cells) + " |")
    summary = spec.get("summary", lambda run: "")(run)
    if summary:
        lines += ["", summary]
    return "\n".join(lines)


def block(body, source="bench/bench_attention's JSON"):
    return "\n".join([
        BEGIN,
        f"<!-- written by plots/update_readmes.py from {source}: change the script, not this table -->",
        body,
        END,
    ])


# ---- Stage 07, from bench_cascade's JSON (names family/backend/field:value/..., read by plot_cascade.py).

CASCADE_SHAPES = {"qwen3": "Qwen3-8B", "mha": "MHA 32/32"}


def cascade_table(doc):
    """The main case per shape and S, then the cost model's score over the grid and the target at S = 128."""
    runs = plot_cascade.entries(doc)
    ctx = Run(doc)
    try:
        read_gbps = float(doc.get("context", {}).get("read_bandwidth_GBps", 0) or 0)
    except ValueError:
        read_gbps = 0.0
    main = {}
    for (family, backend, fields), b in runs.items():
        if family == "cascade_main" and plot_cascade.ok(b):
            key = (plot_cascade.field(fields, "shape"), int(plot_cascade.field(fields, "P")),
                   int(plot_cascade.field(fields, "B")), int(plot_cascade.field(fields, "S")))
            main.setdefault(key, {})[(backend, plot_cascade.field(fields, "layout"))] = b
    if not main:
        raise SystemExit("cascade JSON: no cascade_main benchmark ran")
    P, B = next(iter(sorted(main)))[1:3]
    lines = [ctx.header(shape=False) + f" (`bench/bench_cascade`). B = {B} decodes share a P = {P}-token prefix; "
             "each has S positions of its own and one decode token. Shapes: Qwen3-8B (32 q / 8 kv heads) and MHA "
             "(32 / 32), head_dim 128, block size 16. Floor: the cascade's bytes (the prefix once + every "
             "request's own positions) over the probe's bandwidth. *07 cascade*: `plan()`'s default (the "
             "going-further prefix pass); *07 classic*: the stage's own prefix pass (stage 03's tiles); *04 shared*: stage 04 over the same physically shared blocks (the L2 may serve "
             "repeats); *04 private*: each request with its own copy.", "",
             "| shape | S | floor µs | 07 cascade ms | 07 classic ms | 04 shared ms | 04 private ms | "
             "vs 04 shared | vs 04 private | of floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    targets = []
    for key in sorted(main, key=lambda k: (list(CASCADE_SHAPES).index(k[0]) if k[0] in CASCADE_SHAPES else 9, k)):
        shape, _, _, S = key
        by = main[key]
        c, classic = by.get(("07_cascade", "shared")), by.get(("07_classic", "shared"))
        s04, p04 = by.get(("04_split_kv", "shared")), by.get(("04_split_kv", "private"))
        any_run = next(b for b in (c, classic, s04, p04) if b is not None)
        floor_us = any_run["kv_bytes"] / (read_gbps * 1e9) * 1e6 if read_gbps else None

        def cell_ms(b):
            return fmt_ms(b["ms_median"]) if b else DASH

        def vs(base):
            return f"{base['ms_median'] / c['ms_median']:.1f}x" if base and c else DASH
        frac = f"{c['floor_fraction']:.2f}" if c and "floor_fraction" in c else DASH
        name = CASCADE_SHAPES.get(shape, shape)
        lines.append(f"| {name} | {S} | {f'{floor_us:.1f}' if floor_us else DASH} | {cell_ms(c)} | "
                     f"{cell_ms(classic)} | {cell_ms(s04)} | {cell_ms(p04)} | {vs(s04)} | {vs(p04)} | {frac} |")
        if S == plot_cascade.TARGET_S and floor_us and c:
            targets.append((name, plot_cascade.FLOOR_TARGET * floor_us, c["ms_median"] * 1e3))
    cells = plot_cascade.grid_cells(runs)
    judged, faster, _, worst, _ = plot_cascade.dispatch_score(cells)
    lines.append("")
    if judged:
        axes = [sorted({k[i] for k in cells}) for i in (1, 2, 3)]
        grid = " × ".join(f"{n} ∈ {{{', '.join(map(str, v))}}}" for n, v in zip("PBS", axes))
        met = lambda good: "met" if good else "not met"  # noqa: E731
        lines.append(f"The cost model (`07_auto`, measured in the same run) over the grid {grid}, Qwen3-8B shape: "
                     f"the faster path in {faster} of {judged} cells (target ≥ "
                     f"{plot_cascade.FASTER_TARGET:.0%}: {met(faster / judged >= plot_cascade.FASTER_TARGET)}), "
                     f"its worst pick {worst:.2f}x the faster path's time (target ≤ "
                     f"{plot_cascade.SLOWDOWN_TARGET:.2f}x: {met(worst <= plot_cascade.SLOWDOWN_TARGET)}).")
    if targets:
        lines.append(f"The target at S = {plot_cascade.TARGET_S}, the cascade within {plot_cascade.FLOOR_TARGET}x "
                     "of its floor: " + "; ".join(
                         f"{name} ≤ {limit:.1f} µs, measured {got:.1f} µs ({'met' if got <= limit else 'not met'})"
                         for name, limit, got in targets) + ".")
    return "\n".join(lines)


# ---- The files to write.

def summary_text(bench, torch):
    """plots/summarize.py's full table of the run, as run_gpu.sh writes it to summary.md."""
    args = [sys.executable, str(ROOT / "plots" / "summarize.py"), "--bench", str(bench)]
    if torch:
        args += ["--torch", str(torch)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def targets(args):
    """(path, where, new text or None to leave the file alone), for every file the run writes."""
    with open(args.bench) as f:
        run = Run(json.load(f))
    if not run.entries:
        raise SystemExit(f"{args.bench}: no benchmarks in this file")
    torch = args.torch if args.torch and pathlib.Path(args.torch).exists() else None
    if torch:
        with open(torch) as f:
            run.add(json.load(f))

    def wanted(name):
        return not args.stage or any(name == s or name.startswith(s.zfill(2) + "_") for s in args.stage)

    def readme(path, where, body_of):
        if not path.exists():
            print(f"{where}: missing, skipped", file=sys.stderr)
            return None
        old = path.read_text()
        new = rewrite(old, body_of(), where)
        if new is None:
            print(f"{where}: no results markers, left alone", file=sys.stderr)
            return None
        return path, where, old, new

    out = []
    for name, spec in STAGES.items():
        if wanted(name):
            out.append(readme(ROOT / "steps" / name / "README.md", f"steps/{name}/README.md",
                              lambda spec=spec: block(table(run, spec))))
    if wanted("07_cascade"):
        with open(args.cascade) as f:
            cascade = json.load(f)
        out.append(readme(ROOT / "steps" / "07_cascade" / "README.md", "steps/07_cascade/README.md",
                          lambda: block(cascade_table(cascade), "bench/bench_cascade's JSON")))
    if not args.stage or "top" in args.stage:
        out.append(readme(ROOT / "README.md", "README.md", lambda: block(table(run, TOP))))
        summary = pathlib.Path(args.bench).resolve().parent / "summary.md"
        old = summary.read_text() if summary.exists() else ""
        out.append((summary, str(summary.relative_to(ROOT)) if summary.is_relative_to(ROOT) else str(summary),
                    old, summary_text(args.bench, torch)))
    return [t for t in out if t is not None]


def rewrite(text, new_block, where):
    begins, ends = text.count(BEGIN), text.count(END)
    if begins == 0 and ends == 0:
        return None
    if begins != 1 or ends != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{where}: expected one '{BEGIN}' line followed by one '{END}' line")
    start = text.index(BEGIN)
    stop = text.index(END) + len(END)
    return text[:start] + new_block + text[stop:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    h200 = ROOT / "plots" / "h200"
    ap.add_argument("bench", nargs="?", default=str(h200 / "bench.json"),
                    help="bench_attention's JSON (default: plots/h200/bench.json)")
    ap.add_argument("--torch", default=str(h200 / "torch.json"),
                    help="bench/torch_reference.py's JSON, used where present (default: plots/h200/torch.json)")
    ap.add_argument("--cascade", default=str(h200 / "cascade.json"),
                    help="bench_cascade's JSON, for stage 07 (default: plots/h200/cascade.json)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table is out of date")
    ap.add_argument("--stage", action="append", default=[],
                    help="only this stage (its number or name, or 'top' for README.md); may be repeated")
    args = ap.parse_args()

    stale, written = [], 0
    for path, where, old, new in targets(args):
        if new == old:
            continue
        if args.check:
            stale.append(where)
        else:
            path.write_text(new)
            written += 1
            print(f"{where}: rewritten")
    if args.check:
        if stale:
            print("out of date against the JSON: " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    if not written:
        print("every table already matches the JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
