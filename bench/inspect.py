"""`python -m bench inspect`: the pre-flight of a site, before a native job waits in its queue.

    python -m bench inspect experiment=smoke cluster=<site> [framework=...]

One line per check, `ok`, `FAIL` (with its fix) or `skip` (with why), exit 2 if any fails:

- partition: it exists and has enough usable nodes with the GPU type and count per node the job
  asks for (`sinfo`), the most nodes any framework's launch needs;
- account/QoS: Slurm accepts the job's request (`sbatch --test-only`, nothing queued);
- runtime: Pyxis (srun's --container-image) and enroot, or Apptainer, on a compute node when the
  cluster names a container; otherwise the framework's pinned version imports on a compute node
  after the site's setup lines (python3), unless BENCH_DRIVER replaces the framework's driver;
- storage: data_root, model_root and the results directory are writable from a compute node, with
  room for what is still missing (the BF16 bytes of the model and each teacher until prepared);
- prepared: the dataset's prepared.json has each framework's files and the model is cached with
  every recorded file (bench prepare); so is each on-policy-distillation teacher's (one line each),
  and slime's in-process teacher has its torch_dist conversion;
- rules: the framework rules of `bench validate` (batch divisible by every DP size, GPUs per role,
  memory, ...), called, not copied.

Every check is a function of the command outputs it reads (testable without Slurm); the probes
that must run on a compute node share one short `srun` step.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cli import counted
from runners import data_paths

SRUN_TIMEOUT_S = 300  # the probe step may wait for a node; beyond this the check fails saying so
DIST = {"verl": "verl", "slime": "slime", "prime_rl": "prime-rl"}  # framework -> distribution name


@dataclass
class Check:
    """One line of the report: ok True/False, or None for a check that does not apply here."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark}  {self.name}: {self.detail}" + (f" -> fix: {self.fix}" if self.fix else "")


# ---- checks: pure functions of command outputs ----------------------------------------------------

BAD_STATES = ("down", "drain", "drng", "fail", "maint", "inval", "unk")


def gres_gpus(gres: str) -> dict[str, int]:
    """GPUs per type in a node's sinfo %G ('gpu:h100:8(S:0-1),gpu:a100:2' -> {'h100': 8, 'a100': 2};
    an untyped 'gpu:4' is {'': 4})."""
    out: dict[str, int] = {}
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        kind, count = (parts[1], parts[2]) if len(parts) >= 3 else ("", parts[1])
        if count.isdigit():
            out[kind] = out.get(kind, 0) + int(count)
    return out


def check_partition(cluster: Any, need_nodes: int, sinfo: str, error: str = "") -> Check:
    """`sinfo -h -N -o '%R %N %G %t'` lines: does cluster.partition have need_nodes usable nodes
    with cluster.gpus_per_node GPUs of cluster.gpu_type each? `error` is sinfo's stderr."""
    rows = [ln.split() for ln in sinfo.splitlines() if len(ln.split()) >= 4]
    part, gpn, kind = str(cluster.partition), int(cluster.gpus_per_node), str(cluster.gpu_type)
    name = f"partition {part or '(default)'}"
    if not rows and error.strip():
        return Check(name, False, error.strip().splitlines()[-1],
                     "run inspect on a login node of the cluster (for the testbed: make testbed-up)")  # fmt: skip
    mine = [r for r in rows if not part or r[0] == part]
    if not mine:
        known = ", ".join(sorted({r[0] for r in rows})) or "none"
        return Check(
            name,
            False,
            f"not found (partitions here: {known})",
            f"set cluster.partition in conf/cluster/{cluster.name}.yaml",
        )
    nodes = {r[1]: (gres_gpus(r[2]), r[3].rstrip("*~#!%$@^-").lower()) for r in mine}
    fits = [
        n for n, (g, state) in nodes.items() if g.get(kind, 0) >= gpn and not state.startswith(BAD_STATES)
    ]
    want = f"gpu:{kind}:{gpn}" if kind else f"gpu:{gpn}"
    if len(fits) >= need_nodes:
        return Check(
            name, True, f"{len(fits)} of {len(nodes)} nodes usable with {want} (the job needs {need_nodes})"
        )
    have = sorted(
        {
            ",".join(f"gpu:{k}:{v}" if k else f"gpu:{v}" for k, v in g.items()) or "no GPUs"
            for g, _ in nodes.values()
        }
    )
    return Check(name, False, f"{len(fits)} of {len(nodes)} nodes usable with {want}, the job needs {need_nodes} (nodes have {'; '.join(have)})",
                 "set cluster.gpus_per_node / gpu_type to what the nodes have, or a smaller experiment")  # fmt: skip


