#!/usr/bin/env python3
"""Generate the learner's skeletons (steps/) from the solutions (solutions/).

A solution file marks each exercise like this:

    //@ TODO 3: one line that says what to write
    ...the solution's code...
    //@ skeleton
    //@ ...the skeleton's placeholder code (without the "//@ " prefix)...
    //@ end

and may carry skeleton-only lines as  `//@+ code`  (e.g. the launcher's
PA_CHECK_TODOS call, which solutions do not pay for).

In the skeleton the block becomes `// TODO 3: ...` followed by the placeholder,
which must keep the kernel safe to run and call PA_TODO(3) / PA_TODO_HOST(3, ...).
So `diff -r steps/NN solutions/NN` shows only the TODO blocks. A solution file
with no marker at all is not copied: steps/ holds only the files a learner
edits, and those include the rest from solutions/.

    python3 cmake/make_skeletons.py                # rewrite steps/ from solutions/
    python3 cmake/make_skeletons.py --check        # fail if steps/ is stale (CI runs this)
    python3 cmake/make_skeletons.py --out DIR      # write the skeletons into DIR/NN_name/ (the build
                                                   # does this to check that they fail cleanly)

Rewriting steps/ never replaces a learner's work: a file is rewritten only if it
is still the skeleton of the committed solution (git HEAD), or with --force.
"""
import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"^(\s*)//@ TODO (\d+): (.+)$")
SKELETON = re.compile(r"^\s*//@ skeleton\s*$")
END = re.compile(r"^\s*//@ end\s*$")
PLUS = re.compile(r"^(\s*)//@\+ (.*)$")
BODY = re.compile(r"^(\s*)//@ ?(.*)$")


class MarkerError(Exception):
    pass


def skeleton_of(text, where):
    """Returns (skeleton text, list of TODO numbers)."""
    out, todos = [], []
    state, lineno = "code", 0
    for line in text.splitlines(keepends=True):
        lineno += 1
        body = line.rstrip("\n")
        if state == "code":
            m = BEGIN.match(body)
            if m:
                indent, num, title = m.groups()
                todos.append(int(num))
                out.append(f"{indent}// TODO {num}: {title}\n")
                state = "solution"
                continue
            m = PLUS.match(body)
            if m:
                out.append(f"{m.group(1)}{m.group(2)}\n")
                continue
            if "//@" in body:
                raise MarkerError(f"{where}:{lineno}: marker outside a TODO block: {body.strip()}")
            out.append(line)
        elif state == "solution":
            if SKELETON.match(body):
                state = "skeleton"
            elif "//@" in body:
                raise MarkerError(f"{where}:{lineno}: expected '//@ skeleton' before: {body.strip()}")
        else:  # skeleton
            if END.match(body):
                state = "code"
                continue
            m = BODY.match(body)
            if not m:
                raise MarkerError(f"{where}:{lineno}: skeleton lines must start with '//@ ': {body.strip()}")
            indent, rest = m.groups()
            out.append(f"{indent}{rest}\n" if rest else "\n")
    if state != "code":
        raise MarkerError(f"{where}: a TODO block is not closed with '//@ end'")
    if len(set(todos)) != len(todos):
        raise MarkerError(f"{where}: TODO numbers repeat: {todos}")
    return "".join(out), todos


def stages():
    return sorted(p for p in (ROOT / "solutions").iterdir() if p.is_dir() and re.match(r"\d\d_", p.name))


def committed_skeleton(src):
    """The skeleton of src as committed in git HEAD, or None when git cannot say."""
    rel = src.relative_to(ROOT).as_posix()
    try:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{rel}"], capture_output=True,
                              text=True, check=True).stdout
        return skeleton_of(text, rel)[0]
    except (OSError, subprocess.CalledProcessError, MarkerError):
        return None


STALE_ADVICE = """\
Doing the course? Then that is your own work: keep it. This check is for the course's
repository (CI runs it); the learner's commands do not.
Changed solutions/ in the course's repository? Regenerate the committed skeletons:
python3 cmake/make_skeletons.py (it never rewrites a file that holds someone's own work)."""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report stale skeletons instead of writing them")
    ap.add_argument("--out", metavar="DIR", type=pathlib.Path,
                    help="write the skeletons into DIR/NN_name/ and leave steps/ alone")
    ap.add_argument("--stage", metavar="NN_name", help="only this stage")
    ap.add_argument("--force", action="store_true",
                    help="rewrite steps/ files even where they hold changes of their own")
    args = ap.parse_args()
    selected = [s for s in stages() if args.stage in (None, s.name)]
    if not selected:
        print(f"no stage {args.stage} under solutions/", file=sys.stderr)
        return 1
    problems, stale, written = [], [], 0
    for stage in selected:
        steps_dir = ROOT / "steps" / stage.name
        all_todos = []
        for src in sorted(p for p in stage.iterdir() if p.is_file()):
            rel = src.relative_to(ROOT)
            try:
                text, todos = skeleton_of(src.read_text(), str(rel))
            except MarkerError as e:
                problems.append(str(e))
                continue
            all_todos += todos
            if "//@" not in src.read_text():
                # Nothing for the learner to write here: the skeleton's files
                # include this one from solutions/, so steps/ holds no copy.
                if args.out:
                    continue
                if (steps_dir / src.name).exists():
                    stale.append(f"  steps/{stage.name}/{src.name} (remove it: it has no TODO, and "
                                 f"the stage includes solutions/{stage.name}/{src.name})")
                continue
            if args.out:
                dst = args.out / stage.name / src.name
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(text)  # always written, so the build sees it as up to date
                continue
            dst = steps_dir / src.name
            if args.check:
                if not dst.exists() or dst.read_text() != text:
                    stale.append(f"  steps/{stage.name}/{src.name}")
            elif not dst.exists() or dst.read_text() != text:
                if dst.exists() and not args.force and dst.read_text() != committed_skeleton(src):
                    problems.append(f"steps/{stage.name}/{src.name} was not rewritten: it is not the skeleton of "
                                    f"the committed solution, so it holds someone's work (--force rewrites it)")
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(text)
                written += 1
        if not all_todos:
            problems.append(f"solutions/{stage.name} marks no TODO: the skeleton would be the solution")
        if args.out:
            continue
        readme = steps_dir / "README.md"
        if not readme.exists():
            problems.append(f"steps/{stage.name}/README.md is missing")
        else:
            doc = readme.read_text()
            for n in sorted(set(all_todos)):
                if not re.search(rf"\bTODO {n}\b", doc):
                    problems.append(f"steps/{stage.name}/README.md does not describe TODO {n}")
        extra = {p.name for p in steps_dir.glob("*") if p.is_file()} - {p.name for p in stage.iterdir()} - {"README.md"}
        for name in sorted(extra):
            problems.append(f"steps/{stage.name}/{name} has no counterpart in solutions/{stage.name}")
    if stale:
        problems += ["These files differ from the skeletons generated from solutions/:"] + stale + [STALE_ADVICE]
    for p in problems:
        print(p, file=sys.stderr)
    if not args.check and not args.out:
        print(f"wrote {written} skeleton file(s)")
    if problems:
        return 1
    if args.check:
        print(f"skeletons up to date for {len(selected)} stage(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
