"""prime-rl's job shape: the multi-node layout (inference nodes first, then trainer nodes), every
long-running process with its argv by node rank, and job.sbatch (through runners/slurm.py), as
prime-rl's own `rl` launcher and multi_node_rl.sbatch.j2 lay them out at the pinned version.
The translation of the workload into rl.toml is runners/prime_rl.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runners import opd
from runners.base import Process, enum_value
from runners.shell import shell_word
from runners.slurm import render_steps_sbatch

ROUTER_PORT, BACKEND_PORT, RDZV_PORT, DP_RPC_PORT = 8000, 8100, 29500, 13345
TEACHER_PORT = 8001  # first OPD teacher server (prime-rl's docs/training.md); one port per server on a node
UV = ["uv", "run", "--no-sync"]


@dataclass(frozen=True)
class Layout:
    """Node layout of one job: inference nodes [0, infer_nodes), then trainer nodes."""

    gpus_per_node: int
    train_nodes: int
    infer_nodes_per_replica: int
    infer_replicas: int
    tp: int
    dp: int  # inference.parallel.dp: data-parallel ranks of one replica
    ep: bool
    teacher_nodes: int = 0  # dedicated on-policy-distillation teacher nodes, after the trainer nodes
    teacher_tp: int = 0  # GPUs per teacher server (0: no teacher)
    train_gpus: int = 0  # single_node deployment: trainer GPUs, after the inference ones (0: multi-node)
    infer_gpus: int = 0  # single_node deployment: inference GPUs, the node's first

    @property
    def single_node(self) -> bool:
        """prime-rl's single_node deployment: trainer and inference share one node."""
        return self.train_gpus > 0

    @property
    def infer_nodes(self) -> int:
        return self.infer_nodes_per_replica * self.infer_replicas

    @property
    def nodes(self) -> int:
        return self.infer_nodes + self.train_nodes + self.teacher_nodes

    @property
    def dp_local(self) -> int:
        """vLLM servers per inference node (one per DP rank, each on `tp` GPUs)."""
        return self.gpus_per_node // self.tp

    @property
    def ep_group(self) -> bool:
        """Ranks of a replica form one external-LB DP group (MoE EP across the replica)."""
        return self.ep and self.infer_nodes_per_replica * self.dp_local > 1


def layout(cfg: Any) -> Layout:
    """Node layout for a composed config (raises ValueError naming the key if impossible)."""
    ex, g = cfg.experiment, int(cfg.cluster.gpus_per_node)
    tp, ep = int(ex.generator.tp), int(ex.generator.ep) > 1
    if 0 < ex.trainer_gpus and 0 < ex.generator_gpus and ex.trainer_gpus + ex.generator_gpus <= g:
        return single_node_layout(cfg)
    for key, n in (
        ("experiment.trainer_gpus", ex.trainer_gpus),
        ("experiment.generator_gpus", ex.generator_gpus),
    ):
        if n <= 0 or n % g:
            raise ValueError(f"{key}={n}: prime-rl's multi-node layout needs whole nodes of {g} GPUs")
    if g % tp:
        raise ValueError(f"experiment.generator.tp={tp}: must divide cluster.gpus_per_node={g}")
    replica_gpus = tp * max(int(ex.generator.dp), 1)
    if not ep:  # dense: independent engines on every inference node, one router over all of them
        per_replica, replicas = ex.generator_gpus // g, 1
    elif replica_gpus <= g:  # MoE with EP inside one node: one replica per node
        per_replica, replicas = 1, ex.generator_gpus // g
    elif replica_gpus % g or ex.generator_gpus % replica_gpus:
        raise ValueError(
            f"experiment.generator tp x dp = {replica_gpus} GPUs per replica: must be whole nodes of {g} "
            f"and divide experiment.generator_gpus={ex.generator_gpus}"
        )
    else:  # MoE with EP across nodes: the replica's ranks form one DP group
        per_replica, replicas = replica_gpus // g, ex.generator_gpus // replica_gpus
    teacher = opd.teacher(cfg) if opd.is_opd(cfg) else None
    t_nodes = 0
    if teacher is not None and enum_value(teacher.placement) == "dedicated":
        if teacher.gpus <= 0 or teacher.gpus % g or g % teacher.tp:
            raise ValueError(
                f"experiment.teachers[].gpus={teacher.gpus} (tp {teacher.tp}): prime-rl's multi-node layout "
                f"needs whole teacher nodes of {g} GPUs, each a whole number of teacher engines"
            )
        t_nodes = teacher.gpus // g
    t_tp = int(teacher.tp) if teacher is not None else 0
    return Layout(
        g, ex.trainer_gpus // g, per_replica, replicas, tp, per_replica * g // tp, ep, t_nodes, t_tp
    )


