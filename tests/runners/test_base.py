"""runners/base.py: the shared runner skeleton (console-line cleaning, mode resolution, the
render template and parse_logs' path handling), on real console lines."""

from __future__ import annotations

import pytest

from bench.config import compose
from runners.base import NOT_INSTALLED, Launch, Runner, clean_line, clean_line_bytes, clean_text, load_runner

# verl 0.9.1 V1 console line as Ray prints it (colour codes around the actor prefix)
VERL_LINE = "\x1b[36m(TaskRunnerV1 pid=1234, ip=10.0.0.2)\x1b[0m step:3 - timing_s/step:12.5"
# slime v0.3.1 train-side record line
SLIME_LINE = "(MegatronTrainRayActor pid=4100) [2025-11-03 10:01:02] train_metric_utils.py:45 - perf 3: {}"


def test_clean_line_strips_colour_and_the_ray_actor_prefix():
    assert clean_line(VERL_LINE) == "step:3 - timing_s/step:12.5"
    assert clean_line(SLIME_LINE) == "[2025-11-03 10:01:02] train_metric_utils.py:45 - perf 3: {}"
    assert clean_line_bytes(VERL_LINE.encode()) == b"step:3 - timing_s/step:12.5"


def test_clean_line_keeps_a_line_without_prefix_and_a_prefix_inside_the_text():
    line = "02:40:53 SUCCESS Step 1 | Time: 0.60s (Worker pid=3) here"
    assert clean_line(line) == line
    assert clean_text(VERL_LINE + "\n" + SLIME_LINE + "\n") == (
        "step:3 - timing_s/step:12.5\n[2025-11-03 10:01:02] train_metric_utils.py:45 - perf 3: {}\n"
    )


@pytest.mark.parametrize("framework", ["verl", "slime", "prime_rl"])
def test_a_mode_the_pinned_version_lacks_is_named_by_key(framework):
    cfg = compose(["experiment=smoke", f"framework={framework}", "framework.mode=nosuchmode"])
    runner = load_runner(cfg.framework)
    problem = runner.validate(cfg)[0]
    assert problem.startswith("framework.mode='nosuchmode': ") and "(or 'auto')" in problem
    with pytest.raises(ValueError, match="framework.mode='nosuchmode'"):
        runner.resolve_mode(cfg)
    with pytest.raises(ValueError, match=f"{framework} cannot run this workload: framework.mode"):
        runner.render_launch(cfg)


def test_hooks_have_declared_defaults(tmp_path):
    runner = Runner(name="x", version="1")
    runner.name = "x"
    with pytest.raises(NotImplementedError):  # required: every runner checks its framework's schema
        runner.schema_problems(None)
    assert runner.native_settings(Launch("x", "1", 1, 8, [], files={"a.txt": "k=v\n"})) == {"a.txt": "k=v\n"}
    assert runner.validate_native(None, None) == [f"x: native check {NOT_INSTALLED}"]
    assert runner.parse_logs(tmp_path / "absent").warnings == [
        f"{tmp_path / 'absent'}: no such file or directory"
    ]
