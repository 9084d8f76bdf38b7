#!/usr/bin/env python3
"""Mutation testing of the course's reference code (solutions/ and common/).

Each mutant in mutants.py is one small, deliberate bug: an exact `find`
snippet of one file and its `replace`. A mutant is *killed* when the tests of
its stage fail (or crash, or time out) with the bug in place, and *survives*
when they still pass: then either the tests miss a way of getting the stage
wrong, or the mutant is equivalent (it changes no observable result; its entry
says why, and it is left out of the kill rate). A mutant that does not compile
is invalid: it is reported apart and makes the run fail, so that the list gets
fixed instead of counting as a kill.

The mutants run in a scratch copy of the repository (git's tracked and
untracked-but-not-ignored files, as they are in the working tree now), with a
build directory of its own: the copy is synced once, then each mutant writes
its one file, rebuilds only its stage's test target (an incremental build),
runs it, and puts the file back. The working tree is never written. A
mutant marked flavor="sanitizers" (its only effect is an out-of-bounds access)
is judged in a second build with AddressSanitizer and UBSan, as CI's
cpu-sanitizers job builds the tests.

    python3 tools/mutation/mutate.py                     # every mutant
    python3 tools/mutation/mutate.py --subset ci         # the small fixed subset (ctest label mutation-subset)
    python3 tools/mutation/mutate.py --stage 06          # one stage's mutants (or: --stage common)
    python3 tools/mutation/mutate.py --only 06-span-32bit,08-no-sink
    python3 tools/mutation/mutate.py --check             # only check that every snippet matches once
    python3 tools/mutation/mutate.py --list              # print the mutants
    python3 tools/mutation/mutate.py --rev HEAD          # the committed tree, not the working tree's files

Results: a markdown table (printed, and report.md) and report.json in the
scratch directory (--report-dir to put them elsewhere). The exit status is 0
only when every snippet matched once, the unmutated tests passed, no mutant
failed to build and no non-equivalent mutant survived (--allow-survivors
reports survivors without failing).
"""
import argparse
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def load_mutants(path):
    spec = importlib.util.spec_from_file_location("mutants", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MUTANTS, mod.SUBSETS


def stage_names(root):
    """'01' -> '01_reference_gather', from the stages under solutions/."""
    return {p.name[:2]: p.name for p in sorted((root / "solutions").iterdir())
            if p.is_dir() and re.match(r"\d\d_", p.name)}


def check_mutants(mutants, root, stages):
    """Every entry is well formed and its snippet occurs exactly once. Returns the problems."""
    problems, seen = [], set()
    required = ("id", "stage", "file", "find", "replace", "what")
    for m in mutants:
        mid = m.get("id", "?")
        missing = [k for k in required if k not in m]
        if missing:
            problems.append(f"{mid}: missing {', '.join(missing)}")
            continue
        if mid in seen:
            problems.append(f"{mid}: the id repeats")
        seen.add(mid)
        if m["find"] == m["replace"]:
            problems.append(f"{mid}: find and replace are the same")
        if m.get("flavor", "release") not in FLAVORS:
            problems.append(f"{mid}: no build flavor {m['flavor']} (have: {', '.join(FLAVORS)})")
        for s in m.get("tests", [m["stage"]]):
            if s not in stages:
                problems.append(f"{mid}: no stage {s} under solutions/ to test it with")
        path = root / m["file"]
        if not path.is_file():
            problems.append(f"{mid}: {m['file']} does not exist (moved?)")
            continue
        n = path.read_text().count(m["find"])
        if n != 1:
            problems.append(f"{mid}: its snippet occurs {n} times in {m['file']}, not once: "
                            f"the code moved or changed; update the mutant's find (and replace)\n"
                            f"    find: {m['find']!r}")
    return problems


def tracked_files(root):
    """The repository's files as the working tree has them: tracked, and
    untracked but not ignored (new files not yet committed)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    names = sorted({n for n in out.decode().split("\0") if n})
    return [n for n in names if (root / n).is_file() and not (root / n).is_symlink()]


def export_rev(repo, rev, dst):
    """Writes the files of git revision rev into dst; returns their names."""
    dst.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"mutate.py: git archive {rev} failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive.stdout, check=True)
    return sorted(str(p.relative_to(dst).as_posix()) for p in dst.rglob("*") if p.is_file() and not p.is_symlink())


def sync_copy(root, names, dst):
    """Makes dst a copy of root's files `names`. Unchanged files keep their
    timestamps, so the scratch build stays incremental; changed ones get a new one."""
    dst.mkdir(parents=True, exist_ok=True)
    keep = set(names)
    copied = 0
    for n in names:
        src, out = root / n, dst / n
        data = src.read_bytes()
        if out.is_file() and out.read_bytes() == data:
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        shutil.copymode(src, out)
        copied += 1
    removed = 0
    for p in sorted(dst.rglob("*"), reverse=True):
        rel = p.relative_to(dst).as_posix()
        if p.is_file() and rel not in keep:
            p.unlink()
            removed += 1
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    return copied, removed


def run(cmd, timeout=None, cwd=None):
    """(returncode, output, timed out). A timeout kills the process group."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out, True


# The builds a mutant can be judged in. release: the default, as the test
# suite runs. sanitizers: AddressSanitizer + UndefinedBehaviorSanitizer, as CI's
# cpu-sanitizers preset builds the same tests; for the mutants whose only
# effect is an out-of-bounds access or an undefined operation, which a release
# build's results do not show.
FLAVORS = {
    "release": ["-DCMAKE_BUILD_TYPE=Release"],
    "sanitizers": ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG",
                   "-DPA_ASAN=ON", "-DPA_UBSAN=ON"],
}


