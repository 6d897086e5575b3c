"""The frameworks' out-of-memory texts in a job's output tail (`packer.oom_texts`): each text as
its project prints it, the size it names in bytes, and lines that only look like one."""
from __future__ import annotations

import pytest

from packer.oom_texts import (FRAMEWORKS, MAX_LINE, OomText, find_oom, format_size, render, size_bytes,
                              tf_tensor_bytes)

MIB, GIB = 1024**2, 1024**3

# (id, output tail, framework, requested bytes, text id)
FOUND = [
    ("torch-2.5", """\
Epoch 3:  41%|####      | 410/1000 [02:11<03:09,  3.11it/s, loss=1.93]
Traceback (most recent call last):
  File "/home/ana/train.py", line 88, in <module>
    loss = model(**batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.00 GiB. GPU 0 has a total capacity of 9.50 GiB \
of which 4.31 GiB is free. Including non-PyTorch memory, this process has 5.19 GiB memory in use. Of the allocated \
memory 4.87 GiB is allocated by PyTorch, and 52.11 MiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  \
See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
""", "pytorch", 10 * GIB, "torch-native"),
    ("torch-1.13", """\
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total capacity; \
6.12 GiB already allocated; 11.06 MiB free; 6.20 GiB reserved in total by PyTorch) If reserved memory is >> \
allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management \
and PYTORCH_CUDA_ALLOC_CONF
""", "pytorch", 20 * MIB, "torch-native"),
    ("torch-1.x-runtimeerror", "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB "
     "total capacity; 130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)\n",
     "pytorch", 36 * MIB, "torch-native"),
    ("torch-bytes", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512 bytes. GPU 1 has a total "
     "capacity of 10.00 GiB of which 0 bytes is free.\n", "pytorch", 512, "torch-native"),
    ("torch-kib", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 KiB. GPU 0 has\n",
     "pytorch", 2560, "torch-native"),
    ("torch-async", """\
Traceback (most recent call last):
  File "run.py", line 9, in <module>
torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)
Currently allocated     : 9.43 GiB
Requested               : 640.00 MiB
Device limit            : 11.59 GiB
Free (according to CUDA): 7.12 MiB
PyTorch limit (set by user-supplied memory fraction)
                        : 17179869184.00 GiB
""", "pytorch", 640 * MIB, "torch-async"),
    ("torch-1eb", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n",
     "pytorch", None, "torch-1eb"),
    ("jax", """\
2026-11-30 10:01:12.123456: W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran out \
of memory trying to allocate 20.00GiB (rounded to 21474836480)requested by op
Traceback (most recent call last):
  File "/home/ana/train_jax.py", line 51, in <module>
    state, loss = train_step(state, batch)
jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 21474836480 bytes.
--------------------
For simplicity, JAX has removed its internal frames from the traceback of the following exception. Set \
JAX_TRACEBACK_FILTERING=off to include these.
""", "jax", 21474836480, "xla"),
    ("jax-readable", "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
     "8.00GiB.\n", "jax", 8 * GIB, "xla-readable"),
    ("tf-eager", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
     "__wrapped__MatMul_device_/job:localhost/replica:0/task:0/device:GPU:0}} OOM when allocating tensor with "
     "shape[50000,50000] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc "
     "[Op:MatMul]\n", "tensorflow", 50000 * 50000 * 4, "tf-tensor"),
    ("tf-graph", """\
tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:

Detected at node 'model/conv2d/Conv2D' defined at (most recent call last):
    File "train.py", line 20, in <module>
2 root error(s) found.
  (0) RESOURCE_EXHAUSTED:  OOM when allocating tensor with shape[32,1024,64,64] and type half on \
/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc
\t [[{{node model/conv2d/Conv2D}}]]
Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom \
to RunOptions for current allocation info. This isn't available when running in Eager mode.
""", "tensorflow", 32 * 1024 * 64 * 64 * 2, "tf-tensor"),
    ("tf-1.x-no-type", "ResourceExhaustedError: OOM when allocating tensor with shape[128,64,32,32]\n",
     "tensorflow", None, "tf-tensor"),
    ("tf-driver", "2026-11-30 10:00:01.000000: I tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:753] "
     "failed to allocate 2.00G (2147483648 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n",
     "tensorflow", 2 * GIB, "cuda-driver"),
    ("cuda-sample", "CUDA error at vectorAdd.cu:71 code=2(cudaErrorMemoryAllocation) \"cudaMalloc((void **)&d_A, "
     "size)\"\n", "cuda", None, "cuda-runtime"),
    ("torch-c10-check", "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
     "reported at some other API call, so the stacktrace below might be incorrect.\n", "cuda", None, "cuda-runtime"),
    ("cublas", "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n",
     "cuda", None, "cublas"),
    ("cudnn", "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED\n", "cuda", None, "cudnn"),
    ("tf-cudnn", "2026-11-30 E tensorflow/stream_executor/cuda/cuda_dnn.cc:361] Could not create cudnn handle: "
     "CUDNN_STATUS_ALLOC_FAILED\n", "tensorflow", None, "cudnn"),
]


