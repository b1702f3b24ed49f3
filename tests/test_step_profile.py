"""bench/step_profile.py's reading of a profiler trace: each operation's own time, by kind, from
the busiest GPU stream (a trace shaped like jax.profiler's on a GPU, written here)."""

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))

import step_profile  # noqa: E402


def write_trace(trace_dir: Path, events: list[dict]) -> None:
    run = trace_dir / "plugins" / "profile" / "2026_11_26_00_00_00"
    run.mkdir(parents=True)
    with gzip.open(run / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)


def named(kind: str, pid: int, name: str, tid: int | None = None) -> dict:
    ids = {"pid": pid} if tid is None else {"pid": pid, "tid": tid}
    return {"ph": "M", "name": kind, **ids, "args": {"name": name}}


def span(pid: int, tid: int, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}


def test_the_busiest_stream_is_summed_by_kind_with_each_operations_own_time(tmp_path):
    write_trace(
        tmp_path,
        [
            named("process_name", 1, "/device:GPU:0"),
            named("thread_name", 1, "Stream #14(compute)", 14),
            named("thread_name", 1, "Stream #15(memcpy)", 15),
            named("thread_name", 1, "XLA Ops", 2),
            named("process_name", 9, "/host:CPU"),
            named("thread_name", 9, "python", 1),
            # Two steps: a gemm, cuDNN's attention, a convert fusion (no convolution), a while
            # loop enclosing a copy (counted once: the loop's own time is what is left), a
            # convolution of cuDNN's (its name says fprop, as the attention's kernels do).
            span(1, 14, "sm90_xmma_gemm_bf16bf16_bf16f32", 0, 400),
            span(1, 14, "cudnn_generated_fort_native_sdpa_sm90", 400, 300),
            span(1, 14, "loop_convert_fusion", 700, 100),
            span(1, 14, "while.3", 800, 200),
            span(1, 14, "copy_transpose", 850, 150),
            span(1, 14, "sm90_xmma_gemm_bf16bf16_bf16f32", 1000, 400),
            # recorded 1 us before the gemm ended: it follows the gemm, not inside it
            span(1, 14, "cutlass__5x_cudnn::Kernel<cutlass_tensorop_s16816fprop_nhwc>", 1399, 100),
            span(1, 15, "memcpyH2D", 0, 50),
            span(1, 2, "fusion.1", 0, 1000),  # XLA's op view of the same kernels
            span(9, 1, "PjitFunction(step)", 0, 5000),
        ],
    )
    report = step_profile.summary(step_profile.read_trace(tmp_path), steps=2, top=3)
    lines = report.splitlines()
    assert lines[:4] == [
        "busy ms a step, by thread:",
        "       0.75  /device:GPU:0 / Stream #14(compute)",
        "       0.50  /device:GPU:0 / XLA Ops",
        "       0.03  /device:GPU:0 / Stream #15(memcpy)",
    ]
    assert lines[4] == "by kind (/device:GPU:0 / Stream #14(compute): 0.75 ms a step):"
    assert lines[5:11] == [
        "       0.40 ms  53.3%  matrix product",
        "       0.15 ms  20.0%  fused attention",
        "       0.07 ms  10.0%  copy, layout",
        "       0.05 ms   6.7%  elementwise fusion",
        "       0.05 ms   6.7%  convolution",
        "       0.03 ms   3.3%  other",
    ]
    assert lines[11:] == [
        "costliest 3 operations:",
        "      0.400 ms  53.3%  [matrix product] sm90_xmma_gemm_bf16bf16_bf16f32",
        "      0.150 ms  20.0%  [fused attention] cudnn_generated_fort_native_sdpa_sm90",
        "      0.075 ms  10.0%  [copy, layout] copy_transpose",
    ]


def test_no_trace_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"^step_profile.py: jax.profiler wrote no trace under "):
        step_profile.read_trace(tmp_path)


HLO = """HloModule jit_step, is_scheduled=true

%fused_computation.3 (param_0: f32[8,8], param_1: bf16[8,8]) -> bf16[8,8] {
  %param_0 = f32[8,8]{1,0} parameter(0)
  %convert.1 = bf16[8,8]{1,0} convert(%param_0), metadata={op_name="jit(step)/jvp(ViT)/blocks_0/mlp/convert_element_type" stack_frame_id=3}
  %param_1 = bf16[8,8]{1,0} parameter(1)
  ROOT %multiply.2 = bf16[8,8]{1,0} multiply(%convert.1, %param_1), metadata={op_name="jit(step)/transpose(jvp(ViT))/blocks_0/mlp/mul" stack_frame_id=4}
}

ENTRY %main.9 (p0: f32[8,8], p1: bf16[8,8]) -> bf16[8,8] {
  %p0 = f32[8,8]{1,0} parameter(0)
  %p1 = bf16[8,8]{1,0} parameter(1)
  ROOT %loop_convert_multiply_fusion.3 = bf16[8,8]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%fused_computation.3
}
"""  # noqa: E501 (XLA's lines as it writes them)


def test_a_costly_fusion_names_the_jax_operations_it_computes(tmp_path):
    sources = step_profile.hlo_sources(HLO)
    assert sources["loop_convert_multiply_fusion_3"] == [
        "jvp(ViT)/blocks_0/mlp/convert_element_type",
        "transpose(jvp(ViT))/blocks_0/mlp/mul",
    ]
    write_trace(
        tmp_path,
        [
            named("process_name", 1, "/device:GPU:0"),
            named("thread_name", 1, "Stream #14(compute)", 14),
            span(1, 14, "loop_convert_multiply_fusion_3", 0, 300),  # the kernel's name
            span(1, 14, "nvjet_hsh_128x256", 300, 100),  # a library's kernel: no instruction
        ],
    )
    report = step_profile.summary(step_profile.read_trace(tmp_path), 1, 2, sources)
    assert report.splitlines()[-4:] == [
        "      0.300 ms  75.0%  [elementwise fusion] loop_convert_multiply_fusion_3",
        "                        <- jvp(ViT)/blocks_0/mlp/convert_element_type",
        "                        <- transpose(jvp(ViT))/blocks_0/mlp/mul",
        "      0.100 ms  25.0%  [matrix product] nvjet_hsh_128x256",
    ]
