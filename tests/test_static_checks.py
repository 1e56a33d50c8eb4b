"""The static checks and the loader (autograder/submission.py): every syntax that reaches an attribute
is read (class patterns, __match_args__, str.format templates), loading and checking are linear in the
size of the file and bounded in time and memory in a process of their own, a malformed notebook is a
message, and the names a lab's own set-up cell defines reach the graded answer cells."""
from __future__ import annotations

import ast
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from autograder import submission
from autograder.labs import get_lab, lab_names
from autograder.submission import (MAX_CELLS, PAD_FLOOR, PAD_PER_CHAR, forbidden_uses, load, load_and_check,
                                   load_and_check_bounded, static_problems)

ROOT = Path(__file__).resolve().parent.parent
ATTACKS = ROOT / "tests" / "submissions" / "attacks" / "first_kernel"
LAB = get_lab("first_kernel")
NAMES = [e.name for e in LAB.exercises]
RULES = {e.name: (e.forbidden, e.simulate is not None) for e in LAB.exercises}
DENY = ("numpy.*", "*.copy_to_host", "*.copy_to_device")  # first_kernel's kind of rule


def problems(code: str) -> list[str]:
    return static_problems(code, DENY)


def uses(code: str) -> list[str]:
    return forbidden_uses(code, "f", DENY)


# --------------------------------------------------------------------------- every syntax that reads an attribute
@pytest.mark.parametrize("code, words", [
    ("def f(x):\n    match x:\n        case object(__dict__=d):\n            return d\n", ".__dict__, in a class pattern"),
    ("def f(x):\n    match x:\n        case object(_ary=a):\n            return a\n",
     "._ary, a private attribute, in a class pattern"),
    ("def f(x):\n    match x:\n        case [object(f_back=fr)]:\n            return fr\n", ".f_back, in a class pattern"),
    ("def f(x):\n    match x:\n        case int(real=r, __class__=c):\n            return c\n",
     ".__class__, in a class pattern"),
])
def test_class_pattern_keywords_are_attribute_reads(code, words):
    found = problems(code)
    assert any(words in p for p in found), found


def test_class_pattern_keywords_meet_the_forbidden_names():
    code = "def f(a, out):\n    match (a, out):\n        case (object(copy_to_host=get), object(copy_to_device=put)):\n" \
           "            put(get())\n"
    assert uses(code) == ["?.copy_to_device (line 3)", "?.copy_to_host (line 3)"]


@pytest.mark.parametrize("code", [
    # a metaclass makes every object an instance: the names in __match_args__ are attribute reads
    "class M(type):\n    def __instancecheck__(cls, o):\n        return True\n\n"
    "class F(metaclass=M):\n    __match_args__ = ('__dict__',)\n\n"
    "def f(x):\n    match x:\n        case F(d):\n            return d\n",
    # the code's own plain class, naming a private attribute
    "class F:\n    __match_args__ = ('_ary',)\n\ndef f(x):\n    match x:\n        case F(a):\n            return a\n",
    # __match_args__ built at run time, or a property of a metaclass (which wins over the class's own)
    "class F:\n    __match_args__ = tuple(['_' + 'ary'])\n\ndef f(x):\n    match x:\n        case F(a):\n            return a\n",
    "class M(type):\n    @property\n    def __match_args__(cls):\n        return ('__dict__',)\n\n"
    "class F(metaclass=M):\n    __match_args__ = ('x',)\n\ndef f(x):\n    match x:\n        case F(d):\n            return d\n",
    # positional patterns on classes that are not the code's own plain classes
    "from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray\n\n"
    "def f(x):\n    match x:\n        case FakeCUDAArray(a):\n            return a\n",
    "import dataclasses\n\n@dataclasses.dataclass\nclass F:\n    x: int\n\ndef f(v):\n    match v:\n        case F(x):\n"
    "            return x\n",
    "class F:\n    __match_args__ = ('x',)\n\nclass G(F):\n    pass\n\ndef f(v):\n    match v:\n        case G(x):\n"
    "            return x\n",
    # a builtin's name rebound to something else
    "class M(type):\n    def __instancecheck__(cls, o):\n        return True\n\n"
    "class int(metaclass=M):\n    __match_args__ = ('__dict__',)\n\ndef f(x):\n    match x:\n        case int(d):\n"
    "            return d\n",
])
def test_positional_class_patterns_read_only_known_attributes(code):
    assert problems(code), "a positional class pattern read attributes the check did not see"


