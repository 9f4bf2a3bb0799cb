"""loom_profile.cluster: the α-β fit of the simulator's all-reduce price, and the cluster file it writes."""

import json
import math
import random

import pytest

from loom_profile import cluster as calibration


def test_all_reduce_seconds_is_the_simulators_ring_or_tree():
    # n = 4: ring 6α + 1.5 S/β, tree 4α + 2 S/β (include/loom/comm/cost_model.h), plus L.
    alpha, beta, launch = 1e-3, 1e9, 8e-6
    assert calibration.all_reduce_seconds(4096, 4, alpha, beta) == pytest.approx(launch + 4e-3 + 2 * 4096 / 1e9)
    big = 1 << 30
    assert calibration.all_reduce_seconds(big, 4, alpha, beta) == pytest.approx(launch + 6e-3 + 1.5 * big / 1e9)
    assert calibration.p2p_seconds(1000, alpha, beta) == pytest.approx(launch + 1e-3 + 1000 / 1e9)
    assert calibration.all_reduce_seconds(1000, 1, alpha, beta) == 0


def test_fit_recovers_alpha_and_beta_of_exact_times():
    rng = random.Random(13)
    for _ in range(200):
        n = rng.randint(2, 64)
        alpha = 10 ** rng.uniform(-6, -2)
        beta = 10 ** rng.uniform(8, 11.5)
        sizes = sorted({int(10 ** rng.uniform(2, 9)) for _ in range(rng.randint(2, 6))})
        if len(sizes) < 2:
            continue
        samples = {s: calibration.all_reduce_seconds(s, n, alpha, beta) for s in sizes}
        fit = calibration.fit_all_reduce(samples, n)
        assert fit.rms_relative() < 1e-6, (n, alpha, beta, sizes)
        for r in fit.residuals:
            assert r.predicted_s == pytest.approx(samples[r.bytes], rel=1e-6)
        # α and β themselves are determined where the sizes pin both lines down; the prices always are.
        probe = [calibration.all_reduce_seconds(s, n, fit.alpha_s, fit.beta_bytes_per_s) for s in sizes]
        assert probe == pytest.approx([samples[s] for s in sizes], rel=1e-6)


def test_fit_of_noisy_times_reports_its_residuals():
    alpha, beta, n = 5e-4, 2e9, 4
    rng = random.Random(7)
    sizes = [4096, 65536, 1 << 20, 8 << 20]
    samples = {s: calibration.all_reduce_seconds(s, n, alpha, beta) * rng.uniform(0.8, 1.25) for s in sizes}
    fit = calibration.fit_all_reduce(samples, n)
    assert [r.bytes for r in fit.residuals] == sizes
    for r in fit.residuals:
        assert r.measured_s == samples[r.bytes]
        assert r.relative == pytest.approx(r.predicted_s / r.measured_s - 1)
    assert fit.rms_relative() == pytest.approx(math.sqrt(sum(r.relative ** 2 for r in fit.residuals) / len(sizes)))
    assert 0 < fit.rms_relative() < 0.25
    assert fit.alpha_s >= 0 and fit.beta_bytes_per_s > 0
    # No other (α, β) on a grid around the fit does better: it is the least-squares optimum.
    def error(a, b):
        return sum((calibration.all_reduce_seconds(s, n, a, b) / t - 1) ** 2 for s, t in samples.items())
    best = error(fit.alpha_s, fit.beta_bytes_per_s)
    for da in (0.9, 0.97, 1.03, 1.1):
        for db in (0.9, 0.97, 1.03, 1.1):
            assert error(fit.alpha_s * da, fit.beta_bytes_per_s * db) >= best - 1e-12


def test_fit_rejects_what_it_cannot_fit():
    with pytest.raises(ValueError, match="two sizes"):
        calibration.fit_all_reduce({4096: 1e-3}, 4)
    with pytest.raises(ValueError, match="positive"):
        calibration.fit_all_reduce({4096: 1e-3, 8192: 0.0}, 4)
    with pytest.raises(ValueError, match="bandwidth"):
        calibration.fit_all_reduce({4096: 2e-3, 1 << 20: 1e-3, 8 << 20: 1e-4}, 4)


