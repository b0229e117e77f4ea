"""Record small XSpace captures of known character with JAX's profiler, for tfobs's test data.

Run it where JAX sees an NVIDIA GPU (TensorFlow is not needed: JAX's profiler writes the
same XSpace through the same XLA profiler and CUPTI)::

    python tools/record_gpu_captures.py --out /tmp/gpu_captures
    python tools/record_gpu_captures.py --out /tmp/c --cases bf16_matmul,conv_train_bf16 --steps 5

Each case writes `<out>/<case>.xplane.pb` and `<out>/<case>.json` (provenance: GPU model,
driver, CUDA/JAX/jaxlib versions, date, the exact case parameters and the expected
character). Every step is wrapped in `StepTraceAnnotation("train", step_num=i)`, so the
steps are found from markers. Compilation and warm-up happen before the trace starts, so the
captures hold steady-state steps only.

On a CPU-only JAX it still runs (with smaller sizes) so the script itself can be checked;
those captures are CPU captures and are not for the GPU test data.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Captures larger than this are still written, with a warning: test data should stay small.
MAX_CAPTURE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    expect: str  # the character the capture should show, for the provenance file
    gpu_params: dict[str, Any]
    cpu_params: dict[str, Any]
    # params -> run(step_index); everything is compiled and warmed up before it returns
    prepare: Callable[[dict[str, Any]], Callable[[int], None]]


def _block(x: Any) -> None:
    jax.block_until_ready(x)


# --- the cases -----------------------------------------------------------------------------


def _prepare_launch_bound(p: dict[str, Any]) -> Callable[[int], None]:
    # Eager (un-jitted) ops: each one is its own executable and its own tiny kernel, so the
    # GPU waits on Python dispatch between kernels.
    x0 = jnp.ones((p["elements"],), jnp.float32)

    def run(_i: int) -> None:
        x = x0
        for _ in range(p["ops_per_step"]):
            x = x * 1.0001 + 0.5
        _block(x)

    run(0)  # compiles the two tiny executables
    return run


def _matmul_runner(p: dict[str, Any], dtype: Any, precision: Any) -> Callable[[int], None]:
    n = p["n"]
    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    # Scaled so repeated products stay finite; only the GEMM kernels run inside the steps.
    a = (jax.random.normal(key_a, (n, n), jnp.float32) / np.sqrt(n)).astype(dtype)
    b = (jax.random.normal(key_b, (n, n), jnp.float32) / np.sqrt(n)).astype(dtype)
    mm = jax.jit(lambda x, y: jnp.matmul(x, y, precision=precision))
    # The default precision is part of jit's cache key: compile and run under the same one.
    default = "highest" if precision == jax.lax.Precision.HIGHEST else None
    with jax.default_matmul_precision(default):
        _block(mm(a, b))

    def run(_i: int) -> None:
        out = None
        with jax.default_matmul_precision(default):
            for _ in range(p["matmuls_per_step"]):
                out = mm(a, b)
        _block(out)

    return run


def _prepare_bf16_matmul(p: dict[str, Any]) -> Callable[[int], None]:
    return _matmul_runner(p, jnp.bfloat16, None)


def _prepare_fp32_matmul_no_tf32(p: dict[str, Any]) -> Callable[[int], None]:
    # HIGHEST asks XLA for true fp32 GEMMs: no TF32, so no Tensor Core kernels. It is given
    # both on the op and as the default (scoped to this case, so later cases keep theirs).
    return _matmul_runner(p, jnp.float32, jax.lax.Precision.HIGHEST)


def _prepare_input_bound(p: dict[str, Any]) -> Callable[[int], None]:
    # Each step waits on the host (a slow "reader"), builds a batch in NumPy and copies it
    # to the device; the device work itself is short. The wait is annotated the way
    # tf.data's iterator names it, which is how XProf (and tfobs) recognise input time.
    rng = np.random.default_rng(0)
    shape = (p["batch"], p["features"])
    w = jnp.ones((p["features"], p["features"]), jnp.float32) / p["features"]
    step = jax.jit(lambda x, w: jnp.tanh(x @ w).sum())
    _block(step(jax.device_put(np.zeros(shape, np.float32)), w))

    def run(_i: int) -> None:
        with jax.profiler.TraceAnnotation(p["input_annotation"]):
            time.sleep(p["host_wait_ms"] / 1000.0)
            batch = rng.standard_normal(shape, dtype=np.float32)
        _block(step(jax.device_put(batch), w))

    return run


def _prepare_copies(p: dict[str, Any]) -> Callable[[int], None]:
    # A sizeable host->device copy, a small kernel, and a device->host copy of the result.
    count = p["megabytes"] * 1024 * 1024 // 4
    host = np.arange(count, dtype=np.float32)
    scale = jax.jit(lambda x: x * 2.0)
    np.asarray(scale(jax.device_put(host)))

    def run(_i: int) -> None:
        on_device = jax.device_put(host)
        back = np.asarray(scale(on_device))
        assert back.shape == host.shape

    return run


def _prepare_conv_train_bf16(p: dict[str, Any]) -> Callable[[int], None]:
    # Two 3x3 convolutions, global average pool, a dense layer; bf16 parameters and
    # activations, softmax cross-entropy, plain SGD. NHWC images, HWIO kernels.
    b, hw, c1, c2, classes = p["batch"], p["image"], p["channels1"], p["channels2"], 10
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    dt = jnp.bfloat16
    params = {
        "k1": (jax.random.normal(keys[0], (3, 3, 3, c1)) * 0.1).astype(dt),
        "k2": (jax.random.normal(keys[1], (3, 3, c1, c2)) * 0.05).astype(dt),
        "w": (jax.random.normal(keys[2], (c2, classes)) * 0.05).astype(dt),
    }
    images = jax.random.normal(keys[3], (b, hw, hw, 3)).astype(dt)
    labels = jax.random.randint(keys[4], (b,), 0, classes)
    dims = ("NHWC", "HWIO", "NHWC")

    def conv(x: jax.Array, k: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dims)

    def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        h = jax.nn.relu(conv(x, params["k1"]))
        h = jax.nn.relu(conv(h, params["k2"]))
        logits = h.mean(axis=(1, 2)) @ params["w"]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def train_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> tuple:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        new = jax.tree_util.tree_map(lambda w, g: (w - 0.01 * g).astype(w.dtype), params, grads)
        return new, value

    state = {"params": params}
    _block(train_step(params, images, labels))

    def run(_i: int) -> None:
        state["params"], value = train_step(state["params"], images, labels)
        _block(value)

    return run


def _prepare_fp32_matmul_tf32(p: dict[str, Any]) -> Callable[[int], None]:
    # JAX's default precision lets XLA run fp32 GEMMs as TF32 on Tensor Cores (Ampere on).
    return _matmul_runner(p, jnp.float32, None)


def _prepare_flash_attention(p: dict[str, Any]) -> Callable[[int], None]:
    # Causal self-attention forward and backward through cuDNN's fused (flash) attention, so
    # the capture holds the real attention kernels' names; bf16 (B, T, N, H) tensors.
    shape = (p["batch"], p["length"], p["heads"], p["head_dim"])
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16) for key in keys)
    impl = p["implementation"]

    def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        return out.astype(jnp.float32).sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    _block(step(q, k, v))

    def run(_i: int) -> None:
        _block(step(q, k, v))

    return run


def _prepare_transformer_train_bf16(p: dict[str, Any]) -> Callable[[int], None]:
    # An ordinary small model: pre-LayerNorm transformer blocks (causal attention through
    # `dot_product_attention`, a 4x MLP with GELU), bf16 weights and activations, mean
    # squared loss, SGD with momentum, all in one jitted training step.
    b, t, d, heads, layers = p["batch"], p["length"], p["width"], p["heads"], p["layers"]
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4 * layers + 2))
    dt = jnp.bfloat16

    def dense(n_in: int, n_out: int) -> jax.Array:
        return (jax.random.normal(next(keys), (n_in, n_out)) / np.sqrt(n_in)).astype(dt)

    params = [{"qkv": dense(d, 3 * d), "out": dense(d, d), "up": dense(d, 4 * d),
               "down": dense(4 * d, d)} for _ in range(layers)]
    x = jax.random.normal(next(keys), (b, t, d)).astype(dt)
    target = jax.random.normal(next(keys), (b, t, d)).astype(dt)
    impl = p["implementation"]

    def norm(h: jax.Array) -> jax.Array:
        h32 = h.astype(jnp.float32)
        mean = h32.mean(-1, keepdims=True)
        var = ((h32 - mean) ** 2).mean(-1, keepdims=True)
        return ((h32 - mean) * jax.lax.rsqrt(var + 1e-5)).astype(dt)

    def block(h: jax.Array, w: dict[str, jax.Array]) -> jax.Array:
        q, k, v = jnp.split(norm(h) @ w["qkv"], 3, axis=-1)
        q, k, v = (z.reshape(b, t, heads, d // heads) for z in (q, k, v))
        att = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        h = h + att.reshape(b, t, d) @ w["out"]
        return h + jax.nn.gelu(norm(h) @ w["up"]) @ w["down"]

    def loss(params: list, x: jax.Array, y: jax.Array) -> jax.Array:
        h = x
        for w in params:
            h = block(h, w)
        return ((h.astype(jnp.float32) - y.astype(jnp.float32)) ** 2).mean()

    @jax.jit
    def train_step(params: list, momentum: list, x: jax.Array, y: jax.Array) -> tuple:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        momentum = jax.tree_util.tree_map(lambda m, g: (0.9 * m + g).astype(m.dtype),
                                          momentum, grads)
        params = jax.tree_util.tree_map(lambda w, m: (w - 1e-3 * m).astype(w.dtype),
                                        params, momentum)
        return params, momentum, value

    state = {"params": params, "momentum": jax.tree_util.tree_map(jnp.zeros_like, params)}
    _block(train_step(state["params"], state["momentum"], x, target))

    def run(_i: int) -> None:
        state["params"], state["momentum"], value = train_step(
            state["params"], state["momentum"], x, target)
        _block(value)

    return run


CASES: tuple[Case, ...] = (
    Case("launch_bound_tiny_ops",
         "many tiny eager kernels: high kernel-launch idle, tiny mean kernel time",
         {"elements": 256, "ops_per_step": 100}, {"elements": 256, "ops_per_step": 50},
         _prepare_launch_bound),
    Case("bf16_matmul",
         "bf16 GEMMs only: Tensor Core kernel share > 0.5",
         {"n": 4096, "matmuls_per_step": 4, "dtype": "bfloat16"},
         {"n": 256, "matmuls_per_step": 2, "dtype": "bfloat16"},
         _prepare_bf16_matmul),
    Case("fp32_matmul_no_tf32",
         "fp32 GEMMs with precision HIGHEST (TF32 off): Tensor Core share near 0, "
         "Tensor-Core-eligible time not using Tensor Cores high",
         {"n": 4096, "matmuls_per_step": 2, "dtype": "float32", "precision": "highest"},
         {"n": 256, "matmuls_per_step": 2, "dtype": "float32", "precision": "highest"},
         _prepare_fp32_matmul_no_tf32),
    Case("input_bound_host_wait",
         "host sleeps and builds each batch inside TraceAnnotation('IteratorGetNext'), then "
         "copies it: highly input-bound, device mostly idle",
         {"host_wait_ms": 20, "batch": 256, "features": 1024,
          "input_annotation": "IteratorGetNext"},
         {"host_wait_ms": 20, "batch": 64, "features": 128,
          "input_annotation": "IteratorGetNext"},
         _prepare_input_bound),
    Case("h2d_d2h_copies",
         "large host-to-device and device-to-host copies each step",
         {"megabytes": 64}, {"megabytes": 4},
         _prepare_copies),
    Case("conv_train_bf16",
         "small bf16 conv net training step (conv_general_dilated + grad): cuDNN kernels",
         {"batch": 64, "image": 32, "channels1": 32, "channels2": 64},
         {"batch": 8, "image": 16, "channels1": 8, "channels2": 16},
         _prepare_conv_train_bf16),
    Case("flash_attention_bf16",
         "causal attention forward + backward via jax.nn.dot_product_attention("
         "implementation='cudnn'): cuDNN flash-attention kernels (Tensor Core work)",
         {"batch": 4, "length": 1024, "heads": 8, "head_dim": 64, "implementation": "cudnn"},
         {"batch": 2, "length": 128, "heads": 2, "head_dim": 32, "implementation": "xla"},
         _prepare_flash_attention),
    Case("fp32_matmul_tf32",
         "fp32 GEMMs at JAX's default precision (XLA may use TF32): Tensor Core kernels "
         "with fp32 inputs",
         {"n": 4096, "matmuls_per_step": 2, "dtype": "float32", "precision": "default"},
         {"n": 256, "matmuls_per_step": 2, "dtype": "float32", "precision": "default"},
         _prepare_fp32_matmul_tf32),
    Case("transformer_train_bf16",
         "an ordinary small model: 2 pre-LN transformer blocks, bf16, cuDNN attention, "
         "momentum SGD in one jitted step: GEMMs and attention on Tensor Cores beside "
         "LayerNorm, GELU and optimizer fusions",
         {"batch": 8, "length": 512, "width": 512, "heads": 8, "layers": 2,
          "implementation": "cudnn"},
         {"batch": 2, "length": 64, "width": 64, "heads": 2, "layers": 2,
          "implementation": "xla"},
         _prepare_transformer_train_bf16),
)
CASE_NAMES = tuple(c.name for c in CASES)


# --- provenance ----------------------------------------------------------------------------


def _nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total,compute_cap",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if not out:
        return {}
    fields = [f.strip() for f in out[0].split(",")]
    keys = ("gpu_name", "driver_version", "memory_total", "compute_capability")
    return dict(zip(keys, fields, strict=False))


def _cuda_versions() -> dict[str, Any]:
    """CUDA library versions as jaxlib's CUDA plugin reports them (empty on CPU-only JAX)."""
    try:
        from jax._src.lib import cuda_versions  # private, but the only place that has them
    except ImportError:
        return {}
    if cuda_versions is None:
        return {}
    out: dict[str, Any] = {}
    for name in ("cuda_runtime_get_version", "cuda_driver_get_version", "cudnn_get_version",
                 "cublas_get_version", "cupti_get_version", "cufft_get_version",
                 "cusolver_get_version", "cusparse_get_version"):
        fn = getattr(cuda_versions, name, None)
        if fn is not None:
            try:
                out[name.removesuffix("_get_version")] = fn()
            except Exception as exc:  # a version probe must never stop the recording
                out[name.removesuffix("_get_version")] = f"error: {exc}"
    return out


