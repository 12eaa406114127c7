"""benchmarks/peer/ik_peer.py without ik_llama.cpp: the shape table, the arguments, the table's
arithmetic, ik_mul_mat's output parsing, and a one-row run that must skip the ik columns with
the reason printed. Runs under pytest or as a script (//benchmarks/peer:ik_peer_test)."""

import contextlib
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ik_peer  # noqa: E402


def test_shapes_are_the_published_configurations():
    bitnet = {m.names: (m.m, m.k, m.kind) for m in ik_peer.matrices(["bitnet"])}
    assert bitnet == {"q, o": (2560, 2560, "ternary"), "k, v": (640, 2560, "ternary"),
                      "gate, up": (6912, 2560, "ternary"), "down": (2560, 6912, "ternary")}
    qwen = {m.names: (m.m, m.k, m.kind) for m in ik_peer.matrices(["qwen3-moe"])}
    assert qwen == {"q": (4096, 2048, "bf16"), "k, v": (512, 2048, "bf16"), "o": (2048, 4096, "bf16"),
                    "expert gate, expert up": (768, 2048, "bf16"), "expert down": (2048, 768, "bf16")}
    gpt = {m.names: (m.m, m.k, m.kind) for m in ik_peer.matrices(["gpt-oss"], lm_head_rows=0)}
    assert gpt == {"q": (4096, 2880, "bf16"), "k, v": (512, 2880, "bf16"), "o": (2880, 4096, "bf16"),
                   "expert gate_up": (5760, 2880, "mxfp4"), "expert down": (2880, 2880, "mxfp4"),
                   "lm_head": (201088, 2880, "bf16")}
    sliced = [m for m in ik_peer.matrices(["gpt-oss"], lm_head_rows=32768) if m.names.startswith("lm_head")]
    assert [(m.names, m.m) for m in sliced] == [("lm_head[:32768]", 32768)]
    # every K is a whole number of the formats' blocks (MXFP4 32, IQ2_BN 64, BF16_R16 rows 16)
    for m in ik_peer.matrices(list(ik_peer.MODELS)):
        assert m.k % 64 == 0 and m.m % 16 == 0, m


def test_matrix_filter_matches_the_last_word():
    names = [m.names for m in ik_peer.matrices(["qwen3-moe", "gpt-oss"], ["gate", "lm_head"])]
    assert names == ["expert gate", "lm_head[:32768]"]
    assert [m.names for m in ik_peer.matrices(["bitnet"], ["k"])] == ["k"]


def test_arguments():
    a = ik_peer.parse_args([])
    assert (a.models, a.t, a.threads, a.rounds, a.ik_llama_cpp_build) == (list(ik_peer.MODELS), [1, 2, 4, 8], [1, 2], 3, None)
    a = ik_peer.parse_args(["--models", "bitnet", "--t", "1,8", "--threads", "2", "--mxfp4-act", "int8"])
    assert (a.models, a.t, a.threads, a.mxfp4_act) == (["bitnet"], [1, 8], [2], ["int8"])
    for bad in (["--models", "llama"], ["--t", "0"], ["--t", "x"], ["--mxfp4-act", "bf16"], ["--rounds", "0"]):
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                ik_peer.parse_args(bad)
            except SystemExit as e:
                assert e.code == 2, bad
            else:
                raise AssertionError(f"accepted {bad}")


def test_table_arithmetic():
    # 10 MB in 1 ms = 10 GB/s; ik 2 ms on 8 MB = 4 GB/s; probe 20 GB/s
    n = ik_peer.row_numbers(1.0, 10_000_000, 2.0, 8_000_000, 20.0)
    assert abs(n["cpukern_gb_s"] - 10.0) < 1e-9 and abs(n["ik_gb_s"] - 4.0) < 1e-9
    assert abs(n["ratio"] - 2.0) < 1e-12
    assert abs(n["cpukern_of_probe"] - 0.5) < 1e-12 and abs(n["ik_of_probe"] - 0.2) < 1e-12
    assert n["meets_target"]
    # slower than 1.1x ik and under 95% of the probe: missed; at 95% of the probe: met
    assert not ik_peer.row_numbers(1.0, 10_000_000, 1.05, 10_000_000, 20.0)["meets_target"]
    assert ik_peer.row_numbers(1.0, 19_000_000, 0.5, 10_000_000, 20.0)["meets_target"]
    # no ik time: the ik fields stay empty and the row prints dashes
    n = ik_peer.row_numbers(1.0, 10_000_000, None, None, 20.0)
    assert n["ratio"] is None and n["ik_gb_s"] is None and not n["meets_target"]
    m = ik_peer.Matrix("bitnet", "k, v", 640, 2560, "ternary")
    row = ik_peer.format_row(m, "ternary int8_bitnet", "iq2_bn", 1, 2, 1.0, None, n, 0.5)
    assert row.startswith("| bitnet | k, v | 640x2560 |") and "| - |" in row
    assert row.count("|") == ik_peer.TABLE_HEADER.splitlines()[0].count("|")
    assert row.count("|") == ik_peer.TABLE_HEADER.splitlines()[1].count("|") and row.endswith("| 0.50 |")


