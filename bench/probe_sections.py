"""The sections `bench probe` measures, each a function returning its dict of the probe.json schema
(docs/probe.md): the probe's own dense decoder (TinyQwen), GEMM, copies, allocation, filesystem,
decode / prefill / train grids and NCCL. Plain PyTorch; the same code on a GPU and, with tiny shapes,
on the CPU. bench/probe.py runs them in order and writes the file."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.errors import UsageError


class Clock:
    """Synchronised timing: `reps` runs after `warmup`, as {median_s, min_s, reps}."""

    def __init__(self, torch, device: str):
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, fn: Callable[[], Any], reps: int = 10, warmup: int = 2) -> dict[str, Any]:
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return {"median_s": statistics.median(times), "min_s": min(times), "reps": reps}


def model_shape(name: str, cpu: bool) -> dict[str, Any]:
    """A dense conf/model entry's shape in the probe's words (decode.<model>.model); on the CPU the
    same model scaled down (1/16 width, 1/4 heads, 2+ layers) so the probe finishes in seconds."""
    path = Path(__file__).resolve().parents[1] / "conf" / "model" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise UsageError(f"model={name}: no conf/model/{name}.yaml; choose one of {', '.join(known)}")
    m = yaml.safe_load(path.read_text())
    if m.get("routed_experts") or m.get("attention", "gqa") != "gqa":
        raise UsageError(
            f"model={name}: bench probe measures dense GQA models; choose a dense conf/model entry"
        )
    shape = {
        "layers": m["layers"],
        "hidden": m["hidden"],
        "heads": m["q_heads"],
        "kv": m["kv_heads"],
        "hd": m["head_dim"],
        "ffn": m["ffn_dense"],
        "vocab": m["vocab"],
        "tied": bool(m["tied_embeddings"]),
    }
    if cpu:
        shape.update(
            layers=max(2, shape["layers"] // 14),
            hidden=max(32, shape["hidden"] // 16),
            heads=max(2, shape["heads"] // 4),
            kv=max(1, shape["kv"] // 4),
            hd=16,
            ffn=max(64, shape["ffn"] // 16),
            vocab=max(256, shape["vocab"] // 256),
        )
    return shape


def dtype_for(torch, device: str):
    """bf16 on a GPU, as the frameworks run; float32 on the CPU, whose bf16 kernels are too slow for
    a probe that must finish in seconds (probe.json records it)."""
    return torch.bfloat16 if device == "cuda" else torch.float32


class TinyQwen:
    """The probe's dense decoder (Qwen3 layout: RMSNorm, merged QKV, q/k norm, GQA, gate-up MLP),
    random bf16 weights; one module for decode, prefill and training so they measure the same work."""

    def __init__(self, torch, shape: dict[str, Any], device: str, dtype, grad: bool = False):
        self.t, self.s = torch, shape
        h, heads, kv, hd, ffn, vocab = (shape[k] for k in ("hidden", "heads", "kv", "hd", "ffn", "vocab"))

        def w(*size):
            return (torch.randn(*size, device=device, dtype=dtype) * 0.02).requires_grad_(grad)

        self.layers = [
            {
                "qkv": w(h, (heads + 2 * kv) * hd),
                "o": w(heads * hd, h),
                "gu": w(h, 2 * ffn),
                "down": w(ffn, h),
            }
            for _ in range(shape["layers"])
        ]
        self.embed = w(vocab, h)
        self.head = self.embed if shape["tied"] else w(vocab, h)

    def params(self) -> list:
        out = [p for layer in self.layers for p in layer.values()] + [self.embed]
        return out if self.s["tied"] else [*out, self.head]

    def weight_bytes(self) -> int:
        """bf16 bytes of every layer matrix and the LM head (no embedding), as the probe files count."""
        n = sum(p.numel() for layer in self.layers for p in layer.values()) + self.head.numel()
        return 2 * n

    def _norm(self, x):
        return self.t.nn.functional.rms_norm(x, (x.shape[-1],))

    def _attend(self, layer, x, cache_k=None, cache_v=None, pos=None):
        """x: [B, S, h]. With a cache: write this token's K/V at `pos` and attend over the cache."""
        F, s = self.t.nn.functional, self.s
        B, S, _ = x.shape
        qkv = self._norm(x) @ layer["qkv"]
        q, k, v = qkv.split([s["heads"] * s["hd"], s["kv"] * s["hd"], s["kv"] * s["hd"]], dim=-1)
        q = self._norm(q.view(B, S, s["heads"], s["hd"])).transpose(1, 2)
        k = self._norm(k.view(B, S, s["kv"], s["hd"])).transpose(1, 2)
        v = v.view(B, S, s["kv"], s["hd"]).transpose(1, 2)
        if cache_k is not None:
            cache_k[:, :, pos : pos + 1] = k
            cache_v[:, :, pos : pos + 1] = v
            # the KV group as query rows: [B, kv, heads/kv, hd] over [B, kv, ctx, hd]
            g = s["heads"] // s["kv"]
            out = F.scaled_dot_product_attention(q.reshape(B, s["kv"], g, s["hd"]), cache_k, cache_v)
            out = out.reshape(B, 1, s["heads"] * s["hd"])
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            out = out.transpose(1, 2).reshape(B, S, s["heads"] * s["hd"])
        x = x + out @ layer["o"]
        gate, up = (self._norm(x) @ layer["gu"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ layer["down"]

    def forward(self, x, caches=None, pos=None):
        for i, layer in enumerate(self.layers):
            ck, cv = caches[i] if caches else (None, None)
            x = self._attend(layer, x, ck, cv, pos)
        return self._norm(x)


# ---------------------------------------------------------------------------------------------------
# Sections: each returns its dict; a failure becomes {"error", "trace"} (the schema's rule).


def section_env(torch, device: str) -> dict[str, Any]:
    env = {"python": sys.version, "platform": platform.platform()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            name=props.name,
            sms=props.multi_processor_count,
            mem_bytes=props.total_memory,
            gpus=torch.cuda.device_count(),
        )
        if shutil.which("nvidia-smi"):
            env["nvidia_smi"] = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,"
                    "clocks.max.memory,pcie.link.gen.max,pcie.link.width.max",
                    "--format=csv",
                ],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
    else:
        env.update(name="cpu", cpus=os.cpu_count(), threads=torch.get_num_threads())
    return env


def section_matmul(
    torch, clock: Clock, device: str, shapes: list[dict[str, Any]], cpu: bool
) -> dict[str, Any]:
    """bf16 A[m,k] @ B[k,n] at the models' trainer shapes (tokens x hidden x QKV / gate-up / down) and
    one large square for the device's ceiling."""
    tokens = 256 if cpu else 8192
    dims = {(tokens, tokens, tokens)} if not cpu else {(256, 256, 256)}
    for s in shapes:
        dims |= {
            (tokens, s["hidden"], (s["heads"] + 2 * s["kv"]) * s["hd"]),
            (tokens, s["hidden"], 2 * s["ffn"]),
            (tokens, s["ffn"], s["hidden"]),
        }
    rows = []
    for m, k, n in sorted(dims):
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        t = clock.time(lambda a=a, b=b: a @ b, reps=10, warmup=3)
        rows.append({"m": m, "k": k, "n": n, **t, "tflops": 2 * m * k * n / t["median_s"] / 1e12})
    return {"rows": rows}


def section_hbm(torch, clock: Clock, device: str, cpu: bool) -> dict[str, Any]:
    n = (64 << 20) if cpu else (4 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t = clock.time(lambda: dst.copy_(src), reps=10)
    return {"bytes": n, **t, "copy_tbps_rw": 2 * n / t["median_s"] / 1e12}


def section_host(torch, clock: Clock, device: str) -> dict[str, Any]:
    if device != "cuda":
        return {"skipped": "no GPU: host <-> device copies need one"}
    n = 4 << 30
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out: dict[str, Any] = {"bytes": n}
    for kind, pinned in (("pinned", True), ("pageable", False)):
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
        for name, fn in (
            (f"h2d_{kind}", lambda h=host: dev.copy_(h)),
            (f"d2h_{kind}", lambda h=host: h.copy_(dev)),
        ):
            t = clock.time(fn, reps=4, warmup=1)
            out[name] = {**t, "gbps": n / t["median_s"] / 1e9}
    return out


def section_alloc(torch, device: str) -> dict[str, Any]:
    """Taking and releasing 80% of the free memory: an engine's sleep / wake without moving weights."""
    if device != "cuda":
        return {"skipped": "no GPU: allocation of device memory needs one"}
    free, _ = torch.cuda.mem_get_info()
    n = int(free * 0.8)
    rows = []
    for _ in range(3):
        t0 = time.perf_counter()
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        del x
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        rows.append({"take_s": t1 - t0, "release_s": time.perf_counter() - t1})
    return {"bytes": n, "rows": rows}


def section_filesystem(torch, device: str, fs_path: Path, cpu: bool, quick: bool) -> dict[str, Any]:
    """A checkpoint-sized write + fsync and a cold read (page cache dropped with posix_fadvise) on
    fs_path: the filesystem weight-sync path's bandwidth when fs_path is the site's shared storage."""
    n = (8 << 20) if cpu else ((1 << 30) if quick else (8 << 30))
    src = torch.empty(n, dtype=torch.uint8, device=device)
    rows = []
    fs_path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=fs_path, prefix=".bench-probe-") as tmp:
        path = Path(tmp) / "weights.bin"
        for _ in range(2):
            t0 = time.perf_counter()
            host = src.cpu().numpy()
            t1 = time.perf_counter()
            with open(path, "wb") as f:
                host.tofile(f)
                f.flush()
                os.fsync(f.fileno())
            t2 = time.perf_counter()
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
            t3 = time.perf_counter()
            data = torch.from_file(str(path), size=n, dtype=torch.uint8).to(device)
            if device == "cuda":
                torch.cuda.synchronize()
            t4 = time.perf_counter()
            del data
            rows.append(
                {
                    "d2h_s": t1 - t0,
                    "d2h_write_fsync_s": t2 - t0,
                    "read_h2d_s": t4 - t3,
                    "write_gbps": n / (t2 - t0) / 1e9,
                    "read_gbps": n / (t4 - t3) / 1e9,
                }
            )
    df = subprocess.run(["df", "-h", str(fs_path)], capture_output=True, text=True, check=False).stdout
    return {"bytes": n, "path": str(fs_path), "rows": rows, "df": df}


def section_decode(torch, clock: Clock, device: str, shapes: dict[str, dict], grid) -> dict[str, Any]:
    """One decode iteration per (batch, context): a CUDA graph replay on a GPU (as engines decode),
    the eager iteration on the CPU; batch 1 is also timed eager on a GPU."""
    out: dict[str, Any] = {}
    for name, shape in shapes.items():
        model = TinyQwen(torch, shape, device, dtype_for(torch, device))
        kv_per_token = shape["layers"] * 2 * shape["kv"] * shape["hd"] * 2
        entry = {
            "model": shape,
            "weight_bytes": model.weight_bytes(),
            "kv_bytes_per_token": kv_per_token,
            "rows": [],
        }
        for batch, context in grid:
            row: dict[str, Any] = {
                "batch": batch,
                "context": context,
                "weight_bytes": model.weight_bytes(),
                "kv_bytes": batch * context * kv_per_token,
            }
            try:
                caches = [
                    tuple(
                        torch.zeros(
                            batch,
                            shape["kv"],
                            context + 1,
                            shape["hd"],
                            device=device,
                            dtype=model.embed.dtype,
                        )
                        for _ in range(2)
                    )
                    for _ in range(shape["layers"])
                ]
                x = torch.randn(batch, 1, shape["hidden"], device=device, dtype=model.embed.dtype)

                def step(x=x, caches=caches, context=context, model=model):
                    y = model.forward(x, caches, context)
                    return (y[:, -1] @ model.head.T).argmax(-1)

                with torch.no_grad():
                    if device == "cuda":
                        row["eager"] = clock.time(step, reps=10, warmup=2) if batch == 1 else None
                        stream = torch.cuda.Stream()
                        stream.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(stream):
                            step()
                        torch.cuda.current_stream().wait_stream(stream)
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            step()
                        row["graph"] = clock.time(graph.replay, reps=20, warmup=3)
                    else:
                        row["eager"] = clock.time(step, reps=5, warmup=1)
                timed = row.get("graph") or row["eager"]
                row["gbps_graph" if "graph" in row else "gbps_eager"] = (
                    (row["weight_bytes"] + row["kv_bytes"]) / timed["median_s"] / 1e9
                )
                if row.get("eager") is None:
                    row.pop("eager", None)
            except torch.OutOfMemoryError as e:
                row["error"] = f"OOM {e}"[:300]
            finally:
                caches = None
                if device == "cuda":
                    torch.cuda.empty_cache()
            entry["rows"].append(row)
        out[name] = entry
    return out


def section_tokens(
    torch, clock: Clock, device: str, shapes: dict[str, dict], grid, train: bool
) -> dict[str, Any]:
    """Prefill (forward, last position's logits) or a training step (forward + backward with the causal
    LM loss over every position in fp32, then AdamW; fused on a GPU) per (batch, seq)."""
    out: dict[str, Any] = {}
    for name, shape in shapes.items():
        model = TinyQwen(torch, shape, device, dtype_for(torch, device), grad=train)
        params = sum(p.numel() for p in model.params())
        entry: dict[str, Any] = {"params": params, "rows": []}
        opt = torch.optim.AdamW(model.params(), lr=1e-5, fused=device == "cuda") if train else None
        for batch, seq in grid:
            row: dict[str, Any] = {"batch": batch, "seq": seq}
            ids = torch.randint(0, shape["vocab"], (batch, seq), device=device)
            try:
                if train:
                    row["optimizer"] = True

                    def step(ids=ids, model=model, opt=opt):
                        h = model.forward(model.embed[ids])
                        logits = (h @ model.head.T).float()
                        loss = torch.nn.functional.cross_entropy(
                            logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
                        )
                        loss.backward()
                        opt.step()
                        opt.zero_grad(set_to_none=True)

                    row.update(clock.time(step, reps=3, warmup=1))
                    if device == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                        step()
                        row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
                else:
                    with torch.no_grad():
                        row.update(
                            clock.time(
                                lambda ids=ids, model=model: (
                                    model.forward(model.embed[ids])[:, -1:] @ model.head.T
                                ),
                                reps=3,
                                warmup=1,
                            )
                        )
            except torch.OutOfMemoryError as e:
                row["error"] = f"OOM {e}"[:300]
                if device == "cuda":
                    torch.cuda.empty_cache()
            entry["rows"].append(row)
        if train:
            entry["rows"].append({"optimizer_step_only": True, **clock.time(opt.step, reps=5, warmup=1)})
        out[name] = entry
    return out


def section_nccl(torch, device: str) -> dict[str, Any]:
    """All-reduce and broadcast bus bandwidth across this node's GPUs (the in-node weight-sync link)."""
    n = torch.cuda.device_count() if device == "cuda" else 0
    if n < 2:
        return {"skipped": f"{n} GPU(s): NCCL needs two or more"}
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "nccl.json"
        mp.spawn(_nccl_worker, args=(n, str(result)), nprocs=n, join=True)
        return json.loads(result.read_text())


def _nccl_worker(rank: int, world: int, result: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    clock = Clock(torch, "cuda")
    nbytes = 1 << 30
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    ar = clock.time(lambda: dist.all_reduce(x), reps=10)
    bc = clock.time(lambda: dist.broadcast(x, 0), reps=10)
    if rank == 0:
        # bus bandwidth as nccl-tests defines it: all-reduce moves 2(n-1)/n of the buffer per GPU
        Path(result).write_text(
            json.dumps(
                {
                    "gpus": world,
                    "bytes": nbytes,
                    "all_reduce": {
                        **ar,
                        "busbw_gbps": nbytes * 2 * (world - 1) / world / ar["median_s"] / 1e9,
                    },
                    "broadcast": {**bc, "busbw_gbps": nbytes / bc["median_s"] / 1e9},
                }
            )
        )
    dist.destroy_process_group()
