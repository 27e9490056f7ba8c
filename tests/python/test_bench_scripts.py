"""The benchmark helpers in bench/ that need no GPU: the peers' timer (warm-up by count and by time, then
the median of the timed calls), the commit the merged results record, and the merged decode table; the
one-process decode comparison's arguments and per-round ratios (bench/decode_ab.py) and the rounds' order
(bench/interleaved.py); the targets report of bench/targets.py; the profile reader scripts/ncu_stalls.py on a
small made-up listing; the probe insertion of scripts/decode_lab.py on the library's decode kernel; the A/B
table of scripts/fa3_ab.sh, the source trees of scripts/ab_trees.sh, the probe of scripts/fa3_probe.sh, the
decode A/B call of scripts/decode_ab_call.sh and the forms in turn of scripts/candidate_ab_forms.sh; the SASS
counts and the overlap check of scripts/gpu_check.sh (scripts/sass_counts.awk, scripts/sass_overlap.awk); and
the per-kernel code comparison of scripts/kernel_text.py on made-up ELF files."""

import csv
import json
import gzip
import os
import sys
import time

import shutil
import statistics
import struct
import subprocess
import tarfile

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, BENCH)
sys.path.insert(0, SCRIPTS)

import ab_table  # noqa: E402
import bench_common  # noqa: E402
import candidate_ab  # noqa: E402
import compare  # noqa: E402
import decode_ab  # noqa: E402
import decode_lab  # noqa: E402
import interleaved  # noqa: E402
import kernel_text  # noqa: E402
import launch_gaps  # noqa: E402
import ncu_stalls  # noqa: E402
import peer_kernels  # noqa: E402
import peers_sdpa  # noqa: E402
import targets  # noqa: E402


class FakeTorch:
    """Just enough of torch for peers_sdpa.Timer: host-clock events and a synchronize that counts."""

    class _Cuda:
        def __init__(self):
            self.syncs = 0

        def synchronize(self):
            self.syncs += 1

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = time.perf_counter()

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

    def __init__(self):
        self.cuda = FakeTorch._Cuda()


def test_timer_warms_up_by_count_without_a_time():
    torch, calls = FakeTorch(), []
    timer = peers_sdpa.Timer(torch, warmup=2, repeat=3, warmup_ms=0.0)
    timer.median_ms(lambda: calls.append(1))
    assert len(calls) == 2 + 3


def test_timer_warms_up_until_the_time_has_passed():
    torch, starts = FakeTorch(), []
    call_ms = 2.0

    def call():
        starts.append(time.perf_counter())
        time.sleep(call_ms / 1e3)

    begin = time.perf_counter()
    ms = peers_sdpa.Timer(torch, warmup=1, repeat=3, warmup_ms=40.0).median_ms(call)
    warmup_calls = len(starts) - 3
    # At least 40 ms of untimed calls (by the clock: a sleep may last longer than asked) before the first timed
    # one starts, queued in batches rather than one sync per call. (The timer reads its clock after a call has
    # returned, so the last untimed call may itself end a little before the 40 ms are up.)
    assert warmup_calls >= 1
    assert (starts[warmup_calls] - begin) * 1e3 >= 40.0
    assert torch.cuda.syncs < warmup_calls
    # The timed calls are measured one by one: about call_ms each.
    assert call_ms * 0.9 <= ms <= call_ms * 20


def test_interleaved_shapes_default_to_the_sweep_and_parse_lists():
    args = interleaved.parse_args([])
    shapes = interleaved.sweep(args)
    assert len(shapes) == 36 and shapes[0] == (64, 512, False) and shapes[-1] == (256, 16384, True)
    assert interleaved.sweep(interleaved.parse_args(["--quick"]))[:2] == [(64, 512, False), (64, 512, True)]
    assert interleaved.sweep(interleaved.parse_args(["--shapes", "128:2048:1,256:512:no"])) == [
        (128, 2048, True), (256, 512, False)]


def test_candidate_ab_parses_shapes_and_refuses_too_few_rounds():
    args = candidate_ab.parse_args(["--shapes", "128:1024:0,64:2048:1", "--rounds", "8"])
    assert bench_common.parse_shapes(args.shapes) == [(128, 1024, False), (64, 2048, True)]
    assert args.rounds == 8 and args.calls == 10
    with pytest.raises(SystemExit):
        candidate_ab.parse_args(["--rounds", "1"])


def test_candidate_ab_takes_the_fa2_backward_and_names_each_family_s_switch():
    args = candidate_ab.parse_args(["--algo", "fa2", "--backward"])
    assert args.algo == "fa2" and args.backward
    assert candidate_ab.parse_args([]).algo == "fa3"
    assert candidate_ab.candidate_env("fa2") == "FLASHATTN_FA2_CANDIDATE"
    assert candidate_ab.candidate_env("fa3") == "FLASHATTN_FA3_CANDIDATE"
    # fa3 has no backward kernels, so no candidate form of one.
    with pytest.raises(SystemExit):
        candidate_ab.parse_args(["--backward"])


