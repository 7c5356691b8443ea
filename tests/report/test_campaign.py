"""The 2 x H100 campaign report (opd-benchmark logs through `bench ingest`): per framework the
issue-13 figures, each labelled measured, per-role GPU telemetry where the logs name the roles'
devices, and the software experience (verl's real run logged a DataLoader worker killed at
teardown)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # ingests three real log sets

# The opd-benchmark's REPORT.md ("Comparable results"): generated response tokens/s over the
# harness wall (229 s verl, 335 s Miles, 276 s prime-rl) and trajectories/s.
PUBLISHED = {
    "verl": ("8.38", "553.9", "14.9"),
    "slime": ("5.73", "392.6", "22.4"),
    "prime_rl": ("6.96", "535.7", "18.7"),
}


def _block(md: str, fw: str) -> str:
    part = md.split("## Per framework", 1)[1].split("\n## ", 1)[0]
    return part.split(f"- **{fw}", 1)[1].split("\n- **", 1)[0]


@pytest.mark.parametrize("fw", sorted(PUBLISHED))
def test_each_framework_shows_its_measured_figures(campaign_report, fw):
    md = (campaign_report / "report" / "summary.md").read_text()
    block = _block(md, fw)
    traj, gen, energy = PUBLISHED[fw]
    metrics = json.loads((campaign_report / "results" / fw / "metrics.json").read_text())
    assert block.split("]", 1)[0].endswith("[M")  # measured
    assert f"Trajectories/s {traj};" in block
    assert f"Generated tokens/s {gen};" in block
    assert f"Energy (Wh) {energy};" in block
    assert f"Steady step (s) {metrics['steady_step_s']:.2f};" in block
    assert metrics["mfu"] is not None
    assert f"MFU, suite (%) {100 * metrics['mfu']:.2f};" in block
    assert "MFU model Qwen/Qwen3-0.6B (" in block


def test_mfu_model_names_where_it_was_read(campaign_report):
    md = (campaign_report / "report" / "summary.md").read_text()
    assert "MFU model Qwen/Qwen3-0.6B (run.log:904)" in _block(md, "verl")  # 'contains 596.05M parameters'
    assert "MFU model Qwen/Qwen3-0.6B (given)" in _block(md, "prime_rl")  # prime-rl prints no architecture


def test_prime_rl_gpu_roles_say_where_idle_gpus_sit(campaign_report):
    """prime-rl's launcher names the devices (inference on GPU 0, trainer on GPU 1): per-role rows,
    idlest first, from metrics.json gpu_roles."""
    md = (campaign_report / "report" / "summary.md").read_text()
    roles = json.loads((campaign_report / "results" / "prime_rl" / "metrics.json").read_text())["gpu_roles"]
    assert roles["rollout"]["gpus"] == [0] and roles["trainer"]["gpus"] == [1]
    block = _block(md, "prime_rl")
    # Prime-RL serves its teacher on the inference GPU (ingest: with_generator), so GPU 0 is both
    assert roles["teacher"]["gpus"] == [0]
    assert "Idlest first: trainer GPU 1 at 6.3%, rollout + teacher GPU 0 at 12.5% mean utilisation." in block
    r = roles["rollout"]
    assert (
        f"rollout (GPU 0): {r['util_mean_pct']:.1f}% mean utilisation, {r['mem_peak_mib'] / 1024:.1f} GiB "
        f"peak memory, {r['energy_wh']:.1f} Wh" in block
    )
    html = (campaign_report / "report" / "index.html").read_text()
    assert "Idlest first: trainer GPU 1 at 6.3%, rollout + teacher GPU 0 at 12.5% mean utilisation." in html


@pytest.mark.parametrize("fw", ["verl", "slime"])
def test_colocated_runs_are_not_split_by_role(campaign_report, fw):
    """verl and Miles place the student and teacher through Ray: no guessed split, the devices are
    listed as devices and the config's role counts named."""
    block = _block((campaign_report / "report" / "summary.md").read_text(), fw)
    assert "Not split by role: the run does not name each role's devices" in block
    assert "(GPUs by role from the config: hybrid 1, teacher 1)" in block
    assert "per device, idlest first: GPU 1 at" in block
    html = (campaign_report / "report" / "index.html").read_text()
    row = html.split('<table class="overview">', 1)[1].split(f'">{fw}</a>', 1)[1].split("</tr>", 1)[0]
    assert (
        "Not split by role: the run does not name each role&#39;s devices (GPUs by role from the config: hybrid 1, teacher 1)."
        in row
    )


def test_software_experience_lists_verls_teardown_error(campaign_report):
    md = (campaign_report / "report" / "summary.md").read_text()
    part = md.split("## Software experience", 1)[1].split("\n## ", 1)[0]
    assert "**prime_rl** [measured]: 1 attempt(s) (1 completed). None failed or logged an error." in part
    assert "**slime** [measured]: 1 attempt(s) (1 completed). None failed or logged an error." in part
    verl = part.split("**verl**", 1)[1]
    assert "1 completed run logged an error (phases: teardown)" in verl
    assert "RuntimeError (teardown): 1 of 1 attempt; steps kept: 15" in verl
    assert "“RuntimeError: DataLoader worker (pid 44800) is killed by signal: Killed.” (run.log:1087" in verl


def test_run_details_say_what_ran_and_where_it_was_read(campaign_report):
    """manifest `inferred` in each run's details: the value and its file:line (verl's config dump),
    `given` (the hardware), or why it is unknown (prime-rl's response cap)."""
    html = (campaign_report / "report" / "index.html").read_text()

    def row(key: str, value: str, src: str) -> str:
        return f'<tr><td class="id">{key}</td><td class="text">{value}</td><td class="text">{src}</td></tr>'

    assert row("gpus.hybrid", "1", "config.yaml:905") in html
    assert row("gpus.teacher", "1", "config.yaml:841") in html
    assert row("group_size", "16", "config.yaml:295") in html
    assert row("hardware", "h100_sxm", "given") in html
    assert row("gpu_ids.rollout", "[0]", "run.log:7") in html
    assert (
        row("max_response_len", "unknown", "max response length not found in the logs; pass it to set it")
        in html
    )


def test_an_unknown_model_gives_its_reason_in_the_details(opd_report):
    """Without `model=` prime-rl's architecture is unknown: the details say why (its rule); its
    name is the run's own (the model path it loaded)."""
    html = (opd_report / "report" / "index.html").read_text()
    assert (
        '<tr><td class="id">model_arch</td><td class="text">unknown</td><td class="text">model unknown: the '
        "logs print no architecture; pass model=&lt;conf/model name&gt;</td></tr>" in html
    )
    assert '<tr><td class="id">model</td><td class="text">student</td>' in html
