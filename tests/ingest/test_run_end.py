"""How a run ended, from logs built out of the real opd-benchmark runs: cut mid-step, an exception
appended as each framework prints it, a Ray actor death, an OOM, an NCCL timeout, a Slurm
cancellation, zero-filled blocks and CRLF. Status, failure text and the steps kept before it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.ingest import main as ingest
from bench.trace import RunPaths, read_manifest, read_steps

SIDE_FILES = ("gpu.csv", "config.yaml", "overrides.yaml")


def _ingest(fw: str, logs: Path, out: Path) -> tuple[dict, list[int]]:
    assert ingest(["--framework", fw, "--logs", str(logs), "--out", str(out)]) == 0
    m = read_manifest(RunPaths(out))
    return m, read_steps(RunPaths(out).steps).step.tolist()


def _verl_logs(tmp_path: Path, opd_results: Path, text: str) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in SIDE_FILES:
        shutil.copy(opd_results / "verl" / f, logs / f)
    (logs / "run.log").write_text(text)
    return logs


def _verl_until(opd_results: Path, step: int) -> str:
    """verl's run.log up to and including the progress bar line after `step`."""
    text = (opd_results / "verl" / "run.log").read_text()
    cut = text.index(f"step:{step + 1} - ")
    return text[: text.rindex("\n", 0, cut) + 1]


def test_verl_log_cut_mid_step_is_partial_with_the_steps_before_it(tmp_path, opd_results):
    text = (opd_results / "verl" / "run.log").read_text()
    cut = text.index("step:8 - ") + 200  # the run dies while printing step 8's record
    m, steps = _ingest("verl", _verl_logs(tmp_path, opd_results, text[:cut]), tmp_path / "run")
    assert m["status"] == "partial"
    assert m["failure"] == {
        "kind": "truncated",
        "message": "log cut off mid-line after step 7 of 15",
        "source": "run.log",
        "phase": "steady state",
    }
    assert steps == [1, 2, 3, 4, 5, 6, 7]


VALUE_ERROR = """\
(TaskRunnerV1 pid=41131) Traceback (most recent call last):
(TaskRunnerV1 pid=41131)   File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1204, in fit
(TaskRunnerV1 pid=41131)     batch = batch.union(gen_batch_output)
(TaskRunnerV1 pid=41131)   File "/workspace/verl/verl/protocol.py", line 712, in union
(TaskRunnerV1 pid=41131)     raise ValueError(f"{key} in meta_info have different values")
(TaskRunnerV1 pid=41131) ValueError: global_token_num in meta_info have different values
"""


def test_verl_exception_after_step_5(tmp_path, opd_results):
    m, steps = _ingest(
        "verl", _verl_logs(tmp_path, opd_results, _verl_until(opd_results, 5) + VALUE_ERROR), tmp_path / "r"
    )
    assert m["status"] == "partial" and steps == [1, 2, 3, 4, 5]
    assert m["failure"]["kind"] == "ValueError"
    assert m["failure"]["message"] == "ValueError: global_token_num in meta_info have different values"
    assert m["failure"]["phase"] == "steady state"
    n = _verl_until(opd_results, 5).count("\n") + VALUE_ERROR.count("\n")
    assert m["failure"]["source"] == f"run.log:{n}"  # the exception's own line


def test_verl_teardown_error_after_the_last_step_keeps_the_run_completed(tmp_path, opd_results):
    """The real run: 15/15 updates, then Ray killed a DataLoader worker during teardown."""
    m, steps = _ingest("verl", opd_results / "verl", tmp_path / "run")
    assert m["status"] == "completed" and len(steps) == 15
    assert m["failure"] == {
        "kind": "RuntimeError",
        "message": "RuntimeError: DataLoader worker (pid 44800) is killed by signal: Killed.",
        "source": "run.log:1087",
        "phase": "teardown",
    }