@pytest.mark.parametrize("code", [
    "def f(x):\n    match x:\n        case int(n) | float(n):\n            return n\n        case str():\n"
    "            return 0\n        case (a, b):\n            return a\n        case {'k': v}:\n            return v\n",
    "class Point:\n    __match_args__ = ('x', 'y')\n\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n\n"
    "def f(p):\n    match p:\n        case Point(x, y=0):\n            return x\n",
])
def test_plain_patterns_stay_allowed(code):
    assert problems(code) == [] and uses(code) == []


@pytest.mark.parametrize("code, words", [
    ("def f(x):\n    return '{0.__dict__[_ary]}'.format(x)\n", ".__dict__, in a format template"),
    ("def f(x):\n    return '{x._ary[3]}'.format_map({'x': x})\n", "._ary, a private attribute, in a format template"),
    ("def f(x):\n    return '{0:{1.__class__}}'.format(1, x)\n", ".__class__, in a format template"),  # a nested field
    ("def f(x, i):\n    return ('{0.' + '_' * 2 + 'dict__}').format(x)\n", "not a string literal"),
    ("def f(x):\n    t = '{0.shape}'\n    return t.format(x)\n", "not a string literal"),
    ("def f(x):\n    return str.format('{0.__dict__}', x)\n", "not a string literal"),
    ("def f(x):\n    return f'{{0.{x}}}'.format(x)\n", "not a string literal"),
    ("def f(x):\n    return '{0.}'.format(x)\n", "a template the check cannot read"),
])
def test_format_templates_are_attribute_reads(code, words):
    found = problems(code)
    assert any(words in p for p in found), found


def test_format_template_fields_meet_the_forbidden_names():
    assert uses("def f(a):\n    return '{0.copy_to_host}'.format(a)\n") == ["?.copy_to_host (line 2)"]


def test_literal_templates_without_special_fields_stay_allowed():
    code = "def f(x, n):\n    print('{} of {:>8.3f} {0.shape} {n[0]}'.format(n, x, n=[1]))\n    return '%d' % n\n"
    assert problems(code) == [] and uses(code) == []


def test_all_the_graded_code_is_checked_whatever_the_function_names():
    """Decorators, defaults and class bodies run when the cell runs; and code reaches code without
    naming it: a list a helper was appended to, a decorator or __init_subclass__ that registers it,
    an instance made at load whose method does the work."""
    for code in ("def helper(d=object.__dict__):\n    pass\n\ndef f():\n    pass\n",
                 "@print.__self__\ndef helper():\n    pass\n\ndef f():\n    pass\n",
                 "class Helper:\n    d = object.__subclasses__()\n\ndef f():\n    pass\n",
                 "H = []\ndef _impl(x):\n    return x.__dict__\nH.append(_impl)\ndef f(x):\n    return H[0](x)\n",
                 "H = []\n@H.append\ndef _impl(x):\n    return x.__dict__\ndef f(x):\n    return H[0](x)\n",
                 "H = []\nclass B:\n    def __init_subclass__(cls):\n        H.append(cls)\n"
                 "class C(B):\n    def run(self, x):\n        return x.__dict__\ndef f(x):\n    return H[0]().run(x)\n",
                 "class C:\n    def __call__(self, x):\n        return x.__dict__\nR = [C()]\n"
                 "def f(x):\n    return R[0](x)\n"):
        assert any(attr in p for p in problems(code) for attr in (".__dict__", ".__self__", ".__subclasses__")), code


