#!/usr/bin/env python3
"""What the README and the man pages say about the code, read against the code's own words
(suite 'readme').

usage: claims.py SOURCE_DIR [README.md flatmalloc.1 flatmalloc.3]

glibc's controls: docs/glibc.md's table says what each of glibc's controls does here (a row
whose last column starts "No effect" or "Returns 1 and does nothing" is inert; the others act).
On each page (the man pages as `man` renders them) every clause (text between '; ' or '. ')
that names one of glibc's controls (M_*, MALLOC_*_, glibc.malloc.*) or mallopt is read:
 - a control the table does not list fails;
 - a clause that says something is ignored or has no effect must name only inert controls, or
   be about "the other(s)" or "the rest"; one that names no control then ("mallopt accepts and
   ignores every parameter") fails;
 - a page that mentions mallopt names each mallopt parameter that acts, outside such a clause.
Atomics on the fast path: ATOMICS below is what src/types.h's ONE WRITER PER STATE says (with
FM_TAGS read from it); README's first paragraph and flatmalloc(1)'s DESCRIPTION say it, and no
clause on any page claims "no atomic ..." in other words.
Pass other pages to check them instead (tests/readme/claims-old.sh runs the old ones).
"""
import os
import re
import subprocess
import sys

# The one place the fast path's atomics claim is written: when the code changes (src/types.h,
# ONE WRITER PER STATE), change this line, README's first paragraph and flatmalloc(1)'s DESCRIPTION.
ATOMICS = ("the first {FM_TAGS} threads alive free their own blocks with no atomic instruction, "
           "and each thread beyond pays one compare-exchange per free")

NEGATIVE = re.compile(r"ignor|no effect|does nothing|do nothing|no-op|not honou?red|not read")
REMAINDER = re.compile(r"\b(others?|rest)\b")
NO_ATOMIC = re.compile(r"\b(no|without|never an?)\s+(\w+\s+)?atomic|atomic-free")
TOKEN = re.compile(r"(?<![A-Za-z_])(M_[A-Z][A-Z_]*|MALLOC_[A-Z][A-Z_]*|glibc\.malloc\.[a-z](?:[a-z_]*[a-z])?)")

failed = []


def fail(msg):
    failed.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def glibc_table(path):
    """{token: acts} from docs/glibc.md's table."""
    text = open(path, encoding="utf-8").read()
    section = text.split("## The table", 1)[1].split("\n## ", 1)[0]
    acts = {}
    for line in section.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) != 3 or cols[0] in ("glibc's control", "---") or set(cols[0]) <= set("-"):
            continue
        control, how, what = cols
        names = set(TOKEN.findall(control + " " + how))
        # a lower-case control name is a tunable: glibc.malloc.NAME (arena_max, tcache_count, ...)
        for n in re.split(r",\s*", control):
            if re.fullmatch(r"[a-z_]+", n):
                names.add("glibc.malloc." + n)
        active = not re.match(r"(No effect|Returns 1 and does nothing)", what)
        for n in names:
            acts[n] = active
    if not acts:
        fail(f"no rows read from {path}'s table")
    return acts


def markdown_paragraphs(path):
    """The README's prose paragraphs, one line each, without code blocks, tables or markup."""
    paras, cur, fence = [], [], False
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    ") or line.startswith("|") or not line.strip():
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        cur.append(line.strip())
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        p = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", p)
        out.append(p.replace("`", "").replace("**", ""))
    return out


def man_sections(path):
    """{SECTION: [paragraphs]} of a man page as man renders it (no hyphenation, one line each)."""
    env = dict(os.environ, MANWIDTH="4000", LC_ALL="C.UTF-8")
    env.pop("LD_PRELOAD", None)
    text = subprocess.run(["man", "-E", "UTF-8", "--nh", "--nj", "-l", path], env=env,
                          check=True, capture_output=True, text=True).stdout
    text = re.sub(r".\x08", "", text)
    sections, name, cur = {}, "", []
    for line in text.splitlines():
        if re.match(r"^[A-Z][A-Z ]+$", line):
            name = line.strip()
            sections.setdefault(name, [])
            continue
        if not line.strip():
            if cur:
                sections.setdefault(name, []).append(" ".join(cur))
                cur = []
            continue
        cur.append(line.strip())
    if cur:
        sections.setdefault(name, []).append(" ".join(cur))
    return sections