@pytest.mark.parametrize(
    ("tail", "kind", "message"),
    [
        (
            "(WorkerDict pid=42351) Traceback (most recent call last):\n"
            '(WorkerDict pid=42351)   File "/workspace/verl/verl/workers/actor/dp_actor.py", line 480, in update_policy\n'
            "(WorkerDict pid=42351)     loss.backward()\n"
            "(WorkerDict pid=42351) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. "
            "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.\n",
            "torch.OutOfMemoryError",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. "
            "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.",
        ),
        (
            "(WorkerDict pid=42351) [rank0]:[E807 13:29:31.421 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=4212, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600014 milliseconds before timing out.\n",
            "NCCLTimeout",
            "[E807 13:29:31.421 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=4212, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600014 milliseconds before timing out.",
        ),
        (
            "slurmstepd: error: *** JOB 4242 ON gpu-node-01 CANCELLED AT 2026-08-07T13:29:31 DUE TO TIME LIMIT ***\n",
            "SlurmCancelled",
            "slurmstepd: error: *** JOB 4242 ON gpu-node-01 CANCELLED AT 2026-08-07T13:29:31 DUE TO TIME LIMIT ***",
        ),
    ],
)
def test_oom_nccl_timeout_and_slurm_cancel(tmp_path, opd_results, tail, kind, message):
    m, steps = _ingest(
        "verl", _verl_logs(tmp_path, opd_results, _verl_until(opd_results, 3) + tail), tmp_path / "r"
    )
    assert (m["status"], m["failure"]["kind"], steps) == ("partial", kind, [1, 2, 3])
    assert m["failure"]["message"].endswith(message)


RAY_ACTOR_DIED = """\
Traceback (most recent call last):
  File "/root/miles/train.py", line 106, in <module>
    train(args)
  File "/root/miles/train.py", line 78, in train
    ray.get(actor_model.async_train(rollout_id, rollout_data_ref))
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 2882, in get
    raise value
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: MegatronTrainRayActor
\tactor_id: 7f3c2b1e0c1b8a6f5d4e3c2b01000000
\tpid: 48367
\tnamespace: 0c3d5e7a-7f1e-4a2b-9c3d-5e7f1a2b3c4d
\tip: 86.38.238.166
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: \
Worker unexpectedly exits with a connection error code 2. End of file.
"""


def test_miles_ray_actor_death_keeps_the_trained_rollouts(tmp_path, opd_results):
    src = opd_results / "miles"
    text = (src / "run.log").read_text()
    # cut right after the 6th of the 15 train-step perf records
    lines = text.splitlines(keepends=True)
    train_lines = [i for i, ln in enumerate(lines) if "perf/actor_train_time" in ln]
    assert len(train_lines) == 15
    keep = "".join(lines[: train_lines[5] + 1])
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run.log").write_text(keep + RAY_ACTOR_DIED)
    shutil.copy(src / "teacher.log", logs / "teacher.log")
    m, steps = _ingest("slime", logs, tmp_path / "run")
    assert m["status"] == "partial" and steps == [0, 1, 2, 3, 4, 5]  # slime counts rollouts from 0
    assert m["failure"]["kind"] == "ray.exceptions.ActorDiedError"
    assert m["failure"]["message"] == (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    )
    assert m["failure"]["source"] == f"run.log:{keep.count(chr(10)) + 8}"


PRIME_TRACEBACK = """\
[trainer0]:Traceback (most recent call last):
[trainer0]:  File "/root/prime-rl/src/prime_rl/trainer/rl/train.py", line 412, in train
[trainer0]:    micro_batch = next(data_iter)
[trainer0]:  File "/root/prime-rl/src/prime_rl/trainer/rl/data.py", line 188, in __next__
[trainer0]:    raise AssertionError(f"Expected {self.expected} micro batches, got {got}")
[trainer0]:AssertionError: Expected 1 micro batches, got 0
"""


def test_prime_trainer_assertion_after_step_9(tmp_path, opd_results):
    src = opd_results / "prime"
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("metrics.jsonl", "trainer_metrics.jsonl"):  # the rows of steps 1-9 only
        rows = [
            ln for ln in (src / name).read_text().splitlines(keepends=True) if json.loads(ln)["step"] <= 9
        ]
        (logs / name).write_text("".join(rows))
    trainer = (src / "trainer.log").read_text()
    (logs / "trainer.log").write_text(
        trainer[: trainer.index("SUCCESS Step 10 |")].rsplit("\n", 1)[0] + "\n" + PRIME_TRACEBACK
    )
    orch = (src / "orchestrator.log").read_text()
    (logs / "orchestrator.log").write_text(orch[: orch.index("SUCCESS Step 10 |")].rsplit("\n", 1)[0] + "\n")
    launcher = (src / "run.log").read_text()  # its start-up lines only (it goes on to echo every step)
    (logs / "run.log").write_text(launcher[: launcher.index("SUCCESS Startup complete")])
    m, steps = _ingest("prime_rl", logs, tmp_path / "run")
    assert steps == list(range(1, 10)) and m["status"] == "partial"
    assert m["failure"]["kind"] == "AssertionError"
    assert m["failure"]["message"] == "AssertionError: Expected 1 micro batches, got 0"
    assert m["failure"]["source"].startswith("trainer.log:")


