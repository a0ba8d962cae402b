"""parsers/sglang.py: every line kind of reference/sglang_formats.md, in each release's shape.

Lines below are written from the format strings of the reference (§1-§7); expected figures are
the numbers in those lines, converted with the unit the source means (GPU "GB" = GiB, HiCache
"GB" = 10^9 B, PyTorch sizes binary).
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from parsers import sglang
from parsers.schema import NotThisFormat, row_attrs
from parsers.units import gb_decimal, gib, mib

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
P = "[2025-11-20 09:18:02 TP3] "


def rows(text: str) -> list[dict]:
    out = []
    for r in sglang.parse(text, "t.log").events.iter_rows(named=True):
        r["attrs"] = row_attrs(r)
        out.append(r)
    return out


def one(line: str) -> dict:
    rs = rows(line)
    assert len(rs) == 1, rs
    return rs[0]


def check(row: dict, expect: dict) -> None:
    for key, want in expect.items():
        got = row["attrs"].get(key[1:]) if key[0] == "@" else row[key] if key in row else row["attrs"].get(key)
        if isinstance(want, float) and not isinstance(want, bool):
            assert got == pytest.approx(want), (key, got, want)
        else:
            assert got == want, (key, got, want)


# ---------------------------------------------------------------- prefixes (§1)

PREFIXES = [
    ("[2025-01-01 12:00:00 TP3] ", datetime(2025, 1, 1, 12), {"rank": "TP3", "tp_rank": 3}),
    ("[2025-01-01 12:00:00.123 TP3] ", datetime(2025, 1, 1, 12, 0, 0, 123000), {"tp_rank": 3}),
    ("[2025-01-01 12:00:00 DP1 TP0] ", datetime(2025, 1, 1, 12), {"rank": "DP1 TP0", "dp_rank": 1, "tp_rank": 0}),
    ("[2025-01-01 12:00:00 DP2 TP2 EP2 PP1] ", datetime(2025, 1, 1, 12),
     {"dp_rank": 2, "tp_rank": 2, "ep_rank": 2, "pp_rank": 1}),
    ("[2025-01-01 12:00:00 DP0 PP1 TP3 EP3] ", datetime(2025, 1, 1, 12),
     {"rank": "DP0 PP1 TP3 EP3", "dp_rank": 0, "pp_rank": 1, "tp_rank": 3, "ep_rank": 3}),
    ("[2026-07-18 03:03:06 ATTN_CP5 TP5] ", datetime(2026, 7, 18, 3, 3, 6),
     {"rank": "ATTN_CP5 TP5", "tp_rank": 5, "attn_cp_rank": 5}),
    ("[2026-07-18 03:03:06 DP1 PP0 ATTN_CP2 MOE_DP1 TP6 EP6] ", datetime(2026, 7, 18, 3, 3, 6),
     {"dp_rank": 1, "pp_rank": 0, "attn_cp_rank": 2, "moe_dp_rank": 1, "tp_rank": 6, "ep_rank": 6}),
    ("[2025-10-12 21:14:09] ", datetime(2025, 10, 12, 21, 14, 9), {"rank": None, "tp_rank": None}),
    ("sglang-1  | [2025-11-01 16:50:36 TP1] ", datetime(2025, 11, 1, 16, 50, 36),
     {"tp_rank": 1, "container": "sglang-1"}),
    ("(SchedulerActor pid=4242, ip=10.0.0.7) [2025-11-01 16:50:36 TP2] ", datetime(2025, 11, 1, 16, 50, 36),
     {"tp_rank": 2, "pid": 4242, "ray_actor": "SchedulerActor", "ip": "10.0.0.7"}),
    ("[gpu_id=0] ", None, {"gpu": 0, "gpu_id": 0}),
    ("[12-11 17:47:40] ", None, {"stamp": "12-11 17:47:40"}),
    ("[03:21:43] ", None, {"stamp": "03:21:43"}),
    ("[TP0] ", None, {"rank": "TP0", "tp_rank": 0}),
    ("[2025-01-01 12:00:00 DisaggregationMode.IGPUDECODE TP1] ", datetime(2025, 1, 1, 12), {"tp_rank": 1}),
]


@pytest.mark.parametrize("prefix,ts,expect", PREFIXES)
def test_prefix_variants(prefix, ts, expect):
    row = one(prefix + "Memory pool end. avail mem=4.53 GB")
    assert row["kind"] == "memory_pool_end"
    assert row["avail_bytes"] == gib(4.53)
    assert row["ts_local"] == ts
    check(row, expect)


# ---------------------------------------------------------------- messages (§3-§7)

MESSAGES = [
    # memory lifecycle (§3)
    ("Init torch distributed begin.", "dist_init_begin", {}),
    ("Init torch distributed ends. mem usage=0.71 GB", "dist_init_end", {"bytes": gib(0.71)}),
    ("Load weight begin. avail mem=93.79 GB", "weight_load_begin", {"avail_bytes": gib(93.79)}),
    ("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=37.21 GB", "weight_load_end",
     {"avail_bytes": gib(37.21), "bytes": None, "model_type": "DeepseekV3ForCausalLM", "dtype": "torch.bfloat16"}),
    ("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.07 GB, mem usage=72.72 GB.",
     "weight_load_end", {"avail_bytes": gib(21.07), "bytes": gib(72.72)}),
    ("Load weight end. elapsed=41.20 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, "
     "mem usage=15.20 GB.", "weight_load_end", {"seconds": 41.2, "bytes": gib(15.2), "model_type": "Qwen3ForCausalLM"}),
    ("Load weight end. elapsed=41.20 s, type=Qwen3MoeForCausalLM, quant=fp8, fmt=e4m3, avail mem=60.00 GB, "
     "mem usage=15.20 GB.", "weight_load_end", {"quant": "fp8, fmt=e4m3", "avail_bytes": gib(60.0), "seconds": 41.2}),
    ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=20.5, "
     "local_gpu_memory=79.1, local_gpu_memory * 0.9=71.19", "memory_imbalance",
     {"min_per_gpu_memory_gib": 20.5, "local_gpu_memory_gib": 79.1}),
    ("KV Cache is allocated. K size: 2.50 GB, V size: 2.50 GB.", "kv_cache_allocated",
     {"bytes": 2 * gib(2.5), "tokens": None, "layout": "MHA"}),
    ("KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, V size: 53.31 GB", "kv_cache_allocated",
     {"tokens": 2795207, "k_size_bytes": gib(53.31), "v_size_bytes": gib(53.31), "bytes": 2 * gib(53.31)}),
    ("KV Cache is allocated. #tokens: 221628, KV size: 14.50 GB", "kv_cache_allocated",
     {"tokens": 221628, "bytes": gib(14.5), "layout": "MLA", "kv_size_bytes": gib(14.5)}),
    ("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
     "kv_cache_allocated", {"dtype": "torch.float8_e4m3fn", "tokens": 1000}),
    ("SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 5000, K size: 0.50 GB, V size: 0.50 GB",
     "kv_cache_allocated", {"cache_name": "SWA KV Cache", "tokens": 5000}),
    ("KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 9000, KV size: 3.00 GB", "kv_cache_allocated",
     {"va_upper_bound": True, "tokens": 9000, "bytes": gib(3.0)}),
    ("Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 300000, KV size: 19.60 GB, "
     "avail mem=2.10 GB", "kv_cache_allocated", {"post_capture": True, "tokens": 300000, "avail_bytes": gib(2.1)}),
    ("Post-capture KV sizing: full_layer_tokens=300000, swa_layer_tokens=1200000", "kv_sizing",
     {"tokens": 300000, "swa_layer_tokens": 1200000}),
    ("Memory pool end. avail mem=11.87 GB", "memory_pool_end", {"avail_bytes": gib(11.87)}),
    ("Capture cuda graph begin. This can take up to several minutes.", "cuda_graph_begin",
     {"capture_name": "decode", "avail_bytes": None}),
    ("Capture cuda graph begin. This can take up to several minutes. avail mem=4.49 GB", "cuda_graph_begin",
     {"capture_name": "decode", "avail_bytes": gib(4.49)}),
    ("Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=6.88 GB",
     "cuda_graph_begin", {"capture_name": "draft extend", "avail_bytes": gib(6.88)}),
    ("Capture piecewise CUDA graph begin. avail mem=10.00 GB", "cuda_graph_begin", {"capture_name": "piecewise"}),
    ("Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 4, 8], avail mem=7.10 GB",
     "cuda_graph_begin", {"capture_name": "target decode", "backend": "full", "num_tokens_per_bs": 1,
                          "bs": [1, 2, 4, 8], "avail_bytes": gib(7.1)}),
    ("Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2], avail mem=7.00 GB",
     "cuda_graph_begin", {"capture_name": "target verify", "num_tokens_per_req": 4}),
    ("Capture prefill CUDA graph begin. backend=piecewise, num_tokens=[4, 8], avail mem=9.00 GB",
     "cuda_graph_begin", {"capture_name": "prefill", "avail_bytes": gib(9.0)}),
    ("Capture cuda graph end. Time elapsed: 12.00 s", "cuda_graph_end", {"seconds": 12.0, "bytes": None}),
    ("Capture cuda graph end. Time elapsed: 12.00 s. avail mem=3.10 GB. mem usage=1.40 GB.", "cuda_graph_end",
     {"seconds": 12.0, "bytes": gib(1.4), "avail_bytes": gib(3.1)}),
    ("Capture cuda graph end. Time elapsed: 98.73 s. mem usage=2.60 GB. avail mem=1.89 GB.", "cuda_graph_end",
     {"seconds": 98.73, "bytes": gib(2.6), "avail_bytes": gib(1.89)}),
    ("Capture draft cuda graph end. Time elapsed: 5.48 s. mem usage=0.10 GB. avail mem=6.88 GB.", "cuda_graph_end",
     {"capture_name": "draft", "bytes": gib(0.1)}),
    ("Capture target decode CUDA graph end. elapsed=0.89 s, mem usage=0.15 GB, avail mem=6.95 GB.",
     "cuda_graph_end", {"capture_name": "target decode", "seconds": 0.89, "bytes": gib(0.15), "avail_bytes": gib(6.95)}),
    ("Capture piecewise CUDA graph end. Time elapsed: 30.00 s. mem usage=0.50 GB. avail mem=9.50 GB.",
     "cuda_graph_end", {"capture_name": "piecewise", "seconds": 30.0}),
    ("Capture cuda graph bs [1, 2, 4, 8, 12, 16]", "cuda_graph_bs", {"bs": [1, 2, 4, 8, 12, 16]}),
    ("max_total_num_tokens=500000, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768",
     "kv_sizing", {"tokens": 500000, "avail_bytes": None, "context_len": 32768}),
    ("max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, "
     "context_len=32768", "kv_sizing", {"tokens": 500000, "chunked_prefill_size": 8192}),
    ("max_total_num_tokens=221628, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, "
     "context_len=262144, available_gpu_mem=1.89 GB", "kv_sizing",
     {"tokens": 221628, "avail_bytes": gib(1.89), "max_running_requests": 2048}),
    ("max_total_num_tokens=1000, chunked_prefill_size=-1, max_prefill_tokens=16384, max_running_requests=10, "
     "context_len=2048, available_cpu_mem=100.00 GB", "kv_sizing", {"avail_bytes": gib(100.0), "chunked_prefill_size": -1}),
    ("The server is fired up and ready to roll!", "server_ready", {}),
    ("sglang is using nccl==2.27.3", "version", {"component": "nccl", "version": "2.27.3"}),
    ("Registering 6344 cuda graph addresses", "notice", {"message_id": "cuda_graph_registered", "addresses": 6344}),
    ("Using KV cache dtype: torch.float8_e4m3fn", "notice", {"dtype": "torch.float8_e4m3fn"}),
    # HiCache (§4)
    ("Allocating 48.00 GB host memory for hierarchical KV cache.", "hicache_alloc",
     {"bytes": gb_decimal(48), "pool": "kv", "@kind": "kv"}),
    ("Allocating kv hierarchical KV host pool: 683061 tokens, 48.00 GB host memory.", "hicache_alloc",
     {"bytes": gb_decimal(48), "tokens": 683061, "pool": "kv"}),
    ("Allocating kv hierarchical KV host pool: 683061 tokens, 48.00 GB host memory. packed MTP KV layers: "
     "target_layers=61, draft_layers=1, total_layers=62.", "hicache_alloc", {"total_layers": 62, "draft_layers": 1}),
    ("Allocating 3.50 GB host memory for hierarchical Mamba cache (layout=layer_first).", "hicache_alloc",
     {"bytes": gb_decimal(3.5), "@kind": "mamba", "layout": "layer_first"}),
    ("Not enough host memory available. Requesting 300.00 GB but only have 288.26 GB free. Please reduce the size "
     "of the hierarchical cache.", "hicache_insufficient", {"bytes": gb_decimal(300), "avail_bytes": gb_decimal(288.26)}),
    # uvicorn (§1)
    ("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", "uvicorn", {"level": "INFO"}),
    ('INFO:     127.0.0.1:50310 - "POST /generate HTTP/1.1" 200 OK', "http_access",
     {"code": 200, "method": "POST", "path": "/generate", "client": "127.0.0.1:50310"}),
    ('INFO:     10.1.1.1:1 - "GET /health HTTP/1.1" 503 Service Unavailable', "http_access", {"code": 503}),
    # batch lines (§6), one per release shape
    ("Prefill batch(mixed #running-req: 5). #new-seq: 1, #new-token: 64, #cached-token: 0, cache hit rate: 12.50%, "
     "token usage: 0.05, #queue-req: 2", "prefill_batch",
     {"tokens": 64, "count": 5, "mixed": True, "cache_hit_rate": 0.125, "ratio": 0.05}),
    ("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, cache hit rate: 0.00%, token usage: 0.00, "
     "#running-req: 0, #queue-req: 0", "prefill_batch", {"tokens": 7, "count": 0, "ratio": 0.0, "queue_req": 0}),
    ("Prefill batch. #new-seq: 3, #new-token: 8192, #cached-token: 57344, token usage: 0.62, #running-req: 39, "
     "#queue-req: 16, ", "prefill_batch", {"tokens": 8192, "cached_token": 57344, "ratio": 0.62, "count": 39}),
    ("Prefill batch. #new-seq: 3, #new-token: 100, #cached-token: 0, #token: 5000, token usage: 0.10, "
     "#running-req: 4, #queue-req: 1", "prefill_batch", {"tokens": 100, "token": 5000}),
    ("Prefill batch [1234], #new-seq: 1, #new-token: 10, #cached-token: 0, token usage: 0.01, #running-req: 0, "
     "#queue-req: 0, ", "prefill_batch", {"iteration": 1234, "tokens": 10}),
    ("Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 0, full token usage: 0.40, swa token usage: 0.20, "
     "#running-req: 8, #queue-req: 0, ", "prefill_batch", {"ratio": 0.4, "swa_token_usage": 0.2}),
    ("Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 0, full token usage: 0.40, mamba usage: 0.33, "
     "#running-req: 8, #queue-req: 0, ", "prefill_batch", {"mamba_usage": 0.33}),
    ("Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.20, #running-req: 2, "
     "#queue-req: 0, #pending-token: 77, cuda graph: False, input throughput (token/s): 5120.50", "prefill_batch",
     {"pending_token": 77, "cuda_graph": False, "input_throughput": 5120.5}),
    ("Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.20, #running-req: 2, "
     "#queue-req: 0, cuda graph: True, input throughput (token/s): 1.00, est. prefill TFLOPS/s (per GPU): 312.40",
     "prefill_batch", {"est_prefill_tflops_per_gpu": 312.4}),
    ("Prefill batch. #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.01, #running-req: 0, "
     "#queue-req: 0, #unbootstrapped-req: 2, #transferring-req: 1", "prefill_batch",
     {"unbootstrapped_req": 2, "transferring_req": 1}),
    ("Decode batch. #running-req: 12, #token: 3000, token usage: 0.30, gen throughput (token/s): 400.00, "
     "#queue-req: 0", "decode_batch", {"tokens": 3000, "count": 12, "ratio": 0.3, "gen_throughput": 400.0}),
    ("Decode batch. #running-req: 12, #token: 3000, token usage: 0.30, accept len: 3.21, gen throughput (token/s): "
     "400.00, #queue-req: 0", "decode_batch", {"accept_len": 3.21}),
    ("Decode batch. #running-req: 12, #token: 3000, token usage: 0.30, gen throughput (token/s): 400.00, "
     "largest-len: 900, #queue-req: 0, ", "decode_batch", {"largest_len": 900}),
    ("Decode batch. #running-req: 41, #token: 199472, token usage: 0.90, cuda graph: True, gen throughput "
     "(token/s): 913.27, #queue-req: 17, ", "decode_batch", {"tokens": 199472, "cuda_graph": True, "queue_req": 17}),
    ("Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: True, gen throughput (token/s): "
     "446.45, #queue-req: 5,", "decode_batch", {"queue_req": 5, "ratio": 0.94}),
    ("Decode batch [77], #running-req: 2, #token: 100, token usage: 0.01, accept len: 2.50, accept rate: 0.62, "
     "cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0, ", "decode_batch",
     {"iteration": 77, "accept_rate": 0.62}),
    ("Decode batch, #running-req: 9, #full token: 800, full token usage: 0.80, #swa token: 300, "
     "swa token usage: 0.30, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, ", "decode_batch",
     {"tokens": 800, "ratio": 0.8, "swa_token": 300}),
    ("Decode batch, #running-req: 9, #token: 800, token usage: 0.80, cuda graph: True, gen throughput (token/s): "
     "10.00, #queue-req: 0, est. decode TFLOPS/s (per GPU): 55.10, fwd occupancy: 87.50%", "decode_batch",
     {"est_decode_tflops_per_gpu": 55.1, "fwd_occupancy": 0.875}),
    ("Decode batch, #running-req: 9, #token: 800, token usage: 0.80, pre-allocated usage: 0.10, #prealloc-req: 3, "
     "#transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0",
     "decode_batch", {"pre_allocated_usage": 0.1, "prealloc_req": 3, "retracted_req": 0}),
    # retraction / KV exhaustion (§6)
    ("Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.8024 -> 0.9085", "retract",
     {"count": 1, "new_token_ratio_from": 0.8024, "new_token_ratio_to": 0.9085, "form": "decode_oom"}),
    ("KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.4132 -> 0.7021", "retract",
     {"count": 2, "form": "pool_full"}),
    ("KV cache pool is full. Retract requests. #retracted_reqs: 2, #aborted_retracted_reqs: 1, "
     "#new_token_ratio: 0.4 -> 0.7", "retract", {"aborted_retracted_reqs": 1}),
    ("KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 4096, "
     "#new_token_ratio: 0.5000 -> 0.8000", "retract", {"count": 3, "new_tokens_gained": 4096}),
    ("Failed to retract any request. No space left for only one request.", "kv_exhausted",
     {"reason": "failed_to_retract", "phase": "decode"}),
    ("Out of memory even after retracting all other requests in the decode batch.", "kv_exhausted",
     {"reason": "oom_after_retract"}),
    ("token_to_kv_pool_allocator memory leak detected! available_size=10, evictable_size=0", "memory_leak",
     {"pool": "token_to_kv_pool_allocator"}),
    # failures (§5, §7)
    ("Not enough memory. Please try to increase --mem-fraction-static.", "not_enough_memory", {"ratio": None}),
    ("Not enough memory. Please try to increase --mem-fraction-static. Current value: "
     "self.server_args.mem_fraction_static=0.2", "not_enough_memory", {"ratio": 0.2}),
    ("Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.35",
     "not_enough_memory", {"ratio": 0.35}),
    ("Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.80. Raise "
     "--mem-fraction-static above 0.871 (minimum viable = 1 - available/pre = 0.8706). If using speculative "
     "decoding, draft weights are now counted.", "weights_no_kv_room",
     {"ratio": 0.8, "raise_above": 0.871, "minimum_fraction": 0.8706}),
    ("TP rank 1 could finish the model loading, but there are other ranks that didn't finish loading. It is likely "
     "due to unexpected failures (e.g., OOM) or a slow node.", "ranks_not_loaded", {"named_tp_rank": 1}),
    ("Watchdog timeout (self.watchdog_timeout=300)", "watchdog_timeout", {"seconds": 300.0}),
    ("Scheduler watchdog timeout (self.watchdog_timeout=600, self.soft=False)", "watchdog_timeout",
     {"seconds": 600.0, "soft": False, "component": "Scheduler"}),
    ("Received sigquit from a child proces. It usually means the child failed.", "sigquit", {"phase": "launch"}),
    ("Received sigquit from a child process. It usually means the child failed.", "sigquit", {"phase": "launch"}),
    ("SIGQUIT received. signum=None, frame=None. It usually means one child failed.", "sigquit", {"phase": "running"}),
    ("Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is "
     "the OS OOM killer. Run `dmesg -T | grep -i oom` to check.", "rank_dead", {"tp_rank": 3, "code": -9}),
    ("Subprocess scheduler_2 (pid=51234) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
     "subprocess_crashed", {"pid": 51234, "code": -9, "name": "scheduler_2"}),
    ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: "
     "11:02:40. last_heartbeat time: 11:02:19", "health_check_failed", {"seconds": 20.0}),
    ("Health check request received during shutdown. Returning 503.", "health_check_failed", {"during_shutdown": True}),
    ("SIGTERM received. signum=15 frame=None. Draining requests and shutting down...", "sigterm", {}),
    ("Gracefully exiting... Remaining number of requests 3. Remaining requests remaining_rids=['a'].", "sigterm",
     {"count": 3}),
    ("Gracefully exiting... remaining number of requests 5", "sigterm", {"count": 5}),
    ("Initialization failed. Please see the error messages above.", "init_failed", {}),
    ("CUDA error: out of memory", "cuda_error_oom", {}),
    ("Capture cuda graph failed: CUDA error: an illegal memory access was encountered", "cuda_graph_failed", {}),
]


@pytest.mark.parametrize("msg,kind,expect", MESSAGES, ids=[m[0][:50] for m in MESSAGES])
def test_message_kinds(msg, kind, expect):
    rs = rows(P + msg)
    assert rs[0]["kind"] == kind
    assert rs[0]["line"] == 1 and rs[0]["tp_rank"] == 3
    check(rs[0], expect)
    res = sglang.parse(P + msg)
    assert (res.recognized, res.unrecognized) == (1, 0)


def test_unknown_prefixed_record_is_log_and_unrecognised():
    res = sglang.parse(P + "something new in 0.9\n")
    assert res.events["kind"].to_list() == ["log"]
    assert (res.lines, res.recognized, res.unrecognized) == (1, 0, 1)
    assert res.unrecognized_examples == [(1, P + "something new in 0.9")]


# ---------------------------------------------------------------- CUDA OOM (§7)

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.41 GiB. GPU 3 has a total capacity of "
       "95.00 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 93.96 GiB memory in use. "
       "Of the allocated memory 90.31 GiB is allocated by PyTorch, with 0.42 GiB allocated in private pools (e.g., "
       "CUDA Graphs), and 1.09 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
       "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
       "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

TRACEBACK = (
    "[2025-11-20 11:02:48 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2677, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    '  File "/sgl/python/sglang/srt/managers/tp_worker.py", line 392, in forward_batch_generation\n'
    "    logits_output, can_run_cuda_graph = self.model_runner.forward(\n"
    f"{OOM}\n"
    "\n"
    "[2025-11-20 11:02:48] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
)


def test_traceback_is_one_record_with_an_oom_row():
    res = sglang.parse(TRACEBACK)
    rs = rows(TRACEBACK)
    assert [r["kind"] for r in rs] == ["scheduler_exception", "cuda_oom", "sigquit"]
    exc, oom, quit_ = rs
    assert (exc["line"], exc["line_end"]) == (1, 6)
    assert exc["text"] == "\n".join(TRACEBACK.split("\n")[:6])
    assert exc["component"] if "component" in exc else exc["attrs"]["component"] == "Scheduler"
    assert exc["attrs"]["exception_type"] == "torch.OutOfMemoryError"
    assert exc["attrs"]["exception_message"].startswith("CUDA out of memory. Tried to allocate 1.41 GiB")
    assert (oom["line"], oom["rank"], oom["tp_rank"]) == (6, "TP3", 3)
    assert oom["ts_local"] == datetime(2025, 11, 20, 11, 2, 48)
    check(oom, {"bytes": gib(1.41), "gpu": 3, "total_bytes": gib(95.0), "free_bytes": gib(1.02),
                "used_bytes": gib(93.96), "allocated_by_pytorch_bytes": gib(90.31),
                "private_pools_bytes": gib(0.42), "reserved_unallocated_bytes": gib(1.09), "during": "forward"})
    assert quit_["line"] == 8
    assert (res.lines, res.recognized, res.unrecognized) == (8, 8, 0)


@pytest.mark.parametrize("line,expect", [
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacty of "
     "79.15 GiB of which 8.62 MiB is free. Process 1234 has 79.13 GiB memory in use. Of the allocated memory "
     "77.50 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.",
     {"bytes": mib(20), "gpu": 0, "total_bytes": gib(79.15), "free_bytes": mib(8.62), "used_bytes": None,
      "processes": [{"pid": 1234, "used_bytes": gib(79.13)}], "reserved_unallocated_bytes": gib(1.02)}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
     "capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.75 GiB reserved in total by PyTorch) If reserved "
     "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
     {"bytes": mib(20), "gpu": 0, "total_bytes": gib(15.78), "free_bytes": mib(3.44),
      "allocated_by_pytorch_bytes": gib(14.56), "reserved_bytes": gib(14.75)}),
])
def test_older_torch_oom_forms(line, expect):
    text = "[2024-05-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" \
           '  File "x.py", line 1, in f\n' + line + "\n"
    oom = [r for r in rows(text) if r["kind"] == "cuda_oom"]
    assert len(oom) == 1 and oom[0]["line"] == 3
    check(oom[0], expect)


def test_oom_during_graph_capture_and_its_solution_list():
    text = (
        "[2025-04-10 10:00:00 TP7] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 269, in __init__\n'
        "    raise Exception(\n"
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total "
        "capacity of 95.00 GiB of which 112.00 MiB is free.\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        "\n"
        "[2025-04-10 10:00:01] Received sigquit from a child process. It usually means the child failed.\n"
    )
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["scheduler_exception", "cuda_graph_failed", "cuda_oom", "sigquit"]
    assert rs[0]["line_end"] == 9
    assert rs[1]["line"] == rs[2]["line"] == 4
    check(rs[2], {"bytes": mib(448), "gpu": 7, "total_bytes": gib(95), "free_bytes": mib(112),
                  "during": "graph_capture", "tp_rank": 7})
    res = sglang.parse(text)
    assert res.recognized == res.lines == 11


def test_bare_traceback_of_v03_and_cuda_error_oom():
    text = (
        "[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "[2024-10-22 06:31:49 TP0] Traceback (most recent call last):\n"
        '  File "/x/cuda_graph_runner.py", line 162, in __init__\n'
        "    self.capture()\n"
        "RuntimeError: CUDA error: out of memory\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    )
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["cuda_graph_begin", "scheduler_exception", "cuda_error_oom"]
    assert rs[1]["attrs"]["component"] == "traceback" and rs[1]["line_end"] == 7
    assert rs[1]["attrs"]["exception_type"] == "RuntimeError"
    assert rs[2]["line"] == 5
    assert sglang.parse(text).unrecognized == 0


@pytest.mark.parametrize("component", ["TpModelWorkerClient", "DetokenizerManager", "TokenizerManager",
                                       "DataParallelController"])
def test_other_components_hit_an_exception(component):
    text = f"{P}{component} hit an exception: Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n"
    r = rows(text)[0]
    assert r["kind"] == "scheduler_exception" and r["line_end"] == 3
    assert r["attrs"]["component"] == component and r["attrs"]["exception_type"] == "KeyError"


# ---------------------------------------------------------------- KV exhaustion (§6)

@pytest.mark.parametrize("tail,expect", [
    ("Avaliable tokens: 1200\n", {"available_tokens": 1200}),
    ("Available tokens: 1200\nself.token_to_kv_pool_allocator.available_size()=1000\n"
     "self.tree_cache.evictable_size()=200\n", {"available_tokens": 1200, "available_size": 1000, "evictable_size": 200}),
    ("Available tokens: 1200 (available_size=1000 + evictable_size=200)\n",
     {"available_tokens": 1200, "available_size": 1000, "evictable_size": 200}),
    ("Available full tokens: 704 (full_available_size=704 + full_evictable_size_=0)\n"
     "Available swa tokens: 90 (swa_available_size=80 + swa_evictable_size=10)\n",
     {"available_tokens": 704, "available_full_tokens": 704, "full_evictable_size": 0, "available_swa_tokens": 90,
      "swa_available_size": 80}),
    ("Available full tokens: 8070656 (full_available_size=7936 + full_evictable_size_=8062720)\n"
     "Available mamba: 760 (available_size=57 + component_evictable_size_=703)\n",
     {"available_full_tokens": 8070656, "available_mamba_tokens": 760, "mamba_available_size": 57,
      "mamba_component_evictable_size": 703}),
])
@pytest.mark.parametrize("phase", ["Prefill", "Decode"])
def test_kv_exhausted_with_continuation_lines(tail, expect, phase):
    text = f"{P}{phase} out of memory. Try to lower your batch size.\nTry to allocate 8192 tokens.\n{tail}"
    r = rows(text)
    assert len(r) == 1 and r[0]["kind"] == "kv_exhausted"
    assert r[0]["tokens"] == 8192 and r[0]["line_end"] == text.count("\n")
    check(r[0], {"phase": phase.lower(), **expect})
    assert sglang.parse(text).unrecognized == 0


def test_kv_exhausted_inside_a_traceback_gets_its_own_row():
    text = (f"{P}Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File ".../mem_cache/common.py", line 412, in alloc_paged_token_slots_extend\n'
            "    raise RuntimeError(error_msg)\n"
            "RuntimeError: Prefill out of memory. Try to lower your batch size.\n"
            "Try to allocate 2048 tokens.\n"
            "Available full tokens: 704 (full_available_size=704 + full_evictable_size_=0)\n")
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["scheduler_exception", "kv_exhausted"]
    assert rs[0]["line_end"] == 6 and rs[1]["line"] == 4
    check(rs[1], {"tokens": 2048, "available_tokens": 704, "tp_rank": 3})


def test_bare_exception_lines_of_excerpts():
    text = ("ValueError: Not enough host memory available. Requesting 40.00 GB but only have 44.87 GB free. Please "
            "reduce the size of the hierarchical cache.\n"
            "RuntimeError: Prefill out of memory. Try to lower your batch size. Try to allocate 4096 tokens.\n"
            "Available full tokens: 320512 (full_available_size=192 + full_evictable_size_=320320)\n")
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["hicache_insufficient", "kv_exhausted"]
    check(rs[0], {"bytes": gb_decimal(40), "avail_bytes": gb_decimal(44.87), "exception_type": "ValueError"})
    check(rs[1], {"tokens": 4096, "available_tokens": 320512, "line_end": 3})


# ---------------------------------------------------------------- rank death, NCCL, foreign lines

def test_rank_dead_and_exit_code_merge():
    text = ("[2025-06-01 10:00:00] Rank 2 scheduler is dead. Please check if there are relevant logs.\n"
            "[2025-06-01 10:00:02] Exit code: -9\n")
    rs = rows(text)
    assert len(rs) == 1
    check(rs[0], {"kind": "rank_dead", "tp_rank": 2, "code": -9, "line": 1, "line_end": 2})
    assert rs[0]["text"] == text.rstrip("\n")
    assert sglang.parse(text).recognized == 2


def test_c10d_watchdog_lines():
    text = ("[rank3]:[E421 04:13:43.426633564 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600060 milliseconds before timing out.\n"
            "[rank3]:[E421 04:13:44.000000001 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception (either an error or "
            "timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1580.\n"
            "[rank3]:[W421 04:13:44.1 ProcessGroupNCCL.cpp:1000] some other c10d warning\n"
            "sglang-0:100:1012 [1] NCCL INFO ncclCommInitRank comm 0x55 rank 1 nranks 16 cudaDev 1 - Init COMPLETE\n"
            "sglang-0:100:1012 [1] NCCL INFO Channel 00/02 : 0 1\n"
            "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1\n")
    res = sglang.parse(text)
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["nccl_watchdog", "nccl_watchdog", "nccl_info"]
    check(rs[0], {"count": 1580, "seconds": 600.06, "timeout_s": 600.0, "op_type": "ALLREDUCE", "seq_num": 1580,
                  "@rank": 3, "event": "collective_timeout", "ts_local": None})
    check(rs[1], {"pg": 1, "@rank": 3, "event": "watchdog_exception"})
    check(rs[2], {"host": "sglang-0", "pid": 100, "gpu": 1})
    assert (res.lines, res.recognized) == (6, 6)


def test_glued_tqdm_does_not_hide_the_record():
    text = ("Capturing batches (bs=1 avail_mem=6.91 GB):  50%|██▌  | 1/2 [00:03<00:03,  3.33s/it]"
            "[2025-07-28 11:04:21 TP1] Registering 30 cuda graph addresses\n"
            "Capturing batches (bs=4 avail_mem=7.00 GB):   0%|   | 0/2\rCapturing batches (bs=2 avail_mem=6.95 GB):  "
            "50%|█ | 1/2\r[2025-07-28 11:04:22 TP0] Capture cuda graph end. Time elapsed: 5.48 s. mem usage=0.10 GB. "
            "avail mem=6.88 GB.\r\n")
    rs = rows(text)
    assert [(r["kind"], r["line"]) for r in rs] == [
        ("capture_progress", 1), ("notice", 1), ("capture_progress", 2), ("capture_progress", 2),
        ("cuda_graph_end", 2)]
    check(rs[0], {"avail_bytes": gib(6.91), "bs": 1})
    check(rs[1], {"tp_rank": 1, "addresses": 30})
    check(rs[4], {"tp_rank": 0, "avail_bytes": gib(6.88), "seconds": 5.48})
    assert sglang.parse(text).unrecognized == 0


# ---------------------------------------------------------------- server_args (§2)

SA_CLASS = ("server_args=ServerArgs(model_path='/models/k2', tp_size=8, mem_fraction_static=0.93, "
            "cuda_graph_bs=[1, 2, 4, 8], json_model_override_args='{\"a\": 1, \"b\": [2, 3]}', "
            "disaggregation_mode=<DisaggregationMode.NULL: 'null'>, hicache_size=48, dtype=torch.bfloat16)")
SA_DICT = ("server_args={'model_path': '/models/k2', 'tp_size': 8, 'hicache_size': 48, "
           "'cuda_graph_bs': [1, 2, 4], 'extra': {'k': (1, 2)}}")


def test_server_args_class_form_with_non_literals():
    r = one("[2025-11-20 09:14:02] " + SA_CLASS)
    args = r["attrs"]["args"]
    assert r["kind"] == "server_args" and r["attrs"]["form"] == "ServerArgs" and r["attrs"]["truncated"] is False
    assert args["tp_size"] == 8 and args["mem_fraction_static"] == 0.93 and args["hicache_size"] == 48
    assert args["cuda_graph_bs"] == [1, 2, 4, 8]
    assert args["json_model_override_args"] == '{"a": 1, "b": [2, 3]}'
    assert args["disaggregation_mode"] == "<DisaggregationMode.NULL: 'null'>"
    assert args["dtype"] == "torch.bfloat16"


def test_server_args_dict_form_and_bare_v02():
    r = one("[2026-01-01 00:00:00] " + SA_DICT)
    assert r["attrs"]["form"] == "dict" and r["attrs"]["args"]["cuda_graph_bs"] == [1, 2, 4]
    assert r["attrs"]["args"]["extra"] == {"k": [1, 2]}
    bare = one(SA_CLASS.replace("tp_size=8", "tp_size=1"))
    assert bare["attrs"]["args"]["tp_size"] == 1 and bare["ts_local"] is None


@pytest.mark.parametrize("dump", [SA_CLASS, SA_DICT])
@pytest.mark.parametrize("frac", [0.5, 0.7, 0.95])
def test_truncated_server_args_keeps_complete_pairs(dump, frac):
    r = one("[2025-11-20 09:14:02] " + dump[: int(len(dump) * frac)])
    args = r["attrs"]["args"]
    assert r["attrs"]["truncated"] is True
    full = sglang.parse_server_args(dump.split("=", 1)[1])[0]
    assert args, "some pair must survive"
    for k, v in args.items():  # every salvaged pair is a pair of the full dump, and complete
        assert full[k] == v or (k == "disaggregation_mode")
    assert len(args) < len(full)


def test_wrapped_server_args_is_rejoined():
    text = ("[2025-11-20 09:14:02] server_args=ServerArgs(model_path='/m', page_size=128, device='npu', tp_s\n"
            "ize=1, pp_size=1, bucket_tim\n"
            "e_to_first_token=None, decode_log_interval=40)\n"
            "[2025-11-20 09:14:03 TP0] Init torch distributed begin.\n")
    rs = rows(text)
    assert [r["kind"] for r in rs] == ["server_args", "dist_init_begin"]
    sa = rs[0]
    assert (sa["line"], sa["line_end"]) == (1, 3)
    assert sa["attrs"]["truncated"] is False
    assert sa["attrs"]["args"] == {"model_path": "/m", "page_size": 128, "device": "npu", "tp_size": 1,
                                   "pp_size": 1, "bucket_time_to_first_token": None, "decode_log_interval": 40}
    assert sglang.parse(text).unrecognized == 0


def test_two_dumps_bump_the_run():
    text = ("[2025-11-20 09:00:00 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, #queue-req: 0, \n"
            "[2025-11-20 09:14:02] " + SA_CLASS + "\n"
            "[2025-11-20 09:14:11 TP0] Init torch distributed begin.\n"
            "[2025-11-20 10:00:00] " + SA_DICT + "\n"
            "[2025-11-20 10:00:11 TP0] Init torch distributed begin.\n")
    assert [(r["kind"], r["run"]) for r in rows(text)] == [
        ("decode_batch", 0), ("server_args", 0), ("dist_init_begin", 0), ("server_args", 1), ("dist_init_begin", 1)]


# ---------------------------------------------------------------- coverage, sniffing, robustness

def test_exact_coverage_on_fixture():
    text = (FIXTURES / "mixed_tp2.log").read_text(encoding="utf-8")
    res = sglang.parse(text, "mixed_tp2.log")
    assert (res.lines, res.recognized, res.unrecognized) == (34, 32, 2)
    assert [n for n, _ in res.unrecognized_examples] == [25, 26]
    kinds = res.events["kind"].to_list()
    assert kinds.count("hicache_alloc") == 2 and kinds.count("weight_load_end") == 2
    sizing = res.events.filter(res.events["kind"] == "kv_sizing").row(0, named=True)
    assert sizing["tokens"] == 401000 and sizing["avail_bytes"] == gib(8.08)
    oom = res.events.filter(res.events["kind"] == "cuda_oom").row(0, named=True)
    assert (oom["line"], oom["gpu"], oom["bytes"], oom["free_bytes"]) == (32, 1, gib(2.0), gib(1.5))
    statuses = sglang.classify_lines(text)
    assert statuses.count("foreign") == 2 and statuses.count("blank") == 2


def test_sniff():
    assert sglang.sniff((FIXTURES / "mixed_tp2.log").read_text(encoding="utf-8")) >= 0.9
    assert sglang.sniff("[2025-01-01 00:00:00 TP0] hello\n[2025-01-01 00:00:01 TP1] hi\n") >= 0.5
    for other in ["              total        used        free      shared  buff/cache   available\n"
                  "Mem:            449         318          70           0          61         127\n",
                  "MemTotal:       16318480 kB\nMemFree:          123456 kB\n",
                  "[  123.456789] Out of memory: Killed process 1234 (python3) total-vm:1kB\n",
                  "[Mon Nov 20 09:14:02 2025] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
                  "index, memory.used [MiB]\n0, 96413 MiB\n", "", "\x00\x01\x02 binary"]:
        assert sglang.sniff(other) < 0.5, other


def test_not_this_format_and_empty():
    with pytest.raises(NotThisFormat):
        sglang.parse("MemTotal:       16318480 kB\nMemFree:          123456 kB\n")
    res = sglang.parse("")
    assert (res.lines, res.events.height) == (0, 0)
    assert sglang.parse("\n\n").lines == 2


def test_crlf_nul_and_huge_lines():
    text = (P + "Memory pool end. avail mem=4.53 GB\r\n" + P + "Load weight begin. avail mem=9.00 GB\x00\r\n"
            + P + "Decode batch, #token: " + "9" * 1_000_000 + ", token usage: 0.5\n"
            + "server_args=ServerArgs(" + "(" * 5000 + "\n" + P + "Allocating " + "1" * 400 + " GB host memory for "
            "hierarchical KV cache.\n")
    res = sglang.parse(text)
    assert res.lines == 5
    r = rows(text)
    assert r[0]["avail_bytes"] == gib(4.53) and r[1]["avail_bytes"] == gib(9.0)
    assert r[2]["kind"] == "decode_batch" and r[2]["tokens"] is None


@pytest.mark.parametrize("seed", range(30))
def test_random_input_only_raises_not_this_format(seed):
    rnd = random.Random(seed)
    pieces = [P, "Traceback (most recent call last):\n", "  File", "\r", "\n", "server_args={", "Decode batch, ",
              "#token: ", ": ", "=", "[2025-13-45 99:99:99 TP9] ", "CUDA out of memory. Tried to allocate 1 GiB",
              "Rank 1 scheduler is dead", "Exit code: -9", "\x00", "ÿ", "Capture cuda graph bs [1, 2",
              "Prefill out of memory. Try to lower your batch size.", "Avaliable tokens: 9", "(", "'", "}"]
    text = "".join(rnd.choice(pieces) if rnd.random() < 0.7 else chr(rnd.randrange(0, 0x3000))
                   for _ in range(rnd.randrange(1, 400)))
    try:
        res = sglang.parse(text)
    except NotThisFormat:
        return
    assert res.recognized + res.unrecognized == res.lines
    sglang.sniff(text)


def test_oom_during_weight_load_and_phase_fallback():
    text = (f"{P}Load weight begin. avail mem=70.00 GB\n"
            f"{P}Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl/srt/model_executor/model_runner.py", line 417, in load_model\n'
            "    self.model = get_model(...)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 3 has a total capacity of "
            "79.19 GiB of which 1.00 GiB is free.\n"
            f"{P}Capture cuda graph begin. This can take up to several minutes. avail mem=4.00 GB\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 3 has a total capacity of "
            "79.19 GiB of which 20.00 MiB is free.\n")
    ooms = [r for r in rows(text) if r["kind"] == "cuda_oom"]
    assert [(r["line"], r["attrs"]["during"], r["bytes"]) for r in ooms] == [
        (5, "weight_load", gib(3.0)), (7, "graph_capture", mib(64))]


def test_comment_line_quoting_a_failure_is_not_that_failure():
    text = ("# what: TP1 could finish the model loading, but there are other ranks that didn't finish loading\n"
            "[2025-03-17 17:15:55 TP1] Load weight end. type=X, dtype=torch.bfloat16, avail mem=20.00 GB, "
            "mem usage=60.00 GB.\n")
    res = sglang.parse(text, "x.log")
    assert res.events["kind"].to_list() == ["weight_load_end"]
    assert res.unrecognized == 1 and res.unrecognized_examples[0][0] == 1


def test_a_load_after_the_same_ranks_pool_is_the_speculative_drafts() -> None:
    """The draft worker loads after the target's pool in the same process: its load lines are marked, and a bare OOM
    after them is placed in the draft's set-up, not in the target's weight load."""
    rs = rows("[2025-12-02 07:41:10 TP0] Load weight begin. avail mem=46.10 GB\n"
              "[2025-12-02 07:41:55 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=30.05 GB\n"
              "[2025-12-02 07:41:56 TP1] Memory pool end. avail mem=7.40 GB\n"
              "[2025-12-02 07:41:56 TP0] Memory pool end. avail mem=7.33 GB\n"
              "[2025-12-02 07:41:58 TP0] Load weight begin. avail mem=7.31 GB\n"
              "[2025-12-02 07:41:58 TP1] Load weight begin. avail mem=7.38 GB\n"
              "[2025-12-02 07:42:03 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
              "GPU 0 has a total capacity of 47.50 GiB of which 1.10 GiB is free.\n")
    loads = [r for r in rs if r["kind"] == "weight_load_begin"]
    assert [bool(r["attrs"].get("draft")) for r in loads] == [False, True, True]
    (oom,) = [r for r in rs if r["kind"] == "cuda_oom"]
    assert oom["attrs"]["during"] == "draft_init"
