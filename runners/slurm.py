"""Render a complete, hand-usable Slurm batch script for a multi-node (optionally Ray) job.

Shared by every runner whose framework runs on Ray (verl, slime) and usable for plain multi-process
jobs (ray=False). The script is deterministic (no timestamps), every value taken from a config is
quoted by runners/shell.py (only the suite's own `${RUN_DIR}`-style references expand; a #SBATCH
value with a line break is refused; `cluster.setup` lines are the one verbatim exception), and it
passes `bash -n` and `shellcheck`.

API
---
`render_sbatch(cluster, *, job_name, nodes, gpus_per_node, driver_argv, env=None, secret_env=(),
ray=True, ray_port=6379, node_roles=None, processes=(), container_image="", time_min=None,
ray_ready_timeout_s=900) -> str`

- `cluster`: a ClusterConf node (partition, account, qos, constraint, time_min, exclusive,
  cpus_per_task, gpu_type, container.{kind,image,mounts}, setup lines).
- `driver_argv`: the framework's entry point (e.g. `python3 -m verl.trainer.main_ppo ...`), run once
  on node 0 after the Ray cluster is complete; its output goes to `logs/driver.log`.
- `env`: exported before anything starts, so Ray's raylets (and so every Ray actor) inherit it.
  `secret_env`: names only; the script checks they are set in the submitting shell, never their value.
- `processes`: extra non-Ray processes (`runners.base.Process`), started in the background on their
  node rank before the driver (e.g. an inference server).
- Placeholders: `{run_dir}` in any argv item or env value becomes `${RUN_DIR}` in the script
  (quoted by runners/shell.shell_word, which lets only the suite's own references expand).
  RUN_DIR is `$BENCH_RUN_DIR` if set, else the submit directory: submit with
  `cd RUN_DIR && mkdir -p logs && sbatch launch/job.sbatch` (Slurm's `--output=logs/...` is relative
  to it and Slurm does not create the folder).

Run-time knobs (environment of `sbatch`, all optional):

- `RAY_NODE_IP_TEMPLATE`: per-node `--node-ip-address`, `{rank}` replaced by the node rank
  (e.g. `127.0.0.1{rank}` gives 127.0.0.10, 127.0.0.11, ...: the local testbed, where every
  "node" shares one host and needs its own loopback address).
- `RAY_NETWORK_INTERFACE`: take each node's IPv4 address from this interface (e.g. ib0), as verl's
  own Slurm example does; otherwise the head's `hostname --ip-address` and Ray's own detection.
- `BENCH_DRIVER`: replace the driver by this executable; it receives the real driver argv as its
  arguments (the testbed records it instead of training). The Ray bootstrap runs unchanged.
- `RAY_READY_TIMEOUT_S` / `RAY_READY_POLL_S`: how long to wait for every node to show up in
  `ray status`, and how often to look (seconds).

`ray_processes(nodes, gpus_per_node, ray_port)` returns the Ray head/worker processes as
`runners.base.Process` rows for command.json (node IPs appear as `${NODE_IP}` / `${HEAD_IP}`,
filled in at run time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runners.base import Process
from runners.shell import comment, env_name, header_value, one_line, shell_join, shell_word

CONTAINER_KINDS = ("none", "pyxis", "apptainer")


def ray_processes(nodes: int, gpus_per_node: int, ray_port: int = 6379) -> list[Process]:
    """Ray head (node 0) and workers (nodes 1..N-1) as started by job.sbatch."""
    head = Process(
        role="ray_head",
        node_rank=0,
        argv=[
            "ray", "start", "--head", "--node-ip-address=${HEAD_IP}", f"--port={ray_port}",
            f"--num-gpus={gpus_per_node}", "--disable-usage-stats", "--block",
        ],
    )  # fmt: skip
    workers = [
        Process(
            role="ray_worker",
            node_rank=r,
            argv=[
                "ray",
                "start",
                f"--address=${{HEAD_IP}}:{ray_port}",
                "--node-ip-address=${NODE_IP}",
                f"--num-gpus={gpus_per_node}",
                "--disable-usage-stats",
                "--block",
            ],
        )  # fmt: skip
        for r in range(1, nodes)
    ]
    return [head, *workers]


def _get(node: Any, key: str, default: Any = None) -> Any:
    if isinstance(node, Mapping):
        return node.get(key, default)
    return getattr(node, key, default)


def sbatch_header(
    cluster: Any, job_name: str, nodes: int, gpus_per_node: int, time_min: int | None
) -> list[str]:
    lines = [
        "#!/bin/bash",
        "# shellcheck disable=SC1090,SC1091  # cluster.setup lines may source site files",
        f"#SBATCH --job-name={header_value('experiment.name', job_name)}",
        f"#SBATCH --nodes={int(nodes)}",
        "#SBATCH --ntasks-per-node=1",
    ]
    gpu_type = str(_get(cluster, "gpu_type", "") or "")
    # gpu_type "none": a GPU-less cluster (the local testbed) where a GRES request cannot be met.
    if gpus_per_node > 0 and gpu_type != "none":
        gres = f"{gpu_type}:{gpus_per_node}" if gpu_type else str(gpus_per_node)
        lines.append(f"#SBATCH --gpus-per-node={header_value('cluster.gpu_type', gres)}")
    if int(_get(cluster, "cpus_per_task", 0) or 0) > 0:
        lines.append(f"#SBATCH --cpus-per-task={int(_get(cluster, 'cpus_per_task'))}")
    for key in ("partition", "account", "qos", "constraint"):
        value = _get(cluster, key, "")
        if value:
            lines.append(f"#SBATCH --{key}={header_value(f'cluster.{key}', value)}")
    minutes = int(time_min if time_min is not None else _get(cluster, "time_min", 240))
    lines.append(f"#SBATCH --time={minutes}")
    if _get(cluster, "exclusive", False):
        lines.append("#SBATCH --exclusive")
    lines += ["#SBATCH --output=logs/slurm-%j.out", "#SBATCH --error=logs/slurm-%j.out"]
    return lines


def container_prefix(cluster: Any, image: str) -> tuple[list[str], list[str]]:
    """(srun options, command prefix) that run a step inside the site's container."""
    container = _get(cluster, "container", {}) or {}
    kind = str(_get(container, "kind", "none") or "none")
    if kind not in CONTAINER_KINDS:
        raise ValueError(f"cluster.container.kind={kind!r}; expected one of {CONTAINER_KINDS}")
    image = str(_get(container, "image", "") or "") or image
    mounts = [str(m) for m in (_get(container, "mounts", []) or [])]
    if kind == "none":
        return [], []
    if not image:
        raise ValueError(
            f"cluster.container.kind={kind!r} needs an image (cluster.container.image or the framework's container)"
        )
    if kind == "pyxis":
        opts = [f"--container-image={image}", "--container-workdir=${RUN_DIR}"]
        # The run directory must be visible inside the container: logs and launch files live there.
        opts.append("--container-mounts=" + ",".join([*mounts, "${RUN_DIR}:${RUN_DIR}"]))
        return opts, []
    prefix = ["apptainer", "exec", "--nv", "--bind", ",".join([*mounts, "${RUN_DIR}"]), image]
    return [], prefix


