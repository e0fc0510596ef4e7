# bench/programs/gen_git.py FILES COMMITS: writes a `git fast-import` stream to stdout for
# bench/programs.sh's git gc workload: a history of COMMITS commits over FILES text files, each
# commit rewriting a few lines in a few files (so gc has deltas to find). Deterministic.
import sys

files = int(sys.argv[1]) if len(sys.argv) > 1 else 400
commits = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
w = sys.stdout.buffer.write
state = 12345


def rnd():
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) & (2 ** 64 - 1)
    return state >> 33


content = [["line %d of file %d: %s" % (j, f, "abcdefghij" * (1 + (j * f) % 6)) for j in range(60 + f % 120)]
           for f in range(files)]
for c in range(commits):
    touched = sorted({rnd() % files for _ in range(1 + rnd() % 6)})
    msg = ("commit %d touches %d files\n" % (c, len(touched))).encode()
    w(b"commit refs/heads/main\n")
    w(b"committer Bench <bench@example.com> %d +0000\n" % (1700000000 + c * 60))
    w(b"data %d\n%s" % (len(msg), msg))
    for f in touched:
        lines = content[f]
        for _ in range(1 + rnd() % 4):
            j = rnd() % len(lines)
            lines[j] = "line %d rewritten in commit %d: %x" % (j, c, rnd())
        if rnd() % 5 == 0:
            lines.insert(rnd() % len(lines), "inserted in commit %d" % c)
        data = ("\n".join(lines) + "\n").encode()
        w(b"M 644 inline dir%d/file%d.txt\ndata %d\n" % (f % 20, f, len(data)))
        w(data)
        w(b"\n")
