"""`kernelopt report` on a `kernelopt model optimize` run folder (plan.json + report.json, written
here by hand; tests/test_model.py reports a real run): the page's "Hot spots" section with each
spot's share, speedup alone and fate, the end-to-end speedup against Amdahl's prediction, the
plot, the escaping, report.md, and a damaged report.json as a usage error."""

from __future__ import annotations

import json

import pytest

from test_report import assert_self_contained_and_escaped, report

from kernelopt.bench.report import is_model_run

EVIL = "<script>alert(1)</script>"


def model_run(folder, end_to_end=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(json.dumps({"model": "m.py", "spots": []}))
    data = {
        "model": "tiny_transformer",
        "spots": [{"module": "blocks.0.attn", "share": 0.42, "speedup_alone": 2.5, "alone": "correct",
                   "source": "run a", "composed": True, "survived": True, "dropped_reason": None},
                  {"module": "blocks.1.attn.qkv", "share": 0.08, "speedup_alone": 1.25, "alone": "correct",
                   "source": "run b", "composed": True, "survived": False,
                   "dropped_reason": f"runtime_error: view size is not compatible {EVIL}"},
                  {"module": "blocks.1.mlp", "share": 0.2, "speedup_alone": None, "alone": "incorrect",
                   "source": "run c", "composed": False, "survived": False, "dropped_reason": None}],
        "end_to_end": end_to_end or {"status": "correct", "correct": True, "speedup": 1.31,
                                     "interval": [1.2, 1.42], "message": ""},
        "amdahl_prediction": round(1 / (1 - 0.42 + 0.42 / 2.5), 4),
        "optimized": str(folder / "optimized.py"),
        "runs": [{"module": "blocks.0.attn", "run_id": "r-attn", "llm_calls": 3, "best_speedup": 2.5,
                  "status": "finished"}],
        "not_extracted": [{"module": "head", "reason": "a class defined inside a function"}],
        "status": "finished", "out": str(folder)}
    (folder / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    return folder, data


def test_a_model_run_gets_its_hot_spots_section(tmp_path, capsys):
    folder, data = model_run(tmp_path / "run")
    before = (folder / "report.json").read_text()
    assert is_model_run(folder)
    code, out, err = report(capsys, folder)
    assert code == 0, err
    printed = json.loads(out)
    assert printed["mode"] == "model" and printed["amdahl_prediction"] == pytest.approx(1.3369, abs=1e-4)
    assert printed["amdahl_free_bound"] == pytest.approx(1 / (1 - 0.42), abs=1e-4)   # the kept spot only
    assert [s["survived"] for s in printed["spots"]] == [True, False, False]
    assert (folder / "report.json").read_text() == before   # model optimize's data, never rewritten

    html = (folder / "report.html").read_text()
    page = assert_self_contained_and_escaped(html)
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    ids = [attrs.get("id") for tag, attrs, _ in page.elements if tag in ("section", "h2")]
    assert ids[:3] == ["model", "model-spots", "model-end-to-end"] and "model-not-extracted" in ids
    text = " ".join(page.text)
    for shown in ("blocks.0.attn", "42.0%", "2.50x", "kept", "r-attn", "dropped: runtime_error: view size",
                  "8.0%", "1.25x", "not composed", "incorrect", "1.31x", "1.20x-1.42x", "1.34x", "1.72x",
                  "0.98", "a class defined inside a function", "1 of 3 hot spot(s) kept"):
        assert shown in text, shown
    # the plot: a bar per spot with a speedup alone, Amdahl's prediction and the end to end; a cross for none
    assert page.count("plot-model-speedups", "rect", "bar") == 4
    assert page.count("plot-model-speedups", "g", "failed") == 1
    assert "differ by more than a quarter" not in text      # 1.31x measured, 1.34x predicted
    md = (folder / "report.md").read_text()
    assert "## Hot spots" in md and "| blocks.0.attn | 42.0% | 2.50x |" in md and "## End to end against Amdahl" in md


def test_a_model_run_composed_nothing_and_one_elsewhere(tmp_path, capsys):
    folder, _ = model_run(tmp_path / "run", {"status": "nothing composed", "correct": False, "speedup": None,
                                             "interval": None, "message": ""})
    code, out, err = report(capsys, folder, "--out", str(tmp_path / "elsewhere"))
    assert code == 0, err
    html = (tmp_path / "elsewhere" / "report.html").read_text()
    assert "end to end: nothing composed" in html and "differ by more than a quarter" not in html
    folder, _ = model_run(tmp_path / "far", {"status": "correct", "correct": True, "speedup": 3.45,
                                             "interval": [2.8, 4.1], "message": ""})
    assert report(capsys, folder)[0] == 0
    assert "differ by more than a quarter" in (folder / "report.html").read_text()   # 3.45x against 1.34x
    assert json.loads((tmp_path / "elsewhere" / "report.json").read_text())["model"] == "tiny_transformer"


def test_a_damaged_model_report_is_a_usage_error(tmp_path, capsys):
    folder, data = model_run(tmp_path / "run")
    for damage, says in [("{not json", "damaged"), (json.dumps({"spots": []}), "no spots and end_to_end"),
                         (json.dumps({**data, "spots": [{"module": "a"}]}), "spots[0] lacks")]:
        (folder / "report.json").write_text(damage)
        code, out, err = report(capsys, folder)
        assert code == 2 and json.loads(out)["error"] == "bad_input" and says in err and "--resume" in err, err
    assert not (folder / "report.html").exists()