def render_sbatch(
    cluster: Any,
    *,
    job_name: str,
    nodes: int,
    gpus_per_node: int,
    driver_argv: Sequence[Any],
    env: Mapping[str, Any] | None = None,
    secret_env: Iterable[str] = (),
    ray: bool = True,
    ray_port: int = 6379,
    node_roles: Mapping[int, str] | None = None,
    processes: Sequence[Process] = (),
    container_image: str = "",
    time_min: int | None = None,
    ray_ready_timeout_s: int = 900,
) -> str:
    """The complete job.sbatch text (see the module docstring for every parameter and knob)."""
    if nodes < 1:
        raise ValueError(f"nodes={nodes}; expected >= 1")
    if not driver_argv:
        raise ValueError("driver_argv is empty; expected the framework's entry point argv")
    roles = dict(node_roles or {})
    srun_opts, prefix = container_prefix(cluster, container_image)
    out = sbatch_header(cluster, job_name, nodes, gpus_per_node, time_min)
    out += ["", "# Generated by the RL post-training benchmark suite (runners/slurm.py). Node roles:"]
    for rank in range(nodes):
        default = (
            ("ray head + driver" if rank == 0 else "ray worker") if ray else ("driver" if rank == 0 else "")
        )
        out.append(comment(f"  node {rank}: {roles.get(rank, default)}"))
    out += ["# Submit from the run directory: cd RUN_DIR && mkdir -p logs && sbatch launch/job.sbatch"]
    out += _preamble(cluster, nodes, [], ['HEAD_NODE="${NODES[0]}"'], secret_env)
    if env:
        out.append("# Exported before Ray starts, so every raylet and Ray actor inherits it:")
        for key in sorted(env):
            out.append(f"export {env_name(key)}={shell_word(env[key])}")
        out.append("")
    step = ["srun", "--overlap", "--nodes=1", "--ntasks=1", *srun_opts]
    out += [
        '# "${ON_NODE[@]}" HOST "${IN_CONTAINER[@]}" CMD...: run CMD on one node of the allocation.',
        "# Arrays, not a function, so a backgrounded step is srun itself and `kill` reaches it.",
        f"ON_NODE=({shell_join(step)} -w)",
        f"IN_CONTAINER=({shell_join(prefix)})",
        "",
        "cleanup() {",
        "  # Background steps (Ray daemons, servers) end with the job; stop them early on exit too.",
        "  jobs -p | xargs -r kill 2>/dev/null || true",
        "}",
        "trap cleanup EXIT",
        "",
    ]
    if ray:
        out += _ray_bootstrap(nodes, gpus_per_node, ray_port, ray_ready_timeout_s)
    for p in processes:
        out += [
            comment(f"{p.role} on node {p.node_rank}"),
            f'"${{ON_NODE[@]}}" "${{NODES[{p.node_rank}]}}" "${{IN_CONTAINER[@]}}" {shell_join(p.argv)} \\',
            f"  > {shell_word(_log_path(p))} 2>&1 &",
        ]
    if processes:
        out.append("")
    out += [
        "# Driver on node 0. BENCH_DRIVER (optional) replaces it and receives the real argv.",
        f"DRIVER=({shell_join(driver_argv)})",
        'if [[ -n "${BENCH_DRIVER:-}" ]]; then',
        '  DRIVER=("${BENCH_DRIVER}" "${DRIVER[@]}")',
        "fi",
        '"${ON_NODE[@]}" "${HEAD_NODE}" "${IN_CONTAINER[@]}" "${DRIVER[@]}" 2>&1 | tee "${RUN_DIR}/logs/driver.log"',
        "",
    ]
    return "\n".join(out)