@pytest.mark.parametrize("attack, words", [
    ("match_dunder_dict", ".__dict__, in a class pattern"),
    ("match_private_ary", "._ary, a private attribute, in a class pattern"),
    ("match_copy_to_host", "?.copy_to_host"),
    ("match_args_positional", ".__dict__, in __match_args__"),
    ("format_literal_dunder", ".__dict__, in a format template"),
    ("format_runtime_template", "not a string literal"),
    ("hidden_init_closure", ".__closure__"),
    ("appended_helper", ".cell_contents"),
])
def test_the_attacks_are_refused_by_the_static_check(attack, words):
    checked = load_and_check(ATTACKS / f"{attack}.py", NAMES, RULES)
    reason, message = checked.static["vector_add"]
    assert words in message, message
    assert f"of {attack}.py)" in message, "the message names the file (the line's cell)"


def test_a_future_import_in_a_later_cell_does_not_switch_the_checks_off(tmp_path):
    """The cells used to be joined into one text for the checks: a `from __future__` import in a
    later cell made it a SyntaxError, and the checks passed everything."""
    nb = notebook({"saxpy": "import math\n", "vector_add": "from __future__ import annotations\n\n"
                                                          "def vector_add(a, b, out):\n    out.copy_to_device(a)\n"})
    path = tmp_path / "future.ipynb"
    path.write_text(json.dumps(nb))
    checked = load_and_check(path, NAMES, RULES)
    assert "vector_add" in checked.static, checked.static


# --------------------------------------------------------------------------- linear, and bounded
def counting_walks(monkeypatch) -> list[int]:
    """Count every node ast.walk hands the checks."""
    walk, count = ast.walk, [0]

    def counted(node):
        for n in walk(node):
            count[0] += 1
            yield n

    monkeypatch.setattr(ast, "walk", counted)
    return count


def chained(names: int, lines: int) -> str:
    chain = " = ".join(f"v{i}" for i in range(names)) + " = 0\n"
    return "def f(a, out):\n    out[0] = v0\n\n" + chain * lines


@pytest.mark.parametrize("names, lines", [(300, 10), (60, 400)])
def test_the_checks_walk_each_node_a_bounded_number_of_times(monkeypatch, names, lines):
    """A chained assignment repeated made the checks quadratic: each statement was walked once for
    each name it binds and each name that reached it (75 s for a 35 KB file)."""
    code = chained(names, lines)
    nodes = sum(1 for _ in ast.walk(ast.parse(code)))
    count = counting_walks(monkeypatch)
    prog = submission.Program.of(code)
    assert uses(prog) == [] and problems(prog) == []
    assert count[0] <= 20 * nodes, f"{count[0]} nodes walked for {nodes} in the code"


def test_long_dotted_names_are_reported_not_matched_once_per_use(monkeypatch):
    """An import of a module name as long as the file, used on every line: expanding it at each use
    would make the check quadratic."""
    long_name = ".".join(["a"] * 20_000)
    code = f"import {long_name} as m\n\ndef f(x):\n" + "    m.b\n" * 20_000
    assert any("too long to check" in u for u in uses(code))
    code = f"from {long_name} import " + ", ".join(f"n{i}" for i in range(20_000)) + "\n\ndef f(x):\n    n0.b\n"
    assert any("too long to check" in u for u in uses(code))


def test_many_cells_are_padded_within_a_budget(tmp_path):
    """Each .py cell starts with blank lines so its line numbers are the file's own; for thousands of
    cells that grew with the square of the file (483 MB for one submission)."""
    cells = MAX_CELLS - 1
    text = "# %%\nx = 1\n" * cells
    path = tmp_path / "cells.py"
    path.write_text(text)
    src = load(path, NAMES)
    assert not src.problem and len(src.cells) == cells
    assert sum(len(c.code) for c in src.cells) <= len(text) + PAD_PER_CHAR * len(text) + PAD_FLOOR
    first = src.cells[1]
    assert first.code.split("\n")[3] == "x = 1" and "from line 3)" in first.filename  # line 4 of the file is line 4
    last = src.cells[-1]
    assert last.code == "# %%\nx = 1\n" and f"its line 1 is line {2 * cells - 1} of the file" in last.filename


