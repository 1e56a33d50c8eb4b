"""Figures of the chapter *The performance model*: the FMA walk and the GEMM sweep on the roofline.

Each function draws one figure from the measured data at the page's width (7.5 inches, labels of
9 points or more) and returns it; the notebook shows it with ``plt.show()``.
"""
from __future__ import annotations

import numpy as np

from .roofline import plot

WALK_SERIES = (("float32", "o-", "tab:blue"), ("float64 (slip)", "s--", "tab:orange"))
GEMM_STYLE = {"float32": ("o-", "tab:blue"), "float16": ("s-", "tab:orange")}


def fma_walk(k_values, walk_time, floor, per_fma, ceilings, walk_intensity, walk_gflops,
             walk_gbps, plateau):
    """Left: time per call against k (FMAs per element), with the memory floor and the line
    proportional to k. Right: the same runs on the measured roofline, with the kernel's own roof.

    ``walk_time`` and ``walk_gflops`` map each series of ``WALK_SERIES`` to one value per k.
    """
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(7.5, 3.6))
    for label, style, color in WALK_SERIES:
        ax_t.loglog(k_values, np.asarray(walk_time[label]) * 1e6, style, color=color, label=label,
                    markersize=5)
    ks = np.array(k_values, dtype=float)
    ax_t.loglog(ks, np.full_like(ks, floor * 1e6), ":", color="gray",
                label="memory floor (float32)")
    ax_t.loglog(ks, per_fma * ks * 1e6, "-.", color="gray",
                label="time proportional to k (float32)")
    ax_t.axvline(4 * ceilings.ridge(), color="black", linestyle="--", linewidth=1)
    ax_t.text(4 * ceilings.ridge() * 1.1, np.max(walk_time["float64 (slip)"]) * 1e6,
              "k = 4 x ridge", fontsize=9, va="top")
    ax_t.set_xscale("log", base=2)
    ax_t.set_xlabel("k: fused multiply-adds per element")
    ax_t.set_ylabel("time per call (us)")
    ax_t.set_title("Flat while memory-bound, then proportional to k")
    ax_t.grid(True, which="both", alpha=0.3)
    ax_t.legend(loc="upper left", fontsize=9)

    plot(ceilings, [], ax=ax_r, tensor=False, intensity_range=(1 / 16, 2048),
         title="The same runs on the roofline (measured roofs)")
    for label, style, color in WALK_SERIES:
        ax_r.loglog(walk_intensity, walk_gflops[label], style, color=color,
                    label=f"fma_walk, {label}", markersize=5)
    xs = np.geomspace(1 / 16, 2048, 200)
    ax_r.loglog(xs, np.minimum(xs * walk_gbps, plateau), ":", color="tab:blue", linewidth=1,
                label="this kernel's own roof (its bandwidth, its plateau)")
    ax_r.set_ylim(100, ceilings.fp32_tflops * 1e3 * 3)
    ax_r.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return fig


def gemm_sweep(ceilings, gemm_points, sizes, gemm_tflops):
    """Left: cuBLAS GEMMs of growing size on the roofline (``gemm_points[dtype]``: one Kernel per
    size). Right: their rate (``gemm_tflops[dtype]``, TFLOP/s) against n, with both roofs.
    """
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_n) = plt.subplots(1, 2, figsize=(7.5, 3.6))
    plot(ceilings, [], ax=ax_r, intensity_range=(1 / 16, 4096),
         title="cuBLAS GEMMs of growing size on the roofline")
    for dtype, (style, color) in GEMM_STYLE.items():
        pts = gemm_points[dtype]
        ax_r.loglog([k.intensity for k in pts], [k.gflops for k in pts], style, color=color,
                    label=f"{dtype} GEMM, n = {sizes[0]} ... {sizes[-1]}")
        ax_r.annotate(f"n = {sizes[0]}", (pts[0].intensity, pts[0].gflops),
                      textcoords="offset points",
                      xytext=(6, -10 if dtype == "float32" else 6), fontsize=9)
    ax_r.legend(loc="lower right", fontsize=9)

    for dtype, (style, color) in GEMM_STYLE.items():
        ax_n.plot(sizes, gemm_tflops[dtype], style, color=color, label=f"{dtype} (cuBLAS)")
    ax_n.axhline(ceilings.fp32_tflops, color="black", linewidth=1, label="FP32 roof")
    ax_n.axhline(ceilings.tensor_tflops, color="gray", linestyle="--", linewidth=1,
                 label="FP16 tensor roof")
    ax_n.set_xscale("log", base=2)
    ax_n.set_yscale("log")
    ax_n.set_xticks(sizes, labels=[str(n) for n in sizes])
    ax_n.set_xlabel("n (n x n matrices)")
    ax_n.set_ylabel("TFLOP/s")
    ax_n.set_title("Achieved rate against size")
    ax_n.grid(True, which="both", alpha=0.3)
    ax_n.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    return fig
