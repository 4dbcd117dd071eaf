"""`kernelopt bench --solutions FILE`: a published release in CUDA-L1's format (one JSON object a
line: level_id, task_id, ref_code, custom_code, score_default) rescored through the real CLI,
the reported score beside our verdict, the reported-vs-measured rows with the reasons we
disagree, bad lines reported by number, and a resume that judges nothing twice. The file is our
own (examples/level1/1_ReLU.py and candidates written here), never CUDA-L1's data."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

RELU = (REPO / "examples" / "level1" / "1_ReLU.py").read_text()

# Honest, and far below 1x whatever the CPU's noise (it sleeps 3 ms a call): slower than the 3x reported.
SLOW_RELU = ("import time\nimport torch\nclass ModelNew(torch.nn.Module):\n"
             "    def forward(self, x):\n        time.sleep(0.003)\n        return torch.relu(x)\n")
WRONG_RELU = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
              "        return torch.relu(x) * 2\n")
ALIASING_RELU = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu_()\n"


def entry(task, custom, score, ref=RELU, **more):
    return json.dumps({"level_id": 1, "task_id": task, "ref_code": ref, "custom_code": custom,
                       "score_default": score, "score_cuda_graph": None, **more})


@pytest.fixture
def release(tmp_path):
    lines = [
        entry(1, SLOW_RELU, 3.0),                                            # 1: correct, slower than reported
        entry(1, WRONG_RELU, 2.5),                                           # 2: incorrect
        '{"level_id": 1, "task_id": 2, "ref_code": "import torch"',          # 3: not JSON
        json.dumps({"level_id": 1, "task_id": 5, "custom_code": "x = 1"}),   # 4: no ref_code
        entry(7, SLOW_RELU, 1.5, ref="import torch\nclass Model: pass\n"),   # 5: no get_inputs
        entry(1, None, None),                                                # 6: no candidate released
        "",
        entry(1, ALIASING_RELU, 4.0),                                        # 8: rejected
    ]
    path = tmp_path / "h100.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def bench(path, out, *extra):
    command = [sys.executable, "-m", "kernelopt", "bench", "--solutions", str(path), "--out", str(out),
               "--device", "cpu", "--timing-budget", "1", "--json", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_cuda_l1_release_is_rescored_beside_its_reported_scores(release, tmp_path):
    out = tmp_path / "out"
    result = bench(release, out)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["problems"] == [{"level": 1, "problem_id": 1, "name": "Applies_ReLU_to_its_input"}]
    assert summary["n_solutions"] == 3

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    verdicts = {r["line"]: r for r in records if r.get("kind") is None}
    assert {line: r["status"] for line, r in verdicts.items()} == {1: "correct", 2: "incorrect", 8: "rejected"}
    assert {line: r["reported_speedup"] for line, r in verdicts.items()} == {1: 3.0, 2: 2.5, 8: 4.0}
    assert verdicts[1]["reported_scores"] == {"score_default": 3.0, "score_cuda_graph": None}
    assert verdicts[1]["file"] == f"{release}:1"

    published = summary["published"]
    assert [b["line"] for b in published["bad_lines"]] == [3, 4, 5]
    assert "not JSON" in published["bad_lines"][0]["error"]
    assert "missing field(s) ref_code" in published["bad_lines"][1]["error"]
    assert "get_inputs" in published["bad_lines"][2]["error"]
    assert published["without_candidate"] == [{"line": 6, "level": 1, "problem_id": 1}]
    for bad in published["bad_lines"]:
        assert f"line {bad['line']}: not judged" in result.stderr

    rows = {row["line"]: row for row in published["rows"]}
    slow = rows[1]
    assert slow["agreement"] == "slower" and slow["status"] == "correct" and slow["reported_speedup"] == 3.0
    assert slow["speedup"] < 1 and slow["interval"][0] <= slow["speedup"] <= slow["interval"][1]
    assert slow["reason"].startswith("slower than reported: measured") and "reported 3x" in slow["reason"]
    assert rows[2]["agreement"] == "incorrect" and rows[2]["reason"].startswith("incorrect: ")
    assert rows[2]["reason"].removeprefix("incorrect: ")[:40] == " ".join(verdicts[2]["message"].split())[:40]
    assert rows[8]["agreement"] == "rejected"
    assert rows[8]["reason"].startswith(f"rejected ({', '.join(verdicts[8]['flags'])}): ")

    aggregate = published["aggregate"]
    assert aggregate["n_judged"] == aggregate["n_reported"] == 3
    counts = [aggregate[k] for k in ("n_correct", "n_rejected", "n_incorrect", "n_slower")]
    assert counts == [1, 1, 1, 1]
    assert aggregate["reported_mean"] == pytest.approx((3.0 + 2.5 + 4.0) / 3)
    assert aggregate["reported_geomean"] == pytest.approx((3.0 * 2.5 * 4.0) ** (1 / 3))
    # a candidate we do not find correct counts as 1x
    assert aggregate["measured_mean"] == pytest.approx((slow["speedup"] + 2) / 3)
    assert aggregate["measured_geomean_where_correct"] == pytest.approx(slow["speedup"])

    # resume: nothing judged twice, the same table
    again = bench(release, out)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("(from an earlier run)") == 3
    assert len((out / "results.jsonl").read_text().splitlines()) == len(records)
    assert json.loads(again.stdout)["published"]["rows"] == published["rows"]

    # the text rendering and the report carry the table
    text = subprocess.run([sys.executable, "-m", "kernelopt", "bench", "--solutions", str(release), "--out",
                           str(out), "--device", "cpu"], capture_output=True, text=True, timeout=600)
    assert "reported vs measured" in text.stdout and "slower than reported" in text.stdout
    assert "line 3 not judged" in text.stdout
    report = subprocess.run([sys.executable, "-m", "kernelopt", "report", str(out)], capture_output=True, text=True,
                            timeout=600)
    assert report.returncode == 0, report.stderr
    markdown = (out / "report.md").read_text()
    assert "## Reported vs measured" in markdown and "slower than reported" in markdown
    assert "Reported vs measured" in (out / "report.html").read_text()


def test_a_release_file_takes_no_kernelbench_and_bad_files_are_usage_errors(release, tmp_path):
    both = bench(release, tmp_path / "o1", "--kernelbench", str(REPO / "examples"))
    assert both.returncode == 2 and "leave --kernelbench out" in both.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n{}\n")
    bad = bench(junk, tmp_path / "o2")
    assert bad.returncode == 2 and "no usable entry" in bad.stderr and "line 1" in bad.stderr
    none = bench(release, tmp_path / "o3", "--problems", "99")
    assert none.returncode == 2 and "no usable entry" in none.stderr
    folder = subprocess.run([sys.executable, "-m", "kernelopt", "bench", "--solutions", str(tmp_path), "--device",
                             "cpu"], capture_output=True, text=True, timeout=600)
    assert folder.returncode == 2 and "needs --kernelbench" in folder.stderr


def test_the_reader_and_the_agreement_rules_without_judging(tmp_path):
    from kernelopt.bench.published import _agreement, read_published

    path = tmp_path / "release.json"  # a JSON array, with names, two samples of one task
    path.write_text(json.dumps([json.loads(entry(1, SLOW_RELU, 3.0, name="1_ReLU.py")),
                                json.loads(entry(1, WRONG_RELU, None)),
                                json.loads(entry(1, WRONG_RELU, 1.0, ref=RELU + "\n# changed\n")),
                                {"level_id": 2, "task_id": "x", "ref_code": RELU, "custom_code": ""}]))
    published = read_published(path)
    assert [p.name for p in published.problem_set] == ["ReLU"]
    assert [(s.sample, s.extra["line"], s.extra["reported_speedup"]) for s in published.solutions] == [
        (0, 1, 3.0), (1, 2, None)]
    assert [(b["line"], b["error"]) for b in published.bad_lines] == [
        (3, "level 1 task 1: a ref_code other than line 1's for the same task"), (4, "task_id is not an integer")]

    correct = {"status": "correct", "message": "", "flags": []}
    assert _agreement(correct, 2.0, 1.9, 0.1) == ("agrees", "")  # 2.0 inside 1.71-2.09
    assert _agreement(correct, 1.0, 1.9, 0.1) == ("agrees", "")  # faster than reported is no disagreement
    assert _agreement(correct, 2.5, 1.9, 0.1)[0] == "slower"
    assert _agreement(correct, None, 1.9, 0.1) == ("no_reported_score", "")
    timeout = {"status": "timeout", "message": "took 30 s"}
    assert _agreement(timeout, 2.0, None, None) == ("timeout", "timeout: took 30 s")
