"""`python -m bench ingest --framework X --logs PATH --out RUN_DIR [overrides]`: a framework's native
logs -> a run directory (trace/steps.parquet, trace/rollouts.parquet, trace/gpu.parquet,
manifest.json with mode "native" and an `inferred` block, then metrics.json).

Framework-neutral: the runner named by conf/framework/X.yaml parses the steps, runners/X_config.py
reads the configuration that ran (bench/infer.py matches the model and merges what the user gives),
runners/log_end.py reads how the logs end. No experiment is needed: what the logs hold is used,
what they lack is unknown (null with the reason) unless given (`hardware=h100_sxm`,
`model=qwen3_0_6b`, `workload.group_size=16`). GPU telemetry CSVs in the logs (nvidia-smi's
`--format=csv` with a header row) are read by content, whatever their name. bench/ingest_run.py
decides what belongs to the one run (other runs' GPU CSVs are left out and named; a requeued run's
attempts are recorded); compressed or UTF-16 logs are read through a decompressed (UTF-8) copy.

Bad input ends with one line on stderr and exit 2, nothing written: missing or empty logs, logs of
another framework, a folder holding several runs, an --out that exists (runs are never
overwritten), a given value the logs contradict.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bench import infer, infer_hardware, infer_teacher, rundir, stores
from bench.config import CONF_DIR, compose
from bench.errors import EXIT_USAGE, UsageError
from bench.ingest_run import (
    SIGNATURES,
    SNIFF_FILES,
    Refused,
    attempts_warning,
    gpu_csvs,
    gpu_names,
    ingest_gpus,
    own_gpu_csvs,
    read_gpu_csvs,
    run_window,
    runs_in,
    with_attempts,
)
from bench.outdir import check_out
from bench.trace import (
    RunPaths,
    redact_text,
    write_gpu,
    write_manifest,
    write_rollouts,
    write_steps,
)
from runners import attempts, log_end
from runners.base import ParseResult, load_runner
from runners.run_config import (
    binary_share,
    harness_values,
    needs_staging,
    stage_decompressed,
    text_files,
)

NOT_LOGS = (".csv", ".parquet", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".env", ".py", ".sh")


def frameworks() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "framework").glob("*.yaml"))


def log_files(logs: Path) -> tuple[list[Path], list[str]]:
    """(text logs to read for how the run ended, 'file: reason' of files skipped as not text)."""
    keep, skipped = [], []
    for path in text_files(logs):
        if path.suffix in NOT_LOGS or path.name.startswith("."):
            continue
        with open(path, "rb") as f:
            head = f.read(8192).replace(b"\0", b"")
        junk = binary_share(head)
        if junk > 0.3:
            skipped.append(
                f"{path}: skipped, binary ({junk:.0%} of its first {len(head)} non-NUL bytes are not text)"
            )
        elif head or path.stat().st_size:
            keep.append(path)
    return keep, skipped


def sniff_framework(logs: Path) -> str | None:
    """The framework whose signatures the logs' first MiB carry most, if any."""
    hits = dict.fromkeys(SIGNATURES, 0)
    for path in text_files(logs)[:SNIFF_FILES]:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
        for fw, marks in SIGNATURES.items():
            hits[fw] += sum(m in head for m in marks)
    best = max(hits, key=hits.get)
    return best if hits[best] else None