def test_more_cells_than_the_grader_takes_is_a_message(tmp_path):
    path = tmp_path / "cells.py"
    path.write_text("# %%\nx = 1\n" * (MAX_CELLS + 1))
    assert "too large for the grader's checks: it has" in load(path, NAMES).problem


def bounded(path: Path, **kw) -> tuple[submission.Checked, float, float]:
    """load_and_check_bounded, its seconds, and how much this process's peak memory grew (MB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    checked = load_and_check_bounded(path, NAMES, RULES, **kw)
    return checked, time.monotonic() - t0, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024


@pytest.mark.parametrize("attack, words", [
    ("static_chained_assign.py", ""),  # checked in under a second now: graded as usual
    ("many_cells.py", "too large for the grader's checks: it has 16002 cells"),
    ("deep_nesting.py", "too deeply nested for the grader's checks"),
    ("malformed_cells.ipynb", ""),
])
def test_the_denial_attacks_cost_the_grader_little(attack, words):
    """Before: static_chained_assign.py 77 s, many_cells.py 51 s and 1.8 GB, deep_nesting.py and
    malformed_cells.ipynb a Python error from the grader itself."""
    checked, seconds, grown_mb = bounded(ATTACKS / attack)
    assert seconds < 15, f"{attack}: {seconds:.1f} s"
    assert grown_mb < 50, f"{attack}: the grader's own peak memory grew by {grown_mb:.0f} MB"
    if words:
        assert words in checked.source.problem, checked.source.problem
    else:
        assert not checked.source.problem and "vector_add" not in checked.static, checked.source.problem


def test_the_checks_time_limit_is_a_message(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("a\n" * 100_000)
    checked, seconds, _ = bounded(path, seconds=0.05)
    assert "too large for the grader's checks: they did not finish within 0.05 s" in checked.source.problem
    assert seconds < 5


def test_the_checks_memory_limit_is_a_message(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("a\n" * 120_000)  # its tree takes ~100 MB
    checked, _, grown_mb = bounded(path, memory_bytes=100 << 20)
    assert "for the grader's checks" in checked.source.problem and "memory" in checked.source.problem, \
        checked.source.problem
    assert grown_mb < 50


def test_an_honest_submission_loads_alike_bounded_or_not():
    path = ROOT / "labs" / "first_kernel" / "solutions" / "first_kernel.ipynb"
    inside, outside = load_and_check(path, NAMES, RULES), load_and_check_bounded(path, NAMES, RULES)
    assert outside.static == inside.static == {}
    assert outside.source.as_json() == inside.source.as_json()


@pytest.mark.parametrize("lab", lab_names())
def test_every_solution_passes_the_static_checks(lab):
    spec = get_lab(lab)
    path = ROOT / "labs" / lab / "solutions" / f"{lab}.ipynb"
    checked = load_and_check(path, [e.name for e in spec.exercises],
                             {e.name: (e.forbidden, e.simulate is not None) for e in spec.exercises})
    assert not checked.source.problem and checked.static == {}, checked.static


# --------------------------------------------------------------------------- a malformed notebook is a message
def notebook(answers: dict[str, str], cells_before=()) -> dict:
    cells = list(cells_before) + [{"cell_type": "code", "metadata": {"autograder": {"answer": name}}, "source": src}
                                  for name, src in answers.items()]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


VECTOR_ADD = "def vector_add(a, b, out):\n    out[0] = 0\n"


@pytest.mark.parametrize("content, words", [
    (b"{ not json", "is not a valid notebook"),
    (b"[" * 100_000 + b"]" * 100_000, "is not a valid notebook"),
    (b"[1, 2]", "it is an array in JSON, not an object"),
    (b'"cells"', "it is a string in JSON, not an object"),
    (b"null", "it is null in JSON, not an object"),
    (b'{"cells": {"0": {}}}', "it has no list of cells"),
    (b'{"nbformat": 3, "worksheets": [{"cells": []}]}', "an old format (nbformat 3)"),
    (b'{"cells": [1, "x", null, []]}', "has no answer cells"),
    (b'{"cells": []}\xff', "could not read"),
    (b'{"cells": [{"cell_type": "code", "metadata": {"autograder": {"answer": "x"}}, "source": "1e999999"}]}', ""),
])
def test_a_malformed_notebook_is_a_message(tmp_path, content, words):
    path = tmp_path / "sub.ipynb"
    path.write_bytes(content)
    src = load(path, NAMES)
    assert words in src.problem and (src.problem or not words)


@pytest.mark.parametrize("cell, note", [
    (["cell_type", "code"], "cell 1 is not a notebook cell (it is an array in JSON): left out"),
    (7, "cell 1 is not a notebook cell (it is a number in JSON): left out"),
    ({"cell_type": "code", "metadata": {"autograder": {"answer": "saxpy"}}, "source": {"a": 1}},
     "the answer cell for saxpy: its source is an object in JSON, not text: it was read as empty"),
    ({"cell_type": "code", "metadata": {"autograder": {"answer": "saxpy"}}, "source": ["x = 1\n", 3, None]},
     "the answer cell for saxpy: parts of its source that are not text were left out"),
    ({"cell_type": "code", "metadata": {"autograder": {"answer": "saxpy"}}, "source": "s = '\ud800'\n"},
     "the answer cell for saxpy: characters that are not valid Unicode were replaced by U+FFFD"),
])
def test_a_malformed_cell_is_a_note_and_the_rest_is_graded(tmp_path, cell, note):
    path = tmp_path / "sub.ipynb"
    path.write_text(json.dumps(notebook({"vector_add": VECTOR_ADD}, [cell])))
    src = load(path, NAMES)
    assert not src.problem and src.notes == [note]
    assert src.answers["vector_add"].strip() == VECTOR_ADD.strip() and "vector_add" not in src.unparsed
    json.dumps(src.as_json(), ensure_ascii=False).encode()  # every text is valid Unicode


def test_millions_of_malformed_cells_are_counted_not_listed(tmp_path):
    path = tmp_path / "sub.ipynb"
    nb = notebook({"vector_add": VECTOR_ADD})
    nb["cells"] = [0] * 1_000_000 + nb["cells"]
    path.write_text(json.dumps(nb))
    src = load(path, NAMES)
    assert len(src.notes) == 6 and src.notes[-1] == "and 999995 more malformed cells"


def test_the_hostile_notebook_attack_grades_its_answer_and_lists_the_rest():
    src = load(ATTACKS / "malformed_cells.ipynb", NAMES)
    assert not src.problem and "vector_add" in src.answers and "vector_add" not in src.unparsed
    assert src.notes[0] == "cell 2 is not a notebook cell (it is an array in JSON): left out"
    assert src.notes[-1].startswith("and ") and "\ufffd" in src.ignored[0]


@pytest.mark.parametrize("make, words", [
    (lambda p: os.mkfifo(p), "it is not a regular file"),
    (lambda p: os.symlink("/dev/zero", p), "it is not a regular file"),
    (lambda p: os.mkdir(p), "it is not a regular file"),
    (lambda p: p.write_bytes(b" " * (submission.MAX_FILE_BYTES + 1)), "too large for the grader's checks"),
])
def test_files_that_are_no_notebook_are_messages(tmp_path, make, words):
    path = tmp_path / "sub.ipynb"
    make(path)
    t0 = time.monotonic()
    assert words in load(path, NAMES).problem
    assert time.monotonic() - t0 < 10


def test_a_py_over_the_code_limit_is_a_message(tmp_path):
    path = tmp_path / "sub.py"
    path.write_text("x = 1\n" * (submission.MAX_CODE_CHARS // 6 + 1))
    assert "too large for the grader's checks" in load(path, NAMES).problem


def test_notebook_only_lines_are_left_out_only_where_alone_on_their_line():
    code = "import course\nMODE = course.setup()\nx = 1; check(f)\ncheck(f)\n"
    kept, dropped = submission.drop_notebook_only(code)
    assert dropped == ["import course", "MODE = course.setup()", "check(f)"]
    assert kept.split("\n")[2] == "x = 1; check(f)"


# --------------------------------------------------------------------------- the lab's set-up cell, for grading
def test_the_set_up_cells_module_is_regenerated_exactly():
    from autograder.release import SETUP_CELLS, setup_cells_module

    assert SETUP_CELLS.read_text() == setup_cells_module(ROOT), f"{SETUP_CELLS} is stale: run `autograder release`"


def bound_names(code: str) -> set[str]:
    """Every name the code binds, at any depth (assignments and imports)."""
    tree = ast.parse(submission.strip_magics(code))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | {
        (a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names}


def library_imports(code: str) -> set[str]:
    """The names a set-up cell's imports of libraries (not the course's helpers, nor plots) bind."""
    from autograder.release import NOT_FOR_GRADING

    names = set()
    for stmt in ast.parse(submission.strip_magics(code)).body:
        if isinstance(stmt, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names
                      if a.name.split(".")[0] not in NOT_FOR_GRADING}
        elif isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[0] not in NOT_FOR_GRADING:
            names |= {a.asname or a.name for a in stmt.names}
    return names


@pytest.mark.parametrize("lab", lab_names())
def test_grading_defines_the_set_up_cells_names_with_the_modes_values(lab):
    from autograder.labs._setup_cells import SETUP_CELLS

    cell = SETUP_CELLS[lab]
    want = library_imports(cell) | {"MODE"} | ({"DEVICE"} & bound_names(cell))
    for simulator, mode in ((True, "simulator"), (False, "gpu")):
        setup = get_lab(lab).grading_setup(simulator)
        assert f"MODE = {mode!r}" in setup
        missing = want - bound_names(setup)
        assert not missing, f"{lab}: the set-up cell's {sorted(missing)} are not defined when grading"


def test_the_set_up_names_take_the_grading_modes_values():
    for lab, simulator, want in (("first_kernel", True, {"MODE": "simulator"}), ("first_kernel", False, {"MODE": "gpu"}),
                                 ("paged_attention", True, {"MODE": "simulator", "DEVICE": "cpu"}),
                                 ("paged_attention", False, {"MODE": "gpu", "DEVICE": "cuda"})):
        namespace: dict = {}
        exec(get_lab(lab).grading_setup(simulator), namespace)
        assert {k: namespace.get(k) for k in want} == want, lab
        assert "check" not in namespace and "checker" not in namespace and "course" not in namespace


def test_an_answer_that_prints_mode_keeps_its_points_and_the_learners_set_up_cell_is_not_used(tmp_path):
    """print(MODE) left in saxpy's answer cell cost a correct answer its points (NameError when loaded).
    MODE is the grader's, from the instructor's set-up cell: a learner's edited copy changes nothing."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_autograder import autograder, gradebook

    honest = ROOT / "tests" / "submissions" / "first_kernel" / "prints_mode.ipynb"
    nb = json.loads(honest.read_text())
    setup = next(c for c in nb["cells"] if c["cell_type"] == "code")
    setup["source"] = "".join(setup["source"]).replace("MODE = course.setup()", 'MODE = "my own mode"')
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "prints_mode.ipynb").write_bytes(honest.read_bytes())
    (subs / "edited_setup.ipynb").write_text(json.dumps(nb))
    out = tmp_path / "out"
    autograder("grade", "--lab", "first_kernel", "--simulator", "--timeout", "20", "--exercise", "vector_add",
               "--exercise", "saxpy", "--out", out, subs)
    book = gradebook(out)
    for name in ("prints_mode", "edited_setup"):
        assert (float(book[name]["vector_add"]), float(book[name]["saxpy"])) == (2, 2), book[name]
        printed = json.loads((out / name / "results.json").read_text())["extra_data"]["printed_tail"]
        assert "saxpy: running in simulator mode" in printed, printed


