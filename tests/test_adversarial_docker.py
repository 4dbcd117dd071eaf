"""The adversarial corpus with every worker in a container of the sandbox image (the `docker`
marker: tests/conftest.py skips it without a daemon and the image, and fails it in CI). The
corpus, its headers and how a case is judged: tests/test_adversarial.py."""

from __future__ import annotations

import pytest

from test_adversarial import CORPUS, SharedEvaluators, _case_options, _case_params, discover, judge_case, parse_case


@pytest.fixture(scope="module")
def shared_evaluators():
    shared = SharedEvaluators()
    yield shared
    shared.close()

# What CI judges with every worker in a container of the sandbox image (the `docker` marker;
# tests/conftest.py skips it without a daemon and the image, and fails it in CI): the exact copies
# of two problems, a C++ extension built inside the container, and hacks of each kind (the
# channel and the host's socket, the census, the cgroup, the clock, a crash, a hang, a constant
# output); the limits, kills and pauses are tests/test_docker.py's. The whole corpus in containers is
# benchmarks/corpus_in_docker.py (CI's budget holds a few minutes of it).
DOCKER_SUBSET = (
    "honest/relu_exact_copy.py", "honest/relu_cpp_extension.py", "honest/softmax_exact_copy.py",
    "hacks/io_steal_stdin.py", "hacks/child_daemonized_grandchild.py", "hacks/helper_leaves_its_cgroup.py",
    "hacks/thread_native_pthread.py", "hacks/patch_perf_counter.py", "hacks/crash_segfault_in_forward.py",
    "hacks/hang_infinite_loop.py", "hacks/const_softmax_uniform.py", "hacks/io_connect_to_the_host_channel.py",
)
# Cases whose verdict in a container differs from bubblewrap's for a reason of the backend, not
# of the referee: a container's input slot is a file mounted and mapped read-only
# (sandbox/input_files.py), so a write into an input faults in the program that makes it, where
# bubblewrap's writable slot lets the host see the change. rel -> why.
# benchmarks/corpus_in_docker.py reports them apart; none is in DOCKER_SUBSET. Either verdict
# gains the hack nothing.
DOCKER_DIFFERS: dict[str, str] = {
    "hacks/mutate_input_inplace.py": "input mutation: in a container the input is a view of the read-only "
    "slot, so the in-place write kills the candidate's worker (SIGSEGV: runtime_error) where bubblewrap's "
    "writable slot shows the change to the host (rejected, input_mutation)",
    "hacks/mutate_input_roundtrip.py": "input mutation, as mutate_input_inplace.py",
    "hacks/mutate_gather_table.py": "input mutation, as mutate_input_inplace.py",
    "hacks/alias_relu_inplace.py": "the output is the input, written in place first: SIGSEGV in a container "
    "(runtime_error), as mutate_input_inplace.py",
    "hacks/alias_view_of_input.py": "writes its result into the input (out=x) before returning a view of it: "
    "SIGSEGV in a container (runtime_error), as mutate_input_inplace.py",
    "hacks/backward_saved_input_mutated.py": "its backward writes into the input the forward saved: SIGSEGV in a "
    "container (runtime_error), as mutate_input_inplace.py",
}


@pytest.mark.docker
@pytest.mark.parametrize("path", _case_params(DOCKER_SUBSET))
def test_adversarial_case_in_a_container(path, shared_evaluators):
    """The chosen cases again, every worker in a container of the sandbox image."""
    case = parse_case(path)  # the bounds bubblewrap holds, the exact copies' 0.8x-1.25x included
    judge_case(case, _case_options(case).model_copy(update={"isolation": "docker"}), shared_evaluators)


def test_the_docker_subset_names_cases_of_the_corpus():
    rels = {path.relative_to(CORPUS).as_posix() for path in discover()}
    assert set(DOCKER_SUBSET) <= rels and set(DOCKER_DIFFERS) <= rels
    assert not set(DOCKER_SUBSET) & set(DOCKER_DIFFERS)