def _preamble(
    cluster: Any, nodes: int, variables: Sequence[str], after_nodes: Sequence[str], secret_env: Iterable[str]
) -> list[str]:
    """From `set -euo pipefail` to the secrets check: RUN_DIR, the node list (checked against
    `nodes`), the site's setup lines, and a warning per unset secret (names only)."""
    out = [
        "set -euo pipefail",
        "",
        'RUN_DIR="${BENCH_RUN_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}"',
        *variables,
        'mkdir -p "${RUN_DIR}/logs"',
        'mapfile -t NODES < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")',
        f"if (( ${{#NODES[@]}} < {int(nodes)} )); then",
        f'  echo "job.sbatch: got ${{#NODES[@]}} node(s), expected {int(nodes)}" >&2',
        "  exit 1",
        "fi",
        *after_nodes,
        "",
    ]
    # The one deliberate exception to quoting (docs/security.md): the site's own shell lines.
    setup = [str(s) for s in (_get(cluster, "setup", []) or [])]
    if setup:
        out += ["# Site setup (cluster.setup), verbatim:", *setup, ""]
    secrets = sorted(set(secret_env))
    if secrets:
        out.append("# Secrets are read from the submitting environment (names only, never written here):")
        for name in map(env_name, secrets):
            out.append(f'[[ -n "${{{name}:-}}" ]] || echo "job.sbatch: warning: {name} is not set" >&2')
        out.append("")
    return out


def _comment_line(line: str) -> str:
    """A caller's comment line (`intro`, `usage`, ...) kept one comment line."""
    return one_line(line) if line.startswith("#") else comment(line)


def _log_path(p: Process) -> str:
    return f"${{RUN_DIR}}/logs/{p.log or f'{p.role}-{p.node_rank}.log'}"


