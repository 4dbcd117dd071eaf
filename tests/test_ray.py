"""Judging on a Ray cluster (kernelopt/cluster, docs/scale.md), on a local Ray instance of a few
CPU actors: the same verdicts as a local run, an actor killed mid-problem losing nothing and
recording nothing twice, a killed driver resumed, the reward pool answering a batch, `serve
--ray local` answering concurrent requests and `generate --ray` matching a local generate.

One Ray instance serves the module (started once: it costs seconds on a 2-core machine); the
CLI tests that must own their instance run the command in a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO

pytest.importorskip("ray", reason="the Ray extra is not installed: pip install 'kernelopt[ray]'")

EXAMPLES = REPO / "examples"
RELU = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
DOUBLED = ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
           "        return torch.relu(x) * 2\n")
# Correct, and slow to load (a second in its constructor): long enough to be killed mid-problem.
SLOW_LOAD = ("import time\nimport torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
             "        super().__init__()\n        time.sleep(1.0)\n    def forward(self, x):\n"
             "        return torch.relu(x)\n")
FAST_SOFTMAX = (EXAMPLES / "candidates/4_RedundantSoftmax/drop_dead_work.py").read_text()
TYPO_SOFTMAX = (EXAMPLES / "candidates/4_RedundantSoftmax/typo.py").read_text()


@pytest.fixture(scope="module")
def cluster():
    from kernelopt.cluster import connect, disconnect

    ray = connect("local", num_cpus=4)
    yield ray
    disconnect()


@pytest.fixture(scope="module")
def pool(cluster):
    from kernelopt.cluster import ClusterSpec, JudgePool

    with JudgePool.start(ClusterSpec(address="local", device="cpu", actors=2)) as judging:
        yield judging


@pytest.fixture
def problem_set(tmp_path):
    root = tmp_path / "checkout" / "KernelBench"
    (root / "level1").mkdir(parents=True)
    for name in ("1_ReLU.py", "4_RedundantSoftmax.py"):
        shutil.copy(EXAMPLES / "level1" / name, root / "level1" / name)
    return root.parent


@pytest.fixture
def solutions(tmp_path):
    folder = tmp_path / "generations"
    folder.mkdir()
    files = {"level_1_problem_1_sample_0_kernel.py": RELU, "level_1_problem_1_sample_1_kernel.py": DOUBLED,
             "level_1_problem_4_sample_0_kernel.py": FAST_SOFTMAX,
             "level_1_problem_4_sample_1_kernel.py": TYPO_SOFTMAX,
             "level_1_problem_1_sample_2_kernel.py": "this is not python"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def address_of(ray) -> str:
    return ray.get_runtime_context().gcs_address


def verdicts(out) -> list[tuple]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return sorted((r["problem_id"], r["sample"], r["status"]) for r in records if r.get("kind") != "health")


def rescore_set(problem_set_path, solutions, out, pool=None) -> dict:
    from kernelopt.bench.rescore import find_solutions, rescore
    from kernelopt.kernelbench import load_problem_set
    from kernelopt.sandbox import EvalOptions

    options = EvalOptions(device="cpu", timing_budget=0.5, correctness_trials=2)
    return rescore(load_problem_set(problem_set_path), find_solutions(solutions), options, out, 1,
                   lambda line: None, pool=pool)


EXPECTED = [(1, 0, "correct"), (1, 1, "incorrect"), (1, 2, "runtime_error"), (4, 0, "correct"),
            (4, 1, "runtime_error")]


def test_rescoring_on_actors_gives_the_verdicts_of_a_local_run(pool, problem_set, solutions, tmp_path):
    local = rescore_set(problem_set, solutions, tmp_path / "local")
    remote = rescore_set(problem_set, solutions, tmp_path / "ray", pool=pool)
    assert verdicts(tmp_path / "local") == verdicts(tmp_path / "ray") == EXPECTED
    assert remote["health"] == local["health"]
    records = [json.loads(line) for line in (tmp_path / "ray" / "results.jsonl").read_text().splitlines()]
    # Every verdict records the device model it was measured on; one model, so no grouping.
    models = {r["device_model"] for r in records if r.get("kind") != "health"}
    assert models == set(pool.device_models) and remote["device_models"] == sorted(models)
    assert "by_device_model" not in remote
    # What an agent's prompt says about the device: the actors' view (a CPU here, one thread timed).
    assert pool.hardware.summary.startswith("the CPU") and any("ONE CPU thread" in f for f in pool.hardware.facts)
    assert pool.agent_device == "cpu"
    assert sorted(r["key"] for r in records if r.get("kind") == "health") == ["health/1/1", "health/1/4"]


def test_an_actor_killed_mid_problem_loses_nothing_and_records_nothing_twice(pool, problem_set, tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    for sample in range(3):  # three slow loads in one call: about three seconds on the actor
        (folder / f"level_1_problem_1_sample_{sample}_kernel.py").write_text(SLOW_LOAD + f"# {sample}\n")
    (folder / "level_1_problem_4_sample_0_kernel.py").write_text(FAST_SOFTMAX)
    replaced_before = pool.replaced
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(summary=rescore_set(problem_set, folder, tmp_path / "out",
                                                                             pool=pool)))
    worker.start()
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and worker.is_alive() and time.monotonic() < deadline:
        busy = pool.busy_actors()
        if busy:
            time.sleep(1.0)  # well inside the problem's call
            victim = busy[0]["pid"]
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.1)
    worker.join(300)
    assert victim is not None, "no actor was ever busy"
    assert "summary" in done, "the run did not finish after its actor was killed"
    assert pool.replaced == replaced_before + 1 and pool.size == 2
    assert victim not in {a["pid"] for a in pool.actors()}
    lines = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert not [key for key, n in Counter(r["key"] for r in lines).items() if n > 1], "recorded twice"
    assert sorted((r["problem_id"], r["sample"], r["status"]) for r in lines if r.get("kind") != "health") == [
        (1, 0, "correct"), (1, 1, "correct"), (1, 2, "correct"), (4, 0, "correct")]


def test_a_killed_driver_is_resumed_and_finishes(cluster, problem_set, solutions, tmp_path):
    # The driver joins the module's cluster by its address, as a driver joins a real one: killing
    # the driver leaves the cluster up (its actors are reclaimed), and the rerun joins it again.
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kernelopt", "bench", "--kernelbench", str(problem_set), "--solutions",
               str(solutions), "--out", str(out), "--device", "cpu", "--timing-budget", "0.5",
               "--correctness-trials", "2", "--ray", address_of(cluster), "--ray-actors", "1", "--json"]
    running = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (results.exists() and any('"sample"' in line for line in results.read_text().splitlines())):
        assert running.poll() is None and time.monotonic() < deadline, running.stderr.read()
        time.sleep(0.2)
    os.killpg(running.pid, signal.SIGKILL)
    running.wait()
    first = {json.loads(line)["key"] for line in results.read_text().splitlines() if line.endswith("}")}
    assert len(first) < 7, "the driver was killed after the run ended; nothing to resume"
    again = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    counts = Counter(r["key"] for r in lines)
    assert not [key for key in first if counts[key] > 1], "a verdict of the first pass was judged again"
    assert verdicts(out) == EXPECTED
    summary = json.loads(again.stdout)
    assert summary["n_solutions"] == 5 and summary["levels"]["1"]["n_problems"] == 2


def test_the_reward_pool_answers_a_batch(pool):
    from kernelopt.kernelbench import load_problem_set
    from kernelopt.rewards.cluster import RewardPool
    from kernelopt.sandbox import EvalOptions

    problems = load_problem_set(str(EXAMPLES / "level1"), ids={1, 4})
    rewards = RewardPool(problems, EvalOptions(timing_budget=0.5, correctness_trials=2), pool=pool)
    try:
        answers = rewards.score([
            {"problem": "1/1", "completion": f"```python\n{RELU}```"},
            {"problem": "1/1", "completion": DOUBLED},
            {"problem": "1/4", "completion": FAST_SOFTMAX, "reward": "log_speedup:clip=2"},
            {"problem": "1/4", "completion": "I cannot write this kernel."},
        ])
    finally:
        rewards.close()
    assert [a["status"] for a in answers] == ["correct", "incorrect", "correct", "format_error"]
    assert answers[0]["reward"] > 0 and answers[1]["reward"] == answers[3]["reward"] == 0.0
    assert 0 < answers[2]["reward"] <= 2
    assert pool.size == 2  # the pool stays usable: RewardPool does not close a pool it was given


def test_a_gpu_on_a_cluster_without_one_is_reported_not_awaited(cluster):
    from kernelopt.cluster import ClusterError, ClusterSpec, JudgePool

    started = time.monotonic()
    with pytest.raises(ClusterError, match="no GPU"):
        JudgePool.start(ClusterSpec(address="local", device="cuda"))
    with pytest.raises(ClusterError, match="do not fit"):
        JudgePool.start(ClusterSpec(address="local", device="cpu", actors=64))
    assert time.monotonic() - started < 10


def test_serve_ray_local_answers_concurrent_requests(tmp_path):
    server = subprocess.Popen(
        [sys.executable, "-m", "kernelopt", "serve", "--ray", "local", "--ray-actors", "2", "--port", "0",
         "--kernelbench", str(EXAMPLES / "level1"), "--problems", "1,4", "--device", "cpu", "--timing-budget",
         "0.5", "--correctness-trials", "2", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            line = server.stderr.readline()
            match = re.search(r"listening on (http://\S+) \((\d+) judging actor", line)
            if match:
                url = match.group(1)

        def ask(body: dict) -> dict:
            request = urllib.request.Request(f"{url}/v1/evaluate", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=300) as answer:
                return json.loads(answer.read())

        bodies = [{"problem": "1/1", "completion": RELU}, {"problem": "1/4", "completion": FAST_SOFTMAX},
                  {"problem": "1/1", "completion": DOUBLED}, {"problem": "1/4", "completion": TYPO_SOFTMAX}]
        with ThreadPoolExecutor(4) as requests:
            answers = list(requests.map(ask, bodies))
        assert [a["status"] for a in answers] == ["correct", "correct", "incorrect", "runtime_error"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert server.returncode == 0


def test_generate_on_actors_gives_the_results_of_a_local_generate(cluster, monkeypatch, capsys, tmp_path):
    from llm_server import ScriptedLLMServer

    from kernelopt.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for name in ("OPENAI_BASE_URL", "KERNELOPT_MODEL", "KERNELOPT_STORE"):
        monkeypatch.delenv(name, raising=False)
    level1 = tmp_path / "set" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(EXAMPLES / "level1/4_RedundantSoftmax.py", level1 / "4_RedundantSoftmax.py")

    def generate(url: str, name: str, *extra: str) -> dict:
        code = main(["generate", "--problems", str(tmp_path / "set"), "--samples", "2", "--model", "test-model",
                     "--base-url", url, "--out", str(tmp_path / name), "--store", str(tmp_path / f"{name}.sqlite"),
                     "--json", "--device", "cpu", "--timing-budget", "0.5", "--correctness-trials", "2", *extra])
        printed, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(printed)

    asked: Counter = Counter()
    lock = threading.Lock()

    def script(body, index) -> str:
        """Each pass's first answer is wrong (a typo), its second right."""
        with lock:
            asked["calls"] += 1
            first = asked["calls"] % 2 == 1
        return f"```python\n{TYPO_SOFTMAX if first else FAST_SOFTMAX}```\n"

    with ScriptedLLMServer(script) as server:
        local = generate(server.url, "local")
        remote = generate(server.url, "ray", "--ray", "local", "--ray-actors", "2")
    assert local["counts"] == {"correct": 1, "runtime_error": 1}
    assert local["problems_with_correct"] == 1 and local["candidates"] == local["scored"] == 2
    for key in ("problems", "candidates", "scored", "counts", "problems_with_correct", "llm_calls", "statuses"):
        assert local[key] == remote[key], key
    lines = [json.loads(line) for line in (tmp_path / "ray" / "generate.jsonl").read_text().splitlines()]
    assert {r["device_model"] for r in lines if r.get("kind") == "generate"} == {
        r["device_model"] for r in map(json.loads, (tmp_path / "local" / "generate.jsonl").read_text().splitlines())
        if r.get("kind") == "generate"}