def clauses(paragraph):
    return [c for c in re.split(r";\s+|\.\s+(?=[A-Z(`])", paragraph) if c.strip()]


def check_glibc(page, paras, acts):
    mallopt_params = sorted(t for t, a in acts.items() if a and t.startswith("M_"))
    mentions_mallopt, named_ok = False, set()
    for para in paras:
        for c in clauses(para):
            tokens = set(TOKEN.findall(c))
            if "mallopt" in c:
                mentions_mallopt = True
            if not tokens and "mallopt" not in c:
                continue
            for t in sorted(tokens - set(acts)):
                fail(f"{page}: names {t}, which docs/glibc.md's table does not list: \"{c.strip()}\"")
            if NEGATIVE.search(c.lower()):
                acting = sorted(t for t in tokens if acts.get(t))
                if acting:
                    fail(f"{page}: says {', '.join(acting)} has no effect, but docs/glibc.md's table "
                         f"says it acts: \"{c.strip()}\"")
                if not tokens and not REMAINDER.search(c.lower()) and mallopt_params:
                    fail(f"{page}: says mallopt ignores its parameters, but docs/glibc.md's table says "
                         f"{', '.join(mallopt_params)} act: \"{c.strip()}\"")
            else:
                named_ok |= tokens
    if mentions_mallopt:
        for t in mallopt_params:
            if t not in named_ok:
                fail(f"{page}: mentions mallopt but never says that {t} acts (docs/glibc.md's table)")
    return mentions_mallopt


def check_atomics(page, paras, claim, must_hold):
    for para in paras:
        for c in clauses(para):
            if NO_ATOMIC.search(c.lower()) and claim not in " ".join(c.split()):
                fail(f"{page}: claims no atomic step in other words than src/types.h's: \"{c.strip()}\" "
                     f"(tests/readme/claims.py, ATOMICS: \"{claim}\")")
    if must_hold is not None and claim not in " ".join(" ".join(must_hold).split()):
        fail(f"{page}: does not say \"{claim}\"")


def main():
    src = sys.argv[1]
    readme, man1, man3 = (sys.argv[2:5] if len(sys.argv) >= 5 else
                          (f"{src}/README.md", f"{src}/man/flatmalloc.1", f"{src}/man/flatmalloc.3"))
    acts = glibc_table(f"{src}/docs/glibc.md")
    m = re.search(r"^#define FM_TAGS (\d+)u?\b", open(f"{src}/src/types.h", encoding="utf-8").read(), re.M)
    if not m:
        fail("no #define FM_TAGS in src/types.h")
        return 1
    claim = ATOMICS.format(FM_TAGS=m.group(1))

    md = markdown_paragraphs(readme)
    first = [p for p in md if not p.startswith("#")][:1]
    pages = [("README.md", md, first)]
    s1, s3 = man_sections(man1), man_sections(man3)
    pages.append(("flatmalloc(1)", [p for v in s1.values() for p in v], s1.get("DESCRIPTION", [])))
    pages.append(("flatmalloc(3)", [p for v in s3.values() for p in v], None))
    for page, paras, hold in pages:
        check_glibc(page, paras, acts)
        check_atomics(page, paras, claim, hold)
    if failed:
        return 1
    inert = sorted(t for t, a in acts.items() if not a)
    print(f"  ok: README, flatmalloc(1) and flatmalloc(3) say of glibc's controls what docs/glibc.md's "
          f"table says ({len(acts) - len(inert)} act, {len(inert)} inert)")
    print(f"  ok: README's first paragraph and flatmalloc(1) say \"{claim}\"; no page says otherwise")
    print("claims: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
