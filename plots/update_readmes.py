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
  - steps/NN_name/README.md: that stage's backends on a few cases, from the
    bench JSON (stage 08: each case beside the same case without sinks, the
    sinks' cost over the decode sweep and its two targets); stage 07's from the
    cascade JSON: the main case on the stage's own path (07_cascade against
    07_plain and stage 04 on shared and private blocks) with the engine's
    cascade (engine_cascade, going further) as one more column, then the two
    cost models' scores over the grid (07_auto, the stage's; engine_auto, the
    engine's, by tests/test_cascade_model.cpp's bounds), the grid cells where
    plain wins, the target at S = 128 and the fixed part of a step, each by
    plots/plot_cascade.py's rules. A run of the older bench_cascade (07_classic,
    e.g. plots/h200/cascade.json) is read with its names mapped to today's and
    the table says so; a run without the grid gives the main case and names
    what is missing; one without cascade_main's 07_cascade is refused;
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
gives. A table that the run leaves mostly blank (a partial run) is written
anyway, with a warning on stderr naming it: commit tables of a full run only.
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


def sinks_sweep(run):
    """The learned sink's cost over the decode sweep (Qwen3-8B, 4096 tokens): 08_attention_sinks over 04_split_kv."""
    pairs = []
    for family, backend, label in list(run.entries):
        if family == "decode" and backend == "04_split_kv" and label.endswith("/ctx:4096") and batch_of(label):
            base, sinks = run.get(family, backend, label), run.get(family, "08_attention_sinks", label)
            if base and sinks:
                pairs.append((int(batch_of(label)), base["ms_median"], sinks["ms_median"]))
    if len(pairs) < 2:
        return ""
    pairs.sort()
    (b0, base0, sinks0), rest = pairs[0], pairs[1:]
    ratios = [s / b for _, b, s in rest]
    return (f"Over the decode sweep (Qwen3-8B, {b0} to {rest[-1][0]} requests x 4096 tokens), the time with learned "
            f"sinks over the time without is {min(ratios):.3f}-{max(ratios):.3f}x from {rest[0][0]} requests up; at "
            f"{b0} request{'' if b0 == 1 else 's'}, where a step takes {base0 * 1e3:.1f} µs, the sinks add "
            f"{(sinks0 - base0) * 1e3:.2f} µs ({sinks0 / base0:.3f}x).")


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
    "summary": lambda run: "\n".join(line for line in (sinks_sweep(run), sinks_targets(run)) if line),
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


# Stage 09: the prefill tile on TMA, mbarriers and wgmma, beside stage 03's tile and cuDNN, with the issue's
# targets judged on the run (ratios against PyTorch's cuDNN SDPA of the same run).
G16_D64, G16_D256 = "batch:1/len:4096/model:g16-d64", "batch:1/len:4096/model:g16-d256"
BLOCK256, CONTIGUOUS = "batch:1/len:4096/block:256", "batch:1/len:4096/block:256/contiguous"
HOPPER_TARGETS = [("batch:1/len:4096", 1.0), ("batch:1/len:16384", 1.0), (G16_D64, 0.9), (G16_D256, 0.9)]
HOPPER_MAX_PAGED_COST = 1.05


def of_torch(backend):
    """PyTorch's cuDNN SDPA time over this backend's time, on the same case (prefill: the same shape)."""
    def cell(run, family, label):
        b, t = run.get(family, backend, label), run.get(family, "torch_cudnn", label)
        return f"{t['ms_median'] / b['ms_median']:.2f}" if b and t else DASH
    return cell


def hopper_targets(run):
    out = []
    for label, bound in HOPPER_TARGETS:
        b, t = run.get("prefill", "09_hopper_pipeline", label), run.get("prefill", "torch_cudnn", label)
        if b and t:
            ratio = t["ms_median"] / b["ms_median"]
            out.append(f"{label.replace('batch:1/len:', '1 x ').replace('/model:', ', ')} at >= {bound:.1f}x cuDNN: "
                       f"{ratio:.2f}x, {'met' if ratio >= bound else 'not met'}")
    paged, flat = (run.get("prefill", "09_hopper_pipeline", lab) for lab in (BLOCK256, CONTIGUOUS))
    if paged and flat:
        cost = paged["ms_median"] / flat["ms_median"]
        out.append(f"the paged cache (shuffled 256-token blocks) at most {HOPPER_MAX_PAGED_COST - 1:.0%} over one "
                   f"contiguous run: {cost:.3f}x, {'met' if cost <= HOPPER_MAX_PAGED_COST else 'not met'}")
    return "Targets: " + "; ".join(out) + "." if out else ""


