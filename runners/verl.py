"""verl runner: a framework-neutral workload -> verl 0.9.1's Hydra overrides, Ray-on-Slurm launch,
and verl's own logs -> trace rows (runners/verl_logs.py).

Translation facts come from the verl 0.9.1 wheel (the config YAML ships in it; the tests compose
every rendered override set against it) and ../shared/reference/verl.md. docs/frameworks.md shows
what each workload key sets, read off the renders (runners/docs.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from runners import data_paths, opd
from runners.base import NOT_INSTALLED, Build, Launch, ParseResult, Process, Runner, enum_value
from runners.batch_rules import mini_batch_dp_problem
from runners.slurm import ray_processes, render_sbatch
from runners.verl_opd import distillation_overrides, opd_problems

# Accepted log formats per verl version: what runners/verl_logs.py reads (detected by content).
PARSER_FORMATS: list[dict[str, str]] = [
    {"versions": ">=0.4", "source": "file logger JSONL", "format": '{"step": N, "data": {key: value}}',
     "notes": "orjson; NaN written as null. Preferred over console lines."},
    {"versions": ">=0.4.1 (PR #2303)", "source": "console", "format": "step:N - key:value - ...",
     "notes": "full-precision pformat values; np.float64(x)/np.int64(x) wrappers with numpy >= 2."},
    {"versions": "<0.4.1", "source": "console", "format": "step:N - key:%.3f - ...",
     "notes": "3-decimal values; memory keys perf/max_memory_* (later actor/perf/*)."},
    {"versions": "all", "source": "console prefixes", "format": "[ANSI](TaskRunnerV1|TaskRunner|"
     "OneStepTaskRunner|FullyAsyncTrainer pid=N[, ip=A])[ANSI] step:...", "notes": "Ray actor prefix stripped."},
    {"versions": ">=0.6 fully_async", "source": "both", "format": "timing_s/timing_s/param_sync",
     "notes": "double prefix normalised to timing_s/param_sync; several records per step are merged."},
]  # fmt: skip

V1_MODES = ("sync", "colocate_async", "separate_async")
COLOCATED_MODES = ("sync", "colocate_async")
DISAGGREGATED_MODES = ("separate_async", "one_step_off", "fully_async")
# mode -> (python module, Hydra config name); the Megatron variant of an experimental config adds _megatron_.
ENTRY = {
    "sync": ("verl.trainer.main_ppo", "ppo_trainer"),
    "colocate_async": ("verl.trainer.main_ppo", "ppo_trainer"),
    "separate_async": ("verl.trainer.main_ppo", "ppo_trainer"),
    "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo", "one_step_off_ppo_trainer"),
    "fully_async": ("verl.experimental.fully_async_policy.fully_async_main", "fully_async_ppo_trainer"),
}
# The experimental configs find ppo_trainer through hydra.searchpath: one_step_off's is a cwd-relative
# file:// path that only works from a verl source checkout, so the pip-installed package is named instead.
SEARCHPATH_OVERRIDE = "hydra.searchpath=[pkg://verl.trainer.config]"


def _pool(gpus: int, gpus_per_node: int, what: str) -> tuple[int, int]:
    """(nnodes, n_gpus_per_node) of one GPU pool: a partial node or whole nodes."""
    if gpus <= gpus_per_node:
        return 1, gpus
    if gpus % gpus_per_node:
        raise ValueError(f"{what}={gpus} is not a multiple of cluster.gpus_per_node={gpus_per_node}")
    return gpus // gpus_per_node, gpus_per_node


def layout(cfg: Any, mode: str) -> dict[str, int]:
    """GPU split: trainer, rollout and teacher pools (nnodes, GPUs per node) and the job's nodes."""
    gpn = int(cfg.cluster.gpus_per_node)
    exp = cfg.experiment
    t_nodes, t_gpn = _pool(int(exp.trainer_gpus), gpn, "experiment.trainer_gpus")
    out = {"trainer_nnodes": t_nodes, "trainer_gpus_per_node": t_gpn, "gpus_per_node": gpn}
    # on-policy distillation: verl's teacher_pool, its own GPUs (distillation.nnodes x n_gpus_per_node)
    teacher = opd.teacher(cfg) if opd.is_opd(cfg) else None
    teacher_gpus = int(teacher.gpus) if teacher is not None else 0
    d_nodes, d_gpn = _pool(teacher_gpus, gpn, "experiment.teachers[].gpus") if teacher_gpus else (0, 0)
    if teacher_gpus:
        out.update(teacher_nnodes=d_nodes, teacher_gpus_per_node=d_gpn)
    if mode in COLOCATED_MODES:
        r_nodes = r_gpn = r_gpus = 0
    else:
        r_gpus = int(exp.generator_gpus)
        r_nodes, r_gpn = _pool(r_gpus, gpn, "experiment.generator_gpus")
    # Every pool on one node when they fit (verl's one_step_off 2+6 example, the opd-benchmark's
    # 1 + 1 teacher); otherwise node-disjoint.
    fits = int(exp.trainer_gpus) + r_gpus + teacher_gpus <= gpn
    out.update(
        rollout_nnodes=r_nodes, rollout_gpus_per_node=r_gpn, nodes=1 if fits else t_nodes + r_nodes + d_nodes
    )
    return out