def environment() -> dict[str, Any]:
    import jaxlib

    dev = jax.devices()[0]
    env: dict[str, Any] = {
        "platform": dev.platform,
        "device_kind": dev.device_kind,
        "device_count": jax.device_count(),
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "host_os": platform.platform(),
        "cuda": _cuda_versions(),
        "nvidia_smi": _nvidia_smi(),
        # These change which GEMM kernels XLA picks (cuBLAS vs Triton, TF32 or not).
        "env_vars": {k: os.environ[k] for k in ("XLA_FLAGS", "NVIDIA_TF32_OVERRIDE",
                                                "JAX_DEFAULT_MATMUL_PRECISION")
                     if k in os.environ},
    }
    cc = getattr(dev, "compute_capability", None)
    if cc is not None:
        env["compute_capability"] = str(cc)
    return env


# --- recording -----------------------------------------------------------------------------


def record(case: Case, params: dict[str, Any], steps: int,
           out_dir: str) -> tuple[str, int, dict[str, float]]:
    run = case.prepare(params)  # compile + warm up outside the trace
    timing: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix=f"tfobs_{case.name}_") as logdir:
        t0 = time.perf_counter()
        jax.profiler.start_trace(logdir)
        t1 = time.perf_counter()
        try:
            for i in range(steps):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    run(i)
        finally:
            t2 = time.perf_counter()
            jax.profiler.stop_trace()  # collects the trace and writes the .xplane.pb
            t3 = time.perf_counter()
        timing = {"start_trace_s": round(t1 - t0, 4), "steps_s": round(t2 - t1, 4),
                  "stop_trace_s": round(t3 - t2, 4)}
        found = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
        if len(found) != 1:
            raise RuntimeError(f"{case.name}: expected one .xplane.pb under {logdir}, "
                               f"found {len(found)}")
        dest = os.path.join(out_dir, f"{case.name}.xplane.pb")
        shutil.copyfile(found[0], dest)
    return dest, os.path.getsize(dest), timing


