"""The project's CUDA paths, executed once on a GPU: what docs/scale.md reports under "On a GPU".

    python bench/cuda_check.py [--out DIR] [--model NAME|PATH] [--steps 6] [--threads 4]
                               [--gguf-parts A,B --gguf-sha256 HEX] [--fallback-dir DIR] [--tiny]
                               [--only nvml,demo,train]

Checks, each printed as one PASS / FAIL / SKIP line and gathered in `<out>/cuda_check.json`:

1. `nvml` — the Workers page's machine usage (`workers.node.measure_usage`, `detect_gpus`) while a
   bf16 matrix-product loop keeps the GPU busy in a background thread: every GPU has a utilisation
   above 0 and memory figures, read through NVML (`pynvml`), not the nvidia-smi fallback.
   workers/node.py is loaded from its file: importing the `workers` package starts Celery and Django.
1b. `demo` — the demo run's knobs (`seed_demo.DEMO_RUN`: LoRA on every linear layer, recomputed
   activations, a bf16 sampling copy) for a few steps on this device: SUCCEEDED, only the adapters
   trained, and the memory fields a run's heartbeat carries (`trainers.sdk.resources.peaks`: peak RSS,
   and peak GPU memory on CUDA), which the run and Workers pages show.
2. `train` — `trainers.recipes.grpo.Trainer` (what `python -m trainers train` runs) on
   trainers/examples/arithmetic_grpo.yaml with `device: auto`, a few steps, eval, checkpoints: the
   policy's weights are fp32 on every device and its passes run under bf16 autocast on CUDA
   (`trainers.models.policy_precision`), the run SUCCEEDED, step times and rewards.
3. `checkpoint` — the mid-run checkpoint holds the CUDA RNG state; `python -m trainers train --resume`
   from it (a separate process) takes the next step.
4. `update` — one update with fixed advantages (+1, -0.5, …) on a sampled group (the trainer's `update`: the
   shared-prompt forward, backward, clip, fused AdamW, the weight push to the sampler), so the backward
   pass runs even when every group's rewards tie; the fraction of weight values the update changed.
4b. `precision` — one AdamW step at lr 2e-5 from fresh weights and optimizer, on the same rows, for
   `dtype: auto` (fp32 weights, bf16 autocast on CUDA) and `dtype: bfloat16` (bf16 weights): the
   fraction of weight values each changed (fp32 ≈ 100 %; bf16 rounds most away) and each update's time.
5. `shard` — `trainers.learn.sharded.LearnerShard` in a child process on the same rows: FSDP2 over an NCCL
   process group of world size 1 (one GPU: NCCL refuses two ranks on one device), learn twice, gather
   the full weights, save and load its torch.distributed.checkpoint. Ray is not needed for one shard and
   is stubbed (`ray.get_gpu_ids() == []`, so the shard takes cuda:0 as its fallback does).

Without CUDA every check still runs on the CPU (autocast is then not expected, the shard uses gloo), so the
script can be tried on a laptop first; `--tiny` (the default without CUDA) shrinks the run for that.
The model: `--model` (default the bundled GGUF), or a GGUF reassembled from `--gguf-parts` (checked
against `--gguf-sha256`), or, if a part is missing, a randomly initialised model built from
`--fallback-dir` (config + tokenizer), said so.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402

RESULTS: dict[str, Any] = {"checks": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def say(text: str) -> None:
    print(text, flush=True)


def record(name: str, status: str, detail: str, **data: Any) -> None:
    RESULTS["checks"][name] = {"status": status, "detail": detail, **data}
    say(f"{status}: {name}: {detail}")


def run_check(name: str, fn: Any, *args: Any) -> Any:
    started = time.perf_counter()
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 — a check that breaks is a FAIL line, never the end of the script
        record(name, "FAIL", f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        say(traceback.format_exc())
        return None
    finally:
        say(f"  ({name}: {time.perf_counter() - started:.1f} s)")


def third_party_modules() -> list[str]:
    std = set(sys.stdlib_module_names)
    return sorted({m.split(".")[0] for m in sys.modules} - std - {"trainers", "workers", "__main__", "bench"})


# ----------------------------------------------------------------------------- 0. the machine


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError as exc:
        info["transformers"] = f"missing: {exc}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as exc:  # noqa: BLE001
            info["nccl"] = f"unknown: {exc}"
    say("environment: " + json.dumps(info))
    return info


# ----------------------------------------------------------------------------- 1. NVML usage


def load_node_module() -> Any:
    """workers/node.py as a module of its own: `import workers.node` would run workers/__init__.py,
    which starts the Celery app and Django (not installed on a bare GPU box, and not what is checked)."""
    spec = importlib.util.spec_from_file_location("workers_node", ROOT / "workers" / "node.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_nvml(seconds: float) -> None:
    import torch

    node = load_node_module()
    detected = node.detect_gpus()
    idle = node.measure_usage()
    via_nvml = node._nvml_usage() is not None
    say(f"  detect_gpus: {detected}")
    say(f"  measure_usage (idle): {idle}")
    if not torch.cuda.is_available():
        status = "SKIP" if not detected and not idle["gpus"] else "FAIL"
        record(
            "nvml",
            status,
            f"no CUDA device here; detect_gpus={detected}, gpus={idle['gpus']} (no GPU is reported: right)",
            detect_gpus=detected,
            idle=idle,
            via_nvml=via_nvml,
        )
        return
    stop = threading.Event()
    done = {"products": 0, "seconds": 0.0}
    n = 8192

    def busy() -> None:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        started = time.perf_counter()
        while not stop.is_set():
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            done["products"] += 10
        done["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    time.sleep(1.5)
    samples = []
    for _ in range(4):
        samples.append(node.measure_usage())
        time.sleep(0.7)
    stop.set()
    thread.join(timeout=30)
    for s in samples:
        say(f"  measure_usage (busy): {s}")
    tflops = 2 * n**3 * done["products"] / max(done["seconds"], 1e-9) / 1e12
    gpus = [g for s in samples for g in s["gpus"]]
    best_util = max((g["utilization_percent"] for g in gpus), default=0.0)
    used = max((g["memory_used_mb"] for g in gpus), default=0)
    total = max((g["memory_total_mb"] for g in gpus), default=0)
    ok = bool(detected) and best_util > 0 and used > 0 and total > 0 and via_nvml
    record(
        "nvml",
        "PASS" if ok else "FAIL",
        f"detect_gpus: {[(g['name'], g['memory_mb']) for g in detected]}; busy: utilisation up to "
        f"{best_util:.0f} %, memory used {used} of {total} MiB; read through "
        f"{'NVML (pynvml)' if via_nvml else 'the nvidia-smi fallback'}; idle before: "
        f"{[(g['utilization_percent'], g['memory_used_mb']) for g in idle['gpus']]}; "
        f"the load: {done['products']} bf16 {n}³ products at {tflops:.0f} TFLOP/s",
        detect_gpus=detected,
        idle=idle,
        busy=samples,
        via_nvml=via_nvml,
        busy_tflops=round(tflops, 1),
    )


# ----------------------------------------------------------------------------- the model


def prepare_model(args: argparse.Namespace, work: Path) -> str:
    """The model name/path the run uses: `--model`, or the GGUF rebuilt from its parts, or a random init."""
    if args.gguf_parts:
        parts = [Path(p) for p in args.gguf_parts.split(",")]
        missing = [str(p) for p in parts if not p.is_file()]
        if not missing:
            target = work / "SmolLM2-135M-Instruct.Q4_1.gguf"
            digest = hashlib.sha256()
            with target.open("wb") as out:
                for part in parts:
                    data = part.read_bytes()
                    digest.update(data)
                    out.write(data)
            if args.gguf_sha256 and digest.hexdigest() != args.gguf_sha256:
                say(f"  the reassembled GGUF's sha256 {digest.hexdigest()} is not {args.gguf_sha256}")
            else:
                RESULTS["model"] = {"source": "bundled SmolLM2-135M-Instruct Q4_1 GGUF (reassembled)"}
                say(f"model: {target} ({target.stat().st_size} bytes, sha256 ok)")
                return str(target)
        else:
            say(f"  GGUF parts missing: {missing}")
        if args.fallback_dir:
            return random_model(Path(args.fallback_dir), work)
        raise FileNotFoundError(f"GGUF parts missing or damaged and no --fallback-dir: {missing}")
    RESULTS["model"] = {"source": args.model}
    return args.model


def random_model(config_dir: Path, work: Path) -> str:
    """SmolLM2-135M's architecture and tokenizer with random weights (nothing can be downloaded there)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    target = work / "smollm2-135m-random"
    model.save_pretrained(target, safe_serialization=True)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(target)
    RESULTS["model"] = {
        "source": "FALLBACK: SmolLM2-135M's config and tokenizer with RANDOM weights (the GGUF did not arrive)"
    }
    say(
        "model: FALLBACK to a randomly initialised SmolLM2-135M (rewards are meaningless; the code path is "
        "what is checked)"
    )
    return str(target)


