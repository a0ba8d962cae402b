"""Where a crash stopped (forensics.detectors.crash_site) and what SGL-RUN-001 then says about it."""

from __future__ import annotations

from forensics.analysis import analyse
from forensics.detectors.crash_site import crash_site, outside_forward
from parsers.failures import classify, reaches_model_forward


def _head(frames: str) -> str:
    return "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + frames


def test_a_cut_in_batch_building_rules_out_the_forward_pass_oom():
    site = crash_site(_head('  File "/x/sglang/srt/managers/scheduler.py", line 9, in event_loop_normal\n'
                            '    batch = self.get_next_batch_to_run()\n'))
    assert site is not None and not site.in_forward
    assert "never entered the model's forward pass" in outside_forward(site)


def test_a_cut_at_run_batch_leaves_the_exception_line_to_decide():
    site = crash_site(_head('  File "/x/sglang/srt/managers/scheduler.py", line 9, in event_loop_normal\n'
                            '    result = self.run_batch(batch)\n'))
    assert "decides between" in outside_forward(site)


def test_frames_in_the_model_are_the_forward_pass():
    frames = [("x/managers/scheduler.py", "event_loop_overlap"), ("x/model_executor/model_runner.py", "forward_decode")]
    assert reaches_model_forward(frames)
    assert not reaches_model_forward([("x/managers/detokenizer_manager.py", "event_loop")])


def test_the_detokenizer_is_cpu_side():
    site = crash_site("DetokenizerManager hit an exception: Traceback (most recent call last):\n"
                      '  File "/x/detokenizer_manager.py", line 3, in event_loop\n    output = self.handle(obj)\n')
    assert site.cpu_side and "CPU-side" in outside_forward(site)


def test_a_device_side_assertion_is_named():
    line = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422: indexSelectLargeIndex: block: [9,0,0], thread: [1,0,0]"
            " Assertion `srcIndex < srcSelectDimSize` failed.")
    assert classify(line)[2]["failure"] == "device_assert"


def test_frames_pasted_without_indentation_still_name_the_raiser(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        'File "/venv/lib/python3.11/site-packages/sglang/srt/layers/quantization/__init__.py", line 71, in get_config\n'
        "\n"
        "return QUANTIZATION_METHODS[name]\n"
        "\n"
        'File "/venv/lib/python3.11/site-packages/sglang/srt/layers/quantization/__init__.py", line 40, in lookup\n'
        "\n"
        "raise NotImplementedError()\n"
        "\n"
        "NotImplementedError\n"
        "\n"
        "[2025-03-01 10:00:00] Received sigquit from a child process. It usually means the child failed.\n",
        encoding="utf-8")
    _tl, doc = analyse([log], quiet=True)
    run001 = [f for f in doc["findings"] if f["rule_id"] == "SGL-RUN-001"]
    assert run001 and "NotImplementedError was raised in lookup (__init__.py)" in run001[0]["summary"]