class Scratch:
    """The scratch copy (one source tree) and one build directory per flavor."""

    def __init__(self, path, jobs, cmake_args):
        self.path = path
        self.src = path / "src"
        self.jobs = jobs
        self.cmake_args = cmake_args
        self.configured = set()

    def build_dir(self, flavor):
        return self.path / ("build" if flavor == "release" else f"build-{flavor}")

    def configure(self, flavor):
        build = self.build_dir(flavor)
        if flavor in self.configured or (build / "build.ninja").exists():
            self.configured.add(flavor)
            return
        rc, out, _ = run(["cmake", "-S", str(self.src), "-B", str(build), "-G", "Ninja", "-DPA_GPU=OFF",
                          *FLAVORS[flavor], *self.cmake_args])
        if rc != 0:
            sys.exit(f"mutate.py: configuring the scratch copy ({flavor}) failed:\n{tail(out, 60)}")
        self.configured.add(flavor)

    def build_target(self, flavor, target):
        self.configure(flavor)
        rc, out, _ = run(["cmake", "--build", str(self.build_dir(flavor)), "--target", target, "--",
                          f"-j{self.jobs}"])
        return rc == 0, out

    def test_exe(self, flavor, target):
        return self.build_dir(flavor) / "tests" / target


def tail(text, n):
    return "\n".join(text.splitlines()[-n:])


def target_of(stages, s):
    return f"test_{stages[s]}_solutions"


def run_tests(exe, timeout):
    """'passed' / 'failed' / 'crashed' / 'timeout', and the output."""
    rc, out, timed_out = run([str(exe), "--gtest_brief=1", "--gtest_fail_fast", "--gtest_color=no"],
                             timeout=timeout)
    if timed_out:
        return "timeout", out
    if rc == 0:
        return "passed", out
    return ("failed" if rc == 1 else "crashed"), out


def first_failure(out):
    for line in out.splitlines():
        if "ERROR: AddressSanitizer" in line or "runtime error:" in line:  # the sanitizers' reports
            return line.strip()[:200]
    for line in out.splitlines():
        if line.startswith("[  FAILED  ]"):
            return line[len("[  FAILED  ]"):].split(", where GetParam()")[0].strip()
    for pat in ("TODO", "Error", "error", "Assertion", "Segmentation", "terminate"):
        for line in out.splitlines():
            if pat in line:
                return line.strip()[:200]
    return tail(out, 1)[:200]


