"""benchmarks/calibrated_accuracy.py's reference column: the least error one scale leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrated_accuracy.py"


@pytest.fixture(scope="module")
def acc():
    return load_script(SCRIPT)


@pytest.mark.parametrize("errors", [[0.1, 0.1], [-0.1, 0.1, 0.2], [0.3, -0.25, 0.05, 0.12, -0.4], [0.0]])
def test_best_scale_is_no_worse_than_any_scale_tried(acc, errors):
    """Against a fine grid of factors: none leaves less than the function's minimum, and the
    minimum is reached (the corners ``1 / r_i`` hold it)."""
    best = acc.best_scale_mape(errors)
    grid = [0.5 + 0.001 * i for i in range(1501)]
    tried = [100 * sum(abs(c * (1 + e) - 1) for e in errors) / len(errors) for c in grid]
    assert best <= min(tried) + 1e-9
    corners = [100 * sum(abs((1 + e) / (1 + a) - 1) for e in errors) / len(errors)
               for a in errors]
    assert best == pytest.approx(min(corners))
    if len(set(errors)) == 1:
        assert best == 0.0