@pytest.mark.parametrize(("fw", "d"), [("verl", "verl"), ("slime", "miles"), ("prime_rl", "prime")])
def test_nul_blocks_crlf_and_a_binary_file_still_parse_every_step(tmp_path, opd_results, fw, d):
    """A crash's zero-filled blocks (mid-file and at the end), CRLF line ends, and a binary core
    file beside the logs: every step is still read, and the binary file is named as skipped."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in (opd_results / d).iterdir():
        data = f.read_bytes()
        if f.suffix in (".log", ".jsonl"):
            lines = data.split(b"\n")
            half = len(lines) // 2
            data = (
                b"\r\n".join(lines[:half])
                + b"\r\n"
                + b"\0" * 65536
                + b"\r\n".join(lines[half:])
                + b"\0" * 4096
            )
        (logs / f.name).write_bytes(data)
    (logs / "core.1234").write_bytes(bytes(range(128, 256)) * 512)
    m, steps = _ingest(fw, logs, tmp_path / "run")
    assert steps == list(range(0, 15) if fw == "slime" else range(1, 16))  # slime counts rollouts from 0
    assert (
        f"{logs / 'core.1234'}: skipped, binary (100% of its first 8192 non-NUL bytes are not text)"
        in m["skipped_files"]
    )
    assert m["inferred"]["group_size"]["value"] == 16 and m["inferred"]["prompts_per_step"]["value"] == 8


def test_an_error_the_run_survived_is_not_its_end(tmp_path, opd_results):
    """A traceback in the middle of the log (a request retried, a warning with its traceback),
    followed by more steps: no failure, the run completed."""
    text = (
        _verl_until(opd_results, 5)
        + VALUE_ERROR
        + (opd_results / "verl" / "run.log")
        .read_text()[len(_verl_until(opd_results, 5)) :]
        .split("(TaskRunnerV1 pid=41131) Traceback")[0]
    )
    m, steps = _ingest("verl", _verl_logs(tmp_path, opd_results, text), tmp_path / "r")
    assert (m["status"], m["failure"], len(steps)) == ("completed", None, 15)


def _verl_before_steps(opd_results: Path) -> str:
    """verl's run.log up to its first step record: a run that stops during start-up."""
    text = (opd_results / "verl" / "run.log").read_text()
    return text[: text.rindex("\n", 0, text.index("step:1 - ")) + 1]


# Hydra without HYDRA_FULL_ERROR: the InstantiationException's text, no traceback
HYDRA_WRAPPED = """\
Error executing job with overrides: ['data.train_batch_size=8', 'actor_rollout_ref.actor.ppo_mini_batch_size=16']
Error in call to target 'verl.workers.config.actor.FSDPActorConfig':
ValueError('ppo_mini_batch_size (16) must be <= train_batch_size (8)')
full_key: actor_rollout_ref.actor

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""
# Ray: the driver's traceback ends in RayTaskError(ValueError), the actor's own traceback under it
RAY_WRAPPED = """\
Traceback (most recent call last):
  File "/workspace/verl/verl/trainer/main_ppo.py", line 42, in main
    run_ppo(config)
  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo
    ray.get(runner.run.remote(config))
ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=41131, ip=10.0.0.2, actor_id=8f1c, repr=<main_ppo.TaskRunner object at 0x7f3c>)
  File "/workspace/verl/verl/trainer/main_ppo.py", line 316, in run
    trainer.init_workers()
  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 861, in init_workers
    raise ValueError("rollout.tensor_model_parallel_size (4) exceeds the GPUs per node (2)")
