#!/usr/bin/env python3
"""Checks that the docs describe files and names that exist.

Scans README.md, CHANGELOG.md and docs/*.md (Python 3 standard library only)
and fails (exit 1, one `file:line: ...` line per problem) when

1. a repository path the docs mention does not exist:
   - paths from the repository root (`include/...`, `tests/...`,
     `benchmarks/...`, `examples/...`, `scripts/...`, `python/...`,
     `docs/...`, `kernels/...`, `cmake/...`), anywhere in the text, code
     blocks and shell commands included;
   - `specdec/...` include paths (`#include <specdec/tree/mask.hpp>`),
     resolved under include/;
   - in inline code only, paths relative to include/specdec
     (`loop/planner.hpp`, `verify/walk.hpp`, `tree/`);
   - relative Markdown links (`[loop.md](loop.md)`), from the page's folder.
   - in inline code, a bare file name of the repository's own kinds
     (`order.hpp`, `walk.hpp`, `test_verify.py`, `CMakeLists.txt`) must
     name a file somewhere in the repository (peers' `nccl.h`-style C
     headers are not checked).
   `*` globs must match at least one file; a component `X` / `X.ext` is the
   docs' placeholder for "any name" and is read as `*`.
2. a name the docs present as specdec's is found nowhere under include/ or
   python/ as a whole word:
   - the called name of an inline code span that starts like a call or a
     signature: `name(`, `ns::name(`, `type::member(`, `name<T>(`,
     `status build(` (every component of a qualified name is checked);
   - every `specdec::name` / `specdec.name` in inline code, called or not.
   Names of the peers (CUDA, NCCL, MPI, llama.cpp, CMake, Python builtins)
   and math notation are skipped by the rules in IGNORED_* below.

A line that carries the comment `<!-- check_docs: removed -->` is skipped
(a CHANGELOG entry naming what a release removed or renamed).

Fenced code blocks are checked for paths only: their identifiers are an
example's local variables as often as specdec's names.

Usage: python3 scripts/check_docs.py [PAGE.md ...]
       (from anywhere; no argument: every page above; exit 0 = clean)
"""

from __future__ import annotations

import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Folders at the repository root whose paths the docs cite.
ROOT_DIRS = ("include", "tests", "benchmarks", "examples", "scripts", "python", "docs", "kernels", "cmake")

# Where a name must appear (as a whole word) to count as specdec's.
NAME_DIRS = ("include", "python")
NAME_SUFFIXES = (".hpp", ".cuh", ".h", ".cpp", ".cu", ".py", ".pyi", ".txt")
SKIP_DIRS = {"__pycache__", ".pytest_cache", "build", ".git"}

# Names of other projects that the interop and tooling pages call in inline
# code, by the prefix of the called name (a regular expression each).
IGNORED_PREFIXES = re.compile(
    r"^(?:"
    r"__"  # CUDA intrinsics: `__syncthreads()`
    r"|cuda[A-Z]"  # CUDA runtime: `cudaMalloc(` (specdec's own `cuda_*` names are checked)
    r"|nccl[A-Z]"  # NCCL: `ncclAllReduce(`
    r"|MPI_"  # MPI: `MPI_Allreduce(`
    r"|llama_|ggml_"  # llama.cpp's API: `llama_get_logits_ith(` (docs/llama_cpp.md)
    r"|(?:std|cub)::"  # the C++ standard library, CUB
    r"|(?:torch|np|numpy)\."  # PyTorch, NumPy
    r")"
)

# Single names that are not specdec's, one reason each.
IGNORED_NAMES = {
    "find_package": "CMake command (README: find_package(specdec))",
    "project": "CMake command (CHANGELOG: project(... VERSION))",
    "check_language": "CMake command (docs/python.md: check_language(CUDA))",
}

# A line carrying this Markdown comment is not checked: for a CHANGELOG entry
# that names what a release removed or renamed.
SKIP_MARKER = "<!-- check_docs: removed -->"

# Files the build writes, named in the docs but absent from the tree.
GENERATED_FILES = {
    "_core.pyi": "nanobind stubgen output (python/CMakeLists.txt, nanobind_add_stub)",
}

# Math symbols: a span holding one is a formula, whose called names are
# notation (`q_u(x)`, `m(y)/M`) unless the formula names a specdec function,
# which the first-name check still catches when the span starts with it.
MATH_CHARS = set("=≤≥←∝·−√∑ρτλ")


def rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def load_words() -> set[str]:
    """Every identifier-like word in the text files under include/ and python/."""
    words: set[str] = set()
    word_re = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    for top in NAME_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            for f in filenames:
                if f.endswith(NAME_SUFFIXES):
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                        words.update(word_re.findall(fh.read()))
    return words


def doc_files() -> list[str]:
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def blank_fences(text: str) -> str:
    """The text with every fenced code block blanked to spaces: the same
    length, so an offset in it is the same offset (and line) in the text."""
    out = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        is_fence_line = line.lstrip().startswith(("```", "~~~"))
        if is_fence_line:
            in_fence = not in_fence
        out.append(re.sub(r"[^\n]", " ", line) if (in_fence or is_fence_line) else line)
    return "".join(out)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


INCLUDE_AREAS = sorted(
    d for d in os.listdir(os.path.join(ROOT, "include", "specdec")) if os.path.isdir(os.path.join(ROOT, "include", "specdec", d))
)

PATH_CHARS = r"[A-Za-z0-9_.*\-/]"
# A root path anywhere in the text: not inside a longer path or a URL.
ROOT_PATH_RE = re.compile(r"(?<![\w./~:-])((?:%s|specdec)/%s*)" % ("|".join(ROOT_DIRS), PATH_CHARS))
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
CODE_RE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")