def check_account(cluster: Any, rc: int, stderr: str) -> Check:
    """`sbatch --test-only` of the job's request: rc 0 ('sbatch: Job N to start at ...') accepts."""
    who = f"account {cluster.account or '(default)'}, qos {cluster.qos or '(default)'}"
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "no answer")
    if rc == 0:
        return Check("account/QoS", True, f"{who}: {first}")
    return Check("account/QoS", False, f"{who}: {first}",
                 f"set cluster.account / qos / time_min in conf/cluster/{cluster.name}.yaml (sacctmgr show assoc user=$USER)")  # fmt: skip


def check_runtime(cluster: Any, srun_help: str, probe: dict[str, tuple[int, str]]) -> Check:
    """Pyxis (srun --container-image) + enroot, or apptainer/singularity, on a compute node."""
    kind = str(cluster.container.kind)
    rc, text = probe.get("runtime", (1, "probe did not run"))
    if kind == "pyxis":
        if "--container-image" not in srun_help:
            return Check("runtime pyxis", False, "srun has no --container-image (the Pyxis SPANK plugin is not loaded)",
                         "install Pyxis + enroot, or set cluster.container.kind=none")  # fmt: skip
        ok = rc == 0
        return Check("runtime pyxis", ok, f"srun --container-image present; enroot on the compute node: {text or 'not found'}",
                     "" if ok else "install enroot on the compute nodes")  # fmt: skip
    if kind == "apptainer":
        ok = rc == 0
        return Check("runtime apptainer", ok, f"on the compute node: {text or 'apptainer/singularity not found'}",
                     "" if ok else "install Apptainer on the compute nodes, or set cluster.container.kind=none")  # fmt: skip
    return Check(
        "runtime",
        None,
        "no container (cluster.container.kind=none): the framework runs on the node's python3",
    )


def check_import(fw: str, version: str, driver: str, probe: dict[str, tuple[int, str]]) -> Check:
    """The pinned framework version imports on a compute node (no-container sites)."""
    name = f"{fw} {version}"
    if driver:
        return Check(name, None, f"BENCH_DRIVER={driver} replaces the framework's driver; import not checked")
    rc, text = probe.get(f"import {fw}", (1, "probe did not run"))
    last = text.strip().splitlines()[-1] if text.strip() else "no output"
    if rc == 0 and last == version:
        return Check(name, True, f"python3 on the compute node imports {DIST[fw]} {last}")
    return Check(name, False, f"python3 on the compute node: {last}",
                 "install it on the nodes (conf/framework install line) or add the environment to cluster.setup")  # fmt: skip


def df_free(df_line: str) -> int:
    """Available bytes from `df -Pk` output's last line (1024-byte blocks)."""
    return int(df_line.split()[3]) * 1024


def check_storage(role: str, path: Path, need: int, why: str, probe: dict[str, tuple[int, str]]) -> Check:
    """Writable from a compute node (a file made and removed), with `need` bytes free."""
    rc, text = probe.get(f"write {role}", (1, "probe did not run"))
    lines = text.strip().splitlines()
    name, key = f"{role} {path}", role if role == "results_dir" else f"cluster.{role}"
    if rc != 0 or not lines:
        return Check(name, False, f"not writable from a compute node: {lines[-1] if lines else 'no output'}",
                     f"make it writable on the shared filesystem or set {key}")  # fmt: skip
    free = df_free(lines[-1])
    if free < need:
        return Check(
            name,
            False,
            f"{free / 1e9:.1f} GB free, needs {need / 1e9:.1f} GB ({why})",
            f"free space or move {key}",
        )
    return Check(
        name,
        True,
        f"writable from a compute node, {free / 1e9:.1f} GB free"
        + (f" (needs {need / 1e9:.1f} GB: {why})" if need else ""),
    )


