"""Record TensorFlow CPU captures of ordinary workloads, with XProf 2.24.2's answers, for tests.

    python tools/record_tf_captures.py --out tests/data            # every case
    python tools/record_tf_captures.py --out /tmp/c --cases xla_jit,mirrored

Each case runs in its own Python process (environment variables such as
`TF_CPU_ALLOCATOR_USE_BFC` must be set before TensorFlow is imported; one profiler session
per process), warms up outside the trace, then profiles a few steps with the public
`tf.profiler.experimental.start/stop` (host level 2, the default). The script then copies
`<host>.xplane.pb` to `<out>/captures/generated__tf<ver>cpu__<case>.xplane.pb`, runs XProf's
five tools on a fresh copy (`tests/support/xprof_reference.py`) into
`<out>/xprof-2.24.2/<stem>.<tool>.json`, and writes `<out>/provenance/<stem>.json` (TF,
Keras, XProf versions, date, host CPU, the case's description and parameters).

Steps are marked with tfobs's own markers (`tfobs.step` in custom loops, tfobs's Keras
callback in `fit`) except where a case says otherwise, so XProf and tfobs see the same
steps.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_BYTES = 20 * 1024 * 1024

# name -> (description, extra environment)
CASES: dict[str, tuple[str, dict[str, str]]] = {
    "recompute_grad_loop": (
        "custom loop training 6 residual Dense(512) blocks, each wrapped in "
        "`tf.recompute_grad` (gradient checkpointing: the forward pass runs again in the "
        "backward pass), batch 256, Adam; tfobs.step markers", {}),
    "auc_metric_fit": (
        "Keras 3 fit of a small binary classifier (batch 256) compiled with "
        "`keras.metrics.AUC(num_thresholds=20000)`, `AUC(curve='PR', num_thresholds=20000)` "
        "and `Precision`/`Recall`: the metrics' per-threshold confusion-matrix updates run "
        "in every step; tfobs's Keras callback", {}),
    "iterator_per_step_loop": (
        "custom loop taking each batch with `next(iter(ds))`: a new iterator every step over "
        "tf.data `shuffle(8192)` + parallel map + batch(128) + prefetch, so the shuffle "
        "buffer fills again (and the same first batches come back) every step; the job's "
        "own `Trace('train', step_num=i, _r=1)` markers", {}),
    "mha_jit_fit": (
        "Keras 3 fit of two MultiHeadAttention encoder blocks (8 heads, length 64, dim 128) "
        "compiled with `jit_compile=True` (XLA on CPU), batch 32; tfobs's Keras callback",
        {}),
    "background_numpy_thread_loop": (
        "custom loop of a tf.function MLP step while a Python thread of the job computes "
        "NumPy statistics (1024 x 1024 matmuls) in the background, competing for the two "
        "cores; tfobs.step markers", {}),
    "big_softmax_head_loop": (
        "custom loop training a classifier over 50,000 classes: Dense(256) features, a "
        "Dense(50,000) output and sparse softmax cross-entropy, batch 128, SGD; the output "
        "layer's matmuls and gradient dominate the step; tfobs.step markers", {}),
    "channels_first_conv_fit": (
        "Keras 3 fit of a conv net built with `data_format='channels_first'` (Conv2D, "
        "MaxPooling2D, GlobalAveragePooling2D) on 32 x 3 x 64 x 64 batches on CPU; "
        "tfobs's Keras callback", {}),
    "gather_grad_densified_loop": (
        "custom loop training an embedding table of 200,000 x 64 read by `tf.gather` (batch "
        "256 x 8 ids), the step guarding its gradients with `tf.where(tf.math.is_finite(g), "
        "g, 0)`: the gather's IndexedSlices gradient is made dense (the whole table, every "
        "step) before a dense SGD update; tfobs.step markers", {}),
    "ctc_loss_loop": (
        "custom loop training a Conv1D + Dense acoustic model (batch 32, 100 frames of 40 "
        "features, 29 classes) with `tf.nn.ctc_loss` on dense labels of 12-20 tokens "
        "(logits_time_major=False, blank_index=-1); tfobs.step markers", {}),
    "detection_nms_crop_loop": (
        "custom loop of a detection-style step: a small conv backbone on 8 images of "
        "128x128x3, 256 random boxes per image scored by the model, "
        "`tf.image.non_max_suppression` per image (a Python loop over the batch, 32 kept), "
        "`tf.image.crop_and_resize` of the features to 7x7 per kept box, a Dense head; "
        "tfobs.step markers", {}),
    "hash_table_tokenize_fit": (
        "Keras 3 fit over tf.data of raw sentences: a parallel map lowercasing, stripping "
        "punctuation (`tf.strings.regex_replace`), splitting (`tf.strings.split`) and "
        "looking tokens up in a `tf.lookup.StaticHashTable` (5,000 words, OOV 0), then "
        "`to_tensor` padded to 32, batch(64), prefetch; Embedding + pooling + Dense; "
        "tfobs's Keras callback", {}),
    "backup_restore_fit": (
        "Keras 3 fit of an MLP (128-512-512-10) on NumPy arrays with "
        "`keras.callbacks.BackupAndRestore(backup_dir, save_freq=3)`: a backup of the "
        "model and optimizer every third batch; tfobs's Keras callback", {}),
    "sparse_dense_matmul_loop": (
        "custom loop whose model multiplies a batch of 256 sparse rows (100,000 features, "
        "64 non-zeros a row, a `tf.SparseTensor`) by a 100,000 x 64 weight with "
        "`tf.sparse.sparse_dense_matmul`, then Dense layers; SGD: the weight's gradient "
        "is a dense 100,000 x 64 matmul every step; tfobs.step markers", {}),
    "variable_assign_numpy_loop": (
        "custom loop that copies each batch into `tf.Variable`s from NumPy "
        "(`x_var.assign(x_np)`, 1024 x 1024 floats, and the labels) every step, then calls "
        "a tf.function step reading the variables: eager AssignVariableOp and "
        "host-to-tensor copies in each step; tfobs.step markers", {}),
    "many_small_layers_fit": (
        "Keras 3 fit of a Sequential of 100 Dense(8, relu) layers on 16 features, batch "
        "32: thousands of tiny ops a step (op-dispatch bound); tfobs's Keras callback", {}),
    "persistent_tape_two_grads_loop": (
        "custom loop, tf.function step with tf.GradientTape(persistent=True): two losses "
        "(mse and an L2 activity penalty), two tape.gradient calls per step, one apply; "
        "tfobs.step markers", {}),
    "sample_weight_triples_fit": (
        "Keras 3 fit on a tf.data dataset of (x, y, w) triples (per-sample weights from the "
        "dataset), 10-class softmax MLP; tfobs's Keras callback", {}),
    "batch_nondet_map_after_fit": (
        "Keras 3 fit, tf.data from_tensor_slices -> repeat -> batch(64, num_parallel_calls="
        "AUTOTUNE, deterministic=False) -> map after batch of a slow vectorized op (48 "
        "rounds of sin/matmul on the batch) -> prefetch; tfobs's Keras callback", {}),
    "conv_bn_custom_loop": (
        "custom tf.function loop, Conv2D + BatchNormalization + Dense on 32x32x3 images; "
        "oneDNN ops (`_MklNativeConv2D*`, `_MklFusedBatchNorm*`); tfobs.step markers", {}),
    "lstm_bfc_varying": (
        "custom loop, Embedding + 2-layer LSTM, a new (batch, length) every step, "
        "TF_CPU_ALLOCATOR_USE_BFC=true (allocation events); LSTM runs an in-graph while loop; "
        "tfobs.step markers; the large capture for the speed benchmark",
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "keras3_spe4_callback": (
        "Keras 3 fit, steps_per_execution=4, tfobs's Keras callback (markers)", {}),
    "keras3_spe4_plain": (
        "Keras 3 fit, steps_per_execution=4, no callback (no step markers)", {}),
    "mixed_precision_fit": (
        "Keras 3 fit under mixed_bfloat16, tfobs's Keras callback, BFC allocator",
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "mirrored": (
        "custom loop, MirroredStrategy over 2 logical CPU devices, tfobs.step markers", {}),
    "numpy_preprocess": (
        "custom loop whose step preprocesses its batch with numpy in Python, then runs a "
        "tf.function train step; tfobs.step markers", {}),
    "xla_jit": (
        "custom loop, tf.function(jit_compile=True) train step (XLA CPU), tfobs.step markers, "
        "BFC allocator", {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "slow_callback": (
        "Keras 3 fit, tfobs's Keras callback first, then a callback sleeping 5 ms in "
        "on_train_batch_end (time between steps)", {}),
    "gan_two_tapes": (
        "custom loop, a small GAN: generator and discriminator, two GradientTapes and two "
        "optimizers in one tf.function step; tfobs.step markers", {}),
    "transformer_bf16": (
        "custom loop, one transformer block (MultiHeadAttention, LayerNormalization, "
        "feed-forward) under mixed_bfloat16, BFC allocator; tfobs.step markers",
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "tfrecord_fit": (
        "Keras 3 fit on TFRecord files: interleave over 4 files, parse_example, a map, "
        "batch and prefetch; tfobs's Keras callback", {}),
    "gru_fit": (
        "Keras 3 fit, Embedding + GRU (an in-graph while loop), tfobs's Keras callback", {}),
    "fit_validation": (
        "Keras 3 fit with validation_data every epoch (test steps between train steps), "
        "Dropout and BatchNormalization, tfobs's Keras callback", {}),
    "fit_validation_unmarked": (
        "the `fit_validation` workload (Keras 3 fit with validation_data every epoch) with no "
        "step markers (no tfobs callback: a TensorBoard-style profile): fit's training and "
        "validation functions are both `multi_step_on_iterator`, two concrete functions", {}),
    "mirrored_fit": (
        "Keras 3 fit under MirroredStrategy over 2 logical CPU devices, tfobs's Keras "
        "callback", {}),
    "resnet_fit": (
        "Keras 3 fit, a small residual conv net: strided Conv2D, DepthwiseConv2D, "
        "BatchNormalization, residual Add, MaxPooling2D; tfobs's Keras callback", {}),
    "bilstm_custom_loop": (
        "custom loop, Embedding + Bidirectional LSTM (two in-graph while loops), a new batch "
        "size every step, BFC allocator; tfobs.step markers", {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "gru_spe3_fit": (
        "Keras 3 fit, GRU with steps_per_execution=3 (a while loop inside a loop over "
        "steps), tfobs's Keras callback", {}),
    "numpy_function_input": (
        "Keras 3 fit whose tf.data map runs Python through tf.numpy_function (per-element "
        "numpy work in the input pipeline), no prefetch; tfobs's Keras callback", {}),
    "xla_fit": (
        "Keras 3 fit with model.compile(jit_compile=True) (XLA CPU), tfobs's Keras callback, "
        "BFC allocator", {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "while_loop_step": (
        "custom loop whose tf.function step runs an explicit tf.while_loop of 4 inner "
        "updates; tfobs.step markers", {}),
    "eager_loop": (
        "custom loop without tf.function (eager ops, GradientTape), tfobs.step markers", {}),
    "tfkeras_profile_batch": (
        "tf_keras (Keras 2) fit profiled by the TensorBoard callback's profile_batch range, "
        "no tfobs markers", {"TF_USE_LEGACY_KERAS": "1"}),
    "two_functions_step": (
        "custom loop whose step calls two tf.functions (gradients, then a separate apply), "
        "gradient accumulation over 2 micro-batches; tfobs.step markers", {}),
    "summaries_fit": (
        "Keras 3 fit with TensorBoard's callback writing scalars every batch and histograms "
        "every epoch (summary ops beside the step), tfobs's Keras callback", {}),
    "string_input_fit": (
        "Keras 3 fit on text: tf.data of strings through TextVectorization in the input "
        "pipeline (string ops on the host), Embedding + pooling; tfobs's Keras callback", {}),
    "ragged_text_fit": (
        "Keras 3 fit on ragged token lists (tf.RaggedTensor batches from tf.data's "
        "ragged_batch) pooled by a custom layer; tfobs's Keras callback", {}),
    "augment_fit": (
        "Keras 3 fit of a conv net with RandomFlip/RandomTranslation layers in the model and "
        "tf.image ops in a parallel tf.data map after cache and shuffle; tfobs's Keras callback",
        {}),
    "augment_in_pipeline_fit": (
        "Keras 3 fit of a small conv net on 64x64x3 images, batch 32, its random augmentation "
        "(RandomFlip, RandomRotation(0.1), RandomZoom(0.1) as a Keras model) applied in a "
        "parallel tf.data map on each batch before prefetch: every batch ready, tf.data's "
        "threads busy on the cores the step computes on; tfobs's Keras callback", {}),
    "augment_in_model_fit": (
        "the same fit with the three Random* layers at the start of the model instead (the "
        "control of augment_in_pipeline_fit); tfobs's Keras callback", {}),
    "jpeg_decode_plain_fit": (
        "Keras 3 fit of a small conv net, no step markers (steps inferred), fed by a parallel "
        "tf.data map decoding and resizing JPEG images; the conv output's allocation reaches "
        "the memory peak in every step, on two executor threads in turn", {}),
    "checkpoint_callback_fit": (
        "Keras 3 fit of a small MLP on NumPy arrays with ModelCheckpoint(save_weights_only=True, "
        "save_freq=2): the weights go to a .weights.h5 file every other batch, read eagerly "
        "(ReadVariableOp) between the steps; no step markers (steps inferred)", {}),
    "checkpoint_every_4_fit": (
        "Keras 3 fit of an MLP (128-512-512-10) on NumPy arrays, 3 epochs of 8 batches, with "
        "ModelCheckpoint(save_weights_only=True, save_freq=4): a .weights.h5 write from Python "
        "after every fourth batch, a pause between the steps that no op covers but the "
        "weights' eager reads; no step markers (steps inferred)", {}),
    "sparse_custom_loop": (
        "custom loop, a wide model over tf.SparseTensor features (embedding_lookup_sparse) "
        "beside a dense tower; tfobs.step markers", {}),
    "multi_input_fit": (
        "Keras 3 fit of a functional model with two named inputs and two outputs (dict "
        "datasets, two losses); tfobs's Keras callback", {}),
    "autoencoder_custom_loop": (
        "custom loop, a conv autoencoder (Conv2D down, Conv2DTranspose up), BFC allocator; "
        "tfobs.step markers", {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "profiler_server": (
        "custom loop traced on demand through TensorFlow's profiler server "
        "(tf.profiler.experimental.server.start + client.trace from another thread), "
        "tfobs.step markers", {}),
    "python_tracer_fit": (
        "Keras 3 fit profiled with python_tracer_level=1 (Python function events beside TF's "
        "own), tfobs's Keras callback", {}),
    "host_tracer3_loop": (
        "custom loop profiled with host_tracer_level=3 (verbose TraceMe events), "
        "tfobs.step markers", {}),
    "checkpoint_loop": (
        "custom loop saving a tf.train.Checkpoint every third step inside the trace (SaveV2, "
        "file writes on the host between steps); tfobs.step markers", {}),
    "mixed_float16_loop": (
        "custom loop under mixed_float16 with Keras's LossScaleOptimizer (dynamic loss "
        "scale, float16 casts on CPU), BFC allocator; tfobs.step markers",
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "sparse_adam_fit": (
        "Keras 3 fit of Embedding(20000) + Dense under Adam (sparse IndexedSlices gradient "
        "updates), tfobs's Keras callback", {}),
    "numpy_epochs_fit": (
        "Keras 3 fit on numpy arrays, Embedding + LSTM, 5 batches per epoch, two epochs in the "
        "trace: steps back to back and one pause at the epoch's end, where Keras builds the "
        "next epoch's tf.data iterator eagerly; tfobs's Keras callback", {}),
    "dist_from_fn_loop": (
        "MirroredStrategy over 2 logical CPU devices, distribute_datasets_from_function "
        "(tf.distribute's per-replica iterators: ::Generator stages, no Python), custom loop "
        "with strategy.run; tfobs.step markers", {}),
    "pydataset_fit": (
        "Keras 3 fit reading a keras.utils.PyDataset (workers=2, threads) that builds each "
        "batch in numpy: Keras reads it through from_generator (a ::FlatMap over a "
        "::Generator, PyFunc ops); tfobs's Keras callback", {}),
    "py_function_step": (
        "custom loop whose tf.function step calls tf.py_function (a numpy metric that sleeps "
        "3 ms): EagerPyFunc ops in the step, not in tf.data; tfobs.step markers", {}),
    "for_loop_slow_input": (
        "`for batch in dataset:` loop with the marker inside it (the batch is fetched between "
        "the markers), a dataset whose map runs a 3 ms py_function and has no prefetch: the "
        "input wait lies outside the steps; tfobs.step markers", {}),
    "retrace_loop": (
        "custom loop whose tf.function takes the step number as a Python int, so it is traced "
        "again in every step (tf.function-graph_building inside each step); tfobs.step "
        "markers", {}),
    "gan_train_on_batch": (
        "Keras 3 GAN trained by hand: per iteration the generator's predict_on_batch (not a "
        "step), the discriminator's train_on_batch, then the stacked model's; each "
        "train_on_batch call marked by tfobs's train_on_batch wrapper (no code changes)", {}),
    "named_markers_loop": (
        "custom loop marking each step `tf.profiler.experimental.Trace(\"batch\", step_num=i, "
        "_r=1)` (a step name of the user's own) with nested Traces (`load`, `forward`) inside; "
        "an unprefetched tf.data map sleeping 2 ms per batch (input wait in the step); no "
        "tfobs markers", {}),
    "tensor_step_nums": (
        "custom loop over `enumerate()` of a tf.data dataset, iterated eagerly, marking each "
        "step `tf.profiler.experimental.Trace(\"train\", step_num=step, _r=1)` with the "
        "dataset's own step counter (an EagerTensor, which TensorFlow writes as its text, "
        "`tf.Tensor(3, shape=(), dtype=int64)`: no integer step_num); no tfobs markers", {}),
    "float_step_nums": (
        "custom loop marking each step `tf.profiler.experimental.Trace(\"train\", "
        "step_num=float(i), _r=1)` (a float step number); no tfobs markers", {}),
    "variable_step_nums": (
        "custom loop marking each step `tf.profiler.experimental.Trace(\"train\", "
        "step_num=optimizer.iterations, _r=1)` (the optimizer's step counter, a tf.Variable "
        "passed as is: TensorFlow writes its text, cut at the first comma before its value); "
        "no tfobs markers", {}),
    "negative_step_nums": (
        "custom loop marking each step `tf.profiler.experimental.Trace(\"train\", "
        "step_num=-i, _r=1)` (negative step numbers, counting down); no tfobs markers", {}),
    "two_thread_steps": (
        "two Python threads training two models side by side (Dense 128->256->1 and "
        "128->512->1), each with its own tf.data iterator, both marking their steps "
        "`tf.profiler.experimental.Trace(\"train\", step_num=i, _r=1)` from 0: steps of two "
        "threads that overlap in time, with the same numbers; no tfobs markers", {}),
    "queue_fed_loop": (
        "custom loop fed through a `tf.queue.FIFOQueue` that a Python thread fills (one "
        "batch every 4 ms, slower than the step), each step dequeuing its batch eagerly "
        "inside `tf.profiler.experimental.Trace(\"train\", step_num=i, _r=1)`: the step "
        "waits in `QueueDequeueV2`, which XProf counts as host compute (eager), not input; "
        "no tfobs markers", {}),
    "markers_without_root": (
        "custom loop marking each step `tf.profiler.experimental.Trace(\"train\", step_num=i)` "
        "without `_r=1` (as older guides write it): markers that neither XProf nor tfobs take "
        "for steps; no tfobs markers", {}),
    "predict_only": (
        "Keras 3 `model.predict` over a tf.data dataset (inference only, no training steps, no "
        "callbacks, no markers)", {}),
    "evaluate_only": (
        "Keras 3 `model.evaluate` over a tf.data dataset (evaluation only, no training steps, "
        "no callbacks, no markers)", {}),
    "serving_signature": (
        "a SavedModel's `serving_default` signature loaded with tf.saved_model.load and called "
        "once per request batch (serving: no markers, no Keras)", {}),
    "python_in_step": (
        "custom loop whose marked step runs numpy preprocessing in Python, then a tf.function "
        "holding a `tf.numpy_function` (numpy inside the graph) before the gradient step; "
        "tfobs.step markers", {}),
    "tiny_steps_long": (
        "custom loop of 4,000 tiny tf.function steps (a 16x16 matmul update) in one trace: a "
        "long window of small steps, as high-throughput jobs make; tfobs.step markers", {}),
    "root_without_step_num": (
        "custom loop marking each step `Trace(\"train_step\", _r=1)` with no step number (XProf "
        "numbers such steps by group); an iterator-fed tf.function step; no tfobs markers", {}),
    "iter_num_markers": (
        "custom loop marking each step `Trace(\"iteration\", iter_num=i, _r=1)` (an iteration "
        "number instead of a step number), a tf.data map of 1 ms per batch; no tfobs markers",
        {}),
    "markers_without_root_named": (
        "custom loop marking each step `Trace(\"step\", step_num=i)` without `_r`, the step "
        "inside a `tf.function(jit_compile=True)`; no tfobs markers", {}),
    "predict_on_batch_loop": (
        "Keras 3 `model.predict_on_batch` called in a Python loop over numpy batches "
        "(inference, no markers, no callbacks)", {}),
    "eager_model_calls": (
        "a Keras model called eagerly, `model(x, training=False)`, once per request batch "
        "(inference without tf.function, no markers)", {}),
    "evaluate_spe4": (
        "Keras 3 `model.evaluate` with `steps_per_execution=4` over a tf.data dataset "
        "(evaluation only, no markers)", {}),
    "python_between_markers": (
        "custom loop with `Trace(\"step\", step_num=i, _r=1)` markers whose marked step runs "
        "pure-Python work (a list sort and a dict build per sample) before a small "
        "tf.function step; no tfobs markers", {}),
    "fit_run_eagerly": (
        "Keras 3 `fit` with `run_eagerly=True` (every op of the step run eagerly), tfobs's "
        "callback markers", {}),
    "double_marked_loop": (
        "custom loop marked twice per step: `tfobs.step(i)` around a user's own "
        "`Trace(\"train\", step_num=i, _r=1)` (two roots per step, one inside the other)",
        {}),
    "onedevice_loop": (
        "custom loop under `tf.distribute.OneDeviceStrategy('/cpu:0')`, `strategy.run` per "
        "step over a distributed dataset; tfobs.step markers", {}),
    "bfc_growing_loop": (
        "custom loop whose step allocates a working set that grows with the step number and "
        "keeps a few tensors alive across steps, `TF_CPU_ALLOCATOR_USE_BFC=true` (memory "
        "peak and fragmentation of a growing heap); tfobs.step markers",
        {"TF_CPU_ALLOCATOR_USE_BFC": "true"}),
    "cache_shuffle_fit": (
        "Keras 3 fit over `from_tensor_slices(...).map(parallel).cache().shuffle(256)"
        ".batch(32).prefetch(AUTOTUNE)`, the map sleeping 1 ms per element before the cache "
        "fills; tfobs's Keras callback", {}),
    "parallel_map_slow_fit": (
        "Keras 3 fit, a tf.data map of 3 ms per batch (a py_function) with "
        "num_parallel_calls=2 after batch, no prefetch; tfobs's Keras callback", {}),
    "python_tracer_loop": (
        "custom loop with tfobs.step markers profiled with the Python tracer on "
        "(`python_tracer_level=1`): the marker's own `__exit__` begins inside each step and "
        "runs past its end", {}),
    "ps_chief_async": (
        "the ParameterServerStrategy job of `ps_chief`, its chief scheduling every step "
        "function without waiting (`schedule` 60 times, then one `join`) and marking no "
        "steps; the chief profiled locally", {}),
    "ps_worker_async": (
        "worker 0 of the `ps_chief_async` job, traced through its server's profiler service: "
        "step functions queued back to back, no step markers", {}),
    "epoch_and_batch_roots": (
        "custom loop with two levels of step markers of the user's own: each epoch "
        "`Trace(\"epoch\", step_num=e, _r=1)` around its batches' `Trace(\"batch\", "
        "step_num=i, _r=1)` (a root inside a root, different names); no tfobs markers", {}),
    "markers_with_stats": (
        "custom loop marking each step `Trace(\"train\", step_num=i, _r=1, batch_size=64, "
        "lr=0.01, phase=\"warm\")` (extra keyword stats on the step marker), an "
        "unprefetched tf.data map of 1 ms per batch; no tfobs markers", {}),
    "strided_step_nums": (
        "custom loop marking its steps `tfobs.step(10 * i)` (step numbers ten apart, as "
        "jobs that count optimizer updates by gradient-accumulation factor do)", {}),
    "predict_spe4": (
        "Keras 3 `model.predict` with `steps_per_execution=4` over a tf.data dataset "
        "(inference only, no markers)", {}),
    "ps_chief": (
        "ParameterServerStrategy on loopback (2 workers, 1 ps, each its own process running "
        "tf.distribute.Server): the chief's ClusterCoordinator schedules a tf.function "
        "step_fn per step and joins, each step marked by tfobs.step; the chief profiled "
        "locally", {}),
    "session_run_loop": (
        "TF1-style graph training: `tf.compat.v1` placeholders, a Session and "
        "`session.run(train_op, feed_dict=...)` per step, no markers (legacy code still run "
        "under TF 2)", {}),
    "session_run_marked": (
        "the same Session.run loop with each step marked `tfobs.step(i)`", {}),
    "data_service_fit": (
        "Keras 3 fit over a dataset distributed by an in-process tf.data service (a dispatcher "
        "and one worker on loopback, `distribute(processing_mode=\"parallel_epochs\")`), a "
        "1 ms py_function map on the service; tfobs's Keras callback", {}),
    "cache_file_fit": (
        "Keras 3 fit over `map(parse).cache(<file>).batch(32).prefetch(2)`, profiled in the "
        "second epoch, which reads the cache file (a file-backed cache instead of the "
        "source); tfobs's Keras callback", {}),
    "text_files_loop": (
        "custom loop over `list_files` -> `interleave(TextLineDataset, cycle_length=2)` -> "
        "a CSV-line parse map -> batch (reading 4 text files); tfobs.step markers", {}),
    "interleave_file_maps": (
        "custom loop over `interleave(lambda f: TextLineDataset(f).map(parse), cycle_length=4, "
        "num_parallel_calls=AUTOTUNE)` of 4 text files, the per-file `map` parsing each line "
        "and running a 64x64 matmul on it (sequential inside each cycle element) -> batch -> "
        "repeat -> prefetch: the same per-file `Map` stage under four cycle elements "
        "(`ParallelInterleaveV4[0]::Map` .. `[3]::Map`); steps marked "
        "`Trace(\"train\", step_num=i, _r=1)`; no tfobs markers", {}),
    "copy_to_device_loop": (
        "custom loop over `from_tensor_slices -> shuffle(1024) -> batch(64) -> repeat -> "
        "apply(copy_to_device(\"/cpu:0\")) -> prefetch(2)`: the copy is a `::Generator` "
        "stage that runs no Python (IteratorFromStringHandleV2 ops), not `from_generator`; "
        "steps marked `Trace(\"train\", step_num=i, _r=1)`", {}),
    "prefetch_to_device_loop": (
        "custom loop over `from_tensor_slices -> map(tanh, num_parallel_calls=2) -> batch(64) "
        "-> repeat -> apply(prefetch_to_device(\"/cpu:0\", 2))` (prefetch_to_device is "
        "copy_to_device then prefetch); steps marked `Trace(\"train\", step_num=i, _r=1)`",
        {}),
    "rejection_resample_loop": (
        "custom loop over `from_tensor_slices` of imbalanced labels (70 % class 0) -> repeat "
        "-> `rejection_resample(class_func, target_dist=[0.25] * 4)` with the initial "
        "distribution estimated -> map(drop class) -> batch(16) -> prefetch(2)`: the slowest "
        "stage is rejection_resample's own sequential acceptance check "
        "(`::Filter::ParallelMapV2::Zip[0]::Map`), run for every element drawn; steps marked "
        "`Trace(\"train\", step_num=i, _r=1)`", {}),
    "tfrecord_parse_parallel_map": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over TFRecord files of "
        "tf.train.Example (96 float features and a label) read in order, batched, then "
        "`tf.io.parse_example` in a map with num_parallel_calls=AUTOTUNE: the parse runs on "
        "tf.data's own threads, the file read is the slowest stage by self time", {}),
    "micro_batches_in_function": (
        "custom loop whose tf.function takes the iterator and reads three micro-batches of 32 "
        "from it (gradient accumulation: one SGD update per step) from a prefetched "
        "from_tensor_slices pipeline; tfobs.step markers", {}),
    "interleave_records_loop": (
        "custom loop over three TFRecord files read by interleave(num_parallel_calls=AUTOTUNE, "
        "deterministic=False), each record parsed alone in a parallel map "
        "(parse_single_example, then 64 sines per feature), batched and prefetched eight "
        "deep: the buffer keeps up while "
        "tf.data's own threads work on the host's cores beside the step; tfobs.step markers",
        {}),
    "one_thread_pool_loop": (
        "custom loop over range() -> map(num_parallel_calls=4) making a 64-feature row from "
        "16,384 sines per element -> batch(16) -> prefetch, under "
        "options.threading.private_threadpool_size = 1: the parallel calls share one thread; "
        "tfobs.step markers", {}),
    "padded_batch_gru_loop": (
        "custom loop training a GRU(32) -> Dense(1) on 2,048 sequences of 16 features, their "
        "lengths drawn from 4 to 64, cached then padded_batch(32) -> prefetch: each batch "
        "padded to its longest sequence, so the GRU's while loop runs near 64 iterations a "
        "step on sequences averaging 34; tfobs.step markers", {}),
    "bucketed_gru_loop": (
        "the same sequences and GRU, batched by Dataset.bucket_by_sequence_length (bucket "
        "boundaries every 8 steps of length, batches of 32): each batch padded only to its "
        "bucket's longest; tfobs.step markers", {}),
    "snapshot_read_loop": (
        "custom loop over a dataset read back from Dataset.snapshot: from_tensor_slices of "
        "4,096 rows of 256 -> a parallel map of 20 rounds of sin/cos per value -> "
        "snapshot(path), written by one full pass before the window, then repeat() -> "
        "batch(64) -> prefetch(2): the map does not run on read, the snapshot's own reader "
        "(a parallel map over its SnapshotReader) reads one element at a time; tfobs.step "
        "markers", {}),
    "filter_after_map_loop": (
        "custom loop over range() -> a parallel map making a 64-feature row from 4,096 sines "
        "per element -> filter() keeping one element in eight -> batch(16) -> prefetch: the "
        "filter drops most of what the map made; tfobs.step markers", {}),
    "tfkeras_embedding_adam_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` training a tf_keras "
        "(Keras 2) Embedding(40000, 32) + Dense model with tf_keras's Adam on batches of 16: "
        "the update (`Adam/...`: every row's moments, the sparse gradient made dense) is "
        "most of each step", {}),
    "two_pipelines_one_unprefetched": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` whose step reads two "
        "datasets: features from a cheap prefetched pipeline, and side inputs from a "
        "heavy parallel map with no prefetch (its root is `Iterator::Root::MapAndBatch`)",
        {}),
    "tf_print_every_step": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` whose tf.function step "
        "ends with two `tf.print` calls (the loss and a weight norm, and a slice of the first "
        "kernel) every step, to a file: StringFormat and PrintV2 ops in each step", {}),
    "scan_running_mean_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a pipeline that "
        "normalizes each element by a running mean kept with `Dataset.scan`, then batches "
        "and prefetches: the scan runs one element at a time", {}),
    "window_flat_map_series_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` training a Conv1D model on "
        "sliding windows made by `Dataset.window(33, shift=1).flat_map(batch)` over a long "
        "series, then batched and prefetched", {}),
    "sample_from_datasets_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over "
        "`sample_from_datasets` of a heavy parallel map (weight 0.8) and a plain dataset "
        "(0.2), batched and prefetched: the selector's own stage (no index) waits for them",
        {}),
    "epoch_loop_in_function": (
        "one tf.function call per epoch, marked `Trace(\"train\", step_num=i, _r=1)`: "
        "`for xb, yb in dataset:` inside the function (AutoGraph's ReduceDataset op) over a "
        "heavy parallel map, the dataset handed in on each call (a new iterator each time)",
        {}),
    "evaluate_inside_steps": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a compiled Keras 3 "
        "model whose every fifth step also runs `model.evaluate` on 8 validation batches "
        "inside the marker: those steps take many times the others", {}),
    "checkpoint_manager_steps": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a Keras model trained by "
        "Adam, `tf.train.CheckpointManager.save()` every fourth step inside the marker: the "
        "save's Python and its eager variable reads, beside SaveV2 and MergeV2Checkpoints, "
        "make those steps several times longer", {}),
    "summary_every_step_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` whose tf.function step "
        "writes `tf.summary.scalar` of the loss and `tf.summary.histogram` of each weight to "
        "a file writer every step (`write_summary/` ops in the graph)", {}),
    "two_output_tensorboard_fit": (
        "Keras 3 fit of a functional model with two heads (classes and a regression, "
        "loss_weights, a metric each) profiled by Keras's own TensorBoard callback "
        "(`profile_batch=(4, 20)`), no tfobs callback: the callback's per-batch work turns "
        "values into tensors (`_EagerConst`) between the steps", {}),
    "cache_fill_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over `from_tensor_slices -> "
        "map(a 64x64 matmul per row, num_parallel_calls=2) -> cache() -> batch(64) -> repeat "
        "-> prefetch(2)`, profiled in its first epoch: the map runs below "
        "`::MemoryCacheImpl` while the cache fills", {}),
    "saved_model_export_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` that exports the model with "
        "`tf.saved_model.save` inside every sixth step: the export traces the model's "
        "functions (`tf.function-graph_building`) and writes its variables (SaveV2) in those "
        "steps", {}),
    "xla_shape_recompile_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a "
        "`tf.function(jit_compile=True, reduce_retracing=True)` step fed batches of a new size "
        "every other step (32, 40, 48, 56 rows): the function is traced once with a relaxed "
        "batch dimension, yet XLA compiles once per new size (`CpuCompiler::RunBackend` in "
        "the steps)", {}),
    "check_numerics_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` with "
        "`tf.debugging.enable_check_numerics()` left on: eager `CheckNumericsV2` ops on the "
        "step's outputs and `DebugNumericSummaryV2` ops in its graph", {}),
    "eager_metric_beside_step": (
        "custom loop whose step, marked `Trace(\"train\", step_num=i, _r=1)`, calls its "
        "tf.function train step once and then checks accuracy by calling the model eagerly "
        "(`model(x)`, argmax, mean, `.numpy()`): the model's math runs eagerly inside the "
        "steps, beside their compiled function", {}),
    "adapt_then_fit": (
        "Keras 3: `Normalization.adapt` over a tf.data pipeline, then `fit` with tfobs's Keras "
        "callback, both inside one trace (a capture begun before training): adapt's eager "
        "ops (`_EagerConst`, `Mean`, `AddV2`) all run before the first step", {}),
    "shuffle_fill_in_window": (
        "custom loop whose iterator over `from_tensor_slices(20,000 rows) -> "
        "shuffle(20,000) -> batch(64)` is made inside the trace: the first marked step "
        "waits for the whole shuffle buffer to fill (XProf drops that step, as the first); "
        "steps marked `Trace(\"train\", step_num=i, _r=1)`", {}),
    "eager_eval_after_steps": (
        "custom loop whose step is a tf.function, marked `Trace(\"train\", step_num=i, _r=1)`, "
        "then, inside the same trace and after the last step, an evaluation pass that calls "
        "the model eagerly five times (`model(x, training=False)` with a 30 ms pause each): "
        "the model's math runs eagerly between the steps, not in them", {}),
    "image_dir_fit": (
        "Keras 3 fit over `keras.utils.image_dataset_from_directory` of 96 small JPEGs in two "
        "class folders (file reads and JPEG decoding in tf.data), no prefetch; tfobs's Keras "
        "callback", {}),
    "mwms_worker": (
        "MultiWorkerMirroredStrategy on loopback, two workers (each its own process, "
        "TF_CONFIG): a custom loop whose step all-reduces its gradient across the workers "
        "(CollectiveReduceV2 over gRPC); worker 0 profiled, tfobs.step markers", {}),
    "single_thread_loop": (
        "the `conv_bn_custom_loop` workload with one inter-op and one intra-op thread "
        "(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1): the executor's work on "
        "fewer threads", {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}),
    "onednn_off_fit": (
        "Keras 3 fit of a small CNN with oneDNN off (TF_ENABLE_ONEDNN_OPTS=0: TF's own "
        "kernels, `Conv2D` instead of `_MklNativeConv2D`); tfobs's Keras callback",
        {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "saved_dataset_fit": (
        "Keras 3 fit over a dataset written with `Dataset.save` and read back with "
        "`Dataset.load` (tf.data's own file format: snapshot shards), shuffled and batched; "
        "tfobs's Keras callback", {}),
    "csv_dataset_loop": (
        "custom loop over `tf.data.experimental.make_csv_dataset` of two CSV files (header, "
        "9 columns, batch 32): file reads, parsing and its own prefetch; tfobs.step markers",
        {}),
    "ps_tfkeras_fit": (
        "the `ps_chief` cluster trained by tf_keras (Keras 2) `fit` under the "
        "ParameterServerStrategy (a DatasetCreator, steps_per_epoch=40): Keras 2 schedules "
        "each step through its own ClusterCoordinator and marks it `Trace(\"train\", "
        "step_num=..., _r=1)`; the chief profiled locally", {}),
    "ps_tfkeras_fit_worker": (
        "worker 0 of the `ps_tfkeras_fit` job traced through its server's profiler service",
        {}),
    "ps_worker": (
        "the same ParameterServerStrategy job, worker 0 traced through its server's profiler "
        "service (tf.profiler.experimental.client.trace to the worker's gRPC port): the "
        "remote step_fn runs, no step markers", {}),
    "checkpoint_in_steps": (
        "custom loop whose every other step writes a tf.train.Checkpoint (Checkpoint.write on "
        "the training thread: SaveV2 and MergeV2Checkpoints run eagerly inside the step); "
        "tfobs.step markers", {}),
    "checkpoint_async": (
        "the same loop writing with tf.train.CheckpointOptions("
        "experimental_enable_async_checkpoint=True): the write runs on a thread of its own "
        "beside the steps; tfobs.step markers", {}),
    "train_and_test_markers": (
        "custom loop marking each train step `Trace(\"train\", step_num=i, _r=1)` and, every "
        "fifth step, an evaluation `Trace(\"test\", step_num=i, _r=1)` with the same number "
        "(two roots per step number); no tfobs markers", {}),
    "tfdata_stage_kinds": (
        "custom loop fed by batch -> unbatch -> scan (a running counter) -> a map of 64x64 "
        "matmuls per element (tf.data's default map_parallelization makes it `ParallelMapV2`) "
        "-> filter (about half kept) -> batch(num_parallel_calls) -> "
        "take_while -> prefetch, with a private tf.data thread pool of 2 and "
        "max_intra_op_parallelism 1: the iterator kinds `Unbatch`, `Scan`, `Filter`, "
        "`ParallelBatch`, `TakeWhile` in one chain; steps marked "
        "`Trace(\"train\", step_num=i, _r=1)`; no tfobs markers", {}),
    "sampled_grouped_input": (
        "custom loop marking each step `Trace(\"step\", step_num=numpy.int64(i), _r=1)` with a "
        "nested Trace, fed by `sample_from_datasets` over a numpy_function map and a plain "
        "branch, then `group_by_window` batching; no tfobs markers", {}),
    "grad_accum_python_loop": (
        "custom loop, each tfobs.step one optimizer update made of 4 micro-batches of 32: "
        "a tf.function computing gradients and adding them to accumulator variables, called "
        "4 times from Python, then a tf.function applying the mean and zeroing the "
        "accumulators (5 function calls per step)", {}),
    "central_storage_loop": (
        "custom loop, tf.distribute.experimental.CentralStorageStrategy over 2 logical CPU "
        "devices (variables on /cpu:0, compute on both), tfobs.step markers", {}),
    "class_weight_fit": (
        "Keras 3 fit on numpy arrays (Keras's own array adapter) of a 10-class classifier "
        "with class_weight (one weight per class; Keras turns it into per-sample weights), "
        "batch 64; "
        "tfobs's Keras callback", {}),
    "rebatch_slow_input_loop": (
        "custom loop over range -> a serial map making a 64x256 block with 64 rounds of "
        "sin/cos per value -> unbatch -> batch(64) -> rebatch(32), no prefetch, autotune off, "
        "a tiny "
        "model step: input-bound by construction; tfobs.step markers", {}),
    "dynamic_while_step": (
        "custom loop whose tf.function step runs a tf.while_loop whose trip count depends "
        "on the batch (1 to 8 inner updates), tfobs.step markers", {}),
    "summary_image_loop": (
        "custom loop whose tf.function step writes tf.summary.image of 4 8x8x3 images and "
        "tf.summary.histogram of the logits every step to a file writer; tfobs.step "
        "markers", {}),
    "pydataset_slow_fit": (
        "Keras 3 fit over a keras.utils.PyDataset (workers=2, threads, max_queue_size=4) whose "
        "__getitem__ sleeps 8 ms then builds the batch in numpy, a step of about 1 ms: "
        "input-bound by construction (two workers deliver a batch every ~4 ms); tfobs's "
        "Keras callback", {}),
    "tfkeras_fit_validation_epochs": (
        "tf_keras (Keras 2) fit, two epochs of 12 steps with validation_data (4 steps) in one "
        "trace: tf_keras's own markers number train steps from 0 each epoch and mark "
        "validation `test`, so `train 3` is there twice and `test 0` after each epoch",
        {"TF_USE_LEGACY_KERAS": "1"}),
    "validation_freq_fit": (
        "Keras 3 fit, 2 epochs of 8 steps in one trace, validation_data (4 steps) with "
        "validation_freq=2 (validation after epoch 2 only); tfobs's Keras callback", {}),
    "custom_train_step_pyfunc_fit": (
        "Keras 3 fit of a keras.Model subclass overriding train_step; the step also computes a "
        "metric in numpy through tf.py_function (1 ms sleep + np.median/np.sort of the "
        "per-example errors) every batch; tfobs's Keras callback", {}),
    "interleave_generators_nondet_loop": (
        "custom loop over Dataset.range(2).interleave(from_generator, cycle_length=2, "
        "num_parallel_calls=2, deterministic=False); each generator sleeps 8 ms per batch "
        "(two give a batch every ~4 ms), a ~1 ms step: input-bound by construction; "
        "tfobs.step markers", {}),
    "text_vectorization_in_model_fit": (
        "Keras 3 fit of a model taking raw strings: TextVectorization (adapted beforehand) as "
        "the model's first layer, Embedding, pooling, Dense; tf.data of strings; tfobs's "
        "Keras callback", {}),
    "callbacks_combo_fit": (
        "Keras 3 fit, up to 6 epochs of 6 steps in one trace, validation_data (3 steps) every "
        "epoch, EarlyStopping(val_loss, patience=2, min_delta=10: stops after epoch 3), "
        "ReduceLROnPlateau(patience=0, min_delta=10: lr halves after epochs 2 and 3), "
        "ModelCheckpoint(save_best_only=True) to a .keras file; tfobs's Keras callback", {}),
    "ragged_partial_batch_loop": (
        "custom loop over tf.data ragged_batch(32) of 200 variable-length token lists (6 full "
        "batches and a partial one of 8 each epoch), a tf.function(reduce_retracing=True) "
        "step (Embedding on the flat values, segment mean, Dense); the first partial batch "
        "inside the trace retraces the step; tfobs.step markers", {}),
    "tabular_preprocess_map_fit": (
        "Keras 3 fit over tf.data of dict features (a string category, two floats): "
        "StringLookup(one_hot) + Normalization (adapted) applied in Dataset.map("
        "num_parallel_calls=AUTOTUNE) after batch(64), prefetch; tfobs's Keras callback", {}),
    "optimizer_grad_accum_fit": (
        "Keras 3 fit with Adam(gradient_accumulation_steps=4): every 4th batch applies the "
        "accumulated update (a cond inside the step); tfobs's Keras callback", {}),
    "tfkeras_spe8_tfdata_fit": (
        "tf_keras (Keras 2) fit over tf.data (from_tensor_slices -> shuffle -> batch(64) -> "
        "map(AUTOTUNE) -> prefetch(AUTOTUNE)), compile(steps_per_execution=8): 12 executions "
        "of 8 batches; tf_keras's own Trace('train', step_num) markers (one per execution)", {}),
    "keras3_python_generator_fit": (
        "Keras 3 fit(x=gen()) on a plain Python generator (not a PyDataset) building each "
        "batch in numpy (random + standardise + 4 sorts); tfobs's Keras callback", {}),
    "reshuffle_each_epoch_loop": (
        "custom loop; every epoch inside the trace re-creates Dataset.from_tensor_slices("
        "60,000x64 float32 numpy).shuffle(10000).batch(256).prefetch(2) and runs 5 steps of "
        "it (3 epochs); tfobs.step markers", {}),
    "lambda_numpy_function_fit": (
        "Keras 3 fit of a model whose first layer is keras.layers.Lambda calling "
        "tf.numpy_function (per-row median-centre, clip, sort in numpy) inside the model's "
        "step; tfobs's Keras callback", {}),
    "mirrored_gather_metrics_loop": (
        "custom loop, MirroredStrategy over 2 logical CPUs; the tf.function step returns "
        "per-replica losses and predictions; every step, outside the function, "
        "strategy.reduce(MEAN) of the loss and strategy.gather(preds) then .numpy() and a "
        "numpy metric; tfobs.step markers", {}),
    "sleep_between_steps_loop": (
        "custom loop throttled by the job: after each marked tf.function step (about 2 ms) "
        "it sleeps 8 ms in Python outside the marker (a rate-limited job); prefetched "
        "input; tfobs.step markers", {}),
    "cond_every_5_loop": (
        "custom loop whose tf.function step runs a tf.cond on the optimizer's iteration "
        "count: every 5th step the true branch re-orthogonalizes the weights (40 rounds of "
        "matmul), the others only apply the gradient (multi-modal step times); tfobs.step "
        "markers", {}),
    "ignore_errors_decode_loop": (
        "custom loop over encoded 64x64 JPEG strings, one in four corrupt: a parallel map "
        "decoding them (tf.io.decode_jpeg) followed by ignore_errors() (the corrupt ones "
        "dropped), batch(32), prefetch(2); a small conv net; tfobs.step markers", {}),
    "map_fn_per_example_loop": (
        "custom loop whose tf.function step normalizes each example of the batch with "
        "tf.map_fn (a per-example in-graph while loop of 64 iterations) before a Dense "
        "model; tfobs.step markers", {}),
    "partial_batch_retrace_loop": (
        "custom loop over from_tensor_slices(360 rows of 64) -> batch(64) (drop_remainder=False: "
        "5 full batches and a partial one of 40 each epoch), two epochs in the trace, a plain "
        "tf.function step: the first partial batch traces the step again (a new input shape); "
        "tfobs.step markers", {}),
    "tfkeras_spe_auto_fit": (
        "tf_keras (Keras 2) fit over tf.data with compile(steps_per_execution='auto'): the "
        "tuner starts at 1 step per execution, its train function loops over a tf.range of "
        "the variable step count, and a tuner thread measures every 5 s; tf_keras's own "
        "Trace('train', step_num) markers", {"TF_USE_LEGACY_KERAS": "1"}),
    "mixed_bfloat16_cpu_loop": (
        "custom loop training an MLP (512-1024-1024-1) under "
        "keras.mixed_precision.set_global_policy('mixed_bfloat16') on the CPU; the same "
        "step in float32 timed before the trace (in the parameters); tfobs.step markers", {}),
    "linalg_eigh_step_loop": (
        "custom loop whose tf.function step whitens its batch with tf.linalg.eigh of the "
        "256x256 feature covariance (an eigendecomposition every step) before a Dense model; "
        "tfobs.step markers", {}),
    "autograph_tensor_range_loop": (
        "custom loop whose tf.function step holds a Python for loop over tf.range(12) (12 "
        "rounds of h = tanh(h @ W + x)), which AutoGraph turns into a tf.while_loop, then a "
        "Dense head; tfobs.step markers", {}),
    "python_range_unrolled_loop": (
        "the same step with the loop over a Python range(12): unrolled at trace time into 12 "
        "copies of its ops, no while loop; tfobs.step markers", {}),
    "shard_after_read_loop": (
        "custom loop over 4 TFRecord files of tf.train.Example (256 floats) read in order, "
        "shard(4, 1) after the read (each worker reads every record and keeps one in four), "
        "parse_example in a parallel map after batch(32), prefetch(2); tfobs.step markers", {}),
    "float64_dense_loop": (
        "custom loop training a Keras MLP (256-512-512-1) whose Dense layers are float64 "
        "(dtype='float64', float64 inputs); the same step in float32 timed before the trace "
        "(in the parameters); tfobs.step markers", {}),
    "gzip_tfrecord_loop": (
        "custom loop over 4 GZIP-compressed TFRecord files of tf.train.Example (1,024 floats) "
        "read in order by TFRecordDataset(compression_type='GZIP'), batch(64), parse_example "
        "in a parallel map, prefetch(2); tfobs.step markers", {}),
    "stft_audio_pipeline_fit": (
        "Keras 3 fit of a small conv net on log-mel spectrograms computed in a parallel "
        "tf.data map (tf.signal.stft of 1 s of 16 kHz audio, mel matrix, log) before batch(32) "
        "and prefetch; tfobs's Keras callback", {}),
    "vectorized_map_grads_loop": (
        "custom loop whose tf.function step computes per-example gradients with "
        "tf.vectorized_map (pfor), clips each to norm 1 and applies their mean (DP-SGD "
        "style); tfobs.step markers", {}),
    "custom_gradient_layer_loop": (
        "custom loop training a model with a Keras layer whose op is a tf.custom_gradient "
        "(a straight-through 4-bit fake quantizer: round in the forward pass, clipped "
        "identity gradient); tfobs.step markers", {}),
    "tensorarray_rnn_loop": (
        "custom loop whose tf.function step runs a hand-written RNN: a tf.while_loop over 32 "
        "time steps writing each hidden state into a tf.TensorArray, stacked and pooled; "
        "tfobs.step markers", {}),
    "choose_from_datasets_loop": (
        "custom loop over tf.data.Dataset.choose_from_datasets of three datasets picked in "
        "turn (a choice dataset of range(3).repeat()): one a sequential map of 1,024 sines "
        "per value, two cheap; batch(64), prefetch(2); tfobs.step markers", {}),
    "spe_validation_steps_fit": (
        "Keras 3 fit with steps_per_execution=4 and validation_data with validation_steps=4, "
        "2 epochs of 16 steps in the trace; tfobs's Keras callback", {}),
    "pydataset_multiprocessing_fit": (
        "Keras 3 fit over a keras.utils.PyDataset(workers=2, use_multiprocessing=True) whose "
        "__getitem__ builds each batch in numpy (about 12 ms of sorts) in worker processes; "
        "tfobs's Keras callback", {}),
    "unicode_marker_numpy_nums": (
        "custom loop marking each step `Trace(\"train step ✓ 训练\", step_num=np.int64(i), "
        "_r=1)` (spaces and non-ASCII in the name, a numpy integer for the number) with "
        "nested `Trace(\"数据 load\")` and `Trace(\"fwd bwd\")`; no tfobs markers; the "
        "job's own step times in the parameters", {}),
    "string_step_nums": (
        "custom loop marking each step `Trace(\"train\", step_num=str(i), _r=1)` (the "
        "number as a string); no tfobs markers; the job's own step times in the parameters",
        {}),
    "train_on_batch_generator": (
        "Keras 3 `train_on_batch` driven by a Python generator of numpy batches, each call "
        "marked `Trace(\"tob\", step_num=i, _r=1)` with the generator's `next()` nested "
        "in `Trace(\"next batch\")`; no tfobs markers; the job's own step times in the "
        "parameters", {}),
    "two_nested_roots": (
        "custom loop marking each step twice with the same number: an outer "
        "`Trace(\"step\", step_num=i, _r=1)` (the loop's) around an inner "
        "`Trace(\"train\", step_num=i, _r=1)` (a library's) around the tf.function; no "
        "tfobs markers; the job's own step times in the parameters", {}),
    "callback_markers_without_root": (
        "Keras 3 fit with a callback opening `Trace(\"keras_batch\", step_num=batch)` in "
        "on_train_batch_begin and closing it in on_train_batch_end, without `_r`; the "
        "job's own batch times in the parameters", {}),
    "ps_chief_partitioned": (
        "ParameterServerStrategy on loopback (2 workers, 2 ps) with "
        "`FixedShardsPartitioner(2)`: a tf_keras (Keras 2) MLP whose variables are split "
        "over both ps (Keras 3 takes no sharded variable), the "
        "chief's ClusterCoordinator scheduling a step_fn on a per-worker dataset, each "
        "schedule+join marked by the job's own `Trace(\"ps step\", step_num=i, _r=1)`; "
        "the job's own step times in the parameters", {}),
    "function_inference_loop": (
        "inference only: `for xb in dataset: infer(xb)` over a prefetched tf.data pipeline, "
        "`infer` a `tf.function` calling a Keras MLP with training=False; no markers; the "
        "job's own call times in the parameters", {}),
    "logging_in_step": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` whose step is a small "
        "tf.function, then the host Python around it inside the marker: `loss.numpy()`, "
        "the `logging` module formatting a metrics line to a file handler, `json.dumps` of a "
        "metrics dict and a numpy moving average (XProf: 'All Others'); the job's own step "
        "times in the parameters", {}),
    "clip_norm_adamw_cosine_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` training an MLP "
        "(256-1024-1024-10, batch 256) with Keras AdamW(weight_decay=0.01) driven by a "
        "CosineDecay learning-rate schedule, its gradients clipped by "
        "`tf.clip_by_global_norm(g, 1.0)` inside the tf.function step; the job's own step "
        "times in the parameters", {}),
    "ema_eager_apply_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)`: a tf.function step of an "
        "MLP of 8 Dense(256) layers (batch 128), then, inside the marker, "
        "`tf.train.ExponentialMovingAverage(0.999).apply(model.trainable_variables)` called "
        "eagerly every step (16 shadow variables, one eager update each); the job's own step "
        "times, and the same loop with the EMA update inside the tf.function, in the "
        "parameters", {}),
    "preprocessing_layers_in_model_fit": (
        "Keras 3 fit of a tabular model whose preprocessing layers sit inside the model: "
        "StringLookup (1,000 words, multi_hot over 4 tokens), Hashing(num_bins=4096) + "
        "CategoryEncoding(one_hot) of an int id, IntegerLookup, Normalization (adapted) of "
        "16 floats, concatenated into Dense(256)-Dense(1); tf.data of dict features, "
        "batch(256), prefetch; tfobs's Keras callback", {}),
    "two_tower_retrieval_loop": (
        "custom loop training a two-tower retrieval model: user table 400,000 x 64 and item "
        "table 200,000 x 64 (Embedding layers), each followed by Dense(128)-Dense(64), "
        "in-batch softmax over the 512 x 512 dot-product logits, Adagrad (sparse "
        "IndexedSlices gradients of both tables), batch 512; tfobs.step markers; the same "
        "step under SGD timed after the trace", {}),
    "save_weights_every_4_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` whose every 4th step calls "
        "`model.save_weights(<logdir>/ckpt.weights.h5)` inside the marker (Keras 3 .h5 "
        "written from Python through h5py) after a tf.function step of an MLP "
        "(512-1024-1024-10, batch 128); the job's own step times in the parameters", {}),
    "gnn_segment_sum_loop": (
        "custom loop training a 3-layer message-passing graph network on one random graph "
        "(20,000 nodes of 64 features, 200,000 edges): per layer `tf.gather` of the senders' "
        "states and `tf.math.unsorted_segment_sum` into the receivers, then Dense; "
        "node regression, Adam; tfobs.step markers", {}),
    "ram_budget_augment_nondet_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a tf.data image "
        "pipeline: from_tensor_slices of 512 images 96x96x3 -> repeat -> "
        "map(stateless random flip, brightness, contrast, crop 80x80; "
        "num_parallel_calls=AUTOTUNE, deterministic=False) -> batch(32) -> "
        "prefetch(AUTOTUNE), options.autotune.ram_budget = 64 MiB; a small conv net; "
        "the job's own step times in the parameters", {}),
    "shared_encoder_siamese_fit": (
        "Keras 3 functional model whose shared encoder (Dense 512 -> Dense 512 -> Dense 128) "
        "is called twice per step, on two inputs, with a head on |a - b| and a * b; fit, "
        "batch 256, Adam; tfobs's Keras callback; the job's own batch times", {}),
    "predict_every_4_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` of a tf.function MLP step "
        "whose every fourth step also calls `model.predict` on 4,096 rows (batch 256) "
        "inside the marker; the job's own step times, with and without the predict", {}),
    "from_generator_slow_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over "
        "`tf.data.Dataset.from_generator` (output_signature) whose Python generator builds "
        "each batch of 128 in numpy and sleeps 15 ms, then `prefetch(AUTOTUNE)`; a small "
        "MLP step (the generator is the bottleneck); the job's own step times", {}),
    "reduce_retracing_batches_loop": (
        "custom loop over batches of varying size (64, then 80, 96, 112, ... inside the "
        "trace) through a `tf.function(reduce_retracing=True)` step warmed on batch 64 only: "
        "the first new size traces once more with a generalised (None, 64) signature, the "
        "later sizes reuse it; tfobs.step markers; the job's own step times and trace "
        "counts", {}),
    "jit_spe4_fit": (
        "Keras 3 fit compiled with `jit_compile=True` and `steps_per_execution=4` (XLA on "
        "CPU, four steps per function call), an MLP at batch 128; tfobs's Keras callback; "
        "the job's own times per execution", {}),
    "unbatch_rebatch_loop": (
        "custom loop marked `Trace(\"train\", step_num=i, _r=1)` over a tf.data chain "
        "from_tensor_slices -> batch(100, drop_remainder=False) -> map(standardise per "
        "batch) -> unbatch -> shuffle(2048) -> batch(256) -> rebatch(64) -> prefetch(2); "
        "an MLP step; the job's own step times", {}),
    "gan_custom_train_step_fit": (
        "Keras 3 `fit` of a GAN written as a `keras.Model` subclass whose `train_step` "
        "override runs two Adam optimizers (discriminator then generator, two GradientTapes) "
        "on 64-d latent / 128-d data at batch 64; tfobs's callback; the job's own batch "
        "times", {}),
    "mha_python_mask_loop": (
        "custom loop, one `MultiHeadAttention` block (4 heads, key_dim 32, 64 tokens of 128) "
        "whose padding attention mask is built in numpy inside each marked step from random "
        "lengths and passed to the `tf.function` step as a tensor; the job's own step times",
        {}),
    "tape_outside_function_loop": (
        "custom loop whose forward pass (3 Dense layers, 512 wide, batch 128) is a "
        "`tf.function` called under an eager `GradientTape`: the tape, `tape.gradient` and "
        "`apply_gradients` run eagerly around the compiled forward; the job's own step times",
        {}),
    "causal_conv1d_long_fit": (
        "Keras 3 `fit` of a WaveNet-style stack: 4 `Conv1D(32, 3, padding=\"causal\")` "
        "layers dilated 1/2/4/8 over sequences of 4096 steps, batch 8, a pooled Dense head; "
        "tfobs's callback; the job's own batch times", {}),
    "tnp_ops_step_loop": (
        "custom loop whose `tf.function` step computes the model and loss with "
        "`tf.experimental.numpy` ops (tnp.matmul, tnp.tanh, tnp.mean, tnp.clip) on two "
        "variables; the job's own step times", {}),
    "cache_take_partial_loop": (
        "custom loop over `map(slow 2 ms py_function per batch of 64).cache().take(4)`: each "
        "'epoch' of 4 steps makes a new iterator and reads 4 of the 16 batches, so the cache "
        "is never completed (TensorFlow discards a partly read memory cache) and every "
        "batch is mapped again; the job's own step times", {}),
    "repeated_fit_calls": (
        "Keras 3 `fit(epochs=1, steps_per_epoch=4)` called 4 times in a row inside the trace "
        "(an active-learning or RL-style outer loop re-entering fit): per call Keras builds a "
        "new epoch iterator and runs its callbacks' begin/end hooks between the steps; "
        "tfobs's Keras callback; the job's own batch times", {}),
    "unfreeze_recompile_fit": (
        "Keras 3 transfer learning: a frozen Dense backbone under a trainable head, 6 fit "
        "steps, then `backbone.trainable = True`, `compile` again and 6 more fit steps, all "
        "in one trace: the second fit traces a new train function inside its first step; "
        "tfobs's Keras callback; the job's own batch times", {}),
    "conv3d_video_fit": (
        "Keras 3 `fit` of a small video classifier: `Conv3D` x2 (3x3x3), `MaxPooling3D`, "
        "`GlobalAveragePooling3D` over 8x32x32x3 clips, batch 8; tfobs's Keras callback; "
        "the job's own batch times", {}),
    "trials_clear_session_fit": (
        "a hyperparameter search in one trace: 3 trials, each `keras.backend.clear_session()`, "
        "a new MLP of another width, compile, and a 5-step `fit`; tfobs's Keras callback, "
        "which numbers steps by the optimizer's iterations, so each trial's steps are "
        "numbered 0-4 again; the job's own batch times", {}),
    "sampled_softmax_loop": (
        "custom loop, Embedding + Dense tower trained with `tf.nn.sampled_softmax_loss` over "
        "a 50,000-word output layer (64 sampled classes; `LogUniformCandidateSampler` in the "
        "step), Adam; the job's own step times", {}),
    "distillation_teacher_loop": (
        "custom loop distilling a frozen teacher MLP (784-2048-2048-10, called with "
        "training=False inside the step) into a student MLP (784-128-10) with a "
        "temperature-4 KL loss plus cross-entropy, batch 256, Adam; the teacher's forward "
        "pass runs in every step; tfobs.step markers; the job's own step times", {}),
    "greedy_decode_token_loop": (
        "autoregressive greedy decoding: a tf.function running one token of an Embedding + "
        "GRUCell(256) + Dense(1,000) decoder (batch 16), the argmax fed back and read in "
        "Python each token (an end-token check), 40 tokens, each token a tfobs.step; the "
        "job's own token times", {}),
    "contrastive_two_views_loop": (
        "SimCLR-style custom loop: tf.data makes two augmented views of each 32 x 32 image "
        "(random crop, flip, brightness; parallel map), a small conv encoder + projection "
        "head, NT-Xent loss over the 256 x 256 similarity matrix of a 128 batch, Adam; "
        "tfobs.step markers; the job's own step times", {}),
    "fake_quant_qat_loop": (
        "quantization-aware training custom loop: an MLP (512-1024-1024-10) whose weights "
        "and activations pass through `tf.quantization.fake_quant_with_min_max_vars` (8 "
        "bits, learned ranges) in every layer, batch 256, SGD; tfobs.step markers; the "
        "job's own step times", {}),
    "unet_segmentation_fit": (
        "Keras 3 fit of a small U-Net (two Conv2D down blocks, Conv2DTranspose up blocks "
        "with skip Concatenate, per-pixel 4-class softmax) on 64 x 64 x 3 images with "
        "64 x 64 masks, batch 16, Adam, per-pixel sparse cross-entropy and an IoU metric; "
        "tfobs's Keras callback; the job's own batch times", {}),
}


# --- the workloads (run in a child process: `--child CASE LOGDIR`) ------------------------


MWMS_STEPS = 19  # both workers run as many steps (the collectives pair them)


def _mwms_step(tf: Any, strategy: Any, width: int) -> Any:
    """A step whose gradient is all-reduced across the workers (a MEAN variable)."""
    with strategy.scope():
        w = tf.Variable(tf.zeros((width, 1)), aggregation=tf.VariableAggregation.MEAN)

    @tf.function
    def train_step(x: Any) -> Any:
        def replica(x: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            w.assign_sub(0.01 * tape.gradient(loss, w))
            return loss

        return strategy.run(replica, args=(x,))

    return train_step


def _start_mwms_peer() -> Any:
    """TF_CONFIG for worker 0 (this process) and worker 1, started as its own process
    running the same steps unprofiled; before TensorFlow starts here."""
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    peer_code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import tensorflow as tf\n"
        "from tools.record_tf_captures import MWMS_STEPS, _mwms_step\n"
        "s = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "step = _mwms_step(tf, s, 128)\n"
        "it = iter(s.experimental_distribute_dataset(tf.data.Dataset.from_tensors("
        "tf.ones((128,))).repeat().batch(32)))\n"
        "for _ in range(MWMS_STEPS):\n"
        "    step(next(it))\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                          "task": {"type": "worker", "index": 0}})
    return subprocess.Popen([sys.executable, "-c", peer_code, str(ROOT)], env=env)


def _trace_worker(tf: Any, cluster: dict[str, list[str]], logdir: str, run: Any) -> None:
    """Trace worker 0 through its server's profiler service while `run` drives the job."""
    import threading

    worker = cluster["worker"][0].split(":")[1]
    tracer = threading.Thread(target=tf.profiler.experimental.client.trace,
                              args=(f"grpc://localhost:{worker}", logdir, 2500))
    tracer.start()
    time.sleep(0.3)
    run()
    tracer.join()