def test_old_mac_line_endings_are_read_as_the_parser_reads_them(tmp_path):
    """A lone \\r ends a line for Python's parser: leaving out a check() line on line 3 of such a file
    used to fail with IndexError in the grader."""
    path = tmp_path / "sub.py"
    path.write_bytes(b"def vector_add(a, b, out):\r    out[0] = 0\rcheck(vector_add)\r")
    src = load(path, NAMES)
    assert not src.problem and src.ignored == ["sub.py: check(vector_add)"]
    compile(src.cells[0].code, "sub.py", "exec")


def test_names_the_labs_set_up_imports_are_read_through_it():
    """An answer may use `cuda` unimported (the lab's set-up cell binds it): its forbidden calls are still
    forbidden, in batch grading and in check() alike."""
    code = "@cuda.jit\ndef k(x, s):\n    cuda.atomic.add(s, 0, x[cuda.grid(1)])\n\ndef f(x, s):\n    k[1, 32](x, s)\n"
    lab = get_lab("reduction")
    patterns = lab.exercise("block_sums").forbidden
    uses_of = forbidden_uses(code, "f", patterns, lab.grading_setup(True))  # read through the set-up
    assert any(u.startswith("numba.cuda.atomic.add") for u in uses_of), uses_of
    assert forbidden_uses(code, "f", patterns) == [], "without the set-up the name stays unresolved"
    own = "import numpy as cuda\n" + code  # the answer's own import wins over the set-up's
    assert not any(u.startswith("numba.cuda") for u in forbidden_uses(own, "f", patterns, lab.grading_setup(True)))


