#!/usr/bin/env python3
"""claims.py catches the drift it was written for (suite 'readme').

usage: claims_drift.py SOURCE_DIR

Puts each old sentence back into a copy of its page (README.md's and flatmalloc(3)'s "mallopt
accepts and ignores every parameter", README.md's and flatmalloc(1)'s "no lock and no atomic
instruction on the fast path", as they read at 8c79b52) and runs claims.py on the copies: each
must fail, naming the page.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

src = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
# (page, the current text as a regex, the old text)
OLD = [
    ("README.md", r"are all safe to use\. `mallopt` returns glibc's values;.*?have no effect \(docs/glibc\.md\)\.",
     "are all safe to use, and `mallopt` accepts and ignores every parameter."),
    ("README.md", r"that take no lock on the fast path;\s+the first \d+ threads alive.*?compare-exchange per free\.",
     "that take no lock and no atomic\ninstruction on the fast path."),
    ("man/flatmalloc.3", r"\.B mallopt\nreturns glibc's values;.*?have no effect\.\n",
     ".B mallopt\naccepts and ignores every parameter.\n"),
    ("man/flatmalloc.1", r"that take no lock on the fast path;\n.*?compare-exchange per free\.\n",
     "that take no lock and no atomic instruction on the\nfast path.\n"),
]
names = {"README.md": "README.md", "man/flatmalloc.1": "flatmalloc(1)", "man/flatmalloc.3": "flatmalloc(3)"}
bad = 0
with tempfile.TemporaryDirectory(prefix="fm-claims.") as tmp:
    for page, now, old in OLD:
        copies = {}
        for p in names:
            copies[p] = os.path.join(tmp, p.replace("/", "_"))
            shutil.copy(os.path.join(src, p), copies[p])
        text = open(copies[page], encoding="utf-8").read()
        text, n = re.subn(now, lambda m: old, text, count=1, flags=re.S)
        if n != 1:
            print(f"FAIL: {page} no longer has the sentence this test replaces ({now})", file=sys.stderr)
            bad = 1
            continue
        open(copies[page], "w", encoding="utf-8").write(text)
        r = subprocess.run([sys.executable, os.path.join(here, "claims.py"), src,
                            copies["README.md"], copies["man/flatmalloc.1"], copies["man/flatmalloc.3"]],
                           capture_output=True, text=True)
        if r.returncode == 0 or f"FAIL: {names[page]}:" not in r.stderr:
            print(f"FAIL: claims.py passes {page} with the old \"{old.strip()}\"", file=sys.stderr)
            bad = 1
        else:
            first = next(l for l in r.stderr.splitlines() if l.startswith(f"FAIL: {names[page]}:"))
            print(f"  ok: the old {page} fails: {first[:160]}")
if bad:
    sys.exit(1)
print("claims_drift: all checks passed")