def check_data(fw: str, cfg: Any) -> Check:
    """The framework's files listed in prepared.json exist (bench prepare)."""
    record = data_paths.dataset_record(cfg)
    fix = f"python -m bench prepare experiment={cfg.experiment.name} cluster={cfg.cluster.name} --only data"
    entry = (json.loads(record.read_text()).get("frameworks", {}) if record.is_file() else {}).get(fw)
    if not entry:
        return Check(
            f"data {fw}", False, f"{cfg.workload.dataset} not prepared for {fw} ({record} has no entry)", fix
        )
    missing = [f for f in entry["files"] if not (record.parent / f).is_file()]
    if missing:
        return Check(f"data {fw}", False, f"missing {', '.join(missing)} under {record.parent}", fix)
    rows = sum(m["rows"] for m in entry["files"].values())
    return Check(f"data {fw}", True, f"{len(entry['files'])} file(s), {rows} rows under {record.parent}")


def check_weights(cfg: Any, weights: str, name: str) -> Check:
    """Every file of the snapshot's .prepared.json (data_paths.weights_record) is present with its
    recorded size; `name` is the line's subject (the student's or a teacher's)."""
    record, target = data_paths.weights_record(cfg, weights), data_paths.weights_dir(cfg, weights)
    fix = f"python -m bench prepare experiment={cfg.experiment.name} cluster={cfg.cluster.name} --only models"
    if not record.is_file():
        return Check(name, False, f"not cached ({record} missing)", fix)
    files = json.loads(record.read_text())["files"]
    bad = [
        f for f, m in files.items() if not (target / f).is_file() or (target / f).stat().st_size != m["size"]
    ]
    if bad:
        return Check(name, False, f"{len(bad)} file(s) missing or of another size ({bad[0]})", fix)
    return Check(name, True, f"{counted(len(files), 'file')} at {target}")


def check_model(cfg: Any) -> Check:
    """The student's (model.name's) prepared snapshot."""
    return check_weights(cfg, str(cfg.model.name), f"model {cfg.model.name}")


def check_teachers(cfgs: dict[str, Any]) -> list[Check]:
    """One line per on-policy-distillation teacher's weights, where the OPD renders read them: a Hub
    snapshot prepared like the student's, or a site checkpoint folder given by absolute path; and,
    for slime's in-process teacher (--opd-type megatron), its torch_dist conversion."""
    from runners import opd, slime_opd

    first = next(iter(cfgs.values()))
    out = []
    for i, t in enumerate(first.experiment.get("teachers") or []):
        weights, name = opd.weights(t), f"teacher experiment.teachers[{i}] {opd.weights(t) or t.model}"
        if not weights:
            out.append(Check(name, False, f"conf/model/{t.model}.yaml has no Hub name to prepare",
                             "use a conf/model option or set the teacher's checkpoint"))  # fmt: skip
        elif Path(weights).is_absolute():
            here = Path(weights).is_dir()
            out.append(Check(name, here, f"site checkpoint {weights}" + ("" if here else " not found"),
                             "" if here else "fix experiment.teachers[].checkpoint"))  # fmt: skip
        else:
            out.append(check_weights(first, weights, name))
    if "slime" in cfgs and slime_opd.teacher_mode(cfgs["slime"]) == "megatron":
        load = slime_opd.teacher_load(cfgs["slime"])
        fix = f"convert the teacher's snapshot with slime's tools/convert_hf_to_torch_dist.py --save {load}"
        here = Path(load).is_dir()
        out.append(
            Check(
                "slime --opd-teacher-load", here, load + ("" if here else " not found"), "" if here else fix
            )
        )
    return out


def uncached_bytes(cfg: Any, checks: list[Check]) -> tuple[int, str]:
    """(bytes, what) of the BF16 weights model_root still has to take: the student's and each
    teacher's (conf/model facts) whose weights check did not pass."""
    from bench.flops import param_counts
    from bench.resolve import load_model
    from runners import opd

    failed = {c.name for c in checks if c.ok is False}
    need, what, seen = 0, [], {str(cfg.model.name)}  # one snapshot per weights, however many name it
    if f"model {cfg.model.name}" in failed:
        need, what = int(2 * param_counts(cfg.model)["total"]), [str(cfg.model.name)]
    for i, t in enumerate(cfg.experiment.get("teachers") or []):
        conf, weights = load_model(str(t.model)), opd.weights(t)
        if weights in seen or conf is None or f"teacher experiment.teachers[{i}] {weights}" not in failed:
            continue
        seen.add(weights)
        need += int(2 * param_counts(conf)["total"])
        what.append(f"teacher {weights}")
    return need, (", ".join(what) + " in BF16, not yet cached") if what else ""


