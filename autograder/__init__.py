"""Correctness and speed grading of learner GPU kernels, in the notebook and in batch."""
from .labs import get_lab, lab_names
from .spec import Exercise, Lab, Out, Speed


def checker(lab_name: str):
    """``check = checker("first_kernel")`` then ``check(vector_add)`` in a lab notebook."""
    from .check import checker as _checker  # imports numba: only when a notebook asks

    return _checker(lab_name)


__all__ = ["Exercise", "Lab", "Out", "Speed", "checker", "get_lab", "lab_names"]