def hopper_unmeasured(run):
    """The stage's table when the committed run predates the stage: a sentence, not a table of dashes."""
    return ("This run has no `09_hopper_pipeline` rows: the committed measurements predate the stage (its H100 "
            "runs are in the [lab notes](../../notes/09_hopper_pipeline.md)). On an H100 or H200, "
            "`bash cmake/course.sh backends gpu` times it, and `bench/run_gpu.sh` writes the JSON this table is "
            "made from.")


STAGES["09_hopper_pipeline"] = {
    "note": "Causal prefill (one prompt) and the mixed batch. TFLOP/s counts the causal half, 4 x head_dim x Hq x "
            "n (n + 1) / 2 flops; the mixed row gives its fraction of the floor instead. \"of cuDNN\": PyTorch's "
            "cuDNN SDPA on a contiguous cache of the same shape (`torch_cudnn`) over this stage's time. Group 16: "
            "64 q / 4 kv heads at head_dim 64, 32 q / 2 kv heads at head_dim 256. Block 256: the same prompt on "
            "256-token blocks, shuffled through the block table, then in one contiguous run.",
    "columns": [("ms", ms("09_hopper_pipeline")), ("TFLOP/s (mixed: of floor)", floor("09_hopper_pipeline")),
                ("stage 03 (ms)", ms("03_gqa_packing")), ("speed-up over 03", speedup("09_hopper_pipeline", ["03_gqa_packing"])),
                ("torch_cudnn", reference(["torch_cudnn"])), ("of cuDNN", of_torch("09_hopper_pipeline")),
                ("vendor_cudnn", reference(["vendor_cudnn"]))],
    "rows": [prefill(4096), prefill(16384),
             ("prefill 1 x 4096, group 16, head_dim 64", "prefill", G16_D64),
             ("prefill 1 x 4096, group 16, head_dim 256", "prefill", G16_D256),
             ("prefill 1 x 4096, 256-token blocks, shuffled", "prefill", BLOCK256),
             ("prefill 1 x 4096, 256-token blocks, contiguous", "prefill", CONTIGUOUS),
             MIXED],
    "measured_by": "09_hopper_pipeline",
    "unmeasured": hopper_unmeasured,
    "summary": hopper_targets,
}


WARNINGS = []  # printed by main(): tables that a partial run leaves mostly blank