@pytest.mark.parametrize("code", [
    "from numpy.core import _ufunc_reconstruct as r\n",  # getattr(__import__(m), name) for its caller
    "from numba.cloudpickle.cloudpickle import subimport\n",  # a vendored serialiser: reads closures, imports
    "import numba.cloudpickle\n",
    "import numpy._core.multiarray\n",
    "import _pickle\n",
    "from numba.core import serialize\n",
])
def test_private_modules_names_and_vendored_serialisers_are_not_imported(code):
    assert problems(code + "def f():\n    pass\n"), code


def test_public_imports_and_future_stay_allowed():
    assert problems("from __future__ import annotations\nimport math\nfrom numba import cuda, float32\n"
                    "import numpy as np\ndef f():\n    pass\n") == []


@pytest.mark.parametrize("code", [
    "import dataclasses\ndef f(x):\n    return dataclasses.inspect.getclosurevars(type(x).__len__)\n",
    "from dataclasses import inspect\ndef f():\n    pass\n",
    "import typing\ndef f():\n    return typing.sys.modules\n",
    "import numba\ndef f():\n    return numba.core.serialize\n",
])
def test_modules_held_as_another_modules_attributes_are_refused_too(code):
    assert any("a module graded code may not use" in p or "import" in p for p in problems(code)), problems(code)


def test_common_attribute_names_that_are_also_modules_stay_allowed():
    assert problems("from numba import types\nimport numba\ndef f(e):\n    return numba.types.float32, e.code\n") == []


def test_a_library_held_by_another_module_is_refused():
    """torch.library.torch is torch itself: under an allowed name (torch.library.*), every forbidden one."""
    for code in ("import torch\nT = torch.library.torch\n", "from torch.library import torch as T\n",
                 "import triton.runtime.interpreter as ti\nnp = ti.np\n", "def f(t):\n    return t.numpy()\n"):
        assert any("module held by another module" in p or "import torch" in p for p in problems(code)), code
    assert not problems("import torch\nimport numpy as np\nfrom numba import cuda\nx = np.random.rand(3)\n")
