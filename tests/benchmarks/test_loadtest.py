"""The load/soak test's memory figures and its plot (the run itself: test_end_to_end.py)."""
from benchmarks.loadtest import plot_rss, rss_summary


def test_loadtest_reports_second_half_growth():
    """The soak's memory figure: slope over the second half only, and per committed update."""
    # 100 MB, +10 MB/min during the first half (warm-up), then +1 MB/min; 2 updates per second.
    samples = [{"t": t, "rss_mb": 100 + (t / 6 if t < 300 else 50 + (t - 300) / 60), "anon_mb": 50, "threads": 3}
               for t in range(0, 601, 2)]
    acks = [t / 2 for t in range(1200)]
    out = rss_summary(samples, warmup=120, half=300, ack_times=acks)
    assert abs(out["second_half_mb_per_min"] - 1.0) < 1e-6
    assert out["slope_mb_per_min"] > 2  # the whole run's slope is dominated by the warm-up
    assert out["second_half_updates"] == 600  # acks at 300.0, 300.5, ..., 599.5 s
    assert abs(out["second_half_kb_per_update"] - 1024 * 5 / 600) < 1e-2
    assert out["second_half_anon_mb_per_min"] == 0.0 and out["threads_max"] == 3


def test_loadtest_plots_every_workers_rss(tmp_path):
    samples = {f"api0/pid{i}": [{"t": t, "rss_mb": 160.0 + i, "anon_mb": 90.0, "threads": 9} for t in range(0, 61, 2)]
               for i in range(2)}
    run = {"topology": "1 process(es) x 2 worker(s)", "seconds": 60.0, "requests_per_s": 600.0,
           "consistency": {"acknowledged_updates": 1800}, "worker_rss_samples": samples}
    results = {"setup": {"estimator": "FCL3", "kind": "regression", "d": 8, "clients": 16, "update_fraction": 0.05},
               "runs": [run, run]}
    path = plot_rss(results, str(tmp_path / "rss.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