ValueError: rollout.tensor_model_parallel_size (4) exceeds the GPUs per node (2)
"""
# Ray: an actor whose constructor raised; ActorDiedError carries the cause's traceback
ACTOR_DIED_WRAPPED = """\
(TaskRunnerV1 pid=41131) Traceback (most recent call last):
(TaskRunnerV1 pid=41131)   File "/workspace/verl/verl/single_controller/ray/base.py", line 520, in _init_with_resource_pool
(TaskRunnerV1 pid=41131)     ray.get(futures)
(TaskRunnerV1 pid=41131) ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, ray::WorkerDict.__init__() (pid=42351, ip=10.0.0.2, actor_id=91ab, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f>)
(TaskRunnerV1 pid=41131)   File "/workspace/verl/verl/workers/fsdp_workers.py", line 140, in __init__
(TaskRunnerV1 pid=41131)     self._build_model_optimizer()
(TaskRunnerV1 pid=41131) RuntimeError: CUDA error: invalid device ordinal
"""


@pytest.mark.parametrize(
    ("tail", "kind", "message", "wrapper"),
    [
        (
            HYDRA_WRAPPED,
            "ValueError",
            "ValueError: ppo_mini_batch_size (16) must be <= train_batch_size (8)",
            "Error in call to target 'verl.workers.config.actor.FSDPActorConfig':",
        ),
        (
            RAY_WRAPPED,
            "ValueError",
            "ValueError: rollout.tensor_model_parallel_size (4) exceeds the GPUs per node (2)",
            "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()",
        ),
        (
            ACTOR_DIED_WRAPPED,
            "RuntimeError",
            "RuntimeError: CUDA error: invalid device ordinal",
            "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task",
        ),
    ],
    ids=["hydra", "ray-task-error", "actor-died-with-cause"],
)
def test_a_wrapped_start_up_error_is_unwrapped_to_its_class_message_and_line(
    tmp_path, opd_results, tail, kind, message, wrapper
):
    head = _verl_before_steps(opd_results)
    logs = _verl_logs(tmp_path, opd_results, head + tail)
    assert ingest(["--framework", "verl", "--logs", str(logs), "--out", str(tmp_path / "run")]) == 0
    m = read_manifest(RunPaths(tmp_path / "run"))
    assert m["status"] == "failed"
    f = m["failure"]
    assert (f["kind"], f["message"], f["phase"]) == (kind, message, "launch or first step")
    line = int(f["source"].split(":")[1])  # the original exception's own line (Hydra: its repr)
    assert message.split(": ", 1)[1] in (logs / "run.log").read_text().split("\n")[line - 1]
    assert line > head.count("\n") and f["wrapped_by"].startswith(wrapper)


def test_a_log_with_bare_cr_line_ends_parses_every_step_and_cites_physical_lines(tmp_path, opd_results):
    """run.log written with CR line ends only (no LF): every record still parses, and the error at
    the end is cited at physical line 1, as `grep -n` numbers a file without LF."""
    text = _verl_until(opd_results, 5) + VALUE_ERROR
    m, steps = _ingest("verl", _verl_logs(tmp_path, opd_results, text.replace("\n", "\r")), tmp_path / "r")
    assert steps == [1, 2, 3, 4, 5]
    assert m["failure"]["kind"] == "ValueError" and m["failure"]["source"] == "run.log:1"


def test_a_cr_progress_bar_inside_a_line_does_not_shift_cited_lines(tmp_path, opd_results):
    """tqdm redraws with CR inside one LF line; the error is cited at its `grep -n` line."""
    text = (
        _verl_until(opd_results, 5).replace(
            "step:3 - ",
            "Training Progress:  20%|##        | 3/15\rTraining Progress:  27%|###       | 4/15\rstep:3 - ",
            1,
        )
        + VALUE_ERROR
    )
    m, steps = _ingest("verl", _verl_logs(tmp_path, opd_results, text), tmp_path / "r")
    assert steps == [1, 2, 3, 4, 5]
    assert m["failure"]["source"] == f"run.log:{text.count(chr(10))}"


@pytest.mark.parametrize(
    ("fw", "d", "drop"),
    [
        ("slime", "miles", ()),
        ("prime_rl", "prime", ("metrics.jsonl", "trainer_metrics.jsonl", "final_summary.json")),
    ],
)
def test_slime_and_prime_logs_with_bare_cr_line_ends_parse_every_step(tmp_path, opd_results, fw, d, drop):
    """The same console logs with LF and with CR-only line ends give the same steps (prime-rl's
    JSONL metrics left out, so its console lines are what is read)."""
    got = []
    for name, end in (("lf", "\n"), ("cr", "\r")):
        logs = tmp_path / name
        shutil.copytree(opd_results / d, logs)
        for f in drop:
            (logs / f).unlink()
        for log in logs.glob("*.log"):
            log.write_bytes(log.read_bytes().replace(b"\n", end.encode()))
        m, steps = _ingest(fw, logs, tmp_path / f"run-{name}")
        got.append((m["status"], steps))
    assert got[0] == got[1] and got[0][0] == "completed" and len(got[0][1]) == 15  # a final CR is no cut
