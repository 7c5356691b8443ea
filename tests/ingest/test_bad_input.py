def test_a_run_whose_metrics_fail_is_partial_with_the_error(tmp_path, opd_results, monkeypatch):
    import bench.metrics
    from bench.ingest import main
    from bench.trace import RunPaths, read_manifest

    def broken(run_dir):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(bench.metrics, "write_metrics", broken)
    out = tmp_path / "run"
    assert main(["--framework", "verl", "--logs", str(opd_results / "verl"), "--out", str(out)]) == 1
    m = read_manifest(RunPaths(out))
    assert m["status"] == "partial"
    assert m["failure"] == {
        "kind": "MetricsError",
        "message": "ZeroDivisionError: float division by zero",
        "source": None,
        "phase": "metrics",
    }