def _b(value: bool) -> str:
    return "True" if value else "False"


def _native(cfg: Any) -> dict[str, Any]:
    return dict(cfg.framework.get("native") or {})


def translate(cfg: Any, mode: str) -> tuple[list[str], list[str]]:
    """verl Hydra overrides for `cfg` in `mode`, and the translation notes for this workload.

    Paths carry the `{run_dir}` placeholder (filled in by job.sbatch at run time).
    """
    wl, exp, notes = cfg.workload, cfg.experiment, []
    lay = layout(cfg, mode)
    native = _native(cfg)
    megatron = str(exp.trainer.sharding) == "megatron"
    prompts, mbs = int(wl.prompts_per_step), int(wl.mini_batches_per_step)
    mini = prompts // mbs
    seq = int(wl.max_prompt_len) + int(wl.max_response_len)
    tok = int(exp.trainer.micro_batch_tokens)
    if tok < seq:
        notes.append(
            f"ppo_max_token_len_per_gpu raised from micro_batch_tokens={tok} to {seq} (one sequence must fit)"
        )
        tok = seq
    train_file, val_file = data_paths.verl_files(cfg)  # written by `bench prepare`
    o: list[str] = []
    if megatron and ENTRY[mode][0] == "verl.trainer.main_ppo":
        o.append("model_engine=megatron")
    algo = enum_value(wl.algorithm)
    o += [
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={_b(wl.std_normalize)}",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        f"data.train_batch_size={0 if mode == 'fully_async' else prompts}",
        f"data.max_prompt_length={int(wl.max_prompt_len)}",
        f"data.max_response_length={int(wl.max_response_len)}",
        "data.filter_overlong_prompts=True",
        f"data.seed={int(exp.seed)}",
        f"actor_rollout_ref.model.path={data_paths.model_dir(cfg)}",
        "actor_rollout_ref.model.use_remove_padding=True",
        f"actor_rollout_ref.actor.optim.lr={float(wl.lr)}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tok}",
        # with opd, kl_coef is the teacher's reverse KL (distillation.*), not a reference-model KL loss
        f"actor_rollout_ref.actor.use_kl_loss={_b(float(wl.kl_coef) > 0 and algo != 'opd')}",
    ]
    if float(wl.kl_coef) > 0 and algo != "opd":
        o.append(f"actor_rollout_ref.actor.kl_loss_coef={float(wl.kl_coef)}")
    o += distillation_overrides(cfg, lay)
    if algo == "gspo":
        o += [
            "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        ]
    elif algo == "dapo":
        o.append("actor_rollout_ref.actor.clip_ratio_high=0.28")
    o += _trainer_overrides(exp.trainer, megatron, notes)
    o += _rollout_overrides(cfg, notes)
    o += _mode_overrides(cfg, mode, lay, mini, notes)
    o += [
        f"trainer.nnodes={lay['trainer_nnodes']}",
        f"trainer.n_gpus_per_node={lay['trainer_gpus_per_node']}",
        f"trainer.total_training_steps={int(wl.steps)}",
        "trainer.logger=[console,file,wandb]",
        f"trainer.project_name=bench-{exp.name}",
        f"trainer.experiment_name={exp.name}-verl-{mode}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.default_local_dir={run_dir}/checkpoints",
        # Hydra's own output (.hydra/config.yaml, the resolved config) into logs/: the parser reads
        # rollout.n and the trainer mode from it.
        "hydra.run.dir={run_dir}/logs/hydra",
    ]
    if str(wl.task) != "math":
        notes.append(
            f"task {wl.task!r} needs a site agent loop / reward (framework.native.overrides, e.g. "
            "actor_rollout_ref.rollout.agent.agent_loop_config_path); the suite renders the single-turn default"
        )
    o += [str(x) for x in native.get("overrides", [])]
    return o, notes


def _trainer_overrides(tr: Any, megatron: bool, notes: list[str]) -> list[str]:
    """The actor's sharding: Megatron parallel sizes (actor and reference model) or FSDP2."""
    o: list[str] = []
    if megatron:
        for role in ("actor", "ref"):
            o += [
                f"actor_rollout_ref.{role}.megatron.tensor_model_parallel_size={int(tr.tp)}",
                f"actor_rollout_ref.{role}.megatron.pipeline_model_parallel_size={int(tr.pp)}",
                f"actor_rollout_ref.{role}.megatron.context_parallel_size={int(tr.cp)}",
                f"actor_rollout_ref.{role}.megatron.expert_model_parallel_size={int(tr.ep)}",
            ]
        o += [
            f"actor_rollout_ref.actor.megatron.param_offload={_b(tr.offload_params)}",
            f"actor_rollout_ref.actor.megatron.optimizer_offload={_b(tr.offload_optimizer)}",
        ]
    else:
        o += [
            "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
            f"actor_rollout_ref.actor.fsdp_config.param_offload={_b(tr.offload_params)}",
            f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={_b(tr.offload_optimizer)}",
        ]
        if tr.tp > 1 or tr.pp > 1 or tr.ep > 1:
            notes.append("experiment.trainer tp/pp/ep are ignored with FSDP sharding")
    return o


def _rollout_overrides(cfg: Any, notes: list[str]) -> list[str]:
    """The vLLM engines: sampling, engine parallelism and memory, FP8, tail cutting, group filter."""
    wl, exp, gen = cfg.workload, cfg.experiment, cfg.experiment.generator
    o = [
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={int(wl.group_size)}",
        f"actor_rollout_ref.rollout.temperature={float(wl.temperature)}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={int(gen.tp)}",
        f"actor_rollout_ref.rollout.expert_parallel_size={int(gen.ep)}",
        f"actor_rollout_ref.rollout.data_parallel_size={int(gen.dp)}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={float(gen.gpu_memory_utilization)}",
        f"actor_rollout_ref.rollout.max_num_seqs={int(gen.max_concurrency)}",
    ]
    if float(gen.dtype_bytes) == 1.0:
        o.append("actor_rollout_ref.rollout.quantization=fp8")
    if float(exp.oversampling) > 1.0:
        o.append(f"actor_rollout_ref.rollout.over_sample_rate={round(1 - 1 / float(exp.oversampling), 6)}")
        notes.append("oversampling maps to verl's tail cutting (over_sample_rate), not to extra prompts")
    if exp.filter_zero_advantage:
        o += ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=reward"]
    return o


def _mode_overrides(cfg: Any, mode: str, lay: dict[str, int], mini: int, notes: list[str]) -> list[str]:
    wl = cfg.workload
    stale, mbs = int(wl.staleness_budget), int(wl.mini_batches_per_step)
    rollout_pool = [f"nnodes={lay['rollout_nnodes']}", f"n_gpus_per_node={lay['rollout_gpus_per_node']}"]
    if mode in V1_MODES:
        o = ["trainer.use_v1=True", f"trainer.v1.trainer_mode={mode}"]
        if mode == "separate_async":
            o += [
                "actor_rollout_ref.hybrid_engine=False",
                "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
            ]
            o += [f"actor_rollout_ref.rollout.{kv}" for kv in rollout_pool]
            o.append(f"trainer.v1.separate_async.parameter_sync_step={mbs}")
        if mode != "sync":
            if stale == 0:
                notes.append(
                    "staleness_budget=0 on an async mode: threshold 0 with strategy wait (on-policy, no drops)"
                )
            o.append(f"trainer.v1.sampler.max_off_policy_threshold={stale}")
            o.append(f"trainer.v1.sampler.max_off_policy_strategy={'wait' if stale == 0 else 'drop'}")
        return o
    o = [SEARCHPATH_OVERRIDE, "actor_rollout_ref.hybrid_engine=False"]
    o += [f"rollout.{kv}" for kv in rollout_pool]
    if mode == "one_step_off":
        if stale != 1:
            notes.append(
                f"one_step_off is structurally 1 version stale; staleness_budget={stale} is not a knob here"
            )
        return o
    o += [
        f"rollout.total_rollout_steps={int(wl.steps) * int(wl.prompts_per_step)}",
        "data.gen_batch_size=1",
        f"async_training.staleness_threshold={stale}",
        f"async_training.trigger_parameter_sync_step={mbs}",
        "async_training.require_batches=1",
        f"async_training.partial_rollout={_b(cfg.experiment.partial_rollout)}",
    ]
    return o


class VerlRunner(Runner):
    """verl at the version pinned in conf/framework/verl.yaml (translation table above)."""

    name = "verl"

    def auto_mode(self, cfg: Any) -> str:
        """colocated -> sync (colocate_async with partial rollout); disaggregated -> separate_async
        (staleness in versions, the workload's unit, through the maintained V1 entry point;
        fully_async stays available as an explicit mode)."""
        if enum_value(cfg.experiment.placement) == "colocated":
            return "colocate_async" if cfg.experiment.partial_rollout else "sync"
        return "separate_async"

    def validate(self, cfg: Any) -> list[str]:
        """verl-specific problems: mode vs placement, batch divisibility, GPU pools vs node size."""
        problems = self.mode_problems(cfg)
        if problems:
            return problems
        mode = self.resolve_mode(cfg)
        if mode not in ENTRY:
            return [
                f"framework.mode={mode!r}: verl {cfg.framework.version} has entry points for {sorted(ENTRY)}"
            ]
        placement = enum_value(cfg.experiment.placement)
        want = "colocated" if mode in COLOCATED_MODES else "disaggregated"
        if placement != want:
            problems.append(f"framework.mode={mode!r} needs experiment.placement={want}, got {placement}")
        wl = cfg.workload
        if int(wl.prompts_per_step) % int(wl.mini_batches_per_step):
            problems.append(
                f"workload.prompts_per_step={wl.prompts_per_step} is not divisible by mini_batches_per_step="
                f"{wl.mini_batches_per_step} (verl's ppo_mini_batch_size counts whole prompts)"
            )
        if cfg.experiment.partial_rollout and mode not in ("colocate_async", "fully_async"):
            problems.append(f"experiment.partial_rollout=true: verl mode {mode!r} has no partial rollout")
        try:
            layout(cfg, mode)
        except ValueError as e:
            problems.append(str(e))
        # verl splits every mini-batch evenly over the data-parallel ranks: its workers normalise
        # ppo_mini_batch_size x rollout.n by floor division over the DP size (verl/workers/
        # fsdp_workers.py and megatron_workers.py, "ppo_mini_batch_size //= ..."; a remainder
        # silently changes the number of optimizer steps), and DataProto.chunk asserts equal
        # chunks (verl/protocol.py); utils/config.py asserts real_train_batch_size % minimal_bsz.
        if (line := mini_batch_dp_problem(cfg)) is not None:
            problems.append(line)
        samples = int(wl.prompts_per_step) * int(wl.group_size)
        if str(cfg.experiment.trainer.sharding) == "fsdp" and samples % int(cfg.experiment.trainer_gpus):
            problems.append(
                f"prompts_per_step x group_size = {samples} samples is not divisible by experiment.trainer_gpus="
                f"{cfg.experiment.trainer_gpus} (verl's FSDP data split)"
            )
        return problems + opd_problems(cfg, mode)

    def build(self, cfg: Any, mode: str) -> Build:
        """Overrides, Ray head/workers + driver argv, and job.sbatch for cfg (see translate)."""
        overrides, notes = translate(cfg, mode)
        lay = layout(cfg, mode)
        module, config_name = ENTRY[mode]
        driver = ["python3", "-m", module]
        if str(cfg.experiment.trainer.sharding) == "megatron" and module != "verl.trainer.main_ppo":
            driver.append(f"--config-name={config_name.replace('_ppo_', '_ppo_megatron_')}")
        driver += overrides
        env = {
            "PYTHONUNBUFFERED": "1",
            "VERL_FILE_LOGGER_PATH": "{run_dir}/logs/verl_metrics.jsonl",
            "WANDB_MODE": "offline",
            "WANDB_DIR": "{run_dir}/logs",
            "RAY_DEDUP_LOGS": "0",  # keep every actor's lines: the console parser is a fallback
        }
        secrets = ["HF_TOKEN"]
        gpn = lay["gpus_per_node"]
        ray = ray_processes(lay["nodes"], gpn)
        for p in ray:  # job.sbatch exports env before `ray start`: every raylet (and actor) inherits it
            p.env, p.secret_env = dict(env), list(secrets)
        procs = [*ray, Process("driver", 0, driver, env=env, secret_env=secrets)]
        roles = {0: "ray head + verl driver"}
        if mode in DISAGGREGATED_MODES and lay["nodes"] > 1:
            for r in range(lay["nodes"]):
                pool = "trainer" if r < lay["trainer_nnodes"] else "rollout"
                roles[r] = (
                    (roles.get(r, "ray worker") + f" ({pool} pool)")
                    if r
                    else f"ray head + verl driver ({pool} pool)"
                )
        notes = [
            f"mode {mode}: {module}",
            "{run_dir} in argv/env is the run directory (job.sbatch: RUN_DIR)",
            *notes,
        ]
        sbatch = render_sbatch(
            cfg.cluster,
            job_name=f"{cfg.experiment.name}-verl",
            nodes=lay["nodes"],
            gpus_per_node=gpn,
            driver_argv=driver,
            env=env,
            secret_env=secrets,
            node_roles=roles,
            container_image=str(cfg.framework.container or ""),
        )
        return Build(
            nodes=lay["nodes"],
            gpus_per_node=gpn,
            processes=procs,
            files={"overrides.txt": "\n".join(overrides) + "\n"},
            sbatch=sbatch,
            notes=notes,
        )

    def validate_native(self, cfg: Any, launch: Launch) -> list[str]:
        """Compose the rendered driver argv with the verl installed here (a real cluster's env)."""
        try:
            import verl  # noqa: F401  (only its location is used; importing it pulls in torch)
        except ImportError:
            return [f"verl {NOT_INSTALLED}"]
        driver = next(p for p in launch.processes if p.role == "driver")
        try:
            compose_driver(driver.argv, Path(verl.__file__).parent)
        except Exception as e:  # Hydra's composition errors name the offending key
            return [f"{type(e).__name__}: {e}"]
        return []

    def schema_problems(self, launch: Launch, schema_root: Path | None = None) -> list[str]:
        """The driver argv composed strictly with verl's own Hydra YAML (the `verl/` folder of the
        pinned wheel, `schema_root`, else the installed verl), then every override read back from
        the composed config: an unknown key or a value verl would read differently is a problem."""
        if schema_root is None:
            try:
                import verl  # noqa: F401  (only its location is used)
            except ImportError:
                return [f"verl's config YAML (schema_root or an installed verl) {NOT_INSTALLED}"]
            schema_root = Path(verl.__file__).parent
        driver = next(p for p in launch.processes if p.role == "driver")
        try:
            composed = compose_driver(driver.argv, schema_root)
        except Exception as e:  # Hydra's composition errors name the offending key
            return [f"{type(e).__name__}: {e}"]
        problems = []
        for line in launch.files["overrides.txt"].splitlines():
            key, _, text = line.partition("=")
            if key.startswith("hydra."):
                continue  # Hydra's own settings, not part of verl's config
            want, got = (
                _override_value(text.replace("{run_dir}", "/tmp/run")),
                OmegaConf.select(composed, key),
            )
            got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
            if got != want:
                problems.append(f"{key}: rendered {text!r}, verl composed {got!r}")
        return problems

    def native_settings(self, launch: Launch) -> dict[str, str]:
        """overrides.txt as `key -> value` (each line is one Hydra override `key=value`)."""
        lines = launch.files["overrides.txt"].splitlines()
        return dict(line.split("=", 1) if "=" in line else (line, "") for line in lines)

    def parse(self, log_dir: Path, **options: Any) -> ParseResult:
        """verl's file-logger JSONL first, console step lines as fallback (runners/verl_logs.py)."""
        from runners.verl_logs import parse_dir

        return parse_dir(log_dir)


def _override_value(text: str) -> Any:
    """A Hydra override value as verl's config holds it (YAML scalars and lists; 1e-06 is a float)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def hydra_overrides_for_compose(overrides: list[str], config_dir: Path | str, run_dir: str) -> list[str]:
    """Overrides as `hydra.compose` takes them offline: {run_dir} filled in, and pkg:// searchpaths
    (which import verl and so torch) pointed at an unpacked wheel's config directory."""
    out = []
    for o in overrides:
        if o == SEARCHPATH_OVERRIDE:
            o = f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"
        out.append(o.replace("{run_dir}", run_dir))
    return out


def compose_driver(driver_argv: list[str], verl_root: Path | str, run_dir: str = "/tmp/run") -> Any:
    """Compose a rendered driver argv against verl's own Hydra YAML under `verl_root` (the `verl/`
    package folder of an unpacked wheel or an installed verl), strictly: an unknown key raises
    Hydra's ConfigCompositionException. No torch is imported. Returns the resolved DictConfig."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    root = Path(verl_root).resolve()
    module, args = driver_argv[2], list(driver_argv[3:])
    mode = next(m for m, (mod, _) in ENTRY.items() if mod == module)
    config_name = ENTRY[mode][1]
    if args and args[0].startswith("--config-name="):
        config_name = args.pop(0).split("=", 1)[1]
    package = module.rsplit(".", 1)[0].replace(".", "/")  # verl/trainer or verl/experimental/<x>
    config_dir = root.parent / package / "config"
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            cfg = compose(
                config_name, overrides=hydra_overrides_for_compose(args, root / "trainer" / "config", run_dir)
            )
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.resolve(cfg)
    return cfg