def check_rules(fw: str, cfg: Any, resolved: Any) -> list[Check]:
    """bench validate's problems for this framework, one failing line each."""
    from bench.validate import validate

    problems = validate(cfg, resolved)
    if not problems:
        return [Check(f"rules {fw}", True, "bench validate finds no problem")]
    return [Check(f"rules {fw}", False, p, "see docs/bad-input.md") for p in problems]


# ---- the probes -----------------------------------------------------------------------------------


def probe_script(cfgs: dict[str, Any], roots: dict[str, Path], driver: str) -> str:
    """Shell run in one srun step: sections '@@<name>' then the output, '@@rc <n>' after each."""
    c = next(iter(cfgs.values())).cluster
    parts = []

    def section(name: str, body: str) -> None:
        parts.append(f"echo '@@{name}'; ( {body} ) 2>&1; echo \"@@rc $?\"")

    for role, path in roots.items():
        p = shlex.quote(str(path))
        section(
            f"write {role}",
            f'mkdir -p {p} && t=$(mktemp {p}/.bench-inspect.XXXXXX) && rm -f "$t" && df -Pk {p} | tail -n 1',
        )
    if c.container.kind == "pyxis":
        section("runtime", "command -v enroot && enroot version")
    elif c.container.kind == "apptainer":
        section("runtime", "command -v apptainer || command -v singularity")
    elif not driver:
        setup = "".join(f"{line}; " for line in c.setup)
        for fw in cfgs:
            code = f"import importlib.metadata as m; print(m.version({DIST[fw]!r}))"
            section(f"import {fw}", f"{setup}python3 -c {shlex.quote(code)}")
    return "\n".join(parts)


def parse_probe(stdout: str) -> dict[str, tuple[int, str]]:
    """{section: (rc, output)} from probe_script's output."""
    out: dict[str, tuple[int, str]] = {}
    name, lines = None, []
    for line in stdout.splitlines():
        if line.startswith("@@rc ") and name is not None:
            out[name] = (int(line[5:]), "\n".join(lines).strip())
            name, lines = None, []
        elif line.startswith("@@"):
            name, lines = line[2:], []
        elif name is not None:
            lines.append(line)
    return out


def run(argv: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str, str]:
    """(returncode, stdout, stderr); a missing command or a timeout is a failed command, said so."""
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} gave no answer within {timeout:.0f} s"
    return r.returncode, r.stdout, r.stderr


def slurm_args(c: Any) -> list[str]:
    return [*([f"--partition={c.partition}"] if c.partition else []), *([f"--account={c.account}"] if c.account else []),
            *([f"--qos={c.qos}"] if c.qos else [])]  # fmt: skip


def failures(plans: list[Any]) -> list[str]:
    """`bench run mode=native`'s gate: the failing lines of inspect over the planned jobs (each
    framework once, with the most nodes any of its sweep points needs); [] when all pass."""
    cfgs: dict[str, Any] = {}
    nodes: dict[str, int] = {}
    for p in plans:
        cfgs.setdefault(p.framework, p.cfg)
        nodes[p.framework] = max(nodes.get(p.framework, 0), int(p.nodes))
    try:
        checks = inspect_site(cfgs, nodes)
    except ValueError as e:  # a site file without data_root/model_root
        return [str(e)]
    return [ch.line() for ch in checks if ch.ok is False]