def _tf_keras_fit_under(strategy: Any, width: int) -> Any:
    """A tf_keras (Keras 2) model compiled under `strategy`; returns fit(steps): one epoch
    of that many steps from a DatasetCreator, as Keras 2 trains with a parameter server."""
    import tensorflow as tf
    import tf_keras

    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Dense(width, activation="relu",
                                                           input_shape=(width,)),
                                     tf_keras.layers.Dense(1)])
        model.compile(optimizer=tf_keras.optimizers.SGD(0.01), loss="mse")

    def dataset_fn(context: Any) -> Any:
        x = tf.random.uniform((64 * 8, width))
        return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)

    creator = tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    return lambda steps: model.fit(creator, epochs=1, steps_per_epoch=steps, verbose=0)


def _child(case: str, logdir: str) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if case in ("mirrored", "mirrored_fit", "dist_from_fn_loop", "central_storage_loop",
                "mirrored_gather_metrics_loop"):
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    peer = _start_mwms_peer() if case == "mwms_worker" else None
    import numpy as np
    import tensorflow as tf

    import tfobs
    from tfobs.capture.markers import keras3_callback_class
    from tfobs.capture.tf_profiler import _Level  # TF 2.21 drops plain int levels
    from tfobs.commands.demo import build_train_step

    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    keras = tf.keras
    params: dict[str, Any] = {}

    def batch_timer(times: list[float]) -> Any:
        """A Keras callback adding each training batch's time to `times` (the job's own
        step times, stored in the provenance beside the capture)."""

        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
                self.t = time.perf_counter()

            def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
                times.append(time.perf_counter() - self.t)

        return Timer()

    def profile(run_steps: Any) -> None:
        if case == "profiler_server":  # an on-demand capture: the client asks the server
            import socket
            import threading

            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            tf.profiler.experimental.server.start(port)
            tracer = threading.Thread(target=tf.profiler.experimental.client.trace,
                                      args=(f"grpc://localhost:{port}", logdir, 1500))
            tracer.start()
            time.sleep(0.3)  # the session opens before the steps run
            run_steps()
            tracer.join()
            return
        levels = {"python_tracer_fit": {"python_tracer_level": _Level(1)},
                  "python_tracer_loop": {"python_tracer_level": _Level(1)},
                  "host_tracer3_loop": {"host_tracer_level": _Level(3)}}.get(case, {})
        options = tf.profiler.experimental.ProfilerOptions(**levels) if levels else None
        tf.profiler.experimental.start(logdir, options=options)
        try:
            run_steps()
        finally:
            tf.profiler.experimental.stop()

    def warm_then_profile(one_step: Any, steps: int, warm: int = 3,
                          marker: Any = None, after: Any = None) -> None:
        """`warm` marked steps outside the trace, then `steps` more inside it; each marked
        by `marker(i)` (default `tfobs.step(i)`); `after()`, if given, inside the trace
        after the last step."""
        mark = marker or tfobs.step

        def loop(n: int, first: int) -> None:
            for i in range(first, first + n):
                with mark(i):
                    one_step(i)

        def traced() -> None:
            loop(steps, warm)
            if after is not None:
                after()

        loop(warm, 0)
        profile(traced)

    def timed_then_profile(one_step: Any, steps: int, warm: int = 3, **kw: Any) -> list[float]:
        """`warm_then_profile`, each marked step's `one_step(i)` timed by the job itself:
        the profiled steps' times in ms, the figure the capture's steps are held to."""
        times: list[float] = []

        def timed(i: int) -> None:
            t = time.perf_counter()
            one_step(i)
            times.append(time.perf_counter() - t)

        warm_then_profile(timed, steps, warm, **kw)
        return [round(t * 1e3, 3) for t in times[warm:]]

    def fit_timed_then_profile(model: Any, ds: Any, steps: int, warm: int = 3) -> list[float]:
        """Keras fit of `warm` steps outside the trace, then `steps` inside it (tfobs's
        callback marks them), each batch timed by the job: the profiled steps' times in ms."""
        times: list[float] = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=warm, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=steps, epochs=1, **kw))
        return [round(t * 1e3, 3) for t in times]

    def train_root(i: int) -> Any:
        """`Trace("train", step_num=i, _r=1)`: the job's own step marker, no tfobs."""
        return tf.profiler.experimental.Trace("train", step_num=i, _r=1)

    def fit_then_profile(model: Any, ds: Any, warm: int, steps: int, epochs: int = 1,
                         **fit_kw: Any) -> None:
        """An untraced fit of `warm` steps, then `epochs` profiled epochs of `steps` each,
        with tfobs's Keras callback (markers)."""
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()()], **fit_kw}
        model.fit(ds, steps_per_epoch=warm, epochs=1, **kw)
        profile(lambda: model.fit(ds, steps_per_epoch=steps, epochs=epochs, **kw))

    def py_sleep_map(ds: Any, sleep_s: float, shape: tuple[int, int]) -> Any:
        """`ds`'s (x, y) batches through a `py_function` that sleeps `sleep_s` per batch
        (slow Python preprocessing in tf.data)."""
        def slow(xb: Any) -> Any:
            time.sleep(sleep_s)
            return xb

        return ds.map(lambda xb, yb: (
            tf.ensure_shape(tf.py_function(slow, [xb], tf.float32), shape), yb))

    def example_records(prefix: str, count: int, rows: int, features: int
                        ) -> tuple[list[str], dict[str, Any]]:
        """`count` TFRecord files (`<prefix>-<k>.tfrecord`, in the log folder, removed with
        it) of `rows` tf.train.Example each: `features` random floats "x" and the first of
        them as the label "y"; and the parse spec that reads them."""
        folder = pathlib.Path(logdir) / "records"
        folder.mkdir(exist_ok=True)
        files = []
        for f in range(count):
            path = str(folder / f"{prefix}-{f}.tfrecord")
            with tf.io.TFRecordWriter(path) as writer:
                for row in rng.random((rows, features)).tolist():
                    feat = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                            "y": tf.train.Feature(float_list=tf.train.FloatList(
                                value=[row[0]]))}
                    writer.write(tf.train.Example(features=tf.train.Features(
                        feature=feat)).SerializeToString())
            files.append(path)
        return files, {"x": tf.io.FixedLenFeature((features,), tf.float32),
                       "y": tf.io.FixedLenFeature((1,), tf.float32)}

    def sgd_loop(ds: Any, features: int, steps: int) -> None:
        """`mlp(features, 64)` trained by SGD on `ds`'s batches in a custom loop marked
        `train_root(i)`: `warm_then_profile`'s warm-up steps, then `steps` traced."""
        model = mlp(features, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), steps, marker=train_root)

    def regression_data(rows: int = 4096, features: int = 32) -> tuple[Any, Any]:
        """`rows` normal inputs of `features` and a normal target each, float32."""
        x = rng.normal(size=(rows, features)).astype("float32")
        y = rng.normal(size=(rows, 1)).astype("float32")
        return x, y

    def random_batches(n: int, features: int, batch: int) -> Any:
        x = rng.random((n, features), np.float32)
        y = rng.random((n, 1), np.float32)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch).prefetch(2)

    def mlp(features: int, width: int) -> Any:
        """features -> Dense(width, relu) -> Dense(1): the small model most cases train."""
        return keras.Sequential([keras.Input((features,)), keras.layers.Dense(width, "relu"),
                                 keras.layers.Dense(1)])

    def mse(yb: Any, pred: Any) -> Any:
        return tf.reduce_mean(tf.square(pred - yb))

    def distributed_step(strategy: Any, model: Any, opt: Any, loss_of: Any) -> Any:
        """A tf.function running one step on every replica (`loss_of(yb, pred)`), the
        replicas' losses summed."""
        def replica_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_of(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step(batch: Any) -> Any:
            per = strategy.run(replica_step, args=batch)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per, axis=None)

        return train_step

    if case in ("conv_bn_custom_loop", "single_thread_loop"):
        params = {"batch": 32, "steps": 12}
        model = keras.Sequential([
            keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, padding="same"),
            keras.layers.BatchNormalization(), keras.layers.ReLU(),
            keras.layers.Conv2D(32, 3, padding="same"), keras.layers.BatchNormalization(),
            keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
        x = tf.random.uniform((256, 32, 32, 3))
        y = tf.random.uniform((256,), maxval=10, dtype=tf.int32)
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2))
        step = build_train_step(tf, model, optimizer=keras.optimizers.SGD(0.01))
        warm_then_profile(lambda i: step(*next(it)), params["steps"])

    elif case == "lstm_bfc_varying":
        params = {"vocab": 2000, "embed": 64, "units": 64, "steps": 12,
                  "batches": [8, 16, 24, 32], "lengths": [16, 32, 48, 64]}
        model = keras.Sequential([
            keras.Input((None,), dtype="int32"), keras.layers.Embedding(params["vocab"], 64),
            keras.layers.LSTM(64, return_sequences=True), keras.layers.LSTM(64),
            keras.layers.Dense(1)])
        spec = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32)]
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3),
                                input_signature=spec)

        def varying(i: int) -> None:  # a new (batch, length) every step
            b = params["batches"][i % 4]
            length = params["lengths"][(i // 4 + i) % 4]
            xb = tf.constant(rng.integers(0, params["vocab"], (b, length)), tf.int32)
            step(xb, tf.constant(rng.random((b, 1)), tf.float32))

        warm_then_profile(varying, params["steps"], warm=4)

    elif case in ("keras3_spe4_callback", "keras3_spe4_plain", "mixed_precision_fit",
                  "slow_callback"):
        spe = 4 if case.startswith("keras3_spe4") else 1
        if case == "mixed_precision_fit":
            keras.mixed_precision.set_global_policy("mixed_bfloat16")
        params = {"steps_per_execution": spe, "batch": 64, "steps": 12 if spe == 1 else 16}
        model = keras.Sequential([
            keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(1, dtype="float32")])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse",
                      steps_per_execution=spe)
        x = rng.random((64 * 64, 256), np.float32)
        y = rng.random((64 * 64, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).prefetch(2)
        callbacks: list[Any] = []
        if case != "keras3_spe4_plain":
            callbacks.append(keras3_callback_class()())
        if case == "slow_callback":
            params["callback_sleep_s"] = 0.005

            class Slow(keras.callbacks.Callback):
                def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                    time.sleep(0.005)

            callbacks.append(Slow())
        model.fit(ds, steps_per_epoch=8, epochs=1, verbose=0, callbacks=callbacks)
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, verbose=0,
                                  callbacks=callbacks))

    elif case == "mirrored":
        params = {"devices": ["/cpu:0", "/cpu:1"], "global_batch": 64, "steps": 12}
        strategy = tf.distribute.MirroredStrategy(params["devices"])
        with strategy.scope():
            model = mlp(128, 256)
            opt = keras.optimizers.SGD(0.01)
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
        it = iter(strategy.experimental_distribute_dataset(ds))
        train_step = distributed_step(
            strategy, model, opt, lambda yb, pred: tf.reduce_sum(tf.square(pred - yb)) / 64.0)
        warm_then_profile(lambda i: train_step(next(it)), params["steps"])

    elif case == "numpy_preprocess":
        params = {"batch": 128, "steps": 12}
        model = mlp(256, 256)
        raw = rng.random((128 * 8, 256)).astype(np.float32)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        def preprocess_then_step(i: int) -> None:
            block = raw[(i % 8) * 128:(i % 8 + 1) * 128]
            # numpy work in Python, inside the step: standardise, clip, sort a copy
            z = (block - block.mean(0)) / (block.std(0) + 1e-6)
            z = np.clip(z, -3, 3)
            for _ in range(20):
                np.sort(z, axis=1)
            step(tf.constant(z), tf.constant(z[:, :1]))

        warm_then_profile(preprocess_then_step, params["steps"])

    elif case == "xla_jit":
        params = {"batch": 128, "steps": 12}
        model = mlp(256, 512)
        x = tf.random.uniform((128, 256))
        y = tf.random.uniform((128, 1))
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01), jit_compile=True)
        warm_then_profile(lambda i: step(x, y), params["steps"])
    elif case == "gan_two_tapes":
        params = {"batch": 64, "noise": 32, "features": 64, "steps": 12}
        gen = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, "relu"),
                                keras.layers.Dense(64)])
        disc = mlp(64, 128)
        g_opt, d_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4)
        bce = keras.losses.BinaryCrossentropy(from_logits=True)
        real = tf.random.normal((64 * 8, 64))
        it = iter(tf.data.Dataset.from_tensor_slices(real).repeat().batch(64).prefetch(2))

        @tf.function
        def gan_step(batch: Any) -> Any:
            noise = tf.random.normal((64, 32))
            with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
                fake = gen(noise, training=True)
                real_out, fake_out = disc(batch, training=True), disc(fake, training=True)
                g_loss = bce(tf.ones_like(fake_out), fake_out)
                d_loss = (bce(tf.ones_like(real_out), real_out)
                          + bce(tf.zeros_like(fake_out), fake_out))
            g_opt.apply_gradients(zip(g_tape.gradient(g_loss, gen.trainable_variables),
                                      gen.trainable_variables, strict=True))
            d_opt.apply_gradients(zip(d_tape.gradient(d_loss, disc.trainable_variables),
                                      disc.trainable_variables, strict=True))
            return g_loss, d_loss

        warm_then_profile(lambda i: gan_step(next(it)), params["steps"])

    elif case == "transformer_bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        params = {"batch": 16, "length": 32, "dim": 64, "heads": 4, "steps": 10}
        inp = keras.Input((32, 64))
        att = keras.layers.MultiHeadAttention(4, 16)(inp, inp)
        h = keras.layers.LayerNormalization()(inp + att)
        ff = keras.layers.Dense(64)(keras.layers.Dense(256, activation="gelu")(h))
        out = keras.layers.Dense(1, dtype="float32")(
            keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h + ff)))
        model = keras.Model(inp, out)
        x = tf.random.normal((16, 32, 64))
        y = tf.random.normal((16, 1))
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3))
        warm_then_profile(lambda i: step(x, y), params["steps"])

    elif case == "tfrecord_fit":
        params = {"files": 4, "records_per_file": 256, "batch": 32, "steps": 12}
        folder = pathlib.Path(logdir) / "records"  # removed with the log folder
        folder.mkdir(exist_ok=True)
        files = []
        for f in range(4):
            path = str(folder / f"part-{f}.tfrecord")
            with tf.io.TFRecordWriter(path) as writer:
                for _ in range(256):
                    feat = {"x": tf.train.Feature(float_list=tf.train.FloatList(
                                value=rng.random(64).tolist())),
                            "y": tf.train.Feature(float_list=tf.train.FloatList(
                                value=[float(rng.random())]))}
                    writer.write(tf.train.Example(features=tf.train.Features(
                        feature=feat)).SerializeToString())
            files.append(path)
        spec = {"x": tf.io.FixedLenFeature((64,), tf.float32),
                "y": tf.io.FixedLenFeature((1,), tf.float32)}
        ds = (tf.data.Dataset.from_tensor_slices(files).repeat()
              .interleave(tf.data.TFRecordDataset, cycle_length=4,
                          num_parallel_calls=tf.data.AUTOTUNE)
              .batch(32).map(lambda r: tf.io.parse_example(r, spec))
              .map(lambda d: (d["x"] * 2.0 - 1.0, d["y"])).prefetch(2))
        model = mlp(64, 128)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, ds, 6, params["steps"])

    elif case == "gru_fit":
        params = {"vocab": 1000, "length": 24, "batch": 32, "steps": 10}
        model = keras.Sequential([keras.Input((24,), dtype="int32"),
                                  keras.layers.Embedding(1000, 32), keras.layers.GRU(32),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        x = rng.integers(0, 1000, (32 * 16, 24)).astype(np.int32)
        y = rng.random((32 * 16, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)
        fit_then_profile(model, ds, 4, params["steps"])

    elif case in ("fit_validation", "fit_validation_unmarked"):
        params = {"batch": 64, "steps": 6, "validation_steps": 3, "epochs": 2}
        model = keras.Sequential([
            keras.Input((128,)), keras.layers.Dense(256), keras.layers.BatchNormalization(),
            keras.layers.ReLU(), keras.layers.Dropout(0.2), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        ds = random_batches(64 * 8, 128, 64)
        if case == "fit_validation_unmarked":
            kw = {"verbose": 0, "validation_data": ds, "validation_steps": 3}
            model.fit(ds, steps_per_epoch=6, epochs=1, **kw)  # traced, untraced
            profile(lambda: model.fit(ds, steps_per_epoch=6, epochs=2, **kw))
        else:
            fit_then_profile(model, ds, 6, 6, epochs=2, validation_data=ds,
                             validation_steps=3)

    elif case == "mirrored_fit":
        params = {"devices": ["/cpu:0", "/cpu:1"], "global_batch": 64, "steps": 10}
        strategy = tf.distribute.MirroredStrategy(params["devices"])
        with strategy.scope():
            model = mlp(128, 256)
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, random_batches(64 * 16, 128, 64), 4, params["steps"])

    elif case == "resnet_fit":
        params = {"batch": 32, "image": [32, 32, 3], "steps": 10}
        inp = keras.Input((32, 32, 3))
        h = keras.layers.Conv2D(16, 3, strides=2, padding="same")(inp)
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(h))
        r = keras.layers.DepthwiseConv2D(3, padding="same")(h)
        r = keras.layers.Conv2D(16, 1)(keras.layers.ReLU()(keras.layers.BatchNormalization()(r)))
        h = keras.layers.MaxPooling2D()(keras.layers.Add()([h, r]))
        out = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(h))
        model = keras.Model(inp, out)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.random((32 * 8, 32, 32, 3), np.float32)
        y = rng.integers(0, 10, (32 * 8,)).astype(np.int32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)
        fit_then_profile(model, ds, 4, params["steps"])

    elif case == "bilstm_custom_loop":
        params = {"vocab": 500, "length": 20, "batches": [8, 16, 24], "steps": 9}
        model = keras.Sequential([
            keras.Input((None,), dtype="int32"), keras.layers.Embedding(500, 32),
            keras.layers.Bidirectional(keras.layers.LSTM(32)), keras.layers.Dense(1)])
        spec = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32)]
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3),
                                input_signature=spec)

        def by_batch(i: int) -> None:
            b = params["batches"][i % 3]
            step(tf.constant(rng.integers(0, 500, (b, 20)), tf.int32),
                 tf.constant(rng.random((b, 1)), tf.float32))

        warm_then_profile(by_batch, params["steps"], warm=3)

    elif case == "gru_spe3_fit":
        params = {"vocab": 800, "length": 16, "batch": 32, "steps_per_execution": 3,
                  "steps": 12}
        model = keras.Sequential([keras.Input((16,), dtype="int32"),
                                  keras.layers.Embedding(800, 16), keras.layers.GRU(16),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=3)
        x = rng.integers(0, 800, (32 * 12, 16)).astype(np.int32)
        y = rng.random((32 * 12, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)
        fit_then_profile(model, ds, 6, params["steps"])

    elif case == "numpy_function_input":
        params = {"batch": 32, "features": 64, "steps": 10}

        def py_transform(row: Any) -> Any:
            z = np.fft.rfft(row).real[:64].astype(np.float32)
            return (z - z.mean()) / (z.std() + 1e-6)

        x = rng.random((32 * 8, 128), np.float32)
        y = rng.random((32 * 8, 1), np.float32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
              .map(lambda a, b: (tf.ensure_shape(
                  tf.numpy_function(py_transform, [a], tf.float32), (64,)), b))
              .batch(32))
        model = mlp(64, 64)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, ds, 4, params["steps"])

    elif case == "xla_fit":
        params = {"batch": 64, "steps": 10, "jit_compile": True}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", jit_compile=True)
        fit_then_profile(model, random_batches(64 * 8, 128, 64), 4, params["steps"])

    elif case == "while_loop_step":
        params = {"batch": 64, "inner": 4, "steps": 10}
        w = tf.Variable(tf.random.normal((128, 1)) * 0.01)
        x = tf.random.uniform((64, 128))
        y = tf.random.uniform((64, 1))

        @tf.function
        def inner_steps() -> Any:
            def body(k: Any, loss: Any) -> Any:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(x @ w - y))
                w.assign_sub(0.01 * tape.gradient(loss, w))
                return k + 1, loss

            return tf.while_loop(lambda k, _: k < 4, body, (tf.constant(0), tf.constant(0.0)))

        warm_then_profile(lambda i: inner_steps(), params["steps"])

    elif case == "eager_loop":
        params = {"batch": 32, "steps": 8}
        model = mlp(64, 64)
        opt = keras.optimizers.SGD(0.01)
        x = tf.random.uniform((32, 64))
        y = tf.random.uniform((32, 1))

        def eager_step(i: int) -> None:
            with tf.GradientTape() as tape:
                loss = mse(y, model(x, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))

        warm_then_profile(eager_step, params["steps"])

    elif case == "tfkeras_profile_batch":
        import tf_keras

        params = {"batch": 64, "epoch_steps": 16, "profile_batch": [6, 13]}
        model = tf_keras.Sequential([tf_keras.layers.Dense(256, activation="relu",
                                                           input_shape=(128,)),
                                     tf_keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        board = tf_keras.callbacks.TensorBoard(logdir, profile_batch=(6, 13))
        model.fit(random_batches(64 * 8, 128, 64), steps_per_epoch=16, epochs=1, verbose=0,
                  callbacks=[board])

    elif case == "tfkeras_fit_validation_epochs":
        import tf_keras

        params = {"batch": 32, "epoch_steps": 12, "epochs": 2, "validation_steps": 4}
        model = tf_keras.Sequential([tf_keras.layers.Dense(64, activation="relu",
                                                           input_shape=(32,)),
                                     tf_keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        x = rng.random((32 * 12, 32), np.float32)
        y = rng.random((32 * 12, 1), np.float32)

        def fit(epochs: int) -> None:
            model.fit(x, y, batch_size=32, epochs=epochs, verbose=0,
                      validation_data=(x[:128], y[:128]))

        fit(1)
        profile(lambda: fit(params["epochs"]))

    elif case == "two_functions_step":
        params = {"batch": 32, "micro_batches": 2, "steps": 10}
        model = mlp(128, 128)
        opt = keras.optimizers.SGD(0.01)
        x = tf.random.uniform((32, 128))
        y = tf.random.uniform((32, 1))

        @tf.function
        def grads(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            return tape.gradient(loss, model.trainable_variables)

        @tf.function
        def apply(gs: Any) -> None:
            opt.apply_gradients(zip(gs, model.trainable_variables, strict=True))

        def accumulate(i: int) -> None:
            total = grads(x, y)
            more = grads(x * 0.5, y)
            apply([a + b for a, b in zip(total, more, strict=True)])

        warm_then_profile(accumulate, params["steps"])

    elif case == "summaries_fit":
        params = {"batch": 64, "steps": 10, "update_freq": 1, "histogram_freq": 1}
        model = mlp(128, 128)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        board = keras.callbacks.TensorBoard(str(pathlib.Path(logdir) / "summaries"),
                                            update_freq=1, histogram_freq=1)
        fit_then_profile(model, random_batches(64 * 8, 128, 64), 4, params["steps"],
                         callbacks=[keras3_callback_class()(), board])

    elif case == "string_input_fit":
        params = {"batch": 32, "vocab": 200, "length": 16, "steps": 10}
        words = [f"w{k}" for k in range(300)]
        texts = [" ".join(rng.choice(words, 12)) for _ in range(512)]
        vectorize = keras.layers.TextVectorization(200, output_sequence_length=16)
        vectorize.adapt(texts)
        ds = (tf.data.Dataset.from_tensor_slices((texts, rng.random((512, 1), np.float32)))
              .repeat().batch(32).map(lambda t, yb: (vectorize(t), yb)).prefetch(2))
        model = keras.Sequential([keras.Input((16,), dtype="int64"),
                                  keras.layers.Embedding(200, 16),
                                  keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, ds, 4, params["steps"])

    elif case == "ragged_text_fit":
        params = {"batch": 32, "vocab": 300, "max_length": 20, "steps": 10}
        lengths = rng.integers(3, 20, 512)
        flat = rng.integers(1, 300, int(lengths.sum())).astype(np.int64)
        tokens = tf.RaggedTensor.from_row_lengths(flat, lengths)
        ds = (tf.data.Dataset.from_tensor_slices((tokens, rng.random((512, 1), np.float32)))
              .repeat().ragged_batch(32).prefetch(2))

        class RaggedMean(keras.layers.Layer):
            def __init__(self) -> None:
                super().__init__()
                self.table = self.add_weight(shape=(300, 16), initializer="uniform")

            def call(self, ragged: Any) -> Any:
                return tf.reduce_mean(tf.ragged.map_flat_values(
                    tf.nn.embedding_lookup, self.table, ragged), axis=1)

        class RaggedModel(keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.pool, self.head = RaggedMean(), keras.layers.Dense(1)

            def call(self, ragged: Any) -> Any:
                return self.head(self.pool(ragged))

        model = RaggedModel()
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, ds, 4, params["steps"])

    elif case == "augment_fit":
        params = {"batch": 32, "image": [32, 32, 3], "steps": 10}
        x = rng.random((256, 32, 32, 3), np.float32)
        y = rng.integers(0, 10, 256).astype(np.int32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(256).repeat()
              .map(lambda a, b: (tf.image.random_brightness(tf.image.random_flip_up_down(a),
                                                            0.1), b),
                   num_parallel_calls=tf.data.AUTOTUNE)
              .batch(32).prefetch(tf.data.AUTOTUNE))
        model = keras.Sequential([
            keras.Input((32, 32, 3)), keras.layers.RandomFlip("horizontal"),
            keras.layers.RandomTranslation(0.1, 0.1), keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        fit_then_profile(model, ds, 4, params["steps"])

    elif case in ("augment_in_pipeline_fit", "augment_in_model_fit"):
        params = {"batch": 32, "image": [64, 64, 3], "steps": 16}
        x = rng.uniform(size=(1024, 64, 64, 3)).astype(np.float32)
        y = rng.integers(0, 10, size=1024)
        layers = [keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1),
                  keras.layers.RandomZoom(0.1)]
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
        if case == "augment_in_pipeline_fit":
            augment = keras.Sequential(layers)
            ds = ds.map(lambda a, b: (augment(a, training=True), b),
                        num_parallel_calls=tf.data.AUTOTUNE)
            layers = []
        model = keras.Sequential([
            keras.Input((64, 64, 3)), *layers, keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        fit_then_profile(model, ds.prefetch(2), 3, params["steps"])

    elif case == "jpeg_decode_plain_fit":
        params = {"batch": 32, "image": [32, 32, 3], "resize": [24, 24], "steps": 16}
        jpegs = [tf.io.encode_jpeg(rng.integers(0, 255, (32, 32, 3)).astype(np.uint8)).numpy()
                 for _ in range(64)]
        labels = rng.random((512, 1), np.float32)
        ds = (tf.data.Dataset.from_tensor_slices((jpegs * 8, labels)).repeat()
              .map(lambda s, b: (tf.image.resize(tf.image.decode_jpeg(s, channels=3),
                                                 (24, 24)) / 255.0, b),
                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
              .batch(32).prefetch(tf.data.AUTOTUNE))
        model = keras.Sequential([
            keras.Input((24, 24, 3)), keras.layers.Conv2D(8, 3),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0)
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, verbose=0))

    elif case == "checkpoint_callback_fit":
        params = {"batch": 32, "save_freq": 2, "steps": 24}
        x = rng.normal(size=(768, 20)).astype(np.float32)
        y = rng.normal(size=(768, 1)).astype(np.float32)
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        saved = tempfile.mkdtemp()
        saver = keras.callbacks.ModelCheckpoint(os.path.join(saved, "w.weights.h5"),
                                                save_weights_only=True, save_freq=2)
        model.fit(x[:128], y[:128], batch_size=32, epochs=1, verbose=0, callbacks=[saver])
        profile(lambda: model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[saver]))
        shutil.rmtree(saved, ignore_errors=True)

    elif case == "checkpoint_every_4_fit":
        params = {"batch": 32, "save_freq": 4, "epochs": 3, "steps": 24}
        x = rng.normal(size=(256, 128)).astype(np.float32)
        y = rng.integers(0, 10, size=256)
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(512, "relu"),
                                  keras.layers.Dense(512, "relu"), keras.layers.Dense(10)])
        model.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        saved = tempfile.mkdtemp(prefix="tfobs-weights-")
        saver = keras.callbacks.ModelCheckpoint(os.path.join(saved, "w.weights.h5"),
                                                save_weights_only=True, save_freq=4)
        model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0, callbacks=[saver])
        profile(lambda: model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[saver]))
        shutil.rmtree(saved, ignore_errors=True)

    elif case == "sparse_custom_loop":
        params = {"batch": 64, "buckets": 1000, "ids_per_row": 5, "steps": 10}
        wide = tf.Variable(tf.random.normal((1000, 8)) * 0.01)
        tower = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, "relu"),
                                  keras.layers.Dense(8)])
        opt = keras.optimizers.Adagrad(0.05)

        def sparse_batch() -> Any:
            rows = np.repeat(np.arange(64), 5)
            cols = np.tile(np.arange(5), 64)
            ids = rng.integers(0, 1000, 64 * 5)
            return tf.SparseTensor(np.stack([rows, cols], 1).astype(np.int64),
                                   ids.astype(np.int64), (64, 5))

        @tf.function
        def sparse_step(sp: Any, dense: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                emb = tf.nn.embedding_lookup_sparse(wide, sp, None, combiner="mean")
                pred = tf.reduce_sum(emb * tower(dense), axis=1, keepdims=True)
                loss = tf.reduce_mean(tf.square(pred - yb))
            variables = [wide, *tower.trainable_variables]
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        batches = [(sparse_batch(), tf.random.uniform((64, 32)), tf.random.uniform((64, 1)))
                   for _ in range(4)]
        warm_then_profile(lambda i: sparse_step(*batches[i % 4]), params["steps"])

    elif case == "multi_input_fit":
        params = {"batch": 32, "steps": 10}
        a_in, b_in = keras.Input((32,), name="a"), keras.Input((16,), name="b")
        h = keras.layers.Concatenate()([keras.layers.Dense(32, "relu")(a_in),
                                        keras.layers.Dense(32, "relu")(b_in)])
        model = keras.Model({"a": a_in, "b": b_in},
                            {"score": keras.layers.Dense(1, name="score")(h),
                             "label": keras.layers.Dense(3, name="label")(h)})
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss={"score": "mse", "label": keras.losses.SparseCategoricalCrossentropy(
                          from_logits=True)})
        n = 32 * 8
        ds = tf.data.Dataset.from_tensor_slices((
            {"a": rng.random((n, 32), np.float32), "b": rng.random((n, 16), np.float32)},
            {"score": rng.random((n, 1), np.float32),
             "label": rng.integers(0, 3, n).astype(np.int32)})).repeat().batch(32).prefetch(2)
        fit_then_profile(model, ds, 4, params["steps"])

    elif case == "autoencoder_custom_loop":
        params = {"batch": 16, "image": [32, 32, 1], "steps": 10}
        model = keras.Sequential([
            keras.Input((32, 32, 1)), keras.layers.Conv2D(16, 3, strides=2, padding="same",
                                                          activation="relu"),
            keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu"),
            keras.layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu"),
            keras.layers.Conv2DTranspose(1, 3, strides=2, padding="same")])
        x = tf.random.uniform((16, 32, 32, 1))
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3))
        warm_then_profile(lambda i: step(x, x), params["steps"])

    elif case == "profiler_server":
        params = {"batch": 64, "steps": 40, "trace_ms": 1500}
        model = mlp(128, 256)
        x = tf.random.uniform((64, 128))
        y = tf.random.uniform((64, 1))
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        def paced(i: int) -> None:
            step(x, y)
            time.sleep(0.02)  # the run outlasts the on-demand trace's start

        warm_then_profile(paced, params["steps"])
    elif case == "python_tracer_fit":
        params = {"batch": 64, "steps": 8, "python_tracer_level": 1}
        model = mlp(64, 128)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, random_batches(64 * 8, 64, 64), 3, params["steps"])

    elif case == "host_tracer3_loop":
        params = {"batch": 64, "steps": 10, "host_tracer_level": 3}
        model = mlp(128, 256)
        it = iter(random_batches(64 * 8, 128, 64))
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3))
        warm_then_profile(lambda i: step(*next(it)), params["steps"])

    elif case == "checkpoint_loop":
        params = {"batch": 64, "steps": 9, "save_every": 3}
        model = mlp(128, 256)
        opt = keras.optimizers.Adam(1e-3)
        it = iter(random_batches(64 * 8, 128, 64))
        step = build_train_step(tf, model, mse, opt)
        ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
        prefix = str(pathlib.Path(logdir) / "ckpt" / "model")

        def step_and_save(i: int) -> None:
            step(*next(it))
            if i % 3 == 0:
                ckpt.write(prefix)

        warm_then_profile(step_and_save, params["steps"])

    elif case == "mixed_float16_loop":
        params = {"batch": 64, "steps": 10, "policy": "mixed_float16"}
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(1, dtype="float32")])
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))
        x = tf.random.uniform((64, 128))
        y = tf.random.uniform((64, 1))

        @tf.function
        def scaled_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
                scaled = opt.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        warm_then_profile(lambda i: scaled_step(x, y), params["steps"])

    elif case == "sparse_adam_fit":
        params = {"batch": 64, "vocab": 20000, "length": 8, "steps": 10}
        tokens = rng.integers(0, 20000, (64 * 8, 8))
        ds = (tf.data.Dataset.from_tensor_slices((tokens, rng.random((64 * 8, 1), np.float32)))
              .repeat().batch(64).prefetch(2))
        model = keras.Sequential([keras.Input((8,), dtype="int64"),
                                  keras.layers.Embedding(20000, 32),
                                  keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        fit_then_profile(model, ds, 3, params["steps"])

    elif case == "numpy_epochs_fit":
        params = {"batch": 64, "samples": 300, "length": 20, "epochs": 2}
        model = keras.Sequential([keras.Input((20,)), keras.layers.Embedding(500, 32),
                                  keras.layers.LSTM(32), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        x = rng.integers(0, 500, (300, 20))
        y = rng.random((300, 1), np.float32)
        kw = {"batch_size": 64, "verbose": 0, "callbacks": [keras3_callback_class()()]}
        model.fit(x, y, epochs=1, **kw)
        profile(lambda: model.fit(x, y, epochs=2, **kw))
    elif case == "dist_from_fn_loop":
        params = {"devices": ["/cpu:0", "/cpu:1"], "batch_per_replica": 32, "steps": 10}
        strategy = tf.distribute.MirroredStrategy(params["devices"])
        x = rng.random((512, 128), np.float32)
        y = rng.random((512, 1), np.float32)

        def replica_data(ctx: Any) -> Any:
            return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)

        it = iter(strategy.distribute_datasets_from_function(replica_data))
        with strategy.scope():
            model = mlp(128, 256)
            opt = keras.optimizers.SGD(0.01)
        dist_step = distributed_step(strategy, model, opt, lambda yb, pred: mse(yb, pred) / 2)
        warm_then_profile(lambda i: dist_step(next(it)), params["steps"])

    elif case == "pydataset_fit":
        params = {"batch": 64, "features": 128, "workers": 2, "steps": 10}

        class Batches(keras.utils.PyDataset):
            def __init__(self) -> None:
                super().__init__(workers=2, use_multiprocessing=False)

            def __len__(self) -> int:
                return 1000

            def __getitem__(self, i: int) -> Any:
                r = np.random.default_rng(i)
                return r.random((64, 128), np.float32), r.random((64, 1), np.float32)

        model = mlp(128, 256)
        model.compile(optimizer="adam", loss="mse")
        fit_then_profile(model, Batches(), 3, params["steps"])

    elif case == "py_function_step":
        params = {"batch": 64, "steps": 10, "metric_sleep_s": 0.003}
        model = mlp(128, 256)
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(64 * 8, 128, 64))

        def numpy_metric(pred: Any) -> Any:
            time.sleep(0.003)
            return np.float32(np.abs(pred.numpy()).mean())

        @tf.function
        def step_with_metric(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                pred = model(xb, training=True)
                loss = mse(yb, pred)
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return tf.py_function(numpy_metric, [pred], tf.float32)

        warm_then_profile(lambda i: step_with_metric(*next(it)), params["steps"])

    elif case == "for_loop_slow_input":
        params = {"batch": 64, "steps": 10, "map_sleep_s": 0.003}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        def slow(xb: Any) -> Any:
            time.sleep(0.003)
            return xb

        def load(xb: Any, yb: Any) -> Any:
            return tf.py_function(slow, [xb], tf.float32), yb

        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).map(load).repeat()

        def marked_inside(first: int, n: int) -> None:
            for i, (xb, yb) in enumerate(ds.take(n), start=first):
                with tfobs.step(i):  # the fetch happened before the marker opened
                    step(tf.ensure_shape(xb, (64, 128)), yb)

        marked_inside(0, 3)
        profile(lambda: marked_inside(3, params["steps"]))

    elif case == "gan_train_on_batch":
        from tfobs.capture import markers

        class _Hooks:  # tfobs's wrapper marks calls only while a runtime receives steps
            def step_begin(self, step_num: int) -> None: ...
            def step_end(self, step_num: int, duration_s: float) -> None: ...
            def train_end(self) -> None: ...

        markers.set_hooks(_Hooks())
        markers.install_fit_hooks()
        params = {"batch": 64, "noise": 32, "features": 64, "iterations": 6}
        gen = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, "relu"),
                                keras.layers.Dense(64)])
        disc = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, "relu"),
                                 keras.layers.Dense(1, "sigmoid")])
        disc.compile(optimizer=keras.optimizers.Adam(1e-4), loss="binary_crossentropy")
        stacked = keras.Sequential([gen, disc])
        stacked.compile(optimizer=keras.optimizers.Adam(1e-4), loss="binary_crossentropy")
        real = rng.normal(size=(64 * 8, 64)).astype(np.float32)
        labels = np.concatenate([np.ones((64, 1)), np.zeros((64, 1))]).astype(np.float32)

        def iteration(i: int) -> None:
            noise = rng.normal(size=(64, 32)).astype(np.float32)
            fake = gen.predict_on_batch(noise)
            batch = np.concatenate([real[(i % 8) * 64:(i % 8 + 1) * 64], fake])
            disc.train_on_batch(batch, labels)
            stacked.train_on_batch(noise, np.ones((64, 1), np.float32))

        for i in range(3):
            iteration(i)
        profile(lambda: [iteration(i) for i in range(3, 3 + params["iterations"])])

    elif case == "retrace_loop":
        params = {"batch": 64, "steps": 8}
        model = mlp(128, 256)
        opt = keras.optimizers.SGD(0.01)
        x = tf.random.uniform((64, 128))
        y = tf.random.uniform((64, 1))

        @tf.function
        def scaled_step(xb: Any, yb: Any, scale: int) -> Any:  # a new int: a new trace
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True)) * scale
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        warm_then_profile(lambda i: scaled_step(x, y, i), params["steps"])
    elif case in ("named_markers_loop", "markers_without_root"):
        params = {"batch": 64, "steps": 20, "map_sleep_s": 0.002,
                  "marker": "batch" if case == "named_markers_loop" else "train",
                  "root_stat": case == "named_markers_loop"}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        it = iter(py_sleep_map(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat(),
                               params["map_sleep_s"], (64, 128)))
        trace = tf.profiler.experimental.Trace
        root = {"_r": 1} if params["root_stat"] else {}

        def own_markers(first: int, n: int) -> None:
            for i in range(first, first + n):
                with trace(params["marker"], step_num=i, **root):
                    with trace("load"):
                        xb, yb = next(it)
                    with trace("forward"):
                        step(xb, yb)

        own_markers(0, 3)
        profile(lambda: own_markers(3, params["steps"]))

    elif case in ("tensor_step_nums", "float_step_nums", "negative_step_nums",
                  "variable_step_nums"):
        params = {"batch": 64, "steps": 12}
        model = mlp(128, 256)
        optimizer = keras.optimizers.SGD(0.01)
        step = build_train_step(tf, model, mse, optimizer)
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        trace = tf.profiler.experimental.Trace
        if case == "tensor_step_nums":
            numbered = iter(batches.enumerate())  # (step counter tensor, batch)
        else:
            it, counter = iter(batches), iter(range(1 << 30))
            sign = -1 if case == "negative_step_nums" else 1

            def plain() -> Any:
                i = next(counter)
                if case == "variable_step_nums":
                    return optimizer.iterations, next(it)
                return (float(i) if case == "float_step_nums" else sign * i), next(it)

        def odd_numbers(n: int) -> None:
            for _ in range(n):
                num, (xb, yb) = next(numbered) if case == "tensor_step_nums" else plain()
                with trace("train", step_num=num, _r=1):
                    step(xb, yb)

        odd_numbers(3)
        profile(lambda: odd_numbers(params["steps"]))

    elif case == "queue_fed_loop":
        import threading

        params = {"batch": 64, "steps": 15, "producer_sleep_s": 0.004, "capacity": 8}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        queue = tf.queue.FIFOQueue(params["capacity"], [tf.float32, tf.float32],
                                   shapes=[(64, 128), (64, 1)])
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                j = (i % 16) * 64
                try:
                    queue.enqueue((x[j:j + 64], y[j:j + 64]))
                except Exception:  # closed at the end
                    return
                time.sleep(params["producer_sleep_s"])
                i += 1

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()

        def from_queue(first: int, n: int) -> None:
            for i in range(first, first + n):
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    xb, yb = queue.dequeue()
                    step(xb, yb)

        from_queue(0, 3)
        profile(lambda: from_queue(3, params["steps"]))
        stop.set()
        queue.close(cancel_pending_enqueues=True)
        producer.join(5)

    elif case == "two_thread_steps":
        import threading

        params = {"batch": 64, "steps": 12, "threads": 2}
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        trainers = [(build_train_step(tf, mlp(128, width), mse, keras.optimizers.SGD(0.01)),
                     iter(batches)) for width in (256, 512)]
        for step, it in trainers:  # traced and run once outside the window
            step(*next(it))

        def train(step: Any, it: Any) -> None:
            for i in range(params["steps"]):
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    step(*next(it))

        def side_by_side() -> None:
            threads = [threading.Thread(target=train, args=t) for t in trainers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        profile(side_by_side)

    elif case in ("predict_only", "evaluate_only"):
        params = {"batch": 64, "steps": 30}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(256, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        ds = random_batches(64 * 32, 128, 64)
        if case == "predict_only":
            model.predict(ds, steps=3, verbose=0)
            profile(lambda: model.predict(ds, steps=params["steps"], verbose=0))
        else:
            model.evaluate(ds, steps=3, verbose=0)
            profile(lambda: model.evaluate(ds, steps=params["steps"], verbose=0))

    elif case == "serving_signature":
        params = {"batch": 32, "calls": 40}
        saved = tempfile.mkdtemp(prefix="tfobs-saved-")

        class Scorer(tf.Module):
            def __init__(self) -> None:
                self.w1 = tf.Variable(tf.random.normal((128, 256)))
                self.w2 = tf.Variable(tf.random.normal((256, 1)))

            @tf.function(input_signature=[tf.TensorSpec((None, 128), tf.float32)])
            def serve(self, x: Any) -> Any:
                return {"score": tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2)}

        scorer = Scorer()
        tf.saved_model.save(scorer, saved, signatures={"serving_default": scorer.serve})
        serving = tf.saved_model.load(saved).signatures["serving_default"]
        requests = [tf.constant(rng.random((32, 128), np.float32)) for _ in range(4)]

        def serve_calls(n: int) -> None:
            for i in range(n):
                serving(x=requests[i % 4])

        serve_calls(3)
        profile(lambda: serve_calls(params["calls"]))
        shutil.rmtree(saved, ignore_errors=True)

    elif case == "python_in_step":
        params = {"batch": 128, "steps": 12}
        model = mlp(256, 256)
        opt = keras.optimizers.SGD(0.01)
        raw = rng.random((128 * 8, 256)).astype(np.float32)

        def rank_features(z: Any) -> Any:  # numpy inside the graph
            return np.argsort(np.argsort(z, axis=1), axis=1).astype(np.float32) / z.shape[1]

        @tf.function
        def numpy_then_step(xb: Any, yb: Any) -> Any:
            ranked = tf.numpy_function(rank_features, [xb], tf.float32)
            ranked = tf.ensure_shape(ranked, (128, 256))
            with tf.GradientTape() as tape:
                loss = mse(yb, model(ranked, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def preprocess_then_step(i: int) -> None:
            block = raw[(i % 8) * 128:(i % 8 + 1) * 128]
            z = np.clip((block - block.mean(0)) / (block.std(0) + 1e-6), -3, 3)
            for _ in range(10):  # numpy in Python, inside the marked step
                np.sort(z, axis=1)
            numpy_then_step(tf.constant(z), tf.constant(z[:, :1]))

        warm_then_profile(preprocess_then_step, params["steps"])

    elif case in ("root_without_step_num", "iter_num_markers", "markers_without_root_named",
                  "python_between_markers"):
        params = {"batch": 64, "steps": 16}
        model = mlp(128, 256)
        jit = case == "markers_without_root_named"
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01), jit_compile=jit)
        ds = random_batches(64 * 16, 128, 64)
        if case == "iter_num_markers":
            params["map_ms"] = 1

            def one_ms(xb: Any, yb: Any) -> Any:
                return tf.numpy_function(lambda a: (time.sleep(0.001), a)[1], [xb],
                                         tf.float32, stateful=True), yb

            ds = ds.map(one_ms)
        it = iter(ds)
        trace = tf.profiler.experimental.Trace
        marker = {"root_without_step_num": lambda i: trace("train_step", _r=1),
                  "iter_num_markers": lambda i: trace("iteration", iter_num=i, _r=1),
                  "markers_without_root_named": lambda i: trace("step", step_num=i),
                  "python_between_markers": lambda i: trace("step", step_num=i, _r=1)}[case]
        samples = [list(rng.random(64)) for _ in range(256)]

        def marked(first: int, n: int) -> None:
            for i in range(first, first + n):
                with marker(i):
                    if case == "python_between_markers":
                        for row in samples:  # Python work inside the marked step
                            ranked = sorted(row)
                            {k: v for k, v in enumerate(ranked)}
                    xb, yb = next(it)
                    step(tf.ensure_shape(xb, (64, 128)), yb)

        marked(0, 3)
        profile(lambda: marked(3, params["steps"]))

    elif case == "bfc_growing_loop":
        params = {"steps": 14, "base": 64}
        kept: list[Any] = []

        @tf.function(reduce_retracing=True)
        def grow(n: Any) -> Any:
            a = tf.random.normal(tf.stack([n, 256]))
            b = tf.random.normal(tf.stack([256, n]))
            return tf.reduce_sum(tf.matmul(a, b))

        def step_i(i: int) -> None:
            n = params["base"] * (1 + i % 7)
            kept.append(tf.random.normal((n, 128)))  # a few tensors live across steps
            if len(kept) > 3:
                kept.pop(0)
            grow(tf.constant(n))

        warm_then_profile(step_i, params["steps"])

    elif case in ("cache_shuffle_fit", "parallel_map_slow_fit"):
        params = {"batch": 32, "steps": 16}
        x = rng.random((32 * 24, 64), np.float32)
        y = rng.random((32 * 24, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if case == "cache_shuffle_fit":
            def slow_elem(xe: Any, ye: Any) -> Any:
                xe = tf.numpy_function(lambda a: (time.sleep(0.001), a)[1], [xe],
                                       tf.float32, stateful=True)
                return tf.ensure_shape(xe, (64,)), ye

            ds = (ds.map(slow_elem, num_parallel_calls=tf.data.AUTOTUNE).cache().repeat()
                  .shuffle(256).batch(32).prefetch(tf.data.AUTOTUNE))
        else:
            def slow_batch(xb: Any, yb: Any) -> Any:
                xb = tf.py_function(lambda a: (time.sleep(0.003), a)[1], [xb], tf.float32)
                return tf.ensure_shape(xb, (32, 64)), yb

            ds = ds.repeat().batch(32, drop_remainder=True).map(slow_batch,
                                                                num_parallel_calls=2)
        model = mlp(64, 128)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        fit_then_profile(model, ds, 30 if case == "cache_shuffle_fit" else 4, params["steps"])

    elif case == "python_tracer_loop":
        params = {"batch": 64, "steps": 16}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))
        warm_then_profile(lambda i: step(*next(it)), params["steps"])

    elif case == "fit_run_eagerly":
        params = {"batch": 32, "steps": 12}
        model = mlp(64, 128)
        model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
        fit_then_profile(model, random_batches(32 * 16, 64, 32), 3, params["steps"])

    elif case == "double_marked_loop":
        params = {"batch": 64, "steps": 16}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))

        def twice(first: int, n: int) -> None:
            for i in range(first, first + n):
                with tfobs.step(i), tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    step(*next(it))

        twice(0, 3)
        profile(lambda: twice(3, params["steps"]))

    elif case == "onedevice_loop":
        params = {"batch": 64, "steps": 16}
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            model = mlp(128, 256)
            opt = keras.optimizers.SGD(0.01)
        step = distributed_step(strategy, model, opt, mse)
        it = iter(strategy.experimental_distribute_dataset(random_batches(64 * 16, 128, 64)))
        warm_then_profile(lambda i: step(next(it)), params["steps"])

    elif case in ("predict_on_batch_loop", "eager_model_calls", "evaluate_spe4"):
        params = {"batch": 64, "calls": 30}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse",
                      steps_per_execution=4 if case == "evaluate_spe4" else 1)
        batches = [rng.random((64, 128), np.float32) for _ in range(4)]
        if case == "evaluate_spe4":
            ds = random_batches(64 * 32, 128, 64)
            model.evaluate(ds, steps=8, verbose=0)
            profile(lambda: model.evaluate(ds, steps=32, verbose=0))
        else:
            call = (model.predict_on_batch if case == "predict_on_batch_loop"
                    else lambda b: model(tf.constant(b), training=False))

            def requests(n: int) -> None:
                for i in range(n):
                    call(batches[i % 4])

            requests(3)
            profile(lambda: requests(params["calls"]))

    elif case == "epoch_and_batch_roots":
        params = {"batch": 64, "epochs": 2, "steps_per_epoch": 8}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))
        trace = tf.profiler.experimental.Trace

        def epochs(first: int, n: int) -> None:
            per = params["steps_per_epoch"]
            for e in range(first, first + n):
                with trace("epoch", step_num=e, _r=1):
                    for i in range(e * per, (e + 1) * per):
                        with trace("batch", step_num=i, _r=1):
                            step(*next(it))

        epochs(0, 1)
        profile(lambda: epochs(1, params["epochs"]))

    elif case == "markers_with_stats":
        params = {"batch": 64, "steps": 16, "map_sleep_s": 0.001}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        it = iter(py_sleep_map(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat(),
                               params["map_sleep_s"], (64, 128)))

        def with_stats(first: int, n: int) -> None:
            for i in range(first, first + n):
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1, batch_size=64,
                                                    lr=0.01, phase="warm"):
                    step(*next(it))

        with_stats(0, 3)
        profile(lambda: with_stats(3, params["steps"]))

    elif case == "strided_step_nums":
        params = {"batch": 64, "steps": 16, "stride": 10}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))

        def strided(first: int, n: int) -> None:
            for i in range(first, first + n):
                with tfobs.step(params["stride"] * i):
                    step(*next(it))

        strided(0, 3)
        profile(lambda: strided(3, params["steps"]))

    elif case == "predict_spe4":
        params = {"batch": 64, "steps": 32, "steps_per_execution": 4}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
        ds = random_batches(64 * 32, 128, 64)
        model.predict(ds, steps=8, verbose=0)
        profile(lambda: model.predict(ds, steps=params["steps"], verbose=0))

    elif case in ("session_run_loop", "session_run_marked"):
        params = {"batch": 64, "steps": 20, "width": 128}
        graph = tf.Graph()
        with graph.as_default():
            v1 = tf.compat.v1
            x = v1.placeholder(tf.float32, (None, 128))
            y = v1.placeholder(tf.float32, (None, 1))
            w1 = tf.Variable(tf.random.normal((128, 256), stddev=0.05))
            w2 = tf.Variable(tf.random.normal((256, 1), stddev=0.05))
            loss = tf.reduce_mean((tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y) ** 2)
            train_op = v1.train.GradientDescentOptimizer(0.01).minimize(loss)
            init = v1.global_variables_initializer()
        session = v1.Session(graph=graph)
        session.run(init)
        xs = rng.random((64, 128), np.float32)
        ys = rng.random((64, 1), np.float32)
        marked = case == "session_run_marked"

        def session_steps(first: int, n: int) -> None:
            for i in range(first, first + n):
                if marked:
                    with tfobs.step(i):
                        session.run(train_op, feed_dict={x: xs, y: ys})
                else:
                    session.run(train_op, feed_dict={x: xs, y: ys})

        session_steps(0, 3)
        profile(lambda: session_steps(3, params["steps"]))

    elif case == "data_service_fit":
        params = {"batch": 64, "steps": 16, "map_sleep_s": 0.001}
        service = tf.data.experimental.service
        dispatcher = service.DispatchServer()
        address = dispatcher.target.split("://")[1]
        worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=address))

        x = rng.random((64 * 16, 64), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        ds = (py_sleep_map(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64),
                           params["map_sleep_s"], (64, 64))
              .apply(service.distribute(processing_mode="parallel_epochs",
                                        service=dispatcher.target))
              .prefetch(2))
        model = mlp(64, 128)
        model.compile(optimizer="sgd", loss="mse")
        fit_then_profile(model, ds, 3, params["steps"])
        del worker

    elif case == "cache_file_fit":
        params = {"batch": 32, "steps": 16, "elements": 32 * 16}
        x = rng.random((params["elements"], 64), np.float32)
        y = rng.random((params["elements"], 1), np.float32)
        cache = os.path.join(logdir, "..", f"cache-{os.getpid()}")
        ds = (tf.data.Dataset.from_tensor_slices((x, y))
              .map(lambda a, b: (tf.math.tanh(a) * 2.0, b))
              .cache(cache).batch(32).prefetch(2))
        model = mlp(64, 128)
        model.compile(optimizer="sgd", loss="mse")
        model.fit(ds, epochs=1, verbose=0)  # fills the cache file
        fit_then_profile(model, ds.repeat(), 3, params["steps"])

    elif case == "text_files_loop":
        params = {"batch": 32, "steps": 16, "files": 4}
        folder = tempfile.mkdtemp(prefix="tfobs-text-")
        for k in range(params["files"]):
            with open(os.path.join(folder, f"part-{k}.csv"), "w") as fh:
                for _ in range(400):
                    fh.write(",".join(f"{v:.4f}" for v in rng.random(9)) + "\n")
        files = tf.data.Dataset.list_files(os.path.join(folder, "*.csv"), shuffle=False)
        ds = (files.interleave(tf.data.TextLineDataset, cycle_length=2)
              .map(lambda line: tf.io.decode_csv(line, [[0.0]] * 9))
              .map(lambda *cols: (tf.stack(cols[:8]), tf.stack(cols[8:])))
              .batch(32).repeat())
        model = mlp(8, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"])

    elif case == "interleave_file_maps":
        params = {"batch": 32, "steps": 12, "files": 4, "lines": 1500, "features": 32}
        folder = tempfile.mkdtemp(prefix="tfobs-lines-")
        paths = []
        for k in range(params["files"]):
            paths.append(os.path.join(folder, f"part-{k}.csv"))
            with open(paths[-1], "w") as fh:
                for _ in range(params["lines"]):
                    fh.write(",".join(f"{v:.3f}" for v in rng.random(32)) + "\n")

        def parse(line: Any) -> Any:
            v = tf.strings.to_number(tf.strings.split(line, ","), tf.float32)
            square = tf.matmul(tf.tile(v[None, :], [64, 2]), tf.tile(v[:, None], [2, 64]))
            return v + 0.0 * tf.reduce_sum(square), v[:1]

        ds = (tf.data.Dataset.from_tensor_slices(paths)
              .interleave(lambda f: tf.data.TextLineDataset(f).map(parse),
                          cycle_length=params["files"], num_parallel_calls=tf.data.AUTOTUNE)
              .batch(params["batch"]).repeat().prefetch(1))
        sgd_loop(ds, params["features"], params["steps"])

    elif case == "shuffle_fill_in_window":
        params = {"batch": 64, "steps": 15, "features": 32, "rows": 20000}
        x = rng.random((params["rows"], params["features"]), np.float32)
        y = rng.random((params["rows"], 1), np.float32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(params["rows"])
              .batch(params["batch"]))
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        step(x[:64], y[:64])  # traced before the window

        def fresh_iterator_steps() -> None:
            it = iter(ds)  # its first next() fills the shuffle buffer
            for i in range(params["steps"]):
                with train_root(i):
                    step(*next(it))

        profile(fresh_iterator_steps)

    elif case == "eager_eval_after_steps":
        params = {"batch": 64, "steps": 12, "features": 32, "eval_calls": 5}
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(4096, params["features"], params["batch"]))
        held_out = rng.random((512, params["features"]), np.float32)

        def evaluate() -> None:
            for _ in range(params["eval_calls"]):  # eager: no tf.function around it
                model(held_out, training=False)
                time.sleep(0.03)

        warm_then_profile(lambda i: step(*next(it)), params["steps"], marker=train_root,
                          after=evaluate)

    elif case == "summary_every_step_loop":
        params = {"batch": 64, "steps": 14, "features": 32}
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        model = mlp(params["features"], 64)
        opt = keras.optimizers.SGD(0.01)
        writer = tf.summary.create_file_writer(tempfile.mkdtemp(prefix="tfobs-summaries-"))
        it = iter(ds)

        @tf.function
        def logged_step(xb: Any, yb: Any, i: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            with writer.as_default(step=i):
                tf.summary.scalar("loss", loss)
                for w in model.trainable_variables:
                    tf.summary.histogram(w.path.replace("/", "_"), w)
            return loss

        warm_then_profile(lambda i: logged_step(*next(it), tf.constant(i, tf.int64)),
                          params["steps"], marker=train_root)

    elif case == "tfrecord_parse_parallel_map":
        params = {"files": 4, "records_per_file": 1024, "features": 96, "batch": 128,
                  "steps": 20}
        files, spec = example_records("part", params["files"], params["records_per_file"], 96)
        ds = (tf.data.TFRecordDataset(files).repeat().batch(params["batch"])
              .map(lambda r: (lambda d: (d["x"], d["y"]))(tf.io.parse_example(r, spec)),
                   num_parallel_calls=tf.data.AUTOTUNE)
              .prefetch(1))
        model = mlp(96, 32)
        opt = keras.optimizers.SGD(0.01)
        it = iter(ds)

        @tf.function
        def small_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        warm_then_profile(lambda i: small_step(*next(it)), params["steps"], marker=train_root)

    elif case == "one_thread_pool_loop":
        params = {"num_parallel_calls": 4, "private_threadpool_size": 1, "batch": 16,
                  "sines": 16384, "steps": 14}
        grid = tf.linspace(0.0, 1.0, 16384)
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        ds = (tf.data.Dataset.range(10**9)
              .map(lambda i: tf.reduce_mean(tf.reshape(
                  tf.sin(tf.cast(i, tf.float32) * grid), (64, 256)), 1), num_parallel_calls=4)
              .map(lambda row: (row, row[:1]))
              .batch(16).prefetch(2).with_options(options))
        step = build_train_step(tf, mlp(64, 32), mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"], warm=4)
    elif case in ("padded_batch_gru_loop", "bucketed_gru_loop"):
        params = {"sequences": 2048, "features": 16, "lengths": [4, 64], "batch": 32,
                  "steps": 10}
        lengths = rng.integers(4, 65, size=2048)
        sequences = [rng.normal(size=(int(n), 16)).astype("float32") for n in lengths]
        labels = np.array([[float(q[:, 0].mean())] for q in sequences], "float32")
        params["mean_length"] = float(lengths.mean())

        def pairs() -> Any:
            yield from zip(sequences, labels, strict=True)

        source = tf.data.Dataset.from_generator(pairs, output_signature=(
            tf.TensorSpec([None, 16], tf.float32), tf.TensorSpec([1], tf.float32))).cache()
        if case == "padded_batch_gru_loop":
            batched = source.repeat().padded_batch(32, padded_shapes=([None, 16], [1]))
        else:
            batched = source.repeat().bucket_by_sequence_length(
                lambda q, y: tf.shape(q)[0], list(range(12, 65, 8)), [32] * 8)
        it = iter(batched.prefetch(2))
        for _ in range(70):  # the cache filled (64 batches an epoch) before the window
            next(it)
        model = keras.Sequential([keras.Input((None, 16)), keras.layers.GRU(32),
                                  keras.layers.Dense(1)])
        opt = keras.optimizers.Adam(1e-3)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 16]),
                                      tf.TensorSpec([None, 1])])
        def rnn_step(xb: Any, yb: Any) -> Any:  # one trace for every padded length
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        padded: list[int] = []

        def one(i: int) -> None:
            xb, yb = next(it)
            padded.append(int(xb.shape[1]))
            rnn_step(xb, yb)

        warm_then_profile(one, params["steps"])
        params["padded_lengths"] = padded[-params["steps"]:]
    elif case == "snapshot_read_loop":
        params = {"rows": 4096, "features": 256, "rounds": 20, "batch": 64, "steps": 16}
        snap = tempfile.mkdtemp(prefix="tfobs-snapshot-")
        x = rng.normal(size=(4096, 256)).astype("float32")

        def heavy(row: Any, label: Any) -> Any:  # work the snapshot saves on read
            for _ in range(20):
                row = tf.sin(row) + tf.cos(row) * 0.5
            return row, label

        written = (tf.data.Dataset.from_tensor_slices((x, x[:, :1]))
                   .map(heavy, num_parallel_calls=tf.data.AUTOTUNE).snapshot(snap))
        for _ in written:  # the first full pass writes the snapshot, before the window
            pass
        params["snapshot_bytes"] = sum(p.stat().st_size for p in pathlib.Path(snap).rglob("*")
                                       if p.is_file())
        it = iter(written.repeat().batch(64).prefetch(2))
        step = build_train_step(tf, mlp(256, 256), mse, keras.optimizers.SGD(0.01))
        warm_then_profile(lambda i: step(*next(it)), params["steps"], warm=4)
        shutil.rmtree(snap, ignore_errors=True)
    elif case == "filter_after_map_loop":
        params = {"keep_one_in": 8, "batch": 16, "sines": 4096, "steps": 14}
        grid = tf.linspace(0.0, 1.0, 4096)

        def make_row(i: Any) -> Any:  # heavy per-element work the filter mostly drops
            wave = tf.sin(tf.cast(i, tf.float32) * grid)
            return i, tf.reduce_mean(tf.reshape(wave, (64, 64)), 1)

        ds = (tf.data.Dataset.range(10**9)
              .map(make_row, num_parallel_calls=tf.data.AUTOTUNE)
              .filter(lambda i, row: tf.equal(i % 8, 0))
              .map(lambda i, row: (row, row[:1]))
              .batch(16).prefetch(2))
        step = build_train_step(tf, mlp(64, 32), mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"], warm=4)
    elif case == "micro_batches_in_function":
        params = {"micro_batches": 3, "micro_batch": 32, "features": 16, "steps": 16}
        x = rng.random((4096, 16)).astype("float32")
        it = iter(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(32)
                  .prefetch(8))
        model = mlp(16, 128)
        opt = keras.optimizers.SGD(0.01)
        model.build((None, 16))

        @tf.function
        def accumulate(iterator: Any) -> Any:
            sums = [tf.zeros_like(v) for v in model.trainable_variables]
            for _ in range(3):  # unrolled: three fetches of the iterator per step
                xb, yb = next(iterator)
                with tf.GradientTape() as tape:
                    loss = mse(yb, model(xb, training=True)) / 3.0
                grads = tape.gradient(loss, model.trainable_variables)
                sums = [a + g for a, g in zip(sums, grads, strict=True)]
            opt.apply_gradients(zip(sums, model.trainable_variables, strict=True))
            return loss

        warm_then_profile(lambda i: accumulate(it), params["steps"])
    elif case == "interleave_records_loop":
        params = {"files": 3, "records_per_file": 1500, "features": 48, "batch": 32,
                  "steps": 16}
        files, spec = example_records("shard", params["files"], params["records_per_file"], 48)
        waves = tf.linspace(0.0, 1.0, 64)[None, :]

        def smooth(row: Any) -> Any:  # per-record feature work on tf.data's threads
            return tf.reduce_mean(tf.sin(row[:, None] * waves), 1)

        ds = (tf.data.Dataset.from_tensor_slices(files).repeat()
              .interleave(tf.data.TFRecordDataset, cycle_length=3,
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
              .map(lambda r: (lambda d: (smooth(d["x"]), d["y"]))(
                  tf.io.parse_single_example(r, spec)), num_parallel_calls=tf.data.AUTOTUNE)
              .batch(params["batch"]).prefetch(8))
        model = mlp(48, 1024)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"], warm=8)
    elif case == "tfkeras_embedding_adam_loop":
        import tf_keras

        params = {"vocab": 40000, "dim": 32, "length": 6, "batch": 16, "steps": 14}
        model = tf_keras.Sequential([
            tf_keras.layers.Embedding(40000, 32, input_length=6),
            tf_keras.layers.GlobalAveragePooling1D(), tf_keras.layers.Dense(1)])
        model.build((None, 6))
        opt = tf_keras.optimizers.Adam(1e-3)
        ids = rng.integers(0, 40000, size=(16 * 64, 6)).astype("int32")
        target = rng.normal(size=(16 * 64, 1)).astype("float32")
        it = iter(tf.data.Dataset.from_tensor_slices((ids, target)).batch(16).repeat()
                  .prefetch(2))

        step = build_train_step(tf, model, mse, opt)
        warm_then_profile(lambda i: step(*next(it)), params["steps"], marker=train_root)

    elif case == "two_pipelines_one_unprefetched":
        params = {"batch": 64, "steps": 14, "features": 32}
        x, y = regression_data()
        cheap = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2))

        def heavy(v: Any) -> Any:  # a few small matmuls per element
            m = tf.tile(v[None, :], [32, 1])
            return v + 1e-6 * tf.reduce_sum(tf.matmul(m, m, transpose_b=True))

        side = iter(tf.data.Dataset.from_tensor_slices(x).repeat()
                    .map(heavy, num_parallel_calls=tf.data.AUTOTUNE).batch(64))
        model = mlp(32, 64)
        opt = keras.optimizers.SGD(0.01)

        @tf.function
        def two_input_step(xb: Any, yb: Any, extra: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb + 0.0 * extra, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        warm_then_profile(lambda i: two_input_step(*next(cheap), next(side)), params["steps"],
                          marker=train_root)

    elif case == "tf_print_every_step":
        params = {"batch": 64, "steps": 16, "features": 32}
        x, y = regression_data()
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2))
        model = mlp(32, 64)
        opt = keras.optimizers.SGD(0.01)
        out_file = pathlib.Path(logdir) / "printed.txt"  # removed with the log folder
        sink = f"file://{out_file}"

        @tf.function
        def printing_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            tf.print("loss", loss, "norm", tf.linalg.global_norm(model.trainable_variables),
                     output_stream=sink)
            tf.print(model.trainable_variables[0][:4], summarize=-1, output_stream=sink)
            return loss

        warm_then_profile(lambda i: printing_step(*next(it)), params["steps"],
                          marker=train_root)

    elif case in ("scan_running_mean_loop", "window_flat_map_series_loop",
                  "sample_from_datasets_loop"):
        params = {"batch": 64, "steps": 16}
        if case == "scan_running_mean_loop":
            x, y = regression_data()

            def running(state: Any, e: Any) -> Any:
                n, mean = state
                xb, yb = e
                mean = mean + (xb - mean) / tf.cast(n + 1, tf.float32)
                return (n + 1, mean), (xb - mean, yb)

            ds = (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
                  .scan((tf.constant(0, tf.int64), tf.zeros([32])), running)
                  .batch(64).prefetch(2))
            features = 32
        elif case == "window_flat_map_series_loop":
            series = (np.sin(np.arange(100_000) * 0.01)
                      + 0.1 * rng.normal(size=100_000)).astype("float32")
            ds = (tf.data.Dataset.from_tensor_slices(series).window(33, shift=1,
                                                                    drop_remainder=True)
                  .flat_map(lambda w: w.batch(33)).map(lambda w: (w[:-1], w[-1:]))
                  .batch(64).prefetch(2))
            features = 32
        else:
            x, y = regression_data()

            def heavy(xb: Any, yb: Any) -> Any:
                m = tf.tile(xb[None, :], [48, 1])
                return xb + 1e-6 * tf.reduce_sum(tf.matmul(m, m, transpose_b=True)), yb

            slow = tf.data.Dataset.from_tensor_slices((x, y)).repeat().map(
                heavy, num_parallel_calls=tf.data.AUTOTUNE)
            plain = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
            ds = (tf.data.Dataset.sample_from_datasets([slow, plain], weights=[0.8, 0.2],
                                                       seed=1)
                  .batch(64).prefetch(2))
            features = 32
        sgd_loop(ds, features, params["steps"])

    elif case == "epoch_loop_in_function":
        params = {"rows": 768, "batch": 64, "epochs": 6}
        x, y = regression_data(768)

        def heavy(xb: Any, yb: Any) -> Any:
            m = tf.tile(xb[None, :], [48, 1])
            return xb + 1e-6 * tf.reduce_sum(tf.matmul(m, m, transpose_b=True)), yb

        ds = (tf.data.Dataset.from_tensor_slices((x, y))
              .map(heavy, num_parallel_calls=2).batch(64).prefetch(2))
        model = mlp(32, 64)
        opt = keras.optimizers.SGD(0.01)

        @tf.function
        def epoch(dataset: Any) -> Any:
            total = tf.constant(0.0)
            for xb, yb in dataset:
                with tf.GradientTape() as tape:
                    loss = mse(yb, model(xb, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
                total += loss
            return total

        warm_then_profile(lambda i: epoch(ds), params["epochs"], warm=2, marker=train_root)

    elif case == "evaluate_inside_steps":
        params = {"batch": 64, "steps": 18, "features": 32, "every": 5, "val_batches": 8}
        x, y = regression_data()
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2))
        val = tf.data.Dataset.from_tensor_slices((x[:512], y[:512])).batch(64)
        model = mlp(32, 64)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        model.evaluate(val, verbose=0)  # its function traced before the window

        def train_and_check(i: int) -> None:
            model.train_on_batch(*next(it))
            if i % params["every"] == params["every"] - 1:
                model.evaluate(val, verbose=0)

        warm_then_profile(train_and_check, params["steps"], marker=train_root)

    elif case == "checkpoint_manager_steps":
        params = {"batch": 64, "steps": 18, "features": 32, "width": 256, "save_every": 4}
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        model = mlp(params["features"], params["width"])
        opt = keras.optimizers.Adam(1e-3)
        it = iter(ds)
        step = build_train_step(tf, model, mse, opt)

        folder = tempfile.mkdtemp(prefix="tfobs-ckpt-")
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, opt=opt),
                                             folder, max_to_keep=2)

        def train_and_save(i: int) -> None:
            step(*next(it))
            if i % params["save_every"] == params["save_every"] - 1:
                manager.save(checkpoint_number=i)

        warm_then_profile(train_and_save, params["steps"], marker=train_root)
        shutil.rmtree(folder, ignore_errors=True)

    elif case == "two_output_tensorboard_fit":
        params = {"batch": 64, "profile_batch": [4, 20], "features": 32}
        inputs = keras.Input((32,))
        hidden = keras.layers.Dense(128, activation="relu")(inputs)
        model = keras.Model(inputs, {"cls": keras.layers.Dense(4, name="cls")(hidden),
                                     "reg": keras.layers.Dense(1, name="reg")(hidden)})
        model.compile("adam", loss={"cls": keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), "reg": "mse"}, loss_weights={"cls": 1.0, "reg": 0.3},
            metrics={"cls": ["accuracy"], "reg": ["mae"]})
        x = rng.normal(size=(64 * 30, 32)).astype("float32")
        labels = rng.integers(0, 4, size=(64 * 30,)).astype("int32")
        ds = tf.data.Dataset.from_tensor_slices(
            (x, {"cls": labels, "reg": x[:, :1]})).batch(64).prefetch(2)
        board = keras.callbacks.TensorBoard(logdir, profile_batch=(4, 20))
        model.fit(ds, epochs=1, verbose=0, callbacks=[board])

    elif case == "cache_fill_loop":
        params = {"batch": 64, "steps": 16, "features": 64, "rows": 8192}
        x = rng.normal(size=(params["rows"], 64)).astype("float32")
        y = rng.normal(size=(params["rows"], 1)).astype("float32")
        mix = tf.constant(rng.normal(size=(64, 64)).astype("float32"))

        def heavy(a: Any, b: Any) -> Any:
            for _ in range(4):
                a = tf.tanh(tf.linalg.matvec(mix, a))
            return a, b

        ds = (tf.data.Dataset.from_tensor_slices((x, y)).map(heavy, num_parallel_calls=2)
              .cache().batch(64).repeat().prefetch(2))
        sgd_loop(ds, params["features"], params["steps"])

    elif case == "saved_model_export_loop":
        params = {"batch": 64, "steps": 14, "features": 32, "export_every": 6}
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        exports = tempfile.mkdtemp(prefix="tfobs-export-")

        def step_and_export(i: int) -> None:
            step(*next(it))
            if i % params["export_every"] == 4:
                tf.saved_model.save(model, os.path.join(exports, f"step{i}"))

        warm_then_profile(step_and_export, params["steps"], marker=train_root)

    elif case == "xla_shape_recompile_loop":
        params = {"steps": 12, "features": 32, "sizes": [32, 40, 48, 56]}
        x, y = regression_data()
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01), jit_compile=True,
                                reduce_retracing=True)

        def sized_step(i: int) -> None:  # warm-up steps at 32 rows, then a new size often
            rows = 32 if i < 3 else params["sizes"][(i // 2) % 4]
            step(tf.constant(x[:rows]), tf.constant(y[:rows]))

        warm_then_profile(sized_step, params["steps"], marker=train_root)

    elif case == "check_numerics_loop":
        params = {"batch": 64, "steps": 15, "features": 32}
        tf.debugging.enable_check_numerics()
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        sgd_loop(ds, params["features"], params["steps"])

    elif case == "eager_metric_beside_step":
        params = {"batch": 64, "steps": 20, "features": 32}
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().prefetch(2)
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)

        def step_and_check(i: int) -> None:
            xb, yb = next(it)
            step(xb, yb)
            tf.reduce_mean(tf.cast(model(xb) > 0.0, tf.float32)).numpy()  # eager

        warm_then_profile(step_and_check, params["steps"], marker=train_root)

    elif case == "adapt_then_fit":
        params = {"batch": 64, "steps": 20, "features": 32}
        x, y = regression_data()
        norm = keras.layers.Normalization()
        model = keras.Sequential([keras.Input((32,)), norm, keras.layers.Dense(64, "relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)
        norm.adapt(ds.take(4).map(lambda a, b: a))  # adapt and fit traced once, untraced
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()()]}
        model.fit(ds.take(4), epochs=1, **kw)

        def adapt_and_fit() -> None:
            norm.adapt(ds.map(lambda a, b: a))
            model.fit(ds.repeat(), epochs=1, steps_per_epoch=params["steps"], **kw)

        profile(adapt_and_fit)

    elif case == "rejection_resample_loop":
        params = {"batch": 16, "steps": 8, "features": 32}
        x = rng.normal(size=(20000, 32)).astype("float32")
        y = np.where(rng.random(20000) < 0.7, 0, rng.integers(1, 4, size=20000))
        ds = (tf.data.Dataset.from_tensor_slices((x, y.astype("int32"))).repeat()
              .rejection_resample(lambda a, b: b, target_dist=[0.25] * 4, seed=1)
              .map(lambda label, pair: (pair[0], tf.cast(pair[1], tf.float32)[..., None]))
              .batch(params["batch"]).prefetch(2))
        sgd_loop(ds, params["features"], params["steps"])

    elif case in ("copy_to_device_loop", "prefetch_to_device_loop"):
        params = {"batch": 64, "steps": 20, "features": 32}
        x, y = regression_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if case == "copy_to_device_loop":
            ds = (ds.shuffle(1024).batch(64).repeat()
                  .apply(tf.data.experimental.copy_to_device("/cpu:0")).prefetch(2))
        else:
            ds = (ds.map(lambda a, b: (tf.tanh(a), b), num_parallel_calls=2).batch(64)
                  .repeat().apply(tf.data.experimental.prefetch_to_device("/cpu:0", 2)))
        sgd_loop(ds, params["features"], params["steps"])

    elif case == "image_dir_fit":
        params = {"batch": 16, "steps": 12, "images": 96, "size": 48}
        folder = tempfile.mkdtemp(prefix="tfobs-images-")
        for k in range(params["images"]):
            cls = os.path.join(folder, f"class{k % 2}")
            os.makedirs(cls, exist_ok=True)
            pixels = tf.constant(rng.integers(0, 255, (48, 48, 3)), tf.uint8)
            tf.io.write_file(os.path.join(cls, f"img{k}.jpg"), tf.io.encode_jpeg(pixels))
        ds = keras.utils.image_dataset_from_directory(
            folder, image_size=(48, 48), batch_size=16, shuffle=False).repeat()
        model = keras.Sequential([keras.Input((48, 48, 3)), keras.layers.Rescaling(1 / 255),
                                  keras.layers.Conv2D(8, 3, activation="relu"),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        fit_then_profile(model, ds, 3, params["steps"])

    elif case == "mwms_worker":
        params = {"workers": 2, "batch": 32, "steps": MWMS_STEPS - 3, "width": 128}
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        step = _mwms_step(tf, strategy, params["width"])
        it = iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensors(tf.ones((params["width"],))).repeat().batch(32)))
        warm_then_profile(lambda i: step(next(it)), params["steps"])
        assert peer is not None
        peer.wait(timeout=120)

    elif case == "onednn_off_fit":
        params = {"batch": 32, "steps": 12, "size": 32}
        model = keras.Sequential([keras.Input((32, 32, 3)),
                                  keras.layers.Conv2D(16, 3, activation="relu"),
                                  keras.layers.MaxPooling2D(),
                                  keras.layers.Conv2D(32, 3, activation="relu"),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = rng.random((32 * 8, 32, 32, 3), np.float32)
        y = rng.random((32 * 8, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().prefetch(2)
        fit_then_profile(model, ds, 3, params["steps"])

    elif case == "saved_dataset_fit":
        params = {"batch": 32, "steps": 12, "elements": 32 * 24}
        x = rng.random((params["elements"], 64), np.float32)
        y = rng.random((params["elements"], 1), np.float32)
        folder = tempfile.mkdtemp(prefix="tfobs-saved-")
        tf.data.Dataset.from_tensor_slices((x, y)).save(folder)
        ds = tf.data.Dataset.load(folder).shuffle(128).batch(32).repeat()
        model = mlp(64, 128)
        model.compile(optimizer="sgd", loss="mse")
        fit_then_profile(model, ds, 3, params["steps"])

    elif case == "csv_dataset_loop":
        params = {"batch": 32, "steps": 14, "files": 2}
        folder = tempfile.mkdtemp(prefix="tfobs-csv-")
        names = [f"f{k}" for k in range(8)] + ["label"]
        for k in range(params["files"]):
            with open(os.path.join(folder, f"part-{k}.csv"), "w") as fh:
                fh.write(",".join(names) + "\n")
                for _ in range(500):
                    fh.write(",".join(f"{v:.4f}" for v in rng.random(9)) + "\n")
        ds = tf.data.experimental.make_csv_dataset(
            os.path.join(folder, "*.csv"), batch_size=32, label_name="label",
            num_epochs=None, shuffle=False)
        ds = ds.map(lambda feats, label: (tf.stack(list(feats.values()), axis=1),
                                          tf.reshape(label, (-1, 1))))
        model = mlp(8, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"])

    elif case == "tiny_steps_long":
        params = {"steps": 4000, "size": 16}
        w = tf.Variable(tf.random.normal((16, 16)))
        xs = tf.random.normal((16, 16))

        @tf.function
        def tiny(xb: Any) -> Any:
            w.assign_sub(0.001 * tf.matmul(xb, w))
            return w[0, 0]

        warm_then_profile(lambda i: tiny(xs), params["steps"], warm=20)
    elif case.startswith("ps_"):
        import socket

        params = {"workers": 2, "ps": 1, "steps": 60, "width": 256, "batch": 64}

        def port() -> int:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                return int(sock.getsockname()[1])

        partitioned = case == "ps_chief_partitioned"
        if partitioned:
            params["ps"] = 2
        cluster = {"worker": [f"127.0.0.1:{port()}" for _ in range(2)],
                   "ps": [f"127.0.0.1:{port()}" for _ in range(params["ps"])],
                   "chief": [f"127.0.0.1:{port()}"]}
        stop = os.path.join(logdir, "stop")
        serve = ("import os, sys, time, json, tensorflow as tf\n"
                 "c = json.loads(sys.argv[1])\n"
                 "s = tf.distribute.Server(tf.train.ClusterSpec(c), job_name=sys.argv[2], "
                 "task_index=int(sys.argv[3]), protocol='grpc', start=True)\n"
                 "t = time.monotonic()\n"
                 "while not os.path.exists(sys.argv[4]) and time.monotonic() - t < 300:\n"
                 "    time.sleep(0.1)\n"
                 "os._exit(0)\n")
        servers = [subprocess.Popen([sys.executable, "-c", serve, json.dumps(cluster), job,
                                     str(i), stop], env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
                   for job in ("worker", "ps") for i in range(len(cluster[job]))]
        try:
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
            strategy = tf.distribute.ParameterServerStrategy(
                resolver, variable_partitioner=tf.distribute.experimental.partitioners
                .FixedShardsPartitioner(2) if partitioned else None)
            if case.startswith("ps_tfkeras_fit"):
                params["steps"] = 40
                run_fit = _tf_keras_fit_under(strategy, params["width"])
                run_fit(4)
                if case == "ps_tfkeras_fit":
                    profile(lambda: run_fit(params["steps"]))
                else:
                    _trace_worker(tf, cluster, logdir, lambda: run_fit(params["steps"]))
                return params
            coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
            with strategy.scope():
                if partitioned:  # Keras 3 takes no ShardedVariable: tf_keras, as TF's guide
                    import tf_keras

                    model = tf_keras.Sequential([
                        tf_keras.layers.Dense(params["width"], activation="relu",
                                              input_shape=(params["width"],)),
                        tf_keras.layers.Dense(1)])
                    opt = tf_keras.optimizers.SGD(0.01)
                else:
                    model = mlp(params["width"], params["width"])
                    opt = keras.optimizers.SGD(0.01)
                model.build((None, params["width"]))

            def dataset_fn() -> Any:
                x = tf.random.uniform((64 * 8, params["width"]))
                return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)

            per_worker = coordinator.create_per_worker_dataset(dataset_fn)
            it = iter(per_worker)

            @tf.function
            def step_fn(iterator: Any) -> Any:
                def replica(xb: Any, yb: Any) -> Any:
                    with tf.GradientTape() as tape:
                        loss = mse(yb, model(xb, training=True))
                    g = tape.gradient(loss, model.trainable_variables)
                    opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
                    return loss
                return strategy.run(replica, args=next(iterator))

            def steps(first: int, n: int) -> None:
                if case.endswith("_async"):  # the usual idiom: schedule many, join once
                    for _ in range(n):
                        coordinator.schedule(step_fn, args=(it,))
                    coordinator.join()
                    return
                for i in range(first, first + n):
                    t = time.perf_counter()
                    with (tf.profiler.experimental.Trace("ps step", step_num=i, _r=1)
                          if partitioned else tfobs.step(i)):
                        coordinator.schedule(step_fn, args=(it,))
                        coordinator.join()
                    ps_times.append(time.perf_counter() - t)

            ps_times: list[float] = []

            steps(0, 4)
            if case.startswith("ps_chief"):
                ps_times.clear()
                profile(lambda: steps(4, params["steps"]))
                if partitioned:
                    params["measured_step_ms"] = [round(t * 1e3, 3) for t in ps_times]
                    shards = getattr(model.layers[0].kernel, "variables", None)
                    params["kernel_shards"] = len(shards) if shards is not None else 1
            else:
                _trace_worker(tf, cluster, logdir, lambda: steps(4, params["steps"]))
        finally:
            open(stop, "w").close()
            for proc in servers:
                proc.wait(timeout=30)
            os.remove(stop)

    elif case in ("unicode_marker_numpy_nums", "string_step_nums", "two_nested_roots",
                  "logging_in_step"):
        import logging

        params = {"batch": 64, "steps": 14}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))
        trace = tf.profiler.experimental.Trace
        log = logging.getLogger("tfobs.recorder.job")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(logging.FileHandler(os.path.join(logdir, "job.log")))
        history: list[float] = []
        times: list[float] = []

        def one(i: int) -> None:
            t = time.perf_counter()
            if case == "unicode_marker_numpy_nums":
                with trace("train step ✓ 训练", step_num=np.int64(i), _r=1):
                    with trace("数据 load"):
                        xb, yb = next(it)
                    with trace("fwd bwd"):
                        step(xb, yb)
            elif case == "string_step_nums":
                with trace("train", step_num=str(i), _r=1):
                    step(*next(it))
            elif case == "two_nested_roots":
                with trace("step", step_num=i, _r=1):
                    xb, yb = next(it)
                    with trace("train", step_num=i, _r=1):
                        step(xb, yb)
            else:
                with trace("train", step_num=i, _r=1):
                    loss = float(step(*next(it)).numpy())
                    history.append(loss)
                    window = np.asarray(history[-50:], np.float64)
                    for k in range(40):  # host Python inside the marked step
                        avg = float(np.convolve(window, np.ones(5) / 5, "same").mean())
                        log.info("step %d part %d loss %.6f avg %.6f %s", i, k, loss, avg,
                                 json.dumps({"step": i, "loss": loss, "avg": avg,
                                             "hist": [round(v, 4) for v in history[-20:]]}))
            times.append(time.perf_counter() - t)

        for i in range(3):
            one(i)
        times.clear()
        profile(lambda: [one(i) for i in range(3, 3 + params["steps"])])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]

    elif case == "train_on_batch_generator":
        params = {"batch": 64, "steps": 14}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)

        def batches() -> Any:
            k = 0
            while True:
                j = (k % 16) * 64
                yield x[j:j + 64] * 2.0 - 1.0, y[j:j + 64]
                k += 1

        gen = batches()
        times = []

        def tob_steps(first: int, n: int) -> None:
            for i in range(first, first + n):
                t = time.perf_counter()
                with tf.profiler.experimental.Trace("tob", step_num=i, _r=1):
                    with tf.profiler.experimental.Trace("next batch"):
                        xb, yb = next(gen)
                    model.train_on_batch(xb, yb)
                times.append(time.perf_counter() - t)

        tob_steps(0, 3)
        times.clear()
        profile(lambda: tob_steps(3, params["steps"]))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]

    elif case == "callback_markers_without_root":
        params = {"batch": 64, "steps": 14}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")

        class BatchMarker(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: Any, logs: Any = None) -> None:
                self.marker = tf.profiler.experimental.Trace("keras_batch", step_num=batch)
                self.marker.__enter__()

            def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
                self.marker.__exit__(None, None, None)

        times = []
        kw = {"verbose": 0, "callbacks": [batch_timer(times), BatchMarker()]}
        ds = random_batches(64 * 16, 128, 64)
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]

    elif case == "function_inference_loop":
        params = {"batch": 64, "calls": 40}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(256, "relu"), keras.layers.Dense(10)])
        ds = tf.data.Dataset.from_tensor_slices(
            rng.random((64 * 16, 128), np.float32)).batch(64).repeat().prefetch(2)

        @tf.function
        def infer(xb: Any) -> Any:
            return tf.argmax(model(xb, training=False), axis=-1)

        times = []

        def serve(n: int) -> None:
            for xb in ds.take(n):
                t = time.perf_counter()
                infer(xb)
                times.append(time.perf_counter() - t)

        serve(3)
        times.clear()
        profile(lambda: serve(params["calls"]))
        params["measured_call_ms"] = [round(t * 1e3, 3) for t in times]

    elif case == "train_and_test_markers":
        params = {"batch": 64, "steps": 30, "test_every": 5}
        model = mlp(16, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        xb = tf.random.normal((params["batch"], 16))
        yb = tf.random.normal((params["batch"], 1))

        @tf.function
        def evaluate(xb: Any, yb: Any) -> Any:
            return mse(yb, model(xb, training=False))

        trace = tf.profiler.experimental.Trace

        def train_and_test(first: int, n: int) -> None:
            for i in range(first, first + n):
                with trace("train", step_num=i, _r=1):
                    step(xb, yb)
                if i % params["test_every"] == params["test_every"] - 1:
                    with trace("test", step_num=i, _r=1):
                        evaluate(xb, yb)

        train_and_test(0, 5)
        profile(lambda: train_and_test(5, params["steps"]))
    elif case in ("checkpoint_in_steps", "checkpoint_async"):
        # A tf.Module of plain tf.Variables: async checkpointing copies them in a
        # tf.function of its own, which Keras 3's variables do not allow.
        params = {"batch": 64, "features": 128, "width": 512, "steps": 12, "write_every": 2,
                  "async": case == "checkpoint_async"}
        net = tf.Module()
        net.w1 = tf.Variable(tf.random.normal((128, 512), stddev=0.05))
        net.w2 = tf.Variable(tf.random.normal((512, 1), stddev=0.05))
        it = iter(random_batches(64 * 8, 128, 64))

        @tf.function
        def sgd_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = mse(yb, tf.nn.relu(xb @ net.w1) @ net.w2)
            for v, g in zip((net.w1, net.w2), tape.gradient(loss, (net.w1, net.w2)),
                            strict=True):
                v.assign_sub(0.01 * g)
            return loss

        ckpt = tf.train.Checkpoint(net=net)
        folder = tempfile.mkdtemp(prefix="tfobs-ckpt-")
        options = (tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
                   if params["async"] else None)

        def train_and_save(i: int) -> None:
            sgd_step(*next(it))
            if i % params["write_every"] == 0:
                ckpt.write(f"{folder}/ckpt", options=options)

        warm_then_profile(train_and_save, params["steps"])
        if params["async"]:
            ckpt.sync()  # the last write ends before its folder goes
        shutil.rmtree(folder, ignore_errors=True)
    elif case == "tfdata_stage_kinds":
        params = {"steps": 12, "batch": 32, "features": 32, "threadpool": 2}
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        x = rng.random((8192, params["features"]), np.float32)
        y = rng.random((8192, 1), np.float32)

        def heavy(a: Any, b: Any) -> Any:
            square = tf.matmul(tf.tile(a[None, :], [64, 2]), tf.tile(a[:, None], [2, 64]))
            return a + 0.0 * tf.reduce_sum(square), b

        options = tf.data.Options()
        options.threading.private_threadpool_size = params["threadpool"]
        options.threading.max_intra_op_parallelism = 1
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).batch(16).unbatch()
              .scan(tf.constant(0, tf.int64), lambda n, e: (n + 1, (n, e)))
              .map(lambda n, e: heavy(*e))
              .filter(lambda a, b: a[0] > 0.5)
              .batch(params["batch"], num_parallel_calls=tf.data.AUTOTUNE)
              .take_while(lambda a, b: tf.shape(a)[0] > 0)
              .prefetch(1).repeat().with_options(options))
        it = iter(ds)
        warm_then_profile(lambda i: step(*next(it)), params["steps"], marker=train_root)

    elif case == "sampled_grouped_input":
        params = {"steps": 20, "window": 32, "features": 16}
        model = mlp(params["features"], 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        x = rng.random((4096, params["features"]), np.float32)
        y = rng.random((4096, 1), np.float32)

        def doubled(a: Any, b: Any) -> Any:
            a = tf.numpy_function(lambda v: (v * 2).astype(np.float32), [a], tf.float32)
            return tf.ensure_shape(a, (params["features"],)), b

        plain = tf.data.Dataset.from_tensor_slices((x, y))
        ds = tf.data.Dataset.sample_from_datasets(
            [plain.map(doubled).repeat(), plain.repeat()], seed=1)
        ds = ds.group_by_window(lambda a, b: tf.cast(a[0] > 0.5, tf.int64),
                                lambda _, w: w.batch(params["window"]),
                                window_size=params["window"])
        it = iter(ds)
        trace = tf.profiler.experimental.Trace

        def numpy_numbered(first: int, n: int) -> None:
            for i in np.arange(first, first + n, dtype=np.int64):
                with trace("step", step_num=i, _r=1):
                    with trace("forward_backward"):
                        step(*next(it))

        numpy_numbered(0, 3)
        profile(lambda: numpy_numbered(3, params["steps"]))
    elif case == "grad_accum_python_loop":
        params = {"micro": 4, "micro_batch": 32, "steps": 12}
        model = mlp(128, 256)
        opt = keras.optimizers.SGD(0.01)
        accum = [tf.Variable(tf.zeros_like(v), trainable=False)
                 for v in model.trainable_variables]
        x = rng.random((32 * 64, 128), np.float32)
        y = rng.random((32 * 64, 1), np.float32)
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(4))

        @tf.function
        def micro(xb, yb):
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            for a, g in zip(accum, grads, strict=True):
                a.assign_add(g)
            return loss

        @tf.function
        def apply():
            opt.apply_gradients([(a / 4.0, v) for a, v in
                                 zip(accum, model.trainable_variables, strict=True)])
            for a in accum:
                a.assign(tf.zeros_like(a))

        def one(i):
            for _ in range(4):
                micro(*next(it))
            apply()

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "central_storage_loop":
        params = {"devices": ["/cpu:0", "/cpu:1"], "global_batch": 64, "steps": 12}
        strategy = tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=params["devices"], parameter_device="/cpu:0")
        with strategy.scope():
            model = mlp(128, 256)
            opt = keras.optimizers.SGD(0.01)
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
        it = iter(strategy.experimental_distribute_dataset(ds))
        train_step = distributed_step(
            strategy, model, opt, lambda yb, pred: tf.reduce_sum(tf.square(pred - yb)) / 64.0)

        def one(i):
            train_step(next(it))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "class_weight_fit":
        params = {"batch": 64, "classes": 10, "steps": 12}
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, "relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.random((64 * 64, 64), np.float32)
        y = rng.integers(0, 10, (64 * 64,))
        cw = {k: 1.0 + k / 10 for k in range(10)}
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)],
              "batch_size": 64, "class_weight": cw}
        model.fit(x, y, epochs=1, steps_per_epoch=4, **kw)
        times.clear()
        profile(lambda: model.fit(x, y, epochs=1, steps_per_epoch=params["steps"], **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "rebatch_slow_input_loop":
        params = {"batch": 32, "steps": 12, "rounds": 64}
        model = mlp(256, 16)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))

        def heavy(i):
            v = tf.reshape(tf.cast(tf.range(64 * 256, dtype=tf.int64) + i, tf.float32) * 1e-4,
                           (64, 256))
            for _ in range(64):
                v = tf.sin(v) + tf.cos(v) * 0.5
            return v, v[:, :1]

        ds = tf.data.Dataset.range(10_000).map(heavy)
        ds = ds.unbatch().batch(64).rebatch(32)
        opts = tf.data.Options()
        opts.autotune.enabled = False
        opts.experimental_optimization.map_parallelization = False
        ds = ds.with_options(opts)
        it = iter(ds)
        times = []
        waits = []

        def one(i):
            t = time.perf_counter()
            xb, yb = next(it)
            waits.append(time.perf_counter() - t)
            step(xb, yb)
            times.append(time.perf_counter() - t)

        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["measured_next_ms"] = [round(t * 1e3, 3) for t in waits[3:]]
    elif case == "dynamic_while_step":
        params = {"batch": 64, "steps": 12}
        w = tf.Variable(tf.random.normal((128, 1)) * 0.01)
        xs = rng.random((16, 64, 128), np.float32)
        ys = rng.random((16, 64, 1), np.float32)

        @tf.function
        def step(xb, yb):
            n = tf.cast(tf.reduce_sum(xb[:, 0]) * 1000, tf.int32) % 8 + 1

            def body(k, w_):
                with tf.GradientTape() as tape:
                    tape.watch(w_)
                    loss = tf.reduce_mean(tf.square(xb @ w_ - yb))
                return k + 1, w_ - 0.01 * tape.gradient(loss, w_)

            k, new = tf.while_loop(lambda k, _: k < n, body, (0, w.read_value()))
            w.assign(new)
            return k

        trips = []

        def one(i):
            trips.append(int(step(tf.constant(xs[i % 16]), tf.constant(ys[i % 16]))))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
        params["trip_counts"] = trips[3:]
    elif case == "summary_image_loop":
        params = {"batch": 64, "steps": 12}
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3),
                                  keras.layers.Flatten(), keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.01)
        writer = tf.summary.create_file_writer(os.path.join(logdir, "summ"))
        x = rng.random((64 * 8, 8, 8, 3), np.float32)
        y = rng.integers(0, 10, (64 * 8,))
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).prefetch(2))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(xb, yb, i):
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = loss_fn(yb, logits)
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            with writer.as_default(step=i):
                tf.summary.image("inputs", xb[:4], max_outputs=4)
                tf.summary.histogram("logits", logits)
                tf.summary.scalar("loss", loss)
            return loss

        def one(i):
            xb, yb = next(it)
            step(xb, yb, tf.constant(i, tf.int64))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
        writer.flush()
    elif case == "pydataset_slow_fit":
        params = {"batch": 64, "features": 128, "workers": 2, "sleep_ms": 8, "steps": 12}
        gets = []

        class Slow(keras.utils.PyDataset):
            def __init__(self):
                super().__init__(workers=2, use_multiprocessing=False, max_queue_size=4)

            def __len__(self):
                return 1000

            def __getitem__(self, idx):
                t = time.perf_counter()
                time.sleep(0.008)
                r = np.random.default_rng(idx)
                out = r.random((64, 128), np.float32), r.random((64, 1), np.float32)
                gets.append(time.perf_counter() - t)
                return out

        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        data = Slow()
        model.fit(data, epochs=1, steps_per_epoch=4, **kw)
        times.clear()
        t0 = time.perf_counter()
        profile(lambda: model.fit(data, epochs=1, steps_per_epoch=params["steps"], **kw))
        params["fit_wall_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "validation_freq_fit":
        params = {"batch": 64, "steps": 8, "validation_steps": 4, "epochs": 2,
                  "validation_freq": 2}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        times, vtimes = [], []

        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                self.t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                times.append(time.perf_counter() - self.t)

            def on_test_begin(self, logs=None):
                self.v = time.perf_counter()

            def on_test_end(self, logs=None):
                vtimes.append(time.perf_counter() - self.v)

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), Timer()]}
        val = random_batches(64 * 4, 128, 64)
        model.fit(random_batches(64 * 8, 128, 64), steps_per_epoch=4, epochs=1,
                  validation_data=val, validation_steps=4, **kw)
        times.clear()
        vtimes.clear()
        profile(lambda: model.fit(random_batches(64 * 8, 128, 64), steps_per_epoch=8,
                                  epochs=2, validation_data=val, validation_steps=4,
                                  validation_freq=2, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_validation_ms"] = [round(t * 1e3, 3) for t in vtimes]
    elif case == "custom_train_step_pyfunc_fit":
        params = {"batch": 64, "steps": 12, "callback_sleep_ms": 1}
        py_ms = []

        def np_metric(err):
            t = time.perf_counter()
            time.sleep(0.001)
            e = np.abs(err.numpy()).ravel()
            out = np.float32(np.median(np.sort(e)))
            py_ms.append(time.perf_counter() - t)
            return out

        class Custom(keras.Model):
            def __init__(self):
                super().__init__()
                self.d1 = keras.layers.Dense(256, "relu")
                self.d2 = keras.layers.Dense(1)
                self.med = keras.metrics.Mean("median_abs_err")

            def call(self, x):
                return self.d2(self.d1(x))

            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    pred = self(x, training=True)
                    loss = tf.reduce_mean(tf.square(pred - y))
                g = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(g, self.trainable_variables, strict=True))
                m = tf.py_function(np_metric, [pred - y], tf.float32)
                m.set_shape(())
                self.med.update_state(m)
                return {"loss": loss, "median_abs_err": self.med.result()}

        model = Custom()
        model.compile(optimizer=keras.optimizers.SGD(0.01))
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        ds = random_batches(64 * 8, 128, 64)
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        py_ms.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_py_function_ms"] = [round(t * 1e3, 3) for t in py_ms]
    elif case == "interleave_generators_nondet_loop":
        params = {"batch": 64, "steps": 12, "generators": 2, "sleep_ms": 8}

        def gen(k):
            r = np.random.default_rng(int(k))
            while True:
                time.sleep(0.008)
                yield r.random((64, 128), np.float32), r.random((64, 1), np.float32)

        sig = (tf.TensorSpec((64, 128), tf.float32), tf.TensorSpec((64, 1), tf.float32))
        ds = tf.data.Dataset.range(2).interleave(
            lambda k: tf.data.Dataset.from_generator(gen, args=(k,), output_signature=sig),
            cycle_length=2, num_parallel_calls=2, deterministic=False)
        it = iter(ds)
        model = mlp(128, 256)
        opt = keras.optimizers.SGD(0.01)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        times, waits = [], []

        def one(i):
            t = time.perf_counter()
            xb, yb = next(it)
            waits.append(time.perf_counter() - t)
            step(xb, yb)
            times.append(time.perf_counter() - t)

        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["measured_next_ms"] = [round(t * 1e3, 3) for t in waits[3:]]
    elif case == "text_vectorization_in_model_fit":
        params = {"batch": 32, "steps": 12, "vocab": 500, "sequence": 24}
        words = [f"w{i}" for i in range(400)]
        texts = [" ".join(rng.choice(words, rng.integers(5, 30))) for _ in range(32 * 8)]
        labels = rng.integers(0, 2, (len(texts), 1)).astype(np.float32)
        vec = keras.layers.TextVectorization(500, output_sequence_length=24)
        vec.adapt(texts)
        inp = keras.Input((), dtype="string")
        h = keras.layers.Embedding(500, 32)(vec(inp))
        h = keras.layers.GlobalAveragePooling1D()(h)
        out = keras.layers.Dense(1, "sigmoid")(keras.layers.Dense(64, "relu")(h))
        model = keras.Model(inp, out)
        model.compile(optimizer="adam", loss="binary_crossentropy")
        ds = tf.data.Dataset.from_tensor_slices((texts, labels)).repeat().batch(32).prefetch(2)
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "callbacks_combo_fit":
        params = {"batch": 64, "steps": 6, "validation_steps": 3, "max_epochs": 6}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        ev: list[tuple[str, float]] = []

        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                ev.append(("b", time.perf_counter()))

            def on_train_batch_end(self, batch, logs=None):
                ev.append(("e", time.perf_counter()))

            def on_test_begin(self, logs=None):
                ev.append(("tb", time.perf_counter()))

            def on_test_end(self, logs=None):
                ev.append(("te", time.perf_counter()))

            def on_epoch_begin(self, epoch, logs=None):
                ev.append(("eb", time.perf_counter()))

            def on_epoch_end(self, epoch, logs=None):
                ev.append(("ee", time.perf_counter()))

        ckdir = tempfile.mkdtemp(prefix="tfobs-ckpt-")
        val = random_batches(64 * 3, 128, 64)
        train = random_batches(64 * 8, 128, 64)
        model.fit(train, steps_per_epoch=4, epochs=1, validation_data=val,
                  validation_steps=3, verbose=0, callbacks=[keras3_callback_class()()])
        lrs: list[float] = []

        class LR(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

        cbs = [keras3_callback_class()(), Timer(), LR(),
               keras.callbacks.EarlyStopping("val_loss", patience=2, min_delta=10.0),
               keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.5, patience=0,
                                                 min_delta=10.0),
               keras.callbacks.ModelCheckpoint(os.path.join(ckdir, "best.keras"),
                                               monitor="val_loss", save_best_only=True)]
        hist: list[Any] = []
        profile(lambda: hist.append(model.fit(
            train, steps_per_epoch=6, epochs=6, validation_data=val, validation_steps=3,
            verbose=0, callbacks=cbs)))
        times = [e[1] - b[1] for b, e in zip([x for x in ev if x[0] == "b"],
                                              [x for x in ev if x[0] == "e"], strict=False)]
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_validation_ms"] = [
            round((e[1] - b[1]) * 1e3, 3)
            for b, e in zip([x for x in ev if x[0] == "tb"], [x for x in ev if x[0] == "te"],
                            strict=False)]
        # from the last train batch's end to the next epoch's first batch
        gaps, last = [], None
        for k, t in ev:
            if k == "e":
                last = t
            if k == "b" and last is not None and gaps is not None:
                if t - last > 0.005:
                    gaps.append(round((t - last) * 1e3, 3))
                last = None
        params["measured_between_epoch_gaps_ms"] = gaps
        params["epochs_run"] = len(hist[0].history["loss"])
        params["val_loss"] = [round(v, 4) for v in hist[0].history["val_loss"]]
        params["lr_per_epoch"] = lrs
        shutil.rmtree(ckdir, ignore_errors=True)
    elif case == "ragged_partial_batch_loop":
        params = {"batch": 32, "examples": 200, "vocab": 1000, "steps": 12}
        lengths = rng.integers(4, 40, 200)
        flat = rng.integers(1, 1000, int(lengths.sum())).astype(np.int64)
        tokens = tf.RaggedTensor.from_row_lengths(flat, lengths)
        labels = rng.random((200, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((tokens, labels)).ragged_batch(32).prefetch(2)
        emb = keras.layers.Embedding(1000, 64)
        head = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, "relu"),
                                 keras.layers.Dense(1)])
        emb.build((None,))
        opt = keras.optimizers.Adam(1e-3)
        traces: list[int] = []

        @tf.function(reduce_retracing=True)
        def step(tok, yb):
            traces.append(1)
            with tf.GradientTape() as tape:
                v = emb(tok.flat_values)
                pooled = tf.math.segment_mean(v, tok.value_rowids())
                loss = mse(yb, head(pooled, training=True))
            tv = emb.trainable_variables + head.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, tv), tv, strict=True))
            return loss

        def batches():
            while True:
                yield from ds

        it = batches()
        times, trace_at, sizes = [], [], []

        def one(i):
            t = time.perf_counter()
            tok, yb = next(it)
            n = len(traces)
            step(tok, yb)
            times.append(time.perf_counter() - t)
            sizes.append(int(tok.nrows()))
            if len(traces) > n:
                trace_at.append(i)

        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["batch_rows"] = sizes[3:]
        params["traced_in_steps"] = trace_at
    elif case == "tabular_preprocess_map_fit":
        params = {"batch": 64, "steps": 12, "rows": 4096}
        cats = np.array([f"c{k}" for k in range(40)])
        cat = rng.choice(cats, 4096)
        num = rng.normal(size=(4096, 2)).astype(np.float32) * [3.0, 50.0] + [1.0, 200.0]
        yv = rng.random((4096, 1)).astype(np.float32)
        lookup = keras.layers.StringLookup(output_mode="one_hot")
        lookup.adapt(cat)
        norm = keras.layers.Normalization()
        norm.adapt(num)

        def prep(feat, yb):
            x = tf.concat([tf.cast(lookup(feat["cat"]), tf.float32), norm(feat["num"])], 1)
            return x, yb

        ds = (tf.data.Dataset.from_tensor_slices(({"cat": cat, "num": num}, yv)).repeat()
              .shuffle(1024).batch(64).map(prep, num_parallel_calls=tf.data.AUTOTUNE)
              .prefetch(tf.data.AUTOTUNE))
        width = lookup.vocabulary_size() + 2
        model = mlp(width, 256)
        model.compile(optimizer="adam", loss="mse")
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "optimizer_grad_accum_fit":
        params = {"batch": 64, "steps": 16, "gradient_accumulation_steps": 4}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(512, "relu"),
                                  keras.layers.Dense(512, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3, gradient_accumulation_steps=4),
                      loss="mse")
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        ds = random_batches(64 * 8, 128, 64)
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["iterations_after"] = int(model.optimizer.iterations.numpy())
    elif case == "tfkeras_spe8_tfdata_fit":
        import tf_keras

        params = {"batch": 64, "steps_per_execution": 8, "batches": 96, "features": 128}
        x = rng.random((64 * 96, 128), np.float32)
        y = rng.random((64 * 96, 1), np.float32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).batch(64)
              .map(lambda a, b: (a * 2.0 - 1.0, b), num_parallel_calls=tf.data.AUTOTUNE)
              .prefetch(tf.data.AUTOTUNE))
        model = tf_keras.Sequential([tf_keras.layers.Dense(256, activation="relu",
                                                           input_shape=(128,)),
                                     tf_keras.layers.Dense(256, activation="relu"),
                                     tf_keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse", steps_per_execution=8)
        times, batches_seen = [], []

        class TkTimer(tf_keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                self.t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                times.append(time.perf_counter() - self.t)
                batches_seen.append(batch)

        model.fit(ds, epochs=1, verbose=0, callbacks=[TkTimer()])
        times.clear()
        batches_seen.clear()
        t0 = time.perf_counter()
        profile(lambda: model.fit(ds, epochs=1, verbose=0, callbacks=[TkTimer()]))
        params["measured_fit_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        params["measured_execution_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_step_ms"] = params["measured_execution_ms"]
        params["callback_batches"] = batches_seen
        params["iterations_after"] = int(model.optimizer.iterations.numpy())
    elif case == "keras3_python_generator_fit":
        params = {"batch": 64, "steps": 16, "features": 128, "sorts_per_batch": 4}
        gen_ms: list[float] = []

        def gen():
            while True:
                t = time.perf_counter()
                xb = rng.random((64, 128)).astype(np.float32)
                xb = (xb - xb.mean(0)) / (xb.std(0) + 1e-6)
                for _ in range(4):
                    np.sort(xb, axis=0)
                yb = xb[:, :1].copy()
                gen_ms.append((time.perf_counter() - t) * 1e3)
                yield xb, yb

        model = mlp(128, 256)
        model.compile(optimizer="adam", loss="mse")
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(gen(), steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        gen_ms.clear()
        profile(lambda: model.fit(gen(), steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_generator_ms"] = [round(t, 3) for t in gen_ms]
    elif case == "reshuffle_each_epoch_loop":
        params = {"rows": 60000, "features": 64, "batch": 256, "shuffle_buffer": 10000,
                  "epochs": 3, "epoch_steps": 5}
        x = rng.random((60000, 64), np.float32)
        y = rng.random((60000, 1), np.float32)
        model = mlp(64, 128)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        times, make_ms = [], []

        def epochs(n: int, first: int) -> None:
            i = first
            for _ in range(n):
                t = time.perf_counter()
                ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000).batch(256)
                      .prefetch(2))
                it = iter(ds)
                make_ms.append(round((time.perf_counter() - t) * 1e3, 3))
                for _ in range(params["epoch_steps"]):
                    with tfobs.step(i):
                        t = time.perf_counter()
                        xb, yb = next(it)
                        step(xb, yb)
                        times.append(time.perf_counter() - t)
                    i += 1

        epochs(1, 0)
        times.clear()
        make_ms.clear()
        profile(lambda: epochs(params["epochs"], 5))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_dataset_make_ms"] = make_ms
    elif case == "lambda_numpy_function_fit":
        params = {"batch": 256, "steps": 16, "features": 128}
        np_ms: list[float] = []

        def centre_clip(a):
            t = time.perf_counter()
            out = np.clip(a - np.median(a, axis=1, keepdims=True), -0.4, 0.4)
            out = np.sort(out, axis=1).astype(np.float32)
            np_ms.append((time.perf_counter() - t) * 1e3)
            return out

        def via_numpy(t):
            out = tf.numpy_function(centre_clip, [t], tf.float32)
            return tf.ensure_shape(out, [None, 128])

        model = keras.Sequential([keras.Input((128,)),
                                  keras.layers.Lambda(via_numpy, output_shape=(128,)),
                                  keras.layers.Dense(256, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        times: list[float] = []

        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        ds = random_batches(256 * 8, 128, 256)
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        np_ms.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_numpy_fn_ms"] = [round(t, 3) for t in np_ms]
    elif case == "mirrored_gather_metrics_loop":
        params = {"devices": ["/cpu:0", "/cpu:1"], "global_batch": 128, "steps": 12}
        strategy = tf.distribute.MirroredStrategy(params["devices"])
        with strategy.scope():
            model = mlp(128, 256)
            opt = keras.optimizers.SGD(0.01)
        x = rng.random((128 * 16, 128), np.float32)
        y = rng.random((128 * 16, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128).prefetch(2)
        it = iter(strategy.experimental_distribute_dataset(ds))

        def replica_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                pred = model(xb, training=True)
                loss = tf.reduce_sum(tf.square(pred - yb)) / 128.0
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss, pred

        @tf.function
        def train_step(batch: Any) -> Any:
            return strategy.run(replica_step, args=batch)

        times, metric_ms = [], []

        def one(i: int) -> None:
            t = time.perf_counter()
            per_loss, per_pred = train_step(next(it))
            t1 = time.perf_counter()
            loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_loss, axis=None)
            preds = strategy.gather(per_pred, axis=0)
            p = preds.numpy()
            float(loss.numpy())
            np.percentile(p, [10, 50, 90])
            metric_ms.append(round((time.perf_counter() - t1) * 1e3, 3))
            times.append(time.perf_counter() - t)

        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["measured_metric_ms"] = metric_ms[3:]
    elif case == "persistent_tape_two_grads_loop":
        params = {"batch": 128, "features": 256, "steps": 12}
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, "relu"),
                                  keras.layers.Dense(256, "relu"), keras.layers.Dense(1)])
        opt = keras.optimizers.Adam(1e-3)
        it = iter(random_batches(128 * 16, 256, 128))

        @tf.function
        def train_step(xb, yb):
            with tf.GradientTape(persistent=True) as tape:
                pred = model(xb, training=True)
                loss = tf.reduce_mean(tf.square(pred - yb))
                reg = 1e-4 * tf.add_n([tf.reduce_sum(tf.square(v))
                                       for v in model.trainable_variables])
            g1 = tape.gradient(loss, model.trainable_variables)
            g2 = tape.gradient(reg, model.trainable_variables)
            del tape
            opt.apply_gradients(zip([a + b for a, b in zip(g1, g2, strict=True)],
                                    model.trainable_variables, strict=True))
            return loss

        def one(i):
            xb, yb = next(it)
            float(train_step(xb, yb))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case in ("sample_weight_triples_fit", "batch_nondet_map_after_fit"):
        times: list[float] = []

        if case == "sample_weight_triples_fit":
            params = {"batch": 64, "classes": 10, "steps": 12}
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, "relu"),
                                      keras.layers.Dense(10)])
            model.compile(optimizer=keras.optimizers.Adam(1e-3),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            x = rng.random((64 * 64, 64), np.float32)
            y = rng.integers(0, 10, (64 * 64,))
            w = (1.0 + y / 10).astype(np.float32)
            ds = tf.data.Dataset.from_tensor_slices((x, y, w)).repeat().batch(64).prefetch(2)
        else:
            params = {"batch": 64, "features": 128, "steps": 12, "rounds": 48}

            def slow_vec(xb, yb):
                m = tf.eye(128) * 0.5
                for _ in range(48):
                    xb = tf.sin(tf.matmul(xb, m)) + xb
                return xb, yb

            x = rng.random((64 * 32, 128), np.float32)
            y = rng.random((64 * 32, 1), np.float32)
            ds = (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
                  .batch(64, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
                  .map(slow_vec).prefetch(tf.data.AUTOTUNE))
            model = mlp(128, 256)
            model.compile(optimizer="adam", loss="mse")
            t = time.perf_counter()
            itx = iter(ds)
            for _ in range(20):
                next(itx)
            params["measured_input_batch_ms"] = round((time.perf_counter() - t) * 1e3 / 20, 3)
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "sleep_between_steps_loop":
        params = {"batch": 64, "steps": 12, "sleep_ms": 8}
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(64 * 16, 128, 64))
        times = []

        def one(i):
            t = time.perf_counter()
            float(step(*next(it)))
            times.append(time.perf_counter() - t)

        def marker(i):
            import contextlib

            @contextlib.contextmanager
            def throttled():
                with tfobs.step(i):
                    yield
                time.sleep(0.008)  # the job's rate limit, outside the step

            return throttled()

        warm_then_profile(one, params["steps"], marker=marker)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
    elif case == "cond_every_5_loop":
        params = {"batch": 64, "steps": 15, "every": 5, "rounds": 40}
        w1 = tf.Variable(tf.random.normal((256, 256)) * 0.05)
        w2 = tf.Variable(tf.random.normal((256, 1)) * 0.05)
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(64 * 16, 256, 64))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = mse(yb, tf.nn.relu(xb @ w1) @ w2)
            g = tape.gradient(loss, [w1, w2])
            opt.apply_gradients(zip(g, [w1, w2], strict=True))

            def orthogonalize():
                w = w1.read_value()
                for _ in range(40):  # Newton-Schulz iterations toward an orthogonal matrix
                    w = 1.5 * w - 0.5 * w @ tf.transpose(w) @ w
                w1.assign(w)
                return tf.constant(1)

            tf.cond(opt.iterations % 5 == 0, orthogonalize, lambda: tf.constant(0))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"], warm=4)
    elif case == "ignore_errors_decode_loop":
        params = {"batch": 32, "steps": 10, "corrupt_every": 4, "size": 64}
        encoded = []
        for k in range(256):
            img = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
            data = tf.io.encode_jpeg(img).numpy()
            encoded.append(data[: len(data) // 3] if k % 4 == 3 else data)
        labels = rng.integers(0, 10, 256)

        def decode(s, y):
            im = tf.io.decode_jpeg(s, channels=3)
            return tf.cast(tf.ensure_shape(im, (64, 64, 3)), tf.float32) / 255.0, y

        ds = (tf.data.Dataset.from_tensor_slices((encoded, labels)).repeat()
              .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
              .ignore_errors(log_warning=False).batch(32).prefetch(2))
        model = keras.Sequential([keras.Input((64, 64, 3)),
                                  keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
                                  keras.layers.GlobalAveragePooling2D(),
                                  keras.layers.Dense(10)])
        step = build_train_step(tf, model)
        it = iter(ds)
        times, waits = [], []

        def one(i):
            t = time.perf_counter()
            xb, yb = next(it)
            waits.append(time.perf_counter() - t)
            float(step(xb, yb))
            times.append(time.perf_counter() - t)

        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["measured_next_ms"] = [round(t * 1e3, 3) for t in waits[3:]]
    elif case == "map_fn_per_example_loop":
        params = {"batch": 64, "steps": 10, "features": 128}
        model = mlp(128, 128)
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(64 * 16, 128, 64))

        @tf.function
        def step(xb, yb):
            xb = tf.map_fn(lambda row: (row - tf.reduce_mean(row)) /
                           (tf.math.reduce_std(row) + 1e-6), xb)
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "partial_batch_retrace_loop":
        params = {"batch": 64, "rows": 360, "features": 64, "epochs": 2}
        x = rng.random((360, 64), np.float32)
        y = rng.random((360, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
        model = mlp(64, 256)
        opt = keras.optimizers.SGD(0.01)
        traces: list[int] = []

        @tf.function
        def step(xb, yb):
            traces.append(1)
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        times, trace_at, sizes = [], [], []

        def one(i, xb, yb):
            with tfobs.step(i):
                t = time.perf_counter()
                n = len(traces)
                float(step(xb, yb))
                times.append(time.perf_counter() - t)
            sizes.append(int(xb.shape[0]))
            if len(traces) > n:
                trace_at.append(i)

        it = iter(ds)
        for i in range(3):  # warm-up: full batches only
            one(i, *next(it))

        def epochs():
            i = 3
            for _ in range(2):
                for xb, yb in ds:
                    one(i, xb, yb)
                    i += 1

        times.clear(), trace_at.clear(), sizes.clear()
        profile(epochs)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["batch_rows"] = sizes
        params["traced_in_steps"] = trace_at
    elif case == "tfkeras_spe_auto_fit":
        import tf_keras

        params = {"batch": 64, "steps_per_execution": "auto", "batches": 40, "features": 128}
        x = rng.random((64 * 40, 128), np.float32)
        y = rng.random((64 * 40, 1), np.float32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(tf.data.AUTOTUNE)
        model = tf_keras.Sequential([tf_keras.layers.Dense(256, activation="relu",
                                                           input_shape=(128,)),
                                     tf_keras.layers.Dense(256, activation="relu"),
                                     tf_keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse", steps_per_execution="auto")
        times, batches_seen = [], []

        class TkTimer(tf_keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                self.t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                times.append(time.perf_counter() - self.t)
                batches_seen.append(batch)

        model.fit(ds.take(8), epochs=1, verbose=0, callbacks=[TkTimer()])
        times.clear()
        batches_seen.clear()
        t0 = time.perf_counter()
        profile(lambda: model.fit(ds.take(16), epochs=1, verbose=0, callbacks=[TkTimer()]))
        params["measured_fit_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["callback_batches"] = batches_seen
        params["steps_per_execution_after"] = int(model._steps_per_execution.numpy())
    elif case in ("mixed_bfloat16_cpu_loop", "float64_dense_loop"):
        wide = case == "mixed_bfloat16_cpu_loop"
        feats, width = (512, 1024) if wide else (256, 512)
        params = {"batch": 128, "features": feats, "width": width, "steps": 10}

        def timed_loop(dtype, policy):
            keras.mixed_precision.set_global_policy(policy)
            kw = {"dtype": dtype} if dtype else {}
            model = keras.Sequential([keras.Input((feats,), dtype=dtype or "float32"),
                                      keras.layers.Dense(width, "relu", **kw),
                                      keras.layers.Dense(width, "relu", **kw),
                                      keras.layers.Dense(1, dtype=dtype or "float32")])
            xs = rng.random((128 * 8, feats)).astype(dtype or "float32")
            ys = rng.random((128 * 8, 1)).astype(dtype or "float32")
            it = iter(tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(128)
                      .prefetch(2))
            opt = keras.optimizers.SGD(0.01)

            @tf.function
            def step(xb, yb):
                with tf.GradientTape() as tape:
                    pred = tf.cast(model(xb, training=True), yb.dtype)
                    loss = tf.reduce_mean(tf.square(pred - yb))
                g = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
                return loss

            times: list[float] = []

            def one(i):
                t = time.perf_counter()
                float(step(*next(it)))
                times.append(time.perf_counter() - t)

            return one, times

        base, base_times = timed_loop(None, "float32")
        for i in range(23):
            base(i)
        params["float32_step_ms"] = round(float(np.median(base_times[3:])) * 1e3, 3)
        one, times = (timed_loop(None, "mixed_bfloat16") if wide
                      else timed_loop("float64", "float32"))
        warm_then_profile(one, params["steps"])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times[3:]]
        params["measured_median_ms"] = round(float(np.median(times[3:])) * 1e3, 3)
    elif case == "linalg_eigh_step_loop":
        params = {"batch": 256, "features": 256, "steps": 10}
        model = mlp(256, 128)
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(256 * 8, 256, 256))
        eye = tf.eye(256)

        @tf.function
        def step(xb, yb):
            xc = xb - tf.reduce_mean(xb, 0)
            cov = tf.matmul(xc, xc, transpose_a=True) / 256.0 + 1e-3 * eye
            e, v = tf.linalg.eigh(cov)
            xw = xc @ (v * tf.math.rsqrt(e)) @ tf.transpose(v)
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xw, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case in ("autograph_tensor_range_loop", "python_range_unrolled_loop"):
        params = {"batch": 64, "features": 128, "rounds": 12, "steps": 10,
                  "loop": "tf.range" if case.startswith("autograph") else "range"}
        w_in = tf.Variable(rng.normal(0, 0.05, (128, 128)).astype(np.float32))
        head = mlp(128, 64)
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(64 * 16, 128, 64))
        rounds = tf.range(12) if case.startswith("autograph") else range(12)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                h = tf.zeros_like(xb)
                for _ in rounds:
                    h = tf.tanh(h @ w_in + xb)
                loss = mse(yb, head(h, training=True))
            tv = [w_in] + head.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, tv), tv, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "shard_after_read_loop":
        params = {"files": 4, "rows_per_file": 1024, "features": 256, "num_shards": 4,
                  "index": 1, "batch": 32, "steps": 12}
        files, spec = example_records("shard", 4, 1024, 256)
        ds = (tf.data.TFRecordDataset(files).shard(4, 1).repeat().batch(32)
              .map(lambda rec: tf.io.parse_example(rec, spec),
                   num_parallel_calls=tf.data.AUTOTUNE)
              .map(lambda d: (d["x"], d["y"])).prefetch(2))
        model = mlp(256, 128)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "gzip_tfrecord_loop":
        params = {"files": 4, "rows_per_file": 512, "features": 1024, "compression": "GZIP",
                  "batch": 64, "steps": 12}
        folder = pathlib.Path(logdir) / "records"
        folder.mkdir(exist_ok=True)
        files = []
        opts = tf.io.TFRecordOptions(compression_type="GZIP")
        for f in range(4):
            path = str(folder / f"gz-{f}.tfrecord.gz")
            with tf.io.TFRecordWriter(path, opts) as writer:
                for row in np.round(rng.random((512, 1024)), 2).tolist():
                    feat = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                            "y": tf.train.Feature(float_list=tf.train.FloatList(
                                value=[row[0]]))}
                    writer.write(tf.train.Example(features=tf.train.Features(
                        feature=feat)).SerializeToString())
            files.append(path)
        spec = {"x": tf.io.FixedLenFeature((1024,), tf.float32),
                "y": tf.io.FixedLenFeature((1,), tf.float32)}
        ds = (tf.data.TFRecordDataset(files, compression_type="GZIP").repeat().batch(64)
              .map(lambda rec: tf.io.parse_example(rec, spec),
                   num_parallel_calls=tf.data.AUTOTUNE)
              .map(lambda d: (d["x"], d["y"])).prefetch(2))
        model = mlp(1024, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "stft_audio_pipeline_fit":
        params = {"clips": 256, "samples": 16000, "frame_length": 400, "frame_step": 160,
                  "fft_length": 512, "mel_bins": 40, "batch": 32, "steps": 10}
        waves = rng.normal(0, 0.1, (256, 16000)).astype(np.float32)
        labels = rng.integers(0, 4, 256).astype(np.int32)
        mel = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 8000.0)

        def spectro(w, y):
            s = tf.abs(tf.signal.stft(w, 400, 160, 512))
            return tf.math.log(tf.matmul(s * s, mel) + 1e-6)[..., None], y

        ds = (tf.data.Dataset.from_tensor_slices((waves, labels)).repeat()
              .map(spectro, num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(2))
        model = keras.Sequential([
            keras.Input((98, 40, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(2), keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        times: list[float] = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, epochs=1, steps_per_epoch=3, **kw)
        times.clear()
        profile(lambda: model.fit(ds, epochs=1, steps_per_epoch=params["steps"], **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "vectorized_map_grads_loop":
        params = {"batch": 64, "features": 64, "width": 128, "clip_norm": 1.0, "steps": 10}
        model = mlp(64, 128)
        opt = keras.optimizers.SGD(0.05)
        it = iter(random_batches(64 * 16, 64, 64))

        @tf.function
        def step(xb, yb):
            tv = model.trainable_variables

            def one_grad(ex):
                x1, y1 = ex
                with tf.GradientTape() as tape:
                    loss = mse(y1[None], model(x1[None], training=True))
                g = tape.gradient(loss, tv)
                norm = tf.linalg.global_norm(g)
                return [t * tf.minimum(1.0, 1.0 / (norm + 1e-6)) for t in g]

            per = tf.vectorized_map(one_grad, (xb, yb))
            opt.apply_gradients(zip([tf.reduce_mean(p, 0) for p in per], tv, strict=True))
            return tf.reduce_mean(tf.square(model(xb) - yb))

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "custom_gradient_layer_loop":
        params = {"batch": 128, "features": 256, "width": 512, "bits": 4, "steps": 12}

        @tf.custom_gradient
        def fake_quant(x):
            q = tf.round(tf.clip_by_value(x, -1.0, 1.0) * 7.0) / 7.0

            def grad(dy):
                return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)

            return q, grad

        class FakeQuant(keras.layers.Layer):
            def call(self, x):
                return fake_quant(x)

        model = keras.Sequential([
            keras.Input((256,)), keras.layers.Dense(512, "tanh"), FakeQuant(),
            keras.layers.Dense(512, "tanh"), FakeQuant(), keras.layers.Dense(1)])
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3))
        it = iter(random_batches(128 * 16, 256, 128))

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "tensorarray_rnn_loop":
        params = {"batch": 32, "time": 32, "features": 32, "units": 64, "steps": 10}
        w_x = tf.Variable(rng.normal(0, 0.1, (32, 64)).astype(np.float32))
        w_h = tf.Variable(rng.normal(0, 0.1, (64, 64)).astype(np.float32))
        head = mlp(64, 32)
        opt = keras.optimizers.Adam(1e-3)
        xs = rng.normal(size=(512, 32, 32)).astype(np.float32)
        ys = rng.normal(size=(512, 1)).astype(np.float32)
        it = iter(tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(32).prefetch(2))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                seq = tf.transpose(xb, [1, 0, 2])
                states = tf.TensorArray(tf.float32, size=32)

                def body(t, h, ta):
                    h = tf.tanh(seq[t] @ w_x + h @ w_h)
                    return t + 1, h, ta.write(t, h)

                _, _, states = tf.while_loop(lambda t, h, ta: t < 32, body,
                                             (0, tf.zeros((tf.shape(xb)[0], 64)), states))
                pooled = tf.reduce_mean(states.stack(), 0)
                loss = mse(yb, head(pooled, training=True))
            tv = [w_x, w_h] + head.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, tv), tv, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "choose_from_datasets_loop":
        params = {"features": 64, "heavy_rounds": 1024, "batch": 64, "steps": 12,
                  "choice": "range(3).repeat()"}

        def heavy(i):
            v = tf.cast(i, tf.float32) * tf.linspace(0.0, 1.0, 64)
            acc = tf.zeros(64)
            for k in range(1024 // 64):
                acc += tf.reduce_sum(tf.sin(v[:, None] * tf.range(64, dtype=tf.float32)
                                            + float(k)), 1)
            return acc / 1024.0, tf.reduce_mean(acc, keepdims=True)

        def cheap(i):
            v = tf.cast(i, tf.float32) * tf.ones(64) / 100.0
            return v, v[:1]

        parts = [tf.data.Dataset.range(10**9).map(heavy),
                 tf.data.Dataset.range(10**9).map(cheap),
                 tf.data.Dataset.range(10**9).map(cheap)]
        ds = (tf.data.Dataset.choose_from_datasets(
            parts, tf.data.Dataset.range(3).repeat()).batch(64).prefetch(2))
        model = mlp(64, 64)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "spe_validation_steps_fit":
        params = {"steps_per_execution": 4, "batch": 64, "steps": 16, "epochs": 2,
                  "validation_steps": 4}
        model = keras.Sequential([
            keras.Input((128,)), keras.layers.Dense(256, "relu"),
            keras.layers.Dense(256, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse",
                      steps_per_execution=4)
        train = random_batches(64 * 32, 128, 64)
        val = random_batches(64 * 8, 128, 64)
        times: list[float] = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)],
              "validation_data": val, "validation_steps": 4}
        model.fit(train, epochs=1, steps_per_epoch=8, **kw)
        times.clear()
        profile(lambda: model.fit(train, epochs=2, steps_per_epoch=16, **kw))
        params["measured_batch_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "pydataset_multiprocessing_fit":
        params = {"batch": 64, "features": 128, "workers": 2, "use_multiprocessing": True,
                  "steps": 12}

        class Sorted(keras.utils.PyDataset):
            def __init__(self):
                super().__init__(workers=2, use_multiprocessing=True, max_queue_size=4)

            def __len__(self):
                return 1000

            def __getitem__(self, idx):
                r = np.random.default_rng(idx)
                x = r.random((64, 128), np.float32)
                for _ in range(6):
                    x = np.sort(r.random((64, 4096)), 1)[:, ::32].astype(np.float32)
                return x, r.random((64, 1), np.float32)

        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        times: list[float] = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        data = Sorted()
        t = time.perf_counter()
        data[0]
        params["getitem_ms"] = round((time.perf_counter() - t) * 1e3, 3)
        model.fit(data, epochs=1, steps_per_epoch=4, **kw)
        times.clear()
        profile(lambda: model.fit(data, epochs=1, steps_per_epoch=params["steps"], **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "gather_grad_densified_loop":
        params = {"rows": 200_000, "dim": 64, "batch": 256, "ids_per_row": 8, "steps": 10}
        table = tf.Variable(tf.random.normal((200_000, 64)) * 0.01)
        head = tf.Variable(tf.random.normal((64, 1)) * 0.1)
        opt = keras.optimizers.SGD(0.05)
        ids = rng.integers(0, 200_000, (256 * 16, 8))
        ys = rng.random((256 * 16, 1), np.float32)
        it = iter(tf.data.Dataset.from_tensor_slices((ids, ys)).repeat().batch(256)
                  .prefetch(2))

        @tf.function
        def step(ib, yb):
            with tf.GradientTape() as tape:
                emb = tf.reduce_mean(tf.gather(table, ib), axis=1)
                loss = mse(yb, emb @ head)
            grads = tape.gradient(loss, [table, head])
            # a NaN guard on every gradient: tf.where makes the IndexedSlices dense
            grads = [tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)) for g in grads]
            opt.apply_gradients(zip(grads, [table, head], strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "ctc_loss_loop":
        params = {"batch": 32, "frames": 100, "features": 40, "classes": 29,
                  "label_len": [12, 20], "steps": 10}
        model = keras.Sequential([
            keras.Input((100, 40)), keras.layers.Conv1D(64, 5, padding="same",
                                                        activation="relu"),
            keras.layers.Conv1D(64, 5, padding="same", activation="relu"),
            keras.layers.Dense(29)])
        opt = keras.optimizers.Adam(1e-3)
        n = 32 * 8
        x = rng.normal(size=(n, 100, 40)).astype("float32")
        lens = rng.integers(12, 21, n).astype("int32")
        labels = rng.integers(1, 28, (n, 20)).astype("int32")
        labels[np.arange(20)[None, :] >= lens[:, None]] = 0
        it = iter(tf.data.Dataset.from_tensor_slices((x, labels, lens)).repeat().batch(32)
                  .prefetch(2))

        @tf.function
        def step(xb, lb, ll):
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tf.reduce_mean(tf.nn.ctc_loss(
                    lb, logits, ll, tf.fill([tf.shape(xb)[0]], 100),
                    logits_time_major=False, blank_index=-1))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "detection_nms_crop_loop":
        params = {"batch": 8, "image": 128, "boxes": 256, "keep": 32, "crop": 7,
                  "steps": 10}
        backbone = keras.Sequential([
            keras.Input((128, 128, 3)),
            keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")])
        scorer = keras.layers.Dense(1)
        head = keras.Sequential([keras.Input((7 * 7 * 32,)), keras.layers.Dense(64, "relu"),
                                 keras.layers.Dense(5)])
        scorer.build((None, 32))
        variables = (backbone.trainable_variables + scorer.trainable_variables
                     + head.trainable_variables)
        opt = keras.optimizers.SGD(0.01)
        imgs = rng.random((64, 128, 128, 3), np.float32)
        yx = rng.random((64, 256, 2), np.float32) * 0.8
        hw = 0.05 + rng.random((64, 256, 2), np.float32) * 0.15
        boxes = np.concatenate([yx, np.minimum(yx + hw, 1.0)], -1).astype("float32")
        targets = rng.random((64, 32, 5), np.float32)
        it = iter(tf.data.Dataset.from_tensor_slices((imgs, boxes, targets)).repeat()
                  .batch(8).prefetch(2))

        @tf.function
        def step(ib, bb, tb):
            with tf.GradientTape() as tape:
                feat = backbone(ib, training=True)
                pooled = tf.image.crop_and_resize(
                    feat, tf.reshape(bb, (-1, 4)), tf.repeat(tf.range(8), 256), (1, 1))
                scores = tf.reshape(scorer(tf.reshape(pooled, (-1, 32))), (8, 256))
                kept_boxes, kept_idx = [], []
                for b in range(8):
                    sel = tf.image.non_max_suppression(bb[b], scores[b], 32,
                                                       iou_threshold=0.5)
                    sel = tf.pad(sel, [[0, 32 - tf.shape(sel)[0]]])
                    kept_boxes.append(tf.gather(bb[b], sel))
                    kept_idx.append(tf.fill([32], b))
                crops = tf.image.crop_and_resize(feat, tf.concat(kept_boxes, 0),
                                                 tf.concat(kept_idx, 0), (7, 7))
                out = head(tf.reshape(crops, (-1, 7 * 7 * 32)), training=True)
                loss = mse(tf.reshape(tb, (-1, 5)), out)
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "hash_table_tokenize_fit":
        params = {"batch": 64, "vocab": 5000, "length": 32, "steps": 12}
        words = [f"w{k}" for k in range(5000)]
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(words), tf.range(1, 5001, dtype=tf.int64)), default_value=0)
        sentences = [" ".join(f"W{k}," if j % 7 == 0 else f"w{k}"
                              for j, k in enumerate(rng.integers(0, 6000, int(n))))
                     for n in rng.integers(8, 40, 2048)]
        labels = rng.integers(0, 2, (2048, 1)).astype("float32")

        def tokenize(s, y):
            s = tf.strings.regex_replace(tf.strings.lower(s), r"[^a-z0-9 ]", "")
            ids = table.lookup(tf.strings.split(s))
            return ids.to_tensor(shape=(None, 32)), y

        ds = (tf.data.Dataset.from_tensor_slices((sentences, labels)).repeat().batch(64)
              .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2))
        model = keras.Sequential([keras.Input((32,), dtype="int64"),
                                  keras.layers.Embedding(5001, 32),
                                  keras.layers.GlobalAveragePooling1D(),
                                  keras.layers.Dense(32, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        times: list[float] = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "backup_restore_fit":
        params = {"batch": 64, "save_freq": 3, "steps": 12}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(512, "relu"),
                                  keras.layers.Dense(512, "relu"), keras.layers.Dense(10)])
        model.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.random((64 * 12, 128), np.float32)
        y = rng.integers(0, 10, 64 * 12)
        backup = keras.callbacks.BackupAndRestore(os.path.join(logdir, "backup"),
                                                  save_freq=3, delete_checkpoint=False)
        times = []
        kw = {"verbose": 0, "batch_size": 64,
              "callbacks": [keras3_callback_class()(), batch_timer(times), backup]}
        model.fit(x[:256], y[:256], epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(x, y, epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "sparse_dense_matmul_loop":
        params = {"batch": 256, "features": 100_000, "nnz_per_row": 64, "dim": 64,
                  "steps": 10}
        w = tf.Variable(tf.random.normal((100_000, 64)) * 0.01)
        top = mlp(64, 64)
        variables = [w] + top.trainable_variables
        opt = keras.optimizers.SGD(0.01)

        def sparse_batch(k):
            r = np.random.default_rng(k)
            cols = np.sort(r.integers(0, 100_000, (256, 64)), 1)
            idx = np.stack([np.repeat(np.arange(256), 64), cols.ravel()], 1)
            return (tf.SparseTensor(idx, r.random(256 * 64, np.float32), (256, 100_000)),
                    tf.constant(r.random((256, 1), np.float32)))

        batches = [sparse_batch(k) for k in range(8)]

        @tf.function
        def step(sp, yb):
            with tf.GradientTape() as tape:
                h = tf.sparse.sparse_dense_matmul(sp, w)
                loss = mse(yb, top(h, training=True))
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        def one(i):
            float(step(*batches[i % 8]))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "variable_assign_numpy_loop":
        params = {"batch": 1024, "features": 1024, "steps": 12}
        x_var = tf.Variable(tf.zeros((1024, 1024)), trainable=False)
        y_var = tf.Variable(tf.zeros((1024, 1)), trainable=False)
        model = mlp(1024, 64)
        opt = keras.optimizers.SGD(0.01)
        xs = [rng.random((1024, 1024), np.float32) for _ in range(4)]
        ys = [rng.random((1024, 1), np.float32) for _ in range(4)]

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = mse(y_var, model(x_var, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        assign_ms = []

        def one(i):
            t = time.perf_counter()
            x_var.assign(xs[i % 4] * 1.0)  # a fresh numpy batch every step
            y_var.assign(ys[i % 4])
            assign_ms.append(round((time.perf_counter() - t) * 1e3, 3))
            float(step())

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
        params["measured_assign_ms"] = assign_ms[3:]
    elif case == "many_small_layers_fit":
        params = {"batch": 32, "layers": 100, "width": 8, "features": 16, "steps": 12}
        model = keras.Sequential([keras.Input((16,))]
                                 + [keras.layers.Dense(8, "relu") for _ in range(100)]
                                 + [keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        ds = random_batches(32 * 16, 16, 32)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "recompute_grad_loop":
        params = {"batch": 256, "blocks": 6, "width": 512, "steps": 10}
        weights = [(tf.Variable(tf.random.normal((512, 512)) * 0.03),
                    tf.Variable(tf.zeros(512)),
                    tf.Variable(tf.random.normal((512, 512)) * 0.03)) for _ in range(6)]
        head = tf.Variable(tf.random.normal((512, 1)) * 0.03)
        variables = [v for w in weights for v in w] + [head]
        opt = keras.optimizers.Adam(1e-3)

        def block_of(w1, b1, w2):
            def block(h):
                return h + tf.nn.relu(h @ w1 + b1) @ w2
            return tf.recompute_grad(block)

        blocks = [block_of(*w) for w in weights]
        it = iter(random_batches(256 * 16, 512, 256))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                h = xb
                for block in blocks:
                    h = block(h)
                loss = mse(yb, h @ head)
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "auc_metric_fit":
        params = {"batch": 256, "features": 64, "thresholds": 20000, "steps": 12}

        def classifier(metrics):
            m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, "relu"),
                                  keras.layers.Dense(1, "sigmoid")])
            m.compile(optimizer="adam", loss="binary_crossentropy", metrics=metrics)
            return m

        model = classifier([keras.metrics.AUC(num_thresholds=20000, name="auc"),
                            keras.metrics.AUC(curve="PR", num_thresholds=20000, name="pr"),
                            keras.metrics.Precision(), keras.metrics.Recall()])
        x = rng.random((256 * 16, 64), np.float32)
        y = (rng.random((256 * 16, 1)) < 0.3).astype("float32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(256).prefetch(2)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        # the same model and data without the AUC metrics, after the trace
        plain, plain_times = classifier([]), []
        plain.fit(ds, steps_per_epoch=16, epochs=1, verbose=0,
                  callbacks=[batch_timer(plain_times)])
        params["without_auc_step_ms"] = [round(t * 1e3, 3) for t in plain_times[4:]]
    elif case == "iterator_per_step_loop":
        params = {"rows": 16384, "features": 64, "shuffle": 8192, "batch": 128, "steps": 10}
        x = rng.random((16384, 64), np.float32)
        y = rng.random((16384, 1), np.float32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(8192)
              .map(lambda a, b: (a * 2.0 - 1.0, b), num_parallel_calls=tf.data.AUTOTUNE)
              .batch(128).prefetch(2))
        step = build_train_step(tf, mlp(64, 256), mse, keras.optimizers.SGD(0.01))

        def one(i):
            float(step(*next(iter(ds))))  # a new iterator every step

        params["measured_step_ms"] = timed_then_profile(one, params["steps"],
                                                        marker=train_root)
        it, kept = iter(ds), []  # the fix, after the trace: one iterator for the loop
        for _ in range(13):
            t = time.perf_counter()
            float(step(*next(it)))
            kept.append(round((time.perf_counter() - t) * 1e3, 3))
        params["one_iterator_step_ms"] = kept[3:]
    elif case == "mha_jit_fit":
        params = {"batch": 32, "length": 64, "dim": 128, "heads": 8, "blocks": 2,
                  "steps": 10}
        inp = keras.Input((64, 128))
        h = inp
        for _ in range(2):
            att = keras.layers.MultiHeadAttention(8, 16)(h, h)
            h = keras.layers.LayerNormalization()(h + att)
            ff = keras.layers.Dense(128)(keras.layers.Dense(512, activation="gelu")(h))
            h = keras.layers.LayerNormalization()(h + ff)
        out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model(inp, out)
        model.compile(optimizer="adam", loss="mse", jit_compile=True)
        ds = (tf.data.Dataset.from_tensor_slices((rng.random((32 * 8, 64, 128), np.float32),
                                                  rng.random((32 * 8, 1), np.float32)))
              .repeat().batch(32).prefetch(2))
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "background_numpy_thread_loop":
        import threading

        params = {"batch": 512, "features": 256, "width": 1024, "background_matmul": 1024,
                  "steps": 12}
        step = build_train_step(tf, mlp(256, 1024), mse, keras.optimizers.SGD(0.01))
        it = iter(random_batches(512 * 8, 256, 512))
        alone = []
        for _ in range(8):  # the step alone, before the thread starts
            t = time.perf_counter()
            float(step(*next(it)))
            alone.append(round((time.perf_counter() - t) * 1e3, 3))
        params["alone_step_ms"] = alone[3:]
        stop, rounds = threading.Event(), [0]

        def statistics() -> None:
            a = np.random.default_rng(1).random((1024, 1024))
            while not stop.is_set():
                a = np.tanh(a @ a / 1024.0)
                rounds[0] += 1

        worker = threading.Thread(target=statistics, daemon=True)
        worker.start()
        try:
            params["measured_step_ms"] = timed_then_profile(
                lambda i: float(step(*next(it))), params["steps"])
        finally:
            stop.set()
            worker.join()
        params["background_rounds"] = rounds[0]
    elif case == "big_softmax_head_loop":
        params = {"batch": 128, "features": 128, "hidden": 256, "classes": 50_000,
                  "steps": 10}
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, "relu"),
                                  keras.layers.Dense(50_000)])
        opt = keras.optimizers.SGD(0.01)
        x = rng.random((128 * 8, 128), np.float32)
        labels = rng.integers(0, 50_000, 128 * 8).astype("int64")
        it = iter(tf.data.Dataset.from_tensor_slices((x, labels)).repeat().batch(128)
                  .prefetch(2))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    yb, model(xb, training=True)))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def one(i):
            float(step(*next(it)))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "channels_first_conv_fit":
        params = {"batch": 32, "channels": 3, "image": 64, "steps": 10}

        def conv_net(fmt, shape):
            m = keras.Sequential([
                keras.Input(shape),
                keras.layers.Conv2D(32, 3, padding="same", activation="relu",
                                    data_format=fmt),
                keras.layers.MaxPooling2D(data_format=fmt),
                keras.layers.Conv2D(64, 3, padding="same", activation="relu",
                                    data_format=fmt),
                keras.layers.GlobalAveragePooling2D(data_format=fmt),
                keras.layers.Dense(10)])
            m.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            return m

        images = rng.random((32 * 8, 3, 64, 64), np.float32)
        labels = rng.integers(0, 10, 32 * 8)
        ds = (tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32)
              .prefetch(2))
        model = conv_net("channels_first", (3, 64, 64))
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        # the same net channels_last on the same images, after the trace
        last, last_times = conv_net("channels_last", (64, 64, 3)), []
        last.fit(ds.map(lambda a, b: (tf.transpose(a, (0, 2, 3, 1)), b)), steps_per_epoch=14,
                 epochs=1, verbose=0, callbacks=[batch_timer(last_times)])
        params["channels_last_step_ms"] = [round(t * 1e3, 3) for t in last_times[4:]]
    elif case == "clip_norm_adamw_cosine_loop":
        params = {"batch": 256, "features": 256, "width": 1024, "classes": 10,
                  "clip_norm": 1.0, "weight_decay": 0.01, "steps": 12}
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, "relu"),
                                  keras.layers.Dense(1024, "relu"), keras.layers.Dense(10)])
        schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=1000)
        opt = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.01)
        x = rng.random((256 * 8, 256), np.float32)
        labels = rng.integers(0, 10, 256 * 8).astype("int64")
        it = iter(tf.data.Dataset.from_tensor_slices((x, labels)).repeat().batch(256)
                  .prefetch(2))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    yb, model(xb, training=True)))
            g = tape.gradient(loss, model.trainable_variables)
            g, norm = tf.clip_by_global_norm(g, 1.0)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss, norm

        def one(i):
            loss, norm = step(*next(it))
            float(loss)

        params["measured_step_ms"] = timed_then_profile(one, params["steps"],
                                                        marker=train_root)
    elif case == "ema_eager_apply_loop":
        params = {"batch": 128, "features": 256, "layers": 8, "width": 256, "decay": 0.999,
                  "steps": 12}
        model = keras.Sequential([keras.Input((256,))]
                                 + [keras.layers.Dense(256, "relu") for _ in range(7)]
                                 + [keras.layers.Dense(1)])
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        ema = tf.train.ExponentialMovingAverage(0.999)
        tf_vars = [v.value for v in model.trainable_variables]  # Keras 3 -> tf.Variable
        it = iter(random_batches(128 * 8, 256, 128))

        def one(i):
            float(step(*next(it)))
            ema.apply(tf_vars)  # eager, every step

        params["measured_step_ms"] = timed_then_profile(one, params["steps"],
                                                        marker=train_root)

        @tf.function
        def step_with_ema(xb, yb):  # the fix, timed after the trace
            loss = step(xb, yb)
            ema.apply(tf_vars)
            return loss

        kept = []
        for _ in range(15):
            t = time.perf_counter()
            float(step_with_ema(*next(it)))
            kept.append(round((time.perf_counter() - t) * 1e3, 3))
        params["ema_in_function_step_ms"] = kept[3:]
    elif case == "preprocessing_layers_in_model_fit":
        params = {"batch": 256, "vocab": 1000, "hash_bins": 4096, "floats": 16, "steps": 12}
        n = 256 * 8
        words = np.array([f"w{k}" for k in range(1000)])
        feats = {"tags": words[rng.integers(0, 1000, (n, 4))],
                 "item": rng.integers(0, 10**6, (n, 1)).astype("int64"),
                 "shop": rng.integers(0, 50, (n, 1)).astype("int64"),
                 "num": rng.random((n, 16), np.float32)}
        y = rng.random((n, 1), np.float32)
        tags = keras.layers.StringLookup(vocabulary=list(words), output_mode="multi_hot")
        hashing = keras.layers.Hashing(num_bins=4096)
        encode = keras.layers.CategoryEncoding(num_tokens=4096, output_mode="one_hot")
        shops = keras.layers.IntegerLookup(vocabulary=list(range(50)), output_mode="one_hot")
        norm = keras.layers.Normalization()
        norm.adapt(feats["num"])
        inputs = {"tags": keras.Input((4,), dtype="string", name="tags"),
                  "item": keras.Input((1,), dtype="int64", name="item"),
                  "shop": keras.Input((1,), dtype="int64", name="shop"),
                  "num": keras.Input((16,), name="num")}
        h = keras.layers.Concatenate()([
            tags(inputs["tags"]), encode(hashing(inputs["item"])),
            shops(inputs["shop"]), norm(inputs["num"])])
        out = keras.layers.Dense(1)(keras.layers.Dense(256, activation="relu")(h))
        model = keras.Model(inputs, out)
        model.compile(optimizer="adam", loss="mse")
        ds = (tf.data.Dataset.from_tensor_slices((feats, y)).repeat().batch(256)
              .prefetch(2))
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "two_tower_retrieval_loop":
        params = {"batch": 512, "users": 400_000, "items": 200_000, "dim": 64, "steps": 10}
        users = keras.Sequential([keras.Input((), dtype="int64"),
                                  keras.layers.Embedding(400_000, 64),
                                  keras.layers.Dense(128, "relu"), keras.layers.Dense(64)])
        items = keras.Sequential([keras.Input((), dtype="int64"),
                                  keras.layers.Embedding(200_000, 64),
                                  keras.layers.Dense(128, "relu"), keras.layers.Dense(64)])
        opt = keras.optimizers.Adagrad(0.05)
        n = 512 * 16
        ds = (tf.data.Dataset.from_tensor_slices(
            (rng.integers(0, 400_000, n).astype("int64"),
             rng.integers(0, 200_000, n).astype("int64")))
            .repeat().batch(512).prefetch(2))
        it = iter(ds)
        variables = users.trainable_variables + items.trainable_variables

        @tf.function
        def step(u, v):
            with tf.GradientTape() as tape:
                logits = tf.matmul(users(u, training=True), items(v, training=True),
                                   transpose_b=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    tf.range(tf.shape(u)[0]), logits))
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(step(*next(it))), params["steps"])
        opt = keras.optimizers.SGD(0.05)  # after the trace: the same step under SGD
        step = tf.function(step.python_function)
        kept = []
        for _ in range(13):
            t = time.perf_counter()
            float(step(*next(it)))
            kept.append(round((time.perf_counter() - t) * 1e3, 3))
        params["sgd_step_ms"] = kept[3:]
    elif case == "save_weights_every_4_loop":
        params = {"batch": 128, "features": 512, "width": 1024, "every": 4, "steps": 12}
        model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024, "relu"),
                                  keras.layers.Dense(1024, "relu"), keras.layers.Dense(10)])
        step = build_train_step(tf, model, mse, keras.optimizers.Adam())
        x = rng.random((128 * 8, 512), np.float32)
        y = rng.random((128 * 8, 10), np.float32)
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128).prefetch(2))
        path = os.path.join(logdir, "ckpt.weights.h5")
        plain: list[float] = []

        def one(i):
            t = time.perf_counter()
            float(step(*next(it)))
            if i % 4 == 0:
                model.save_weights(path)
            else:
                plain.append(time.perf_counter() - t)

        params["measured_step_ms"] = timed_then_profile(one, params["steps"],
                                                        marker=train_root)
        params["steps_without_save_ms"] = [round(t * 1e3, 3) for t in plain[2:]]
    elif case == "gnn_segment_sum_loop":
        params = {"nodes": 20_000, "edges": 200_000, "features": 64, "layers": 3,
                  "steps": 10}
        nodes = tf.constant(rng.random((20_000, 64), np.float32))
        senders = tf.constant(rng.integers(0, 20_000, 200_000).astype("int32"))
        receivers = tf.constant(rng.integers(0, 20_000, 200_000).astype("int32"))
        target = tf.constant(rng.random((20_000, 1), np.float32))
        layers = [keras.layers.Dense(64, "relu") for _ in range(3)]
        head = keras.layers.Dense(1)
        for lay in layers:
            lay.build((None, 128))
        head.build((None, 64))
        variables = [v for lay in [*layers, head] for v in lay.trainable_variables]
        opt = keras.optimizers.Adam(1e-3)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                h = nodes
                for lay in layers:
                    msg = tf.math.unsorted_segment_sum(tf.gather(h, senders), receivers,
                                                       20_000)
                    h = lay(tf.concat([h, msg / 10.0], axis=1))
                loss = tf.reduce_mean(tf.square(head(h) - target))
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        params["measured_step_ms"] = timed_then_profile(lambda i: float(step()),
                                                        params["steps"])
    elif case == "ram_budget_augment_nondet_loop":
        params = {"images": 512, "size": 96, "crop": 80, "batch": 32,
                  "ram_budget_mib": 64, "steps": 12}
        images = rng.random((512, 96, 96, 3), np.float32)
        labels = rng.integers(0, 10, 512).astype("int64")

        def augment(k, img, lab):
            seed = tf.stack([k, tf.constant(7, tf.int64)])
            img = tf.image.stateless_random_flip_left_right(img, seed)
            img = tf.image.stateless_random_brightness(img, 0.2, seed + 1)
            img = tf.image.stateless_random_contrast(img, 0.8, 1.2, seed + 2)
            img = tf.image.stateless_random_crop(img, (80, 80, 3), seed + 3)
            return img, lab

        options = tf.data.Options()
        options.autotune.ram_budget = 64 * 1024 * 1024
        ds = (tf.data.Dataset.from_tensor_slices((images, labels)).repeat().enumerate()
              .map(lambda k, el: augment(k, *el), num_parallel_calls=tf.data.AUTOTUNE,
                   deterministic=False)
              .batch(32).prefetch(tf.data.AUTOTUNE).with_options(options))
        model = keras.Sequential([
            keras.Input((80, 80, 3)), keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
        step = build_train_step(tf, model, None, keras.optimizers.SGD(0.01))
        it = iter(ds)
        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(step(*next(it))), params["steps"], marker=train_root)
    elif case == "shared_encoder_siamese_fit":
        params = {"batch": 256, "features": 256, "steps": 12}
        n = 256 * 8
        a = rng.random((n, 256), np.float32)
        b = rng.random((n, 256), np.float32)
        y = rng.integers(0, 2, (n, 1)).astype("float32")
        encoder = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, "relu"),
                                    keras.layers.Dense(512, "relu"), keras.layers.Dense(128)])
        in_a, in_b = keras.Input((256,), name="a"), keras.Input((256,), name="b")
        ea, eb = encoder(in_a), encoder(in_b)
        h = keras.layers.Concatenate()([keras.ops.abs(ea - eb), ea * eb])
        out = keras.layers.Dense(1)(keras.layers.Dense(64, activation="relu")(h))
        model = keras.Model({"a": in_a, "b": in_b}, out)
        model.compile(optimizer="adam",
                      loss=keras.losses.BinaryCrossentropy(from_logits=True))
        ds = (tf.data.Dataset.from_tensor_slices(({"a": a, "b": b}, y)).repeat().batch(256)
              .prefetch(2))
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "predict_every_4_loop":
        params = {"batch": 128, "features": 64, "width": 512, "every": 4,
                  "predict_rows": 4096, "predict_batch": 256, "steps": 12}
        x = rng.random((4096, 64), np.float32)
        y = rng.random((4096, 1), np.float32)
        model = mlp(64, 512)
        step = build_train_step(tf, model, mse, keras.optimizers.Adam(1e-3))
        it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128).prefetch(2))
        model.predict(x, batch_size=256, verbose=0)  # predict's function traced before
        plain: list[float] = []
        with_predict: list[float] = []

        def one(i):
            t = time.perf_counter()
            float(step(*next(it)))
            if i % 4 == 0:
                model.predict(x, batch_size=256, verbose=0)
                with_predict.append(time.perf_counter() - t)
            else:
                plain.append(time.perf_counter() - t)

        params["measured_step_ms"] = timed_then_profile(one, params["steps"],
                                                        marker=train_root)
        params["steps_with_predict_ms"] = [round(t * 1e3, 3) for t in with_predict[1:]]
        params["steps_without_predict_ms"] = [round(t * 1e3, 3) for t in plain[2:]]
    elif case == "from_generator_slow_loop":
        params = {"batch": 128, "features": 64, "sleep_ms": 15, "steps": 12}

        def gen():
            g = np.random.default_rng(1)
            while True:
                xb = g.normal(size=(128, 64)).astype("float32")
                xb = (xb - xb.mean(0)) / (xb.std(0) + 1e-6)
                time.sleep(0.015)
                yield xb, xb[:, :1].copy()

        ds = tf.data.Dataset.from_generator(gen, output_signature=(
            tf.TensorSpec((128, 64), tf.float32), tf.TensorSpec((128, 1), tf.float32)))
        ds = ds.prefetch(tf.data.AUTOTUNE)
        model = mlp(64, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(step(*next(it))), params["steps"], marker=train_root)
        t = time.perf_counter()
        batches = [next(it) for _ in range(8)]
        params["input_only_ms_per_batch"] = round((time.perf_counter() - t) / 8 * 1e3, 3)
        t = time.perf_counter()
        for xb, yb in batches:
            float(step(xb, yb))
        params["step_only_ms"] = round((time.perf_counter() - t) / 8 * 1e3, 3)
    elif case == "reduce_retracing_batches_loop":
        params = {"features": 64, "width": 512, "warm_batch": 64, "steps": 10}
        model = mlp(64, 512)
        opt = keras.optimizers.SGD(0.01)
        traces: list[int] = []

        @tf.function(reduce_retracing=True)
        def step(xb, yb):
            traces.append(1)
            with tf.GradientTape() as tape:
                loss = mse(yb, model(xb, training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        sizes = {i: (64 if i < 3 else 64 + 16 * (i - 2)) for i in range(13)}
        data = {n: (tf.constant(rng.random((n, 64), np.float32)),
                    tf.constant(rng.random((n, 1), np.float32))) for n in set(sizes.values())}
        trace_at: list[int] = []

        def one(i):
            n = len(traces)
            float(step(*data[sizes[i]]))
            if len(traces) > n:
                trace_at.append(i)

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
        params["batch_sizes"] = [sizes[i] for i in range(3, 13)]
        params["traced_at_steps"] = trace_at
        params["traces"] = len(traces)
    elif case == "jit_spe4_fit":
        params = {"batch": 128, "features": 256, "width": 1024, "steps_per_execution": 4,
                  "steps": 16}
        x = rng.random((128 * 8, 256), np.float32)
        y = rng.random((128 * 8, 1), np.float32)
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, "relu"),
                                  keras.layers.Dense(1024, "relu"), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse", jit_compile=True, steps_per_execution=4)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(128).prefetch(2)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=8, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_execution_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_step_ms"] = [round(t * 1e3 / 4, 3) for t in times]
    elif case == "unbatch_rebatch_loop":
        params = {"rows": 5000, "features": 64, "batch": 256, "rebatch": 64, "steps": 16}
        x = rng.random((5000, 64), np.float32)
        y = rng.random((5000, 1), np.float32)

        def standardise(xb, yb):
            mean, var = tf.nn.moments(xb, axes=[0])
            return (xb - mean) / tf.sqrt(var + 1e-6), yb

        ds = (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
              .batch(100, drop_remainder=False).map(standardise).unbatch().shuffle(2048)
              .batch(256).rebatch(64).prefetch(2))
        model = mlp(64, 512)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        it = iter(ds)
        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(step(*next(it))), params["steps"], marker=train_root)
    elif case == "gan_custom_train_step_fit":
        params = {"batch": 64, "latent": 64, "data": 128, "steps": 12}

        class GAN(keras.Model):
            def __init__(self):
                super().__init__()
                self.gen = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, "relu"),
                                             keras.layers.Dense(128)])
                self.disc = keras.Sequential([keras.Input((128,)),
                                              keras.layers.Dense(256, "relu"),
                                              keras.layers.Dense(1)])
                self.d_opt = keras.optimizers.Adam(1e-4)
                self.g_opt = keras.optimizers.Adam(1e-4)
                self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

            def call(self, z):
                return self.gen(z)

            def train_step(self, real):
                n = tf.shape(real)[0]
                z = tf.random.normal((n, 64))
                with tf.GradientTape() as tape:
                    fake = self.gen(z, training=True)
                    d_loss = (self.bce(tf.ones((n, 1)), self.disc(real, training=True))
                              + self.bce(tf.zeros((n, 1)), self.disc(fake, training=True)))
                g = tape.gradient(d_loss, self.disc.trainable_variables)
                self.d_opt.apply_gradients(zip(g, self.disc.trainable_variables, strict=True))
                z = tf.random.normal((n, 64))
                with tf.GradientTape() as tape:
                    g_loss = self.bce(tf.ones((n, 1)),
                                      self.disc(self.gen(z, training=True), training=True))
                g = tape.gradient(g_loss, self.gen.trainable_variables)
                self.g_opt.apply_gradients(zip(g, self.gen.trainable_variables, strict=True))
                return {"d_loss": d_loss, "g_loss": g_loss}

        model = GAN()
        model.compile()
        data = rng.normal(size=(64 * 32, 128)).astype("float32")
        ds = tf.data.Dataset.from_tensor_slices(data).repeat().batch(64).prefetch(2)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        profile(lambda: model.fit(ds, steps_per_epoch=params["steps"], epochs=1, **kw))
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "mha_python_mask_loop":
        params = {"batch": 32, "tokens": 64, "dim": 128, "heads": 4, "steps": 12}
        inp = keras.Input((64, 128))
        mask_in = keras.Input((64, 64), dtype="bool")
        att = keras.layers.MultiHeadAttention(4, 32)(inp, inp, attention_mask=mask_in)
        h = keras.layers.LayerNormalization()(inp + att)
        out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model([inp, mask_in], out)
        opt = keras.optimizers.Adam(1e-3)
        xs = rng.normal(size=(32, 64, 128)).astype("float32")
        ys = rng.normal(size=(32, 1)).astype("float32")

        @tf.function
        def step(xb, mb, yb):
            with tf.GradientTape() as tape:
                loss = mse(yb, model([xb, mb], training=True))
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        def one(i):
            lengths = rng.integers(16, 65, size=32)
            valid = np.arange(64)[None, :] < lengths[:, None]  # (batch, tokens)
            mask = valid[:, :, None] & valid[:, None, :]  # built in Python each step
            float(step(xs, mask, ys))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "tape_outside_function_loop":
        params = {"batch": 128, "width": 512, "steps": 12}
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, "relu"),
                                  keras.layers.Dense(512, "relu"), keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.01)
        it = iter(random_batches(128 * 16, 256, 128))

        @tf.function
        def forward(xb, yb):
            return mse(yb, model(xb, training=True))

        def one(i):
            xb, yb = next(it)
            with tf.GradientTape() as tape:  # eager tape around the compiled forward
                loss = forward(xb, yb)
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            float(loss)

        params["measured_step_ms"] = timed_then_profile(one, params["steps"])
    elif case == "causal_conv1d_long_fit":
        params = {"batch": 8, "length": 4096, "channels": 32, "steps": 10}
        layers = [keras.Input((4096, 8))]
        for d in (1, 2, 4, 8):
            layers.append(keras.layers.Conv1D(32, 3, padding="causal", dilation_rate=d,
                                              activation="relu"))
        layers += [keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)]
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        x = rng.normal(size=(64, 4096, 8)).astype("float32")
        y = rng.normal(size=(64, 1)).astype("float32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8).prefetch(2)
        params["measured_step_ms"] = fit_timed_then_profile(model, ds, params["steps"])
    elif case == "tnp_ops_step_loop":
        import tensorflow.experimental.numpy as tnp

        params = {"batch": 128, "features": 256, "hidden": 512, "steps": 12}
        w1 = tf.Variable(rng.normal(size=(256, 512)).astype("float32") * 0.05)
        w2 = tf.Variable(rng.normal(size=(512, 1)).astype("float32") * 0.05)
        it = iter(random_batches(128 * 16, 256, 128))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                h = tnp.tanh(tnp.matmul(xb, w1))
                pred = tnp.matmul(h, w2)
                loss = tnp.mean(tnp.square(tnp.clip(pred - yb, -5.0, 5.0)))
            g1, g2 = tape.gradient(loss, [w1, w2])
            w1.assign_sub(0.01 * g1)
            w2.assign_sub(0.01 * g2)
            return loss

        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(step(*next(it))), params["steps"])
    elif case == "cache_take_partial_loop":
        params = {"batch": 64, "batches": 16, "take": 4, "sleep_ms": 2, "steps": 12}
        x = rng.random((64 * 16, 128), np.float32)
        y = rng.random((64 * 16, 1), np.float32)
        base = py_sleep_map(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), 0.002,
                            (None, 128))
        partial = base.cache().take(4)  # never read to its end: the cache never completes
        model = mlp(128, 256)
        step = build_train_step(tf, model, mse, keras.optimizers.SGD(0.01))
        state = {"it": None}

        def one(i):
            if i % 4 == 0:
                state["it"] = iter(partial)
            float(step(*next(state["it"])))

        params["measured_step_ms"] = timed_then_profile(one, params["steps"], warm=4)
    elif case == "repeated_fit_calls":
        params = {"batch": 64, "calls": 4, "steps_per_call": 4, "steps": 16}
        model = mlp(128, 256)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        ds = random_batches(64 * 16, 128, 64)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()
        call_ms: list[float] = []

        def calls() -> None:
            for _ in range(4):
                t = time.perf_counter()
                model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
                call_ms.append(round((time.perf_counter() - t) * 1e3, 3))

        profile(calls)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
        params["measured_fit_call_ms"] = call_ms
    elif case == "unfreeze_recompile_fit":
        params = {"batch": 64, "frozen_steps": 6, "unfrozen_steps": 6, "steps": 12}
        backbone = keras.Sequential([keras.Input((128,)), keras.layers.Dense(512, "relu"),
                                     keras.layers.Dense(512, "relu")])
        model = keras.Sequential([backbone, keras.layers.Dense(1)])
        backbone.trainable = False
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        ds = random_batches(64 * 16, 128, 64)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}
        model.fit(ds, steps_per_epoch=4, epochs=1, **kw)
        times.clear()

        def two_phases() -> None:
            model.fit(ds, steps_per_epoch=6, epochs=1, **kw)
            backbone.trainable = True
            model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="mse")
            model.fit(ds, steps_per_epoch=6, epochs=1, **kw)

        profile(two_phases)
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "conv3d_video_fit":
        params = {"batch": 8, "clip": [8, 32, 32, 3], "steps": 10}
        model = keras.Sequential([
            keras.Input((8, 32, 32, 3)),
            keras.layers.Conv3D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling3D((1, 2, 2)),
            keras.layers.Conv3D(32, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(5)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.random((8 * 8, 8, 32, 32, 3), np.float32)
        y = rng.integers(0, 5, (8 * 8,))
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8).prefetch(2)
        params["measured_step_ms"] = fit_timed_then_profile(model, ds, params["steps"])
    elif case == "trials_clear_session_fit":
        params = {"batch": 64, "trials": [128, 256, 512], "steps_per_trial": 5, "steps": 15}
        ds = random_batches(64 * 16, 128, 64)
        times = []
        kw = {"verbose": 0, "callbacks": [keras3_callback_class()(), batch_timer(times)]}

        def trial(width: int) -> None:
            keras.backend.clear_session()
            model = mlp(128, width)
            model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
            model.fit(ds, steps_per_epoch=5, epochs=1, **kw)

        trial(64)  # warm: the first trial's own set-up outside the trace
        times.clear()
        profile(lambda: [trial(w) for w in params["trials"]])
        params["measured_step_ms"] = [round(t * 1e3, 3) for t in times]
    elif case == "sampled_softmax_loop":
        params = {"batch": 128, "vocab": 50_000, "dim": 128, "sampled": 64, "steps": 12}
        vocab, dim = 50_000, 128

        def sampled_softmax_step(opt: Any) -> Any:
            emb = keras.layers.Embedding(vocab, dim)
            tower = keras.layers.Dense(dim, "relu")
            emb.build((None,))
            tower.build((None, dim))
            out_w = tf.Variable(tf.random.normal((vocab, dim), stddev=0.02))
            out_b = tf.Variable(tf.zeros((vocab,)))
            variables = [*emb.trainable_variables, *tower.trainable_variables, out_w, out_b]

            @tf.function
            def sampled_step(ctx: Any, target: Any) -> Any:
                with tf.GradientTape() as tape:
                    h = tower(tf.reduce_mean(emb(ctx), axis=1))
                    loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(
                        out_w, out_b, target, h, num_sampled=64, num_classes=vocab))
                grads = tape.gradient(loss, variables)
                opt.apply_gradients(zip(grads, variables, strict=True))
                return loss

            return sampled_step

        ctx_all = rng.integers(0, vocab, (128 * 16, 8))
        tgt_all = rng.integers(0, vocab, (128 * 16, 1))
        ds = tf.data.Dataset.from_tensor_slices((ctx_all, tgt_all)).repeat().batch(
            128).prefetch(2)
        it = iter(ds)
        adam_step = sampled_softmax_step(keras.optimizers.Adam(1e-3))
        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(adam_step(*next(it))), params["steps"])
        # the same step under SGD, untraced: its update touches only the sampled rows
        sgd_step = sampled_softmax_step(keras.optimizers.SGD(0.05))
        sgd_ms = []
        for _ in range(3 + params["steps"]):
            t = time.perf_counter()
            float(sgd_step(*next(it)))
            sgd_ms.append(round((time.perf_counter() - t) * 1e3, 3))
        params["sgd_step_ms"] = sgd_ms[3:]
    elif case == "distillation_teacher_loop":
        params = {"batch": 256, "temperature": 4.0, "steps": 12}
        teacher = keras.Sequential([keras.Input((784,)), keras.layers.Dense(2048, "relu"),
                                    keras.layers.Dense(2048, "relu"), keras.layers.Dense(10)])
        teacher.trainable = False
        student = keras.Sequential([keras.Input((784,)), keras.layers.Dense(128, "relu"),
                                    keras.layers.Dense(10)])
        opt = keras.optimizers.Adam(1e-3)
        xs = rng.random((256 * 8, 784)).astype("float32")
        ys = rng.integers(0, 10, (256 * 8,))
        it = iter(tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(256)
                  .prefetch(2))

        @tf.function
        def distill_step(xb: Any, yb: Any) -> Any:
            t_logits = teacher(xb, training=False)
            with tf.GradientTape() as tape:
                s_logits = student(xb, training=True)
                t_prob = tf.nn.softmax(t_logits / 4.0)
                soft = tf.reduce_mean(tf.reduce_sum(t_prob * (
                    tf.nn.log_softmax(t_logits / 4.0) - tf.nn.log_softmax(s_logits / 4.0)),
                    -1)) * 16.0
                hard = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    yb, s_logits))
                loss = 0.1 * hard + 0.9 * soft
            g = tape.gradient(loss, student.trainable_variables)
            opt.apply_gradients(zip(g, student.trainable_variables, strict=True))
            return loss

        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(distill_step(*next(it))), params["steps"])
    elif case == "greedy_decode_token_loop":
        params = {"batch": 16, "vocab": 1000, "units": 256, "tokens": 40}
        emb = keras.layers.Embedding(1000, 128)
        cell = keras.layers.GRUCell(256)
        head = keras.layers.Dense(1000)

        @tf.function
        def decode_one(tok: Any, state: Any) -> Any:
            out, new_state = cell(emb(tok), [state])
            nxt = tf.argmax(head(out), axis=-1, output_type=tf.int32)
            return nxt, new_state[0]

        dec = {"tok": tf.zeros((16,), tf.int32), "state": tf.zeros((16, 256))}

        def one_token(i: int) -> None:
            dec["tok"], dec["state"] = decode_one(dec["tok"], dec["state"])
            if bool(tf.reduce_all(dec["tok"] == 999)):  # the end token: never, here
                dec["tok"] = tf.zeros((16,), tf.int32)

        params["measured_step_ms"] = timed_then_profile(one_token, params["tokens"])
    elif case == "contrastive_two_views_loop":
        params = {"batch": 128, "image": 32, "temperature": 0.2, "steps": 10}
        imgs = rng.random((1024, 36, 36, 3)).astype("float32")

        def two_views(img: Any) -> Any:
            def view(x: Any) -> Any:
                x = tf.image.random_crop(x, (32, 32, 3))
                x = tf.image.random_flip_left_right(x)
                return tf.clip_by_value(tf.image.random_brightness(x, 0.3), 0.0, 1.0)

            return view(img), view(img)

        it = iter(tf.data.Dataset.from_tensor_slices(imgs).repeat().shuffle(1024)
                  .map(two_views, num_parallel_calls=tf.data.AUTOTUNE).batch(128)
                  .prefetch(2))
        encoder = keras.Sequential([
            keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, 2, activation="relu"),
            keras.layers.Conv2D(64, 3, 2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(128, "relu"),
            keras.layers.Dense(64)])
        opt = keras.optimizers.Adam(1e-3)

        @tf.function
        def contrastive_step(v1: Any, v2: Any) -> Any:
            with tf.GradientTape() as tape:
                z = tf.math.l2_normalize(encoder(tf.concat([v1, v2], 0), training=True), 1)
                sim = tf.matmul(z, z, transpose_b=True) / 0.2 - tf.eye(256) * 1e9
                labels = tf.concat([tf.range(128, 256), tf.range(0, 128)], 0)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels, sim))
            g = tape.gradient(loss, encoder.trainable_variables)
            opt.apply_gradients(zip(g, encoder.trainable_variables, strict=True))
            return loss

        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(contrastive_step(*next(it))), params["steps"])
    elif case == "fake_quant_qat_loop":
        params = {"batch": 256, "widths": [512, 1024, 1024, 10], "bits": 8, "steps": 12}
        widths = [512, 1024, 1024, 10]
        ws = [tf.Variable(tf.random.normal((a, b), stddev=0.03))
              for a, b in zip(widths[:-1], widths[1:], strict=True)]
        bs = [tf.Variable(tf.zeros((b,))) for b in widths[1:]]
        lo = [tf.Variable(-1.0) for _ in range(2 * len(ws))]
        hi = [tf.Variable(1.0) for _ in range(2 * len(ws))]
        variables = [*ws, *bs, *lo, *hi]
        opt = keras.optimizers.SGD(0.01)
        xs = rng.random((256 * 8, 512)).astype("float32")
        ys = rng.integers(0, 10, (256 * 8,))
        it = iter(tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().batch(256)
                  .prefetch(2))

        @tf.function
        def qat_step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                h = xb
                for k, (w, b) in enumerate(zip(ws, bs, strict=True)):
                    wq = tf.quantization.fake_quant_with_min_max_vars(w, lo[2 * k],
                                                                      hi[2 * k], num_bits=8)
                    h = tf.matmul(h, wq) + b
                    if k < len(ws) - 1:
                        h = tf.nn.relu(h)
                    h = tf.quantization.fake_quant_with_min_max_vars(
                        h, lo[2 * k + 1], hi[2 * k + 1], num_bits=8)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, h))
            g = tape.gradient(loss, variables)
            opt.apply_gradients(zip(g, variables, strict=True))
            return loss

        params["measured_step_ms"] = timed_then_profile(
            lambda i: float(qat_step(*next(it))), params["steps"])
    elif case == "unet_segmentation_fit":
        params = {"batch": 16, "image": [64, 64, 3], "classes": 4, "steps": 10}
        inp = keras.Input((64, 64, 3))
        c1 = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
        p1 = keras.layers.MaxPooling2D()(c1)
        c2 = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(p1)
        p2 = keras.layers.MaxPooling2D()(c2)
        b = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(p2)
        u2 = keras.layers.Conv2DTranspose(32, 2, strides=2, padding="same")(b)
        c3 = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(
            keras.layers.Concatenate()([u2, c2]))
        u1 = keras.layers.Conv2DTranspose(16, 2, strides=2, padding="same")(c3)
        c4 = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(
            keras.layers.Concatenate()([u1, c1]))
        model = keras.Model(inp, keras.layers.Conv2D(4, 1)(c4))
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.MeanIoU(4, sparse_y_pred=False)])
        x = rng.random((16 * 8, 64, 64, 3), np.float32)
        y = rng.integers(0, 4, (16 * 8, 64, 64))
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16).prefetch(2)
        params["measured_step_ms"] = fit_timed_then_profile(model, ds, params["steps"])
    else:
        raise SystemExit(f"unknown case {case!r}")
    return params


