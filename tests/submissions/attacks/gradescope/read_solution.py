# ATTACK (machine, Gradescope): read the lab's solution notebook, which the zip carries for its build-time
# self-check (/autograder/source/solution.ipynb), and the grader's own lab file from the installed wheel.
# A secure grader: both reads are refused (the printed line says "denied" twice), 0 points.
said = []
for path in ("/autograder/source/solution.ipynb", "/autograder/source/gradescope.json"):
    try:
        with open(path) as f:
            said.append(f"read {len(f.read())} characters of {path}")
    except OSError as exc:
        said.append(f"denied {path} ({exc.strerror})")
print("ATTACK read_solution: " + "; ".join(said), flush=True)


def vector_add(a, b, out):
    raise RuntimeError("no answer: this submission only reads")
