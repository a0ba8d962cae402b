"""The hot kinds' figures are typed (parsers.schema.FIELDS): in the ``fields`` struct of the frame and of
timeline.parquet, not in the ``attrs`` JSON, with nothing the parser read lost (issue 23 item 3, issue 26
item 3). The native scanner and its polars twin are held to the Python scanner by test_perf_equivalence;
here, what the three give is checked against the scanner's own dicts."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
import pytest

from forensics.facts.rows import attrs, field, narrow_fields
from forensics.timeline import build_timeline, write_parquet
from parsers import bulkscan, sglang, sglang_fast
from parsers.schema import FIELDS, split_fields

# our own lines, in the shapes of reference/sglang_formats.md §6 (0.5.5-0.5.8 decode/prefill) and uvicorn's access line
DECODE = ("[2025-11-20 11:02:41 DP1 TP1] Decode batch, #running-req: 41, #token: 199472, token usage: 0.90, "
          "cuda graph: True, gen throughput (token/s): 913.27, #queue-req: 17, ")
PREFILL = ("[2025-11-20 11:02:47 DP1 TP1] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 57344, "
           "token usage: 0.62, #running-req: 39, #queue-req: 16, ")
#: a whole-number throughput is an int, not the float the member holds; an unknown field has no member
ODD = ("[2025-11-20 11:02:52 DP1 TP1] Decode batch, #running-req: 40, #token: 199000, token usage: 0.89, "
       "cuda graph: False, gen throughput (token/s): 913, #queue-req: 12, spec mode: eagle, ")
ACCESS = '[2025-11-20 11:02:53] INFO:     10.0.0.7:51234 - "POST /generate HTTP/1.1" 200 OK'
TEXT = "\n".join([DECODE, PREFILL, ODD, ACCESS]) + "\n"


@pytest.fixture(params=["scanner", "native", "polars"])
def parse(request, monkeypatch):
    if request.param == "scanner":
        return sglang.parse
    if request.param == "native" and not bulkscan.available():
        pytest.skip(f"native scanner not available: {bulkscan.why_not}")
    if request.param == "polars":
        monkeypatch.setattr(bulkscan, "available", lambda: False)
    return sglang_fast.parse


def _scanner_dicts() -> list[dict]:
    """What parsers.sglang built for each line before any split: the reference."""
    out = []
    for line in (DECODE, PREFILL, ODD):
        kind = "decode_batch" if "Decode" in line else "prefill_batch"
        rest = line.split("] ", 1)[1].split(" batch", 1)[1]
        out.append(sglang._batch(kind, rest)[0][2])
    out.append({"client": "10.0.0.7:51234", "level": "INFO", "method": "POST", "path": "/generate"})
    return out


def test_batch_and_access_rows_need_no_json_and_lose_nothing(parse) -> None:
    ev = parse(TEXT, "tp1.log").events
    assert ev.get_column("kind").to_list() == ["decode_batch", "prefill_batch", "decode_batch", "http_access"]
    rows = list(narrow_fields(ev).iter_rows(named=True))
    assert [r["attrs"] for r in rows] == [None, None, '{"gen_throughput": 913, "spec_mode": "eagle"}',
                                          '{"client": "10.0.0.7:51234", "level": "INFO", "method": "POST", "path": "/generate"}']
    for r, want in zip(rows, _scanner_dicts(), strict=True):
        got = attrs(r)
        # the same keys, values and types (913 stays an int, 0.9 a float, True a bool), in sorted order
        assert json.dumps(got) == json.dumps(dict(sorted(want.items())))
    assert rows[0]["fields"]["queue_req"] == 17 and rows[0]["fields"]["cuda_graph"] is True
    assert rows[2]["fields"]["gen_throughput"] is None  # an int: kept in attrs, not cast
    # the access line's strings stay in attrs (as members they would cost 16 bytes in every row)
    assert ev.get_column("fields").is_null().to_list() == [False, False, False, True]


def test_the_accessor_reads_the_typed_value_first() -> None:
    row = {"kind": "decode_batch", "attrs": '{"spec_mode": "eagle"}', "fields": {"queue_req": 7, "token": None}}
    assert field(row, "queue_req") == 7
    assert field(row, "spec_mode") == "eagle"
    assert field(row, "token") is None
    assert attrs(row) == {"queue_req": 7, "spec_mode": "eagle"}


def test_rows_of_other_kinds_keep_attrs_as_before() -> None:
    text = "[2025-11-20 09:18:02 TP3] KV Cache is allocated. #tokens: 221628, K size: 7.25 GB, V size: 7.25 GB\n"
    row = sglang.parse(text, "tp3.log").events.row(0, named=True)
    assert row["kind"] == "kv_cache_allocated" and row["fields"] is None
    assert json.loads(row["attrs"])["k_size_bytes"] == attrs(row)["k_size_bytes"] > 7 << 30


def test_split_moves_only_values_of_the_members_type() -> None:
    fields, rest = split_fields("decode_batch", {"queue_req": True, "token_usage": 1, "running_req": 2 ** 70,
                                                 "cuda_graph": True})
    assert fields == {"cuda_graph": True}
    assert rest == {"queue_req": True, "token_usage": 1, "running_req": 2 ** 70}
    assert split_fields("decode_batch", '{"queue_req": 3}') == (None, '{"queue_req": 3}')  # JSON text as given


def test_parquet_has_each_member_as_a_real_column(tmp_path) -> None:
    log = tmp_path / "tp1.log"
    log.write_text(TEXT)
    tl = build_timeline([log])
    out = tmp_path / "t.parquet"
    write_parquet(tl, out)
    schema = pq.ParquetFile(out).schema
    leaves = {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}
    assert leaves["fields.queue_req"] == "INT64" and leaves["fields.token_usage"] == "DOUBLE"
    back = pl.read_parquet(out)
    assert back.schema["fields"] == pl.Struct(FIELDS)
    q = back.filter(pl.col("kind") == "decode_batch").get_column("fields").struct.field("queue_req").to_list()
    assert q == [17, 12]


def test_values_of_another_type_stay_in_attrs_on_every_path(parse) -> None:
    """A member's value of another class (a decimal queue, a numeric cuda graph, a whole-number usage, a
    percent throughput) stays in attrs row by row, the same on the scanner, native and polars paths."""
    lines = [DECODE,
             "[2025-11-20 11:02:42 DP1 TP1] Decode batch, #running-req: 41, #token: 199472, token usage: 1, "
             "cuda graph: 1, gen throughput (token/s): 91%, #queue-req: 1.5, ",
             DECODE.replace("11:02:41", "11:02:43")]
    ev = parse("\n".join(lines) + "\n", "tp1.log").events
    want = sglang.parse("\n".join(lines) + "\n", "tp1.log").events
    assert ev.select("attrs", "fields").equals(want.select("attrs", "fields"))
    mid = ev.row(1, named=True)
    assert json.loads(mid["attrs"]) == {"cuda_graph": 1, "queue_req": 1.5, "token_usage": 1}
    assert mid["fields"]["gen_throughput"] == pytest.approx(0.91) and mid["fields"]["token"] == 199472