def _each_in_own_process(cases: list[str], out: str, steps: int) -> int:
    # A fresh process per case: a capture then holds only its own programs' metadata, and
    # no JAX setting or allocator state carries over from the case before.
    failed = 0
    for name in cases:
        cmd = [sys.executable, os.path.abspath(__file__), "--out", out, "--cases", name,
               "--steps", str(steps)]
        if subprocess.run(cmd, check=False).returncode != 0:
            failed += 1
            print(f"{name}: FAILED (exit status above)", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for <case>.xplane.pb and .json")
    parser.add_argument("--cases", default=",".join(CASE_NAMES),
                        help="comma-separated subset of: " + ", ".join(CASE_NAMES))
    parser.add_argument("--steps", type=int, default=10, help="profiled steps per case (10)")
    parser.add_argument("--one-process", action="store_true",
                        help="record all cases in this process instead of one process each")
    args = parser.parse_args(argv)

    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CASE_NAMES]
    if unknown or not wanted:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASE_NAMES)}")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    os.makedirs(args.out, exist_ok=True)
    if len(wanted) > 1 and not args.one_process:
        return _each_in_own_process(wanted, args.out, args.steps)

    env = environment()
    on_gpu = env["platform"] == "gpu"
    if on_gpu:
        print(f"recording GPU captures on {env['device_kind']} "
              f"(driver {env['nvidia_smi'].get('driver_version', 'unknown')})")
    else:
        print(f"NOTE: JAX platform is {env['platform']!r}, not 'gpu': these are "
              f"{env['platform'].upper()} captures, for checking this script only, "
              "NOT for the GPU test data", file=sys.stderr)

    failed = 0
    for case in (c for c in CASES if c.name in wanted):
        params = dict(case.gpu_params if on_gpu else case.cpu_params)
        recorded_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        try:
            path, size, timing = record(case, params, args.steps, args.out)
        except Exception as exc:  # one broken case should not lose the others
            failed += 1
            print(f"{case.name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        with open(path, "rb") as f:
            data = f.read()
        # CUPTI writes a "/device:GPU:N" plane; without it the capture has no kernels.
        has_gpu_plane = b"/device:GPU:" in data
        provenance = {
            "case": case.name,
            "expect": case.expect,
            "params": params,
            "steps": args.steps,
            "step_marker": 'jax.profiler.StepTraceAnnotation("train", step_num=i)',
            "recorded_at_utc": recorded_at,
            "for_gpu_test_data": on_gpu and has_gpu_plane,
            "has_gpu_plane": has_gpu_plane,
            "bytes": size,
            "trace_timing": timing,
            "recorder": "tools/record_gpu_captures.py",
            "environment": env,
        }
        with open(os.path.join(args.out, f"{case.name}.json"), "w") as f:
            json.dump(provenance, f, indent=2, sort_keys=True)
            f.write("\n")
        notes = []
        if not on_gpu:
            notes.append(f"{env['platform']} capture, not GPU test data")
        elif not has_gpu_plane:
            notes.append("WARNING: no /device:GPU plane (CUPTI unavailable?)")
        if size > MAX_CAPTURE_BYTES:
            notes.append(f"WARNING: over {MAX_CAPTURE_BYTES // (1024 * 1024)} MiB, "
                         "use fewer --steps")
        suffix = f"  ({'; '.join(notes)})" if notes else ""
        print(f"{case.name}: {path} {size / 1e6:.2f} MB, {args.steps} steps, "
              f"stop_trace {timing['stop_trace_s'] * 1e3:.0f} ms{suffix}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
