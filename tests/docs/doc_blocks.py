#!/usr/bin/env python3
"""Every command and code block of a documentation page is run or compiled.

    doc_blocks.py PAGE --source SRC --build BUILD --cxx CXX --includes 'A|B'
                  --defines 'X|Y' --mpiexec MPIRUN --ctest CTEST [--list]

The page's fenced blocks run in order in one fresh working directory that
looks like the repository root: every top-level entry of SRC is linked there,
and build/ mirrors BUILD, except that the programs of build/runtime (zero-train,
zero-estimate, ...), build/bench and build/examples are small wrappers that
append a block's `with` arguments (below) and exec the real program.
build/runtime is also first on PATH, and `mpirun` on PATH is MPIRUN with
--allow-run-as-root --oversubscribe (these tests run as root, on few cores).
Files a block writes stay for the page's next blocks.

What each block's language gets:
  sh, bash       run by bash -euo pipefail; fails on a non-zero exit
  cpp            compiled as its own translation unit (C++20, -fsyntax-only)
                 with ZeroEngine::engine's include path and definitions
  json, jsonc    a config: `zero-train --config BLOCK --print-config` must
                 accept it (unknown keys and bad values fail)
  jsonl          JSON lines (data): every line parses
  python         run by python3
  text, console, output, or no language: output shown to the reader, not run
  anything else  must say what covers it (`covered by` or `not run`)

A block is steered by HTML comments (invisible on the rendered page) on the
lines just above its fence, each `<!-- test: ... -->`:
  not run: REASON        not run here (a GPU, a 7B model, installs packages);
                         the reason is printed and counted
  covered by TEST[,...]  run by another CTest test, which must exist
  with PROGRAM ARGS      ARGS appended to every call of PROGRAM (a program of
                         build/runtime, build/bench or build/examples) in the block (e.g. `with zero-train --steps 2`); for
                         a json block, ARGS go before its --config
  setup                  the comment's further lines are shell commands run
                         before the block (inputs a reader already has)
  expect exit N          the block must exit with N (an error shown on purpose)
  expect TEXT            the block's output must contain TEXT
  json                   a json block that is not a config: parsed only
A comment `<!-- test-page: covered by TEST -->` anywhere on the page makes
every sh block the named test's unless the block says otherwise (the
walkthroughs run theirs in one shell with their own inputs:
tests/examples/walkthroughs_test.sh); the page's other blocks are handled here.

--list prints the blocks and what would be done with each, and runs nothing.
ZE_DOC_KEEP=1 keeps the working directory.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

WRAPPED_DIRS = ("runtime", "bench", "examples")  # build/ folders whose programs take `with` arguments
RUN = {"sh", "bash"}
OUTPUT = {"", "text", "console", "output"}
BLOCK_TIMEOUT_S = 420

FENCE = re.compile(r"^(\s*)(```+)\s*([A-Za-z0-9_+-]*)\s*$")  # indented in a list item too
DIRECTIVE_OPEN = re.compile(r"^\s*<!--\s*test:\s*(.*)$")
PAGE_DIRECTIVE = re.compile(r"^\s*<!--\s*test-page:\s*covered by\s+([^>]*?)\s*-->\s*$", re.M)


class Block:
    def __init__(self, line, lang, text, directives):
        self.line = line  # the fence's line, 1-based
        self.lang = lang
        self.text = text
        self.not_run = None
        self.covered_by = []
        self.with_args = {}
        self.setup = []
        self.expect_exit = 0
        self.expect_text = []
        self.json_only = False
        for d in directives:
            self._apply(d)

    def _apply(self, d):
        head, _, rest = d.partition("\n")
        head = head.strip()
        if head.startswith("not run:"):
            self.not_run = head[len("not run:"):].strip() or "no reason given"
        elif head.startswith("covered by"):
            self.covered_by += [t.strip() for t in head[len("covered by"):].split(",") if t.strip()]
        elif head.startswith("with "):
            words = shlex.split(head[len("with "):])
            if not words:
                raise ValueError(f"line {self.line}: `with` names no program")
            self.with_args.setdefault(words[0], []).extend(words[1:])
        elif head == "setup":
            self.setup.append(rest)
        elif head.startswith("expect exit"):
            self.expect_exit = int(head[len("expect exit"):])
        elif head.startswith("expect "):
            self.expect_text.append(head[len("expect "):].strip())
        elif head == "json":
            self.json_only = True
        else:
            raise ValueError(f"line {self.line}: unknown directive <!-- test: {head} -->")

    def kind(self):
        """What is done with the block: (kind, detail)."""
        if self.covered_by:
            return "covered", ", ".join(self.covered_by)
        if self.not_run:
            return "not run", self.not_run
        if self.lang in RUN:
            return "run", "bash"
        if self.lang == "python":
            return "run", "python3"
        if self.lang == "cpp":
            return "compiled", "c++20"
        if self.lang == "jsonl":
            return "parsed", "json lines"
        if self.lang in ("json", "jsonc"):
            return ("parsed", "json") if self.json_only else ("validated", "zero-train --print-config")
        if self.lang in OUTPUT:
            return "output", ""
        return "unknown", self.lang


def parse(page_text):
    """The page's fenced blocks and the directives just above each."""
    lines = page_text.split("\n")
    blocks = []
    pending = []  # directives seen since the last non-blank, non-directive line
    i = 0
    while i < len(lines):
        line = lines[i]
        m = DIRECTIVE_OPEN.match(line)
        if m:
            body = m.group(1)
            start = i
            while "-->" not in body:
                i += 1
                if i == len(lines):
                    raise ValueError(f"line {start + 1}: <!-- test: is never closed")
                body += "\n" + lines[i]
            body = body[: body.index("-->")]
            pending.append(body.rstrip())
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
            start = i
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*" + ticks + r"\s*$", lines[i]):
                # A block in a list item: its lines lose the fence's indentation.
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if i == len(lines):
                raise ValueError(f"line {start + 1}: the block is never closed")
            blocks.append(Block(start + 1, lang, "\n".join(body) + "\n", pending))
            pending = []
            i += 1
            continue
        if line.strip():
            if pending:
                raise ValueError(f"line {i + 1}: a <!-- test: --> comment is not followed by a block")
        i += 1
    if pending:
        raise ValueError("a <!-- test: --> comment at the end of the page steers no block")
    return blocks