def check_conversion(model: str) -> None:
    from trainers.models import model_dir, resolve_model_source

    source = resolve_model_source(model)
    started = time.perf_counter()
    path = model_dir(model)
    seconds = time.perf_counter() - started
    record(
        "convert",
        "PASS",
        f"{source.kind} model ready in {seconds:.1f} s (GGUF dequantized and cached once) at {path}"
        if source.kind == "gguf"
        else f"{source.kind} model at {path}",
        seconds=round(seconds, 2),
    )


# ----------------------------------------------------------------------------- 2-4. the trainer


def write_config(args: argparse.Namespace, model: str, work: Path) -> Path:
    import yaml

    raw = yaml.safe_load((ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml").read_text())
    raw.update(
        model=model,
        device="auto",
        dtype="auto",
        torch_threads=args.threads,
        max_steps=args.steps,
        checkpoint_every=args.steps // 2,
        eval_every=0,
        eval_tasks=args.eval_tasks,
        keep_best_n=2,
    )
    if args.tiny:
        raw.update(group_size=2, prompts_per_step=1, max_new_tokens=8, max_turns=1)
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    say(
        f"run config: {path} ({', '.join(f'{k}={raw[k]}' for k in ('model', 'max_steps', 'group_size', 'prompts_per_step', 'max_new_tokens', 'eval_tasks', 'checkpoint_every', 'generation_dtype'))})"
    )
    return path


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_train(config_path: Path, work: Path) -> Any:
    import torch

    from trainers.cli import ProgressSink, load_config
    from trainers.models import policy_precision
    from trainers.recipes.grpo import Trainer
    from trainers.sdk.events import JsonlSink, MultiSink

    config = load_config(config_path)
    out = work / "run"
    out.mkdir(parents=True, exist_ok=True)
    sink = MultiSink(JsonlSink(out / "events.jsonl"), ProgressSink(config["max_steps"], tty=False))
    trainer = Trainer(config, sink=sink, out_dir=out)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = trainer.run()
    wall = time.perf_counter() - started
    sink.close()
    param = next(trainer.model.parameters())
    sampler = getattr(trainer.rollouts.backend, "model", None)
    sampler_dtype = str(next(sampler.parameters()).dtype) if sampler is not None else None
    expected = policy_precision("auto", trainer.learner.device)
    evs = events(out / "events.jsonl")
    train = [e for e in evs if e["type"] == "metrics" and e.get("split") == "train"]
    evals = [e for e in evs if e["type"] == "metrics" and e.get("split") == "eval"]
    keys = (
        "reward/mean",
        "reward/std",
        "accuracy",
        "loss",
        "grad_norm",
        "entropy",
        "trained_sequences",
        "step_time",
        "time/generate",
        "time/forward",
        "time/backward",
        "time/optimizer",
        "time/weight_sync",
        "tokens_per_s",
        "response_length",
    )
    steps = [{"step": e["step"], **{k: e["values"].get(k) for k in keys}} for e in train]
    for s in steps:
        say(
            "  step " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items())
        )
    eval_rows = [
        {
            "step": e["step"],
            **{k: e["values"].get(k) for k in ("eval/reward/mean", "eval/accuracy", "eval/time")},
        }
        for e in evals
    ]
    for e in eval_rows:
        say(f"  eval {e}")
    peak = round(torch.cuda.max_memory_allocated() / 2**20) if torch.cuda.is_available() else None
    step_times = [s["step_time"] for s in steps if s["step_time"] is not None]
    ok = (
        result.status == "SUCCEEDED"
        and result.step == config["max_steps"]
        and param.dtype == expected.weights == torch.float32
        and trainer.learner.precision.autocast_dtype == expected.autocast_dtype
        and (expected.autocast_dtype == torch.bfloat16) == trainer.learner.device.startswith("cuda")
        and param.device.type == ("cuda" if trainer.learner.device.startswith("cuda") else "cpu")
    )
    record(
        "train",
        "PASS" if ok else "FAIL",
        f"{result.status} at step {result.step} in {wall:.1f} s on {trainer.learner.device}; policy {param.dtype} on "
        f"{param.device}, passes under {trainer.learner.precision.autocast_dtype} autocast "
        f"(policy_precision('auto', '{trainer.learner.device}') = {expected}); sampler {sampler_dtype}; "
        f"step times {', '.join(f'{t:.2f}' for t in step_times)} s; peak CUDA memory allocated {peak} MiB",
        status_=result.status,
        device=trainer.learner.device,
        policy_dtype=str(param.dtype),
        autocast_dtype=str(trainer.learner.precision.autocast_dtype),
        sampler_dtype=sampler_dtype,
        wall_s=round(wall, 2),
        steps=steps,
        evals=eval_rows,
        peak_cuda_mib=peak,
        checkpoint=result.checkpoint,
    )
    return trainer, config, out


def demo_overrides() -> dict[str, Any]:
    """The demo run's training knobs (`seed_demo.DEMO_RUN`), read from that file without importing
    Django, so the check follows whatever the demo trains with."""
    import ast

    source = (ROOT / "webapp" / "core" / "management" / "commands" / "seed_demo.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DEMO_RUN" for t in node.targets):
            return dict(ast.literal_eval(node.value)["overrides"])
    raise LookupError("DEMO_RUN not found in seed_demo.py")


def check_demo(args: argparse.Namespace, model: str, work: Path) -> None:
    """The demo's knobs (LoRA on every linear layer, recomputed activations, bf16 sampling copy) on this
    device for a few steps, and the memory a run's heartbeat reports (`trainers.sdk.resources.peaks`:
    what the run and Workers pages show as the worker's peak RSS and GPU memory)."""
    import torch
    import yaml

    from trainers.cli import load_config
    from trainers.recipes.grpo import Trainer
    from trainers.sdk import resources
    from trainers.sdk.events import JsonlSink

    raw = yaml.safe_load((ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml").read_text())
    raw.update(demo_overrides())
    raw.update(
        model=model,
        device="auto",
        torch_threads=args.threads,
        max_steps=2 if args.tiny else 4,
        checkpoint_every=0,
        eval_every=0,
        keep_best_n=0,
    )
    if args.tiny:
        raw.update(group_size=2, prompts_per_step=1, max_new_tokens=8, max_turns=1)
    path = work / "demo.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = work / "demo"
    out.mkdir(parents=True, exist_ok=True)
    sink = JsonlSink(out / "events.jsonl")
    resources.reset_peaks()
    trainer = Trainer(load_config(path), sink=sink, out_dir=out)
    started = time.perf_counter()
    result = trainer.run()
    wall = time.perf_counter() - started
    sink.close()
    peaks = resources.peaks()
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    train = [e for e in events(out / "events.jsonl") if e["type"] == "metrics" and e.get("split") == "train"]
    step_times = [e["values"].get("step_time") for e in train]
    rewards = [e["values"].get("reward/mean") for e in train]
    on_cuda = trainer.learner.device.startswith("cuda")
    ok = (
        result.status == "SUCCEEDED"
        and 0 < trainable < total / 10
        and "peak_rss_mb" in peaks
        and (("peak_gpu_mb" in peaks and peaks["peak_gpu_mb"] > 0) if on_cuda else "peak_gpu_mb" not in peaks)
    )
    record(
        "demo",
        "PASS" if ok else "FAIL",
        f"{result.status} at step {result.step} in {wall:.1f} s on {trainer.learner.device} with the demo's knobs "
        f"(LoRA: {trainable:,} of {total:,} parameters trained; activation_checkpointing "
        f"{raw.get('activation_checkpointing')}); step times {', '.join(f'{t:.2f}' for t in step_times if t)} s; "
        f"rewards {rewards}; the heartbeat's memory fields {peaks}",
        status_=result.status,
        device=trainer.learner.device,
        trainable=trainable,
        total=total,
        step_times=step_times,
        rewards=rewards,
        peaks=peaks,
        wall_s=round(wall, 2),
    )
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def check_checkpoint(trainer: Any, config: dict[str, Any], config_path: Path, out: Path, work: Path) -> None:
    import torch

    mid = config["checkpoint_every"]
    path = out / "checkpoints" / f"step-{mid:06d}"
    files = sorted(p.name for p in path.iterdir())
    rng = torch.load(path / "rng.pt", weights_only=False)
    cuda_rng = rng.get("cuda")
    on_cuda = trainer.learner.device.startswith("cuda")
    rng_ok = (cuda_rng is not None and len(cuda_rng) >= 1) if on_cuda else cuda_rng is None
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        saved_dtypes = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
    resumed_out = work / "resumed"
    command = [
        sys.executable,
        "-m",
        "trainers",
        "train",
        str(config_path),
        "--out",
        str(resumed_out),
        "--resume",
        str(path),
        "--set",
        f"max_steps={mid + 1}",
        "--set",
        "eval_tasks=0",
    ]
    say("  " + " ".join(command))
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    tail = (proc.stdout + proc.stderr)[-3000:]
    say("  " + tail.replace("\n", "\n  "))
    evs = events(resumed_out / "events.jsonl") if (resumed_out / "events.jsonl").is_file() else []
    logs = [e["message"] for e in evs if e["type"] == "log"]
    resumed = any(m.startswith("resumed at step") for m in logs)
    steps = [e for e in evs if e["type"] == "metrics" and e.get("split") == "train"]
    original = next(
        (
            e
            for e in events(out / "events.jsonl")
            if e["type"] == "metrics" and e.get("split") == "train" and e["step"] == mid + 1
        ),
        None,
    )
    compare = {}
    if steps and original:
        for key in ("reward/mean", "loss", "grad_norm", "response_length"):
            compare[key] = (original["values"].get(key), steps[0]["values"].get(key))
    ok = proc.returncode == 0 and resumed and rng_ok and len(steps) == 1 and steps[0]["step"] == mid + 1
    record(
        "checkpoint",
        "PASS" if ok else "FAIL",
        f"step-{mid:06d} holds {files}; weights saved as {saved_dtypes}; CUDA RNG state "
        f"{'saved (' + str(len(cuda_rng)) + ' device)' if cuda_rng is not None else 'absent'}; "
        f"`python -m trainers train --resume` exit {proc.returncode} in {seconds:.1f} s, "
        f"{'resumed' if resumed else 'NOT resumed'}, took step {[e['step'] for e in steps]}; "
        f"step {mid + 1} (uninterrupted, resumed): {compare}",
        files=files,
        saved_dtypes=saved_dtypes,
        cuda_rng_saved=cuda_rng is not None,
        resume_exit=proc.returncode,
        resume_seconds=round(seconds, 1),
        resumed_vs_uninterrupted=compare,
    )


def fraction_changed(
    before: dict[str, Any], model: Any, *, skip: set[str] | frozenset[str] = frozenset()
) -> tuple[int, float]:
    """(weight tensors changed, fraction of weight values changed) since `before`, `skip`'s keys left out."""
    import torch

    after = model.state_dict()
    keys = [k for k in after if k in before and k not in skip]
    tensors = sum(not torch.equal(before[k], after[k]) for k in keys)
    values = sum(int((before[k] != after[k]).sum()) for k in keys)
    return tensors, values / max(sum(before[k].numel() for k in keys), 1)


def vocabulary_keys(model: Any) -> set[str]:
    """The state-dict keys of the vocabulary matrices (input embeddings, LM head; one when tied)."""
    vocabulary = int(model.config.vocab_size)
    return {k for k, v in model.state_dict().items() if v.dim() == 2 and v.shape[0] == vocabulary}


def check_update(trainer: Any, config: dict[str, Any], work: Path) -> tuple[Path, list[Any]] | None:
    """One update with fixed advantages on fresh samples; leaves the rows for the precision and shard checks."""
    import torch

    from trainers.learn.sampler import make_rollouts
    from trainers.learn.sharded import sample_payload, split_rows
    from trainers.learn.step import plan_update
    from trainers.sdk.events import NullSink

    trainer.sink = NullSink()  # the run closed its sinks
    trainer.events.sink = trainer.sink
    trainer.sampler.rollouts = make_rollouts(
        trainer.config,
        trainer.learner,
        chat=trainer.chat,
        make_env=trainer.make_env,
        stop=trainer.stop,
        policy_version=trainer.policy_version,
    )
    tasks = trainer.sampler.train_tasks[:2]  # a tiny run may have only one
    seeds = trainer.sampler.seeds(len(tasks), config["group_size"])
    t0 = time.perf_counter()
    groups = trainer.rollouts.generate(
        tasks, seeds, max_turns=1, generation_seed=seeds[0][0], policy_version=trainer.policy_version
    )
    generate_s = time.perf_counter() - t0
    rollouts = [r for g in groups for r in g]
    # Not ±1 in pairs: a group's samples can be identical (a confident model), and opposite advantages on
    # identical rows cancel to an exactly zero gradient.
    for i, r in enumerate(rollouts):
        r.advantage = 1.0 if i % 2 == 0 else -0.5
        r.token_advantages = None
    plan = plan_update(trainer.config, rollouts, trainer.step)
    masks, chunks = plan.masks, plan.chunks
    num_tokens, num_sequences, norm_constant = plan.num_tokens, plan.num_sequences, plan.norm_constant
    lr = trainer.learner.learning_rate
    payload = {
        "chunks": [
            [sample_payload(rollouts[i], masks[i], None) for i in rows] for rows in split_rows(chunks, 1)[0]
        ],
        "num_tokens": num_tokens,
        "num_sequences": num_sequences,
        "norm_constant": norm_constant,
        "correct": False,
        "lr": lr,
    }
    before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    timings: dict[str, float] = {}
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    metrics = trainer.update(copy.deepcopy(rollouts), timings)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    update_s = time.perf_counter() - t0
    changed, changed_values = fraction_changed(before, trainer.model)
    backend = trainer.rollouts.backend
    pushed = None
    if getattr(backend, "model", trainer.model) is not trainer.model:
        # What generation runs on (the backend's weights: a CPU bf16 copy's linear layers are packed, its
        # module's own parameters empty) against what the learner pushes (LoRA merged into the base).
        own, theirs = trainer.learner.policy_state_dict(), backend.state_dict()
        pushed = set(theirs) <= set(own) and all(
            torch.equal(own[k].to(v.dtype), v) for k, v in theirs.items()
        )
    finite = all(
        isinstance(metrics.get(k), float) and metrics[k] == metrics[k] and abs(metrics[k]) != float("inf")
        for k in ("loss", "grad_norm")
    )
    ok = (
        finite
        and metrics["grad_norm"] > 1e-6
        and changed > 0
        # fp32 weights take the update nearly everywhere (a bf16 policy took 4 % at this lr)
        and (changed_values > 0.9 or trainer.learner.precision.weights != torch.float32)
        and metrics["trained_sequences"] > 0
        and pushed is not False
    )
    tokens = sum(r.model_tokens for r in rollouts)
    record(
        "update",
        "PASS" if ok else "FAIL",
        f"{len(rollouts)} samples ({tokens} sampled tokens, generated in {generate_s:.2f} s) with advantages +1 / -0.5: "
        f"loss {metrics['loss']:.5f}, grad_norm {metrics['grad_norm']:.4f}, {changed} weight tensors and "
        f"{100 * changed_values:.1f} % of weight values changed (lr {lr:.2g}), "
        f"sampler {'holds the pushed weights' if pushed else 'is the policy' if pushed is None else 'NOT updated'}; "
        f"update {update_s:.3f} s (forward {timings.get('forward', 0):.3f}, backward {timings.get('backward', 0):.3f}, "
        f"optimizer {timings.get('optimizer', 0):.3f}, weight push {timings.get('weight_sync', 0):.3f})",
        loss=metrics["loss"],
        grad_norm=metrics["grad_norm"],
        entropy=metrics.get("entropy"),
        update_s=round(update_s, 4),
        timings={k: round(v, 4) for k, v in timings.items()},
        changed_tensors=changed,
        changed_values_fraction=changed_values,
    )
    trainer.rollouts.close()
    path = work / "shard_payload.json"
    path.write_text(json.dumps({"config": trainer.config.as_dict(), "payload": payload}))
    return path, rollouts


def check_precision(config_path: Path, rollouts: list[Any]) -> None:
    """One AdamW step at lr 2e-5 from fresh weights and optimizer on the same rows, `dtype: auto` against
    an explicit `dtype: bfloat16`: the fraction of weight values each changed, and each update's time
    (a second, warm update on the same rows is timed too)."""
    import torch

    from trainers.cli import load_config
    from trainers.recipes.grpo import Trainer
    from trainers.sdk.events import NullSink

    rows: dict[str, dict[str, Any]] = {}
    for dtype in ("auto", "bfloat16"):
        config = {
            **load_config(config_path),
            "dtype": dtype,
            "learning_rate": 2e-5,
            "warmup_steps": 0,
            "kl_coef": 0.0,
            "generation_dtype": "bfloat16",  # a sampling copy, so the update's weight push is timed alike
        }
        trainer = Trainer(config, sink=NullSink())
        trainer.setup()
        before = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        vocabulary = vocabulary_keys(trainer.model)
        seconds = []
        for attempt in range(2):
            timings: dict[str, float] = {}
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            metrics = trainer.update(copy.deepcopy(rollouts), timings)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
            if attempt == 0:
                tensors, values = fraction_changed(before, trainer.model)
                _, beyond = fraction_changed(before, trainer.model, skip=vocabulary)
                first = {k: round(v, 4) for k, v in timings.items()}
        rows[dtype] = {
            "weights": str(next(trainer.model.parameters()).dtype),
            "autocast": str(trainer.learner.precision.autocast_dtype),
            "changed_tensors": tensors,
            "tensors": len(before),
            "changed_values_fraction": values,
            "changed_values_fraction_beyond_vocabulary": beyond,
            "loss": metrics["loss"],
            "update_s": [round(t, 4) for t in seconds],
            "first_update_timings": first,
        }
        trainer.rollouts.close()
        del trainer
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    auto, bf16 = rows["auto"], rows["bfloat16"]
    on_cuda = torch.cuda.is_available()
    ok = (
        auto["weights"] == "torch.float32"
        and auto["autocast"] == ("torch.bfloat16" if on_cuda else "None")
        and bf16["weights"] == "torch.bfloat16"
        and bf16["autocast"] == "None"
        # Every tensor, and nearly every value outside the vocabulary matrices: on a few sampled tokens
        # (the CPU smoke's 16) the rows of tokens no position makes likely get gradients far below
        # AdamW's eps (~1e-11 against 1e-8), a step under fp32's resolution (17 % of those rows there;
        # 0.04 % of all values at the H200 sizes).
        and auto["changed_tensors"] == auto["tensors"]
        and auto["changed_values_fraction_beyond_vocabulary"] > 0.99
        and bf16["changed_values_fraction"] < auto["changed_values_fraction"]
    )
    record(
        "precision",
        "PASS" if ok else "FAIL",
        "one AdamW step at lr 2e-5 from fresh weights on the same rows: "
        + "; ".join(
            f"dtype {name} ({r['weights']} weights, autocast {r['autocast']}): "
            f"{100 * r['changed_values_fraction']:.1f} % of weight values "
            f"({100 * r['changed_values_fraction_beyond_vocabulary']:.1f} % beyond the vocabulary matrices) and "
            f"{r['changed_tensors']} of "
            f"{r['tensors']} tensors changed, update {r['update_s'][0]:.3f} s cold / {r['update_s'][1]:.3f} s warm"
            for name, r in rows.items()
        ),
        **rows,
    )


# ----------------------------------------------------------------------------- 5. one learner shard


def shard_child(model_dir: str, payload_path: str, result_path: str) -> None:
    """Runs in its own process: LearnerShard with world size 1 (NCCL on CUDA, gloo on a CPU)."""
    if "ray" not in sys.modules:
        # One shard needs no Ray; LearnerShard.setup asks Ray for its GPU ids only on CUDA.
        stub = types.ModuleType("ray")
        stub.get_gpu_ids = lambda: []  # type: ignore[attr-defined]
        sys.modules["ray"] = stub
    import torch
    import torch.distributed as dist

    from trainers.learn.sharded import LearnerShard
    from trainers.models import load_model, policy_precision, resolve_device

    data = json.loads(Path(payload_path).read_text())
    cfg, payload = data["config"], data["payload"]
    device = resolve_device(cfg["device"])
    out: dict[str, Any] = {"device": device}
    # Loaded as the driver loads the policy: in its weights dtype.
    model = load_model(model_dir, device, policy_precision(cfg["dtype"], device).weights)
    initial = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    shard = LearnerShard(0, 1, cfg, threads=int(cfg.get("torch_threads") or 1))
    t0 = time.perf_counter()
    shard.setup(("127.0.0.1", port), model, device)
    out["setup_s"] = time.perf_counter() - t0
    out["backend"] = dist.get_backend()
    out["world_size"] = dist.get_world_size()
    out["shard_device"] = shard.device
    out["param_dtype"] = str(next(shard.model.parameters()).dtype)
    out["autocast_dtype"] = str(shard.precision.autocast_dtype)
    out["dtensor"] = type(next(shard.model.parameters())).__name__
    learns = []
    for _ in range(2):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        totals = shard.learn(payload)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        learns.append({"seconds": time.perf_counter() - t0, **{k: float(v) for k, v in vars(totals).items()}})
    out["learn"] = learns
    t0 = time.perf_counter()
    full = shard.full_state_dict()
    out["gather_s"] = time.perf_counter() - t0
    assert full is not None
    out["gathered_tensors"] = len(full)
    out["gathered_device"] = str(next(iter(full.values())).device)
    out["changed_tensors"] = sum(
        not torch.equal(initial[k].to(full[k].dtype), full[k]) for k in full if k in initial
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        shard.save(str(Path(tmp) / "sharded"))
        out["save_s"] = time.perf_counter() - t0
        out["saved_files"] = sorted(p.name for p in (Path(tmp) / "sharded").iterdir())
        t0 = time.perf_counter()
        shard.load(str(Path(tmp) / "sharded"))
        out["load_s"] = time.perf_counter() - t0
    after = shard.full_state_dict()
    assert after is not None
    out["reload_equal"] = all(torch.equal(full[k], after[k]) for k in full)
    info = shard.info()
    out["state_mib"] = round(info["state_bytes"] / 2**20)
    out["local_params"] = info["local_params"]
    if device.startswith("cuda"):
        out["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
    shard.close()
    out["modules"] = third_party_modules()
    Path(result_path).write_text(json.dumps(out))


def check_shard(model_dir: str, payload_path: Path, reference: dict[str, Any] | None, work: Path) -> None:
    result_path = work / "shard_result.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--shard-child",
        model_dir,
        str(payload_path),
        str(result_path),
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    if proc.returncode != 0 or not result_path.is_file():
        tail = (proc.stdout + proc.stderr)[-4000:]
        record(
            "shard", "FAIL", f"child exited {proc.returncode} after {seconds:.1f} s: {tail[-600:]}", log=tail
        )
        say(tail)
        return
    r = json.loads(result_path.read_text())
    first, second = r["learn"]
    expected_backend = "nccl" if r["device"].startswith("cuda") else "gloo"
    rel = None
    if reference and reference.get("loss"):
        rel = abs(first["loss"] - reference["loss"]) / max(abs(reference["loss"]), 1e-12)
    ok = (
        r["backend"] == expected_backend
        and r["param_dtype"] == "torch.float32"
        and r["autocast_dtype"] == ("torch.bfloat16" if r["device"].startswith("cuda") else "None")
        and r["changed_tensors"] > 0
        and r["reload_equal"]
        and first["grad_norm"] > 1e-6
        and first["loss"] == first["loss"]
    )
    record(
        "shard",
        "PASS" if ok else "FAIL",
        f"LearnerShard on {r['shard_device']}, {r['backend']} process group of world size {r['world_size']}, "
        f"FSDP2 ({r['dtensor']}, {r['param_dtype']}, autocast {r['autocast_dtype']}): setup {r['setup_s']:.2f} s; learn 1: loss "
        f"{first['loss']:.5f}, grad_norm {first['grad_norm']:.4f} in {first['seconds']:.3f} s; learn 2: loss "
        f"{second['loss']:.5f} in {second['seconds']:.3f} s; one-process update on the same rows: loss "
        f"{reference['loss'] if reference else None} (rel. gap {rel if rel is None else f'{rel:.2e}'}), "
        f"grad_norm {reference['grad_norm'] if reference else None}; gathered {r['gathered_tensors']} tensors "
        f"to {r['gathered_device']} in {r['gather_s']:.2f} s ({r['changed_tensors']} changed); DCP save "
        f"{r['save_s']:.2f} s / load {r['load_s']:.2f} s, reloaded weights equal: {r['reload_equal']}; "
        f"child process {seconds:.1f} s",
        **{k: v for k, v in r.items() if k != "modules"},
        child_seconds=round(seconds, 1),
        rel_loss_gap_vs_one_process=rel,
    )
    RESULTS["modules_shard_child"] = r.get("modules")


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "out" / "cuda_check"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--gguf-parts", default="")
    parser.add_argument("--gguf-sha256", default="")
    parser.add_argument("--fallback-dir", default="")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--nvml-seconds", type=float, default=4.0)
    parser.add_argument("--only", default="", help="comma-separated: nvml,demo,train (default: all)")
    parser.add_argument(
        "--tiny",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a minimal run, for a CPU try-out (default: on without CUDA, so `make bench` stays short)",
    )
    parser.add_argument("--shard-child", nargs=3, metavar=("MODEL_DIR", "PAYLOAD", "RESULT"))
    smoke_parser(parser, tiny=True, steps=1, eval_tasks=2, nvml_seconds=0.5)
    args = parser.parse_args()

    if args.shard_child:
        shard_child(*args.shard_child)
        return 0

    if args.tiny is None:
        import torch

        args.tiny = not torch.cuda.is_available()
        if args.tiny:
            say("no CUDA here: the tiny sizes (--no-tiny keeps the full ones)")
            args.steps, args.eval_tasks, args.threads = 2, 1, 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cuda_check-"))
    os.environ.setdefault("ROLLOUT_STUDIO_CACHE", str(work / "cache"))
    only = {s for s in args.only.split(",") if s}
    started = time.perf_counter()
    say(f"work dir {work}; cache {os.environ['ROLLOUT_STUDIO_CACHE']}")
    try:
        RESULTS["environment"] = run_check("environment", environment)
        if not only or "nvml" in only:
            run_check("nvml", check_nvml, args.nvml_seconds)
        if not only or only & {"train", "demo"}:
            model = run_check("model", prepare_model, args, work)
            if model is not None:
                run_check("convert", check_conversion, model)
                if not only or "demo" in only:
                    run_check("demo", check_demo, args, model, work)
                config_path = write_config(args, model, work)
                trained = (
                    run_check("train", check_train, config_path, work)
                    if not only or "train" in only
                    else None
                )
                if trained is not None:
                    trainer, config, run_out = trained
                    if config["checkpoint_every"]:
                        run_check("checkpoint", check_checkpoint, trainer, config, config_path, run_out, work)
                    updated = run_check("update", check_update, trainer, config, work)
                    payload = updated[0] if updated is not None else None
                    if updated is not None:
                        run_check("precision", check_precision, config_path, updated[1])
                    final = run_out / "checkpoints" / f"step-{config['max_steps']:06d}"
                    if payload is not None and final.is_dir():
                        reference = RESULTS["checks"].get("update")
                        run_check("shard", check_shard, str(final), payload, reference, work)
    finally:
        # The run's checkpoints and converted model: ~5 GB on the GPU sizes, gone with the run.
        shutil.rmtree(work, ignore_errors=True)
        RESULTS["modules"] = third_party_modules()
        RESULTS["seconds"] = round(time.perf_counter() - started, 1)
        (out / "cuda_check.json").write_text(json.dumps(RESULTS, indent=2, default=str))
        say("")
        say("summary:")
        for name, check in RESULTS["checks"].items():
            say(f"  {check['status']:4} {name}")
        say(f"total {RESULTS['seconds']} s; summary in {out / 'cuda_check.json'}")
    failed = [n for n, c in RESULTS["checks"].items() if c["status"] == "FAIL"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