BARE_FILE_RE = re.compile(r"^[A-Za-z0-9_.\-]+\.(?:hpp|cuh|cu|cpp|py|pyi|sh|md|cmake|txt|json)$")


def repo_basenames() -> set[str]:
    names: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        names.update(filenames)
    return names


def path_exists(path: str, bases: list[str]) -> bool:
    parts = [("*" + p[1:]) if (p == "X" or p.startswith("X.")) else p for p in path.split("/")]
    pattern = "/".join(parts)
    for base in bases:
        full = os.path.join(base, pattern)
        if "*" in pattern:
            if glob.glob(full):
                return True
        elif os.path.exists(full):
            return True
    return False


def clean_path(p: str) -> str:
    return p.rstrip(".,:;")


def root_path_bases(p: str) -> list[str]:
    if p.startswith("specdec/"):
        return [os.path.join(ROOT, "include")]
    if p.startswith("kernels/"):
        # kernels/ is both the .cu folder and include/specdec/kernels/
        return [ROOT, os.path.join(ROOT, "include", "specdec")]
    return [ROOT]


def check_paths(doc: str, text: str, prose: str, basenames: set[str], problems: list[str]) -> None:
    seen: set[tuple[int, str]] = set()

    def report(off: int, p: str, what: str) -> None:
        key = (line_of(text, off), p)
        if key not in seen:
            seen.add(key)
            problems.append(f"{rel(doc)}:{key[0]}: {what} `{p}` does not exist")

    # Root paths, anywhere (prose, inline code, fenced blocks).
    for m in ROOT_PATH_RE.finditer(text):
        p = clean_path(m.group(1))
        if not path_exists(p, root_path_bases(p)):
            report(m.start(1), p, "path")

    # Paths relative to include/specdec, in inline code only.
    area_re = re.compile(r"^(?:%s)/%s*$" % ("|".join(map(re.escape, INCLUDE_AREAS)), PATH_CHARS))
    for m in CODE_RE.finditer(prose):
        for tok in m.group(1).split():
            tok = clean_path(tok.strip("()<>\"'"))
            if BARE_FILE_RE.match(tok):
                # only a span that is the file name alone: a shell command's
                # output file (`... > run.json`) is made by the command
                if m.group(1).strip() == tok and tok not in basenames and tok not in GENERATED_FILES:
                    report(m.start(1), tok, "file")
                continue
            if not area_re.match(tok) or ROOT_PATH_RE.fullmatch(tok):
                continue
            if not path_exists(tok, [os.path.join(ROOT, "include", "specdec"), ROOT]):
                report(m.start(1), tok, "header path")

    # Relative Markdown links.
    for m in LINK_RE.finditer(prose):
        target = m.group(1).split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), target))):
            report(m.start(1), target, "link target")


QUALIFIED = r"(?:[A-Za-z_]\w*(?:::|\.))*[A-Za-z_]\w*"
# The start of a call or a signature: [one return-type word] name [<...>] (
CALL_RE = re.compile(r"^(?:[A-Za-z_][\w:]*(?:<[^()<>]*>)?[&*]?\s+)?(%s)\s*(?:<[^()]*>)?\(" % QUALIFIED)
SPECDEC_QUAL_RE = re.compile(r"\bspecdec(?:::|\.)([A-Za-z_]\w*)")


def ignored(name: str) -> bool:
    return IGNORED_PREFIXES.match(name) is not None or name in IGNORED_NAMES


def check_names(doc: str, text: str, prose: str, words: set[str], problems: list[str]) -> None:
    for m in CODE_RE.finditer(prose):
        span = m.group(1).strip()
        line = line_of(text, m.start(1))
        missing: list[str] = []
        call = CALL_RE.match(span)
        if call and not ignored(call.group(1)):
            parts = re.split(r"::|\.", call.group(1))
            formula = any(c in MATH_CHARS for c in span)
            # A lone letter called in a formula (`p(x)`, `q_u(x)`) is notation.
            if not (formula and len(parts) == 1 and len(parts[0]) <= 3):
                for part in parts:
                    if len(part) == 1 or part in IGNORED_NAMES or part in ("std", "specdec"):
                        continue  # a single letter is math notation: `P(x)`, `m(y)/M`
                    if part not in words:
                        missing.append(part)
        for q in SPECDEC_QUAL_RE.finditer(span):
            name = q.group(1)
            if name not in words and not ignored(name):
                missing.append(name)
        for name in dict.fromkeys(missing):
            problems.append(f"{rel(doc)}:{line}: `{span}`: `{name}` is found nowhere under include/ or python/")


def problem_key(p: str) -> tuple[str, int, str]:
    f, line, rest = p.split(":", 2)
    return (f, int(line), rest)


def main() -> int:
    words = load_words()
    basenames = repo_basenames()
    problems: list[str] = []
    docs = [os.path.abspath(a) for a in sys.argv[1:]] or doc_files()
    for doc in docs:
        with open(doc, encoding="utf-8") as fh:
            text = fh.read()
        prose = blank_fences(text)
        found: list[str] = []
        check_paths(doc, text, prose, basenames, found)
        check_names(doc, text, prose, words, found)
        lines = text.splitlines()
        problems += [p for p in found if SKIP_MARKER not in lines[problem_key(p)[1] - 1]]
    if problems:
        print("\n".join(sorted(problems, key=problem_key)), flush=True)
        print(f"check_docs: {len(problems)} problem(s) in {len(docs)} pages", file=sys.stderr)
        return 1
    print(f"check_docs: {len(docs)} pages clean (paths, links, specdec names)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