def table(run, spec, where=""):
    if "unmeasured" in spec and not any(k[1] == spec["measured_by"] for k in run.entries):
        return run.header(spec.get("shape", True)) + ". " + spec["unmeasured"](run)
    head = ["case"] + [c[0] for c in spec["columns"]]
    note = spec["note"]
    if "`vendor_cudnn`" in note and not any(k[1].startswith("vendor_cudnn") for k in run.entries):
        note += " This run has no `vendor_cudnn` rows (the build found no cuDNN or cudnn-frontend: see \"The vendor backend\")."
    lines = [run.header(spec.get("shape", True)) + ". " + note, "",
             "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    blank = 0
    for title, family, label in spec["rows"]:
        cells = [title] + [fn(run, family, label) for _, fn in spec["columns"]]
        blank += all(c == DASH or c.startswith("`") for c in cells[1:])
        lines.append("| " + " | ".join(cells) + " |")
    if blank and where:
        WARNINGS.append(f"{where}: {blank} of {len(spec['rows'])} rows have no measurement in this run")
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
CASCADE_VARIANTS = {"07_cascade": "07 cascade", "engine_cascade": "the engine"}


def shape_order(shape):
    return list(CASCADE_SHAPES).index(shape) if shape in CASCADE_SHAPES else len(CASCADE_SHAPES)


def cascade_table(doc):
    """Stage 07's main case per shape and S (the stage's own path, stage 04 and the engine beside it), then
    the two cost models' scores over the grid, where plain wins, the target at S = 128 and the fixed part."""
    pc = plot_cascade
    runs = pc.entries(doc)
    ctx = Run(doc)
    try:
        read_gbps = float(doc.get("context", {}).get("read_bandwidth_GBps", 0) or 0)
    except ValueError:
        read_gbps = 0.0
    rows, borrowed = pc.main_cells(runs)
    main = {key: {k: b for k, b in by.items() if pc.ok(b)} for key, by in rows.items()}
    main = {key: by for key, by in main.items() if by}
    if not main:
        raise SystemExit("cascade JSON: no cascade_main benchmark ran (bench_cascade's main case, which stage 07's "
                         "table shows: run bench_cascade without --benchmark_filter, or with cascade_main)")
    if not any(("07_cascade", "shared") in by for by in main.values()):
        found = sorted({backend for by in main.values() for backend, _ in by})
        raise SystemExit("cascade JSON: cascade_main has no 07_cascade entry (stage 07's own cascade, which its "
                         f"README's table measures); the variants it has: {', '.join(found)}"
                         + (" (names mapped from the older bench_cascade's)" if pc.is_legacy(doc) else ""))
    P, B = next(iter(sorted(main)))[1:3]
    plain_borrowed = any(backend == "07_plain" for _, backend in borrowed)
    plain_any = any(("07_plain", "shared") in by for by in main.values())
    plain_src = ("; timed in the grid, so only for its Qwen3-8B shape" if plain_borrowed else
                 "" if plain_any else "; timed in the grid only, which this run lacks")
    smoke = str(doc.get("context", {}).get("flavor", "")).startswith("cpu")
    header = (ctx.header(shape=False) + f" (`bench/bench_cascade`). B = {B} decodes share a P = {P}-token prefix, "
              "each with S positions of its own and one decode token; Qwen3-8B (32 q / 8 kv heads) and MHA "
              "(32 / 32), head_dim 128, block size 16. *floor*: the cascade's bytes (the prefix once + each "
              "request's own positions) over the probe's bandwidth. This stage's `plan()` + `forward()`: "
              "*07 cascade* forced (`force = 1`: the prefix pass, on stage 03's tiles, reads the prefix once for "
              "the group), *07 plain* forced (`force = 0`: each request reads the whole prefix"
              f"{plain_src}). Stage 04 on the same batch: *04 shared* over the same shared blocks (the L2 may "
              "serve the repeats), *04 private* with a copy of the prefix per request. *vs X*: X's time over "
              "07 cascade's; *of floor*: the floor over 07 cascade's time. *engine*: not this stage's path: the "
              "engine's forced cascade (`engine::plan_cascade` + `run_cascade`), its prefix pass on Hopper's "
              "warpgroup MMA (wgmma).")
    if smoke:
        header += " A CPU smoke run (smaller head counts): its timings mean nothing."
    if pc.is_legacy(doc):
        header += f" Note: {pc.LEGACY_NOTE_SHORT}."
    lines = [header, "",
             "| shape | S | floor µs | 07 cascade ms | 07 plain ms | 04 shared ms | 04 private ms | vs 07 plain | "
             "vs 04 shared | vs 04 private | of floor | engine ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    targets = {}
    for key in sorted(main, key=lambda k: (shape_order(k[0]), k)):
        shape, _, _, S = key
        by = main[key]
        c, plain = by.get(("07_cascade", "shared")), by.get(("07_plain", "shared"))
        s04, p04 = by.get(("04_split_kv", "shared")), by.get(("04_split_kv", "private"))
        engine = by.get(("engine_cascade", "shared"))
        any_run = next(iter(by.values()))
        floor_us = any_run["kv_bytes"] / (read_gbps * 1e9) * 1e6 if read_gbps else None

        def cell_ms(b):
            return fmt_ms(b["ms_median"]) if b else DASH

        def vs(base):
            return f"{base['ms_median'] / c['ms_median']:.1f}x" if base and c else DASH
        frac = f"{c['floor_fraction']:.2f}" if c and "floor_fraction" in c and read_gbps else DASH
        name = CASCADE_SHAPES.get(shape, shape)
        lines.append(f"| {name} | {S} | {f'{floor_us:.1f}' if floor_us else DASH} | {cell_ms(c)} | "
                     f"{cell_ms(plain)} | {cell_ms(s04)} | {cell_ms(p04)} | {vs(plain)} | {vs(s04)} | {vs(p04)} | "
                     f"{frac} | {cell_ms(engine)} |")
        if S == pc.TARGET_S and floor_us:
            targets[name] = (pc.FLOOR_TARGET * floor_us,
                             [(label, by[(be, "shared")]["ms_median"] * 1e3) for be, label in CASCADE_VARIANTS.items()
                              if (be, "shared") in by])
    lines.append("")
    met = lambda good: "met" if good else "not met"  # noqa: E731
    cells = pc.grid_cells(runs)
    # cascade_fit only adds the MHA shape's fixed part (the last line), and the older bench ran it apart.
    missing = pc.missing_families(runs, ("cascade_grid",) if pc.is_legacy(doc) else ("cascade_grid", "cascade_fit"))
    if missing:
        lines.append(missing + " Run `bench_cascade` without a filter for what is missing here.")
        WARNINGS.append(f"steps/07_cascade/README.md: {missing.replace('`', '')}")
    stage, engine = pc.dispatch_score(cells, pc.STAGE_MODEL), pc.dispatch_score(cells, pc.ENGINE_MODEL)
    if stage.judged or engine.judged or engine.unrecorded:
        judged_keys = [k for k, *_ in pc.dispatch_picks(cells, pc.STAGE_MODEL)] or list(cells)
        axes = [sorted({k[i] for k in judged_keys}) for i in (1, 2, 3)]
        grid = " × ".join(f"{n} ∈ {{{', '.join(map(str, v))}}}" for n, v in zip("PBS", axes))
        parts = []
        if stage.judged:
            parts.append(f"this stage's (`07_auto`, `force = -1`: TODO 4's `choose_path`) the faster in "
                         f"{stage.faster} of {stage.judged} cells (target ≥ {pc.FASTER_TARGET:.0%}: "
                         f"{met(stage.fraction_met())}), worst pick {stage.worst_chosen:.2f}x the faster path's "
                         f"time (target ≤ {pc.SLOWDOWN_TARGET:.2f}x: {met(stage.slowdown_met())})")
        else:
            parts.append("this stage's (`07_auto`) is not scored: the run lacks its forced paths or its pick")
        stand_in = "" if pc.is_legacy(doc) else ", which stands in for the engine's untimed plain path"
        if engine.judged:
            parts.append(f"the engine's (`engine_auto`, against the engine's cascade and 07 plain{stand_in}) "
                         f"{engine.faster} of {engine.judged} (target ≥ {pc.ENGINE_FASTER[0]} of "
                         f"{pc.ENGINE_FASTER[1]}, `tests/test_cascade_model.cpp`: {met(engine.fraction_met())}), "
                         f"worst {engine.worst_chosen:.2f}x (≤ {pc.SLOWDOWN_TARGET:.2f}x: "
                         f"{met(engine.slowdown_met())})")
        elif engine.unrecorded:
            parts.append(f"the engine's (`engine_auto`) ran in {engine.unrecorded} cells but does not record which "
                         "path it chose (no `cascaded_groups` counter), so it is not scored")
        lines.append(f"Cost models over the grid {grid} (Qwen3-8B), each pick against the faster forced path of "
                     "its cell: " + "; ".join(parts) + ".")
        wins = pc.plain_wins(cells, pc.STAGE_MODEL)
        if stage.judged or wins:
            lines.append(f"Where 07 plain beat 07 cascade by more than {pc.TIE:.0%}: {pc.cells_phrase(wins)}."
                         if wins else f"07 cascade was faster than 07 plain, or within {pc.TIE:.0%}, in every cell.")
    elif cells:
        lines.append("The grid ran without both forced paths and a cost model's pick in any cell: the cost models "
                     "are not scored.")
    if targets:
        lines.append(f"The target at S = {pc.TARGET_S}, the cascade within {pc.FLOOR_TARGET}x of its floor: " +
                     "; ".join(f"{name} ≤ {limit:.1f} µs: " +
                               ", ".join(f"{label} {got:.1f} µs ({met(got <= limit)})" for label, got in got_by)
                               for name, (limit, got_by) in targets.items()) + ".")
    fixed = [(label, CASCADE_SHAPES.get(shape, shape), pc.fixed_part(runs, backend, shape, B))
             for backend, label in CASCADE_VARIANTS.items()
             for shape in sorted({k[0] for k in main}, key=shape_order)]
    fixed = [f for f in fixed if f[2] is not None]
    if fixed:
        lines.append(f"Paid by every step whatever P and S are (the fixed part of a least-squares fit, time = "
                     f"fixed + P × a + S × b, over the cells with P ≥ 512 at B = {B} of the grid and "
                     "`cascade_fit`; "
                     "`plots/plot_cascade.py`): " +
                     "; ".join(f"{label}, {shape}: {us:.1f} µs" for label, shape, us in fixed) + ".")
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
                              lambda spec=spec, name=name: block(table(run, spec, f"steps/{name}/README.md"))))
    if wanted("07_cascade"):
        with open(args.cascade) as f:
            cascade = json.load(f)
        out.append(readme(ROOT / "steps" / "07_cascade" / "README.md", "steps/07_cascade/README.md",
                          lambda: block(cascade_table(cascade), "bench/bench_cascade's JSON")))
    if not args.stage or "top" in args.stage:
        out.append(readme(ROOT / "README.md", "README.md", lambda: block(table(run, TOP, "README.md"))))
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
    files = targets(args)
    for warning in WARNINGS:
        print(f"warning: {warning} (a partial run?)", file=sys.stderr)
    for path, where, old, new in files:
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