def teacher_urls(cfg: Any, lay: Layout) -> list[str]:
    """Base URLs of the teacher's vLLM servers (argv words with ${NODES[i]}), [] without OPD:
    dedicated: every teacher node, one server per `teacher_tp` GPUs; with_generator: one server
    on inference node 0, on the GPUs of its first engine(s)."""
    if not lay.teacher_tp:
        return []
    if lay.teacher_nodes:
        first = lay.infer_nodes + lay.train_nodes
        return [
            f"http://${{NODES[{first + n}]}}:{TEACHER_PORT + k}/v1"
            for n in range(lay.teacher_nodes)
            for k in range(lay.gpus_per_node // lay.teacher_tp)
        ]
    return [f"http://${{NODES[0]}}:{TEACHER_PORT}/v1"]


def teacher_processes(cfg: Any, lay: Layout) -> list[Process]:
    """The teacher's servers, started as prime-rl's docs/training.md starts a frozen model (`uv run
    inference --model.name <teacher> --server.port 8001`: prime-rl 0.8.0's `rl` launcher starts none,
    it only checks the endpoint), with the memory share of the generator's engines. The served
    model name is the weights path, rl.toml's teacher name."""
    t = opd.teacher(cfg) if opd.is_opd(cfg) else None
    if t is None:
        return []
    w = cfg.workload
    path = opd.weights_dir(cfg, t)
    gmu = float(cfg.experiment.generator.gpu_memory_utilization)
    procs = []
    for url in teacher_urls(cfg, lay):
        node = int(url.split("NODES[")[1].split("]")[0])
        k = int(url.rsplit(":", 1)[1].split("/")[0]) - TEACHER_PORT
        gpus = ",".join(str(g) for g in range(k * lay.teacher_tp, (k + 1) * lay.teacher_tp))
        argv = [*UV, "inference", "--model.name", path, "--model.max-model-len", str(int(w.max_prompt_len + w.max_response_len)),
                "--server.host", "0.0.0.0", "--server.port", str(TEACHER_PORT + k), "--parallel.tp", str(lay.teacher_tp),
                "--gpu-memory-utilization", str(gmu)]  # fmt: skip
        procs.append(
            Process(
                "teacher",
                node,
                argv,
                {"CUDA_VISIBLE_DEVICES": gpus},
                ["HF_TOKEN"],
                log=f"teacher-{node}-{k}.log",
            )
        )
    return procs


def job_name(cfg: Any) -> str:
    return f"bench-{cfg.experiment.name}-prime_rl"


UV = ["uv", "run", "--no-sync"]


def single_node_layout(cfg: Any) -> Layout:
    """prime-rl's single_node deployment (configs/rl.py SingleNodeDeploymentConfig: num_train_gpus +
    num_infer_gpus <= gpus_per_node; inference dp = num_infer_gpus / tp), GPUs allocated as its `rl`
    launcher does (entrypoints/rl.py rl_local): inference on the node's first GPUs, trainer next."""
    ex, g = cfg.experiment, int(cfg.cluster.gpus_per_node)
    train, infer, tp = int(ex.trainer_gpus), int(ex.generator_gpus), int(ex.generator.tp)
    if infer % tp:
        raise ValueError(
            f"experiment.generator.tp={tp}: must divide experiment.generator_gpus={infer} (prime-rl's "
            "single-node deployment runs num_infer_gpus / tp inference ranks)"
        )
    teacher = opd.teacher(cfg) if opd.is_opd(cfg) else None
    if teacher is not None and enum_value(teacher.placement) == "dedicated":
        raise ValueError(
            f"experiment.teachers[].placement=dedicated with {train} trainer + {infer} generator GPUs on one "
            "node: the single-node render places no dedicated teacher; use placement=with_generator or whole nodes"
        )
    t_tp = int(teacher.tp) if teacher is not None else 0
    return Layout(g, 1, 0, 0, tp, infer // tp, int(ex.generator.ep) > 1, 0, t_tp, train, infer)


def deployment(lay: Layout) -> dict[str, Any]:
    """rl.toml's [deployment] for the layout, by workload concept (runners/prime_rl.py KEYS)."""
    if lay.single_node:
        return {"deployment": "single_node", "gpus_per_node": lay.gpus_per_node,
                "num_train_gpus": lay.train_gpus, "num_infer_gpus": lay.infer_gpus}  # fmt: skip
    return {"deployment": "multi_node", "gpus_per_node": lay.gpus_per_node, "num_train_nodes": lay.train_nodes,
            "num_infer_nodes": lay.infer_nodes_per_replica, "num_infer_replicas": lay.infer_replicas}  # fmt: skip


def single_node_processes(cfg: Any, lay: Layout, source_secrets: list[str]) -> list[Process]:
    """The processes prime-rl's `rl` launcher starts on one node (entrypoints/rl.py rl_local), each
    on the per-role config `rl --dry-run` wrote: inference on GPUs [0, infer_gpus), one env server,
    the orchestrator (the launcher's localhost addresses are resolved into its config), torchrun on
    the next train_gpus GPUs."""
    infer = ",".join(str(i) for i in range(lay.infer_gpus))
    train = ",".join(str(i) for i in range(lay.infer_gpus, lay.infer_gpus + lay.train_gpus))
    env_secrets = sorted({"HF_TOKEN", *source_secrets})
    name = str(cfg.workload.name)
    trainer = [*UV, "torchrun", "--nnodes=1", f"--nproc-per-node={lay.train_gpus}",
               f"--rdzv-endpoint=localhost:{RDZV_PORT}", "--rdzv-id=job_${SLURM_JOB_ID}", "--local-ranks-filter=0",
               "-m", "prime_rl.trainer.rl.train", "@", "${CONFIG_DIR}/trainer.toml"]  # fmt: skip
    inference = [*UV, "inference", "@", "${CONFIG_DIR}/inference.toml"]
    env_server = [*UV, "env-server", "@", f"${{CONFIG_DIR}}/envs/train/{name}.toml"]
    orchestrator = [*UV, "orchestrator", "@", "${CONFIG_DIR}/orchestrator.toml"]
    return [
        Process("inference", 0, inference, {"CUDA_VISIBLE_DEVICES": infer}, ["HF_TOKEN"], "inference-0.log"),
        Process("env_server", 0, env_server, {}, env_secrets),
        Process("orchestrator", 0, orchestrator, {}, env_secrets),
        Process("trainer", 0, trainer, {"CUDA_VISIBLE_DEVICES": train}, ["HF_TOKEN"]),
        *teacher_processes(cfg, lay),
    ]


def processes(cfg: Any, lay: Layout, source_secrets: list[str]) -> list[Process]:
    """Every long-running process, by node rank; `${...}` words are expanded by job.sbatch.
    source_secrets: secret names the environment (taskset) needs, for env server and orchestrator."""
    if lay.single_node:
        return single_node_processes(cfg, lay, source_secrets)
    procs: list[Process] = []
    secrets = ["HF_TOKEN"]
    engine_urls = [
        f"http://${{NODES[{n}]}}:{BACKEND_PORT + k}"
        for n in range(lay.infer_nodes)
        for k in range(lay.dp_local)
    ]
    for n in range(lay.infer_nodes):
        head, rank_in_replica = n - n % lay.infer_nodes_per_replica, n % lay.infer_nodes_per_replica
        for k in range(lay.dp_local):
            argv = [*UV, "inference", "@", "${CONFIG_DIR}/inference.toml", "--server.host", "0.0.0.0",
                    "--server.port", str(BACKEND_PORT + k), "--data-parallel-size-local", "1", "--api-server-count", "1"]  # fmt: skip
            if lay.ep_group:
                extra = {
                    "data_parallel_rank": rank_in_replica * lay.dp_local + k,
                    "data_parallel_address": f"${{NODES[{head}]}}",
                }
                argv += ["--parallel.dp", str(lay.dp), "--data-parallel-rpc-port", str(DP_RPC_PORT),
                         "--vllm-extra", json.dumps(extra, sort_keys=True)]  # fmt: skip
            else:
                argv += ["--parallel.dp", "1"]  # independent engine per DP rank, balanced by the router
            gpus = ",".join(str(g) for g in range(k * lay.tp, (k + 1) * lay.tp))
            procs.append(
                Process(
                    "inference",
                    n,
                    argv,
                    {"CUDA_VISIBLE_DEVICES": gpus},
                    list(secrets),
                    log=f"inference-{n}-{k}.log",
                )
            )
        if n == 0:
            argv = [*UV, "vllm-router", "--policy", "consistent_hash", "--host", "0.0.0.0", "--port", str(ROUTER_PORT),
                    "--worker-urls", *engine_urls]  # fmt: skip
            procs.append(Process("router", 0, argv))
    procs += teacher_processes(cfg, lay)  # up before the orchestrator asks it (wait_for_ready_timeout)
    env_secrets = sorted({"HF_TOKEN", *source_secrets})
    for t in range(lay.train_nodes):
        argv = [*UV, "torchrun", f"--nnodes={lay.train_nodes}", f"--nproc-per-node={lay.gpus_per_node}",
                f"--node-rank={t}", f"--rdzv-endpoint=${{MASTER_ADDR}}:{RDZV_PORT}", "--rdzv-id=job_${SLURM_JOB_ID}",
                "--local-ranks-filter=0", "-m", "prime_rl.trainer.rl.train", "@", "${CONFIG_DIR}/trainer.toml",
                "--rollout_transport.host", "${MASTER_ADDR}"]  # fmt: skip
        procs.append(Process("trainer", lay.infer_nodes + t, argv, {}, list(secrets)))
    orch_node = lay.infer_nodes  # trainer node 0, as prime-rl's template (ORCH_PROCID)
    name = str(cfg.workload.name)
    procs.append(Process("env_server", orch_node, [*UV, "env-server", "@", f"${{CONFIG_DIR}}/envs/train/{name}.toml"],
                         {}, env_secrets))  # fmt: skip
    argv = [*UV, "orchestrator", "@", "${CONFIG_DIR}/orchestrator.toml",
            "--model.client.base-url", f"http://${{NODES[0]}}:{ROUTER_PORT}/v1",
            "--model.client.admin-base-url", *[f"{u}/v1" for u in engine_urls],
            "--weight_broadcast.host", "${MASTER_ADDR}", "--rollout_transport.host", "${MASTER_ADDR}"]  # fmt: skip
    if teacher_urls(cfg, lay):  # the teacher's servers by node (rl.toml holds its single-node address)
        argv += ["--algo.teacher.base-url", *teacher_urls(cfg, lay)]
    procs.append(Process("orchestrator", orch_node, argv, {}, env_secrets))
    return procs


def render_sbatch(cfg: Any, lay: Layout, procs: list[Process], version: str, commit: str) -> str:
    """job.sbatch (runners/slurm.py): prime-rl's node layout, a dry run of prime-rl's own launcher,
    then one srun step per process; no pkill preamble."""
    dry_run = [*UV, "rl", "@", "${RUN_DIR}/launch/rl.toml", "--output-dir", "${OUTPUT_DIR}", "--dry-run"]
    need_checkout = shell_word(f"job.sbatch: set PRIME_RL_DIR to a prime-rl checkout at {version} ({commit})")
    return render_steps_sbatch(
        cfg.cluster,
        job_name=job_name(cfg),
        nodes=lay.nodes,
        gpus_per_node=lay.gpus_per_node,
        processes=procs,
        main_roles=("trainer", "orchestrator"),
        intro=[
            f"# Generated by the RL post-training benchmark suite (runners/prime_rl.py): prime-rl {version} ({commit}).",
            "# Layout as prime-rl's single-node `rl` launcher: inference on the first GPUs, the trainer on the next."
            if lay.single_node
            else "# Layout as prime-rl's multi_node_rl.sbatch.j2: inference nodes first, then trainer nodes.",
        ],
        usage=[
            "# Submit from the run directory (prime-rl checkout synced with `uv sync --all-extras`, on a shared FS):",
            "#   cd RUN_DIR && mkdir -p logs && PRIME_RL_DIR=/path/to/prime-rl sbatch launch/job.sbatch",
            "# Needs bash >= 5.1 (wait -n -p).",
        ],
        variables=[
            # the message is quoted (framework.version/commit are config values), not a ${VAR:?word}
            f'[[ -n "${{PRIME_RL_DIR:-}}" ]] || {{ echo {need_checkout} >&2; exit 1; }}',
            'OUTPUT_DIR="${RUN_DIR}/logs/prime_rl"  # prime-rl output_dir: metrics.jsonl, configs/, checkpoints',
            'CONFIG_DIR="${OUTPUT_DIR}/configs"',
        ],
        after_nodes=[
            f'MASTER_ADDR="${{NODES[{lay.infer_nodes}]}}"  # trainer node 0: rendezvous, NCCL weight broadcast, ZMQ rollouts'
        ],
        prepare=Process("prepare", lay.infer_nodes, dry_run, log="rl-dry-run.log"),
        prepare_intro=[
            "# 1. prime-rl's own launcher splits rl.toml into per-role configs under CONFIG_DIR and validates",
            "#    them (on trainer node 0, inside the container if any); --dry-run starts and submits nothing.",
        ],
        chdir="${PRIME_RL_DIR}",
        container_image=str(cfg.framework.container or ""),
    )