@pytest.mark.parametrize("tail,framework,asked,text_id", [f[1:] for f in FOUND], ids=[f[0] for f in FOUND])
def test_each_frameworks_text_is_recognised_with_its_size(tail, framework, asked, text_id):
    got = find_oom(tail)
    assert got is not None
    assert (got.framework, got.requested_bytes, got.text_id) == (framework, asked, text_id)
    assert got.line in tail


NOT_OOM = [
    ("memory-report", "step 200: memory allocated 5.20 GiB, reserved 6.00 GiB; max memory 7.1 GiB\n"),
    ("empty-cache-advice", "Tip: call torch.cuda.empty_cache() to free memory between epochs\n"),
    ("bfc-warning-only", "2026-11-30 W tensorflow/tsl/framework/bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of "
     "memory trying to allocate 2.15GiB with freed_by_count=0. The caller indicates that this is not a failure, but "
     "this may mean that there could be performance gains if more memory were available.\n"),
    ("xla-host-memory", "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 1024 bytes. "
     "Please set the environment variable XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB\n"),
    ("cpu-allocator", "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: not enough "
     "memory: you tried to allocate 1073741824 bytes.\n"),
    ("cudnn-workspace", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE\n"),
    ("other-cuda-error", "RuntimeError: CUDA error: device-side assert triggered\n"),
    ("slurm-oom-kill", "slurmstepd: error: Detected 1 oom_kill event in StepId=12.batch. Some of the step tasks have "
                       "been OOM Killed.\n"),
    ("empty", ""),
]


@pytest.mark.parametrize("tail", [n[1] for n in NOT_OOM], ids=[n[0] for n in NOT_OOM])
def test_lines_that_only_look_like_an_oom_are_not_one(tail):
    assert find_oom(tail) is None


def test_a_users_echo_is_recognised_all_the_same_it_is_only_the_jobs_word():
    """Nothing tells an echoed line from a framework's: the match carries no trust of its own
    (the caller labels it "reported", `packer.oom_restart`)."""
    got = find_oom("+ echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0'\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0\n")
    assert got is not None and got.requested_bytes == 80 * GIB


def test_the_last_text_in_the_tail_wins():
    tail = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has\n"
            "retrying with a smaller batch\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has\n"
            "  during handling of the above exception\n")
    assert find_oom(tail).requested_bytes == 3 * GIB


def test_a_huge_line_is_cut_and_read_in_bounded_time():
    line = "x" * (MAX_LINE * 50) + " CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0\n"
    assert find_oom(line) is None  # past MAX_LINE characters nothing is read
    assert find_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 "
                    + "y" * MAX_LINE * 4 + "\n").requested_bytes == GIB


@pytest.mark.parametrize("number,unit,expected", [("20.00", "MiB", 20 * MIB), ("2", "GiB", 2 * GIB),
                                                  ("512", "bytes", 512), ("1.50", "KiB", 1536), ("7", "B", 7)])
def test_sizes_in_bytes(number, unit, expected):
    assert size_bytes(number, unit) == expected


@pytest.mark.parametrize("number,unit", [("2", "GB"), ("nan", "MiB"), ("x", "MiB"), ("1", "")])
def test_a_size_that_cannot_be_read_is_refused_not_guessed(number, unit):
    with pytest.raises(ValueError):
        size_bytes(number, unit)


@pytest.mark.parametrize("shape,dtype,expected", [("[2,3]", "float", 24), ("[10]", "bfloat16", 20),
                                                  ("[4,4]", "complex128", 256), ("[?,3]", "float", None),
                                                  ("[2,3]", "string", None), ("[2,3]", None, None), ("[]", "float", None)])
def test_tf_tensor_bytes(shape, dtype, expected):
    assert tf_tensor_bytes(shape, dtype) == expected


def test_oom_text_refuses_bad_values():
    with pytest.raises(ValueError):
        OomText("mxnet", None, "x")
    with pytest.raises(ValueError):
        OomText("pytorch", 0, "x")


@pytest.mark.parametrize("n,text", [(512, "512 bytes"), (1024, "1024 bytes"), (2560, "2.50 KiB"),
                                    (20 * MIB, "20.00 MiB"), (GIB, "1024.00 MiB"), (10 * GIB, "10.00 GiB")])
def test_format_size_is_pytorchs(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_rendered_text_is_recognised_as_its_framework(framework):
    asked = 10 * GIB
    got = find_oom(render(framework, asked, 5 * GIB, 10 * GIB))
    assert got is not None and got.framework == framework
    if framework != "cuda":
        assert got.requested_bytes == asked
    with pytest.raises(ValueError):
        render(framework, 0, 0, 10 * GIB)


def test_render_refuses_an_unknown_framework():
    with pytest.raises(ValueError):
        render("caffe", GIB, 0, GIB)
