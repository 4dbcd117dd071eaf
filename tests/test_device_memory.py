"""The memory under the device slots (worker/device_memory.py): a CUDA slot one process exports
and another maps, and the keeper's registration of the host's shared memory with the driver.
The protocol over them is tests/test_device_slots.py; the `gpu` tests here run the driver itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelopt.sandbox.worker import device_memory

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_a_cuda_slot_exported_by_one_process_is_mapped_by_another():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.init()
    mine, fd = device_memory.allocate(device_memory.CUDA, 1 << 20)
    mine.tensor()[:8] = torch.arange(8, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    child = textwrap.dedent(f"""
        import os, sys, torch
        sys.path.insert(0, {str(REPO / 'kernelopt' / 'sandbox')!r})
        from worker import device_memory
        torch.cuda.init()
        theirs = device_memory.open_slot("cuda", int(sys.argv[1]), {mine.size})
        print(theirs.tensor()[:8].tolist())
        theirs.tensor()[8] = 77
        torch.cuda.synchronize()
    """)
    done = subprocess.run([sys.executable, "-c", child, str(fd)], pass_fds=(fd,), capture_output=True, text=True,
                          timeout=120)
    os.close(fd)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(range(8)))
    assert int(mine.tensor()[8]) == 77
    mine.close()



def test_only_the_part_of_host_memory_in_use_is_page_locked_and_it_grows_by_doubling(monkeypatch):
    """Registering host memory with the driver makes every page of it resident: the keeper's
    view of a sparse 4 GiB input slot is registered only as far as the calls reach. (The CUDA
    driver is not on this machine: a stand-in records what it is asked; the real registration
    is the gpu test below.)"""
    asked = []

    class Driver:
        def cuMemHostRegister_v2(self, pointer, size, flags):
            asked.append(("register", size.value))
            return 0

        def cuMemHostUnregister(self, pointer):
            asked.append(("unregister", None))
            return 0

    monkeypatch.setattr(device_memory, "_cuda", Driver)
    monkeypatch.setattr(device_memory, "_current_context", lambda index: None)
    step = device_memory.LOCK_STEP
    shared, fd = device_memory.allocate(device_memory.HOST, 5 * step)  # sparse: nothing written
    os.close(fd)
    try:
        assert device_memory.page_lock(shared, 0, 1000) and shared.locked_bytes == step
        assert device_memory.page_lock(shared, 0, step)  # within: nothing asked
        assert device_memory.page_lock(shared, 0, step + 1) and shared.locked_bytes == 2 * step
        assert device_memory.page_lock(shared, 0, 3 * step) and shared.locked_bytes == 4 * step  # doubled
        assert device_memory.page_lock(shared, 0, 4 * step + 1) and shared.locked_bytes == 5 * step  # capped
        assert asked == [("register", step), ("unregister", None), ("register", 2 * step), ("unregister", None),
                         ("register", 4 * step), ("unregister", None), ("register", 5 * step)]
    finally:
        shared.close()
    assert asked[-1] == ("unregister", None) and not shared.page_locked


def test_a_registration_the_driver_refuses_keeps_what_was_held_and_is_not_asked_again(monkeypatch):
    """A refusal would otherwise be asked for again before every window."""
    step = device_memory.LOCK_STEP
    asked = []

    class Driver:  # registers up to two steps, refuses more
        def cuMemHostRegister_v2(self, pointer, size, flags):
            asked.append(("register", size.value))
            return 0 if size.value <= 2 * step else 1

        def cuMemHostUnregister(self, pointer):
            asked.append(("unregister", None))
            return 0

    monkeypatch.setattr(device_memory, "_cuda", Driver)
    monkeypatch.setattr(device_memory, "_current_context", lambda index: None)
    shared, fd = device_memory.allocate(device_memory.HOST, 5 * step)
    os.close(fd)
    try:
        assert device_memory.page_lock(shared, 0, step) and shared.locked_bytes == step
        assert not device_memory.page_lock(shared, 0, 3 * step)  # refused: the first step is held again
        assert shared.locked_bytes == step and shared.lock_refused
        assert device_memory.page_lock(shared, 0, step)  # within what is held
        assert not device_memory.page_lock(shared, 0, 4 * step)  # not asked again
        assert asked == [("register", step), ("unregister", None), ("register", 3 * step), ("register", step)]
    finally:
        shared.close()


@pytest.mark.gpu
def test_the_keepers_view_of_host_shared_memory_is_page_locked_for_the_copy_engines():
    """Placing from pageable memory ran at 3.2 GB/s on an H200 (42 ms between windows for a
    4096^2 matmul's inputs): the keeper registers the host's shared memory with the driver."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.init()
    shared, fd = device_memory.allocate(device_memory.HOST, 2 * device_memory.LOCK_STEP)
    os.close(fd)
    values = torch.randint(0, 256, (shared.size,), dtype=torch.uint8)
    shared.tensor().copy_(values)
    # Only what is used is registered (every registered page is made resident): the first part...
    assert device_memory.page_lock(shared, 0, 1000) and shared.locked_bytes == device_memory.LOCK_STEP
    assert shared.tensor()[:1000].is_pinned()
    # ...then all of it, once a call reaches past the first part.
    assert device_memory.page_lock(shared, 0, shared.size) and shared.locked_bytes == shared.size
    on_device = shared.tensor().to("cuda")
    shared.tensor().zero_()
    shared.tensor().copy_(on_device)
    assert torch.equal(shared.tensor(), values)
    shared.close()  # unregistered before the unmap
    assert not shared.page_locked
