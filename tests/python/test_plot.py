"""benchmarks/demo.py --quick --plot: a roofline PNG of every kernel measured in the run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from variants import UNDER_QEMU

# matplotlib's own dependencies warn about deprecated pyparsing names on import: not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

pytest.importorskip("matplotlib", reason="matplotlib is not installed here: roofline plot test skipped")
if UNDER_QEMU:
    pytest.skip("under QEMU: the demo's timings are meaningless (and matplotlib is host-only)",
                allow_module_level=True)


def benchmarks_dir() -> Path:
    here = Path(__file__).parent
    for root in (here.parents[1], Path(__file__).resolve().parents[2]):
        if (root / "benchmarks" / "demo.py").is_file() and (root / "benchmarks" / "roofline.py").is_file():
            return root / "benchmarks"
    pytest.skip("benchmarks/demo.py and roofline.py not found next to the tests")


def test_quick_demo_writes_roofline_png(tmp_path):
    png, js = tmp_path / "roofline.png", tmp_path / "results.json"
    cmd = [sys.executable, str(benchmarks_dir() / "demo.py"), "--quick", "--threads", "1",
           "--plot", str(png), "--json", str(js)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=dict(os.environ, MPLBACKEND="Agg"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    assert "ternary_gemv B=1" in out.stderr  # progress lines
    results = json.loads(js.read_text())
    groups = {p["group"] for p in results["roofline_points"]}
    assert {"ternary_gemv fp32", "ternary_gemv int8", "widely_linear fused", "fused_moe"} <= groups
    assert all(p["intensity"] > 0 and p["ops_per_s"] > 0 for p in results["roofline_points"])
    assert results["peak_GFLOP_s"] > 0


def test_roofline_helper(tmp_path):
    sys.path.insert(0, str(benchmarks_dir()))
    try:
        import roofline
    finally:
        sys.path.pop(0)
    pts = [roofline.point("a", 2e9, 1e9, 0.5, "g"), roofline.point("b", 8e9, 1e9, 1.0, "h")]
    assert pts[0]["intensity"] == 2.0 and pts[0]["ops_per_s"] == 4e9
    path = roofline.draw(pts, bandwidth=10e9, peak=100e9, path=str(tmp_path / "r.png"))
    assert Path(path).read_bytes()[:4] == b"\x89PNG"