def test_cluster_file_loads_with_the_fitted_link(tmp_path, run_loom):
    measurement = calibration.Measurement(world=4, all_reduce_s={}, p2p_s={}, pairs_s={}, peak_fp32=3e10,
                                          memory_bandwidth=1.5e10)
    fit = calibration.Fit(alpha_s=1.25e-4, beta_bytes_per_s=2.5e9, launch_s=8e-6, residuals=())
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(calibration.cluster_doc("cpu-1thread-of-4", measurement, fit, memory_bytes=1 << 30)))
    result = run_loom("clusters", "--json", "--file", str(path))
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)["clusters"][0]
    assert loaded["gpu"]["name"] == "cpu-1thread-of-4"
    assert loaded["nodes"] * loaded["gpus_per_node"] == 4
    assert loaded["intra"]["latency"] == 1.25e-4 and loaded["intra"]["bandwidth"] == 2.5e9
    assert loaded["gpu"]["peak_fp32"] == 3e10 and loaded["gpu"]["memory_bandwidth"] == 1.5e10


def test_calibrate_two_gloo_processes(tmp_path, run_loom):
    out = tmp_path / "two.json"
    sizes = [4096, 8 << 20]  # far apart: the larger one's time grows with its bytes even on a busy machine
    doc = calibration.calibrate(2, "cpu-pair", out, sizes=sizes, repeats=1)
    assert [r["bytes"] for r in doc["all_reduce"]] == sizes
    assert [r["bytes"] for r in doc["p2p"]] == sizes
    assert [r["bytes"] for r in doc["all_reduce_pairs"]] == sizes
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in doc["all_reduce"] + doc["p2p"])
    assert doc["alpha_s"] >= 0 and doc["beta_bytes_per_s"] > 0 and doc["peak_fp32_flops_per_s"] > 0
    result = run_loom("clusters", "--json", "--file", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["clusters"][0]["intra"]["latency"] == doc["alpha_s"]


def test_each_kinds_fit_recovers_its_own_alpha_and_beta():
    # gloo's all-gather, reduce-scatter and sends each get their own α-β (fit_kinds): the fit of each kind's
    # price recovers random constants from exact times, and the prices follow include/loom/comm/cost_model.h.
    rng = random.Random(29)
    for _ in range(100):
        n = rng.randint(2, 16)
        for kind in calibration.KINDS:
            alpha, beta = 10 ** rng.uniform(-6, -2), 10 ** rng.uniform(8, 11)
            sizes = sorted({int(10 ** rng.uniform(3, 8)) for _ in range(rng.randint(2, 5))})
            if len(sizes) < 2:
                continue
            samples = {s: calibration.collective_seconds(kind, s, n, alpha, beta) for s in sizes}
            fit = calibration.fit_collective(kind, samples, n)
            assert fit.rms_relative() < 1e-6, (kind, n, alpha, beta, sizes)
            if kind != "all_reduce":  # one line: α and β themselves are determined by two sizes
                assert fit.alpha_s == pytest.approx(alpha, rel=1e-4, abs=1e-9)
                assert fit.beta_bytes_per_s == pytest.approx(beta, rel=1e-4)
    launch = calibration.SIMULATOR_LAUNCH_S
    assert calibration.gather_seconds(4000, 4, 1e-3, 1e9) == pytest.approx(launch + 3e-3 + 0.75 * 4000 / 1e9)
    assert calibration.collective_seconds("p2p", 4000, 4, 1e-3, 1e9) == calibration.p2p_seconds(4000, 1e-3, 1e9)


def test_kinds_measured_apart_are_fitted_apart():
    sizes = (4096, 1 << 20, 8 << 20)
    constants = {"all_reduce": (2e-4, 2e9), "all_gather": (3e-4, 1e9), "reduce_scatter": (1e-4, 5e8), "p2p": (5e-5, 3e9)}
    times = {kind: {s: calibration.collective_seconds(kind, s, 4, *constants[kind]) for s in sizes} for kind in constants}
    gathers = {"all_gather": times["all_gather"], "reduce_scatter": times["reduce_scatter"]}
    measurement = calibration.Measurement(4, times["all_reduce"], times["p2p"], {}, 1e10, 1e10, gathers)
    fits = calibration.fit_kinds(measurement)
    for kind, (alpha, beta) in constants.items():
        probe = [calibration.collective_seconds(kind, s, 4, fits[kind].alpha_s, fits[kind].beta_bytes_per_s) for s in sizes]
        assert probe == pytest.approx(list(times[kind].values()), rel=1e-6)
    flat = calibration.Measurement(4, times["all_reduce"], {4096: 1e-3, 1 << 20: 1e-3, 8 << 20: 1e-4}, {}, 1e10, 1e10, gathers)
    assert calibration.fit_kinds(flat)["p2p"] is None