# render_steps_sbatch: every step's pid -> its role (MAIN marks the ones the job waits for), and
# the script's own steps stopped on exit (servers never exit by themselves).
TRACK_STEPS = [
    "declare -A ROLE_OF=() MAIN=()",
    "# shellcheck disable=SC2317  # reached through the EXIT trap",
    "cleanup() {",
    "  # Servers never exit by themselves: stop this script's own steps (and only those) on exit.",
    "  jobs -p | xargs -r kill 2>/dev/null || true",
    "}",
    "trap cleanup EXIT",
]
# Wait until every main step has exited 0; any failure, or a server exiting first, ends the job.
WAIT_FOR_MAIN = [
    "",
    "rc=0",
    "while (( ${#MAIN[@]} > 0 )); do",
    '  ended="" status=0',
    "  wait -n -p ended || status=$?",
    '  [[ -n "${ended}" ]] || break',
    '  if [[ -n "${MAIN[${ended}]:-}" ]]; then',
    '    unset "MAIN[${ended}]"',
    "    (( status == 0 )) && continue",
    "  fi",
    "  # a main process failed, or a server exited while the run was going",
    '  echo "job.sbatch: ${ROLE_OF[${ended}]} exited (status ${status}) before the run finished" >&2',
    "  rc=$(( status == 0 ? 1 : status ))",
    "  break",
    "done",
    'exit "${rc}"',
    "",
]


def render_steps_sbatch(
    cluster: Any,
    *,
    job_name: str,
    nodes: int,
    gpus_per_node: int,
    processes: Sequence[Process],
    main_roles: Sequence[str],
    intro: Sequence[str] = (),
    usage: Sequence[str] = (),
    variables: Sequence[str] = (),
    after_nodes: Sequence[str] = (),
    prepare: Process | None = None,
    prepare_intro: Sequence[str] = (),
    chdir: str = "",
    container_image: str = "",
) -> str:
    """job.sbatch for a job without Ray: one srun step per process on its node rank.

    The job ends when every process of `main_roles` has exited 0, or as soon as any process
    fails or a server (any other role) exits; the script's own steps are stopped on exit. Each
    process logs to logs/<Process.log> (default <role>-<node_rank>.log) with its env inline.
    `intro` / `usage`: comment lines before / after the node-role list; `variables` / `after_nodes`:
    shell lines before / after the node list is read; `prepare`: one step run to completion first
    (e.g. the framework's own config check), introduced by `prepare_intro`; `chdir`: every step's
    working directory. Needs bash >= 5.1 (wait -n -p).
    """
    if nodes < 1:
        raise ValueError(f"nodes={nodes}; expected >= 1")
    srun_opts, prefix = container_prefix(cluster, container_image)
    out = sbatch_header(cluster, job_name, nodes, gpus_per_node, None)
    out += ["", *map(_comment_line, intro)]
    order = list(dict.fromkeys(p.role for p in processes))  # roles in order of first appearance
    for n in range(nodes):
        roles = sorted({p.role for p in processes if p.node_rank == n}, key=order.index)
        out.append(comment(f"  node {n}: {' + '.join(roles)}"))
    out += map(_comment_line, usage)
    out += _preamble(cluster, nodes, variables, after_nodes, (s for p in processes for s in p.secret_env))
    step = [
        "srun",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        *([f"--chdir={chdir}"] if chdir else []),
        *srun_opts,
    ]
    where = f", in {chdir}" if chdir else ""
    out += [
        f'# "${{ON_NODE[@]}}" HOST CMD...: run CMD as an srun step on one node{where}.',
        f"ON_NODE=({shell_join(step)} -w)",
        "",
    ]

    def command(p: Process) -> str:
        env = [f"{env_name(k)}={v}" for k, v in sorted(p.env.items())]
        return shell_join([*prefix, *(["env", *env] if env else []), *p.argv])

    if prepare is not None:
        out += [
            *map(_comment_line, prepare_intro),
            f'"${{ON_NODE[@]}}" "${{NODES[{prepare.node_rank}]}}" {command(prepare)} \\',
        ]
        out += [f"  > {shell_word(_log_path(prepare))} 2>&1", ""]
    numbered = "2. " if prepare is not None else ""
    out += [
        f"# {numbered}One srun step per process on its node; the job ends when {' and '.join(main_roles)} finish,",
        "#    or as soon as any process fails or a server exits.",
        *TRACK_STEPS,
    ]
    for p in processes:
        out += [f'"${{ON_NODE[@]}}" "${{NODES[{p.node_rank}]}}" {command(p)} \\',
                f"  > {shell_word(_log_path(p))} 2>&1 &", f'ROLE_OF[$!]="{p.role} on node {p.node_rank}"']  # fmt: skip
        if p.role in main_roles:
            out.append("MAIN[$!]=1")
    out += WAIT_FOR_MAIN
    return "\n".join(out)