def test_other_load():
    # 10 s of wall, 15 busy CPU seconds of which 5 were ours: other processes kept 1 core busy
    assert abs(ik_peer.other_cores((0.0, 100.0, 1.0), (10.0, 115.0, 6.0)) - 1.0) < 1e-12
    assert ik_peer.other_cores((0.0, 100.0, 1.0), (10.0, 104.0, 6.0)) == 0.0  # jiffy rounding
    start = ik_peer.cpu_sample()
    assert ik_peer.other_cores(start, ik_peer.cpu_sample()) >= 0.0
    assert ik_peer.wait_quiet(0) == 0.0 or ik_peer.wait_quiet(0) < 0.01  # no time: no sampling
    assert ik_peer.parse_args(["--wait-quiet", "30"]).wait_quiet == 30


def test_cold_copies_exceed_the_set():
    assert ik_peer.cold_copies(10, 95) == 10 and ik_peer.cold_copies(10, 100) == 10
    assert ik_peer.cold_copies(10, 101) == 11 and ik_peer.cold_copies(10**9, 96 << 20) == 1


def test_formats_per_kind():
    mx = ik_peer.Matrix("gpt-oss", "expert down", 2880, 2880, "mxfp4")
    assert ik_peer.cpukern_formats(mx, ["fp32", "int8"]) == ["mxfp4", "mxfp4_a8"]
    assert ik_peer.cpukern_formats(ik_peer.Matrix("q", "q", 16, 64, "bf16"), ["fp32"]) == ["bf16"]
    assert ik_peer.cpukern_formats(ik_peer.Matrix("q", "q", 16, 64, "bf16"), ["fp32"], int8=True) == ["bf16", "int8"]
    assert ik_peer.cpukern_formats(ik_peer.Matrix("b", "k", 16, 64, "ternary"), ["fp32"], int8=True) == ["ternary int8_bitnet"]
    # every cpukern format has its ik type
    assert {ik_peer.IK_TYPE[f] for f in ("ternary int8_bitnet", "bf16", "mxfp4", "mxfp4_a8", "int8")} == \
        {"iq2_bn", "bf16", "mxfp4", "q8_0"}


def test_ik_output_parsing():
    lines = "\n".join([
        "some log line",
        json.dumps({"type": "bf16", "kernel_type": "bf16_r16", "repacked": True, "m": 16, "k": 64,
                    "t": 1, "threads": 2, "copies": 3, "weight_bytes": 2048, "seconds_per_call": 1e-6}),
        json.dumps({"type": "bf16", "kernel_type": "bf16_r16", "repacked": True, "m": 16, "k": 64,
                    "t": 8, "threads": 2, "copies": 3, "weight_bytes": 2048, "seconds_per_call": 2e-6}),
    ])
    cases = ik_peer.parse_ik_lines(lines)
    assert sorted(cases) == [(1, 2), (8, 2)] and cases[(8, 2)]["seconds_per_call"] == 2e-6


def test_a_build_without_libraries_is_refused():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "CMakeCache.txt"), "w") as f:
            f.write(f"CMAKE_HOME_DIRECTORY:INTERNAL={d}\n")
        assert ik_peer.ik_source_dir(d) == d and ik_peer.ik_libraries(d) == []
        try:
            ik_peer.build_ik_mul_mat(d, d)
        except RuntimeError as e:
            assert "libggml" in str(e)
        else:
            raise AssertionError("built without libggml")


def test_run_without_ik_skips_its_rows_with_the_reason():
    import ggml_peer
    # A fixed probe and a 1 MiB "L3" (one weight copy): the run's plumbing, in a second.
    fake_probe = {"cpu": "test", "l3_bytes": 1 << 20, "cores": 1, "read_GB_s": {"1": 10.0}}
    saved = ggml_peer.probe, ggml_peer.l3_bytes
    ggml_peer.probe, ggml_peer.l3_bytes = (lambda binary: fake_probe), (lambda: 1 << 20)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = ik_peer.main(["--models", "bitnet", "--matrices", "k", "--t", "1", "--threads", "1",
                               "--rounds", "1", "--min-time", "0.01"])
    finally:
        ggml_peer.probe, ggml_peer.l3_bytes = saved
    text = out.getvalue()
    assert rc == 0
    assert "ik_llama.cpp rows skipped: no --ik-llama-cpp-build given" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| bitnet |")]
    assert len(rows) == 1 and "| 640x2560 |" in rows[0] and "| - |" in rows[0], text


if __name__ == "__main__":
    try:
        import cpukern  # noqa: F401
    except ImportError as e:  # a cross leg: the package is built for the other architecture
        print(f"SKIP: ik_peer_test runs on the host; the built cpukern does not load here ({e})")
        sys.exit(0)
    tests = [(name, f) for name, f in sorted(globals().items()) if name.startswith("test_")]
    for name, f in tests:
        f()
        print(f"ok {name}")
    print(f"{len(tests)} passed")
