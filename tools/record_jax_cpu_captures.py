"""Record JAX CPU captures (XLA's CPU runtime, no GPU), with XProf 2.24.2's answers, for tests.

    python tools/record_jax_cpu_captures.py             # every case, .venv-jax/bin/python
    python tools/record_jax_cpu_captures.py --cases step_annotation --out /tmp/c

Each case runs in its own process of the JAX venv (`scripts/jax_venv.sh`: JAX, no
TensorFlow): a jitted training step, compiled and warmed up outside the trace, then 12 steps
under `jax.profiler.trace`, each marked as the case says. XLA's CPU runtime runs each step's
computation on its thread pool (`tf_XLAPjRtCpuClient`), linked to the Python thread by
`ThreadpoolListener::Record` / `StartRegion`. This process (the project's venv, with
XProf) then copies the `.xplane.pb` to `<out>/captures/generated__jax<ver>cpu__<case>.xplane.pb`,
runs XProf's five tools into `<out>/xprof-2.24.2/` and writes `<out>/provenance/`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CASES = {
    "disable_jit_every_4th": "the MLP's jitted SGD step (128-512-512-10), every fourth marked "
        "step run under `with jax.disable_jit():` (a debugging toggle left in the loop): "
        "those steps run the same Python function primitive by primitive, the others one "
        "compiled program; `StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "make_jaxpr_each_step": "the MLP's jitted SGD step, each marked step first calling "
        "`jax.make_jaxpr(sgd_fn)(p, x, y)` (its equation count logged) and "
        "`jax.eval_shape(sgd_fn, p, x, y)`: the step function traced twice every step "
        "without compiling, then the compiled step, waited for",
    "checkify_throw_steps": "the MLP's SGD step as `jax.jit(checkify.checkify(sgd_fn, "
        "errors=checkify.float_checks))`, each marked step calling `err.throw()` on the "
        "returned error (a host read of the error's arrays) and waiting for the weights",
    "equinox_filter_jit_steps": "an `equinox.nn.MLP` (128-512-512-10) trained with "
        "`optax.adam` through `equinox.filter_jit` (the model and optimizer state "
        "partitioned into arrays and static leaves on every call), "
        "`StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "vmap_ensemble_steps": "an ensemble of 8 MLPs (128-256-256-10) trained side by side: the "
        "SGD step `jax.jit(jax.vmap(sgd_fn, in_axes=(0, None, None)))` over stacked "
        "weights, one batch for all; marked and waited for",
    "attention_transformer_steps": "a two-block causal transformer language model (d=64, 4 "
        "heads, 64 tokens, batch 16, vocab 256, tied embedding) using "
        "`jax.nn.dot_product_attention(..., is_causal=True)`, its jitted SGD step marked and "
        "waited for",
    "fft_features_two_jits": "marked steps that make features on the device with a jitted "
        "function of their own (Hann window, `jnp.fft.rfft` of 64 signals of 1,024 samples, "
        "the first 128 log magnitudes), then run the MLP's jitted SGD step on them: two "
        "jitted calls a step, waited for at the end",
    "dict_batch_optional_keys": "the MLP's SGD step under `jax.jit` taking the batch as a "
        "dict whose keys vary: a `mask` on every third batch, a `weight` on every fifth "
        "(the loader adds a key only when it has one); only the plain `{x, y}` batch "
        "compiled before the trace, so each new key set traces and compiles the step "
        "inside its marker (steps 4, 5 and 14 of 4-15)",
    "flax_linen_trainstate_donate": "a Flax linen MLP (128-256-256-10, Dropout 0.1) in a "
        "`flax.training.train_state.TrainState` with `optax.adam`, the step `jax.jit(..., "
        "donate_argnums=0)` returning the new state and loss, marked "
        "`StepTraceAnnotation(\"train\", step_num=i)` and waited for",
    "static_train_flag_alternating": "a jitted step `jax.jit(step, static_argnames=\"train\")` "
        "called with train=True and train=False on alternate marked steps (dropout and the "
        "update only when training): two compiled programs, both compiled in warm-up",
    "debug_callback_cond_every_10": "a jitted SGD step that logs with `jax.debug.callback` "
        "(a 3 ms host logger) inside `lax.cond(step % 10 == 0, ...)`: the callback runs on "
        "every 10th marked step only",
    "memmap_batches_steps": "marked steps whose batch (256x1024 float32, 1 MiB) is read "
        "from a numpy memmap of a 256 MiB file at a random offset each step, then a jitted "
        "SGD step, waited for",
    "while_loop_data_dependent": "a jitted step holding a `lax.while_loop` whose trip count "
        "depends on the batch (power iteration until converged, 3 to 60 rounds), then an "
        "SGD update; marked and waited for",
    "clear_caches_each_epoch": "3 epochs of 4 marked SGD steps; at each epoch start the job "
        "calls `jax.clear_caches()` and re-creates `jax.jit(step)`, so the first step of "
        "each epoch traces and compiles again (inside its marker)",
    "step_annotation": "a jitted SGD step of a 64x128 by 128x128 least-squares model, each step "
                       "marked `jax.profiler.StepTraceAnnotation(\"step\", step_num=i)`",
    "trace_annotation_root": "the same step marked `jax.profiler.TraceAnnotation(\"batch\", "
                             "step_num=i, _r=1)` (a marker of the user's own name)",
    "tfobs_step": "the same step marked `with tfobs.step(i):` without `tfobs.enable()`; JAX's "
                  "Python tracer on (its default), so the marker's own `__exit__` begins "
                  "inside the step and runs past its end",
    "jitted_calls_only": "the same jitted step called 12 times with no marker at all (an "
                         "inference-like window: calls, no step)",
    "async_calls_no_markers": "a jitted forward and backward pass of a 512-wide model "
                              "called 12 times with no marker and no wait after each call "
                              "(an inference-like loop that only reads its result at the "
                              "end): each call returns before its work runs, which XLA's "
                              "CPU threads do afterwards",
    "python_wait_steps": "the same step marked `StepTraceAnnotation(\"train\", step_num=i)`, "
                         "each step first waiting 2 ms in Python for its batch (a host data "
                         "loader: no tf.data, so no input op; XProf: 'All Others')",
    "pmap_four_devices": "the step data-parallel over four CPU devices "
                         "(XLA_FLAGS=--xla_force_host_platform_device_count=4): `jax.pmap` "
                         "with a `lax.pmean` of the gradients, marked "
                         "`StepTraceAnnotation(\"train\", step_num=i)`",
    "sharded_two_devices": "the step under `jax.jit` with the batch sharded over two CPU "
                           "devices (XLA_FLAGS=--xla_force_host_platform_device_count=2, "
                           "`NamedSharding(mesh, P(\"d\", None))`, the weights replicated), "
                           "marked `StepTraceAnnotation(\"train\", step_num=i)`: PjRt runs "
                           "each device's part on a client thread "
                           "(`[1] CommonPjRtLoadedExecutable::Execute`), linked to the "
                           "Python thread's `Execute`",
    "scan_four_steps": "four SGD updates per call (`jax.lax.scan` inside one jitted "
                       "function), each call marked `StepTraceAnnotation(\"train\", "
                       "step_num=i)`",
    "async_dispatch_steps": "`StepTraceAnnotation(\"train\", step_num=i)` around the step "
                            "with no block_until_ready in the loop (JAX's async dispatch: the "
                            "marker covers the dispatch, the computation runs after it; one "
                            "wait after the last step)",
    "async_two_jits_steps": "two jitted functions per step (the gradient, then the update) of a "
                            "tanh model, 64x128 by 128x128, each step marked "
                            "`StepTraceAnnotation(\"train\", step_num=i)` with no "
                            "block_until_ready in the loop: XLA's CPU runtime runs each step's "
                            "work after its marker closes (one wait after the last step, inside "
                            "the trace)",
    "python_generator_between_steps": "`for x in batches:` over a Python generator that "
                                      "builds each batch in numpy (about 3 ms), the step "
                                      "marked `StepTraceAnnotation(\"train\", step_num=i)` "
                                      "after next() returns: the loader's Python lies "
                                      "between the steps, on their thread",
    "python_loader_thread": "`StepTraceAnnotation(\"train\", step_num=i)` steps fed by a "
                            "Python loader thread that builds each batch in numpy and sleeps "
                            "1 ms per batch, two batches ahead (a queue): its Python runs "
                            "beside the steps, not in them",
    "epoch_step_annotations": "`StepTraceAnnotation(\"epoch\", step_num=e)` around six "
                              "`StepTraceAnnotation(\"train\", step_num=i)` steps each, two "
                              "epochs (a step marker inside a step marker)",
    "compute_wait_steps": "twenty SGD updates per call (`jax.lax.fori_loop` inside one "
                          "jitted function), each call marked `StepTraceAnnotation(\"train\", "
                          "step_num=i)`, the step a Python function of the job's that ends "
                          "in `block_until_ready`: the Python thread waits in that frame "
                          "(no event of its own) while the client thread runs the program",
    "recompile_each_step": "the step under `jax.jit` with its learning-rate scale a static "
                           "argument (`static_argnums`) that takes a new value every call, "
                           "marked `StepTraceAnnotation(\"train\", step_num=i)`: JAX lowers "
                           "and compiles the function again inside every step "
                           "(`lower_sharding_computation`, `backend_compile_and_load`)",
    "io_callback_steps": "the step under `jax.jit` logging its loss to a file with "
                         "`jax.experimental.io_callback(log, None, loss, ordered=True)` "
                         "(a line written and flushed each step), marked "
                         "`StepTraceAnnotation(\"train\", step_num=i)`: each call of the "
                         "jitted step leaves JAX's C++ fast path",
    "debug_print_steps": "the step under `jax.jit` with a `jax.debug.print` of its loss, "
                         "marked `StepTraceAnnotation(\"train\", step_num=i)`: the compiled "
                         "step stops at each call to run the print's Python (JAX's "
                         "`_wrapped_callback`) on the Python thread",
    "tfdata_loader_steps": "the step fed by a tf.data pipeline (`from_tensor_slices`, a "
                           "serial `map` of 256 sines per value, `batch(64)`, `prefetch(2)`, "
                           "read with `as_numpy_iterator()`), `next()` inside "
                           "`StepTraceAnnotation(\"train\", step_num=i)`: the step waits for "
                           "its batch in TensorFlow, whose ops jax.profiler does not record "
                           "(runs in the project's venv: JAX and TensorFlow)",
    "tfdata_wait_in_steps": "tfdata_loader_steps's pipeline and loop with tfobs's event "
                            "around tf.data's next() installed (`tfobs.capture.tfdata_wait`, "
                            "as a live JAX window has it; no tfobs runtime): the step's wait "
                            "for its batch is an event of its own",
    "tfdata_wait_between_steps": "the same with `next()` before the step's "
                                 "`StepTraceAnnotation(\"train\", step_num=i)` opens (`for "
                                 "batch in ...:` around the marker): the wait falls between "
                                 "the steps",
    "tfdata_wait_no_tracer": "tfdata_wait_in_steps with the Python tracer off "
                             "(`ProfileOptions.python_tracer_level = 0`, host tracer level "
                             "2), as tfobs's live windows record: tfobs's event is the only "
                             "trace of the wait",
    "tfdata_wait_loader_thread": "the same pipeline read by a loader thread of the job's "
                                 "(annotated next() there) into a `queue.Queue(maxsize=2)` "
                                 "the step takes its batch from: the fetches overlap the "
                                 "steps without being their wait",
    "op_by_op_steps": "the same SGD step without `jax.jit` (each jax.numpy operation and its "
                      "gradient's dispatched as a program of its own: `PjitFunction(matmul)`, "
                      "`PjitFunction(mul)`, ...), marked `StepTraceAnnotation(\"train\", "
                      "step_num=i)`",
    "block_tree_metrics": "the SGD step under `jax.jit` returning the weights and a metrics "
                          "dict of three scalars (loss, gradient norm, largest weight), each "
                          "step ending `jax.block_until_ready((w, metrics))` inside its "
                          "`StepTraceAnnotation(\"train\", step_num=i)`: a tree's wait, "
                          "which PjRt writes no `Await` pair for",
    "jitted_step_window_end": "the jitted SGD step marked `StepTraceAnnotation(\"train\", "
                              "step_num=i)`, then, after the last step and inside the "
                              "trace, what ends a window in a real job: one-off jax.numpy "
                              "calls (a metric read, `float(jnp.mean(w))`, and a fresh "
                              "`jnp.zeros`) and tfobs's own window-end drain "
                              "(`JaxBackend().drain()`: `PjitFunction(tfobs_window_end)`), "
                              "all compiled before the trace (calls of about 0.1 ms); "
                              "each step also sleeps 15 ms (a step of a real model's "
                              "length)",
    "rng_split_outside_jit": "the jitted SGD step marked `StepTraceAnnotation(\"train\", "
                             "step_num=i)`, its batch noised each step by JAX calls made "
                             "outside jit inside the marker (`jax.random.split` of the key, "
                             "`jax.random.normal`, an add): JAX's own Python dispatch "
                             "(`core.py bind`) in the step",
    "ema_outside_jit_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps of a jitted "
                             "SGD step on a three-layer model, then an average of the weights "
                             "kept outside jit (`ema = tree_map(lambda e, p: 0.999 * e + "
                             "0.001 * p, ema, params)`: a multiply and an add per leaf, "
                             "each its own compiled program) and a wait",
    "callback_on_xla_threads": "a jitted SGD step of a 512-wide least-squares model that "
                               "logs its loss with `jax.debug.callback` (a Python logger "
                               "that sleeps 2 ms) each step, marked "
                               "`StepTraceAnnotation(\"train\", step_num=i)`: XLA runs the "
                               "callback on its own worker threads, where the Python tracer "
                               "writes no event (its `debug_callback` op holds the time)",
    "metric_read_each_step": "the jitted SGD step marked `StepTraceAnnotation(\"train\", "
                             "step_num=i)` returning its loss, read on the host every step "
                             "(`float(loss)` and `int(loss > 0)`, as a progress print "
                             "does): JAX's `array.py _value` in the step",
    "polling_thread_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps of the "
                            "jitted SGD step, waited for, while a Python thread of the job's "
                            "own polls a threading.Event in a busy loop (a hundred "
                            "additions between checks; started before the trace: no event "
                            "of its loop's frame) and holds the GIL whenever it can",
    "device_put_each_step": "`StepTraceAnnotation(\"train\", step_num=i)` steps that each "
                            "copy a new 16 MiB numpy batch (1024x4096 float32) to the device "
                            "with `jax.device_put` outside jit, then run a jitted "
                            "least-squares step on it and wait for it",
    "shape_buckets_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps of the jitted "
                           "SGD step on batches padded to a new bucket length every three "
                           "steps (64 rows warmed before the trace; 96, 128, 160 and 192 first "
                           "seen inside it): each new bucket traces and compiles the step",
    "orbax_saves_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps of the jitted "
                         "SGD step, each calling orbax's `CheckpointManager.save(i, ...)` "
                         "(save_interval_steps=4, asynchronous, its default): every fourth "
                         "step saves the weights (needs orbax-checkpoint beside JAX: "
                         "--jax-python of a venv that has it)",
    "grain_threads_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps that each take "
                           "the next batch of a grain pipeline (`MapDataset.range(4096)."
                           "map(record).batch(64).to_iter_dataset(ReadOptions(num_threads=2, "
                           "prefetch_buffer_size=2))`, a per-record numpy transform slower "
                           "than the step) and run a jitted least-squares step on it: grain "
                           "marks its stages (`_ipl_stage_*` stats), which XProf times as "
                           "input (needs grain beside JAX: --jax-python of a venv that has "
                           "it)",
    "grain_workers_steps": "the same steps fed by `grain.DataLoader(worker_count=2)` (two "
                           "worker processes running the per-record transform, then "
                           "`Batch(64)`): the main thread's stages wait for the workers "
                           "(needs grain beside JAX)",
    "tiny_steps_long": "3,000 steps of a tiny jitted update (a 16x16 matmul), each marked "
                       "`StepTraceAnnotation(\"train\", step_num=i)` and waited for: a long "
                       "window of small steps, as high-throughput jobs make (the speed "
                       "benchmark's JAX long window)",
    "keras_jax_fit": "Keras 3 fit with KERAS_BACKEND=jax on numpy arrays (Keras's array "
                     "adapter, no tf.data), a 256-512-512-1 MLP, batch 64, 12 steps, "
                     "tfobs's Keras callback (markers: StepTraceAnnotation via tfobs.step)",
    "keras_jax_spe4_fit": "the same Keras 3 JAX-backend fit compiled with "
                          "steps_per_execution=4 (16 steps: 4 executions, each a "
                          "jitted lax loop of 4 iterations), tfobs's Keras callback",
    "keras_jax_fit_plain": "the Keras 3 JAX-backend fit without any callback (no step "
                           "markers at all)",
    "keras_jax_tfdata_slow_fit": "Keras 3 fit with KERAS_BACKEND=jax over a tf.data pipeline "
                                 "(from_tensor_slices -> batch(64) -> a py_function sleeping "
                                 "4 ms per batch -> repeat, no prefetch): input-bound by "
                                 "construction (the step computes about 1 ms); tfobs's Keras "
                                 "callback",
    "remat_donate_steps": "a jitted SGD step of a 4-layer tanh MLP (256 wide, batch 128) "
                          "whose layers are wrapped in `jax.checkpoint` (rematerialised in "
                          "the backward pass) and whose weights are donated "
                          "(`donate_argnums=0`), marked `StepTraceAnnotation(\"train\", "
                          "step_num=i)` and waited for",
    "pure_callback_steps": "a jitted SGD step that calls `jax.pure_callback` to a numpy "
                           "function (a sort plus a 1 ms sleep: a host-side metric) on the "
                           "loss each step, marked `StepTraceAnnotation(\"train\", "
                           "step_num=i)` and waited for",
    "shard_map_psum_steps": "the SGD step written with `shard_map` over 2 CPU devices "
                            "(XLA_FLAGS=--xla_force_host_platform_device_count=2): the batch "
                            "split, gradients averaged with `lax.pmean`, weights replicated, "
                            "marked `StepTraceAnnotation(\"train\", step_num=i)` and waited for",
    "two_thread_steps": "two Python threads each running its own copy of the step on its "
                        "own weights, both marking `StepTraceAnnotation(\"train\", "
                        "step_num=i)` from 0 (steps of two threads that overlap in time, "
                        "with the same numbers)",
    "flax_nnx_optax_steps": "a Flax NNX MLP (128-256-256-10) trained with optax.adamw through "
                            "`nnx.jit` (model and nnx.Optimizer as arguments, updated in place), "
                            "batch 64 of numpy arrays, each step marked "
                            "`StepTraceAnnotation(\"train\", step_num=i)` and ended by reading the "
                            "loss",
    "optax_multisteps_steps": "a jitted step of an MLP with optax.MultiSteps(adam, "
                              "every_k_schedule=4): each marked step "
                              "(`StepTraceAnnotation(\"train\")`) is one micro-batch; every 4th "
                              "applies the accumulated update (lax.cond inside optax)",
    "vmap_per_example_grads_steps": "DP-SGD style: `jax.vmap(jax.grad(loss))` per-example gradients"
                                    " over 64 examples, per-example clipping, mean + noise, SGD; "
                                    "StepTraceAnnotation(\"train\") markers",
    "lax_switch_branch_steps": "a jitted step whose `lax.switch` picks one of 3 branches of 1, 4 or"
                               " 16 matmul rounds from the batch's data (step times vary 3 ways by "
                               "construction); StepTraceAnnotation(\"train\") markers",
    "nested_annotations_steps": "each StepTraceAnnotation(\"train\") step holds nested "
                                "`jax.profiler.TraceAnnotation` regions forward / backward / update"
                                " around three separate jitted functions (dispatched "
                                "asynchronously; one block_until_ready at the end of the step)",
    "threadpool_prefetch_steps": "a jitted step (~1 ms) fed by a "
                                 "concurrent.futures.ThreadPoolExecutor(max_workers=1) prefetching "
                                 "numpy batches 2 ahead, each batch ~12 ms of numpy + a 10 ms "
                                 "sleep: input-bound by construction; `future.result()` inside the "
                                 "StepTraceAnnotation(\"train\") step",
    "x64_mlp_steps": "a jitted SGD step of an MLP (128-512-512-10) in float64 "
                     "(`jax.config.update(\"jax_enable_x64\", True)`, float64 inputs and "
                     "weights), each step marked `StepTraceAnnotation(\"train\", step_num=i)` "
                     "and waited for",
    "scan_microbatch_epochs": "gradient accumulation inside one jitted step: `lax.scan` over 8 "
                              "micro-batches of 32 (grads summed, one SGD update); a Python "
                              "`for epoch` loop of 3 epochs x 4 marked steps "
                              "(`StepTraceAnnotation(\"train\")`), and between epochs, outside "
                              "any marker, a numpy permutation of the 4096-row dataset and a "
                              "jitted eval on 1024 rows read with float()",
    "device_get_every_5": "`StepTraceAnnotation(\"train\", step_num=i)` around an async-"
                          "dispatched jitted SGD step (no block_until_ready); every 5th step "
                          "reads its metrics dict with `jax.device_get` (a host sync that "
                          "waits for the queued steps)",
    "eval_every_4_steps": "`StepTraceAnnotation(\"train\", step_num=i)` steps of a jitted SGD "
                          "step, waited for; every 4th step also runs a jitted eval over 8 "
                          "held-out batches inside the same marker and reads the mean with "
                          "float() (periodic long steps)",
    "keras_jax_nojit_fit": "Keras 3 fit with KERAS_BACKEND=jax compiled with jit_compile=False "
                           "(each layer's jax.numpy op dispatched eagerly), the 256-512-512-1 "
                           "MLP of keras_jax_fit, 12 steps, tfobs's Keras callback",
    "compilation_cache_load": "a jitted SGD step of an MLP (128-1024-10, a squared error "
        "to one-hot targets) with JAX's persistent compilation cache on "
        "(`jax_compilation_cache_dir`, min compile time 0): the step is compiled and written "
        "to the cache before the trace, then `jax.clear_caches()` (as a restarted job "
        "starts) so the first marked step inside the trace traces, lowers and loads the "
        "executable from the cache instead of compiling; "
        "`StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "compilation_cache_load_no_tracer": "compilation_cache_load with the Python tracer off "
        "(`ProfileOptions.python_tracer_level = 0`, host tracer level 2, as tfobs's live "
        "windows): the first step's tracing and cache read write no event of their own; its "
        "lowering does (`lower_sharding_computation`), and no XLA compile follows it",
    "partial_last_batch_epochs": "two epochs over 800 rows in batches of 128 (six full "
        "batches and a last partial one of 32 rows per epoch, no drop_remainder), the jitted "
        "SGD step warmed on full batches only: the first epoch's last step traces and "
        "compiles the step for the 32-row shape inside its marker, the second epoch's reuses "
        "it; `StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "large_pytree_dispatch": "a jitted SGD step on a params dict of 144 small leaves (36 "
        "blocks of a 32x32 weight, bias, scale and shift, numpy values put on the device), "
        "its loss a Python loop summing over the blocks (unrolled into the program: about "
        "570 small XLA ops a step), each step passing and returning the whole tree: JAX "
        "flattens 144 inputs and builds 144 outputs per call; 7 steps, each "
        "`StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "sleep_throttled_steps": "a rate-limited loop: each marked step "
        "(`StepTraceAnnotation(\"train\", step_num=i)`) runs the jitted SGD step of the "
        "128-512-512-10 MLP, waits for it, then sleeps the rest of a 25 ms period "
        "(`time.sleep(period - elapsed)`, 40 steps a second) inside the marker",
    "bf16_cpu_steps": "the 128-512-512-10 MLP with bfloat16 weights, inputs and compute "
        "(`astype(jnp.bfloat16)`, SGD in bfloat16) on the CPU, jitted, each step marked "
        "`StepTraceAnnotation(\"train\", step_num=i)` and waited for; the same step in "
        "float32 timed outside the trace for comparison",
    "named_scope_step": "the 128-512-512-10 MLP's jitted SGD step with `jax.named_scope` "
        "regions (\"encoder\", \"head\", \"loss\", \"sgd_update\") inside it and the "
        "Python function that calls it decorated `@jax.profiler.annotate_function`, each "
        "step marked `StepTraceAnnotation(\"train\", step_num=i)` and waited for",
    "debug_nans_steps": "the 128-512-512-10 MLP's jitted SGD step with "
        "`jax.config.update(\"jax_debug_nans\", True)` left on (a debugging flag): every "
        "call checks its outputs for NaN on the host; `StepTraceAnnotation(\"train\", "
        "step_num=i)`, waited for",
    "lax_map_per_example_steps": "a jitted step computing per-example gradients with "
        "`jax.lax.map` over the batch's 32 rows (an XLA while loop of 32 iterations per "
        "step, the JAX twin of tf.map_fn), clipped and averaged, then an SGD update of a "
        "128-256-10 MLP; `StepTraceAnnotation(\"train\", step_num=i)`, waited for; the same "
        "step with `jax.vmap` timed outside the trace for comparison",
    "linalg_eigh_svd_steps": "a jitted step that whitens its batch with `jnp.linalg.eigh` of "
        "the 128x128 feature covariance and keeps the first layer's spectral norm at 1 with "
        "`jnp.linalg.svd` of its 128x512 weight (XLA CPU custom calls into LAPACK), then an "
        "SGD update of a 128-512-10 MLP; `StepTraceAnnotation(\"train\", step_num=i)`, "
        "waited for",
    "optax_clip_adamw_if_finite_steps": "a jitted step of a 128-512-512-10 MLP updated by "
        "`optax.apply_if_finite(optax.chain(optax.clip_by_global_norm(1.0), "
        "optax.adamw(1e-3)), max_consecutive_errors=5)`, every 4th batch holding an inf (the "
        "update skipped inside the program); `StepTraceAnnotation(\"train\", step_num=i)`, "
        "waited for (needs optax beside JAX: --jax-python of a venv that has it)",
    "np_stack_list_batches_steps": "marked steps (`StepTraceAnnotation(\"train\", "
        "step_num=i)`) whose batch arrives as a Python list of 256 numpy examples (3x64x64 "
        "float32 each) stacked with `np.stack` inside the step, then a jitted least-squares "
        "step on the flattened 256x12288 batch, waited for",
    "closure_constant_eval_steps": "marked steps (`StepTraceAnnotation(\"train\", "
        "step_num=i)`) of the jitted SGD step of a 128-128-128-10 MLP; every 4th step also "
        "evaluates with `jax.jit(lambda x, y: loss(params_np, x, y))`, a new function closing "
        "over the current weights as numpy arrays (137 KB baked into the program as "
        "constants; the capture's metadata plane holds each program's HLO, constants and "
        "all), so each evaluation traces and compiles a new program inside its step",
    "conv_cnn_cpu_steps": "a jitted SGD step of a small conv net on the CPU "
        "(`lax.conv_general_dilated`: 3x3 convs of 16 and 32 channels on 32x32x3 images, "
        "batch 32, NHWC, mean pool, dense 10), `StepTraceAnnotation(\"train\", "
        "step_num=i)`, waited for",
    "float16_loss_cpu_steps": "the 128-512-512-10 MLP's jitted SGD step with its logits cast "
        "to float16 and the softmax cross-entropy computed in float16 on the CPU (weights "
        "and update in float32), marked `StepTraceAnnotation(\"train\", step_num=i)` and "
        "waited for; the same step with a float32 loss timed outside the trace",
    "optax_lbfgs_fit_steps": "each marked step fits a 128x10 logistic regression to a "
        "batch of 1,024 rows with `optax.lbfgs()` (zoom line search) inside one jitted "
        "`lax.while_loop` (until the gradient norm is under 1e-3 or 15 iterations), warm "
        "started from the previous step's weights, then reads the iteration count; 8 "
        "steps (every iteration's XLA ops are traced)",
    "associative_scan_rnn_steps": "a gated linear recurrence (h = a*h + b, gates from 64-wide "
        "inputs) over 512 tokens, batch 16, computed with `jax.lax.associative_scan`, its "
        "jitted SGD step on a next-value regression marked and waited for",
    "vmap_batched_while_steps": "a jitted step whose targets come from per-example Newton "
        "solves (`jax.vmap` over a `lax.while_loop`, to 1e-6 or 200 rounds; a few rows of "
        "each batch need far more rounds than the rest), then the MLP's SGD update; each "
        "marked step reads the per-example round counts (`np.asarray`)",
    "topk_argsort_retrieval_steps": "in-batch retrieval against an 8,192x64 table: scores "
        "of 256 queries, `jax.lax.top_k(s, 64)` negatives with the positive for a softmax "
        "loss, and a rank metric from a full `jnp.argsort` of each row, in one jitted SGD "
        "step, marked and waited for",
    "device_permutation_epochs": "the 4,096-row data set held on the device, an epoch of 4 "
        "marked steps, each epoch starting with `jax.random.permutation` of the rows "
        "(between steps) and each step slicing its 64 indices and gathering `XD[idx]` "
        "outside jit before the jitted SGD step, waited for",
    "fsdp_all_gather_ppermute_four_devices": "the MLP (128-512-512-16) with every weight "
        "sharded by rows over four CPU devices "
        "(XLA_FLAGS=--xla_force_host_platform_device_count=4) and gathered for use inside "
        "`shard_map` (`lax.all_gather(tiled=True)`), gradients averaged with `lax.pmean`, "
        "the loss passed round a ring with `lax.ppermute`; batch 256 split 4 ways, marked "
        "and waited for",
    "metrics_tree_device_get_steps": "a 7-layer 256-wide MLP whose jitted SGD step returns "
        "the new weights and a dict of 36 scalar metrics (per layer: weight, gradient and "
        "bias norms, update ratio, largest gradient), each marked step reading the whole "
        "dict with `jax.device_get` and formatting a log line",
    "numpy_loss_read_steps": "the MLP's jitted SGD step on batches of 512, each marked "
        "step reading the loss and the logits' class counts with `np.asarray` (the usual "
        "per-step log line) and no other wait",
    "numpy_list_batches_steps": "each marked step dispatching the MLP's jitted SGD step "
        "(batches of 512, not waited for), then building the next batch from nested Python "
        "lists with `np.asarray(rows, np.float32)` while that program runs (a loader in the "
        "loop), the loss read every 4 steps",
    "f32_master_bf16_compute_steps": "mixed precision by hand (as `jmp` does): float32 "
        "master weights cast to bfloat16 for the forward and backward pass, a dynamic loss "
        "scale, gradients unscaled and checked finite in float32, one jitted step marked "
        "and waited for; the float32 step timed before the trace",
    "device_prefetch_thread_steps": "marked steps (`StepTraceAnnotation(\"train\", "
        "step_num=i)`) fed by a loader thread that builds each 256-row batch in numpy "
        "(about 2 ms) and copies it to the device with `jax.device_put` two batches ahead "
        "(flax's `prefetch_to_device` pattern, a `queue.Queue(maxsize=2)`), the step taking "
        "its batch with `get()` and running the MLP's jitted SGD step, waited for",
    "aot_compiled_steps": "the MLP's SGD step compiled ahead of time "
        "(`jax.jit(sgd_fn).lower(p, x, y).compile()` before the trace) and each marked step "
        "calling the `Compiled` object, waited for; the `jax.jit` step timed before the "
        "trace",
    "scipy_lbfgs_host_steps": "each marked step fits a 128x10 logistic regression to 1,024 "
        "rows with `scipy.optimize.minimize(method=\"L-BFGS-B\", jac=True, maxiter=25)` "
        "on the host, its objective a jitted `value_and_grad` called with scipy's float64 "
        "vector and read back (`float`, `np.asarray`) about 25 times a step; a jitted "
        "25-iteration gradient descent on the device timed before the trace",
    "python_env_rollout_steps": "policy-gradient training on a cart-pole environment "
        "written in numpy: each marked step rolls out 64 environment steps in Python, each "
        "action from a jitted policy call read back with `int()`, then one jitted update; "
        "the same rollout as one jitted `lax.scan` (environment in jax.numpy) timed before "
        "the trace",
    "pallas_interpret_steps": "the MLP's jitted SGD step on batches row-normalised by a "
        "Pallas kernel run with `interpret=True` (a grid of 8 blocks of 8x128: how Pallas "
        "kernels run on the CPU), marked and waited for; the same step with the "
        "normalisation in jax.numpy timed before the trace",
    "memory_profile_each_step": "the MLP's jitted SGD step, each marked step then calling "
        "`jax.profiler.device_memory_profile()` (a memory debugging line left in the loop: "
        "a pprof snapshot of every live buffer); the step without it timed before the "
        "trace",
    "bcoo_sparse_features_steps": "a jitted SGD step on hashed sparse features: a "
        "256x16384 `jax.experimental.sparse.BCOO` batch (16 ones a row) times a "
        "16384x128 embedding (`bcoo_dot_general`, gathers and scatter-adds), then a "
        "128-256-10 MLP; marked and waited for; the dense product timed before the trace",
    "scan_layers_remat_steps": "a 16-layer residual tanh MLP (256 wide, batch 128) whose "
        "stacked layers run in `lax.scan` under `jax.checkpoint` (an XLA while loop, "
        "rematerialised in the backward pass), its jitted SGD step marked and waited for; "
        "the layers unrolled without remat timed before the trace",
    "loader_thread_jnp_ops_steps": "marked steps taking their batch from a loader thread "
        "that normalises each 256x128 numpy batch with jax.numpy outside jit (`jnp.asarray`, "
        "mean, std, subtract, divide, `jnp.clip`: about ten small programs a batch, on the "
        "loader's thread) two batches ahead, then the MLP's jitted SGD step, waited for",
    "implicit_numpy_args_steps": "marked steps passing a 16 MiB numpy batch (4096x1024 "
        "float32) straight into a jitted least-squares step (no `jax.device_put`: the call "
        "copies it in), waited for; a `device_put` of the batch timed before the trace",
    "gc_collect_every_5_steps": "the MLP's jitted SGD step with a Python history of 200,000 "
        "small dicts kept by the job, every fifth marked step also calling `gc.collect()` "
        "(memory hygiene left in the loop), waited for",
    "python_grad_accum_microsteps": "gradient accumulation by a Python loop: each marked "
        "step calls a jitted `value_and_grad` on 4 micro-batches of 64 in turn, sums the "
        "gradients outside jit (`jax.tree.map(jnp.add, acc, g)`: an add per leaf, each its "
        "own program), then a jitted SGD update, waited for; the same accumulation as one "
        "jitted `lax.scan` over the 4 micro-batches timed before the trace",
    "host_jnp_metrics_history_steps": "the MLP's jitted SGD step, then metrics aggregated "
        "on the host outside jit every step: the loss appended to a Python list kept since "
        "the start (40 earlier losses), `jnp.stack` of the whole list, `jnp.mean`, "
        "`jnp.std` and a `float()` of each (a running loss print), waited for",
    "batchnorm_state_donate_steps": "a 128-512-512-10 MLP with batch normalisation written "
        "in jax.numpy: a jitted step `jax.jit(step, donate_argnums=(0, 1))` taking the "
        "parameters and the running batch statistics (mean, variance per layer, updated "
        "with momentum 0.9 and returned beside the new parameters), marked and waited for",
    "fori_inner_steps_per_call": "8 SGD updates per jitted call: `lax.fori_loop(0, 8, ...)` "
        "over 8 micro-batches of 64 inside one jit (JAX's steps-per-execution), each call "
        "marked `StepTraceAnnotation(\"train\", step_num=i)` and waited for; the job counts "
        "8 updates per marked step",
    "host_skip_nonfinite_steps": "a step that checks its gradient on the host before "
        "applying it: a jitted `value_and_grad` plus global norm, the norm read with "
        "`float()` and tested with `math.isfinite` in Python (a skip-bad-batch guard), then "
        "a jitted update, waited for; the fused step (guard inside jit with `jnp.where`) "
        "timed before the trace",
    "donate_backup_copy_steps": "the MLP's SGD step under `jax.jit(sgd_fn, "
        "donate_argnums=0)`, each marked step first keeping a copy of the parameters outside "
        "jit (`jax.tree.map(jnp.copy, p)`, so the donated buffers are never read after the "
        "call: a rollback copy, one program per leaf), waited for; the donated step without "
        "the copy timed before the trace",
    "host_lr_schedule_float_steps": "the MLP's SGD step taking its learning rate as an "
        "argument, the rate a warm-up-then-cosine schedule computed in Python each step and "
        "passed as a Python float (a traced, weakly typed scalar: one compile for all values), "
        "marked and "
        "waited for",
    "static_arg_every_4_steps": "the MLP's SGD step under `jax.jit(..., static_argnums=3)`, "
        "its gradient clip a Python float the job raises every fourth step (a clip "
        "schedule passed as a static argument): the steps where it changes trace and "
        "compile the step again inside their marker, the others reuse the cache; waited for",
    "pmap_numpy_reshape_steps": "the MLP's SGD step data-parallel over four CPU devices "
        "(XLA_FLAGS=--xla_force_host_platform_device_count=4) under `jax.pmap` with "
        "`lax.pmean` of the gradients and the loss, each marked step building its "
        "per-device batches with a numpy `reshape(4, 64, 128)` of 256 host rows passed "
        "straight to the pmapped call (copied in, split over the devices, by the call), "
        "waited for",
    "threadpool_augment_two_workers": "marked steps fed by a "
        "`concurrent.futures.ThreadPoolExecutor(max_workers=2)` running numpy augmentation "
        "(random flips, shifts, noise, a tanh contrast curve over 256 images of 16x8x8, "
        "no sleep) four batches ahead, `future.result()` then the MLP's jitted SGD step "
        "inside the marker, waited for: the workers' numpy competes for the machine's two "
        "cores with the step",
    "cond_traced_flag_alternating": "a jitted step holding `lax.cond(flag, heavy, light, "
        "...)` on a traced boolean the job flips every step (both branches compiled into "
        "one program): on odd steps the heavy branch adds a 24-round power-iteration "
        "spectral penalty on the 512x512 weight before the SGD update; marked and waited "
        "for",
    "prngkey_host_each_step": "the MLP's jitted SGD step with dropout, each marked step "
        "making its key on the host with `jax.random.PRNGKey(seed + i)` and "
        "`jax.random.split(key, 3)` (small programs dispatched outside jit) and passing a "
        "subkey in, waited for; the key folded in inside jit (`jax.random.fold_in` of a "
        "traced step number) timed before the trace",
    "step_numbers_skip_eval_between": "marked train steps numbered by a global counter "
        "that an evaluation also advances: every fourth number goes to an unmarked jitted "
        "evaluation over 4 held-out batches read with `float()`, between the train steps "
        "(train step numbers 5-7, 9-11, 13-15, 17-19 in the trace; evaluations at 4, 8, "
        "12 and 16, compiled before the trace), each train step waited for",
    "mesh_2x2_tensor_parallel_steps": "the 128-512-512-10 MLP's SGD step under `jax.jit` "
        "over a 2x2 mesh of CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4, "
        "axes data and model): hidden weights sharded Megatron-style by `NamedSharding` "
        "(columns then rows over model), the 256-row batch over data, the compiler's own "
        "collectives (no shard_map), `out_shardings` kept and the weights donated "
        "(`donate_argnums=0`); `StepTraceAnnotation(\"train\", step_num=i)`, waited for",
    "step_num_restart_each_epoch": "three epochs of four marked steps whose "
        "`StepTraceAnnotation(\"train\", step_num=k)` restarts at 0 each epoch (numbers "
        "0-3, 0-3, 0-3 in the trace: the epoch's batch index, not a global step), the "
        "jitted SGD step waited for",
    "while_loop_epoch_early_stop": "each marked step is a whole epoch in one jitted call: "
        "a `lax.while_loop` over the 64 device-resident batches of 64 rows "
        "(`lax.dynamic_slice`), an SGD update per iteration, stopping early once the "
        "batch loss falls under 1.9 (labels from a fixed linear teacher, so later epochs "
        "stop sooner); the iteration count "
        "read with `int()` after each epoch",
    "cpu_sync_dispatch_steps": "the jitted SGD step with "
        "`jax.config.update(\"jax_cpu_enable_async_dispatch\", False)` (the CPU client "
        "runs each program before the call returns), marked "
        "`StepTraceAnnotation(\"train\", step_num=i)`, no `block_until_ready` in the "
        "loop",
    "async_epoch_end_block_steps": "three epochs of four marked steps "
        "(`StepTraceAnnotation(\"train\", step_num=i)` around the jitted SGD call alone, "
        "nothing waited for in the step: JAX's asynchronous dispatch queues each step's "
        "program), one `jax.block_until_ready` of the weights and a `float()` of the last "
        "loss at each epoch's end, outside the markers; each epoch's wall time over its "
        "steps printed beside the markers' own times",
    "rnn_scan_unroll8_steps": "a tanh RNN (128 inputs, 256 hidden, 64 time steps, batch "
        "64) run by `jax.lax.scan(cell, h0, xs, unroll=8)` and a linear read-out of the last "
        "state, its jitted SGD step marked and waited for; the same step with `unroll=1` "
        "timed before the trace",
    "linalg_solve_grad_x64_steps": "float64 (`jax_enable_x64`) marked steps: the jitted "
        "gradient of a ridge loss whose weights come from `jnp.linalg.solve` of a 256x256 "
        "system built from the batch (`X^T X + l I`), a gradient step on the penalty, "
        "waited for",
    "host_tree_map_250_leaves_steps": "a model of 250 small leaves (250 64x64 float32 "
        "layers in a dict), its gradient computed by a jitted function and the SGD update "
        "applied outside jit with `jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)` "
        "(500 small dispatched programs a step), marked and waited for; the update inside "
        "the jitted step timed before the trace",
    "nested_trace_annotations_no_step": "the MLP's jitted SGD step under four nested "
        "`jax.profiler.TraceAnnotation`s (`epoch`, `batch_loop`, `train_step`, "
        "`forward_backward`) and no StepTraceAnnotation, waited for",
    "thread_np_save_checkpoint_steps": "the MLP's jitted SGD step, marked and waited for; "
        "every fourth step hands the parameters to a writer thread that calls `np.save` "
        "on each device array (device-to-host copies and a 1.3 MB file write beside the "
        "next steps)",
    "custom_vjp_clip_layers_steps": "an MLP (128-512-512-10) whose hidden layers use a "
        "`jax.custom_jvp` softplus and a `jax.custom_vjp` identity that clips the "
        "gradient flowing back through it to [-0.01, 0.01], its jitted SGD step marked and "
        "waited for; the plain MLP's step timed before the trace",
    "hvp_newton_cg_steps": "marked Newton-CG steps of a 1,290-weight softmax regression "
        "(1,024 rows a step): one jitted function computing the gradient and solving "
        "`H d = g` with `jax.scipy.sparse.linalg.cg` (20 iterations at most) over "
        "Hessian-vector products `jax.jvp(jax.grad(loss))`, waited for",
    "jax_scipy_bfgs_minimize_steps": "marked steps that each refit a 1,290-weight softmax "
        "regression on a new 1,024-row batch with `jax.scipy.optimize.minimize(..., "
        "method=\"BFGS\", options={\"maxiter\": 30})` inside one jitted function (a "
        "`lax.while_loop` of line searches), warm-started from the last weights, waited "
        "for; each fit's iteration count read after the trace",
    "replay_buffer_donate_steps": "an off-policy style loop: each marked step writes 64 "
        "new rows into a 16,384-row device replay buffer with a jitted "
        "`lax.dynamic_update_slice` (buffer donated), splits a PRNG key on the host, and "
        "runs a jitted step that samples 256 rows with `jax.random.randint` and takes an "
        "SGD step on them, waited for",
    "prefetch_generator_device_put_steps": "flax's `prefetch_to_device` written by hand as a "
        "generator on the training thread (a deque kept two batches ahead, each numpy "
        "batch built with a 256x128x8 `np.tanh(...).mean(axis=2)` augmentation and copied "
        "with `jax.device_put`); each marked step splits a PRNG key on the host, takes "
        "`next()` of the generator and runs a jitted SGD step with input noise from that "
        "key, waited for; each batch's build time printed",
}
# Cases whose child stands alone (no tfobs import): the Flax and optax ones need a Python
# with flax and optax beside JAX (--jax-python).
STANDALONE = {"flax_nnx_optax_steps", "optax_multisteps_steps", "vmap_per_example_grads_steps",
       "lax_switch_branch_steps", "nested_annotations_steps", "threadpool_prefetch_steps"}

# Pieces the children's texts share: the loss, the MLP's parameters and forward pass, and
# the loop children's 4,096 rows of data with the provenance's first fields.
_XENT = """def xent(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
"""
_INIT_MLP = """def init_mlp(key, sizes):
    ks = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) * (1 / a) ** 0.5, jnp.zeros(b))
            for k, a, b in zip(ks, sizes[:-1], sizes[1:])]
