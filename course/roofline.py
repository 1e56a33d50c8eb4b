"""The roofline model: this GPU's ceilings, and a chart on which kernels are placed.

Introduced in the chapter *Performance model*; every later chapter places its kernels
on the same chart. A kernel is a point: its arithmetic intensity (FLOPs per byte of
device memory traffic) against the FLOP rate it reached. The roofs are what the GPU
can do: memory bandwidth times intensity, capped by the compute peak.

``measure_ceilings`` needs a GPU and CuPy; the rest runs anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ceilings:
    """What this GPU reaches: each figure measured by a library operation, or
    documented."""

    bandwidth_gbps: float  # device memory, GB/s (a device-to-device copy)
    fp32_tflops: float  # FP32 on the CUDA cores, TFLOP/s (a cuBLAS SGEMM, TF32 off)
    # FP16 on the tensor cores, TFLOP/s (a cuBLAS HGEMM)
    tensor_tflops: float | None = None
    source: str = ""

    def ridge(self, tflops: float | None = None) -> float:
        """The intensity (FLOP/byte) where the memory roof meets a compute roof."""
        return (tflops or self.fp32_tflops) * 1e12 / (self.bandwidth_gbps * 1e9)

    def attainable_gflops(self, intensity, tflops: float | None = None):
        """The roof at ``intensity``: min(bandwidth x intensity, compute peak), in
        GFLOP/s."""
        peak = (tflops or self.fp32_tflops) * 1e3
        return np.minimum(np.asarray(intensity, dtype=float) * self.bandwidth_gbps, peak)


@dataclass(frozen=True)
class Kernel:
    """One measured kernel: the FLOPs it must do, the bytes it must move, its run time."""

    name: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9

    def share_of_roof(self, ceilings: Ceilings, tflops: float | None = None) -> float:
        """The fraction of the roof (FP32, or the compute peak ``tflops``) reached at
        its intensity."""
        return float(self.gflops / ceilings.attainable_gflops(self.intensity, tflops))


# NVIDIA H200 SXM datasheet (nvidia.com/h200, 2024): 4.8 TB/s HBM3e, 67 TFLOP/s FP32,
# 989 TFLOP/s dense FP16 tensor (the datasheet's 1,979 counts 2:4 sparsity).
H200_DATASHEET = Ceilings(bandwidth_gbps=4800.0, fp32_tflops=67.0, tensor_tflops=989.0,
                          source="NVIDIA H200 datasheet (peak, not measured)")


def gemm_tflops(n: int, dtype: str, repeats: int = 10) -> float:
    """TFLOP/s of an n x n x n cuBLAS GEMM through CuPy (2 n^3 FLOPs). Needs a GPU."""
    import cupy as cp

    from .timing import gpu_time

    a = cp.random.random((n, n), dtype=cp.float32).astype(dtype)
    b = cp.random.random((n, n), dtype=cp.float32).astype(dtype)
    c = cp.empty((n, n), dtype=dtype)
    seconds = gpu_time(lambda: cp.matmul(a, b, out=c), repeats=repeats)
    return 2 * n**3 / seconds / 1e12


def measure_ceilings(gemm_n: int = 8192, copy_gbps: float | None = None) -> Ceilings:
    """Measure this GPU's roofs with library operations. Needs a GPU and CuPy.

    Pass ``copy_gbps`` to reuse a copy bandwidth already measured in the notebook, so that
    "% of the copy" and "% of the roof" refer to the same measurement.

    CuPy leaves TF32 off unless ``CUPY_TF32=1``, so the float32 GEMM runs on the CUDA
    cores; the float16 GEMM runs on the tensor cores.
    """
    import os

    import cupy as cp

    from .timing import copy_bandwidth_gbps

    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("CUPY_TF32 is set: the float32 GEMM would use tensor cores; "
                           "unset it")
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    return Ceilings(bandwidth_gbps=copy_gbps or copy_bandwidth_gbps(),
                    fp32_tflops=gemm_tflops(gemm_n, "float32"),
                    tensor_tflops=gemm_tflops(gemm_n, "float16"),
                    source=f"measured on {name}")


def plot(ceilings: Ceilings, kernels=(), ax=None, title: str | None = None,
         intensity_range=(1 / 16, 1024), tensor: bool = True, labels: str = "points"):
    """Draw the roofs and place each ``Kernel`` on them; returns the axes.

    ``labels="points"`` names each point beside it; ``labels="legend"`` names them in the legend,
    for points that crowd together (kernels of the same intensity).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    x = np.geomspace(*intensity_range, 400)
    roofs = [("FP32 (CUDA cores)", ceilings.fp32_tflops, "black", "-")]
    if tensor and ceilings.tensor_tflops:
        roofs.append(("FP16 (tensor cores)", ceilings.tensor_tflops, "tab:gray", "--"))
    for label, tflops, color, style in roofs:
        ax.loglog(x, ceilings.attainable_gflops(x, tflops), color=color, linestyle=style, linewidth=1.5,
                  label=f"{label}: {tflops:,.0f} TFLOP/s, ridge at {ceilings.ridge(tflops):.0f} FLOP/B")
    ax.plot([], [], " ", label=f"memory: {ceilings.bandwidth_gbps:,.0f} GB/s")
    colors = plt.get_cmap("tab10" if len(kernels) <= 10 else "tab20").colors
    for i, k in enumerate(kernels):
        color = colors[i % len(colors)]
        ax.loglog(k.intensity, k.gflops, "o", color=color, markersize=7,
                  label=k.name if labels == "legend" else None)
        if labels == "points":
            ax.annotate(k.name, (k.intensity, k.gflops), textcoords="offset points",
                        xytext=(6, -4 - 9 * (i % 2)), fontsize=8, color=color)
    ax.set_xlim(*intensity_range)
    top = max(r[1] for r in roofs) * 1e3
    ax.set_ylim(top / 1e5, top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory traffic)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or f"Roofline, {ceilings.source}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    return ax