def test_candidate_ab_script_refuses_an_unknown_family_before_building(tmp_path):
    run = subprocess.run(["bash", os.path.join(SCRIPTS, "candidate_ab.sh"), str(tmp_path / "out")],
                         env=dict(os.environ, CAND_ALGO="fa4"), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "CAND_ALGO must be fa3 or fa2" in run.stderr
    assert not (tmp_path / "out").exists()


def test_candidate_ab_per_round_ratios_do_not_see_a_clock_drift():
    # The clock slows both forms alike from round to round (1.00x .. 1.30x); the candidate is 4% faster in each
    # round. The medians over all calls mix the rounds; the per-round ratios stay at 1.04 exactly.
    drift = [1.0 + 0.1 * r for r in range(4)]
    rounds = {"shipped": [[1.04 * f, 1.04 * f, 1.05 * f] for f in drift],
              "candidate": [[1.00 * f, 1.00 * f, 1.01 * f] for f in drift]}
    s = candidate_ab.summarize(rounds)
    assert s["rounds"] == 4
    assert s["round_ratio_median"] == pytest.approx(1.04) and s["round_ratio_q1"] == pytest.approx(1.04)
    assert s["round_ratio_q3"] == pytest.approx(1.04)
    assert s["shipped_ms"] == pytest.approx(statistics.median([t for r in rounds["shipped"] for t in r]))
    assert s["ratio"] == pytest.approx(s["shipped_ms"] / s["candidate_ms"])
    # A slower candidate reads below 1.
    slower = candidate_ab.summarize({"shipped": rounds["candidate"], "candidate": rounds["shipped"]})
    assert slower["round_ratio_median"] == pytest.approx(1 / 1.04)


def test_decode_ab_parses_shapes_and_split_counts_and_refuses_bad_ones():
    args = decode_ab.parse_args([])
    assert args.shape_list == [(1, 32768), (1, 131072), (16, 8192), (64, 4096)]
    assert args.split_list == [0] and args.peer == "cudnn" and args.rounds == 20
    args = decode_ab.parse_args(["--shapes", "64:4096,16:8192", "--splits", "0,2", "--peer", "flash"])
    assert args.shape_list == [(64, 4096), (16, 8192)] and args.split_list == [0, 2]
    assert [decode_ab.side_name(s) for s in args.split_list] == ["ours", "ours_s2"]
    for bad in (["--shapes", "64"], ["--shapes", "0:4096"], ["--shapes", "4:x"], ["--splits", "0,0"],
                ["--splits", "-1"], ["--splits", ""], ["--rounds", "1"]):
        with pytest.raises(SystemExit):
            decode_ab.parse_args(bad)


def test_round_order_rotates_the_order_so_each_side_takes_each_place_equally():
    sides = ["peer", "ours", "ours_s2"]
    orders = [interleaved.round_order(sides, r) for r in range(6)]
    assert orders[0] == sides and orders[1] == ["ours", "ours_s2", "peer"] and orders[3] == sides
    for order in orders:
        assert sorted(order) == sorted(sides)
    for place in range(3):
        assert sorted(order[place] for order in orders) == sorted(sides * 2)
    assert [interleaved.round_order(["peer", "ours"], r) for r in range(2)] == [["peer", "ours"], ["ours", "peer"]]


def test_decode_ab_per_round_ratios_do_not_see_a_clock_drift():
    # The clock slows both sides alike from round to round; ours is 2% faster in each round.
    drift = [1.0 + 0.05 * r for r in range(5)]
    peer = [[0.102 * f, 0.102 * f, 0.103 * f] for f in drift]
    ours = [[0.100 * f, 0.100 * f, 0.101 * f] for f in drift]
    c = decode_ab.compare_rounds(peer, ours)
    assert c["round_ratio_median"] == pytest.approx(1.02) and c["round_ratio_q1"] == pytest.approx(1.02)
    assert c["ratio"] == pytest.approx(c["peer_ms"] / c["ms"])
    assert decode_ab.compare_rounds(ours, peer)["round_ratio_q3"] == pytest.approx(1 / 1.02)
    with pytest.raises(ValueError):
        decode_ab.compare_rounds(peer, ours[:3])
    # 1 GB read in 0.25 ms is 4 TB/s.
    assert decode_ab.tbps(1e9, 0.25) == pytest.approx(4.0)


def test_interleaved_warm_up_alternates_the_sides_until_the_time_has_passed():
    torch, order = FakeTorch(), []

    def side(name):
        def call():
            time.sleep(0.5e-3)
            order.append(name)
        return call

    begin = time.perf_counter()
    interleaved.warm(torch, [side("a"), side("b")], 30.0)
    assert (time.perf_counter() - begin) * 1e3 >= 30.0
    # Each turn is a batch of calls of one side, then the other side's batch, starting with "a": each side has had
    # at least two turns (a single probing call, then a batch sized from it), and the batches are synchronized
    # once each, not per call. The batch sizes follow measured sleeps, which a busy machine stretches, so the
    # two sides' call counts are not compared.
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert runs[:4] == ["a", "b", "a", "b"]
    assert torch.cuda.syncs < len(order)
    times = bench_common.queued_event_times(torch, side("a"), 4)
    assert len(times) == 4 and all(0.4 <= t <= 20 for t in times)


def write_trace(path, kernels):
    events = [{"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"grid": [132, 1, 1], "block": [384, 1, 1]}}
              for name, ts, dur in kernels]
    events.append({"cat": "cpu_op", "name": "aten::add", "ts": 0.0, "dur": 5.0})
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)


def test_launch_gaps_reads_kernels_in_start_order(tmp_path):
    path = tmp_path / "trace.json"
    write_trace(path, [("k2", 20.0, 8.0), ("k1", 0.0, 10.0)])
    assert launch_gaps.kernel_events(str(path)) == [(0.0, 10.0, "k1"), (20.0, 8.0, "k2")]


def test_peer_kernels_totals_calls_and_keeps_the_first_launch_configuration(tmp_path):
    path = tmp_path / "trace.json"
    write_trace(path, [("fprop", 0.0, 10.0), ("fprop", 30.0, 14.0), ("helper", 12.0, 1.0)])
    rows = peer_kernels.kernel_rows(str(path))
    assert [r["kernel"] for r in rows] == ["fprop", "helper"]
    assert rows[0]["calls"] == 2 and rows[0]["mean_us"] == 12.0 and rows[0]["grid"] == [132, 1, 1]
    assert bench_common.parse_shapes("128:512:0,64:8192:1") == [(128, 512, False), (64, 8192, True)]


def test_merged_results_record_flashattn_commit_first(monkeypatch):
    monkeypatch.setenv("FLASHATTN_COMMIT", "abc123")
    assert compare.commit({"commit": "from-ours"}) == "abc123"
    monkeypatch.delenv("FLASHATTN_COMMIT")
    monkeypatch.setattr(bench_common, "head_commit", lambda: None)
    assert compare.commit({"commit": "from-ours"}) == "from-ours"
    assert compare.commit({}) == "unknown"


def test_every_script_records_flashattn_commit_before_git(monkeypatch):
    monkeypatch.setattr(bench_common, "head_commit", lambda: "from-git")
    monkeypatch.setenv("FLASHATTN_COMMIT", "abc123")
    assert bench_common.run_commit() == "abc123"
    monkeypatch.delenv("FLASHATTN_COMMIT")
    assert bench_common.run_commit() == "from-git"


def test_decode_table_keeps_every_rate_of_ours_and_divides_by_the_peers(capsys):
    ours = {"benchmark": "gpu_decode", "commit": "abc", "ceil": {"copy_TBps": 4.0},
            "rows": [{"b": 1, "seqlen_k": 32768, "layout": "contiguous", "TBps": 3.0, "api_TBps": 2.0,
                      "trusted_TBps": 2.9, "fraction_of_copy": 0.75},
                     {"b": 1, "seqlen_k": 32768, "layout": "paged", "TBps": 2.8, "api_TBps": 1.6,
                      "trusted_TBps": 2.7, "fraction_of_copy": 0.7},
                     {"b": 64, "seqlen_k": 4096, "layout": "contiguous", "error": "refused"}]}
    peers = {"ceil": {"copy_TBps": 4.1},
             "rows": [{"b": 1, "seqlen_k": 32768, "layout": "contiguous", "impl": "cudnn", "TBps": 3.2}]}
    table = compare.decode_table(ours, peers)
    assert len(table) == 2, "rows that failed are left out"
    first, paged = table
    assert (first["ours_TBps"], first["ours_api_TBps"], first["ours_trusted_TBps"]) == (3.0, 2.0, 2.9)
    assert first["ratio_cudnn"] == pytest.approx(3.0 / 3.2)
    assert "ratio_flash" not in first and "ratio_cudnn" not in paged
    compare.decode_main(compare.parse_args(["--ours", "unused.json"]), ours, peers)
    printed = capsys.readouterr().out
    assert "trusted" in printed and "2.90" in printed and "0.94" in printed


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def write_listing(path, rows):
    """A listing in the layout of `ncu --page source --print-source sass --csv`: a kernel-name row, a header,
    then (source, samples, executions, long-scoreboard samples) per instruction."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_long_sb", "stall_long_sb (Not Issued)"]
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(header)
        for i, (src, samples, executed, long_sb) in enumerate(rows):
            w.writerow([hex(i * 16), src, samples, executed, long_sb, 0])


def test_ncu_stalls_phases_split_at_barriers_commits_and_branches(tmp_path, capsys):
    path = str(tmp_path / "k_sass.csv.gz")
    write_listing(path, [
        ("LDGSTS.E.BYPASS.128 [R1], desc[UR8][R2.64]", 10, 1_000_000, 0),
        ("LDGDEPBAR", 0, 1_000_000, 0),
        ("HMMA.16816.F32.BF16 R4, R8, R12, R4", 50, 4_000_000, 0),
        ("HMMA.16816.F32.BF16 R4, R8, R12, R4", 20, 4_000_000, 0),
        ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, 1_000_000, 0),
        ("REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU desc[UR8][R2.64], R4", 5, 1_000_000, 5),
        ("@P0 BRA 0x10", 15, 1_000_000, 0),
        ("EXIT", 0, 1, 0),
    ])
    assert ncu_stalls.main([path, "--phases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Three stretches with samples: the loads (to the commit), the products (to the barrier), the
    # reductions (to the branch); the EXIT alone has none and is not listed.
    assert [line.split()[0] for line in lines] == ["0-1", "2-4", "5-6"]
    shares = [float(line.split()[1].rstrip("%")) for line in lines]
    assert shares == [10.0, 70.0, 20.0]
    assert "HMMA 70.0%" in lines[1] and "9.0 M executed" in lines[1]
    assert "BRA 15.0%" in lines[2] and "REDG 5.0%" in lines[2]


def test_ncu_stalls_summary_counts_reasons_and_the_executed_mix(tmp_path, capsys):
    path = str(tmp_path / "k_sass.csv.gz")
    write_listing(path, [
        ("@!P1 IMAD R1, R2, R3, RZ", 30, 300, 30),
        ("HMMA.16816.F32.BF16 R4, R8, R12, R4", 70, 100, 0),
    ])
    assert ncu_stalls.main([path, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 instructions, 100 samples, 400 warp instructions executed" in out
    assert "by reason: long_sb 30.0%" in out
    # The predicate is not the opcode; the mix counts executions, not samples.
    assert "executed:  IMAD 75.0%, HMMA 25.0%" in out


def test_ncu_stalls_memory_counts_excess_sectors_of_the_first_launch(tmp_path, capsys):
    path = str(tmp_path / "k_sass.csv.gz")
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal",
              "L1 Wavefronts Shared Excessive"]
    first = [("LDGSTS.E.BYPASS.LTC128B.128 [R1], desc[UR8][R2.64]", 5, 100, 2400, 1600, 650),
             ("LDGSTS.E.BYPASS.LTC128B.128 [R1+0x10], desc[UR8][R4.64]", 5, 100, 1600, 1600, 0),
             ("LDSM.16.M88.4 R8, [R3]", 3, 200, 0, 0, 0),
             ("STG.E.U16 desc[UR8][R6.64], R0", 1, 10, "1,000", 100, 0)]
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        for rows in (first, [("LDGSTS.E.BYPASS.128 [R1], desc[UR8][R2.64]", 1, 7, 7000, 1, 0)]):
            w.writerow(["Kernel Name", "k"])  # a second launch repeats the name and the header
            w.writerow(header)
            for i, row in enumerate(rows):
                w.writerow([hex(i * 16), *row])
    assert ncu_stalls.main([path, "--memory", "--top", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Opcodes by sectors asked for; LDSM moves no global sectors and no excess wavefronts: not listed.
    assert lines[0].split()[0] == "LDGSTS" and "L2 sectors  20.00 per instruction (ideal  16.00)" in lines[0]
    assert "shared wavefronts beyond ideal   3.25" in lines[0]
    assert lines[1].split()[0] == "STG" and "L2 sectors 100.00" in lines[1]
    assert not any(line.split()[0] == "LDSM" for line in lines)
    # Then the instructions with excess sectors, most first; the exact ones and the second launch are not.
    assert [line.split()[:2] for line in lines[2:]] == [["3", "900"], ["0", "800"]]


def test_ncu_stalls_memory_needs_the_source_counters(tmp_path, capsys):
    path = str(tmp_path / "k_sass.csv.gz")
    write_listing(path, [("HMMA.16816.F32.BF16 R4, R8, R12, R4", 1, 1, 0)])
    assert ncu_stalls.main([path, "--memory"]) == 1
    assert "L2 Theoretical Sectors Global" in capsys.readouterr().err


def test_decode_lab_probes_the_librarys_kernel():
    with open(decode_lab.KERNEL) as f:
        source = f.read()
    probed = decode_lab.probed_kernel_source(source)
    # Every probe once, in kernel order: start, loop end, rows written (before the direct return), merge end.
    marks = ["#include \"probe.cuh\"", "probe_t0 = lab_gtime()", "probe_t1 = lab_gtime()",
             "lab_probe(probe_t0, probe_t1);\n  if (direct) return;", "lab_probe_merge(tile);",
             "if (!g_lab_skip) attend_block"]
    for mark in marks:
        assert probed.count(mark) == 1, mark
    order = [probed.index(m) for m in marks[:5]]
    assert order == sorted(order)
    # The merge probe follows the whole merge call, whatever its arguments.
    call = probed.index("  merge_splits<Cfg, T>(")
    assert probed.index(";\n", call) + 2 == probed.index("  lab_probe_merge(tile);")
    # Nothing else changed.
    assert len(probed.splitlines()) == len(source.splitlines()) + 5


def test_decode_lab_probes_the_start_of_an_older_kernel_too():
    # Before a4e56a1 the kernel computed its work in line after the wait; --kernel may name such a version.
    with open(decode_lab.KERNEL) as f:
        source = f.read()
    assert source.count(decode_lab.START_ANCHORS[0]) == 1
    older = source.replace(decode_lab.START_ANCHORS[0], decode_lab.START_ANCHORS[1])
    probed = decode_lab.probed_kernel_source(older)
    assert probed.count("probe_t0 = lab_gtime();\n" + decode_lab.START_ANCHORS[1]) == 1


def test_decode_lab_refuses_a_kernel_without_an_anchor():
    with open(decode_lab.KERNEL) as f:
        source = f.read().replace("  if (direct) return;\n", "")
    with pytest.raises(ValueError, match="if \\(direct\\) return"):
        decode_lab.probed_kernel_source(source)


def test_decode_lab_keeps_the_labs_json_lines():
    out = 'decode_lab: building\n{"exp":"read_ldg","us":1.5}\nnoise\n{"exp":"done"}\n'
    assert decode_lab.parse_lines(out) == [{"exp": "read_ldg", "us": 1.5}]


def _write_rows(path, rows):
    """A `flashattn bench --json` file holding these rows."""
    with open(path, "w") as f:
        json.dump({"gpu": {"name": "test GPU"}, "date": "2026-12-02T00:00:00Z", "rows": rows}, f)


def _bench_file(path, rows):
    rows = [{"algo": "fa3", "direction": "fwd", "d": d, "N": n, "causal": c, "tflops": t} for d, n, c, t in rows]
    rows.append({"algo": "fa2", "direction": "fwd", "d": 64, "N": 512, "causal": False, "tflops": 1.0})
    rows.append({"algo": "fa3", "direction": "bwd", "d": 64, "N": 512, "causal": False, "tflops": 2.0})
    _write_rows(path, rows)


def test_ab_table_means_the_passes_and_divides_by_the_first_tree_and_cudnn(tmp_path, capsys, monkeypatch):
    _bench_file(tmp_path / "old-1.json", [(64, 512, False, 100.0), (64, 512, True, 50.0)])
    _bench_file(tmp_path / "old-2.json", [(64, 512, False, 110.0), (64, 512, True, 50.0)])
    _bench_file(tmp_path / "new-1.json", [(64, 512, False, 126.0), (64, 512, True, 40.0)])
    _bench_file(tmp_path / "new-2.json", [(64, 512, False, 126.0)])  # a shape missing from one pass
    with open(tmp_path / "peers.json", "w") as f:
        json.dump({"torch": "t", "cudnn": 1, "rows": [
            {"impl": "cudnn", "direction": "fwd", "d": 64, "N": 512, "causal": False, "tflops": 210.0},
            {"impl": "cudnn", "direction": "bwd", "d": 64, "N": 512, "causal": False, "tflops": 1.0},
            {"impl": "flash", "direction": "fwd", "d": 64, "N": 512, "causal": True, "tflops": 1.0}]}, f)
    (tmp_path / "sources.txt").write_text("old 0123456789abcdef\nnew fedcba9876543210\n")
    monkeypatch.setenv("FA3_AB_COMMIT", "old = abc123; new = old + x.patch")
    assert ab_table.main([str(tmp_path), "old", "new"]) == 0
    with open(tmp_path / "ab.json") as f:
        result = json.load(f)
    assert result["trees"] == ["old", "new"] and result["passes"] == 2 and result["gpu"] == {"name": "test GPU"}
    assert result["sources"] == {"old": "0123456789abcdef", "new": "fedcba9876543210"}
    assert result["commit"] == "old = abc123; new = old + x.patch"
    rows = {(r["d"], r["N"], r["causal"]): r for r in result["table"]}
    assert sorted(rows) == [(64, 512, False), (64, 512, True)]  # fa2 and backward rows left out
    assert rows[(64, 512, False)]["old"] == {"mean": 105.0, "passes": [100.0, 110.0]}
    assert rows[(64, 512, True)]["new"] == {"mean": 40.0, "passes": [40.0]}
    assert rows[(64, 512, False)]["cudnn"] == 210.0 and rows[(64, 512, True)]["cudnn"] is None
    out = capsys.readouterr().out
    # new / old: 126 / 105 = 1.2 and 40 / 50 = 0.8; geometric mean sqrt(0.96).
    assert "new / old: geometric mean %.3f, min 0.800, max 1.200" % (0.96 ** 0.5) in out
    assert "old / cudnn: geometric mean 0.500, min 0.500, max 0.500" in out
    # Both passes of new above both of old at the non-causal row; the causal row has one pass of new.
    assert result["separated"] == {"new": {"above": ["64 512 False"], "below": []}}
    assert "new / old: every pass above every pass on 1 rows (64 512 False), below on 0 (none)" in out


def test_ab_table_decode_keys_rows_by_shape_and_layout(tmp_path, capsys):
    def decode_file(path, rows):
        _write_rows(path, [{"b": b, "seqlen_k": n, "layout": layout, "TBps": tbps} for b, n, layout, tbps in rows]
                    + [{"b": 9, "seqlen_k": 9, "layout": "paged", "error": "refused"}])

    decode_file(tmp_path / "base-1.json", [(1, 32768, "contiguous", 3.0), (1, 32768, "paged", 2.5)])
    decode_file(tmp_path / "base-2.json", [(1, 32768, "contiguous", 3.2), (1, 32768, "paged", 2.5)])
    decode_file(tmp_path / "new-1.json", [(1, 32768, "contiguous", 3.1), (1, 32768, "paged", 3.0)])
    with open(tmp_path / "peers.json", "w") as f:
        json.dump({"torch": "t", "cudnn": 1, "rows": [
            {"impl": "cudnn", "b": 1, "seqlen_k": 32768, "layout": "contiguous", "TBps": 3.1},
            {"impl": "flash", "b": 1, "seqlen_k": 32768, "layout": "contiguous", "TBps": 9.0}]}, f)
    assert ab_table.main(["--decode", str(tmp_path), "base", "new"]) == 0
    with open(tmp_path / "ab.json") as f:
        result = json.load(f)
    assert result["unit"] == "TB/s" and result["passes"] == 2
    rows = {(r["b"], r["seqlen_k"], r["layout"]): r for r in result["table"]}
    assert sorted(rows) == [(1, 32768, "contiguous"), (1, 32768, "paged")]  # the failed row left out
    assert rows[(1, 32768, "contiguous")]["base"] == {"mean": 3.1, "passes": [3.0, 3.2]}
    assert rows[(1, 32768, "contiguous")]["cudnn"] == 3.1 and rows[(1, 32768, "paged")]["cudnn"] is None
    out = capsys.readouterr().out
    # new / base: 3.1 / 3.1 = 1 and 3.0 / 2.5 = 1.2.
    assert "new / base: geometric mean %.3f, min 1.000, max 1.200" % (1.2 ** 0.5) in out
    assert "base / cudnn: geometric mean 1.000" in out


def test_ab_table_fa2_keys_rows_by_direction_and_divides_by_flash(tmp_path, capsys):
    def fa2_file(path, rows):
        _write_rows(path, [{"algo": "fa2", "direction": dr, "d": 128, "N": 1024, "causal": False, "tflops": t}
                           for dr, t in rows]
                    + [{"algo": "fa3", "direction": "fwd", "d": 128, "N": 1024, "causal": False, "tflops": 999.0}])

    fa2_file(tmp_path / "base-1.json", [("fwd", 300.0), ("bwd", 200.0)])
    fa2_file(tmp_path / "new-1.json", [("fwd", 330.0)])  # a forward-only sweep (--dir fwd)
    with open(tmp_path / "peers.json", "w") as f:
        json.dump({"torch": "t", "cudnn": 1, "rows": [
            {"impl": "flash", "direction": "fwd", "d": 128, "N": 1024, "causal": False, "tflops": 300.0},
            {"impl": "cudnn", "direction": "fwd", "d": 128, "N": 1024, "causal": False, "tflops": 600.0}]}, f)
    assert ab_table.main(["--fa2", str(tmp_path), "base", "new"]) == 0
    with open(tmp_path / "ab.json") as f:
        result = json.load(f)
    assert result["peer"] == "flash"
    rows = {(r["dir"], r["d"], r["N"], r["causal"]): r for r in result["table"]}
    assert sorted(rows) == [("bwd", 128, 1024, False), ("fwd", 128, 1024, False)]  # the fa3 row left out
    assert rows[("fwd", 128, 1024, False)]["flash"] == 300.0 and rows[("bwd", 128, 1024, False)]["flash"] is None
    assert rows[("bwd", 128, 1024, False)]["new"] == {"mean": None, "passes": []}
    out = capsys.readouterr().out
    assert "new / base: geometric mean 1.100, min 1.100, max 1.100" in out
    assert "new / flash: geometric mean 1.100" in out


SASS_TWO_SECTIONS = """
Fatbin elf code:
================
arch = sm_80
code version = [1,7]
	code for sm_80
		Function : _Z9fa3_stubv
        /*0000*/                   EXIT ;
		Function : _Z10fa2_kernelv
        /*0000*/                   HMMA.16816.F32.BF16 R0, R4, R8, R0 ;
        /*0010*/                   HMMA.16816.F32.BF16 R0, R4, R8, R0 ;
Fatbin elf code:
================
arch = sm_90a
	code for sm_90a
		Function : _Z9fa3_stubv
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24 ;
		Function : _Z10fa2_kernelv
        /*0000*/                   HMMA.16816.F32.BF16 R0, R4, R8, R0 ;
"""


def _awk_rows(script, sass, tmp_path):
    """scripts/SCRIPT run on the SASS listing `sass`: its output lines split at tabs."""
    path = tmp_path / "sass.txt"
    path.write_text(sass)
    out = subprocess.run(["awk", "-f", os.path.join(SCRIPTS, script), str(path)],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.skipif(shutil.which("awk") is None, reason="no awk")
def test_sass_counts_name_each_kernels_own_architecture(tmp_path):
    # The last kernel of a code section belongs to that section's architecture, not the next one's (a
    # two-architecture build once reported its sm_80 stubs as sm_90a kernels without HGMMA).
    rows = _awk_rows("sass_counts.awk", SASS_TWO_SECTIONS, tmp_path)
    assert rows == [
        ["sm_80", "0", "0", "_Z9fa3_stubv"],
        ["sm_80", "2", "0", "_Z10fa2_kernelv"],
        ["sm_90a", "0", "2", "_Z9fa3_stubv"],
        ["sm_90a", "1", "0", "_Z10fa2_kernelv"],
    ]


SASS_OVERLAP = """
		Function : _ZN9flashattn4cuda3fa314fa3_fwd_kernelI1AEEvv
        /*0000*/                   WARPGROUP.ARRIVE ;
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   FMNMX R3, R4, -INF , !PT ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   WARPGROUP.ARRIVE ;
        /*0060*/                   WARPGROUP.ARRIVE ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0080*/                   FMNMX R3, R4, R5, !PT ;
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
		Function : _ZN9flashattn4cuda3fa314fa3_fwd_kernelI1BEEvv
        /*0000*/                   WARPGROUP.ARRIVE ;
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0040*/                   FMNMX R3, R4, R5, !PT ;
		Function : _ZN9flashattn4cuda3fa314fa3_fwd_kernelI1CEEvv
        /*0000*/                   WARPGROUP.ARRIVE ;
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   MUFU.EX2 R8, R8 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   FMNMX R3, R4, R5, !PT ;
		Function : _ZN9flashattn4cuda3fa314fa3_fwd_kernelI1DEEvv
        /*0000*/                   WARPGROUP.ARRIVE ;
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   FFMA R8, R8, R9, -R10 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   MUFU.EX2 R8, R8 ;
		Function : _ZN9flashattn4cuda3fa314fa3_fwd_kernelI1EEEvv
        /*0000*/                   WARPGROUP.ARRIVE ;
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0020*/                   STSM.16.M88.4 [R3], R88 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0040*/                   FMNMX R3, R4, R5, !PT ;
		Function : _Z10fa2_kernelv
        /*0000*/                   FMNMX R3, R4, R5, !PT ;
"""


@pytest.mark.skipif(shutil.which("awk") is None, reason="no awk")
def test_sass_overlap_finds_the_softmax_before_or_after_the_pv_wait(tmp_path):
    # A main-loop wait counts as overlapped (good) when the softmax's start comes between the wait for Q K^T
    # and the wait for P V: its first FMNMX, seeded with -INF or not (a max in independent chains starts from
    # two scores), or its first MUFU.EX2 where the exponentials go first (Fa3Config::kStaleMax: a block max,
    # if any, only after the P V wait). With neither before the P V wait it counts as bad. Only fa3 kernels
    # are listed. A main-loop wait has two wgmma groups (Q K^T, P V) issued since the last wait; a first
    # block's wait for the older groups ahead of its deferred epilogue (E: one group) is not counted.
    rows = _awk_rows("sass_overlap.awk", SASS_OVERLAP, tmp_path)
    assert [row[0].split() + [row[1]] for row in rows] == [
        ["2", "0", "10", "_ZN9flashattn4cuda3fa314fa3_fwd_kernelI1AEEvv"],
        ["0", "1", "5", "_ZN9flashattn4cuda3fa314fa3_fwd_kernelI1BEEvv"],
        ["1", "0", "6", "_ZN9flashattn4cuda3fa314fa3_fwd_kernelI1CEEvv"],
        ["0", "1", "6", "_ZN9flashattn4cuda3fa314fa3_fwd_kernelI1DEEvv"],
        ["0", "0", "5", "_ZN9flashattn4cuda3fa314fa3_fwd_kernelI1EEEvv"],
    ]


def _fake_cli(root, name, body):
    # A tree whose build-ab/flashattn is the shell script `body`.
    cli = root / name / "build-ab" / "flashattn"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\n" + body)
    cli.chmod(0o755)
    return root / name


def _fake_tree(root, name, tflops):
    return _fake_cli(root, name, "echo '{\"forward\": {\"tflops\": %s}, \"pass\": true}'\n" % tflops)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_fa3_probe_rotates_the_trees_and_reports_medians_against_the_first(tmp_path):
    base, new = _fake_tree(tmp_path, "a", 200), _fake_tree(tmp_path, "b", 210)
    out = tmp_path / "probe.txt"
    env = dict(os.environ, FA3_PROBE_ROUNDS="2", FA3_PROBE_SHAPES="64:512:causal 128:4096:full")
    subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_probe.sh"), str(out), f"base={base}", f"new={new}"],
                   check=True, capture_output=True, text=True, env=env)
    lines = out.read_text().splitlines()
    runs = [line.split()[1:3] for line in lines if line.startswith("probe ")]
    # Round 1 starts with the first tree, round 2 with the second; each tree runs every shape once a round.
    assert runs == [["round=1", "tree=base"]] * 2 + [["round=1", "tree=new"]] * 2 + \
                   [["round=2", "tree=new"]] * 2 + [["round=2", "tree=base"]] * 2
    medians = [line for line in lines if line.startswith("median ")]
    assert len(medians) == 2
    assert "base 200.0 (2, +0.0%)" in medians[0] and "new 210.0 (2, +5.0%)" in medians[0]
    assert "N  4096 full" in medians[1]


def _fake_test_binary(tree, body):
    # A stand-in GPU test binary of a tree built for scripts/fa3_candidate.sh: a shell script running `body`.
    binary = tree / "build-ab" / "tests" / "flashattn_tests_gpu"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n%s\n" % body)
    binary.chmod(0o755)


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="no bash or tar")
def test_fa3_candidate_tests_the_candidate_then_probes_every_tree(tmp_path):
    base, cand, bound = _fake_tree(tmp_path, "a", 200), _fake_tree(tmp_path, "b", 220), _fake_tree(tmp_path, "c", 250)
    _fake_test_binary(cand, "echo \"$*\" >> %s\necho '[  PASSED  ] 3 tests.'" % (tmp_path / "test.args"))
    tools = tmp_path / "bin"  # a stand-in compute-sanitizer that runs the binary it is given
    tools.mkdir()
    sanitizer = tools / "compute-sanitizer"
    sanitizer.write_text("#!/bin/sh\nshift 4\n\"$@\" >/dev/null\necho '========= ERROR SUMMARY: 0 errors'\n")
    sanitizer.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", FA3_CANDIDATE_BUILD="0", FA3_PROBE_ROUNDS="2",
               FA3_PROBE_SHAPES="128:1024:full", FA3_CANDIDATE_TESTS="Fa3Forward.*", FA3_AB_COMMIT="base = x; new = x + p")
    run = subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_candidate.sh"), str(out), f"base={base}",
                          f"new={cand}", f"bound={bound}"], check=True, capture_output=True, text=True, env=env)
    checks = (out / "checks.txt").read_text()
    assert checks.startswith("trees: base = x; new = x + p\n")
    assert "tests new rc 0: [  PASSED  ] 3 tests." in checks
    assert "memcheck new rc 0: ========= ERROR SUMMARY: 0 errors" in checks and "racecheck new rc 0:" in checks
    assert [line for line in checks.splitlines() if line.startswith("== ")] == ["== base", "== new", "== bound"]
    # The candidate's tests ran with the filter given, once alone and once under each sanitizer tool.
    assert (tmp_path / "test.args").read_text().splitlines() == ["--gtest_filter=Fa3Forward.*"] + \
        ["--gtest_filter=Fa3Forward.SmallShapes"] * 2
    medians = [line for line in (out / "probe.txt").read_text().splitlines() if line.startswith("median ")]
    assert len(medians) == 1 and "new 220.0 (2, +10.0%)" in medians[0] and "bound 250.0 (2, +25.0%)" in medians[0]
    assert (out / "logs.tar.gz").is_file() and not (out / "logs").exists()
    assert "done after" in run.stdout


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="no bash or tar")
def test_fa3_candidate_with_no_tested_tree_only_times_them(tmp_path):
    base, cand = _fake_tree(tmp_path, "a", 200), _fake_tree(tmp_path, "b", 190)
    _fake_test_binary(cand, "echo ran > %s" % (tmp_path / "tests.ran"))
    out = tmp_path / "out"
    env = dict(os.environ, FA3_CANDIDATE_BUILD="0", FA3_PROBE_ROUNDS="1", FA3_PROBE_SHAPES="128:1024:full",
               FA3_CANDIDATE_TESTED="0")
    subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_candidate.sh"), str(out), f"base={base}", f"new={cand}"],
                   check=True, capture_output=True, text=True, env=env)
    checks = (out / "checks.txt").read_text()
    assert not (tmp_path / "tests.ran").exists() and "tests " not in checks and "memcheck" not in checks
    assert [line for line in checks.splitlines() if line.startswith("== ")] == ["== base", "== new"]
    medians = [line for line in (out / "probe.txt").read_text().splitlines() if line.startswith("median ")]
    assert len(medians) == 1 and "new 190.0 (1, -5.0%)" in medians[0]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="no bash or tar")
def test_fa3_candidate_tests_as_many_trees_as_asked_and_names_their_logs(tmp_path):
    base = _fake_tree(tmp_path, "a", 200)
    cands = [_fake_tree(tmp_path, name, 210) for name in ("b", "c")]
    for tree, verdict in zip(cands, ("PASSED", "FAILED")):
        _fake_test_binary(tree, "echo '[  %s  ] 3 tests.'" % verdict)
    out = tmp_path / "out"
    env = dict(os.environ, FA3_CANDIDATE_BUILD="0", FA3_PROBE_ROUNDS="1", FA3_PROBE_SHAPES="128:1024:full",
               FA3_CANDIDATE_TESTED="2")
    subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_candidate.sh"), str(out), f"base={base}",
                    f"one={cands[0]}", f"two={cands[1]}"], check=True, capture_output=True, text=True, env=env)
    checks = (out / "checks.txt").read_text()
    assert "tests one rc 0: [  PASSED  ] 3 tests." in checks and "tests two rc 0: [  FAILED  ] 3 tests." in checks
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = sorted(os.path.basename(n) for n in tar.getnames())
    assert "tests-one.log" in names and "tests-two.log" in names and "tests.log" not in names
    # Every tree but the base at most: more is refused before anything runs.
    bad = subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_candidate.sh"), str(tmp_path / "bad"), f"base={base}",
                          f"one={cands[0]}"], capture_output=True, text=True,
                         env=dict(env, FA3_CANDIDATE_TESTED="2"))
    assert bad.returncode == 2 and "FA3_CANDIDATE_TESTED" in bad.stderr and not (tmp_path / "bad").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_ptxas_summary_counts_builds_spills_injected_waits_and_serializations(tmp_path):
    log = tmp_path / "build.log"
    log.write_text(
        "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
        "ptxas info    : Function properties for a\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : (C7517) warpgroup.wait is injected in around line 5 by compiler in function 'a'\n"
        "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
        "    104 bytes stack frame, 184 bytes spill stores, 328 bytes spill loads\n"
        "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to x\n")
    out = subprocess.run(["bash", os.path.join(SCRIPTS, "ptxas_summary.sh"), str(log)], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == ("2 kernel builds, 1 with spill stores, 1 injected wgmma waits (ptxas C7517), "
                           "1 wgmma serializations")


def _fake_decode_tree(root, name, us):
    # Logs its arguments, then prints a run's JSON line as `flashattn run --json` does.
    return _fake_cli(root, name, "echo \"$*\" >> %s\n"
                     "echo '{\"forward\": {\"ms\": %s}, \"pass\": true, \"kernel\": \"k_%s\"}'\n"
                     % (root / (name + ".args"), us / 1e3, name))


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_decode_probe_rotates_the_trees_and_reports_medians_against_the_first(tmp_path):
    base, new = _fake_decode_tree(tmp_path, "a", 40.0), _fake_decode_tree(tmp_path, "b", 32.0)
    out = tmp_path / "out"
    env = dict(os.environ, DECODE_PROBE_ROUNDS="2", DECODE_PROBE_CASES="one|--batch 1 --cache-len 64;two|--batch 2",
               DECODE_PROBE_ARGS="--backend cuda --repeat 3")
    subprocess.run(["bash", os.path.join(SCRIPTS, "decode_probe.sh"), str(out), f"base={base}", f"new={new}"],
                   check=True, capture_output=True, text=True, env=env)
    runs = [json.loads(line) for line in (out / "probe.jsonl").read_text().splitlines()]
    # Round 1 starts each case with the first tree, round 2 with the second.
    assert [(r["round"], r["case"], r["tree"]) for r in runs] == [
        (1, "one", "base"), (1, "one", "new"), (1, "two", "base"), (1, "two", "new"),
        (2, "one", "new"), (2, "one", "base"), (2, "two", "new"), (2, "two", "base")]
    args = (tmp_path / "a.args").read_text().splitlines()
    assert args[0] == "run --kv-cache --backend cuda --repeat 3 --batch 1 --cache-len 64 --json"
    table = (out / "probe.txt").read_text().splitlines()
    assert len(table) == 2 and table[0].startswith("one")
    assert "base    40.00 us (1.000x)" in table[0] and "new    32.00 us (1.250x)" in table[0]
    assert "checks pass" in table[0] and table[0].endswith("k_a")


def _stub(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_decode_ab_call_builds_tests_times_sanitizes_and_packs_four_files(tmp_path):
    # A copy of the scripts folder whose ab_build.sh only logs and leaves a GPU test binary per tree (the base's
    # fails one test); the real decode_probe.sh times two fake CLIs; nvidia-smi and compute-sanitizer stubbed.
    repo = tmp_path / "repo"
    for name in ("decode_ab_call.sh", "decode_probe.sh", "tree_gpu_checks.sh"):
        _stub(repo / "scripts" / name, "")
        shutil.copy(os.path.join(SCRIPTS, name), repo / "scripts" / name)
    _stub(repo / "scripts" / "ab_build.sh",
          'logs=$1; shift 2\nfor t in "$@"; do n=$(basename $t); echo "ptxas of $n" > $logs/build-$n.log\n'
          'echo "build $n rc 0"; done\n')
    results = {"a": 'echo "[  FAILED  ] 1 test, listed below:"; echo "[  FAILED  ] DecodeGpuSplits.X"; exit 1\n',
               "b": 'echo "[  PASSED  ] 41 tests."\n'}
    for name, us in (("a", 40.0), ("b", 32.0)):
        _fake_decode_tree(repo / ".ab", name, us)
        _stub(repo / ".ab" / name / "build-ab" / "tests" / "flashattn_tests_gpu",
              'echo "$@" > %s\n' % (repo / (name + ".test_args")) + results[name])
    _stub(tmp_path / "bin" / "nvidia-smi", "echo 'Fake GPU, 1.0'\n")
    _stub(tmp_path / "bin" / "compute-sanitizer", 'echo "tool $2 on $5 $6"; echo "========= ERROR SUMMARY: 0 errors"\n')
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PATH=str(tmp_path / "bin") + os.pathsep + os.environ["PATH"], DECODE_PROBE_ROUNDS="2",
               DECODE_PROBE_CASES="one|--batch 1 --cache-len 64", DECODE_AB_SANITIZE="new DecodeGpuKernels.Y")
    run = subprocess.run(["bash", str(repo / "scripts" / "decode_ab_call.sh"), str(out), "base=.ab/a", "new=.ab/b"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(os.listdir(out)) == ["checks.txt", "gpu.txt", "logs.tar.gz", "probe.txt"]
    checks = (out / "checks.txt").read_text().splitlines()
    assert checks[:2] == ["build a rc 0", "build b rc 0"]
    assert checks[2:6] == ["tests base rc 1: [  FAILED  ] 1 test, listed below: [  FAILED  ] DecodeGpuSplits.X ",
                           "[  FAILED  ] 1 test, listed below:", "[  FAILED  ] DecodeGpuSplits.X",
                           "tests new rc 0: [  PASSED  ] 41 tests. "]
    assert (repo / "a.test_args").read_text().strip() == "--gtest_filter=*Decode*:*KvCache*:*KVCache*"
    assert checks[6:] == ["memcheck new rc 0: ========= ERROR SUMMARY: 0 errors",
                          "racecheck new rc 0: ========= ERROR SUMMARY: 0 errors"]
    assert "new    32.00 us (1.250x)" in (out / "probe.txt").read_text()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = sorted(tar.getnames())
        assert names == ["build-a.log", "build-b.log", "memcheck-new.log", "probe.jsonl", "racecheck-new.log",
                         "tests-base.log", "tests-new.log"]
        sanitized = tar.extractfile("memcheck-new.log").read().decode()
    assert "tool memcheck on" in sanitized and "--gtest_filter=DecodeGpuKernels.Y" in sanitized
    # DECODE_AB_TESTED narrows the tested trees; without DECODE_AB_SANITIZE no sanitizer runs.
    out2 = tmp_path / "out2"
    out2.mkdir()
    env2 = dict(env, DECODE_AB_TESTED="new", DECODE_AB_SANITIZE="")
    subprocess.run(["bash", str(repo / "scripts" / "decode_ab_call.sh"), str(out2), "base=.ab/a", "new=.ab/b"],
                   check=True, capture_output=True, text=True, env=env2)
    checks2 = (out2 / "checks.txt").read_text().splitlines()
    assert [c.split(" rc")[0] for c in checks2] == ["build a", "build b", "tests new"]
    with tarfile.open(out2 / "logs.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["build-a.log", "build-b.log", "probe.jsonl", "tests-new.log"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_candidate_ab_forms_runs_each_form_with_its_patch_and_packs_it(tmp_path):
    # candidate_ab.sh stubbed: it records the patch it was given and the environment passed through.
    scripts = tmp_path / "scripts"
    _stub(scripts / "candidate_ab.sh", 'echo "$CAND_PATCH $CAND_SHAPES" > "$1/ab.txt"; echo "timed $CAND_PATCH"\n')
    shutil.copy(os.path.join(SCRIPTS, "candidate_ab_forms.sh"), scripts / "candidate_ab_forms.sh")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, CAND_SHAPES="64:512:1")
    run = subprocess.run(["bash", str(scripts / "candidate_ab_forms.sh"), str(out), "s3=/p/three.patch",
                          "s4=/p/four.patch"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["timed /p/three.patch", "timed /p/four.patch"]
    assert sorted(os.listdir(out)) == ["s3.tar.gz", "s4.tar.gz"]
    for name, patch in (("s3", "/p/three.patch"), ("s4", "/p/four.patch")):
        with tarfile.open(out / (name + ".tar.gz")) as tar:
            assert sorted(tar.getnames()) == [name, name + "/ab.txt", name + "/console.txt"]
            assert tar.extractfile(name + "/ab.txt").read().decode() == patch + " 64:512:1\n"
    bad = subprocess.run(["bash", str(scripts / "candidate_ab_forms.sh"), str(out), "three.patch"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "NAME=PATCH" in bad.stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="no bash, cmake or ninja")
def test_ab_build_builds_every_tree_and_reports_each_one(tmp_path):
    # Two tiny trees stand in for the library: one builds, one fails to compile.
    for name, body in (("good", "int main() { return 0; }\n"), ("bad", "this is not C++\n")):
        tree = tmp_path / name
        tree.mkdir()
        (tree / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.16)\nproject(t CXX)\nadd_executable(flashattn_cli main.cpp)\n")
        (tree / "main.cpp").write_text(body)
    logs = tmp_path / "logs"
    run = subprocess.run(["bash", os.path.join(SCRIPTS, "ab_build.sh"), str(logs), "flashattn_cli",
                          str(tmp_path / "good"), str(tmp_path / "bad")], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "build good rc 0" in run.stdout and "build bad rc 1" in run.stdout
    assert (tmp_path / "good" / "build-ab" / "flashattn_cli").exists()
    # Each tree's configure and build output lands in its own log, the compiler's error in the failing one.
    good_log = (logs / "build-good.log").read_text()
    assert "Build files have been written" in good_log and "flashattn_cli" in good_log
    assert "error" in (logs / "build-bad.log").read_text()
    run = subprocess.run(["bash", os.path.join(SCRIPTS, "ab_build.sh"), str(logs), "flashattn_cli",
                          str(tmp_path / "good")], capture_output=True, text=True)
    assert run.returncode == 0 and "build good rc 0" in run.stdout


def _digest(tree):
    return subprocess.run(["bash", os.path.join(SCRIPTS, "source_digest.sh"), str(tree)],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_source_digest_follows_the_sources_and_ignores_build_leftovers(tmp_path):
    # Two copies of the same sources give one digest; a changed source changes it; caches and egg-info that
    # .gitignore leaves out do not count, nor does anything outside the listed folders.
    for name in ("a", "b"):
        tree = tmp_path / name
        (tree / "src" / "core").mkdir(parents=True)
        (tree / "src" / "core" / "x.cpp").write_text("int x = 1;\n")
        (tree / "CMakeLists.txt").write_text("project(x)\n")
        (tree / "bench").mkdir()
        (tree / "bench" / "peers.py").write_text("print(1)\n")
    base = _digest(tmp_path / "a")
    assert len(base) == 16 and base == _digest(tmp_path / "b")
    b = tmp_path / "b"
    (b / "src" / "core" / "__pycache__").mkdir()
    (b / "src" / "core" / "__pycache__" / "x.pyc").write_text("cache")
    (b / "python.egg-info").mkdir()
    (b / "build-gpu").mkdir()
    (b / "build-gpu" / "libx.so").write_text("binary")
    (b / "bench" / "results").mkdir()
    (b / "bench" / "results" / "r.json").write_text("{}")
    assert _digest(b) == base
    (b / "src" / "core" / "x.cpp").write_text("int x = 2;\n")
    assert _digest(b) != base
    (b / "src" / "core" / "x.cpp").write_text("int x = 1;\n")
    (b / "src" / "core" / "y.h").write_text("")
    assert _digest(b) != base


@pytest.mark.skipif(shutil.which("patch") is None or shutil.which("git") is None, reason="needs git and patch")
def test_ab_trees_extracts_the_commit_applies_patches_and_stops_on_one_that_does_not_apply(tmp_path):
    root = os.path.join(SCRIPTS, "..")
    if subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    import difflib
    readme = subprocess.run(["git", "-C", root, "show", "HEAD:README.md"], check=True, capture_output=True,
                            text=True).stdout.splitlines(keepends=True)
    patch = tmp_path / "first-line.patch"
    patch.write_text("".join(difflib.unified_diff(readme, ["added\n"] + readme, "a/README.md", "b/README.md")))
    script = os.path.join(SCRIPTS, "ab_trees.sh")
    run = subprocess.run(["bash", script, str(tmp_path / "ab"), "base", f"new={patch}"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    base, new = tmp_path / "ab" / "base", tmp_path / "ab" / "new"
    assert (new / "README.md").read_text().splitlines()[0] == "added"
    assert (base / "README.md").read_text().splitlines(keepends=True) == readme
    for tree in (base, new):
        assert (tree / "CMakeLists.txt").is_file() and not (tree / "bench" / "results").exists()
        assert not list(tree.rglob("*.orig"))
    lines = run.stdout.splitlines()
    assert lines[-1] == f"base={tmp_path}/ab/base new={tmp_path}/ab/new"
    assert lines[-2].startswith("FA3_AB_COMMIT='base = ") and lines[-2].endswith(" + first-line.patch'")
    # Applied twice, the second time it does not: the tree is not left half-patched.
    run = subprocess.run(["bash", script, str(tmp_path / "ab"), f"twice={patch}+{patch}"], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "does not apply" in run.stderr
    assert not (tmp_path / "ab" / "twice").exists()


def _sweep_row(direction, d, n, causal, **ratios):
    row = {"direction": direction, "d": d, "N": n, "causal": causal}
    row.update(ratios)
    return row


def test_targets_read_a_results_folder(tmp_path, capsys):
    bench = {
        "gpu": "NVIDIA H200", "commit": "abc1234", "date": "2026-12-05",
        "ceil": {"gemm_bf16_tflops": 700.0},
        "table": [
            _sweep_row("fwd", 128, 512, False, fa2_over_flash=1.01, fa3_over_cudnn=0.94),
            _sweep_row("fwd", 128, 1024, True, fa2_over_flash=0.98, fa3_over_cudnn=1.12),
            dict(_sweep_row("fwd", 128, 8192, False, fa2_over_flash=1.02, fa3_over_cudnn=1.05), fa3_tflops=730.0),
            _sweep_row("bwd", 64, 4096, False, fa2_over_flash=1.03),
        ],
        "fa2_vs_standard": [{"direction": "fwd", "d": 128, "causal": False, "speedup": 3.2},
                            {"direction": "bwd", "d": 128, "causal": False, "speedup": 1.9}],
    }
    decode = {"gpu": {"name": "NVIDIA H200"}, "commit": "abc1234", "table": [
        {"b": 1, "seqlen_k": 32768, "layout": "contiguous", "ours_TBps": 3.5, "ratio_cudnn": 1.05},
        {"b": 1, "seqlen_k": 32768, "layout": "paged", "ours_TBps": 3.0},
        {"b": 64, "seqlen_k": 4096, "layout": "contiguous", "ours_TBps": 4.3, "ratio_cudnn": 0.99},
        {"b": 64, "seqlen_k": 4096, "layout": "paged", "ours_TBps": 4.2},
    ]}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    (tmp_path / "decode.json").write_text(json.dumps(decode))
    out = tmp_path / "targets.json"
    assert targets.main([str(tmp_path), "--json", str(out)]) == 0
    got = {t["target"]: t for t in json.loads(out.read_text())["targets"]}
    by_start = lambda text: next(t for name, t in got.items() if name.startswith(text))  # noqa: E731
    assert not by_start("fa2 fwd")["met"] and by_start("fa2 fwd")["misses"] == ["d 128 N 1024 causal 0.980"]
    assert by_start("fa2 bwd")["met"]
    assert by_start("fa2 >= 3x")["misses"] == ["bwd d 128 non-causal 1.90x"]
    # From N 1024 only the N 8192 row misses 1.10x; at N 512 the one row misses 0.95x.
    assert by_start("fa3 >= 1.10x")["misses"] == ["d 128 N 8192 non-causal 1.050"]
    assert by_start("fa3 >= 0.95x")["misses"] == ["d 128 N 512 non-causal 0.940"]
    assert by_start("fa3 >= 720")["met"]
    assert by_start("decode >= 3.9")["misses"] == ["1 x 32768 3.50 TB/s"]
    assert by_start("decode never below")["misses"] == ["64 x 4096 0.990x"]
    assert by_start("decode paged")["misses"] == ["1 x 32768 0.857"]
    assert "the targets were set on an H200" not in capsys.readouterr().out

    # A separate-mode file decides the ratio targets it covers, and names itself as the source.
    separate = {"benchmark": "interleaved", "mode": "separate", "direction": "fwd", "algo": "fa3", "peer": "cudnn",
                "commit": "def5678", "rows": [{"d": 128, "N": 512, "causal": False, "ratio": 0.97},
                                              {"d": 128, "N": 8192, "causal": False, "ratio": 1.11}]}
    (tmp_path / "fwd-fa3-cudnn-separate.json").write_text(json.dumps(separate))
    assert targets.main([str(tmp_path), "--json", str(out)]) == 0
    got = {t["target"]: t for t in json.loads(out.read_text())["targets"]}
    assert by_start("fa3 >= 1.10x")["met"] and by_start("fa3 >= 0.95x")["met"]
    assert "fwd-fa3-cudnn-separate.json, commit def5678" in by_start("fa3 >= 1.10x")["source"]
    assert not by_start("fa2 fwd")["met"]  # no separate file for fa2: the sweep still decides
    assert not any(name.endswith("(one process)") for name in got)  # decode.json has no one-process rows

    # Ours against cuDNN in one process (bench/decode_ab.py) adds its own line; the two-program line stays.
    decode["one_process"] = {"benchmark": "decode_ab", "peer": "cudnn", "rows": [
        {"b": 1, "seqlen_k": 32768, "ours": {"ours": {"round_ratio_median": 1.04}}},
        {"b": 64, "seqlen_k": 4096, "ours": {"ours": {"round_ratio_median": 0.997},
                                             "ours_s2": {"round_ratio_median": 1.01}}},
    ]}
    (tmp_path / "decode.json").write_text(json.dumps(decode))
    assert targets.main([str(tmp_path), "--json", str(out)]) == 0
    got = {t["target"]: t for t in json.loads(out.read_text())["targets"]}
    one = got["decode never below SDPA cuDNN (one process)"]
    assert not one["met"] and one["misses"] == ["64 x 4096 0.997x"] and "one_process" in one["source"]
    assert got["decode never below SDPA cuDNN"]["misses"] == ["64 x 4096 0.990x"]


def test_targets_refuse_a_folder_without_results(tmp_path):
    assert targets.main([str(tmp_path)]) == 2


def _timeline_lines(wg, periods, softmax):
    # One block line per period, 100 cycles of each other phase.
    at, lines = 1000 * wg, []
    for blk, (period, sm) in enumerate(zip(periods, softmax)):
        lines.append(f"tl wg {wg} blk {blk:2d} at {at:9d} wait_kv_turn 100 issue 100 wait_qk 100 softmax {sm:6d} "
                     "wait_pv 100 pack 100")
        at += period
    return lines


def test_fa3_timeline_takes_medians_over_the_steady_blocks_only():
    import fa3_timeline
    # Blocks 0..7 and 56.. are far above the rest (counted in, they would move both medians). The 47 periods between steady blocks are 24 of 2000 and 23 of 3000.
    periods = [9999] * 8 + [2000, 3000] * 24 + [8888] * 8
    softmax = [7777] * 8 + [1100, 1300, 1200] * 16 + [9000] * 8
    lines = ["== base d 128"] + _timeline_lines(0, periods, softmax) + _timeline_lines(1, periods, softmax)
    lines += ["== other d 64", "some unrelated output"] + _timeline_lines(0, [500] * 64, [50] * 64)
    out = fa3_timeline.summarize(fa3_timeline.parse(lines))
    assert out[0] == "base d 128: medians over blocks 8..55 (cycles)"
    assert out[1].startswith("  wg 0: period   2000") and "softmax   1200" in out[1] and "issue    100" in out[1]
    assert out[3] == "  wg 1 issues 1000 cycles after wg 0 (median, same block)"
    assert out[4] == "other d 64: medians over blocks 8..55 (cycles)" and out[5].startswith("  wg 0: period    500")
    assert len(out) == 6  # no lag line without a second warpgroup


def test_fa3_timeline_reports_tile_transitions_where_lines_carry_the_block_index():
    import fa3_timeline
    # Tiles of blocks idx 1..7: a period of 2000 inside a tile; from the end of a tile's last block (its start
    # plus 600 cycles of phases) to the next tile's first, 5400 cycles; one pair across a gap in the records
    # (blk 40 -> 42, where tile 5's last block is missing) is left out: 7 of the 8 transitions count.
    lines, at = ["== base d 128"], 0
    blk = 0
    for tile in range(9):
        for idx in range(1, 8):
            if blk != 41:
                lines.append(f"tl wg 0 blk {blk:2d} at {at:9d} wait_kv_turn 100 issue 100 wait_qk 100 softmax    100 "
                             f"wait_pv 100 pack 100 idx {idx:3d}")
            blk += 1
            at += 2000 if idx < 7 else 6000
    out = fa3_timeline.summarize(fa3_timeline.parse(lines))
    assert out[1].startswith("  wg 0: period   2000")
    assert out[2] == ("  wg 0: 7 tile transitions, median 5400 cycles from a tile's last main-loop block to the next "
                      "tile's first; period inside a tile 2000; ratio 2.70")
    # Lines without the index (the earlier probe): no transition line.
    plain = fa3_timeline.summarize(fa3_timeline.parse([l.rsplit(" idx", 1)[0] for l in lines]))
    assert len(plain) == 2
    # Tile lines: tile 0 (no epilogue before it) and unset records are left out of the medians; a drain ends
    # 300 cycles before the next tile's first block.
    tile_lines = []
    for k in range(6):
        first = 10000 * k
        epilogue = 9999 if k == 0 else (700 if k % 2 else 900)
        tile_lines.append(f"tt wg 0 tile {k:2d} first {first:9d} issue 50 epilogue {epilogue:6d} wait_qk 400 "
                          f"softmax   1100 pack    80 drain_at {first + 9000:9d} drain    700")
    tile_lines.append("tt wg 0 tile  6 first         0 issue 0 epilogue 0 wait_qk 0 softmax 0 pack 0 drain_at 0 drain 0")
    out = fa3_timeline.summarize(fa3_timeline.parse(lines + tile_lines))
    assert out[3] == ("  wg 0: first blocks of 5 tiles: issue     50  epilogue    700  wait_qk    400  softmax   1100  "
                      "pack     80  drain    700; drain end to the next first block 300")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_fa3_timeline_runs_each_tree_at_each_head_dim(tmp_path):
    trees = []
    for name in ("a", "b"):
        lines = "\n".join(_timeline_lines(0, [2000 if name == "a" else 1500] * 64, [900] * 64))
        tree = _fake_cli(tmp_path, name, "echo \"$*\" >> %s\ncat >&2 <<'TL'\n%s\nTL\n" % (tmp_path / (name + ".args"), lines))
        trees.append(f"{name}={tree}")
    out = tmp_path / "out"
    run = subprocess.run(["bash", os.path.join(SCRIPTS, "fa3_timeline.sh"), str(out)] + trees,
                         capture_output=True, text=True, env=dict(os.environ, FA3_TIMELINE_DIMS="128 64"))
    assert run.returncode == 0, run.stderr
    args = (tmp_path / "a.args").read_text().splitlines()
    assert len(args) == 2 and "--head-dim 128 --heads 16 " in args[0] and "--head-dim 64 --heads 32 " in args[1]
    assert "--batch 2 --seqlen-q 8192 " in args[0]
    summary = (out / "timeline-summary.txt").read_text().splitlines()
    assert [s for s in summary if not s.startswith(" ")] == [
        f"{t} d {d}: medians over blocks 8..55 (cycles)" for d in (128, 64) for t in ("a", "b")]
    assert summary[1].startswith("  wg 0: period   2000") and summary[3].startswith("  wg 0: period   1500")


def _elf(sections):
    """A little-endian ELF64 file with the given {name: bytes} sections (and a null and a name section)."""
    names = b"\0.shstrtab\0" + b"".join(n.encode() + b"\0" for n in sections)
    blobs = [b"", names] + list(sections.values())
    name_at = [0, 1]
    for n in sections:
        name_at.append(names.index(n.encode() + b"\0"))
    body, offsets = b"", []
    for blob in blobs:
        offsets.append(64 + len(body))
        body += blob
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, len(blobs), 1)
    table = b"".join(struct.pack("<IIQQQQIIQQ", name_at[i], 1, 0, 0, offsets[i], len(blob), 0, 0, 1, 0)
                     for i, blob in enumerate(blobs))
    return bytes(header) + body + table


def test_kernel_text_compares_each_kernels_code_and_says_which_differ(tmp_path, capsys):
    old = _elf({".text.k_same": b"\x01\x02", ".text.k_changed": b"\x03\x04", ".text.k_gone": b"\x05",
                ".nv.info.k_same": b"\x09"})
    new = _elf({".text.k_same": b"\x01\x02", ".text.k_changed": b"\x03\x05", ".text.k_new": b"\x05",
                ".nv.info.k_same": b"\x0a"})
    assert set(kernel_text.text_sections(old)) == {".text.k_same", ".text.k_changed", ".text.k_gone"}
    (tmp_path / "old.cubin").write_bytes(old)
    (tmp_path / "new.cubin").write_bytes(new)
    (tmp_path / "same.cubin").write_bytes(old)
    assert kernel_text.main([str(tmp_path / "old.cubin"), str(tmp_path / "new.cubin")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["differs: k_changed", "only in the old build: k_gone", "only in the new build: k_new",
                   "1 kernels identical, 3 not"]
    # Other sections (.nv.info here) do not count: the same code is the same kernel.
    assert kernel_text.main([str(tmp_path / "old.cubin"), str(tmp_path / "same.cubin")]) == 0
    assert capsys.readouterr().out.splitlines() == ["3 kernels identical, 0 not"]
    (tmp_path / "not.cubin").write_bytes(b"#!/bin/sh\n")
    assert kernel_text.main([str(tmp_path / "not.cubin"), str(tmp_path / "old.cubin")]) == 2


def test_kernel_text_by_code_finds_each_new_kernel_among_the_old_ones_under_any_name(tmp_path, capsys):
    # An adopted candidate form: the candidate build (old) holds the shipped and the candidate kernels, the new
    # build the candidate's code under the shipped kernel's name.
    old = _elf({".text.k_shipped": b"\x01", ".text.k_candidate": b"\x02", ".text.k_other": b"\x03"})
    new = _elf({".text.k_shipped": b"\x02", ".text.k_other": b"\x03"})
    wrong = _elf({".text.k_shipped": b"\x04", ".text.k_other": b"\x03"})
    for name, data in (("old", old), ("new", new), ("wrong", wrong)):
        (tmp_path / f"{name}.cubin").write_bytes(data)
    assert kernel_text.main([str(tmp_path / "old.cubin"), str(tmp_path / "new.cubin"), "--by-code"]) == 0
    assert capsys.readouterr().out.splitlines() == ["2 of 2 new kernels have an old kernel's code"]
    assert kernel_text.main([str(tmp_path / "old.cubin"), str(tmp_path / "wrong.cubin"), "--by-code"]) == 1
    assert capsys.readouterr().out.splitlines() == ["no old kernel has the code of: k_shipped",
                                                    "1 of 2 new kernels have an old kernel's code"]
    with pytest.raises(SystemExit):
        kernel_text.main([str(tmp_path / "old.cubin"), str(tmp_path / "new.cubin"), "--old-define", "X=1"])