def test_without_ray_the_flag_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from kernelopt.cli import main\n"
            f"sys.exit(main(['baselines', '--kernelbench', {str(EXAMPLES / 'level1')!r}, '--ray', 'local']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "pip install 'kernelopt[ray]'" in done.stderr


def test_doctor_reports_each_node_of_the_cluster(cluster):
    done = subprocess.run([sys.executable, "-m", "kernelopt", "doctor", "--ray", address_of(cluster), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (node,) = report["nodes"]
    assert node["alive"] and node["cpus"] == report["cpus"] == 4 and node["gpus"] == 0
    assert node["kernelopt"] == report["driver_kernelopt"] and node["torch"] and report["ok"]


def test_mixed_device_models_are_refused_unless_asked_for():
    from kernelopt.bench.summary import MixedDevicesError, device_sections
    from kernelopt.kernelbench import load_problem_set

    problems = load_problem_set(str(EXAMPLES / "level1"), ids={1, 4})
    records = [{"key": "a", "level": 1, "problem_id": 1, "sample": 0, "status": "correct", "correct": True,
                "speedup": 2.0, "device_model": "NVIDIA H100 80GB HBM3"},
               {"key": "b", "level": 1, "problem_id": 4, "sample": 0, "status": "correct", "correct": True,
                "speedup": 1.5, "device_model": "NVIDIA A100-SXM4-80GB"}]
    with pytest.raises(MixedDevicesError, match="2 device models"):
        device_sections(problems, records, mix=False)
    sections = device_sections(problems, records, mix=True)
    assert sections["device_models"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    h100 = sections["by_device_model"]["NVIDIA H100 80GB HBM3"]["overall"]
    assert h100["n_problems"] == 2 and h100["fast_1"] == 0.5  # problem 4 was not judged on an H100
    assert device_sections(problems, records[:1], mix=False) == {"device_models": ["NVIDIA H100 80GB HBM3"]}


def test_ray_and_gpus_together_are_refused(capsys, tmp_path):
    from kernelopt.cli import main

    code = main(["bench", "--kernelbench", str(EXAMPLES), "--solutions", str(EXAMPLES / "generations"),
                 "--out", str(tmp_path / "out"), "--ray", "local", "--gpus", "0"])
    assert code == 2 and "give --ray or --gpus, not both" in capsys.readouterr().err


def test_a_broken_reference_is_the_problems_outcome_not_an_actor_failure(pool):
    from kernelopt.kernelbench import ProblemError, problem_from_source
    from kernelopt.sandbox import EvalOptions

    source = (EXAMPLES / "level1" / "1_ReLU.py").read_text().replace(
        "return torch.relu(x)", "raise RuntimeError('the reference is broken')")
    assert "the reference is broken" in source
    problem = problem_from_source(source, path="level1/1_BrokenReLU.py")
    options = EvalOptions(device="cpu", timing_budget=0.5, correctness_trials=2)
    replaced = pool.replaced
    with pytest.raises(ProblemError, match="the reference is broken") as caught:
        pool.judge(problem, options, [RELU], health=True)
    assert caught.value.health["flags"] == ["reference_fails"]
    assert pool.replaced == replaced and pool.size == 2  # the actor is fine: nothing to replace


@pytest.mark.gpu
def test_gpu_actors_judge_on_their_own_gpu_and_record_its_model(cluster):
    """One actor per GPU: it sees its GPU as cuda:0 (Ray sets CUDA_VISIBLE_DEVICES), names its
    model as the worker's torch does, and describes it for the prompt without holding CUDA."""
    from kernelopt.cluster import ClusterSpec, JudgePool
    from kernelopt.kernelbench import load_problem
    from kernelopt.sandbox import EvalOptions

    if not cluster.cluster_resources().get("GPU"):
        pytest.skip("the local Ray instance sees no GPU")
    with JudgePool.start(ClusterSpec(address="local", device="cuda", actors=1)) as gpus:
        (actor,) = gpus.actors()
        assert actor["device"] == "cuda:0" and gpus.agent_device == "cuda:0"
        assert gpus.hardware.summary.startswith("an NVIDIA") and actor["device_model"] in gpus.hardware.summary
        answer = gpus.judge(load_problem(EXAMPLES / "level1" / "1_ReLU.py"), EvalOptions(timing_budget=1.0),
                            [RELU], health=True)
    (result,) = answer["results"]
    assert result.status == "correct" and answer["health"]["healthy"]
    assert result.environment.device_name == answer["device_model"] == actor["device_model"]
