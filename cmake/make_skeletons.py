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
So `diff -r steps/NN solutions/NN` shows only the TODO blocks.

    python3 cmake/make_skeletons.py          # rewrite steps/ from solutions/
    python3 cmake/make_skeletons.py --check  # fail if steps/ is stale (a test runs this)
"""
import argparse
import pathlib
import re
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report stale skeletons instead of writing them")
    args = ap.parse_args()
    problems, written = [], 0
    for stage in stages():
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
            dst = steps_dir / src.name
            if args.check:
                if not dst.exists() or dst.read_text() != text:
                    problems.append(f"steps/{stage.name}/{src.name} is stale: run python3 cmake/make_skeletons.py")
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                if not dst.exists() or dst.read_text() != text:
                    dst.write_text(text)
                    written += 1
        if not all_todos:
            problems.append(f"solutions/{stage.name} marks no TODO: the skeleton would be the solution")
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
    for p in problems:
        print(p, file=sys.stderr)
    if not args.check:
        print(f"wrote {written} skeleton file(s)")
    if problems:
        return 1
    if args.check:
        print(f"skeletons up to date for {len(stages())} stage(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
