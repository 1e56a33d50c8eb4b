"""The roofline helper the Part II chapters share: roofs, ridge points, kernel placement."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from course.roofline import H200_DATASHEET, Ceilings, Kernel, plot  # noqa: E402


def test_roof_is_memory_then_compute():
    c = Ceilings(bandwidth_gbps=4000.0, fp32_tflops=60.0, tensor_tflops=600.0)
    assert c.ridge() == pytest.approx(15.0)  # 60e12 / 4e12
    assert c.ridge(c.tensor_tflops) == pytest.approx(150.0)
    roof = c.attainable_gflops([1.0, 15.0, 100.0])
    np.testing.assert_allclose(roof, [4000.0, 60000.0, 60000.0])


def test_kernel_point_and_share_of_roof():
    c = Ceilings(bandwidth_gbps=4000.0, fp32_tflops=60.0)
    # A vector add of n floats: n FLOPs, 12 n bytes; at 2,000 GB/s it sits at half the roof.
    n = 1 << 20
    k = Kernel("add", flops=n, bytes=12 * n, seconds=12 * n / 2000e9)
    assert k.intensity == pytest.approx(1 / 12)
    assert k.gbps == pytest.approx(2000.0)
    assert k.share_of_roof(c) == pytest.approx(0.5)


def test_plot_draws_roofs_and_points():
    kernels = [Kernel("copy", 0, 8, 1e-9), Kernel("gemm", 2e12, 1e9, 0.1)]
    kernels = [k for k in kernels if k.flops > 0]  # zero FLOPs has no place on a log axis
    ax = plot(H200_DATASHEET, kernels)
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["gemm"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("FP32" in s for s in legend) and any("tensor" in s for s in legend)
    assert any("4,800 GB/s" in s for s in legend)


def test_plot_can_name_crowded_points_in_the_legend():
    same = [Kernel(f"k{i}", 1e9, 8e9, 1e-3 * (i + 1)) for i in range(12)]  # one intensity, 12 points
    ax = plot(H200_DATASHEET, same, labels="legend")
    assert len(ax.texts) == 0
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert all(f"k{i}" in legend for i in range(12))
    colors = {tuple(line.get_color()) for line in ax.lines if line.get_label().startswith("k")}
    assert len(colors) == 12  # no colour repeats among 12 points