"""
_MLP = """def mlp(p, x):
    for w, b in p[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = p[-1]
    return x @ w + b
"""
_LOOP_DATA = """rng = np.random.default_rng(0)
XALL = rng.random((4096, 128)).astype(np.float32)
YALL = rng.integers(0, 10, (4096,))
params = {"jax": jax.__version__, "python": sys.version.split()[0]}
"""

_STANDALONE_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
X = rng.random((16, 64, 128), np.float32)
Y = rng.integers(0, 10, (16, 64))
params = {"jax": jax.__version__, "python": sys.version.split()[0], "steps": 12}
extra = {}
""" + _XENT + _INIT_MLP + _MLP + """if case == "flax_nnx_optax_steps":
    from flax import nnx
    import optax, flax
    params["flax"], params["optax"] = flax.__version__, optax.__version__
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(128, 256, rngs=rngs)
            self.l2 = nnx.Linear(256, 256, rngs=rngs)
            self.l3 = nnx.Linear(256, 10, rngs=rngs)
        def __call__(self, x):
            return self.l3(nnx.relu(self.l2(nnx.relu(self.l1(x)))))
    model = MLP(nnx.Rngs(0))
    try:
        opt = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    except TypeError:
        opt = nnx.Optimizer(model, optax.adamw(1e-3))
    @nnx.jit
    def train_step(model, opt, x, y):
        loss, grads = nnx.value_and_grad(lambda m: xent(m(x), y))(model)
        try:
            opt.update(model, grads)
        except TypeError:
            opt.update(grads)
        return loss
    def one(i):
        return float(train_step(model, opt, X[i % 16], Y[i % 16]))
elif case == "optax_multisteps_steps":
    import optax
    params["optax"] = optax.__version__
    p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
    tx = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4)
    state = tx.init(p)
    @jax.jit
    def step(p, state, x, y):
        loss, g = jax.value_and_grad(lambda p: xent(mlp(p, x), y))(p)
        u, state = tx.update(g, state, p)
        return optax.apply_updates(p, u), state, loss
    def one(i):
        global p, state
        p, state, loss = step(p, state, X[i % 16], Y[i % 16])
        jax.block_until_ready(p)
    extra["every_k"] = 4
elif case == "vmap_per_example_grads_steps":
    p = init_mlp(jax.random.PRNGKey(0), [128, 256, 10])
    def ex_loss(p, x, y):
        return xent(mlp(p, x[None]), y[None])
    @jax.jit
    def step(p, x, y, key):
        g = jax.vmap(jax.grad(ex_loss), in_axes=(None, 0, 0))(p, x, y)
        norms = jnp.sqrt(sum(jnp.sum(t.reshape(t.shape[0], -1) ** 2, 1)
                             for t in jax.tree.leaves(g)))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        keys = jax.random.split(key, len(jax.tree.leaves(g)))
        leaves = [jnp.mean(t * scale.reshape((-1,) + (1,) * (t.ndim - 1)), 0)
                  + 0.01 * jax.random.normal(k, t.shape[1:])
                  for t, k in zip(jax.tree.leaves(g), keys)]
        g = jax.tree.unflatten(jax.tree.structure(p), leaves)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g)
    key = jax.random.PRNGKey(1)
    def one(i):
        global p
        p = step(p, X[i % 16], Y[i % 16], jax.random.fold_in(key, i))
        jax.block_until_ready(p)
elif case == "lax_switch_branch_steps":
    w = jnp.eye(256) * 0.5
    def rounds(n):
        def f(w, x):
            def body(_, h):
                return jnp.tanh(h @ w)
            h = jax.lax.fori_loop(0, n, body, x)
            return w - 1e-3 * (h.T @ h) / h.shape[0]
        return f
    @jax.jit
    def step(w, x, k):
        return jax.lax.switch(k, [rounds(1), rounds(4), rounds(16)], w, x)
    XS = rng.random((16, 256, 256), np.float32)
    branches = []
    def one(i):
        global w
        k = int(XS[i % 16, 0, 0] * 3) % 3  # the data picks the branch
        branches.append(k)
        w = step(w, XS[i % 16], k)
        w.block_until_ready()
elif case == "nested_annotations_steps":
    p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
    fwd = jax.jit(lambda p, x, y: xent(mlp(p, x), y))
    bwd = jax.jit(jax.grad(lambda p, x, y: xent(mlp(p, x), y)))
    upd = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - 0.01 * b, p, g))
    def one(i):
        global p
        x, y = X[i % 16], Y[i % 16]
        with jax.profiler.TraceAnnotation("forward"):
            loss = fwd(p, x, y)
        with jax.profiler.TraceAnnotation("backward"):
            g = bwd(p, x, y)
        with jax.profiler.TraceAnnotation("update"):
            p = upd(p, g)
        jax.block_until_ready((p, loss))
elif case == "threadpool_prefetch_steps":
    from concurrent.futures import ThreadPoolExecutor
    p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
    @jax.jit
    def step(p, x, y):
        g = jax.grad(lambda p: xent(mlp(p, x), y))(p)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g)
    def make_batch(i):
        r = np.random.default_rng(i)
        time.sleep(0.010)
        raw = r.random((64, 128, 16), np.float32)
        return np.tanh(raw).mean(axis=2), r.integers(0, 10, (64,))
    pool = ThreadPoolExecutor(max_workers=1)
    ahead = [pool.submit(make_batch, j) for j in range(2)]
    nxt = [2]
    waits = []
    def one(i):
        global p
        t = time.perf_counter()
        x, y = ahead.pop(0).result()
        waits.append(time.perf_counter() - t)
        ahead.append(pool.submit(make_batch, nxt[0])); nxt[0] += 1
        p = step(p, x, y)
        jax.block_until_ready(p)
else:
    raise SystemExit("unknown case " + case)
times = []
def run(i):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        t = time.perf_counter()
        one(i)
        times.append(time.perf_counter() - t)
for i in range(3):
    run(i)
if case == "threadpool_prefetch_steps":
    time.sleep(0.02)  # the loader gets ahead before the trace, as after a warm-up
times.clear()
if case == "lax_switch_branch_steps":
    branches.clear()
if case == "threadpool_prefetch_steps":
    waits.clear()
with jax.profiler.trace(logdir):
    for i in range(3, 3 + params["steps"]):
        run(i)
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if case == "lax_switch_branch_steps":
    params["branch_per_step"] = branches
if case == "threadpool_prefetch_steps":
    params["measured_wait_ms"] = [round(t * 1e3, 3) for t in waits]
params.update(extra)
print(json.dumps(params))
"""


# The loop children's batches (the 4,096 rows of XALL/YALL, in order) and marked steps
# (each step's own time into `times`, for the provenance).
_BATCHES_AND_MARKS = """def batch(i, n=64):
    j = (i * n) % 4096
    return XALL[j:j + n], YALL[j:j + n]
times, extra = [], {}
def marked(i, body):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        t = time.perf_counter()
        body(i)
        times.append(time.perf_counter() - t)
"""


# Cases on a larger MLP with their own loops (epochs, evaluations, host reads every N
# steps): a child of their own, needing JAX alone.
MLP_LOOPS = {"x64_mlp_steps", "scan_microbatch_epochs", "device_get_every_5", "eval_every_4_steps"}

_MLP_LOOPS_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
if case == "x64_mlp_steps":
    jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
dt = np.float64 if case == "x64_mlp_steps" else np.float32
XALL = rng.random((4096, 128)).astype(dt)
YALL = rng.integers(0, 10, (4096,))
params = {"jax": jax.__version__, "python": sys.version.split()[0]}
""" + _XENT + """def init_mlp(key, sizes):
    ks = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b), dtype=dt) * (1 / a) ** 0.5, jnp.zeros(b, dt))
            for k, a, b in zip(ks, sizes[:-1], sizes[1:])]