def markdown(results, stages_order):
    """The kill-rate table per stage, and the survivors and build errors by name."""
    rows = []
    totals = dict(n=0, eq=0, killed=0, survived=0, build_error=0)
    for s in stages_order:
        rs = [r for r in results if r["stage"] == s]
        if not rs:
            continue
        c = counts(rs)
        rows.append((s, c))
        for k in totals:
            totals[k] += c[k]
    lines = ["| stage | mutants | equivalent | killed | survived | build errors | kill rate |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for s, c in rows + [("all", totals)]:
        name = f"**{s}**" if s == "all" else s
        lines.append(f"| {name} | {c['n']} | {c['eq']} | {c['killed']} | {c['survived']} | {c['build_error']} | "
                     f"{rate(c)} |")
    surv = [r for r in results if r["status"] == "survived" and not r.get("equivalent")]
    bad = [r for r in results if r["status"] == "build_error"]
    eqs = [r for r in results if r.get("equivalent")]
    if surv:
        lines += ["", "Survivors (not equivalent):", ""] + [f"- `{r['id']}` ({r['file']}): {r['what']}" for r in surv]
    if bad:
        lines += ["", "Build errors (invalid mutants, to fix):", ""] + [f"- `{r['id']}`: {r['what']}" for r in bad]
    if eqs:
        lines += ["", "Equivalent (left out of the rate):", ""]
        lines += [f"- `{r['id']}` ({r['status']}): {r['equivalent']}" for r in eqs]
    return "\n".join(lines) + "\n"


def counts(rs):
    c = dict(n=len(rs), eq=0, killed=0, survived=0, build_error=0)
    for r in rs:
        if r.get("equivalent"):
            c["eq"] += 1
        elif r["status"] == "killed":
            c["killed"] += 1
        elif r["status"] == "survived":
            c["survived"] += 1
        elif r["status"] == "build_error":
            c["build_error"] += 1
    return c


def rate(c):
    judged = c["killed"] + c["survived"]
    return f"{100.0 * c['killed'] / judged:.1f}%" if judged else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutants", type=pathlib.Path, default=HERE / "mutants.py", help="the list (default: mutants.py)")
    ap.add_argument("--source", type=pathlib.Path, default=ROOT, help="the repository to copy (default: this one)")
    ap.add_argument("--rev", help="copy this git revision of it (e.g. HEAD) instead of its working tree's files: "
                                  "a consistent snapshot while the working tree is being edited")
    ap.add_argument("--scratch", type=pathlib.Path,
                    default=pathlib.Path(tempfile.gettempdir()) / "pa-mutation",
                    help="scratch copy and its build, kept between runs (default: <tmp>/pa-mutation)")
    ap.add_argument("--report-dir", type=pathlib.Path, help="where report.md and report.json go (default: --scratch)")
    ap.add_argument("--subset", help="a named subset of mutants.py's SUBSETS (ci: the ctest's)")
    ap.add_argument("--stage", help="only this stage's mutants (NN, or common)")
    ap.add_argument("--only", help="only these mutant ids, comma-separated")
    ap.add_argument("--check", action="store_true", help="only check the snippets")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--jobs", type=int, default=2, help="build jobs (default 2)")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds per test run (default: 5x the unmutated run, at least 120)")
    ap.add_argument("--flavor", choices=sorted(FLAVORS),
                    help="judge every selected mutant in this build, whatever its entry says")
    ap.add_argument("--allow-survivors", action="store_true", help="exit 0 even when a mutant survives")
    ap.add_argument("--include-equivalent", action="store_true",
                    help="also run the mutants argued equivalent (they do not count either way)")
    ap.add_argument("--cmake-arg", action="append", default=[], help="extra argument for configuring the scratch build")
    args = ap.parse_args()

    mutants, subsets = load_mutants(args.mutants)
    repo = args.source.resolve()
    snapshot = None
    if args.rev:
        snapshot = tempfile.TemporaryDirectory(prefix="pa-mutation-rev-")
        root = pathlib.Path(snapshot.name) / "tree"
        names = export_rev(repo, args.rev, root)
    else:
        root = repo
        names = tracked_files(repo)
    stages = stage_names(root)
    problems = check_mutants(mutants, root, stages)
    if problems:
        print("mutate.py: the mutant list does not match the code:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 2
    if args.check:
        print(f"mutate.py: all {len(mutants)} mutants' snippets match exactly once")
        return 0

    selected = mutants
    if args.subset:
        if args.subset not in subsets:
            sys.exit(f"mutate.py: no subset {args.subset} (have: {', '.join(subsets)})")
        want = subsets[args.subset]
        unknown = set(want) - {m["id"] for m in mutants}
        if unknown:
            sys.exit(f"mutate.py: subset {args.subset} names unknown mutants: {', '.join(sorted(unknown))}")
        selected = [m for m in mutants if m["id"] in want]
    if args.stage:
        selected = [m for m in selected if m["stage"] == args.stage]
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {m["id"] for m in mutants}
        if unknown:
            sys.exit(f"mutate.py: unknown mutant ids: {', '.join(sorted(unknown))}")
        selected = [m for m in selected if m["id"] in want]
    if not args.include_equivalent:
        skipped = [m for m in selected if m.get("equivalent")]
        selected = [m for m in selected if not m.get("equivalent")]
    else:
        skipped = []
    if args.list:
        for m in selected + skipped:
            eq = f"  [equivalent: {m['equivalent']}]" if m.get("equivalent") else ""
            print(f"{m['id']:32s} {m['stage']:7s} {m['file']}: {m['what']}{eq}")
        return 0
    if not selected:
        sys.exit("mutate.py: no mutant selected")

    scratch = Scratch(args.scratch.resolve(), args.jobs, args.cmake_arg)
    report_dir = (args.report_dir or scratch.path).resolve()
    t0 = time.time()
    copied, removed = sync_copy(root, names, scratch.src)
    what = f"revision {args.rev}" if args.rev else "the working tree"
    print(f"mutate.py: scratch copy {scratch.src} of {what}: {copied} file(s) copied, {removed} removed", flush=True)

    # The unmutated tests of every (flavor, stage) the selection runs must pass
    # first: a mutant is judged against them. Their time sets the timeout.
    needed = []
    for m in selected:
        for s in m.get("tests", [m["stage"]]):
            key = (args.flavor or m.get("flavor", "release"), s)
            if key not in needed:
                needed.append(key)
    baseline = {}
    for flavor, s in needed:
        target = target_of(stages, s)
        t = time.time()
        ok, out = scratch.build_target(flavor, target)
        if not ok:
            sys.exit(f"mutate.py: the unmutated {target} ({flavor}) does not build:\n{tail(out, 40)}")
        tb = time.time() - t
        t = time.time()
        status, out = run_tests(scratch.test_exe(flavor, target), timeout=3600)
        baseline[flavor, s] = time.time() - t
        if status != "passed":
            sys.exit(f"mutate.py: the unmutated {target} ({flavor}) does not pass ({status}); mutants cannot be "
                     f"judged:\n{tail(out, 40)}")
        print(f"mutate.py: baseline {target} ({flavor}): built in {tb:.0f} s, passed in {baseline[flavor, s]:.1f} s",
              flush=True)

    results = []
    for i, m in enumerate(selected, 1):
        path = scratch.src / m["file"]
        original = path.read_bytes()
        text = original.decode()
        assert text.count(m["find"]) == 1, m["id"]  # checked above against the same contents
        t = time.time()
        r = dict(id=m["id"], stage=m["stage"], file=m["file"], what=m["what"], tests=[], build_s=0.0, test_s=0.0)
        if m.get("equivalent"):
            r["equivalent"] = m["equivalent"]
        try:
            path.write_text(text.replace(m["find"], m["replace"]))
            status = "survived"
            flavor = args.flavor or m.get("flavor", "release")
            r["flavor"] = flavor
            for s in m.get("tests", [m["stage"]]):
                target = target_of(stages, s)
                tb = time.time()
                ok, out = scratch.build_target(flavor, target)
                r["build_s"] += time.time() - tb
                if not ok:
                    status = "build_error"
                    r["detail"] = first_error(out)
                    break
                tt = time.time()
                timeout = args.timeout or max(120.0, 5 * baseline[flavor, s])
                outcome, out = run_tests(scratch.test_exe(flavor, target), timeout)
                r["test_s"] += time.time() - tt
                r["tests"].append({"target": target, "outcome": outcome})
                if outcome != "passed":
                    status = "killed"
                    r["detail"] = f"{target}: {outcome}: {first_failure(out)}"
                    break
            r["status"] = status
        finally:
            # A new timestamp (not the old one): the next build must see that
            # the file changed back, or it would keep the mutant's objects.
            path.write_bytes(original)
        results.append(r)
        mark = {"killed": "killed  ", "survived": "SURVIVED", "build_error": "BUILD ERROR"}[r["status"]]
        print(f"[{i:3d}/{len(selected)}] {mark} {m['id']:32s} {time.time() - t:5.0f} s  {r.get('detail', '')}",
              flush=True)

    # The equivalent mutants that were not run still belong to their stage's row.
    for m in skipped:
        results.append(dict(id=m["id"], stage=m["stage"], file=m["file"], what=m["what"], status="not run",
                            equivalent=m["equivalent"]))
    order = sorted(stages) + ["common"]
    md = markdown(results, order)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.md").write_text(md)
    summary = {s: counts([r for r in results if r["stage"] == s]) for s in order}
    summary = {s: {**c, "rate": rate(c)} for s, c in summary.items() if c["n"]}
    total = counts(results)
    (report_dir / "report.json").write_text(json.dumps(
        {"mutants": results, "per_stage": summary, "total": {**total, "rate": rate(total)},
         "seconds": round(time.time() - t0)}, indent=1) + "\n")
    print()
    print(md)
    print(f"mutate.py: {len(selected)} mutants run in {time.time() - t0:.0f} s; reports in {report_dir}")
    if any(r["status"] == "build_error" for r in results):
        return 1
    if not args.allow_survivors and any(r["status"] == "survived" and not r.get("equivalent") for r in results):
        return 1
    return 0


def first_error(out):
    for line in out.splitlines():
        if "error" in line:
            return line.strip()[:300]
    return tail(out, 1)[:300]


if __name__ == "__main__":
    sys.exit(main())