def wall_window(logs: Path, steps: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    """The one wall clock every framework's rates use: the harness's start/end epochs when a
    wall-time file (`start_epoch=`, `end_epoch=` lines) is in the logs, else the trace's span from
    the first step's start to the last step's end."""
    vals, rel = harness_values(logs, ("start_epoch", "end_epoch"))
    if vals:
        return {
            "window": "harness",
            "definition": "harness start (before any framework or teacher process) to harness end",
            "wall_s": vals["end_epoch"] - vals["start_epoch"],
            "start_epoch_s": vals["start_epoch"],
            "end_epoch_s": vals["end_epoch"],
            "framework_start_epoch_s": vals.get("training_start_epoch"),
            "source": str(logs if logs.is_file() else logs / rel),
        }
    starts = [r["t_start_s"] for r in steps if r.get("t_start_s") is not None]
    ends = [r["t_end_s"] for r in steps if r.get("t_end_s") is not None]
    if starts and ends:
        return {
            "window": "trace",
            "definition": "first step's start to the last step's end (framework start-up not included)",
            "wall_s": max(ends) - min(starts),
            "source": "trace/steps.parquet t_start_s/t_end_s",
        }
    return {"window": None, "wall_s": None, "reason": "no wall-time file and no step timestamps in the logs"}


def phase_of(n_steps: int, total: int | None, done: bool) -> str:
    """Where a run was when it failed, from the steps it completed: "launch or first step" (no step
    finished: bring-up and the first step cannot be told apart from the steps alone), "warm-up"
    (within the steps metrics skip before the steady window, ceil 10% of the configured steps, at
    least 1), "steady state", or "teardown" (every configured step done)."""
    if done:
        return "teardown"
    if n_steps == 0:
        return "launch or first step"
    warm_up = max(1, math.ceil(0.1 * total)) if total else 1
    return "warm-up" if n_steps <= warm_up else "steady state"


def check_hardware(
    inferred: dict[str, Any],
    config: dict[str, Any],
    steps: list[dict[str, Any]],
    clues: dict[str, Any],
    overrides: list[str],
) -> list[str]:
    """The run's hardware against what its logs say (bench.infer_hardware.hardware_conflicts): a given
    `hardware=` the logs contradict is refused naming both; contradictions of hardware read from
    the logs themselves come back as findings (manifest warnings)."""
    name = (inferred.get("hardware") or {}).get("value")
    if not name:
        return []
    conflicts = infer_hardware.hardware_conflicts(name, clues, steps, _suite_mfu(config, inferred, steps))
    if not conflicts:
        return []
    given = any(o.split("=", 1)[0].lstrip("+~") in ("hardware", "experiment") for o in overrides)
    if given:
        raise Refused(
            f"hardware={name} (given) contradicts the logs: {'; '.join(conflicts)}; pass the GPU the run "
            f"used (one of {', '.join(infer_hardware.hardware_names())})"
        )
    return [
        f"hardware {name} ({inferred['hardware'].get('source')}) contradicts the logs: {c}" for c in conflicts
    ]


def _suite_mfu(config: dict[str, Any], inferred: dict[str, Any], steps: list[dict[str, Any]]) -> float | None:
    """The suite's MFU of the parsed steps on the run's hardware (bench.metrics.mfu), None when the
    trace or config cannot give it."""
    import pandas as pd

    from bench import metrics

    if not steps:
        return None
    try:
        c = metrics.Context({"config": config, "inferred": inferred}, pd.DataFrame(steps), None, None)
        v = metrics.mfu(c)
    except (metrics.Missing, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return v if v and math.isfinite(v) else None


def steps_reached(info: dict[str, Any]) -> int | None:
    """How far the run's step numbers got (`first_step` to `last_step` of the parser's run_info,
    a validation-only last record included: some verl versions log the final step's validation
    without its training metrics), None when the parser does not say."""
    first, last = info.get("first_step"), info.get("last_step")
    return None if first is None or last is None else int(last) - int(first) + 1


def run_status(
    n_steps: int, total: int | None, end: log_end.LogEnd, reached: int | None = None
) -> tuple[str, dict[str, Any] | None]:
    """(status, failure) from the steps kept, the configured step count and how the logs end."""
    done = total is not None and max(n_steps, reached or 0) >= total
    f = end.failure
    if f is None and end.cut_files and not done:
        return ("partial" if n_steps else "failed"), {
            "kind": "truncated",
            "message": f"log cut off mid-line after step {n_steps}" + (f" of {total}" if total else ""),
            "source": end.cut_files[0],
            "phase": phase_of(n_steps, total, done),
        }
    if f is None and total is not None and not done:
        return ("partial" if n_steps else "failed"), {
            "kind": "truncated",
            "message": f"the logs end after step {n_steps} of {total} with no error logged",
            "source": None,
            "phase": phase_of(n_steps, total, done),
        }
    if f is None:
        return ("completed" if n_steps else "failed"), None
    failure = {
        "kind": f.kind,
        "message": f.text(),
        "source": f.source,
        "phase": phase_of(n_steps, total, done),
    }
    if f.wrapped_by:
        failure["wrapped_by"] = f.wrapped_by
    if len(end.failures) > 1:
        failure["also"] = [g.text() + f" ({g.source})" for g in end.failures[1:]]
    return ("completed" if done else "partial" if n_steps else "failed"), failure


def _runner(cfg: Any, overrides: list[str], logged_hw: str | None) -> Any:
    """The framework's runner, with the GPU peak its parser may use for native MFU taken from the
    run's own hardware (given, or from the logs), never from the compose default."""
    node = OmegaConf.to_container(cfg.framework, resolve=True)
    native = node.get("native") or {}
    if "peak_flops" in native:
        groups = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
        if groups & {"hardware", "experiment"}:
            native["peak_flops"] = float(cfg.hardware.peak_bf16_flops)
        elif logged_hw:
            native["peak_flops"] = float(compose([f"hardware={logged_hw}"]).hardware.peak_bf16_flops)
        else:
            native["peak_flops"] = None
    return load_runner(OmegaConf.create(node))


def ingest(
    cfg: Any, logs: Path, run_dir: Path, overrides: list[str] = (), source: str | None = None
) -> tuple[ParseResult, dict[str, Any]]:
    """Parse `logs` with cfg's runner, infer what ran, write the run directory; returns
    (parse result, manifest). Raises Refused before writing anything on bad input.

    A metric store (W&B, a history table, TensorBoard, MLflow: bench/stores.py, detected unless
    `source` forces one) is staged into the framework's own file formats first. Compressed logs (.gz;
    .zst when the zstandard module is installed) are read through a decompressed copy in a temporary
    folder (runners.run_config.stage_decompressed). Either way, what the manifest and every message
    name is the original path."""
    kind = source or stores.detect(logs)
    if kind != "console":
        store = stores.read(logs, kind)
        with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
            staged = Path(tmp) / "logs"
            stores.stage(store, str(cfg.framework.name), staged)

            def unstage_store(text: str) -> str:
                return text.replace(str(staged), str(store.path))

            try:
                return ingest_read(cfg, staged, run_dir, overrides, unstage_store, store=store)
            except Refused as e:
                raise Refused(unstage_store(str(e))) from None
    if not needs_staging(logs):
        return ingest_read(cfg, logs, run_dir, overrides)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        staged, decompressed, skipped = stage_decompressed(logs, Path(tmp))
        if not staged.exists():  # --logs was one compressed file, and it could not be read
            raise Refused(f"--logs {skipped[0]}")
        # staged paths -> the originals: each decompressed file first, then the staged folder
        shown = [*decompressed.items(), (str(staged), str(logs))]

        def unstage(text: str) -> str:
            for a, b in shown:
                text = text.replace(a, b)
            return text

        try:
            return ingest_read(cfg, staged, run_dir, overrides, unstage, skipped)
        except Refused as e:
            raise Refused(unstage(str(e))) from None


def ingest_read(
    cfg: Any,
    logs: Path,
    run_dir: Path,
    overrides: list[str] = (),
    unstage: Any = None,
    compressed_skipped: list[str] = (),
    store: stores.StoreRun | None = None,
) -> tuple[ParseResult, dict[str, Any]]:
    """`ingest` of a folder every reader can read; `unstage` maps a staged path in the manifest's
    text back to the original (ingest's decompressed or store-staged copy), `compressed_skipped`
    names the compressed files that could not be read, `store` is the metric store the folder was
    staged from (its GPU samples and what it lacks go into the run)."""
    fw = str(cfg.framework.name)
    files, skipped = log_files(logs)
    skipped = [*compressed_skipped, *skipped]
    if not files and not any(p.stat().st_size for p in text_files(logs)):
        raise Refused(f"--logs {logs}: empty (no file with any content); nothing to ingest")
    if not files and skipped and len(skipped) == len(text_files(logs)):
        raise Refused(f"--logs {logs}: no text log, only binary files ({'; '.join(skipped)})")
    runs_in(logs, fw)
    csvs, gpu_left, window = gpu_csvs(logs), [], run_window(logs, None)
    if window:  # the harness's window: known before parsing
        csvs, gpu_left = own_gpu_csvs(logs, csvs, window)
    clues = infer_hardware.hardware_clues(logs, files, [p for p, _ in csvs])
    hardware = infer_hardware.hardware_from_logs(logs, gpu_names(csvs), clues)
    result = _runner(cfg, overrides, hardware[0]).parse_logs(logs)
    end = log_end.scan(logs, files)
    if result.run_info.get("runs"):  # the parser found several runs' step records side by side
        runs = result.run_info["runs"]
        raise Refused(
            f"--logs {logs}: holds {len(runs)} runs (or copies of one), not one ({'; '.join(runs)}: each "
            "logged from the first step); pass one run's log as --logs"
        )
    if not result.steps:
        other = sniff_framework(logs)
        if other and other != fw:
            raise Refused(
                f"--logs {logs}: no {fw} records; these look like {other.replace('_', '-')} logs: `--framework {other}`"
            )
        if result.run_info.get("not_rl"):
            raise Refused(
                f"--logs {logs}: an SFT run's log (step lines of train/loss, "
                f"{result.run_info['not_rl']}), not an RL run: nothing to ingest"
            )
        if end.failure is None and not (end.cut_files and other == fw):  # a cut log: killed before step 1
            raise Refused(
                f"--logs {logs}: no {fw} step records and no error found in {len(files)} file(s); is this a {fw} run?"
            )
    if window is None:  # the trace's own clock, when the parser placed the steps on it
        csvs, gpu_left = own_gpu_csvs(logs, csvs, run_window(logs, result))
    reader = importlib.import_module(f"runners.{fw}_config")
    facts = reader.read(logs, result.run_info)
    epoch_rows, gpu_files, _ = read_gpu_csvs(logs, 0.0, csvs)  # t_s in Unix seconds, for the harness's epochs
    gpu_src = ", ".join(str(Path(f).relative_to(logs)) if logs.is_dir() else Path(f).name for f in gpu_files)
    teacher_unknown = infer_teacher.complete(facts, logs, epoch_rows, gpu_src or None)
    gpu_rows, _, _ = read_gpu_csvs(logs, result.run_info.get("start_epoch"), csvs)
    try:
        inferred, config = infer.resolve(facts, list(overrides), cfg, hardware, teacher_unknown)
    except infer.Conflict as e:
        raise Refused(str(e)) from None
    hw_findings = check_hardware(inferred, config, result.steps, clues, overrides)
    found, src = attempts.scan(logs, result.files, importlib.import_module(f"runners.{fw}_logs").STEP_STREAMS)
    tried = attempts.summary(found, src, result.run_info.get("t0_unix_s"), *ingest_gpus(inferred))
    total = inferred["total_steps"]["value"]  # logged, else workload.steps=N given
    status, failure = run_status(len(result.steps), total, end, steps_reached(result.run_info))
    wall = wall_window(logs, result.steps, result.run_info)
    with rundir.building(run_dir) as paths:  # a failed write (disk full) leaves no run directory
        if result.steps:
            write_steps(paths.steps, with_attempts(result.steps, found))
        if result.rollouts:
            write_rollouts(paths.rollouts, result.rollouts)
        if not gpu_rows and store is not None and store.gpu_rows:  # W&B's system metrics
            gpu_rows, gpu_files = store.gpu_rows, [*gpu_files, f"{store.path} (system metrics)"]
        if gpu_rows:
            write_gpu(paths.gpu, gpu_rows)
        manifest: dict[str, Any] = {
            "experiment": str(config["experiment"].get("name") or "ingested"),
            "run_id": run_dir.name,
            "framework": fw,
            "framework_version": str(cfg.framework.version),
            "mode": "native",
            "status": status,
            "failure": failure,
            "source_logs": str(logs.resolve()),
            "parsed_files": result.files + gpu_files,
            "skipped_files": skipped,
            "skipped_lines": result.skipped_lines,
            "left_out_files": gpu_left,
            "warnings": list(result.warnings) + skipped + gpu_left + attempts_warning(tried) + hw_findings,
            "attempts": tried,
            "source": store.manifest_entry()
            if store
            else {"kind": "console", "path": str(logs), "lacks": []},
            "run_info": result.run_info,
            "inferred": inferred,
            "wall_window": wall,
            "config": config,
        }
        if wall.get("wall_s") is not None:
            manifest["wall_s"] = float(wall["wall_s"])
        if wall.get("start_epoch_s") is not None:
            manifest["start_epoch_s"], manifest["end_epoch_s"] = wall["start_epoch_s"], wall["end_epoch_s"]
        if unstage is not None:  # read through a decompressed copy: name the originals
            manifest = json.loads(unstage(json.dumps(manifest)))
            manifest["source_logs"] = str(Path(manifest["source_logs"]).resolve())
        write_manifest(paths, manifest)
    return result, manifest


def _refuse(text: str) -> int:
    for line in redact_text(text).splitlines():  # it may echo an override that holds a secret
        print(f"error: {line}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str]) -> int:
    """Ingest; 0 when the run directory was written, 2 on bad input (one line, nothing written)."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "ingest",
        "Turn a framework's native logs (from a run the suite did not launch) into a run directory: the "
        "steps it logged, the configuration inferred from the logs, and its metrics. What the logs lack "
        "is unknown (null with the reason) unless given as key=value.",
        "the log folder or file (console logs, metrics files, nvidia-smi CSVs, the framework's config "
        "dumps), conf/ for the model and hardware facts, and the overrides.",
        "OUT (new, never overwritten): manifest.json with mode native and an inferred block, "
        "trace/steps.parquet, trace/rollouts.parquet, trace/gpu.parquet and metrics.json.",
        [
            "python -m bench ingest --framework verl --logs verl-logs/ --out results/opd/verl hardware=h100_sxm"
        ],
    )
    ap.add_argument("--framework", required=True, help="conf/framework/<name>.yaml")
    ap.add_argument(
        "--logs",
        type=Path,
        required=True,
        help="native log folder (or one file), or a metric store: a W&B run directory, a W&B history table "
        "(CSV, parquet, JSON lines with _step), TensorBoard event files, an MLflow file-store run "
        "(docs/ingest-sources.md)",
    )
    ap.add_argument(
        "--source", choices=stores.SOURCES, help="what --logs holds, when detection should not decide"
    )
    ap.add_argument("--out", type=Path, required=True, help="run directory to write (must not exist)")
    add_overrides(ap, "what the logs lack, e.g. hardware=h100_sxm model=qwen3_0_6b")
    args = ap.parse_intermixed_args(argv)
    overrides = args.overrides
    if args.framework not in frameworks():
        return _refuse(f"framework {args.framework!r} not found; choose one of {', '.join(frameworks())}")
    if not args.logs.exists():
        return _refuse(f"--logs {args.logs}: no such file or directory")
    try:
        check_out(args.out, "ingest")
    except UsageError as e:
        return _refuse(str(e))
    overrides = [o for o in overrides if not o.startswith("framework=")]
    try:
        cfg = compose([*overrides, f"framework={args.framework}"])
    except UsageError as e:  # an unknown group option or key, already one line per problem
        return _refuse(str(e))
    try:
        result, manifest = ingest(cfg, args.logs, args.out, overrides, args.source)
    except Refused as e:
        return _refuse(str(e))
    for w in manifest["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    failure = manifest["failure"]
    print(
        f"{args.out}: {manifest['status']}, {len(result.steps)} steps from {len(result.files)} file(s), "
        f"{result.skipped_lines} skipped line(s)"
        + (f", {manifest['attempts']['count']} attempts" if manifest["attempts"]["count"] > 1 else "")
        + (f"; {failure['message']} ({failure['phase']})" if failure else "")
    )
    if result.steps:
        return _metrics(args.out, manifest)
    return 0


def _metrics(run_dir: Path, manifest: dict[str, Any]) -> int:
    """metrics.json of the new run; a run whose metrics fail is not `completed` (its manifest says
    `partial` with the error), exit 1."""
    from bench.metrics import write_metrics

    try:
        metrics = write_metrics(run_dir)
    except Exception as e:  # any failure here is the run's, recorded, not a traceback
        manifest["status"] = "partial"
        manifest["failure"] = {"kind": "MetricsError", "message": f"{type(e).__name__}: {e}", "source": None,
                               "phase": "metrics"}  # fmt: skip
        write_manifest(RunPaths(run_dir), manifest)
        print(f"{run_dir}: metrics failed ({type(e).__name__}: {e}); status partial", file=sys.stderr)
        return 1
    print(f"{run_dir / 'metrics.json'}: {sum(v is not None for v in metrics.values())} values")
    return 0