# --- the driver ------------------------------------------------------------------------------


def _versions(tf_python: str) -> dict[str, str]:
    """The workload's TensorFlow, Keras and numpy (from `tf_python`), and this process's
    XProf (which answers for every capture)."""
    code = ("import json, tensorflow as tf, keras, numpy\n"
            "print(json.dumps({'tensorflow': tf.__version__, 'keras': keras.__version__,"
            " 'numpy': numpy.__version__}))")
    try:
        out = subprocess.run([tf_python, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        found = json.loads(out.stdout.strip().splitlines()[-1])
        import xprof.version as xv

        return {**found, "xprof": getattr(xv, "__version__", "?")}
    except Exception as exc:  # versions are provenance, not a reason to fail the recording
        return {"error": str(exc)[:200]}


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def record(case: str, out: pathlib.Path, tf_version: str,
           tf_python: str = sys.executable) -> pathlib.Path:
    description, env = CASES[case]
    stem = f"generated__tf{'.'.join(tf_version.split('.')[:2])}cpu__{case}"
    with tempfile.TemporaryDirectory(prefix="tfobs-rec-") as logdir:
        proc = subprocess.run(
            [tf_python, __file__, "--child", case, logdir],
            env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{case}: workload failed\n{proc.stderr[-3000:]}")
        params = json.loads(proc.stdout.strip().splitlines()[-1])
        # TensorBoard's callback writes under <logdir>/train
        found = glob.glob(os.path.join(logdir, "**", "plugins", "profile", "*", "*.xplane.pb"),
                          recursive=True)
        if len(found) != 1:
            raise SystemExit(f"{case}: expected one .xplane.pb, found {found}")
        (out / "captures").mkdir(parents=True, exist_ok=True)
        dest = out / "captures" / f"{stem}.xplane.pb"
        shutil.copyfile(found[0], dest)
    size = dest.stat().st_size
    if size > MAX_BYTES:
        print(f"warning: {dest.name} is {size / 1e6:.1f} MB (over 20 MB)", file=sys.stderr)
    sys.path.insert(0, str(ROOT))
    from tests.support.recorded import save_answers, save_provenance

    save_answers(dest, out / "xprof-2.24.2")
    save_provenance(out / "provenance", dest, {
        "case": case, "what_ran": description, "environment": env, "parameters": params,
        "host_cpu": _cpu_model(), "python": platform.python_version(),
        "recorder": "tools/record_tf_captures.py"})
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "tests" / "data"))
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--tf-python", default=sys.executable,
                   help="the Python whose TensorFlow runs the workloads (another version's "
                        "venv, e.g. .venv-compat/bin/python); XProf's answers come from this "
                        "one")
    p.add_argument("--child", nargs=2, metavar=("CASE", "LOGDIR"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        params = _child(*args.child)
        print(json.dumps(params), flush=True)
        return 0
    versions = _versions(args.tf_python)
    out = pathlib.Path(args.out)
    for case in [c for c in args.cases.split(",") if c]:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")
        t0 = time.monotonic()
        dest = record(case, out, versions.get("tensorflow", "2.21"), args.tf_python)
        prov = out / "provenance" / dest.name.replace(".xplane.pb", ".json")
        data = json.loads(prov.read_text())
        data["versions"] = versions
        prov.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{case}: {dest} {dest.stat().st_size / 1e6:.2f} MB "
              f"in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