""" + _MLP + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
def loss_fn(p, x, y):
    return xent(mlp(p, x), y)
@jax.jit
def sgd(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    gn = jnp.sqrt(sum(jnp.sum(t * t) for t in jax.tree.leaves(g)))
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), {"loss": loss, "grad_norm": gn}
@jax.jit
def evaluate(p, x, y):
    return loss_fn(p, x, y)
""" + _BATCHES_AND_MARKS + """if case == "x64_mlp_steps":
    def body(i):
        global p
        p, m = sgd(p, *batch(i))
        jax.block_until_ready(p)
    def loop(first, n):
        for i in range(first, first + n):
            marked(i, body)
    steps = 12
    extra["dtype"] = str(p[0][0].dtype)
elif case == "scan_microbatch_epochs":
    @jax.jit
    def accum(p, xs, ys):
        def mb(g, xy):
            return jax.tree.map(jnp.add, g, jax.grad(loss_fn)(p, *xy)), None
        g0 = jax.tree.map(jnp.zeros_like, p)
        g, _ = jax.lax.scan(mb, g0, (xs, ys))
        return jax.tree.map(lambda a, b: a - 0.01 * b / 8, p, g)
    order = np.arange(4096)
    between = []
    def body(i):
        global p
        j = (i % 16) * 256
        idx = order[j:j + 256]
        p = accum(p, XALL[idx].reshape(8, 32, 128), YALL[idx].reshape(8, 32))
        jax.block_until_ready(p)
    state = {"step": 0}
    def loop(first, n):
        global order
        epochs = n // 4
        for e in range(epochs):
            for _ in range(4):
                marked(state["step"], body)
                state["step"] += 1
            t = time.perf_counter()
            order = rng.permutation(4096)
            float(evaluate(p, XALL[:1024], YALL[:1024]))
            between.append(time.perf_counter() - t)
    steps = 12
elif case == "device_get_every_5":
    reads, read_ms = [], []
    def body(i):
        global p
        p, m = sgd(p, *batch(i))
        if i % 5 == 4:
            t = time.perf_counter()
            reads.append(i)
            jax.device_get(m)
            read_ms.append(time.perf_counter() - t)
    def loop(first, n):
        for i in range(first, first + n):
            marked(i, body)
        jax.block_until_ready(p)
    steps = 20
elif case == "eval_every_4_steps":
    evals, eval_ms = [], []
    def body(i):
        global p
        p, m = sgd(p, *batch(i))
        jax.block_until_ready(p)
        if i % 4 == 3:
            t = time.perf_counter()
            tot = 0.0
            for k in range(8):
                tot += float(evaluate(p, XALL[3072 + 64 * k:3136 + 64 * k],
                                      YALL[3072 + 64 * k:3136 + 64 * k]))
            evals.append(i)
            eval_ms.append(time.perf_counter() - t)
    def loop(first, n):
        for i in range(first, first + n):
            marked(i, body)
    steps = 12
else:
    raise SystemExit("unknown case " + case)
if case == "scan_microbatch_epochs":
    loop(0, 4)
    state["step"] = 0
else:
    loop(0, 5 if case == "device_get_every_5" else 4)
jax.block_until_ready(p)
times.clear()
for v in ("between", "read_ms", "eval_ms", "reads", "evals"):
    if v in globals():
        globals()[v].clear()
with jax.profiler.trace(logdir):
    loop(5 if case == "device_get_every_5" else 4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if case == "scan_microbatch_epochs":
    params["measured_between_epochs_ms"] = [round(t * 1e3, 3) for t in between]
if case == "device_get_every_5":
    params["device_get_steps"] = reads
    params["measured_device_get_ms"] = [round(t * 1e3, 3) for t in read_ms]
if case == "eval_every_4_steps":
    params["eval_steps"] = evals
    params["measured_eval_ms"] = [round(t * 1e3, 3) for t in eval_ms]
params.update(extra)
print(json.dumps(params))
"""

# Cases of the job's own settings and shapes (a persistent compilation cache, a partial last
# batch, a large params tree, a rate limit, bfloat16, named scopes, jax_debug_nans): a child
# of their own, needing JAX alone.
FRESH_LOOPS = {"compilation_cache_load", "compilation_cache_load_no_tracer",
               "partial_last_batch_epochs", "large_pytree_dispatch",
               "sleep_throttled_steps", "bf16_cpu_steps", "named_scope_step",
               "debug_nans_steps"}

_FRESH_LOOPS_CHILD = """
import json, sys, time, os, tempfile
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
""" + _LOOP_DATA + """cache_case = case.startswith("compilation_cache_load")
if cache_case:
    cache_dir = tempfile.mkdtemp(prefix="jaxcache-")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    from jax._src import monitoring
    events = []
    monitoring.register_event_listener(lambda name, **kw: events.append(name))
    dur_events = []
    monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: dur_events.append((name, secs)))
""" + _XENT + """def init_mlp(key, sizes, dt=jnp.float32):
    ks = jax.random.split(key, len(sizes) - 1)
    return [((jax.random.normal(k, (a, b)) * (1 / a) ** 0.5).astype(dt), jnp.zeros(b, dt))
            for k, a, b in zip(ks, sizes[:-1], sizes[1:])]
""" + _MLP + """def loss_fn(p, x, y):
    return xent(mlp(p, x).astype(jnp.float32), y)
if cache_case:  # a squared error to one-hot targets: fewer ops to trace than log_softmax's
    def loss_fn(p, x, y):
        return jnp.mean((mlp(p, x) - jax.nn.one_hot(y, 10)) ** 2)
def sgd_fn(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: (a - 0.01 * b).astype(a.dtype), p, g), loss
""" + _BATCHES_AND_MARKS + """sizes = [128, 512, 512, 10]
if cache_case:
    sizes = [128, 1024, 10]
p = init_mlp(jax.random.PRNGKey(0), sizes)
sgd = jax.jit(sgd_fn)
steps = 12
def body(i):
    global p
    p, loss = sgd(p, *batch(i))
    jax.block_until_ready(p)
def loop(first, n):
    for i in range(first, first + n):
        marked(i, body)
def warm():
    loop(0, 4)
if cache_case:
    def warm():
        t = time.perf_counter()
        loop(0, 4)  # compiles and writes the cache
        extra["first_compile_step_ms"] = round(times[0] * 1e3, 3)
        jax.clear_caches()  # a restarted job: nothing in memory, the cache on disk
        extra["cache_files"] = len(os.listdir(cache_dir))
        events.clear(); dur_events.clear()
elif case == "partial_last_batch_epochs":
    sizes_seen = []
    def body(i):
        global p
        k = i % 7
        x, y = XALL[k * 128:min(k * 128 + 128, 800)], YALL[k * 128:min(k * 128 + 128, 800)]
        sizes_seen.append(int(x.shape[0]))
        p, loss = sgd(p, x, y)
        jax.block_until_ready(p)
    def warm():
        for i in range(4):
            marked(i, body)
    steps = 14
    def loop(first, n):
        for i in range(n):
            marked(i, body)
elif case == "large_pytree_dispatch":
    steps = 7  # 36 blocks and 7 steps keep the capture near 1.5 MB (the program's HLO is
    # most of it, about 24 KB a block)
    # numpy values put on the device: no program of JAX's own to initialise them (the
    # capture holds every program the process compiled)
    f32 = np.float32
    p = {f"block_{j:03d}": {k: jax.device_put(v) for k, v in (
             ("w", (rng.standard_normal((32, 32)) * 0.1).astype(f32)),
             ("b", np.zeros(32, f32)), ("scale", np.ones(32, f32)), ("shift", np.zeros(32, f32)))}
         for j in range(36)}
    def tree_loss(p, x, y):
        h = x[:, :32]
        tot = 0.0
        for name in sorted(p):
            q = p[name]
            tot = tot + jnp.mean((jnp.tanh(h @ q["w"] + q["b"]) * q["scale"] + q["shift"]) ** 2)
        return tot / len(p)
    @jax.jit
    def sgd(p, x, y):
        loss, g = jax.value_and_grad(tree_loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    extra["leaves"] = len(jax.tree.leaves(p))
elif case == "sleep_throttled_steps":
    period = 0.025
    slept = []
    def body(i):
        global p
        t = time.perf_counter()
        p, loss = sgd(p, *batch(i))
        jax.block_until_ready(p)
        rest = period - (time.perf_counter() - t)
        if rest > 0:
            time.sleep(rest)
        slept.append(max(rest, 0.0))
    extra["period_ms"] = 25.0
elif case == "bf16_cpu_steps":
    p = init_mlp(jax.random.PRNGKey(0), sizes, jnp.bfloat16)
    p32 = init_mlp(jax.random.PRNGKey(0), sizes)
    def body(i):
        global p
        x, y = batch(i)
        p, loss = sgd(p, x.astype(jnp.bfloat16), y)
        jax.block_until_ready(p)
    def warm():
        global p32
        loop(0, 4)
        t32 = []
        for i in range(4):
            p32, l = sgd(p32, *batch(i)); jax.block_until_ready(p32)
        for i in range(12):
            t = time.perf_counter()
            p32, l = sgd(p32, *batch(i)); jax.block_until_ready(p32)
            t32.append(time.perf_counter() - t)
        extra["measured_f32_step_ms"] = [round(t * 1e3, 3) for t in t32]
    extra["dtype"] = "bfloat16"
elif case == "named_scope_step":
    def mlp_scoped(p, x):
        with jax.named_scope("encoder"):
            for w, b in p[:-1]:
                x = jax.nn.relu(x @ w + b)
        with jax.named_scope("head"):
            w, b = p[-1]
            return x @ w + b
    def scoped_loss(p, x, y):
        logits = mlp_scoped(p, x)
        with jax.named_scope("loss"):
            return xent(logits, y)
    @jax.jit
    def sgd(p, x, y):
        loss, g = jax.value_and_grad(scoped_loss)(p, x, y)
        with jax.named_scope("sgd_update"):
            return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    @jax.profiler.annotate_function
    def train_step(p, x, y):
        p, loss = sgd(p, x, y)
        return jax.block_until_ready(p), loss
    def body(i):
        global p
        p, loss = train_step(p, *batch(i))
elif case == "debug_nans_steps":
    jax.config.update("jax_debug_nans", True)
else:
    raise SystemExit("unknown case " + case)
warm()
jax.block_until_ready(p)
times.clear()
for v in ("sizes_seen", "slept"):
    if v in globals():
        globals()[v].clear()
options = None
if case == "compilation_cache_load_no_tracer":  # as tfobs's live windows: no Python tracer
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level, options.host_tracer_level = 0, 2
    extra["python_tracer_level"] = 0
with jax.profiler.trace(logdir, profiler_options=options):
    loop(4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if cache_case:
    params["cache_events"] = sorted(set(e for e in events if "cache" in e))
    params["cache_durations_s"] = {n: round(s, 4) for n, s in dur_events
                                   if "cache" in n or "compile" in n}
if case == "partial_last_batch_epochs":
    params["batch_rows"] = sizes_seen
if case == "sleep_throttled_steps":
    params["measured_sleep_ms"] = [round(t * 1e3, 3) for t in slept]
params.update(extra)
print(json.dumps(params))
"""

