"""A record is built once and never changes: `new_record` (the reader's and the client's builder)
makes the same frozen `RequestRecord` as its constructor, the writer encodes the record itself
into the bytes of its dict, and a stage's configuration is parsed once per distinct one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fixtures.runs import make_record

from llmload.core.config import SweepConfig
from llmload.core.files.records import RecordWriter, RequestRecord, encode_json, new_record, read_records
from llmload.loadgen.run.messages import Stage, announced_stage, config_to_dict, stage_message

FIELDS = {
    **make_record(10.0, 11.5, 8, 0.1).to_dict(),
    "chunk_times": [0.1, 0.25],
    "text": "hé",
    "turn": 2,
    "rate": 3.5,
    "run_id": "r1",
}


def test_new_record_is_the_frozen_record_its_constructor_makes():
    built, constructed = new_record(**FIELDS), RequestRecord(**FIELDS)
    assert type(built) is RequestRecord and built == constructed
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.rung = 2  # type: ignore[misc]
    read = RequestRecord.from_dict(built.to_dict())
    assert type(read) is RequestRecord and read == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.outcome = "timeout"  # type: ignore[misc]
    assert dataclasses.replace(read, run_id="r2").run_id == "r2" and read.run_id == "r1"


def test_the_writer_encodes_a_record_as_its_dict(tmp_path):
    rec = new_record(**FIELDS)
    assert encode_json(rec, newline=True) == encode_json(rec.to_dict(), newline=True)
    odd = dataclasses.replace(rec, t_end=np.float64(11.5))  # orjson refuses it: json's fallback
    assert encode_json(odd) == encode_json(odd.to_dict())
    for kind, value in (("record", rec), ("dict", rec.to_dict())):
        writer = RecordWriter(tmp_path / f"{kind}.jsonl", fsync=False, chunk_index=True)
        writer.write(value)
        writer.close()
    for suffix in (".jsonl", ".jsonl.chunks"):
        assert (tmp_path / f"record{suffix}").read_bytes() == (tmp_path / f"dict{suffix}").read_bytes()
    assert read_records(tmp_path / "record.jsonl") == ([rec], [])


def test_a_stage_config_is_parsed_once_per_distinct_config():
    config = SweepConfig(rungs=(1, 2), requests_per_user=3)
    first = announced_stage(stage_message(Stage(0, 0, 1, 3, "m", config, run_id="r")))
    second = announced_stage(stage_message(Stage(1, 1, 2, 3, "m", config, run_id="r")))
    assert first.config is second.config  # one parse for the stages of a run
    assert config_to_dict(first.config) == config_to_dict(config) and first.run_id == "r"
    probe = dataclasses.replace(config, requests_per_rung=40)
    third = announced_stage(stage_message(Stage(2, 2, 2, 1, "m", probe)))
    assert third.config.requests_per_rung == 40 and first.config.requests_per_rung is None
