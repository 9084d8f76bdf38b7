#!/usr/bin/env python3
"""Benchmark JSON -> the results table of each stage's README.

Reads the Google Benchmark JSON that bench/bench_attention writes (benchmark
names family/backend/label, e.g. decode/04_split_kv/batch:64/ctx:4096; counters
ms_median, floor_fraction, plain_read_fraction, TFLOPs; context device, date,
read_bandwidth_GBps, l2_flush) and rewrites the part of steps/NN_name/README.md
between the lines

    <!-- results:begin -->
    <!-- results:end -->

with one table of that stage's backends on a few cases, headed by a line that
names the device, the date and the read-probe bandwidth of the run. A README
without the markers is left alone. Running it twice on the same JSON changes
nothing.

    python3 plots/update_readmes.py [BENCH_JSON] [--check] [--stage 04 ...]

BENCH_JSON defaults to plots/h200/bench.json (the last committed run). --check
writes nothing and exits 1 if any README's table differs from what the JSON
gives.
"""
import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
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

    def get(self, family, backend, label):
        b = self.entries.get((family, backend, label))
        if b is None or b.get("error_occurred") or b.get("ms_median") is None:
            return None
        return b

    def header(self):
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
        return line + "; Qwen3-8B attention shape (Hq 32, Hkv 8, head_dim 128), block size 16"



# ---- Cells. Each is a function (run, family, label) -> str.

def fmt_ms(ms):
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


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
            return f"{b['TFLOPs']:.0f} TFLOP/s" if "TFLOPs" in b else DASH
        return f"{b['floor_fraction']:.2f}"
    return cell


def plain(backend):
    """The time of a plain read of the same bytes over the kernel's (decode-like cases only)."""
    def cell(run, family, label):
        b = run.get(family, backend, label)
        if b is None or family == "prefill" or "plain_read_fraction" not in b:
            return DASH
        return f"{b['plain_read_fraction']:.2f}"
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


def table(run, spec):
    head = ["case"] + [c[0] for c in spec["columns"]]
    lines = [run.header() + ". " + spec["note"], "",
             "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for title, family, label in spec["rows"]:
        cells = [title] + [fn(run, family, label) for _, fn in spec["columns"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def block(run, spec):
    return "\n".join([
        BEGIN,
        "<!-- written by plots/update_readmes.py from bench/bench_attention's JSON: change the script, not this table -->",
        table(run, spec),
        END,
    ])


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
    ap.add_argument("bench", nargs="?", default=str(ROOT / "plots" / "h200" / "bench.json"),
                    help="bench_attention's JSON (default: plots/h200/bench.json)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table is out of date")
    ap.add_argument("--stage", action="append", default=[],
                    help="only this stage (its number or name); may be repeated")
    args = ap.parse_args()

    with open(args.bench) as f:
        run = Run(json.load(f))
    if not run.entries:
        raise SystemExit(f"{args.bench}: no benchmarks in this file")

    stale, written = [], 0
    for name, spec in STAGES.items():
        if args.stage and not any(name == s or name.startswith(s.zfill(2) + "_") for s in args.stage):
            continue
        readme = ROOT / "steps" / name / "README.md"
        where = f"steps/{name}/README.md"
        if not readme.exists():
            print(f"{where}: missing, skipped", file=sys.stderr)
            continue
        old = readme.read_text()
        new = rewrite(old, block(run, spec), where)
        if new is None:
            print(f"{where}: no results markers, left alone", file=sys.stderr)
            continue
        if new == old:
            continue
        if args.check:
            stale.append(where)
        else:
            readme.write_text(new)
            written += 1
            print(f"{where}: table rewritten")
    if args.check:
        if stale:
            print("out of date against " + pathlib.Path(args.bench).name + ": " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    if not written:
        print("every table already matches the JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
