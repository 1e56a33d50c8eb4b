"""How a lab declares its exercises.

An exercise is a contract: a host function ``name(*args)`` that takes device arrays
(inputs and outputs, in ``args`` order) and writes its outputs in place. The spec
says how to make inputs for a case, what the right answer is (a float64 reference on
the host), how close is close enough, what to time against, and what is forbidden.
Nothing here imports numba or cupy: specs are read by the grader's parent process too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .host_parallel import parallel_map

Params = Mapping[str, int]


@dataclass(frozen=True)
class Out:
    """An output argument: its shape for a case, and its dtype.

    Outputs start poisoned (NaN, or a sentinel integer), so an element the call never writes
    fails. ``init`` names an input whose values the output starts with instead: for updates
    in place (append to a cache), where the elements the call must not touch are checked too.
    """

    shape: Callable[[Params], tuple[int, ...]]
    dtype: str = "float32"
    init: str | None = None


@dataclass(frozen=True)
class Speed:
    """Speed points from the ratio t_baseline / t_submission (higher is faster).

    Full points at ``full_at`` or above, none at ``zero_at`` or below, linear between.
    """

    points: float
    full_at: float = 0.8
    zero_at: float = 0.25

    def score(self, ratio: float | None) -> float:
        if ratio is None or not np.isfinite(ratio):
            return 0.0
        frac = (ratio - self.zero_at) / (self.full_at - self.zero_at)
        return round(self.points * float(np.clip(frac, 0.0, 1.0)), 2)


# Tolerances per output dtype, as (rtol, atol), the order measure.compare reads them:
# |out - ref| <= atol * scale + rtol * |ref|, where scale is the largest |ref| of the case
# (so atol is relative to the data's magnitude).
DEFAULT_TOLERANCE = {
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (2e-3, 1e-3),
}


@dataclass(frozen=True)
class Exercise:
    name: str  # the function learners define
    title: str
    backend: str  # "numba", "cupy", "torch" or "triton": the kind of device arrays passed in (torch
    # tensors live on the GPU, or on the CPU in simulator mode, where no simulator is needed);
    # "triton": torch tensors, and the work done by Triton kernels (Triton's interpreter in simulator mode)
    args: tuple[str, ...]  # argument order of the contract
    inputs: Callable[[Params, np.random.Generator], dict[str, Any]]
    outputs: Mapping[str, Out]
    reference: Callable[..., dict[str, np.ndarray]]  # float64, host
    cases: Callable[[bool], Sequence[Params]]  # cases(simulator) -> correctness cases
    timing_case: Params | None = None  # the size timed on a GPU
    baseline: Callable[..., None] | None = None  # same contract, timed against
    baseline_name: str = "reference kernel"
    bytes_moved: Callable[[Params], int] | None = None
    flops: Callable[[Params], int] | None = None
    points: float = 1.0  # for correctness (all cases must pass)
    speed: Speed | None = None
    forbidden: tuple[str, ...] = ()  # dotted names, fnmatch patterns: "cupy.*", "*.copy_to_host"
    gpu_only: bool = False  # needs real hardware (warp intrinsics, CuPy)
    # The least compute capability the exercise needs, e.g. (9, 0) for thread-block clusters: on an
    # older GPU it is reported as not graded, with the reason, instead of failing on every case.
    min_cc: tuple[int, int] | None = None
    host_args: tuple[str, ...] = ()  # NumPy inputs left on the host (pageable), e.g. for copy exercises
    pinned_args: tuple[str, ...] = ()  # NumPy inputs left on the host in pinned (page-locked) memory
    check_leaks: bool = False  # on a GPU, device memory the call does not free fails the case
    # True where the host's cost of launching is what the exercise is about (CUDA graphs): the
    # grader then times the calls as launched, with the host's launch costs (timing.py).
    launch_cost_counts: bool = False
    # The floating inputs the timing loop refreshes for every call (a new gain and a new
    # per-element jitter, so no call sees the inputs of another); None: every floating input.
    # Name fewer where a softmax would turn the change into rounding noise beyond the check's
    # tolerance (attention: refresh only the values).
    scaled_inputs: tuple[str, ...] | None = None
    # Inputs that also get random signs on refresh: where an output depends only on signs
    # (a count of positive values), a gain and a jitter alone would leave it unchanged.
    flip_inputs: tuple[str, ...] = ()
    # Integer inputs the timing loop renews for every call, name -> the parameter that bounds them:
    # a random 1/64 of the values in [0, bound) get new random values, others stay. Integer inputs
    # are otherwise copied unchanged from a pool of a few sets, so where every input is an integer
    # (a histogram) a cache kept on the device would answer the timed calls without the work; and
    # a relabelling (adding k mod bound) would not do, as the histogram only relabels too.
    renew_inputs: Mapping[str, str] = field(default_factory=dict)
    # Inputs for the timing size (the check before timing, and the pool timed calls are drawn
    # from), built so that an approximation fails: a sum that drops 1% of its terms, or samples
    # them, must be wrong here. None: ``inputs``.
    timing_inputs: Callable[[Params, np.random.Generator], dict[str, Any]] | None = None
    tolerance: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # dtype -> (rtol, atol)
    # An answer that is a policy, not a kernel (a batching scheduler). The judge runs
    # simulate(policy, params, inputs) -> {name: host array}, a record of what the policy did,
    # where policy(*args) is the learner's function called in its runner over the socket: the
    # learner's code sees only its arguments, never the simulator's future. The judge then
    # judges the records with assess(cases, records) -> Assessment. Nothing runs on a GPU, so
    # such exercises are graded the same way in simulator mode, speed included.
    simulate: Callable[..., dict[str, np.ndarray]] | None = None
    assess: Callable[..., "Assessment"] | None = None
    # An answer that is a registration, not a function (an operator registered with torch.library):
    # grader source defining ``entry(namespace) -> function``. The learner's runner builds the
    # function before running the cells (it binds the library functions it judges with then) and
    # grades it like a learner's: it calls what the learner registered the way a user of it would
    # (eagerly, through autograd, under torch.compile). The learner's own code still runs under
    # the exercise's rules.
    entry: str = ""

    def too_old(self, cc: tuple[int, int] | None) -> str:
        """Why this GPU (compute capability ``cc``) cannot run the exercise, or "" if it can."""
        if self.min_cc is None or cc is None or tuple(cc) >= tuple(self.min_cc):
            return ""
        need = ".".join(map(str, self.min_cc))
        return f"needs a GPU of compute capability {need} or newer (this one is {cc[0]}.{cc[1]})"

    def tol(self, dtype: str) -> tuple[float, float]:
        return self.tolerance.get(dtype) or DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))

    @property
    def max_points(self) -> float:
        return self.points + (self.speed.points if self.speed else 0.0)

    def largest_case(self, simulator: bool) -> Params:
        """The correctness case with the most input elements: the one a profile traces."""
        rng = np.random.default_rng(0)
        return max(self.cases(simulator), key=lambda p: sum(np.size(v) for v in self.inputs(p, rng).values()
                                                            if isinstance(v, np.ndarray)))


@dataclass
class Assessment:
    """The judge's verdict on a policy exercise's records (see ``Exercise.simulate``)."""

    passed: bool
    lines: list[str]  # one per case: "pass ..." or "FAIL ...", as for kernels
    message: str
    ratio: float | None = None  # the submission's figure of merit over the reference's: speed points
    summary: str = ""  # how the ratio was found, for the learner and the gradebook


@dataclass(frozen=True)
class Lab:
    name: str
    title: str
    exercises: tuple[Exercise, ...]
    # Code run before the answer cells when grading a notebook (imports the answers use).
    setup: str = "import math\nimport numpy as np\n"
    timeout_s: float = 120.0  # per exercise, wall clock
    memory_limit_gb: float = 16.0  # host memory of the grading process
    # A policy lab's public engine: names of the lab module's constants and helper functions
    # that answers may use as ``engine.NAME``. The sandbox gets these (as source), never the
    # module, whose reference policy is what the exercise asks for.
    engine: tuple[str, ...] = ()

    def grading_setup(self, simulator: bool) -> str:
        """What a learner's runner runs before the answer cells: ``setup``, then what grading can run
        of the lab's own set-up cell (release.setup_names): MODE as course.setup() returns it in this
        mode, the cell's imports and the values it computes from them. They come from the
        instructor's cell (autograder/labs/_setup_cells.py), never from the learner's copy."""
        from .labs._setup_cells import SETUP_CELLS
        from .release import setup_names

        return self.setup + setup_names(SETUP_CELLS.get(self.name, ""), "simulator" if simulator else "gpu")

    def exercise(self, name: str) -> Exercise:
        for ex in self.exercises:
            if ex.name == name:
                return ex
        known = ", ".join(e.name for e in self.exercises)
        raise KeyError(f"lab {self.name!r} has no exercise {name!r} (it has: {known})")

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)


# Forbidden-name lists the labs share (patterns for Exercise.forbidden). Scalar constructors
# stay allowed: np.int32(n) as a kernel argument is fine; array maths on the host is not.
SCALARS = ("!numpy.int32", "!numpy.int64", "!numpy.uint32", "!numpy.uint64", "!numpy.float32", "!numpy.float64")
NO_HOST_MATH = ("numpy.*", "cupy.*", "torch.*", "*.copy_to_host", "*.copy_to_device",
                "numba.cuda.to_device") + SCALARS
# Triton exercises: the arrays are torch tensors and the work is the Triton kernel's. torch's
# functions, tensor methods and operators are refused to learner code (runner.torch_math_mode),
# except a tensor's shape, views and address, and empty tensors. A block's `.handle` is the value
# itself in Triton's interpreter (a NumPy array: NumPy's maths inside a "kernel" that no GPU could
# compile), and no part of Triton's language.
TRITON_ONLY = ("torch.*", "numpy.*", "cupy.*", "*.handle", "*.handle.*", "!torch.empty", "!torch.empty_like",
               "!torch.float32", "!torch.float16", "!torch.bfloat16", "!torch.int32", "!torch.int64") + SCALARS + (
    # Of Triton itself, what a kernel's author uses: the language, jit and autotune, and the launch helpers.
    # The rest (its interpreter, its runtime, its compiler) is no part of a kernel.
    "triton.*", "!triton.language", "!triton.language.*", "!triton.jit", "!triton.autotune", "!triton.Config", "!triton.heuristics",
    "!triton.cdiv", "!triton.next_power_of_2")
# CuPy array methods that copy or fill: the copy a learner is asked to write themselves.
CUPY_ARRAY_COPIES = ("*.copy", "*.get", "*.set", "*.fill", "*.copy_from*", "*.copy_to*", "*.astype")


# Standard normals are drawn in chunks of this many, each from its own generator spawned from the
# caller's, on as many threads as the host has: a timing input of 2**27 values takes 0.6 s on one
# core, and a lab draws dozens. The chunking does not depend on the host, so a seed gives the same
# inputs everywhere; below two chunks, one generator draws everything as before.
NORMAL_CHUNK = 1 << 22


def standard_normal(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    """``rng.standard_normal(shape, dtype=dtype)``, drawn on every core for large shapes."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if n < 2 * NORMAL_CHUNK:
        return rng.standard_normal(shape, dtype=dtype)
    out = np.empty(n, dtype=dtype)
    starts = range(0, n, NORMAL_CHUNK)
    gens = rng.spawn(len(starts))

    def fill(k: int) -> None:
        gens[k].standard_normal(out=out[starts[k]:starts[k] + NORMAL_CHUNK], dtype=dtype)  # drops the GIL

    parallel_map(fill, range(len(starts)), blas=False)
    return out.reshape(shape)


def uniform(rng: np.random.Generator, shape, dtype="float32") -> np.ndarray:
    """Random data with a random offset and scale, so no case is all near zero or one."""
    offset = rng.uniform(-4.0, 4.0)
    scale = 10.0 ** rng.uniform(-1.0, 1.5)
    x = standard_normal(rng, shape, np.float32 if np.dtype(dtype) == np.float32 else np.float64)
    x *= scale
    x += offset
    return x.astype(dtype, copy=False)


def awkward_1d(simulator: bool, large: int, large_sim: int = 5003) -> list[dict]:
    """Sizes that catch missing bounds checks and off-by-one grids."""
    sizes = [1, 31, 32, 33, 1023, 1024, 1025]
    sizes.append(large_sim if simulator else large)
    return [{"n": n} for n in sizes]