def inspect_site(cfgs: dict[str, Any], nodes: dict[str, int]) -> list[Check]:
    """Every check for the frameworks `cfgs` (framework -> composed config) of one experiment on
    one cluster; `nodes` is each framework's job node count (its launch's)."""
    from bench.monitor import slurm_env
    from bench.resolve import Resolved

    first = next(iter(cfgs.values()))
    c, env = first.cluster, slurm_env(first.cluster)
    driver = os.environ.get("BENCH_DRIVER", "")
    need = max(nodes.values())
    _, sinfo, err = run(["sinfo", "-h", "-N", "-o", "%R %N %G %t"], env)
    checks = [check_partition(c, need, sinfo, err)]
    gpus = f"{c.gpu_type}:{c.gpus_per_node}" if c.gpu_type else str(c.gpus_per_node)
    test = ["sbatch", "--test-only", *slurm_args(c), f"--nodes={need}", f"--gpus-per-node={gpus}",
            f"--time={c.time_min}", *(["--exclusive"] if c.exclusive else []), "--wrap", "true"]  # fmt: skip
    rc, _, err = run(test, env)
    checks.append(check_account(c, rc, err))
    roots = {"data_root": data_paths.site_root(first, "data_root"), "model_root": data_paths.site_root(first, "model_root"),
             "results_dir": (data_paths.REPO / str(first.results_dir)).resolve()}  # fmt: skip
    srun = ["srun", *slurm_args(c), "--nodes=1", "--ntasks=1", "--time=5", "--job-name=bench-inspect"]
    rc, out, err = run([*srun, "bash", "-c", probe_script(cfgs, roots, driver)], env, SRUN_TIMEOUT_S)
    probe = parse_probe(out)
    if rc != 0 and not probe:
        checks.append(Check("compute node", False, f"srun failed: {(err.strip().splitlines() or ['no output'])[-1]}",
                            "check the partition and account lines above"))  # fmt: skip
    checks.append(
        check_runtime(c, run(["srun", "--help"], env)[1] if c.container.kind == "pyxis" else "", probe)
    )
    if c.container.kind == "none":
        checks += [check_import(fw, str(cfg.framework.version), driver, probe) for fw, cfg in cfgs.items()]
    else:
        checks.append(
            Check(
                "framework in the image",
                None,
                "the image's framework is first run at job start; not pulled here",
            )
        )
    weights = [check_model(first), *check_teachers(cfgs)]
    model_bytes, why = uncached_bytes(first, weights)
    for role, path in roots.items():
        need_b, role_why = (model_bytes, why) if role == "model_root" else (0, "")
        checks.append(check_storage(role, path, need_b, role_why, probe))
    checks += [check_data(fw, cfg) for fw, cfg in cfgs.items()]
    checks += weights
    for fw, cfg in cfgs.items():
        checks += check_rules(fw, cfg, Resolved.from_config(cfg))
    return checks


def job_nodes_of(cfg: Any) -> int:
    """Nodes of the framework's rendered launch (its own placement), else the resolved layout's."""
    from bench.resolve import job_nodes
    from runners.base import load_runner

    try:
        launch = load_runner(cfg.framework).render_launch(cfg)
    except Exception:  # noqa: BLE001 - the rules check reports why the launch cannot render
        launch = None
    return job_nodes(cfg, launch)


def main(argv: list[str]) -> int:
    """`python -m bench inspect ...`: exit 0 when every check passes, 2 otherwise."""
    from bench.cli import add_overrides, command_parser

    ap = command_parser(
        "inspect",
        "Check a Slurm site before a native job waits in its queue, one line per check (partition, "
        "account/QoS, container runtime, storage, prepared data and models, framework rules); exit 2 if "
        "any fails.",
        "conf/ and the overrides (cluster= names the site), and the site itself through sinfo, sbatch "
        "--test-only and one short srun step.",
        "nothing (sbatch --test-only queues nothing).",
        ["python -m bench inspect experiment=smoke cluster=testbed"],
    )
    add_overrides(ap, "framework= checks one framework instead of the experiment's")
    args = ap.parse_args(argv)
    from bench.config import for_framework
    from bench.errors import UsageError
    from bench.validate import frameworks_of

    cfgs = {fw: for_framework(args.overrides, fw) for fw in frameworks_of(args.overrides)}
    first = next(iter(cfgs.values()))
    if str(getattr(first.cluster.executor, "value", first.cluster.executor)) != "slurm":
        raise UsageError(
            f"cluster={first.cluster.name} has no Slurm (cluster.executor=local); inspect checks a Slurm site"
        )
    try:
        checks = inspect_site(cfgs, {fw: job_nodes_of(cfg) for fw, cfg in cfgs.items()})
    except ValueError as e:  # a site file without data_root/model_root
        raise UsageError(str(e)) from None
    print(f"inspect {first.experiment.name} on cluster {first.cluster.name} ({', '.join(cfgs)}):")
    print("\n".join(ch.line() for ch in checks))
    failed = sum(ch.ok is False for ch in checks)
    print(f"{failed} check(s) failed" if failed else "OK: the site can run this experiment natively")
    return 2 if failed else 0