def _ray_bootstrap(nodes: int, gpus_per_node: int, port: int, timeout_s: int) -> list[str]:
    """Head on node 0, workers join, then wait until `ray status` lists every node as active."""
    timeout = f"${{RAY_READY_TIMEOUT_S:-{int(timeout_s)}}}"
    return [
        "# ---- Ray bootstrap: head on node 0, workers join, wait for every node ----",
        "node_ip() {  # node_ip RANK HOST -> the address Ray advertises for that node",
        '  local rank="$1" host="$2"',
        '  if [[ -n "${RAY_NODE_IP_TEMPLATE:-}" ]]; then',
        '    printf "%s\\n" "${RAY_NODE_IP_TEMPLATE//\\{rank\\}/${rank}}"',
        '  elif [[ -n "${RAY_NETWORK_INTERFACE:-}" ]]; then',
        '    "${ON_NODE[@]}" "${host}" "${IN_CONTAINER[@]}" ip -4 -o addr show dev "${RAY_NETWORK_INTERFACE}" \\',
        "      | awk '{print $4}' | cut -d/ -f1 | head -n1",
        "  else",
        "    # First address only: hostname --ip-address may also list IPv6 addresses.",
        '    "${ON_NODE[@]}" "${host}" "${IN_CONTAINER[@]}" hostname --ip-address | awk \'{print $1}\'',
        "  fi",
        "}",
        "wait_for_ray_nodes() {  # wait_for_ray_nodes N: until `ray status` lists N active nodes",
        '  local want="$1" active=0',
        f"  local deadline=$(( SECONDS + {timeout} ))",
        "  while true; do",
        "    # Count the node lines between 'Active:' and 'Pending:'.",
        '    active=$("${ON_NODE[@]}" "${HEAD_NODE}" "${IN_CONTAINER[@]}" ray status --address="${RAY_ADDRESS}" 2>/dev/null \\',
        "      | sed -n '/^Active:/,/^Pending:/p' | grep -c 'node_' || true)",
        "    (( active >= want )) && return 0",
        "    if (( SECONDS > deadline )); then",
        f'      echo "job.sbatch: only ${{active}} of ${{want}} Ray node(s) active after {timeout} s" >&2',
        "      exit 1",
        "    fi",
        '    sleep "${RAY_READY_POLL_S:-5}"',
        "  done",
        "}",
        'HEAD_IP="$(node_ip 0 "${HEAD_NODE}")"',
        f'export RAY_ADDRESS="${{HEAD_IP}}:{port}"',
        'echo "job.sbatch: ray head ${HEAD_NODE} at ${RAY_ADDRESS}"',
        f'"${{ON_NODE[@]}}" "${{HEAD_NODE}}" "${{IN_CONTAINER[@]}}" ray start --head --node-ip-address="${{HEAD_IP}}" --port={port} \\',
        f"  --num-gpus={gpus_per_node} --disable-usage-stats --block \\",
        '  > "${RUN_DIR}/logs/ray-head.log" 2>&1 &',
        "wait_for_ray_nodes 1",
        f"for (( rank = 1; rank < {nodes}; rank++ )); do",
        '  host="${NODES[${rank}]}"',
        "  NODE_IP_ARGS=()",
        '  if [[ -n "${RAY_NODE_IP_TEMPLATE:-}" || -n "${RAY_NETWORK_INTERFACE:-}" ]]; then',
        '    NODE_IP_ARGS=(--node-ip-address="$(node_ip "${rank}" "${host}")")',
        "  fi",
        '  "${ON_NODE[@]}" "${host}" "${IN_CONTAINER[@]}" ray start --address="${RAY_ADDRESS}" "${NODE_IP_ARGS[@]}" \\',
        f"    --num-gpus={gpus_per_node} --disable-usage-stats --block \\",
        '    > "${RUN_DIR}/logs/ray-worker-${rank}.log" 2>&1 &',
        "done",
        f"wait_for_ray_nodes {nodes}",
        f'echo "job.sbatch: all {nodes} Ray node(s) active"',
        "",
    ]
