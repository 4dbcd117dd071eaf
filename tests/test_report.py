"""The speedup distribution and optimization-kind metrics against hand-computed values, and
`kernelopt report` on bench run folders built here by hand (solution records and agent records;
no evaluation runs): the page's plots, its escaping, report.json against the summary, report.md,
and the errors for folders that are not finished bench runs."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser

import pytest

from kernelopt.bench.summary import summarize_results
from kernelopt.cli import main
from kernelopt.kernelbench.metrics import (
    DISTRIBUTION_KEYS, FAST_P_THRESHOLDS, ProblemOutcome, best_per_problem, fast_p_curve, fast_p_key,
    kind_breakdown, speedup_bucket, speedup_distribution, summarize,
)
from kernelopt.kernelbench.problem_set import load_problem_set

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''

EVIL_NAME = "<script>alert(1)</script>"


# -- metrics ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("speedup, bucket", [
    (0.01, "<=0.5"), (0.5, "<=0.5"), (0.5000001, "0.5-0.8"), (0.8, "0.5-0.8"), (0.81, "0.8-1"), (1.0, "0.8-1"),
    (1.0001, "1-1.5"), (1.5, "1-1.5"), (2.0, "1.5-2"), (2.01, "2-5"), (5.0, "2-5"), (5.01, ">5"), (300.0, ">5"),
])
def test_distribution_buckets_hold_speedups_above_their_lower_edge_up_to_their_upper(speedup, bucket):
    assert speedup_bucket(ProblemOutcome(True, speedup)) == bucket


def test_failures_and_untimed_results_have_their_own_buckets():
    assert speedup_bucket(None) == "failed"
    assert speedup_bucket(ProblemOutcome(False, 3.0)) == "failed", "an incorrect result's speedup means nothing"
    assert speedup_bucket(ProblemOutcome(True, None)) == "untimed"
    assert speedup_bucket(ProblemOutcome(True, math.inf)) == "untimed"


def test_distribution_counts_every_problem_of_the_set_and_agrees_with_fast_p():
    outcomes = {1: ProblemOutcome(True, 0.3), 2: ProblemOutcome(True, 1.0), 3: ProblemOutcome(True, 1.2),
                4: ProblemOutcome(False), 5: ProblemOutcome(True, 7.0), 6: ProblemOutcome(True, 2.0)}
    keys = [1, 2, 3, 4, 5, 6, 7]  # 7 has no result: failed
    counts = speedup_distribution(keys, outcomes)
    assert list(counts) == list(DISTRIBUTION_KEYS)
    assert counts == {"failed": 2, "<=0.5": 1, "0.5-0.8": 0, "0.8-1": 1, "1-1.5": 1, "1.5-2": 1, "2-5": 0,
                      ">5": 1, "untimed": 0}
    # fast_p * n is the count of the buckets above p: the buckets share fast_p's strict "> p".
    summary = summarize(keys, outcomes)
    assert summary["fast_1"] * 7 == counts["1-1.5"] + counts["1.5-2"] + counts["2-5"] + counts[">5"] == 3
    assert summary["fast_2"] * 7 == counts["2-5"] + counts[">5"] == 1
    curve = fast_p_curve(keys, outcomes, FAST_P_THRESHOLDS)
    assert curve == [summary[fast_p_key(p)] for p in FAST_P_THRESHOLDS]


def test_kind_breakdown_counts_best_correct_outcomes_and_their_geomean():
    outcomes = {
        "a": ProblemOutcome(True, 2.0, ("pytorch", "torch_compile")),
        "b": ProblemOutcome(True, 8.0, ("pytorch",)),
        "c": ProblemOutcome(True, 0.5, ("cuda_extension",)),
        "d": ProblemOutcome(False, None, ("triton",)),  # incorrect: not counted
        "e": ProblemOutcome(True, None, ("triton", "triton")),  # correct, untimed: counted once, no geomean
    }
    breakdown = kind_breakdown(["a", "b", "c", "d", "e", "f"], outcomes)
    assert list(breakdown) == ["pytorch", "cuda_extension", "torch_compile", "triton"]  # by count, then name
    assert breakdown["pytorch"] == {"n_problems": 2, "geomean_speedup": pytest.approx(4.0)}
    assert breakdown["torch_compile"] == {"n_problems": 1, "geomean_speedup": pytest.approx(2.0)}
    assert breakdown["cuda_extension"] == {"n_problems": 1, "geomean_speedup": pytest.approx(0.5)}
    assert breakdown["triton"] == {"n_problems": 1, "geomean_speedup": None}
    assert kind_breakdown(["x"], {}) == {}


def test_the_best_record_is_correct_first_then_fastest_and_health_probes_are_not_verdicts():
    records = [
        {"level": 1, "problem_id": 1, "correct": False, "speedup": 9.0, "key": "a"},
        {"level": 1, "problem_id": 1, "correct": True, "speedup": 1.1, "key": "b"},
        {"level": 1, "problem_id": 1, "correct": True, "speedup": 1.1, "key": "c"},  # a tie keeps the earlier
        {"level": 1, "problem_id": 2, "kind": "health", "flags": ["nondeterministic"], "key": "h"},
        {"level": 1, "problem_id": 3, "kind": "agent", "correct": True, "speedup": 2.0, "key": "d"},
    ]
    best = best_per_problem(records)
    assert {key: record["key"] for key, record in best.items()} == {(1, 1): "b", (1, 3): "d"}


# -- bench run folders, by hand ---------------------------------------------------------------------

def problem_set(tmp_path, layout):
    for level, problem_id, name in layout:
        folder = tmp_path / "set" / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{problem_id}_{name}.py").write_text(PROBLEM)
    return load_problem_set(tmp_path / "set")


def write_run(folder, problems, records, mode, names=None):
    """A bench run folder as kernelopt bench writes it: results.jsonl and summary.json."""
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = summarize_results(problems, records)
    summary["mode"] = mode
    summary["problems"] = [{"level": p.level, "problem_id": p.problem_id, "name": (names or {}).get(p.name, p.name)}
                           for p in problems]
    (folder / "summary.json").write_text(json.dumps(summary))
    return summary


def verdict(level, problem_id, sample, status, speedup=None, kinds=(), flags=(), message=""):
    return {"key": f"{level}/{problem_id}/{sample}/abc", "level": level, "problem_id": problem_id, "sample": sample,
            "file": f"level_{level}_problem_{problem_id}_sample_{sample}_kernel.py", "status": status,
            "correct": status == "correct", "speedup": speedup, "message": message,
            "optimization_kinds": list(kinds), "flags": list(flags)}


def health(level, problem_id, flags=(), details=()):
    return {"key": f"health/{level}/{problem_id}", "kind": "health", "level": level, "problem_id": problem_id,
            "healthy": not flags, "flags": list(flags), "details": list(details)}


@pytest.fixture
def solutions_run(tmp_path):
    problems = problem_set(tmp_path, [(1, 1, "ReLU"), (1, 2, "Tanh"), (1, 3, "Sum"), (1, 4, "Softmax"),
                                      (2, 1, "Fused"), (2, 2, "Mlp")])
    records = [
        health(1, 1), health(1, 4, ["below_tolerance"], ["every output's RMS is below atol <0.01>"]),
        verdict(1, 1, 0, "correct", 2.5, ["pytorch", "torch_compile"], message="<img src=x onerror=alert(1)>"),
        verdict(1, 1, 1, "correct", 1.2, ["pytorch"]),
        verdict(1, 2, 0, "incorrect"), verdict(1, 2, 1, "correct", 0.5, ["pytorch"]),
        verdict(1, 3, 0, "compile_error", message="error: <stdin>"),
        verdict(1, 4, 0, "correct", 6.0, ["cuda_extension"]),
        verdict(2, 1, 0, "correct", 1.0, ["triton"], flags=["<b>odd</b>"]),
    ]  # 2/2 has no solution at all
    folder = tmp_path / "run"
    summary = write_run(folder, problems, records, "solutions", names={"ReLU": EVIL_NAME})
    return folder, summary


@pytest.fixture
def agent_run(tmp_path):
    problems = problem_set(tmp_path, [(1, 1, "ReLU"), (1, 2, "Tanh"), (1, 3, "Sum")])

    def agent(problem_id, name, status, speedup, best_by_call, kinds=()):
        return {"key": f"agent/1/{problem_id}", "kind": "agent", "level": 1, "problem_id": problem_id, "name": name,
                "status": status, "correct": status == "correct", "speedup": speedup, "run_id": f"r{problem_id}",
                "llm_calls": len(best_by_call), "optimization_kinds": list(kinds), "flags": [], "wall_s": 12.5,
                "cost": 0.01, "best_by_call": best_by_call}

    records = [health(1, 1), health(1, 2), health(1, 3),
               agent(1, "ReLU", "correct", 3.0, [[1, None], [2, 1.5], [3, 1.5], [4, 3.0]], ["pytorch"]),
               agent(2, "Tanh", "correct", 0.8, [[1, 0.8], [2, 0.8]], ["triton"]),
               agent(3, "Sum", "incorrect", None, [[1, None], [2, None], [3, None]])]
    folder = tmp_path / "run"
    summary = write_run(folder, problems, records, "agent")
    return folder, summary


def test_the_summary_holds_the_distribution_and_the_kind_breakdown_per_level(solutions_run):
    _, summary = solutions_run
    assert summary["overall"]["n_problems"] == 6 and summary["overall"]["n_correct"] == 4  # unchanged fields
    distribution = summary["speedup_distribution"]
    assert distribution["levels"]["1"] == {"failed": 1, "<=0.5": 1, "0.5-0.8": 0, "0.8-1": 0, "1-1.5": 0,
                                           "1.5-2": 0, "2-5": 1, ">5": 1, "untimed": 0}
    assert distribution["levels"]["2"] == {**dict.fromkeys(DISTRIBUTION_KEYS, 0), "failed": 1, "0.8-1": 1}
    assert sum(distribution["overall"].values()) == 6
    kinds = summary["optimization_kinds"]["overall"]
    # Only each problem's best sample counts: 1/1's best is 2.5x (pytorch + torch_compile), not 1.2x.
    assert kinds["pytorch"] == {"n_problems": 2, "geomean_speedup": pytest.approx(math.sqrt(2.5 * 0.5))}
    assert kinds["torch_compile"]["geomean_speedup"] == pytest.approx(2.5)
    assert summary["optimization_kinds"]["levels"]["2"] == {"triton": {"n_problems": 1, "geomean_speedup": 1.0}}


# -- the report -------------------------------------------------------------------------------------

class Page(HTMLParser):
    """Every element of the page with its attributes and the plot (figure id) it is in."""

    def __init__(self, text):
        super().__init__()
        self.elements, self.figure, self.text = [], None, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figure = attrs.get("id")
        self.elements.append((tag, attrs, self.figure))

    def handle_endtag(self, tag):
        if tag == "figure":
            self.figure = None

    def handle_data(self, data):
        self.text.append(data)

    def count(self, figure, tag, css=None):
        return len(self.find(figure, tag, css))

    def find(self, figure, tag, css=None):
        return [a for t, a, f in self.elements if f == figure and t == tag and (css is None or a.get("class") == css)]


def report(capsys, folder, *extra):
    code = main(["report", str(folder), "--json", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_self_contained_and_escaped(html):
    page = Page(html)
    tags = {tag for tag, _, _ in page.elements}
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    lowered = html.lower()
    for reference in ("http", "src=", "<link", "url(", "@import", "href="):
        assert reference not in lowered, reference
    return page


def test_a_solutions_run_gets_its_plots_tables_and_an_escaped_page(solutions_run, capsys):
    folder, summary = solutions_run
    code, out, _ = report(capsys, folder)
    assert code == 0
    printed = json.loads(out)  # exactly one JSON object
    assert printed["files"] == {kind: str(folder / f"report.{kind}") for kind in ("html", "json", "md")}
    assert printed["overall"] == summary["overall"] and printed["mode"] == "solutions"

    html = (folder / "report.html").read_text()
    page = assert_self_contained_and_escaped(html)
    assert EVIL_NAME not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>odd</b>" not in html and "&lt;b&gt;odd&lt;/b&gt;" in html
    figures = [attrs["id"] for tag, attrs, _ in page.elements if tag == "figure"]
    assert figures == ["plot-speedup", "plot-fast-p", "plot-distribution"]
    assert all(page.count(figure, "svg") == 1 for figure in figures)
    assert "No agent runs in this folder" in html  # plot (b) is left out, with a note
    # (a): a bar per correct problem (2.5, 0.5, 6.0, 1.0), a cross per failed one (1/3, 2/2).
    assert page.count("plot-speedup", "rect", "bar") == 4 and page.count("plot-speedup", "g", "failed") == 2
    assert page.count("plot-speedup", "line", "unity") == 1
    # (c): one curve per level and one over all, 61 points each (p = 0, 0.05, .., 3).
    curves = page.find("plot-fast-p", "polyline")
    assert len(curves) == 3 and all(len(c["points"].split()) == 61 for c in curves)
    # (d): a bar per bucket (no "untimed" bar: none is), heights in the ratio of the counts.
    bars = page.find("plot-distribution", "rect", "bar")
    assert len(bars) == 8
    heights = [float(b["height"]) for b in bars]
    assert heights[0] == pytest.approx(2 * heights[1], rel=0.01) and heights[2] == 0  # failed 2, <=0.5 1, 0.5-0.8 0
    text = " ".join(page.text)
    assert "below_tolerance" in text and "cuda_extension" in text and "torch_compile" in text


def test_report_json_round_trips_and_its_numbers_are_the_summary(solutions_run, capsys):
    folder, summary = solutions_run
    assert report(capsys, folder)[0] == 0
    data = json.loads((folder / "report.json").read_text())
    assert data["summary"] == summary and data["mode"] == "solutions"
    assert data["speedup_distribution"] == summary["speedup_distribution"]
    plots = data["plots"]
    assert plots["speedup_distribution"]["counts"] == list(summary["speedup_distribution"]["overall"].values())
    curve = dict(zip(plots["fast_p_curve"]["p"], plots["fast_p_curve"]["overall"]))
    for p in FAST_P_THRESHOLDS:
        assert curve[p] == pytest.approx(summary["overall"][fast_p_key(p)])
    assert plots["fast_p_curve"]["levels"]["2"][0] == summary["levels"]["2"]["fast_0"] == 0.5
    assert plots["best_by_call"] is None
    rows = {(r["level"], r["problem_id"]): r for r in data["problems"]}
    assert [(r["level"], r["problem_id"]) for r in data["problems"]] == [p for p in rows]  # the set's order
    assert rows[(1, 1)]["name"] == EVIL_NAME and rows[(1, 1)]["speedup"] == 2.5 and rows[(1, 1)]["attempts"] == 2
    assert rows[(1, 2)]["status"] == "correct" and rows[(1, 3)]["status"] == "compile_error"
    assert rows[(2, 2)]["status"] == "no_solution" and rows[(2, 2)]["speedup"] is None
    assert rows[(1, 4)]["health"] == ["below_tolerance"] and rows[(2, 1)]["flags"] == ["<b>odd</b>"]
    assert [p["speedup"] for p in plots["speedup_per_problem"]] == [2.5, 0.5, None, 6.0, 1.0, None]


def test_report_md_has_the_tables(solutions_run, capsys, tmp_path):
    folder, _ = solutions_run
    out = tmp_path / "elsewhere" / "report"
    code, printed, _ = report(capsys, folder, "--out", str(out))
    assert code == 0 and json.loads(printed)["files"]["md"] == str(out / "report.md")
    assert not (folder / "report.md").exists()
    markdown = (out / "report.md").read_text()
    for title in ("## Metrics", "## Speedup distribution per level", "## Optimization kinds", "## Problem health",
                  "## Problems"):
        assert title in markdown
    assert "| level | problems | correct | fast_0 | fast_0.5 | fast_0.8 | fast_1 | fast_1.5 | fast_2 |" in markdown
    assert "| all | 6 | 4 | 0.67 | 0.50 | 0.50 | 0.33 | 0.33 | 0.33 |" in markdown
    assert "| level | failed | <=0.5 |" not in markdown  # bucket names are escaped like any cell
    assert "| all | 2 | 1 | 0 | 1 | 0 | 0 | 1 | 1 |" in markdown
    assert "| pytorch | 2 | 1.12x | 2 | 0 |" in markdown
    assert EVIL_NAME not in markdown and "&lt;script&gt;" in markdown
    assert "| 2 | 2 | Mlp | no_solution | - |" in markdown


def test_an_agent_run_plots_the_best_speedup_against_llm_calls(agent_run, capsys):
    folder, _ = agent_run
    code, out, _ = report(capsys, folder)
    assert code == 0 and json.loads(out)["mode"] == "agent"
    series = json.loads((folder / "report.json").read_text())["plots"]["best_by_call"]
    assert series["calls"] == [1, 2, 3, 4]
    # Over the set, a problem without a correct kernel faster than its reference counts 1x:
    # call 1: 1, 1 (0.8x), 1; calls 2-3: 1.5, 1, 1; call 4: 3, 1, 1.
    expected = [1.0, 1.5 ** (1 / 3), 1.5 ** (1 / 3), 3 ** (1 / 3)]
    assert series["geomean_with_fallback"] == pytest.approx(expected)
    assert series["fast_0"] == pytest.approx([1 / 3, 2 / 3, 2 / 3, 2 / 3])
    assert series["fast_1"] == pytest.approx([0, 1 / 3, 1 / 3, 1 / 3])
    assert [p["points"] for p in series["problems"]] == [[[2, 1.5], [3, 1.5], [4, 3.0]], [[1, 0.8], [2, 0.8]], []]

    html = (folder / "report.html").read_text()
    page = assert_self_contained_and_escaped(html)
    assert page.count("plot-calls", "svg") == 1
    lines = page.find("plot-calls", "polyline")
    assert sorted(len(line["points"].split()) for line in lines) == [2, 3, 4]  # two problems and the geomean
    assert page.count("plot-calls", "g", "problem") == 2  # 1/3 never had a correct kernel
    assert page.count("plot-calls", "circle", "point") == 4  # a marker per call on the geomean
    assert "LLM calls" in " ".join(page.text) and "12.5" in html
    markdown = (folder / "report.md").read_text()
    assert "| level | id | name | status | best speedup | kinds | flags | health | LLM calls | cost | wall s |" \
        in markdown
    assert "| 1 | 1 | ReLU | correct | 3.00x | pytorch |  |  | 4 | 0.01 | 12.5 |" in markdown


def test_folders_that_are_not_finished_bench_runs_are_usage_errors(tmp_path, capsys, solutions_run):
    code, out, err = report(capsys, tmp_path / "nowhere")
    assert code == 2 and json.loads(out)["error"] == "bad_input" and "not a folder" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = report(capsys, empty)
    assert code == 2 and "not a bench run folder (no results.jsonl" in err

    folder, summary = solutions_run
    (folder / "summary.json").unlink()
    code, _, err = report(capsys, folder)
    assert code == 2 and "no summary.json" in err and f"--out {folder}" in err and "resumes" in err

    for damage, says in [("{not json", "damaged"), ("[1, 2]", "not a JSON object"),
                         (json.dumps({k: v for k, v in summary.items() if k != "problems"}), "'problems'"),
                         (json.dumps({**summary, "problems": [{"level": 1}]}), "problems[0]"),
                         (json.dumps({**summary, "problems": [{"level": [1], "problem_id": 1, "name": "x"}]}),
                          "problems[0]"),
                         (json.dumps(summary).replace('"fast_0": 0.5', '"fast_0": NaN', 1), "NaN")]:
        (folder / "summary.json").write_text(damage)
        code, out, err = report(capsys, folder)
        assert code == 2 and json.loads(out)["error"] == "bad_input", damage
        assert says in err and "rerun the bench command with the same --out" in err, err
    assert not (folder / "report.html").exists()


def test_a_torn_last_line_of_results_is_left_out_and_counted(solutions_run, capsys):
    folder, _ = solutions_run
    with open(folder / "results.jsonl", "a") as handle:
        handle.write('{"key": "1/2/7/torn", "level": 1, "prob')
    code, out, _ = report(capsys, folder)
    assert code == 0 and json.loads(out)["skipped_lines"] == 1
    assert "1 damaged line(s) of results.jsonl were left out" in (folder / "report.html").read_text()


def test_metrics_against_each_baseline_get_a_table(solutions_run, capsys):
    folder, summary = solutions_run
    against = {"levels": {"1": {**summary["levels"]["1"], "geomean_speedup": 0.42}},
               "overall": {**summary["overall"], "fast_1": 0.0, "geomean_speedup": 0.41}}
    (folder / "summary.json").write_text(json.dumps({**summary, "vs_baselines": {"<compile>": against}}))
    assert report(capsys, folder)[0] == 0
    markdown = (folder / "report.md").read_text()
    assert "## Metrics against &lt;compile&gt;" in markdown
    assert "| all | 6 | 4 | 0.67 | 0.50 | 0.50 | 0.00 | 0.33 | 0.33 | 0.41x |" in markdown
    html = (folder / "report.html").read_text()
    assert "Metrics against &lt;compile&gt;" in html and "0.42x" in html and "<compile>" not in html


def test_verdicts_with_a_physical_floor_get_a_speed_of_light_table(tmp_path, capsys):
    problems = problem_set(tmp_path, [(1, 1, "ReLU"), (1, 2, "Tanh"), (1, 3, "Sum")])
    floored = verdict(1, 1, 0, "correct", 2.0, ["pytorch"])
    floored["timing"] = {"reference_ms": 1.0, "candidate_ms": 0.5, "floor_ms": 0.05, "floor_source": "measured",
                         "reference_sol": 0.05, "candidate_sol": 0.1}
    older = verdict(1, 2, 0, "correct", 1.5, ["pytorch"])
    older["timing"] = {"reference_ms": 1.0, "candidate_ms": 0.66}  # stored before the floor: no row
    wrong = verdict(1, 3, 0, "incorrect")
    wrong["timing"] = {"floor_ms": 0.05}  # not correct: no row
    folder = tmp_path / "run"
    write_run(folder, problems, [floored, older, wrong], "solutions")
    code, _, _ = report(capsys, folder)
    assert code == 0
    markdown = (folder / "report.md").read_text()
    assert "## Speed of light" in markdown
    assert "| level | id | name | best speedup | candidate SOL | reference SOL | floor ms | ceiling |" in markdown
    assert "| 1 | 1 | ReLU | 2.00x | 10.0% | 5.0% | 0.05 | measured |" in markdown
    assert "| 1 | 2 | Tanh |" not in markdown.split("## Speed of light")[1].split("##")[0]


def test_an_agent_run_without_a_price_reports_its_cost_as_unknown_not_free(tmp_path, capsys):
    problems = problem_set(tmp_path, [(1, 1, "ReLU")])
    record = {"key": "agent/1/1", "kind": "agent", "level": 1, "problem_id": 1, "name": "ReLU", "status": "correct",
              "correct": True, "speedup": 2.0, "run_id": "r1", "llm_calls": 3, "optimization_kinds": [],
              "flags": [], "wall_s": 4.0, "cost": None, "best_by_call": [[1, 2.0]]}
    folder = tmp_path / "run"
    summary = write_run(folder, problems, [health(1, 1), record], "agent")
    summary.update(llm_calls=3, cost=None, model="m", strategy="refine")
    (folder / "summary.json").write_text(json.dumps(summary))
    code, _, _ = report(capsys, folder)
    assert code == 0
    markdown = (folder / "report.md").read_text()
    assert "LLM calls 3, cost unknown (no --price for the model)." in markdown
    assert "| 1 | 1 | ReLU | correct | 2.00x |  |  |  | 3 | unknown | 4 |" in markdown
    summary["cost"] = 0.25
    (folder / "summary.json").write_text(json.dumps(summary))
    report(capsys, folder)
    assert "LLM calls 3, cost $0.2500." in (folder / "report.md").read_text()