# Cases of numerical kinds inside the step (a per-example lax.map loop, LAPACK custom calls,
# optax's guarded update, batches stacked from lists, closed-over constants, convolutions,
# a float16 loss): their own child; the optax one needs optax beside JAX (--jax-python).
NUMERIC_STEPS = {"lax_map_per_example_steps", "linalg_eigh_svd_steps",
       "optax_clip_adamw_if_finite_steps", "np_stack_list_batches_steps",
       "closure_constant_eval_steps", "conv_cnn_cpu_steps", "float16_loss_cpu_steps"}

_NUMERIC_STEPS_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
""" + _LOOP_DATA + _XENT + _INIT_MLP + _MLP + """def loss_fn(p, x, y):
    return xent(mlp(p, x), y)
def sgd_fn(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
""" + _BATCHES_AND_MARKS + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
sgd = jax.jit(sgd_fn)
steps = 12
def body(i):
    global p
    p, loss = sgd(p, *batch(i))
    jax.block_until_ready(p)
def compare(fn, name):
    # fn(i) one step of the other version, timed outside the trace
    for i in range(3):
        fn(i)
    ts = []
    for i in range(12):
        t = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t)
    extra[name] = [round(t * 1e3, 3) for t in ts]
if case == "lax_map_per_example_steps":
    p = init_mlp(jax.random.PRNGKey(0), [128, 256, 10])
    def ex_grad(p, xy):
        x, y = xy
        return jax.grad(loss_fn)(p, x[None], y[None])
    def clip_mean_update(p, g):
        norms = jnp.sqrt(sum(jnp.sum(t.reshape(t.shape[0], -1) ** 2, 1)
                             for t in jax.tree.leaves(g)))
        scale = jnp.minimum(1.0, 1.0 / (norms + 1e-6))
        g = jax.tree.map(lambda t: jnp.mean(t * scale.reshape((-1,) + (1,) * (t.ndim - 1)), 0), g)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g)
    @jax.jit
    def sgd(p, x, y):
        return clip_mean_update(p, jax.lax.map(lambda xy: ex_grad(p, xy), (x, y))), 0.0
    @jax.jit
    def sgd_vmap(p, x, y):
        g = jax.vmap(lambda x, y: ex_grad(p, (x, y)))(x, y)
        return clip_mean_update(p, g), 0.0
    def body(i):
        global p
        p, _ = sgd(p, *batch(i, 32))
        jax.block_until_ready(p)
    p_v = p
    def vmap_one(i):
        global p_v
        p_v, _ = sgd_vmap(p_v, *batch(i, 32)); jax.block_until_ready(p_v)
    steps = 8  # 32 iterations a step, each leaving its events: under 1 MB
    extra["map_iterations_per_step"] = 32
elif case == "linalg_eigh_svd_steps":
    p = init_mlp(jax.random.PRNGKey(0), [128, 512, 10])
    def whiten(x):
        xc = x - x.mean(0)
        cov = xc.T @ xc / x.shape[0] + 1e-3 * jnp.eye(x.shape[1])
        evals, evecs = jnp.linalg.eigh(cov)
        return xc @ evecs / jnp.sqrt(evals + 1e-5) @ evecs.T
    @jax.jit
    def sgd(p, x, y):
        p, loss = sgd_fn(p, whiten(x), y)
        (w, b), rest = p[0], p[1:]
        s = jnp.linalg.svd(w, compute_uv=False)
        return [(w / jnp.maximum(s[0], 1.0), b)] + rest, loss
elif case == "optax_clip_adamw_if_finite_steps":
    import optax
    params["optax"] = optax.__version__
    tx = optax.apply_if_finite(optax.chain(optax.clip_by_global_norm(1.0),
                                           optax.adamw(1e-3)), max_consecutive_errors=5)
    opt_state = tx.init(p)
    @jax.jit
    def sgd(p, opt_state, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, opt_state = tx.update(g, opt_state, p)
        return optax.apply_updates(p, u), opt_state, loss
    skipped = []
    def body(i):
        global p, opt_state
        x, y = batch(i)
        if i % 4 == 3:
            x = x.copy(); x[0, 0] = np.inf
        p, opt_state, loss = sgd(p, opt_state, x, y)
        jax.block_until_ready(p)
        skipped.append(int(opt_state.total_notfinite))
elif case == "np_stack_list_batches_steps":
    EX = [rng.random((3, 64, 64)).astype(np.float32) for _ in range(512)]
    YEX = rng.random((512,)).astype(np.float32)
    w = jnp.zeros((3 * 64 * 64,))
    @jax.jit
    def lsq(w, x, y):
        x = x.reshape(x.shape[0], -1)
        g = x.T @ (x @ w - y) / x.shape[0]
        return w - 1e-4 * g
    stack_ms = []
    def body(i):
        global w
        j = (i * 256) % 512
        rows = [EX[(j + k) % 512] for k in range(256)]  # the loader's list of examples
        t = time.perf_counter()
        x = np.stack(rows)
        y = np.stack([YEX[(j + k) % 512] for k in range(256)])
        stack_ms.append(round((time.perf_counter() - t) * 1e3, 3))
        w = lsq(w, x, y)
        jax.block_until_ready(w)
    p = w
elif case == "closure_constant_eval_steps":
    p = init_mlp(jax.random.PRNGKey(0), [128, 128, 128, 10])
    steps = 8  # two evaluations: each program's HLO, its constants too, is in the capture
    evals = []
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
        jax.block_until_ready(p)
        if i % 4 == 3:
            t = time.perf_counter()
            p_np = jax.device_get(p)  # the current weights as numpy: constants once closed over
            ev = jax.jit(lambda x, y: loss_fn(p_np, x, y))
            v = float(ev(XALL[:512], YALL[:512]))
            evals.append(round((time.perf_counter() - t) * 1e3, 3))
    extra["constant_bytes"] = int(sum(a.size * 4 for a in jax.tree.leaves(p)))
elif case == "conv_cnn_cpu_steps":
    IMG = rng.random((256, 32, 32, 3)).astype(np.float32)
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    p = {"c1": jax.random.normal(k[0], (3, 3, 3, 16)) * 0.2,
         "c2": jax.random.normal(k[1], (3, 3, 16, 32)) * 0.1,
         "d": jax.random.normal(k[2], (32, 10)) * 0.1}
    dn = ("NHWC", "HWIO", "NHWC")
    def cnn(p, x):
        h = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME",
                                                     dimension_numbers=dn))
        h = jax.nn.relu(jax.lax.conv_general_dilated(h, p["c2"], (2, 2), "SAME",
                                                     dimension_numbers=dn))
        return h.mean((1, 2)) @ p["d"]
    @jax.jit
    def sgd(p, x, y):
        loss, g = jax.value_and_grad(lambda p: xent(cnn(p, x), y))(p)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    def body(i):
        global p
        j = (i * 32) % 256
        p, loss = sgd(p, IMG[j:j + 32], YALL[j:j + 32])
        jax.block_until_ready(p)
elif case == "float16_loss_cpu_steps":
    def xent16(logits, y):
        l16 = logits.astype(jnp.float16)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(l16), y[:, None], 1))
    @jax.jit
    def sgd(p, x, y):
        loss, g = jax.value_and_grad(lambda p: xent16(mlp(p, x), y))(p)
        return jax.tree.map(lambda a, b: (a - 0.01 * b).astype(a.dtype), p, g), loss
    sgd32 = jax.jit(sgd_fn)
    p32 = p
    def f32_one(i):
        global p32
        p32, _ = sgd32(p32, *batch(i)); jax.block_until_ready(p32)
    extra["loss_dtype"] = "float16"
else:
    raise SystemExit("unknown case " + case)
def loop(first, n):
    for i in range(first, first + n):
        marked(i, body)
loop(0, 4)
if case == "lax_map_per_example_steps":
    compare(vmap_one, "measured_vmap_step_ms")
if case == "float16_loss_cpu_steps":
    compare(f32_one, "measured_f32_loss_step_ms")
jax.block_until_ready(p)
times.clear()
for v in ("skipped", "stack_ms", "evals"):
    if v in globals():
        globals()[v].clear()
with jax.profiler.trace(logdir):
    loop(4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if case == "optax_clip_adamw_if_finite_steps":
    params["total_notfinite_after_step"] = skipped
if case == "np_stack_list_batches_steps":
    params["measured_stack_ms"] = stack_ms
if case == "closure_constant_eval_steps":
    params["measured_eval_ms"] = evals
params.update(extra)
print(json.dumps(params))
"""

# Cases of the trainer's own loops (a Flax TrainState, a train/eval flag, a callback every
# N steps, batches from a memmap, a data-dependent while_loop, caches cleared each epoch):
# their own child; the Flax one needs flax and optax beside JAX (--jax-python).
TRAINER_LOOPS = {"flax_linen_trainstate_donate", "static_train_flag_alternating",
       "debug_callback_cond_every_10", "memmap_batches_steps", "while_loop_data_dependent",
       "clear_caches_each_epoch"}

_TRAINER_LOOPS_CHILD = """
import json, sys, time, os
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
""" + _LOOP_DATA + _XENT + _INIT_MLP + """def mlp(p, x, key=None):
    for w, b in p[:-1]:
        x = jax.nn.relu(x @ w + b)
        if key is not None:
            key, k = jax.random.split(key)
            x = jnp.where(jax.random.bernoulli(k, 0.9, x.shape), x / 0.9, 0.0)
    w, b = p[-1]
    return x @ w + b
""" + _BATCHES_AND_MARKS + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
def loss_fn(p, x, y, key=None):
    return xent(mlp(p, x, key), y)
state = {}
if case == "flax_linen_trainstate_donate":
    import flax, optax
    import flax.linen as nn
    from flax.training import train_state
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            for h in (256, 256):
                x = nn.relu(nn.Dense(h)(x))
                x = nn.Dropout(0.1, deterministic=not train)(x)
            return nn.Dense(10)(x)
    m = MLP()
    v = m.init(jax.random.PRNGKey(0), jnp.ones((1, 128)), False)
    ts = train_state.TrainState.create(apply_fn=m.apply, params=v["params"], tx=optax.adam(1e-3))
    def tstep(ts, x, y, key):
        def lf(pp):
            return xent(ts.apply_fn({"params": pp}, x, True, rngs={"dropout": key}), y)
        loss, g = jax.value_and_grad(lf)(ts.params)
        return ts.apply_gradients(grads=g), loss
    tstep = jax.jit(tstep, donate_argnums=0)
    state["ts"] = ts
    def body(i):
        ts, loss = tstep(state["ts"], *batch(i), jax.random.PRNGKey(i))
        state["ts"] = ts
        jax.block_until_ready(loss)
    extra["flax"] = flax.__version__; extra["optax"] = optax.__version__
elif case == "static_train_flag_alternating":
    def step(p, x, y, key, train):
        if train:
            loss, g = jax.value_and_grad(loss_fn)(p, x, y, key)
            return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
        return p, loss_fn(p, x, y)
    step = jax.jit(step, static_argnames="train")
    modes = []
    def body(i):
        global p
        tr = (i % 2 == 0)
        modes.append("train" if tr else "eval")
        p, loss = step(p, *batch(i), jax.random.PRNGKey(i), train=tr)
        jax.block_until_ready(loss)
elif case == "debug_callback_cond_every_10":
    logged = []
    def log(s, l):
        time.sleep(0.003)
        logged.append(int(s))
    @jax.jit
    def step(p, x, y, s):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        jax.lax.cond(s % 10 == 0, lambda: jax.debug.callback(log, s, loss), lambda: None)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    def body(i):
        global p
        p, loss = step(p, *batch(i), i)
        jax.block_until_ready(p)
elif case == "memmap_batches_steps":
    path = os.path.join(logdir, "data.f32")
    N = 65536
    mm = np.lib.format.open_memmap(path + ".npy", mode="w+", dtype=np.float32, shape=(N, 1024))
    for k in range(0, N, 8192):
        mm[k:k + 8192] = rng.random((8192, 1024), dtype=np.float32)
    mm.flush(); del mm
    os.system("sync")
    try:
        fd = os.open(path + ".npy", os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    except Exception as e:
        extra["fadvise"] = repr(e)
    mm = np.load(path + ".npy", mmap_mode="r")
    w1 = jax.random.normal(jax.random.PRNGKey(1), (1024, 10)) * 0.03
    @jax.jit
    def step(w, x, y):
        loss, g = jax.value_and_grad(lambda w: xent(x @ w, y))(w)
        return w - 0.01 * g, loss
    read_ms = []
    def body(i):
        global w1
        t = time.perf_counter()
        j = int(rng.integers(0, N - 256))
        x = np.asarray(mm[j:j + 256])
        read_ms.append(time.perf_counter() - t)
        w1, loss = step(w1, x, YALL[:256])
        jax.block_until_ready(w1)
elif case == "while_loop_data_dependent":
    trips = []
    @jax.jit
    def step(p, x, y, tol):
        a = x.T @ x / x.shape[0]
        def cond(c):
            v, k, d = c
            return (d > tol) & (k < 60)
        def body_(c):
            v, k, d = c
            nv = a @ v
            nv = nv / jnp.linalg.norm(nv)
            return nv, k + 1, jnp.linalg.norm(nv - v)
        v, k, _ = jax.lax.while_loop(
            cond, body_, (jnp.ones(a.shape[0]) / a.shape[0] ** 0.5, 0, jnp.inf))
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda q, b: q - 0.01 * b, p, g), loss, k
    def body(i):
        global p
        x, y = batch(i, 256)
        tol = [1e-1, 1e-3, 1e-6][i % 3]
        p, loss, k = step(p, x, y, tol)
        trips.append(int(k))
elif case == "clear_caches_each_epoch":
    def sgd(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    jstep = {}
    def body(i):
        global p
        p, loss = jstep["f"](p, *batch(i))
        jax.block_until_ready(p)
    epoch_ms = []
else:
    raise SystemExit("unknown case " + case)
if case == "clear_caches_each_epoch":
    cnt = {"i": 0}
    def loop(first, n):
        for e in range(n // 4):
            t = time.perf_counter()
            jax.clear_caches()
            jstep["f"] = jax.jit(sgd)
            epoch_ms.append(time.perf_counter() - t)
            for _ in range(4):
                marked(cnt["i"], body); cnt["i"] += 1
    steps = 12
    loop(0, 4); cnt["i"] = 0
    epoch_ms.clear()
else:
    steps = 20 if case == "debug_callback_cond_every_10" else 12
    def loop(first, n):
        for i in range(first, first + n):
            marked(i, body)
    loop(0, 4)
for v in ("trips", "read_ms", "modes", "logged"):
    if v in globals():
        globals()[v].clear()
jax.block_until_ready(jax.tree.leaves(state) + [p])
times.clear()
with jax.profiler.trace(logdir):
    loop(0 if case == "clear_caches_each_epoch" else 4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
for v in ("trips", "modes", "logged"):
    if v in globals():
        params[v] = globals()[v]
if "read_ms" in globals():
    params["measured_read_ms"] = [round(t * 1e3, 3) for t in read_ms]
params.update(extra)
print(json.dumps(params))
"""

# Cases of what a demanding JAX user adds to the step (a `jax.disable_jit` debug toggle,
# `make_jaxpr`/`eval_shape` each step, checkify, equinox's `filter_jit`, a vmapped ensemble,
# attention, FFT features, dict batches with optional keys): their own child; the equinox
# one needs equinox and optax beside JAX (--jax-python).
USAGE_LOOPS = {"disable_jit_every_4th", "make_jaxpr_each_step", "checkify_throw_steps",
               "equinox_filter_jit_steps", "vmap_ensemble_steps",
               "attention_transformer_steps", "fft_features_two_jits",
               "dict_batch_optional_keys"}

_USAGE_LOOPS_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
""" + _LOOP_DATA + _XENT + _INIT_MLP + _MLP + """def loss_fn(p, x, y):
    return xent(mlp(p, x), y)
def sgd_fn(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
""" + _BATCHES_AND_MARKS + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
sgd = jax.jit(sgd_fn)
steps = 12
def body(i):
    global p
    p, loss = sgd(p, *batch(i))
    jax.block_until_ready(p)
if case == "disable_jit_every_4th":  # a debugging toggle left in the loop
    plain = body
    def body(i):
        if i % 4 == 3:
            with jax.disable_jit():
                plain(i)
        else:
            plain(i)
    extra["disable_jit_steps"] = "i % 4 == 3"
elif case == "make_jaxpr_each_step":  # a shape / size log line traced every step
    eqns = []
    def body(i):
        global p
        x, y = batch(i)
        eqns.append(len(jax.make_jaxpr(sgd_fn)(p, x, y).eqns))
        out = jax.eval_shape(sgd_fn, p, x, y)
        p, loss = sgd(p, x, y)
        jax.block_until_ready(p)
elif case == "checkify_throw_steps":
    from jax.experimental import checkify
    checked = jax.jit(checkify.checkify(sgd_fn, errors=checkify.float_checks))
    def body(i):
        global p
        err, (p, loss) = checked(p, *batch(i))
        err.throw()
        jax.block_until_ready(p)
elif case == "equinox_filter_jit_steps":
    import equinox as eqx, optax
    params["equinox"], params["optax"] = eqx.__version__, optax.__version__
    model = eqx.nn.MLP(128, 10, 512, 2, key=jax.random.PRNGKey(0))
    opt = optax.adam(1e-3)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))
    @eqx.filter_jit
    def estep(model, opt_state, x, y):
        loss, g = eqx.filter_value_and_grad(lambda m: xent(jax.vmap(m)(x), y))(model)
        u, opt_state = opt.update(g, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, u), opt_state, loss
    def body(i):
        global model, opt_state
        model, opt_state, loss = estep(model, opt_state, *batch(i))
        jax.block_until_ready(model)
    p = model
elif case == "vmap_ensemble_steps":  # 8 members trained side by side on one batch
    members = 8
    p = jax.vmap(lambda k: init_mlp(k, [128, 256, 256, 10]))(
        jax.random.split(jax.random.PRNGKey(1), members))
    sgd = jax.jit(jax.vmap(sgd_fn, in_axes=(0, None, None)))
    extra["members"] = members
elif case == "attention_transformer_steps":
    TOK = rng.integers(0, 256, (64, 65))
    B, T, D, H = 16, 64, 64, 4
    ks = jax.random.split(jax.random.PRNGKey(2), 10)
    def dense(k, a, b):
        return jax.random.normal(k, (a, b)) * (1 / a) ** 0.5
    p = {"emb": jax.random.normal(ks[0], (256, D)) * 0.02,
         "blocks": [{"qkv": dense(ks[1 + 4 * j], D, 3 * D), "o": dense(ks[2 + 4 * j], D, D),
                     "w1": dense(ks[3 + 4 * j], D, 4 * D), "w2": dense(ks[4 + 4 * j], 4 * D, D)}
                    for j in range(2)]}
    def norm(x):
        return (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    def lm_loss(p, tok):
        x = p["emb"][tok[:, :-1]]
        for blk in p["blocks"]:
            q, k, v = jnp.split((norm(x) @ blk["qkv"]).reshape(B, T, 3 * H, D // H), 3, axis=2)
            a = jax.nn.dot_product_attention(q, k, v, is_causal=True)
            x = x + a.reshape(B, T, D) @ blk["o"]
            x = x + jax.nn.gelu(norm(x) @ blk["w1"]) @ blk["w2"]
        return xent((norm(x) @ p["emb"].T).reshape(B * T, 256), tok[:, 1:].reshape(-1))
    @jax.jit
    def sgd(p, tok):
        loss, g = jax.value_and_grad(lm_loss)(p, tok)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), loss
    def body(i):
        global p
        j = (i * B) % 64
        p, loss = sgd(p, TOK[j:j + B])
        jax.block_until_ready(p)
elif case == "fft_features_two_jits":  # raw signals to log-spectra, a jitted call of its own
    SIG = rng.standard_normal((512, 1024)).astype(np.float32)
    win = jnp.hanning(1024)
    @jax.jit
    def features(s):
        spec = jnp.abs(jnp.fft.rfft(s * win, axis=-1))[:, :128]
        return jnp.log1p(spec) - 1.0
    def body(i):
        global p
        j = (i * 64) % 512
        f = features(SIG[j:j + 64])
        p, loss = sgd(p, f, YALL[j:j + 64])
        jax.block_until_ready(p)
elif case == "dict_batch_optional_keys":  # a loader that adds keys only when it has them
    @jax.jit
    def sgd_d(p, b):
        def lf(p):
            logits = mlp(p, b["x"] * b["mask"][:, None] if "mask" in b else b["x"])
            per = -jnp.take_along_axis(jax.nn.log_softmax(logits), b["y"][:, None], 1)[:, 0]
            return jnp.mean(per * b["weight"]) if "weight" in b else jnp.mean(per)
        loss, g = jax.value_and_grad(lf)(p)
        return jax.tree.map(lambda a, c: a - 0.01 * c, p, g), loss
    key_sets = []
    def body(i):
        global p
        x, y = batch(i)
        b = {"x": x, "y": y}
        if i % 3 == 2:  # a padded batch: a mask
            b["mask"] = (np.arange(64) < 60).astype(np.float32)
        if i % 5 == 4:  # a reweighted batch
            b["weight"] = np.full((64,), 0.5, np.float32)
        key_sets.append(",".join(sorted(b)))
        p, loss = sgd_d(p, b)
        jax.block_until_ready(p)
else:
    raise SystemExit("unknown case " + case)
def loop(first, n):
    for i in range(first, first + n):
        marked(i, body)
if case == "dict_batch_optional_keys":  # only the plain batch compiled before the trace
    for i in (0, 1, 3):
        body(i)
else:
    loop(0, 4)
jax.block_until_ready(p)
times.clear()
for v in ("eqns", "key_sets"):
    if v in globals():
        globals()[v].clear()
with jax.profiler.trace(logdir):
    loop(4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if case == "make_jaxpr_each_step":
    params["jaxpr_eqns"] = eqns[0]
if case == "dict_batch_optional_keys":
    params["key_sets"] = key_sets
    params["compiled_programs"] = sgd_d._cache_size()
params.update(extra)
print(json.dumps(params))
"""

# Cases of numerical kinds a demanding JAX user runs beside plain SGD (an optimizer's
# in-program while loop, associative scans, batched while loops, sorts and top-k, an
# on-device shuffle each epoch, collectives over 4 host devices, a metrics tree read every
# step, f32 master weights with bf16 compute): a child of their own; `optax_lbfgs_fit_steps`
# needs optax beside JAX (--jax-python).
SOLVER_LOOPS = {"optax_lbfgs_fit_steps", "associative_scan_rnn_steps",
                "vmap_batched_while_steps", "topk_argsort_retrieval_steps",
                "device_permutation_epochs", "fsdp_all_gather_ppermute_four_devices",
                "metrics_tree_device_get_steps", "f32_master_bf16_compute_steps",
                "numpy_loss_read_steps", "numpy_list_batches_steps"}

_SOLVER_LOOPS_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
""" + _LOOP_DATA + _XENT + _INIT_MLP + _MLP + """def loss_fn(p, x, y):
    return xent(mlp(p, x), y)
def sgd_fn(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
""" + _BATCHES_AND_MARKS + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
sgd = jax.jit(sgd_fn)
steps = 12
def body(i):
    global p
    p, loss = sgd(p, *batch(i))
    jax.block_until_ready(p)
log = []
if case == "optax_lbfgs_fit_steps":  # a full-batch L-BFGS fit per step, in a while loop
    import optax
    params["optax"] = optax.__version__
    opt = optax.lbfgs()
    def fit(w, x, y):
        fun = lambda w: xent(x @ w["w"] + w["b"], y) + 1e-3 * jnp.sum(w["w"] ** 2)
        vg = optax.value_and_grad_from_state(fun)
        def step(c):
            w, s = c
            v, g = vg(w, state=s)
            u, s = opt.update(g, s, w, value=v, grad=g, value_fn=fun)
            return optax.apply_updates(w, u), s
        def go(c):
            _, s = c
            n = optax.tree_utils.tree_get(s, "count")
            err = optax.tree_utils.tree_l2_norm(optax.tree_utils.tree_get(s, "grad"))
            return (n == 0) | ((n < 15) & (err >= 1e-3))
        w, s = jax.lax.while_loop(go, step, (w, opt.init(w)))
        return w, optax.tree_utils.tree_get(s, "count")
    fitj = jax.jit(fit)
    p = {"w": jnp.zeros((128, 10)), "b": jnp.zeros(10)}
    def body(i):
        global p
        x, y = batch(i, 1024)
        p, n = fitj(p, x, y)
        log.append(int(n))  # iterations run (the read waits for the fit)
    steps = 8  # every iteration's dozens of XLA ops are traced: a few steps suffice
elif case == "associative_scan_rnn_steps":  # a gated linear recurrence over 512 tokens
    T, B, D = 512, 16, 64
    SEQ = rng.standard_normal((64, T, D)).astype(np.float32)
    ks = jax.random.split(jax.random.PRNGKey(3), 3)
    p = {"wa": jax.random.normal(ks[0], (D, D)) / 8, "wb": jax.random.normal(ks[1], (D, D)) / 8,
         "wo": jax.random.normal(ks[2], (D, 1)) / 8}
    def comb(l, r):
        return r[0] * l[0], r[0] * l[1] + r[1]
    def rnn_loss(p, x):
        a = jax.nn.sigmoid(x @ p["wa"])
        b = jnp.tanh(x @ p["wb"])
        _, h = jax.lax.associative_scan(comb, (a, b), axis=1)
        pred = (h[:, :-1] @ p["wo"])[..., 0]
        return jnp.mean((pred - x[:, 1:, 0]) ** 2)
    @jax.jit
    def rstep(p, x):
        loss, g = jax.value_and_grad(rnn_loss)(p, x)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), loss
    def body(i):
        global p
        j = (i * B) % 64
        p, loss = rstep(p, SEQ[j:j + B])
        jax.block_until_ready(p)
elif case == "vmap_batched_while_steps":  # per-example Newton solves, vmapped
    def solve(a, b):  # x**3 + a*x = b by Newton, to 1e-6, at most 200 rounds
        def cond(c):
            x, k = c
            return (jnp.abs(x ** 3 + a * x - b) > 1e-6) & (k < 200)
        def newton(c):
            x, k = c
            return x - 0.5 * (x ** 3 + a * x - b) / (3 * x ** 2 + a), k + 1
        return jax.lax.while_loop(cond, newton, (b, 0))
    def target_fn(x):
        a = 0.1 + jnp.abs(x[:, 0]) * 10
        b = x[:, 1] * jnp.where(x[:, 2] > 0.97, 1e4, 1.0)
        return jax.vmap(solve)(a, b)
    @jax.jit
    def vstep(p, x, y):
        root, k = target_fn(x)
        yy = (jnp.abs(root) * 3).astype(jnp.int32) % 10
        (p, loss) = sgd_fn(p, x, yy)
        return p, loss, k
    def body(i):
        global p
        p, loss, k = vstep(p, *batch(i))
        k = np.asarray(k)
        log.append([int(k.max()), round(float(k.mean()), 1)])
elif case == "topk_argsort_retrieval_steps":  # in-batch retrieval with a ranking metric
    N, D = 8192, 64
    table = jax.random.normal(jax.random.PRNGKey(4), (N, D)) / 8
    p = {"q": jax.random.normal(jax.random.PRNGKey(5), (128, D)) / 11}
    QX = rng.random((4096, 128)).astype(np.float32)
    POS = rng.integers(0, N, (4096,))
    def rloss(p, x, pos, table):
        s = (x @ p["q"]) @ table.T
        top, idx = jax.lax.top_k(s, 64)
        pos_s = jnp.take_along_axis(s, pos[:, None], 1)
        logits = jnp.concatenate([pos_s, top], 1)
        return -jnp.mean(jax.nn.log_softmax(logits)[:, 0]), s
    @jax.jit
    def tstep(p, x, pos):
        (loss, s), g = jax.value_and_grad(rloss, has_aux=True)(p, x, pos, table)
        rank = jnp.argmax(jnp.argsort(-s, axis=1) == pos[:, None], axis=1)
        return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), loss, jnp.mean(rank)
    def body(i):
        global p
        j = (i * 256) % 4096
        p, loss, rank = tstep(p, QX[j:j + 256], POS[j:j + 256])
        jax.block_until_ready(p)
elif case == "device_permutation_epochs":  # the data on the device, reshuffled each epoch
    XD, YD = jnp.asarray(XALL), jnp.asarray(YALL)
    key = jax.random.PRNGKey(7)
    perm = [None]
    per_epoch = 4
    def body(i):
        global p, key
        k = i % per_epoch
        idx = perm[0][k * 64:(k + 1) * 64]  # slicing and gathering outside jit
        p, loss = sgd(p, XD[idx], YD[idx])
        jax.block_until_ready(p)
    def loop(first, n):
        global key
        for i in range(first, first + n):
            if i % per_epoch == 0:  # an epoch starts: a new order of the 4,096 rows
                key, k = jax.random.split(key)
                perm[0] = jax.random.permutation(k, XD.shape[0])
            marked(i, body)
    extra["steps_per_epoch"] = per_epoch
elif case == "fsdp_all_gather_ppermute_four_devices":  # weights sharded, gathered per use
    from jax.sharding import Mesh, PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
    sizes = [128, 512, 512, 16]
    p = init_mlp(jax.random.PRNGKey(0), sizes)
    spec = [(P("d", None), P("d")) for _ in p]
    p = jax.device_put(p, [(jax.NamedSharding(mesh, a), jax.NamedSharding(mesh, b))
                           for a, b in spec])
    def local(p, x, y):
        def lf(p):
            full = [(jax.lax.all_gather(w, "d", tiled=True),
                     jax.lax.all_gather(b, "d", tiled=True)) for w, b in p]
            return xent(mlp(full, x), y)
        loss, g = jax.value_and_grad(lf)(p)
        g = jax.tree.map(lambda t: jax.lax.pmean(t, "d"), g)
        nxt = jax.lax.ppermute(loss, "d", [(j, (j + 1) % 4) for j in range(4)])
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), jax.lax.pmean(loss + 0 * nxt, "d")
    fsdp = jax.jit(shard_map(local, mesh=mesh, in_specs=(spec, P("d"), P("d")),
                             out_specs=(spec, P())))
    def body(i):
        global p
        x, y = batch(i, 256)
        p, loss = fsdp(p, x, y)
        jax.block_until_ready(p)
    extra["devices"] = 4
elif case == "metrics_tree_device_get_steps":  # per-layer metrics logged every step
    p = init_mlp(jax.random.PRNGKey(0), [128] + [256] * 6 + [10])
    @jax.jit
    def mstep(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        new = jax.tree.map(lambda a, b: a - 0.01 * b, p, g)
        m = {"loss": loss}
        for j, ((w, b), (gw, gb)) in enumerate(zip(p, g)):
            m[f"layer{j}/w_norm"] = jnp.linalg.norm(w)
            m[f"layer{j}/g_norm"] = jnp.linalg.norm(gw)
            m[f"layer{j}/b_norm"] = jnp.linalg.norm(b)
            m[f"layer{j}/update_ratio"] = 0.01 * jnp.linalg.norm(gw) / jnp.linalg.norm(w)
            m[f"layer{j}/g_max"] = jnp.max(jnp.abs(gw))
        return new, m
    def body(i):
        global p
        p, m = mstep(p, *batch(i))
        host = jax.device_get(m)
        log.append(len(host))
        extra["line"] = " ".join(f"{k}={float(v):.4g}" for k, v in host.items())[:80]
elif case == "f32_master_bf16_compute_steps":  # mixed precision by hand, a dynamic loss scale
    state = {"scale": jnp.float32(2.0 ** 15), "good": jnp.int32(0)}
    @jax.jit
    def mpstep(p, st, x, y):
        def scaled(p):
            half = jax.tree.map(lambda a: a.astype(jnp.bfloat16), p)
            logits = mlp(half, x.astype(jnp.bfloat16)).astype(jnp.float32)
            return xent(logits, y) * st["scale"]
        sl, g = jax.value_and_grad(scaled)(p)
        g = jax.tree.map(lambda t: t.astype(jnp.float32) / st["scale"], g)
        ok = jnp.all(jnp.array([jnp.all(jnp.isfinite(t)) for t in jax.tree.leaves(g)]))
        new = jax.tree.map(lambda a, b: jnp.where(ok, a - 0.01 * b, a), p, g)
        good = jnp.where(ok, st["good"] + 1, 0)
        scale = jnp.where(ok, jnp.where(good >= 2000, st["scale"] * 2, st["scale"]),
                          st["scale"] / 2)
        return new, {"scale": scale, "good": jnp.where(good >= 2000, 0, good)}, sl / st["scale"]
    def body(i):
        global p, state
        p, state, loss = mpstep(p, state, *batch(i))
        jax.block_until_ready(p)
    f32 = jax.jit(sgd_fn)
    jax.block_until_ready(f32(p, *batch(0)))
    t = time.perf_counter()
    for i in range(10):
        jax.block_until_ready(f32(p, *batch(i)))
    extra["f32_step_ms_before_trace"] = round((time.perf_counter() - t) * 100, 3)
elif case == "numpy_loss_read_steps":  # the loss and class counts read every step
    @jax.jit
    def cstep(p, x, y):
        p2, loss = sgd_fn(p, x, y)
        return p2, loss, jnp.bincount(jnp.argmax(mlp(p, x), 1), length=10)
    def body(i):
        global p
        p, loss, counts = cstep(p, *batch(i, 512))
        log.append([round(float(np.asarray(loss)), 4), np.asarray(counts).tolist()])
elif case == "numpy_list_batches_steps":  # the next batch built from lists, program running
    ROWS = XALL.tolist()
    nxt = [np.asarray(ROWS[:512], np.float32)]
    def body(i):
        global p
        j = (i * 512) % 4096
        p, loss = sgd(p, nxt[0], YALL[j:j + 512])
        k = ((i + 1) * 512) % 4096
        nxt[0] = np.asarray(ROWS[k:k + 512], np.float32)
        if i % 4 == 3:
            log.append(round(float(loss), 4))
else:
    raise SystemExit("unknown case " + case)
if "loop" not in globals():
    def loop(first, n):
        for i in range(first, first + n):
            marked(i, body)
loop(0, 4)
jax.block_until_ready(p)
times.clear()
log.clear()
with jax.profiler.trace(logdir):
    loop(4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if log:
    params["per_step"] = log
params.update(extra)
print(json.dumps(params))
"""

# Cases of host-side kinds around the step (a device prefetch thread, an ahead-of-time
# compiled step, a SciPy optimizer driving a jitted gradient, a Python environment driving
# a jitted policy, a Pallas kernel in interpret mode, a device memory profile each step,
# sparse BCOO features, layers scanned under remat): their own child, JAX alone.
HOST_LOOPS = {"device_prefetch_thread_steps", "aot_compiled_steps", "scipy_lbfgs_host_steps",
              "python_env_rollout_steps", "pallas_interpret_steps",
              "memory_profile_each_step", "bcoo_sparse_features_steps",
              "scan_layers_remat_steps", "loader_thread_jnp_ops_steps",
              "implicit_numpy_args_steps", "gc_collect_every_5_steps",
              "python_grad_accum_microsteps", "host_jnp_metrics_history_steps",
              "batchnorm_state_donate_steps", "fori_inner_steps_per_call",
              "host_skip_nonfinite_steps", "donate_backup_copy_steps",
              "host_lr_schedule_float_steps", "static_arg_every_4_steps",
              "pmap_numpy_reshape_steps", "threadpool_augment_two_workers",
              "cond_traced_flag_alternating", "prngkey_host_each_step",
              "step_numbers_skip_eval_between", "rnn_scan_unroll8_steps",
              "linalg_solve_grad_x64_steps", "host_tree_map_250_leaves_steps",
              "nested_trace_annotations_no_step", "thread_np_save_checkpoint_steps",
              "mesh_2x2_tensor_parallel_steps", "step_num_restart_each_epoch",
              "while_loop_epoch_early_stop", "cpu_sync_dispatch_steps",
              "async_epoch_end_block_steps", "custom_vjp_clip_layers_steps",
              "hvp_newton_cg_steps", "jax_scipy_bfgs_minimize_steps",
              "replay_buffer_donate_steps", "prefetch_generator_device_put_steps"}

_HOST_LOOPS_CHILD = """
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
case, logdir = sys.argv[1], sys.argv[2]
if case == "cpu_sync_dispatch_steps":  # before the CPU client is made
    jax.config.update("jax_cpu_enable_async_dispatch", False)
""" + _LOOP_DATA + _XENT + _INIT_MLP + _MLP + """def loss_fn(p, x, y):
    return xent(mlp(p, x), y)
def sgd_fn(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
""" + _BATCHES_AND_MARKS + """p = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
sgd = jax.jit(sgd_fn)
steps = 12
def body(i):
    global p
    p, loss = sgd(p, *batch(i))
    jax.block_until_ready(p)
def timed(fn, n=10):  # a variant's mean step, timed outside the trace
    fn(0)
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return round((time.perf_counter() - t) / n * 1e3, 3)
if case == "device_prefetch_thread_steps":  # flax's prefetch_to_device, on a thread
    import queue, threading
    ahead = queue.Queue(maxsize=2)
    built = []
    def loader():
        rng = np.random.default_rng(1)
        for i in range(10_000):
            t = time.perf_counter()
            raw = rng.random((256, 128, 8), np.float32)
            x = np.tanh(raw).mean(axis=2)  # numpy augmentation, about 2 ms
            y = rng.integers(0, 10, (256,))
            built.append(time.perf_counter() - t)
            ahead.put(jax.device_put((x, y)))  # copied to the device ahead of its step
    threading.Thread(target=loader, daemon=True).start()
    waits = []
    def body(i):
        global p
        t = time.perf_counter()
        x, y = ahead.get()
        waits.append(time.perf_counter() - t)
        p, loss = sgd(p, x, y)
        jax.block_until_ready(p)
    def report():
        extra["batch_build_ms_mean"] = round(float(np.mean(built[-steps:])) * 1e3, 3)
        extra["queue_wait_ms"] = [round(w * 1e3, 3) for w in waits[-steps:]]
elif case == "aot_compiled_steps":  # jax.jit(f).lower(...).compile(), the Compiled called
    x0, y0 = batch(0)
    t = time.perf_counter()
    compiled = jax.jit(sgd_fn).lower(p, x0, y0).compile()
    extra["compile_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    def body(i):
        global p
        p, loss = compiled(p, *batch(i))
        jax.block_until_ready(p)
    extra["jit_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        sgd(p, *batch(i))))
elif case == "scipy_lbfgs_host_steps":  # scipy.optimize drives a jitted value_and_grad
    import scipy, scipy.optimize
    params["scipy"] = scipy.__version__
    def lr_loss(wflat, x, y):
        w = wflat[:1280].reshape(128, 10)
        return xent(x @ w + wflat[1280:], y) + 1e-3 * jnp.sum(w ** 2)
    vg = jax.jit(jax.value_and_grad(lr_loss))
    wflat = np.zeros(1290)
    calls = []
    def body(i):
        global wflat
        x, y = batch(i, 1024)
        x, y = jnp.asarray(x), jnp.asarray(y)
        n = [0]
        def fun(w):  # scipy's float64 vector in, a float64 value and gradient out
            n[0] += 1
            v, g = vg(jnp.asarray(w, jnp.float32), x, y)
            return float(v), np.asarray(g, np.float64)
        r = scipy.optimize.minimize(fun, wflat, jac=True, method="L-BFGS-B",
                                    options={"maxiter": 25})
        wflat = r.x
        calls.append(n[0])
    def report():
        extra["value_and_grad_calls_per_step"] = calls[-steps:]
    # the same fit on the device: optax.lbfgs is not here; a jitted fori_loop of 25 GD steps
    def gd(w, x, y):
        def upd(_, w):
            return w - 0.5 * jax.grad(lr_loss)(w, x, y)
        return jax.lax.fori_loop(0, 25, upd, w)
    gdj = jax.jit(gd)
    extra["jitted_25_gd_steps_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        gdj(jnp.zeros(1290), *map(jnp.asarray, batch(i, 1024)))))
elif case == "python_env_rollout_steps":  # a numpy environment, a jitted policy per action
    pol = init_mlp(jax.random.PRNGKey(1), [4, 64, 2])
    @jax.jit
    def act(pol, obs):
        return jnp.argmax(mlp(pol, obs[None])[0])
    @jax.jit
    def update(pol, obs, acts, ret):
        def l(pol):
            lp = jax.nn.log_softmax(mlp(pol, obs))
            return -jnp.mean(jnp.take_along_axis(lp, acts[:, None], 1)[:, 0] * ret)
        return jax.tree.map(lambda a, b: a - 0.01 * b, pol, jax.grad(l)(pol))
    def env_step(s, a):  # cart-pole's equations in numpy
        x, v, th, om = s
        f = 10.0 if a else -10.0
        ct, st = np.cos(th), np.sin(th)
        tmp = (f + 0.05 * om * om * st) / 1.1
        tha = (9.8 * st - ct * tmp) / (0.5 * (4 / 3 - 0.1 * ct * ct / 1.1))
        xa = tmp - 0.05 * tha * ct / 1.1
        s = np.array([x + 0.02 * v, v + 0.02 * xa, th + 0.02 * om, om + 0.02 * tha],
                     np.float32)
        return s, bool(abs(s[0]) > 2.4 or abs(s[2]) > 0.21)
    rng = np.random.default_rng(2)
    T = 64
    def rollout(pol):
        s = rng.uniform(-0.05, 0.05, 4).astype(np.float32)
        obs, acts = [], []
        for t in range(T):
            a = int(act(pol, s))  # a host read per action
            obs.append(s); acts.append(a)
            s, done = env_step(s, a)
            if done:
                s = rng.uniform(-0.05, 0.05, 4).astype(np.float32)
        return np.stack(obs), np.array(acts)
    def body(i):
        global pol
        obs, acts = rollout(pol)
        ret = np.linspace(1, 0, T, dtype=np.float32)
        pol = update(pol, obs, acts, ret)
        jax.block_until_ready(pol)
    # the fix: the environment in jax.numpy, the rollout one jitted lax.scan
    def jenv(s, a):
        x, v, th, om = s
        f = jnp.where(a == 1, 10.0, -10.0)
        ct, st = jnp.cos(th), jnp.sin(th)
        tmp = (f + 0.05 * om * om * st) / 1.1
        tha = (9.8 * st - ct * tmp) / (0.5 * (4 / 3 - 0.1 * ct * ct / 1.1))
        xa = tmp - 0.05 * tha * ct / 1.1
        return jnp.stack([x + 0.02 * v, v + 0.02 * xa, th + 0.02 * om, om + 0.02 * tha])
    @jax.jit
    def scanned(pol, s0):
        def stepf(s, _):
            a = jnp.argmax(mlp(pol, s[None])[0])
            return jenv(s, a), (s, a)
        return jax.lax.scan(stepf, s0, None, length=T)[1]
    extra["scanned_rollout_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        scanned(pol, jnp.zeros(4))))
    extra["rollout_len"] = T
elif case == "pallas_interpret_steps":  # a Pallas kernel debugged on the CPU, left in
    from jax.experimental import pallas as pl
    def norm_kernel(x_ref, o_ref):
        v = x_ref[...]
        m = jnp.mean(v, axis=1, keepdims=True)
        o_ref[...] = (v - m) * jax.lax.rsqrt(jnp.mean((v - m) ** 2, axis=1, keepdims=True)
                                             + 1e-5)
    def row_norm(x):
        return pl.pallas_call(norm_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // 8,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                              interpret=True)(x)
    @jax.jit
    def pstep(p, x, y):
        return sgd_fn(p, row_norm(x), y)
    def body(i):
        global p
        p, loss = pstep(p, *batch(i))
        jax.block_until_ready(p)
    def jnorm(x):
        m = jnp.mean(x, axis=1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(jnp.mean((x - m) ** 2, axis=1, keepdims=True) + 1e-5)
    jstep = jax.jit(lambda p, x, y: sgd_fn(p, jnorm(x), y))
    extra["jnp_norm_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        jstep(p, *batch(i))))
    extra["pallas_grid"] = 8
elif case == "memory_profile_each_step":  # a memory debugging line left in the loop
    sizes = []
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
        jax.block_until_ready(p)
        sizes.append(len(jax.profiler.device_memory_profile()))
    def report():
        extra["profile_bytes"] = sizes[-steps:]
    extra["plain_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        sgd(p, *batch(i))))
elif case == "bcoo_sparse_features_steps":  # hashed sparse features, a BCOO matrix
    from jax.experimental import sparse
    D = 16384
    rows = np.repeat(np.arange(4096), 16)
    cols = np.random.default_rng(3).integers(0, D, rows.size)
    emb = jax.random.normal(jax.random.PRNGKey(4), (D, 128)) * 0.01
    sp = {"emb": emb, "mlp": init_mlp(jax.random.PRNGKey(5), [128, 256, 10])}
    def sloss(sp, xs, y):
        h = sparse.bcoo_dot_general(xs, sp["emb"], dimension_numbers=(([1], [0]), ([], [])))
        return xent(mlp(sp["mlp"], h), y)
    @jax.jit
    def sstep(sp, xs, y):
        loss, g = jax.value_and_grad(sloss)(sp, xs, y)
        return jax.tree.map(lambda a, b: a - 0.05 * b, sp, g), loss
    def sbatch(i, n=256):
        j = (i * n) % 4096
        idx = np.stack([rows[j * 16:(j + n) * 16] - j, cols[j * 16:(j + n) * 16]], 1)
        xs = sparse.BCOO((jnp.ones(n * 16), jnp.asarray(idx)), shape=(n, D))
        return xs, YALL[j:j + n]
    def body(i):
        global sp
        sp, loss = sstep(sp, *sbatch(i))
        jax.block_until_ready(sp)
    @jax.jit
    def dstep(sp, xd, y):
        loss, g = jax.value_and_grad(lambda sp: xent(mlp(sp["mlp"], xd @ sp["emb"]), y))(sp)
        return jax.tree.map(lambda a, b: a - 0.05 * b, sp, g), loss
    extra["dense_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        dstep(sp, sbatch(i)[0].todense(), sbatch(i)[1])))
    extra["vocab"], extra["nnz_per_row"], extra["batch"] = D, 16, 256
elif case == "scan_layers_remat_steps":  # 16 residual layers stacked, scanned, rematerialised
    L = 16
    k = jax.random.split(jax.random.PRNGKey(6), 3)
    sp = {"inp": jax.random.normal(k[0], (128, 256)) * 0.09,
          "ws": jax.random.normal(k[1], (L, 256, 256)) * 0.02,
          "bs": jnp.zeros((L, 256)),
          "out": jax.random.normal(k[2], (256, 10)) * 0.06}
    def lloss(sp, x, y):
        h = x @ sp["inp"]
        @jax.checkpoint
        def layer(h, wb):
            w, b = wb
            return h + jnp.tanh(h @ w + b), None
        h, _ = jax.lax.scan(layer, h, (sp["ws"], sp["bs"]))
        return xent(h @ sp["out"], y)
    @jax.jit
    def lstep(sp, x, y):
        loss, g = jax.value_and_grad(lloss)(sp, x, y)
        return jax.tree.map(lambda a, b: a - 0.01 * b, sp, g), loss
    def body(i):
        global sp
        sp, loss = lstep(sp, *batch(i, 128))
        jax.block_until_ready(sp)
    def uloss(sp, x, y):  # the same layers unrolled, no remat: the comparison
        h = x @ sp["inp"]
        for j in range(L):
            h = h + jnp.tanh(h @ sp["ws"][j] + sp["bs"][j])
        return xent(h @ sp["out"], y)
    ustep = jax.jit(lambda sp, x, y: jax.value_and_grad(uloss)(sp, x, y))
    extra["unrolled_no_remat_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        ustep(sp, *batch(i, 128))))
    extra["layers"] = L
elif case == "loader_thread_jnp_ops_steps":  # a loader thread normalising with jax.numpy
    import queue, threading
    ahead = queue.Queue(maxsize=2)
    def loader():
        rng = np.random.default_rng(1)
        for i in range(10_000):
            raw = rng.random((256, 128), np.float32)
            x = jnp.asarray(raw)  # jax.numpy outside jit, on the loader's thread
            x = (x - x.mean(0)) / (x.std(0) + 1e-6)
            x = jnp.clip(x, -3, 3)
            y = jnp.asarray(rng.integers(0, 10, (256,)))
            ahead.put((x, y))
    threading.Thread(target=loader, daemon=True).start()
    def body(i):
        global p
        x, y = ahead.get()
        p, loss = sgd(p, x, y)
        jax.block_until_ready(p)
elif case == "implicit_numpy_args_steps":  # 16 MiB numpy batches straight into the jit
    host = [np.random.default_rng(k).random((4096, 1024), np.float32) for k in range(2)]
    w = jnp.zeros((1024, 1))
    lsq = jax.jit(lambda w, x: w - 1e-6 * (x.T @ (x @ w)))
    def body(i):
        global w
        w = lsq(w, host[i % 2])  # the numpy batch copied in by the call itself
        jax.block_until_ready(w)
    def put(i):
        xd = jax.device_put(host[i % 2])
        jax.block_until_ready(xd)
    extra["device_put_ms_before_trace"] = timed(put)
    extra["batch_mib"] = 16
elif case == "gc_collect_every_5_steps":  # memory hygiene left in the loop
    import gc
    history = [{"step": k, "loss": float(k), "tags": [str(k)] * 4} for k in range(200_000)]
    collected = []
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
        jax.block_until_ready(p)
        history.append({"step": i, "loss": 0.0, "tags": [str(i)] * 4})
        if i % 5 == 0:
            t = time.perf_counter()
            gc.collect()
            collected.append(round((time.perf_counter() - t) * 1e3, 3))
    def report():
        extra["gc_collect_ms"] = collected[-3:]
        extra["python_objects_kept"] = len(history)
elif case == "python_grad_accum_microsteps":  # a Python loop of jitted micro-steps
    vg = jax.jit(jax.value_and_grad(loss_fn))
    upd = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - 0.01 * b / 4, p, g))
    def body(i):
        global p
        acc = None
        for k in range(4):
            loss, g = vg(p, *batch(4 * i + k))
            acc = g if acc is None else jax.tree.map(jnp.add, acc, g)
        p = upd(p, acc)
        jax.block_until_ready(p)
    @jax.jit
    def scan_step(p, xs, ys):
        def mb(acc, xy):
            g = jax.grad(loss_fn)(p, *xy)
            return jax.tree.map(jnp.add, acc, g), None
        acc, _ = jax.lax.scan(mb, jax.tree.map(jnp.zeros_like, p), (xs, ys))
        return jax.tree.map(lambda a, b: a - 0.01 * b / 4, p, acc)
    def scanned(i):
        x, y = batch(i, 256)
        jax.block_until_ready(scan_step(p, x.reshape(4, 64, 128), y.reshape(4, 64)))
    extra["scan_step_ms_before_trace"] = timed(scanned)
    extra["python_loop_step_ms_before_trace"] = timed(body)
elif case == "host_jnp_metrics_history_steps":  # running metrics in jax.numpy on the host
    losses = [jnp.float32(2.3 - 1e-3 * k) for k in range(40)]
    printed = []
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
        losses.append(loss)
        h = jnp.stack(losses)
        printed.append((float(jnp.mean(h)), float(jnp.std(h))))
        jax.block_until_ready(p)
    def report():
        extra["history_len_at_end"] = len(losses)
    def plain(i):
        jax.block_until_ready(sgd(p, *batch(i)))
    extra["step_without_metrics_ms_before_trace"] = timed(plain)
elif case == "batchnorm_state_donate_steps":  # BatchNorm's running stats as jit state
    def bn_mlp(p, st, x, train=True):
        new = []
        for (w, b, g, be), (m, v) in zip(p[:-1], st):
            h = x @ w + b
            bm, bv = h.mean(0), h.var(0)
            new.append((0.9 * m + 0.1 * bm, 0.9 * v + 0.1 * bv))
            x = jax.nn.relu(g * (h - bm) / jnp.sqrt(bv + 1e-5) + be)
        w, b = p[-1]
        return x @ w + b, new
    k0 = init_mlp(jax.random.PRNGKey(0), [128, 512, 512, 10])
    p = [(w, b, jnp.ones_like(b), jnp.zeros_like(b)) for w, b in k0[:-1]] + [k0[-1]]
    st = [(jnp.zeros(512), jnp.ones(512)) for _ in range(2)]
    def bn_step(p, st, x, y):
        def lf(p):
            logits, new = bn_mlp(p, st, x)
            return xent(logits, y), new
        (loss, new), g = jax.value_and_grad(lf, has_aux=True)(p)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), new, loss
    bn = jax.jit(bn_step, donate_argnums=(0, 1))
    def body(i):
        global p, st
        p, st, loss = bn(p, st, *batch(i))
        jax.block_until_ready((p, st))
elif case == "fori_inner_steps_per_call":  # 8 updates per jitted call
    @jax.jit
    def multi(p, xs, ys):
        def one(k, p):
            g = jax.grad(loss_fn)(p, xs[k], ys[k])
            return jax.tree.map(lambda a, b: a - 0.01 * b, p, g)
        return jax.lax.fori_loop(0, 8, one, p)
    def body(i):
        global p
        x, y = batch(i, 512)
        p = multi(p, x.reshape(8, 64, 128), y.reshape(8, 64))
        jax.block_until_ready(p)
    extra["updates_per_marked_step"] = 8
elif case == "host_skip_nonfinite_steps":  # skip-bad-batch guard on the host
    import math
    @jax.jit
    def grads(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return loss, g, jnp.sqrt(sum(jnp.sum(t * t) for t in jax.tree.leaves(g)))
    upd = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - 0.01 * b, p, g))
    skipped = []
    def body(i):
        global p
        loss, g, gn = grads(p, *batch(i))
        if math.isfinite(float(gn)):
            p = upd(p, g)
        else:
            skipped.append(i)
        jax.block_until_ready(p)
    @jax.jit
    def fused(p, x, y):
        loss, g, gn = grads(p, x, y)
        ok = jnp.isfinite(gn)
        return jax.tree.map(lambda a, b: jnp.where(ok, a - 0.01 * b, a), p, g)
    extra["fused_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        fused(p, *batch(i))))
    def report():
        extra["skipped_steps"] = skipped
elif case == "donate_backup_copy_steps":  # a rollback copy of donated parameters
    donated = jax.jit(sgd_fn, donate_argnums=0)
    def body(i):
        global p, backup
        backup = jax.tree.map(jnp.copy, p)  # kept in case the step must be undone
        p, loss = donated(p, *batch(i))
        jax.block_until_ready(p)
    def plain(i):
        global p
        p, loss = donated(p, *batch(i))
        jax.block_until_ready(p)
    extra["donated_step_ms_before_trace"] = timed(plain)
elif case == "host_lr_schedule_float_steps":  # a schedule on the host, a float per step
    import math
    sgd_lr = jax.jit(lambda p, x, y, lr: jax.tree.map(
        lambda a, b: a - lr * b, p, jax.grad(loss_fn)(p, x, y)))
    def lr_at(i, warm=5, total=40):
        if i < warm:
            return 0.05 * (i + 1) / warm
        return 0.05 * 0.5 * (1 + math.cos(math.pi * (i - warm) / (total - warm)))
    rates = []
    def body(i):
        global p
        lr = lr_at(i)
        rates.append(lr)
        p = sgd_lr(p, *batch(i), lr)
        jax.block_until_ready(p)
    def report():
        extra["learning_rates"] = [round(r, 5) for r in rates[-steps:]]
        extra["sgd_lr_cache_size"] = sgd_lr._cache_size()
elif case == "static_arg_every_4_steps":  # a clip schedule as a static argument
    def clipped_fn(p, x, y, clip):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        g = jax.tree.map(lambda t: jnp.clip(t, -clip, clip), g)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    clipped = jax.jit(clipped_fn, static_argnums=3)
    clips, sizes = [], []
    def body(i):
        global p
        clip = 0.5 + 0.25 * (i // 4)  # raised every fourth step
        clips.append(clip)
        p, loss = clipped(p, *batch(i), clip)
        jax.block_until_ready(p)
        sizes.append(clipped._cache_size())
    def report():
        extra["clip_per_step"] = clips[-steps:]
        extra["cache_size_per_step"] = sizes[-steps:]
    traced_clip = jax.jit(clipped_fn)  # the fix: the clip traced, one compile
    extra["traced_clip_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        traced_clip(p, *batch(i), 0.5 + 0.25 * i)))
elif case == "pmap_numpy_reshape_steps":  # pmap fed per-device numpy batches
    def replica(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        g = jax.lax.pmean(g, "d")
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), jax.lax.pmean(loss, "d")
    pstep = jax.pmap(replica, axis_name="d")
    n_dev = jax.local_device_count()
    pp = jax.tree.map(lambda a: jnp.stack([a] * n_dev), p)
    def body(i):
        global pp
        x, y = batch(i, 256)
        pp, loss = pstep(pp, x.reshape(n_dev, 64, 128), y.reshape(n_dev, 64))
        jax.block_until_ready(pp)
    extra["devices"] = n_dev
    def put(i):  # the batch copied to the devices alone
        x, y = batch(i, 256)
        jax.block_until_ready(jax.device_put_sharded(list(x.reshape(n_dev, 64, 128)),
                                                     jax.local_devices()))
    try:
        extra["device_put_sharded_ms_before_trace"] = timed(put)
    except AttributeError:
        pass
elif case == "threadpool_augment_two_workers":  # numpy augmentation on two pool threads
    from concurrent.futures import ThreadPoolExecutor
    def augment(i):
        t = time.perf_counter()
        r = np.random.default_rng(100 + i)
        img = XALL[(i * 256) % 4096:(i * 256) % 4096 + 256].reshape(256, 16, 8)
        img = np.repeat(img[..., None], 8, axis=3)  # 256 images of 16x8x8
        flip = r.random(256) < 0.5
        img = np.where(flip[:, None, None, None], img[:, ::-1], img)
        img = np.roll(img, int(r.integers(-2, 3)), axis=2)
        img = img + 0.05 * r.standard_normal(img.shape, np.float32)
        img = np.tanh(2.0 * (img - 0.5))
        x = img.mean(axis=3).reshape(256, 128).astype(np.float32)
        built.append(time.perf_counter() - t)
        return x, YALL[(i * 256) % 4096:(i * 256) % 4096 + 256]
    built, waits = [], []
    pool = ThreadPoolExecutor(max_workers=2)
    ahead = [pool.submit(augment, j) for j in range(4)]
    nxt = [4]
    def body(i):
        global p
        t = time.perf_counter()
        x, y = ahead.pop(0).result()
        waits.append(time.perf_counter() - t)
        ahead.append(pool.submit(augment, nxt[0])); nxt[0] += 1
        p, loss = sgd(p, x, y)
        jax.block_until_ready(p)
    def report():
        extra["augment_ms_mean"] = round(float(np.mean(built[-steps:])) * 1e3, 3)
        extra["result_wait_ms"] = [round(w * 1e3, 3) for w in waits[-steps:]]
    extra["step_alone_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        sgd(p, *batch(i, 256))))
elif case == "cond_traced_flag_alternating":  # lax.cond on a traced flag, flipped each step
    def spectral(w):
        v = jnp.ones(w.shape[1]) / w.shape[1] ** 0.5
        def it(_, v):
            u = w @ v
            v = w.T @ u
            return v / (jnp.linalg.norm(v) + 1e-9)
        v = jax.lax.fori_loop(0, 24, it, v)
        return jnp.linalg.norm(w @ v)
    @jax.jit
    def cstep(p, x, y, flag):
        def heavy(p):
            return loss_fn(p, x, y) + 1e-3 * spectral(p[1][0]) ** 2
        def light(p):
            return loss_fn(p, x, y)
        loss, g = jax.value_and_grad(
            lambda p: jax.lax.cond(flag, heavy, light, p))(p)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    flags = []
    def body(i):
        global p
        flag = i % 2 == 1
        flags.append(flag)
        p, loss = cstep(p, *batch(i), flag)
        jax.block_until_ready(p)
    def report():
        extra["heavy_branch_per_step"] = flags[-steps:]
        extra["cstep_cache_size"] = cstep._cache_size()
elif case == "prngkey_host_each_step":  # a key made on the host every step
    def drop_loss(p, x, y, k):
        for (w, b), kk in zip(p[:-1], jax.random.split(k, len(p) - 1)):
            x = jax.nn.relu(x @ w + b)
            x = jnp.where(jax.random.bernoulli(kk, 0.9, x.shape), x / 0.9, 0.0)
        w, b = p[-1]
        return xent(x @ w + b, y)
    @jax.jit
    def dstep(p, x, y, k):
        loss, g = jax.value_and_grad(drop_loss)(p, x, y, k)
        return jax.tree.map(lambda a, b: a - 0.01 * b, p, g), loss
    def body(i):
        global p
        key = jax.random.PRNGKey(1234 + i)  # on the host, each step
        k_drop, k_aug, k_spare = jax.random.split(key, 3)
        p, loss = dstep(p, *batch(i), k_drop)
        jax.block_until_ready(p)
    base = jax.random.PRNGKey(1234)
    @jax.jit
    def fstep(p, x, y, i):  # the fix: the step number folded in inside jit
        return dstep(p, x, y, jax.random.fold_in(base, i))
    extra["fold_in_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        fstep(p, *batch(i), i)))
    extra["host_key_step_ms_before_trace"] = timed(body)
elif case == "step_numbers_skip_eval_between":  # numbers shared with an unmarked eval
    @jax.jit
    def evaluate(p, xs, ys):
        return jnp.mean(jax.vmap(lambda x, y: loss_fn(p, x, y))(xs, ys))
    XE, YE = XALL[:1024].reshape(4, 256, 128), YALL[:1024].reshape(4, 256)
    evals = []
    def eval_ms():
        t = time.perf_counter()
        evals.append(float(evaluate(p, XE, YE)))
        return round((time.perf_counter() - t) * 1e3, 3)
    eval_ms()  # compiled before the trace
    eval_times, numbers = [], []
    def loop(first, n):  # n train steps from global step `first`, every 4th number an eval
        g = first
        done = 0
        while done < n:
            if g % 4 == 0 and g > 0:
                eval_times.append(eval_ms())
            else:
                numbers.append(g)
                marked(g, body)
                done += 1
            g += 1
    def report():
        extra["train_step_numbers"] = numbers[-steps:]
        extra["eval_ms"] = eval_times[-3:]
elif case == "mesh_2x2_tensor_parallel_steps":  # GSPMD tensor parallel on a 2x2 mesh
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
    pspec = [(P(None, "model"), P("model")), (P("model", None), P(None)),
             (P(None, None), P(None))]
    shard = [(NamedSharding(mesh, a), NamedSharding(mesh, b)) for a, b in pspec]
    p = jax.device_put(p, shard)
    xs = NamedSharding(mesh, P("data", None))
    ys = NamedSharding(mesh, P("data"))
    tp = jax.jit(sgd_fn, in_shardings=(shard, xs, ys),
                 out_shardings=(shard, NamedSharding(mesh, P())), donate_argnums=0)
    def body(i):
        global p
        x, y = batch(i, 256)
        p, loss = tp(p, jax.device_put(x, xs), jax.device_put(y, ys))
        jax.block_until_ready(p)
    extra["devices"] = 4
    extra["mesh"] = {"data": 2, "model": 2}
elif case == "step_num_restart_each_epoch":  # the batch index within the epoch
    numbers = []
    def loop(first, n):
        for k in range(n):
            numbers.append(k % 4)
            marked(k % 4, body)
    def report():
        extra["step_numbers"] = numbers[-steps:]
elif case == "while_loop_epoch_early_stop":  # an epoch in one jitted while_loop
    XD = jnp.asarray(XALL.reshape(64, 64, 128))
    W_TRUE = np.random.default_rng(1).normal(size=(128, 10)).astype(np.float32)
    YD = jnp.asarray(np.argmax((XALL - 0.5) @ W_TRUE, 1).reshape(64, 64))  # learnable
    @jax.jit
    def epoch(p, thresh):
        def cond(c):
            p, j, last = c
            return (j < 64) & (last > thresh)
        def upd(c):
            p, j, _ = c
            x = jax.lax.dynamic_index_in_dim(XD, j, keepdims=False)
            y = jax.lax.dynamic_index_in_dim(YD, j, keepdims=False)
            p, loss = sgd_fn(p, x, y)
            return p, j + 1, loss
        p, j, last = jax.lax.while_loop(cond, upd, (p, 0, jnp.float32(1e9)))
        return p, j, last
    iters = []
    def body(i):
        global p
        p, j, last = epoch(p, jnp.float32(1.9))
        iters.append(int(j))
    def report():
        extra["iterations_per_epoch"] = iters[-steps:]
elif case == "cpu_sync_dispatch_steps":  # the CPU client's dispatch made synchronous
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
    extra["async_dispatch"] = bool(jax.config.values["jax_cpu_enable_async_dispatch"])
elif case == "async_epoch_end_block_steps":  # queued steps, one wait per epoch
    epoch_ms = []
    def body(i):
        global p, loss
        p, loss = sgd(p, *batch(i))
    def loop(first, n):
        for e in range(n // 4):
            t = time.perf_counter()
            for k in range(4):
                marked(first + 4 * e + k, body)
            jax.block_until_ready(p)
            float(loss)
            epoch_ms.append(round((time.perf_counter() - t) * 1e3, 3))
    def report():
        extra["epoch_ms"] = epoch_ms[-(steps // 4):]
        extra["epoch_ms_per_step"] = [round(e / 4, 3) for e in epoch_ms[-(steps // 4):]]
elif case == "rnn_scan_unroll8_steps":  # an RNN over time steps, the scan unrolled 8
    def rnn_loss(q, xs, y, unroll):
        def cell(h, x):
            h = jnp.tanh(x @ q["wx"] + h @ q["wh"] + q["b"])
            return h, None
        h, _ = jax.lax.scan(cell, jnp.zeros((xs.shape[1], 256)), xs, unroll=unroll)
        return xent(h @ q["wo"], y)
    def rnn_sgd(q, xs, y, unroll):
        loss, g = jax.value_and_grad(rnn_loss)(q, xs, y, unroll)
        return jax.tree.map(lambda a, b: a - 0.01 * b, q, g), loss
    ks = jax.random.split(jax.random.PRNGKey(1), 3)
    q = {"wx": jax.random.normal(ks[0], (128, 256)) * 0.05,
         "wh": jax.random.normal(ks[1], (256, 256)) * 0.05, "b": jnp.zeros(256),
         "wo": jax.random.normal(ks[2], (256, 10)) * 0.05}
    XS = np.random.default_rng(2).random((64, 64, 128)).astype(np.float32)
    rnn8 = jax.jit(lambda q, xs, y: rnn_sgd(q, xs, y, 8))
    rnn1 = jax.jit(lambda q, xs, y: rnn_sgd(q, xs, y, 1))
    def body(i):
        global q
        q, loss = rnn8(q, XS, batch(i)[1])
        jax.block_until_ready(q)
    def unrolled1(i):
        jax.block_until_ready(rnn1(q, XS, batch(i)[1]))
    extra["unroll1_step_ms_before_trace"] = timed(unrolled1)
    extra["unroll8_step_ms_before_trace"] = timed(body)
elif case == "linalg_solve_grad_x64_steps":  # float64 solve inside the gradient
    jax.config.update("jax_enable_x64", True)
    def ridge(lam, x, y):
        a = x.T @ x + jnp.exp(lam) * jnp.eye(x.shape[1])
        w = jnp.linalg.solve(a, x.T @ y)
        return jnp.mean((x @ w - y) ** 2)
    grad_ridge = jax.jit(jax.value_and_grad(ridge))
    lam = jnp.asarray(0.0, jnp.float64)
    X64 = np.random.default_rng(3).random((1024, 256))
    Y64 = X64 @ np.random.default_rng(4).random(256) + 0.1
    def body(i):
        global lam
        j = (i * 128) % 512
        v, g = grad_ridge(lam, X64[j:j + 512], Y64[j:j + 512])
        lam = lam - 0.1 * g
        jax.block_until_ready(lam)
    extra["dtype"] = str(lam.dtype)
elif case == "host_tree_map_250_leaves_steps":  # a pure-Python optimizer over 250 leaves
    kq = jax.random.split(jax.random.PRNGKey(5), 250)
    q = {f"layer{k:03d}": jax.random.normal(kq[k], (64, 64)) * 0.1 for k in range(250)}
    XQ = np.random.default_rng(6).random((32, 64)).astype(np.float32)
    def deep_loss(q, x):
        h = x
        for k in range(250):
            h = jnp.tanh(h @ q[f"layer{k:03d}"])
        return jnp.mean(h ** 2)
    grad_q = jax.jit(jax.grad(deep_loss))
    fused = jax.jit(lambda q, x: jax.tree_util.tree_map(
        lambda a, b: a - 0.01 * b, q, jax.grad(deep_loss)(q, x)))
    def body(i):
        global q
        g = grad_q(q, XQ)
        q = jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, q, g)
        jax.block_until_ready(q)
    def fused_step(i):
        global q
        q = fused(q, XQ)
        jax.block_until_ready(q)
    def grad_only(i):
        jax.block_until_ready(grad_q(q, XQ))
    extra["fused_update_step_ms_before_trace"] = timed(fused_step)
    extra["grad_only_ms_before_trace"] = timed(grad_only)
elif case == "nested_trace_annotations_no_step":  # four TraceAnnotations, no step marker
    def loop(first, n):
        with jax.profiler.TraceAnnotation("epoch"):
            with jax.profiler.TraceAnnotation("batch_loop"):
                for i in range(first, first + n):
                    t = time.perf_counter()
                    with jax.profiler.TraceAnnotation("train_step"):
                        with jax.profiler.TraceAnnotation("forward_backward"):
                            body(i)
                    times.append(time.perf_counter() - t)
elif case == "thread_np_save_checkpoint_steps":  # checkpoints written by a thread
    import os, queue, threading
    ckdir = os.path.join(logdir, "ckpt")
    os.makedirs(ckdir, exist_ok=True)
    todo = queue.Queue()
    writes = []
    def writer():
        while True:
            i, snap = todo.get()
            t = time.perf_counter()
            for k, leaf in enumerate(jax.tree.leaves(snap)):
                np.save(os.path.join(ckdir, f"s{i}_{k}.npy"), leaf)  # a device-to-host copy
            writes.append(time.perf_counter() - t)
            todo.task_done()
    threading.Thread(target=writer, daemon=True).start()
    def body(i):
        global p
        p, loss = sgd(p, *batch(i))
        jax.block_until_ready(p)
        if i % 4 == 0:
            todo.put((i, p))
    def report():
        todo.join()
        extra["checkpoint_write_ms"] = [round(w * 1e3, 3) for w in writes[-3:]]
        extra["checkpoint_steps"] = [i for i in range(4, 16) if i % 4 == 0]
elif case == "custom_vjp_clip_layers_steps":  # custom_jvp activation, custom_vjp clip
    @jax.custom_vjp
    def clip_grad(x):
        return x
    def clip_fwd(x):
        return x, None
    def clip_bwd(_, g):
        return (jnp.clip(g, -0.01, 0.01),)
    clip_grad.defvjp(clip_fwd, clip_bwd)
    @jax.custom_jvp
    def softplus(x):
        return jnp.logaddexp(x, 0.0)
    @softplus.defjvp
    def softplus_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), jax.nn.sigmoid(x) * t
    def cv_mlp(q, x):
        for w, b in q[:-1]:
            x = clip_grad(softplus(x @ w + b))
        w, b = q[-1]
        return x @ w + b
    def cv_sgd(q, x, y):
        loss, g = jax.value_and_grad(lambda q: xent(cv_mlp(q, x), y))(q)
        return jax.tree.map(lambda a, b: a - 0.01 * b, q, g), loss
    plain = sgd
    extra["plain_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        plain(p, *batch(i))))
    sgd = jax.jit(cv_sgd)
    extra["custom_step_ms_before_trace"] = timed(lambda i: jax.block_until_ready(
        sgd(p, *batch(i))))
elif case in ("hvp_newton_cg_steps", "jax_scipy_bfgs_minimize_steps"):
    import jax.scipy.optimize, jax.scipy.sparse.linalg
    def lr_loss(w, x, y):
        W = w[:1280].reshape(128, 10)
        return xent(x @ W + w[1280:], y) + 1e-3 * jnp.sum(w ** 2)
    if case == "hvp_newton_cg_steps":
        def solver_fn(w, x, y):
            g = jax.grad(lr_loss)(w, x, y)
            def hvp(v):
                return jax.jvp(lambda u: jax.grad(lr_loss)(u, x, y), (w,), (v,))[1]
            d, _ = jax.scipy.sparse.linalg.cg(hvp, g, maxiter=20)
            return w - d, lr_loss(w, x, y), None  # cg returns no iteration count
    else:
        def solver_fn(w, x, y):
            r = jax.scipy.optimize.minimize(lambda u: lr_loss(u, x, y), w, method="BFGS",
                                            options={"maxiter": 30})
            return r.x, r.fun, r.nit
    solver = jax.jit(solver_fn)
    wv = jnp.zeros(1290)
    nits = []
    def body(i):
        global wv
        wv, loss, nit = solver(wv, *batch(i, 1024))
        jax.block_until_ready(wv)
        nits.append(nit)
    if case == "jax_scipy_bfgs_minimize_steps":
        def report():
            extra["iterations"] = [int(n) for n in nits[-steps:]]
elif case == "replay_buffer_donate_steps":  # device replay buffer, donated writes
    CAP = 16384
    buf_x = jnp.zeros((CAP, 128), jnp.float32)
    buf_y = jnp.zeros((CAP,), jnp.int32)
    def add_fn(bx, by, x, y, pos):
        return (jax.lax.dynamic_update_slice(bx, x, (pos, 0)),
                jax.lax.dynamic_update_slice(by, y, (pos,)))
    add = jax.jit(add_fn, donate_argnums=(0, 1))
    def sample_sgd_fn(q, bx, by, key, filled):
        idx = jax.random.randint(key, (256,), 0, filled)
        return sgd_fn(q, bx[idx], by[idx])
    sample_sgd = jax.jit(sample_sgd_fn)
    rkey = jax.random.PRNGKey(7)
    def body(i):
        global p, buf_x, buf_y, rkey
        x, y = batch(i)
        buf_x, buf_y = add(buf_x, buf_y, x, y.astype(np.int32), (i * 64) % CAP)
        rkey, k = jax.random.split(rkey)
        p, loss = sample_sgd(p, buf_x, buf_y, k, min((i + 1) * 64, CAP))
        jax.block_until_ready(p)
elif case == "prefetch_generator_device_put_steps":  # prefetch_to_device, no thread
    import collections, itertools
    built = []
    def numpy_batches():
        r = np.random.default_rng(1)
        while True:
            t = time.perf_counter()
            raw = r.random((256, 128, 8), np.float32)
            b = np.tanh(raw).mean(axis=2), r.integers(0, 10, (256,))
            built.append(time.perf_counter() - t)
            yield b
    def prefetch_to_device(it, size=2):
        ahead = collections.deque()
        def enqueue(n):
            for b in itertools.islice(it, n):
                ahead.append(jax.device_put(b))
        enqueue(size)
        while ahead:
            yield ahead.popleft()
            enqueue(1)
    batches = prefetch_to_device(numpy_batches())
    noisy_sgd = jax.jit(lambda q, x, y, k: sgd_fn(q, x + 0.01 * jax.random.normal(k, x.shape),
                                                  y))
    rkey = jax.random.PRNGKey(3)
    def body(i):
        global p, rkey
        rkey, k = jax.random.split(rkey)
        x, y = next(batches)
        p, loss = noisy_sgd(p, x, y, k)
        jax.block_until_ready(p)
    def report():
        extra["batch_build_ms"] = [round(b * 1e3, 3) for b in built[-steps:]]
else:
    raise SystemExit("unknown case " + case)
if "loop" not in globals():
  def loop(first, n):
    for i in range(first, first + n):
        marked(i, body)
loop(0, 4)
times.clear()
with jax.profiler.trace(logdir):
    loop(4, steps)
params["steps"] = steps
params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
if "report" in globals():
    report()
params.update(extra)
print(json.dumps(params))
"""

# Cases that need TensorFlow beside JAX: run by this Python (the project's venv has both).
WITH_TENSORFLOW = {"tfdata_loader_steps", "tfdata_wait_in_steps", "tfdata_wait_between_steps",
                   "tfdata_wait_loader_thread", "tfdata_wait_no_tracer"}

# Cases that split the host into several XLA CPU devices.
DEVICE_COUNTS = {"pmap_four_devices": 4, "sharded_two_devices": 2, "shard_map_psum_steps": 2,
                 "fsdp_all_gather_ppermute_four_devices": 4, "pmap_numpy_reshape_steps": 4,
                 "mesh_2x2_tensor_parallel_steps": 4}
# Cases that run Keras 3 fit on the JAX backend (their own child script).
KERAS_JAX = {"keras_jax_fit", "keras_jax_spe4_fit", "keras_jax_fit_plain", "keras_jax_nojit_fit",
             "keras_jax_tfdata_slow_fit"}

_CHILD = """
import json, pathlib, sys
import jax, jax.numpy as jnp

case, logdir = sys.argv[1], sys.argv[2]
step = jax.jit(lambda w, x: w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w))
w, x = jnp.ones((128, 128)), jnp.ones((64, 128))
if case == "pmap_four_devices":
    def replica(w, x):
        g = jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
        return w - 0.01 * jax.lax.pmean(g, "d")
    step = jax.pmap(replica, axis_name="d")
    w, x = jnp.ones((4, 128, 128)), jnp.ones((4, 16, 128))
elif case == "sharded_two_devices":
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(jax.devices()), ("d",))
    x = jax.device_put(x, NamedSharding(mesh, PartitionSpec("d", None)))
    w = jax.device_put(w, NamedSharding(mesh, PartitionSpec()))
elif case == "scan_four_steps":
    def four(w, x):
        def body(w, _):
            return w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w), None
        return jax.lax.scan(body, w, None, length=4)[0]
    step = jax.jit(four)
elif case == "recompile_each_step":
    import itertools
    scaled = jax.jit(lambda w, x, k: w - 0.01 * (1 + k / 1000) * jax.grad(
        lambda w: ((x @ w) ** 2).mean())(w), static_argnums=2)
    calls = itertools.count()
    step = lambda w, x: scaled(w, x, next(calls))  # a new static value: a new compile
elif case == "io_callback_steps":
    import tempfile
    from jax.experimental import io_callback
    journal = open(tempfile.mktemp(prefix="tfobs-loss-"), "w")
    def log(loss):  # a metric logger in the job's own code
        journal.write(f"{float(loss):.6f}\\n")
        journal.flush()
    def logged(w, x):
        loss = ((x @ w) ** 2).mean()
        io_callback(log, None, loss, ordered=True)
        return w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
    step = jax.jit(logged)
elif case == "debug_print_steps":
    def printed(w, x):
        loss = ((x @ w) ** 2).mean()
        jax.debug.print("loss {l}", l=loss)
        return w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
    step = jax.jit(printed)
elif case == "async_two_jits_steps":
    grad = jax.jit(jax.grad(lambda w, x: ((jnp.tanh(x @ w) @ w.T - x) ** 2).mean()))
    apply = jax.jit(lambda w, g: w - 0.01 * g)
    step = lambda w, x: apply(w, grad(w, x))
elif case == "block_tree_metrics":
    def with_metrics(w, x):
        loss, g = jax.value_and_grad(lambda w: ((x @ w) ** 2).mean())(w)
        w = w - 0.01 * g
        return w, {"loss": loss, "grad_norm": jnp.sqrt((g ** 2).sum()), "w_max": w.max()}
    tree_step = jax.jit(with_metrics)
    step = lambda w, x: tree_step(w, x)[0]  # the warm-up below
    w, x = jnp.ones((256, 256)), jnp.ones((256, 256))
elif case == "async_calls_no_markers":
    step = jax.jit(lambda w, x: w - 0.01 * jax.grad(
        lambda w: ((jnp.tanh(x @ w) @ w.T - x) ** 2).mean())(w))
    w, x = jnp.ones((512, 512)) * 0.01, jnp.ones((256, 512))
elif case == "callback_on_xla_threads":
    import time as _time
    logged = []
    def logger(loss):
        logged.append(float(loss))
        _time.sleep(0.002)
    def logged_step(w, x):
        loss, g = jax.value_and_grad(lambda w: ((jnp.tanh(x @ w) @ w.T - x) ** 2).mean())(w)
        jax.debug.callback(logger, loss)
        return w - 0.01 * g
    step = jax.jit(logged_step)
    w, x = jnp.ones((512, 512)) * 0.01, jnp.ones((256, 512))
elif case == "metric_read_each_step":
    def with_loss(w, x):
        loss, g = jax.value_and_grad(lambda w: ((x @ w) ** 2).mean())(w)
        return w - 0.01 * g, loss
    loss_step, history = jax.jit(with_loss), []
    step = lambda w, x: loss_step(w, x)[0]  # the warm-up below
elif case == "op_by_op_steps":  # no jax.jit: the job's forgotten one
    step = lambda w, x: w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
elif case == "device_put_each_step":
    import numpy as np
    host_batches = [np.random.default_rng(k).random((1024, 4096), np.float32) for k in range(2)]
    step = jax.jit(lambda w, x: w - 1e-6 * (x.T @ (x @ w)))
    w, x = jnp.zeros((4096, 1)), jnp.asarray(host_batches[0])
elif case == "orbax_saves_steps":
    import tempfile
    import orbax.checkpoint as ocp
    saves = ocp.CheckpointManager(tempfile.mkdtemp(prefix="tfobs-orbax-"),
                                  options=ocp.CheckpointManagerOptions(
                                      max_to_keep=2, save_interval_steps=4))
elif case in ("grain_threads_steps", "grain_workers_steps"):
    import grain, grain_job  # grain_job: the transform, importable by worker processes
    from absl import flags
    flags.FLAGS.mark_as_parsed()  # grain reads its flags; a -c script parses none
    step = jax.jit(lambda w, x: w - 0.01 * x.T @ (x @ w) / x.shape[0])
    w = jnp.zeros((256, 1))
    if case == "grain_threads_steps":
        batches = iter(grain.MapDataset.range(4096).map(grain_job.record).batch(64)
                       .to_iter_dataset(grain.ReadOptions(num_threads=2,
                                                          prefetch_buffer_size=2)))
    else:
        batches = iter(grain.DataLoader(
            data_source=grain_job.Records(), worker_count=2,
            sampler=grain.samplers.IndexSampler(num_records=4096, shuffle=False, seed=0,
                                                num_epochs=None),
            operations=[grain_job.Slow(), grain.transforms.Batch(64, drop_remainder=True)]))
    x = next(batches)["x"]  # workers started, the first batch made before the trace
elif case == "ema_outside_jit_steps":
    def sgd(params, x):
        def loss(params):
            h = x
            for p in params:
                h = jnp.tanh(h @ p)
            return (h ** 2).mean()
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, jax.grad(loss)(params))
    step = jax.jit(sgd)
    w = [jnp.ones((128, 256)) * 0.01, jnp.ones((256, 256)) * 0.01, jnp.ones((256, 8)) * 0.01]
    ema = w
    def average(ema, params):  # outside jit: every multiply and add dispatched on its own
        return jax.tree_util.tree_map(lambda e, p: 0.999 * e + 0.001 * p, ema, params)
elif case == "tiny_steps_long":
    step = jax.jit(lambda w, x: w - 0.001 * (x @ w))
    w, x = jnp.ones((16, 16)), jnp.ones((16, 16))
elif case == "remat_donate_steps":
    def remat_loss(ws, x):
        h = x
        for wl in ws:
            h = jax.checkpoint(lambda h, wl: jnp.tanh(h @ wl))(h, wl)
        return (h ** 2).mean()
    step = jax.jit(lambda ws, x: [wl - 0.01 * g for wl, g in zip(ws, jax.grad(remat_loss)(ws, x))],
                   donate_argnums=0)
    w = [jnp.ones((256, 256)) * 0.01 for _ in range(4)]
    x = jnp.ones((128, 256))
elif case == "pure_callback_steps":
    import numpy as np, time as _t
    def host_metric(loss):
        _t.sleep(0.001)
        return np.sort(np.full((64,), loss, np.float32))[:1].reshape(())
    def cb_step(w, x):
        loss, g = jax.value_and_grad(lambda w: ((x @ w) ** 2).mean())(w)
        m = jax.pure_callback(host_metric, jax.ShapeDtypeStruct((), jnp.float32), loss)
        return w - 0.01 * g * (1.0 + 0.0 * m)
    step = jax.jit(cb_step)
elif case == "shard_map_psum_steps":
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    try:
        from jax import shard_map as _sm
        smap = lambda f, mesh, in_specs, out_specs: _sm(
            f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    except ImportError:
        from jax.experimental.shard_map import shard_map as _sm
        smap = lambda f, mesh, in_specs, out_specs: _sm(
            f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    def local(w, x):
        g = jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
        return w - 0.01 * jax.lax.pmean(g, "d")
    step = jax.jit(smap(local, mesh, (P(), P("d", None)), P()))
    x = jnp.ones((128, 128))
elif case == "compute_wait_steps":
    def twenty(w, x):
        def body(_, w):
            return w - 0.01 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
        return jax.lax.fori_loop(0, 20, body, w)
    step = jax.jit(twenty)
if case.startswith("tfdata_"):
    import numpy as np, tensorflow as tf
    waves = tf.linspace(0.0, 1.0, 256)[:, None]
    batches = (tf.data.Dataset.from_tensor_slices(np.ones((4096, 128), np.float32))
               .map(lambda r: tf.reduce_mean(tf.sin(r[None, :] * waves), 0))
               .batch(64).repeat().prefetch(2).as_numpy_iterator())
    if case.startswith("tfdata_wait_"):
        from tfobs.capture import tfdata_wait
        tfdata_wait.install()
    if case == "tfdata_wait_loader_thread":
        import queue, threading
        source, batches = batches, queue.Queue(maxsize=2)
        def loader():
            for _ in range(40):
                batches.put(next(source))
        threading.Thread(target=loader, daemon=True).start()
key, x0 = jax.random.key(0), x
for _ in range(3):
    w = jax.block_until_ready(step(w, x))
    if case == "ema_outside_jit_steps":
        ema = jax.block_until_ready(average(ema, w))
    if case == "rng_split_outside_jit":  # the op-by-op calls compiled before the trace
        (x0 + 0.01 * jax.random.normal(jax.random.split(key)[1], x0.shape)).block_until_ready()
if case == "tfobs_step":
    import tfobs
if case == "jitted_step_window_end":
    from tfobs.capture.jax_profiler import JaxBackend
    backend = JaxBackend()
    def window_end():
        metric = float(jnp.mean(w)) + float(jnp.zeros(()))
        backend.drain()
    window_end()
import contextlib, time
def mark(i):
    if case == "step_annotation":
        return jax.profiler.StepTraceAnnotation("step", step_num=i)
    if case in ("python_wait_steps", "epoch_step_annotations", "pmap_four_devices",
                "sharded_two_devices", "scan_four_steps", "async_dispatch_steps",
                "async_two_jits_steps",
                "python_loader_thread", "compute_wait_steps", "recompile_each_step",
                "debug_print_steps", "io_callback_steps", "tfdata_loader_steps",
                "tfdata_wait_in_steps",
                "tfdata_wait_between_steps", "tfdata_wait_loader_thread",
                "tfdata_wait_no_tracer", "op_by_op_steps", "jitted_step_window_end",
                "block_tree_metrics", "rng_split_outside_jit", "metric_read_each_step",
                "callback_on_xla_threads", "python_generator_between_steps",
                "tiny_steps_long", "polling_thread_steps", "device_put_each_step",
                "shape_buckets_steps", "orbax_saves_steps", "grain_threads_steps",
                "grain_workers_steps", "ema_outside_jit_steps", "remat_donate_steps",
                "pure_callback_steps", "shard_map_psum_steps"):
        return jax.profiler.StepTraceAnnotation("train", step_num=i)
    if case == "tfobs_step":
        return tfobs.step(i)
    if case in ("jitted_calls_only", "async_calls_no_markers"):
        return contextlib.nullcontext()
    return jax.profiler.TraceAnnotation("batch", step_num=i, _r=1)
if case == "python_loader_thread":
    import queue, threading, numpy as np
    batches = queue.Queue(maxsize=2)
    def loader():
        rng = np.random.default_rng(0)
        for _ in range(40):
            time.sleep(0.001)
            batches.put(jnp.asarray(rng.random((64, 128), np.float32)))
    threading.Thread(target=loader, daemon=True).start()
def update():  # the step as a Python function of the job's own (a frame of its own)
    global w
    w = step(w, x)
    w.block_until_ready()
if case == "python_generator_between_steps":
    import numpy as np
    def numpy_batches():  # a job's own loader: numpy work per batch, no thread
        rng = np.random.default_rng(0)
        while True:
            raw = rng.random((64, 128, 24), np.float32)
            yield np.tanh(raw).mean(axis=2) * np.float32(0.5)
    batches = numpy_batches()
def run(i):
    global w, x
    if case in ("tfdata_wait_between_steps", "python_generator_between_steps"):
        x = next(batches)
    with mark(i):
        if case == "compute_wait_steps":
            update()
            return
        if case == "python_wait_steps":
            time.sleep(0.002)
        if case == "jitted_step_window_end":  # a step of a real model's length
            time.sleep(0.015)
        if case in ("python_loader_thread", "tfdata_wait_loader_thread"):
            x = batches.get()
        if case in ("tfdata_loader_steps", "tfdata_wait_in_steps", "tfdata_wait_no_tracer"):
            x = next(batches)
        if case in ("grain_threads_steps", "grain_workers_steps"):
            x = next(batches)["x"]
        if case == "rng_split_outside_jit":  # op by op, outside jit: JAX's Python dispatch
            global key
            key, sub = jax.random.split(key)
            x = x0 + 0.01 * jax.random.normal(sub, x0.shape)
        if case == "shape_buckets_steps":  # a new padded length every three steps
            x = jnp.ones((64 + 32 * min(i // 3, 4), 128))
        if case == "device_put_each_step":  # a new host batch copied in every step
            x = jax.device_put(host_batches[i % 2])
        if case == "metric_read_each_step":  # the loss read on the host every step
            w, loss = loss_step(w, x)
            history.append((float(loss), int(loss > 0)))
            return
        if case == "ema_outside_jit_steps":
            global ema
            w = step(w, x)
            ema = jax.block_until_ready(average(ema, w))
            return
        if case == "block_tree_metrics":
            w, metrics = tree_step(w, x)
            jax.block_until_ready((w, metrics))
            return
        w = step(w, x)
        if case == "remat_donate_steps":
            jax.block_until_ready(w)
            return
        if case not in ("async_dispatch_steps", "async_two_jits_steps",
                        "async_calls_no_markers"):
            w.block_until_ready()
        if case == "orbax_saves_steps":  # writes at every fourth step
            saves.save(i, args=ocp.args.StandardSave({"w": w}))
_times = []
_run = run
def run(i):
    _t0 = time.perf_counter()
    _run(i)
    _times.append(time.perf_counter() - _t0)
steps = {"tiny_steps_long": 3000, "shape_buckets_steps": 15, "orbax_saves_steps": 17}.get(
    case, 12)
if case == "polling_thread_steps":  # a job's watchdog written as a busy loop
    import threading
    stop = threading.Event()
    def poll():
        n = 0
        while not stop.is_set():
            for _ in range(100):
                n += 1
    threading.Thread(target=poll, daemon=True).start()
    time.sleep(0.05)
options = None
if case == "tfdata_wait_no_tracer":  # as tfobs's live windows: no Python tracer
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level, options.host_tracer_level = 0, 2
with (jax.profiler.trace(logdir, profiler_options=options) if options is not None
      else jax.profiler.trace(logdir)):
    if case == "two_thread_steps":
        import threading
        def trainer():
            v = w
            for i in range(12):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    v = step(v, x)
                    v.block_until_ready()
        threads = [threading.Thread(target=trainer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elif case == "epoch_step_annotations":
        for e in range(2):
            with jax.profiler.StepTraceAnnotation("epoch", step_num=e):
                for i in range(6 * e, 6 * e + 6):
                    run(i)
    else:
        for i in range(steps):
            run(i)
    if case in ("async_two_jits_steps", "async_calls_no_markers"):  # the queued work
        w.block_until_ready()  # runs inside the trace
    if case == "jitted_step_window_end":  # compiled before the trace: calls of 0.1 ms
        window_end()
jax.block_until_ready(w)
if case == "polling_thread_steps":
    stop.set()
if case == "orbax_saves_steps":
    saves.wait_until_finished()
params = {"jax": jax.__version__, "steps": steps, "python": sys.version.split()[0],
          "measured_step_ms": [round(t * 1e3, 3) for t in _times]}
if case.startswith("tfdata_"):
    params["tensorflow"] = tf.__version__
if case == "orbax_saves_steps":
    params["orbax_checkpoint"] = getattr(ocp, "__version__", "")
if case.startswith("grain_"):
    from importlib.metadata import version
    params["grain"] = version("grain")
print(json.dumps(params))
"""


_KERAS_CHILD = """
import json, sys, time
import numpy as np
import jax, keras
case, logdir = sys.argv[1], sys.argv[2]
spe = 4 if case == "keras_jax_spe4_fit" else 1
steps = 16 if spe == 4 else 12
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=spe,
              jit_compile=case != "keras_jax_nojit_fit")
rng = np.random.default_rng(0)
x = rng.random((64 * 64, 256), np.float32)
y = rng.random((64 * 64, 1), np.float32)
data = dict(x=x, y=y, batch_size=64)
fetch_ms = []
if case == "keras_jax_tfdata_slow_fit":
    import tensorflow as tf
    def slow(xb):
        t = time.perf_counter()
        time.sleep(0.004)
        fetch_ms.append(time.perf_counter() - t)
        return xb
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
          .map(lambda a, b: (tf.ensure_shape(tf.py_function(slow, [a], tf.float32), (64, 256)), b))
          .repeat())
    data = dict(x=ds)
times = []
class Timer(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.t = time.perf_counter()
    def on_train_batch_end(self, batch, logs=None):
        times.append(time.perf_counter() - self.t)
cbs = [Timer()]
if case != "keras_jax_fit_plain":
    from tfobs.capture.markers import keras3_callback_class
    cbs.insert(0, keras3_callback_class()())
model.fit(**data, epochs=1, steps_per_epoch=8, verbose=0, callbacks=cbs)
times.clear()
fetch_ms.clear()
t0 = time.perf_counter()
with jax.profiler.trace(logdir):
    model.fit(**data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=cbs)
total = time.perf_counter() - t0
print(json.dumps({"jax": jax.__version__, "keras": keras.__version__, "steps": steps,
                  "steps_per_execution": spe, "python": sys.version.split()[0],
                  "fit_wall_ms": round(total * 1e3, 3),
                  "measured_batch_ms": [round(t * 1e3, 3) for t in times],
                  "py_function_ms": [round(t * 1e3, 3) for t in fetch_ms]}))
"""


# The grain cases' records and per-record transform (numpy, slower than the step).
_GRAIN_JOB = """
import grain
import numpy as np


def record(i):
    v = np.random.default_rng(i).normal(size=256).astype("float32")
    for _ in range(20):
        v = np.tanh(v + np.sort(v)[::-1] * 0.01)
    return {"x": v}


class Records:
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return int(i)


class Slow(grain.transforms.Map):
    def map(self, element):
        return record(element)
"""


def record(case: str, out: pathlib.Path, jax_python: str) -> pathlib.Path:
    with tempfile.TemporaryDirectory(prefix="tfobs-jaxrec-") as logdir:
        env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
        if case in DEVICE_COUNTS:
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICE_COUNTS[case]}"
        if case == "jitted_step_window_end":
            env["PYTHONPATH"] = str(ROOT)  # tfobs.capture.jax_profiler
        if case.startswith("grain_"):  # the transform as a module grain's workers import
            (pathlib.Path(logdir) / "grain_job.py").write_text(_GRAIN_JOB)
            env["PYTHONPATH"] = logdir
        if case in WITH_TENSORFLOW:
            jax_python = sys.executable
            env["TF_CPP_MIN_LOG_LEVEL"] = "2"
            env["PYTHONPATH"] = str(ROOT)  # tfobs.capture.tfdata_wait
        if case in KERAS_JAX:
            env["KERAS_BACKEND"] = "jax"
            env["PYTHONPATH"] = str(ROOT)
            env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        child = (_HOST_LOOPS_CHILD if case in HOST_LOOPS
                 else _SOLVER_LOOPS_CHILD if case in SOLVER_LOOPS
                 else _NUMERIC_STEPS_CHILD if case in NUMERIC_STEPS
                 else _TRAINER_LOOPS_CHILD if case in TRAINER_LOOPS
                 else _FRESH_LOOPS_CHILD if case in FRESH_LOOPS
                 else _MLP_LOOPS_CHILD if case in MLP_LOOPS
                 else _STANDALONE_CHILD if case in STANDALONE
                 else _USAGE_LOOPS_CHILD if case in USAGE_LOOPS
                 else _KERAS_CHILD if case in KERAS_JAX else _CHILD)
        proc = subprocess.run([jax_python, "-c", child, case, logdir], capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{case}: workload failed\n{proc.stderr[-3000:]}")
        params = json.loads(proc.stdout.strip().splitlines()[-1])
        (found,) = pathlib.Path(logdir).rglob("*.xplane.pb")
        stem = f"generated__jax{'.'.join(params['jax'].split('.')[:2])}cpu__{case}"
        (out / "captures").mkdir(parents=True, exist_ok=True)
        dest = out / "captures" / f"{stem}.xplane.pb"
        shutil.copyfile(found, dest)
    sys.path.insert(0, str(ROOT))
    from tests.support.recorded import save_answers, save_provenance

    save_answers(dest, out / "xprof-2.24.2")
    save_provenance(out / "provenance", dest, {
        "case": case, "what_ran": CASES[case], "parameters": params,
        "platform": "cpu (JAX_PLATFORMS=cpu)", "host_python": platform.python_version(),
        "recorder": "tools/record_jax_cpu_captures.py"})
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "tests" / "data"))
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--jax-python", default=str(ROOT / ".venv-jax" / "bin" / "python"),
                   help="a Python with JAX (scripts/jax_venv.sh builds .venv-jax)")
    args = p.parse_args(argv)
    for case in [c for c in args.cases.split(",") if c]:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")
        dest = record(case, pathlib.Path(args.out), args.jax_python)
        print(f"{case}: {dest} {dest.stat().st_size / 1e3:.0f} KB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