def make_workdir(src, build, mpiexec):
    """A directory that looks like the repository root, with the build's programs wrapped.

    Returns (workdir, the programs wrapped by name, bin dir for PATH, the `with` files' dir)."""
    work = tempfile.mkdtemp(prefix="ze-doc-", dir=os.environ.get("TMPDIR", "/tmp"))
    for entry in os.listdir(src):
        if entry in (".git", "build"):
            continue
        os.symlink(os.path.join(src, entry), os.path.join(work, entry))
    os.mkdir(os.path.join(work, "build"))
    for entry in os.listdir(build):
        if entry not in WRAPPED_DIRS:
            os.symlink(os.path.join(build, entry), os.path.join(work, "build", entry))
    appends = os.path.join(work, ".doc-test", "with")
    os.makedirs(appends)
    wrapped = set()
    for d in WRAPPED_DIRS:
        real_dir = os.path.join(build, d)
        if not os.path.isdir(real_dir):
            continue
        os.mkdir(os.path.join(work, "build", d))
        for entry in os.listdir(real_dir):
            real = os.path.join(real_dir, entry)
            mine = os.path.join(work, "build", d, entry)
            if os.path.isfile(real) and os.access(real, os.X_OK):
                # Appends the current block's `with` arguments (a file per
                # program, one argument per line), so that mpirun's ranks get them too.
                with open(mine, "w") as f:
                    f.write("#!/usr/bin/env bash\n"
                            f"extra=()\n[[ -f {appends}/{entry} ]] && mapfile -t extra < {appends}/{entry}\n"
                            f'exec {shlex.quote(real)} "$@" "${{extra[@]}}"\n')
                os.chmod(mine, 0o755)
                wrapped.add(entry)
            else:
                os.symlink(real, mine)
    bindir = os.path.join(work, ".doc-test", "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "mpirun"), "w") as f:
        f.write(f'#!/usr/bin/env bash\nexec {shlex.quote(mpiexec)} --allow-run-as-root --oversubscribe "$@"\n')
    os.chmod(os.path.join(bindir, "mpirun"), 0o755)
    return work, wrapped, bindir, appends


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--source", required=True)
    ap.add_argument("--build")
    ap.add_argument("--cxx")
    ap.add_argument("--includes", default="")
    ap.add_argument("--defines", default="")
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--ctest", default="ctest")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()

    rel = os.path.relpath(a.page, a.source)
    with open(a.page) as f:
        text = f.read()
    try:
        blocks = parse(text)
    except ValueError as e:
        print(f"FAIL: {rel}: {e}")
        return 1
    page_cover = PAGE_DIRECTIVE.search(text)
    if page_cover:
        for b in blocks:  # the shell blocks; a block's own comment wins
            if b.lang in RUN and not b.covered_by and not b.not_run:
                b.covered_by = [t.strip() for t in page_cover.group(1).split(",")]

    counts = {}
    for b in blocks:
        k = b.kind()[0]
        counts[k] = counts.get(k, 0) + 1
    if a.list:
        for b in blocks:
            k, detail = b.kind()
            print(f"{rel}:{b.line}\t{b.lang or '-'}\t{k}\t{detail}")
        print(summary(rel, counts))
        return 0

    failures = []
    unknown = [b for b in blocks if b.kind()[0] == "unknown"]
    for b in unknown:
        failures.append(b)
        print(f"FAIL: {rel}:{b.line}: a ```{b.lang} block is neither run nor marked "
              f"(<!-- test: covered by TEST --> or <!-- test: not run: REASON -->)")

    # The tests named by `covered by` exist.
    named = sorted({t for b in blocks for t in b.covered_by})
    if named:
        listing = subprocess.run([a.ctest, "--test-dir", a.build, "-N"], capture_output=True, text=True).stdout
        known = set(re.findall(r"Test\s+#\d+:\s+(\S+)", listing))
        for b in blocks:
            for t in b.covered_by:
                if t not in known:
                    failures.append(b)
                    print(f"FAIL: {rel}:{b.line}: covered by {t}, but CTest has no test of that name")

    work, wrapped, bindir, appends = make_workdir(os.path.abspath(a.source), os.path.abspath(a.build), a.mpiexec)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{os.path.join(work, 'build', 'runtime')}:{env.get('PATH', '')}"
    env.pop("OMP_NUM_THREADS", None)
    cxx_flags = ["-std=c++20", "-fsyntax-only"]
    cxx_flags += [f"-I{d}" for d in a.includes.split("|") if d]
    cxx_flags += [f"-D{d}" for d in a.defines.split("|") if d]
    try:
        for n, b in enumerate(blocks, 1):
            k, detail = b.kind()
            where = f"{rel}:{b.line}"
            if k in ("output", "unknown"):
                continue
            if k in ("covered", "not run"):
                print(f"{k}: {where} ```{b.lang} ({detail})")
                continue
            strange = [p for p in b.with_args if p not in wrapped]
            if strange:
                failures.append(b)
                print(f"FAIL: {where}: `with {strange[0]}`: no program of that name in build/{{{','.join(WRAPPED_DIRS)}}}")
                continue
            for p in wrapped:
                path = os.path.join(appends, p)
                if p in b.with_args:
                    with open(path, "w") as f:
                        f.write("".join(x + "\n" for x in b.with_args[p]))
                elif os.path.exists(path):
                    os.remove(path)
            t0 = time.monotonic()
            ok, out = True, ""
            for s in b.setup:
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", s], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
                if r.returncode != 0:
                    ok, out = False, f"its setup failed (exit {r.returncode}):\n{r.stdout}{r.stderr}"
                    break
            if ok:
                ok, out = run_block(b, k, work, os.path.abspath(a.build), env, n, cxx_flags, a.cxx)
            dt = time.monotonic() - t0
            if ok:
                print(f"ok:   {where} ```{b.lang} {k} ({dt:.1f} s)")
            else:
                failures.append(b)
                tail = "\n".join(out.rstrip().split("\n")[-40:])
                print(f"FAIL: {where} ```{b.lang} {k} ({dt:.1f} s):\n{tail}\n")
    finally:
        if os.environ.get("ZE_DOC_KEEP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(summary(rel, counts))
    return 1 if failures else 0


def run_block(b, kind, work, build, env, n, cxx_flags, cxx):
    """Runs or compiles one block: (passed, its output)."""
    scratch = os.path.join(work, ".doc-test")
    if kind == "compiled":
        path = os.path.join(scratch, f"block_{n}.cc")
        with open(path, "w") as f:
            f.write(b.text)
        r = subprocess.run([cxx] + cxx_flags + [path], capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        return r.returncode == 0, r.stdout + r.stderr
    if kind == "parsed":
        docs = [line for line in b.text.split("\n") if line.strip()] if b.lang == "jsonl" else [b.text]
        for n_doc, doc in enumerate(docs, 1):
            try:
                json.loads(doc)
            except json.JSONDecodeError as e:
                return False, f"not JSON{f' (line {n_doc} of the block)' if b.lang == 'jsonl' else ''}: {e}"
        return True, ""
    if kind == "validated":
        path = os.path.join(scratch, f"block_{n}.json")
        with open(path, "w") as f:
            f.write(b.text)
        # The wrapper would append `with` arguments; here they go first, the block last.
        real = os.path.join(build, "runtime", "zero-train")
        cmd = [real] + b.with_args.get("zero-train", []) + ["--config", path, "--print-config"]
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        return r.returncode == 0, r.stdout[-2000:] + r.stderr
    if kind == "run":
        ext = "sh" if b.lang in RUN else "py"
        path = os.path.join(scratch, f"block_{n}.{ext}")
        with open(path, "w") as f:
            f.write(b.text)
        cmd = ["bash", "-euo", "pipefail", path] if ext == "sh" else ["python3", path]
        try:
            r = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            return False, f"timed out after {BLOCK_TIMEOUT_S} s\n{e.stdout or ''}"
        out = r.stdout
        if r.returncode != b.expect_exit:
            return False, f"{out}\nexit {r.returncode}, expected {b.expect_exit}"
        for t in b.expect_text:
            if t not in out:
                return False, f"{out}\nthe output lacks {t!r}"
        return True, out
    return False, f"nothing to do with a {kind} block"


def summary(rel, counts):
    order = ["run", "compiled", "validated", "parsed", "covered", "not run", "output", "unknown"]
    tested = sum(counts.get(k, 0) for k in ("run", "compiled", "validated", "parsed", "covered"))
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return f"{rel}: {tested} blocks tested ({', '.join(parts) or 'no blocks'})"


if __name__ == "__main__":
    sys.exit(main())
