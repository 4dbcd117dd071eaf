"""The keeper: a trusted process that owns the workers' device slots and moves data in and out.

Started by the host (sandbox/device_slots.py), outside any sandbox, as a process of its own
that runs no program code: trusted, it may use the host's modules (the comparison,
sandbox/compare.py), where a worker imports only its own. It makes each worker's device slots
(worker/device_memory.py) and sends their descriptors to the host, which passes them on to the
worker. For every call it then does, with the worker frozen:

    place  return the device's persisting L2 lines to normal (a program's persisting lines would
           hold part of L2 through the other side's window), copy the call's packed inputs from
           the host's input slot (shared memory) into the worker's device input slot, at the
           same offsets, fill the part of the output slot the last outputs took with a poison
           (every byte 0xFF), wait, and time a short kernel of its own (is the device idle as
           the window opens?);
    take   read a secret random sample of the bytes of the outputs the worker's answer locates
           in its device output slot, wait, and note the time: the end of the call's window.
           Then, outside it, copy the outputs into the keeper's own memory and check the sample
           against that copy: a byte that changed since the window ended (the poison, or last
           call's value, overwritten late) means work the worker left running on the device
           past its window (`late_writes`, a rule's); work it had not finished by the copy is
           wrong in it. Then copy them into the host's output buffer (shared memory) and, when
           asked, check that the device input slot still holds what was placed. Only the sample
           lies in the window, not a pass over the outputs, which for a call that only moves
           memory is as large as the call. In the timed rounds the host may
           instead have them kept here (`keep`) and, for the other side's call on the same
           inputs, compared on the device with the kept ones (`compare`: the host's own
           comparison code, sandbox/compare.py), so that neither side's outputs cross to host
           memory and only the comparison's numbers come back (`to_host`: false).

So on a GPU nothing the verdict uses comes from a copy the candidate's process made of its own
outputs, and no per-call copy through host memory lies inside a window.

On a GPU the host's shared memory is page-locked here when `share` maps it (registered with the
driver), so `place` and the copies to the host run on the copy engines straight from it.

Commands (JSON frames, wire.py; descriptors beside them on a unix socket): alloc, share, place,
take, give, forget, free, quit. Times are time.perf_counter (CLOCK_MONOTONIC on Linux: the host's clock too).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
import sys
import time
import traceback
from typing import Any

from kernelopt.sandbox.compare import Tolerances, compare_outputs
from kernelopt.sandbox.worker import device_memory, wire


PROBE_CYCLES = 20_000  # the idle probe's kernel: about 10-15 us at a datacenter GPU's clocks
# Bytes of a call's outputs read at the window's end. A program that leaves a share f of its
# output's bytes to be written after the window escapes one call with probability (1 - f)^SAMPLE
# (f = 1 %: 7.6 %, and it gains 1 %; f = 10 %: 2e-12).
SAMPLE = 256
POISON = 0xFF  # what an output slot holds before a window, where the last outputs lay


class Keeper:
    def __init__(self, kind: str, device_index: int, fds: socket.socket):
        import torch

        self.torch, self.kind, self.device_index, self.fds = torch, kind, device_index, fds
        if kind == device_memory.CUDA:
            torch.cuda.set_device(device_index)
            torch.cuda.init()
        self.slots: dict[str, device_memory.Mapping] = {}  # device slots, by name
        self.shared: dict[str, device_memory.Mapping] = {}  # the host's shared memory, by name
        self.staging: Any = None  # the keeper's own copy of the last outputs taken (a uint8 tensor)
        self.kept: dict[str, Any] = {}  # outputs kept for a comparison, by the host's key
        self.extents: dict[str, int] = {}  # per output slot, how far the last outputs taken reached
        self.random = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))  # no worker knows it

    def alloc(self, msg: dict) -> dict:
        mapping, fd = device_memory.allocate(self.kind, int(msg["size"]), self.device_index)
        try:
            socket.send_fds(self.fds, [b"s"], [fd])
        finally:
            os.close(fd)
        self._drop(self.slots, msg["name"])
        self.slots[msg["name"]] = mapping
        return {"ok": True, "size": mapping.size}

    def share(self, msg: dict) -> dict:
        """Map a shared-memory file of the host's (an input slot, an output buffer)."""
        _, fds, _, _ = socket.recv_fds(self.fds, 1, 1)
        if len(fds) != 1:
            raise ValueError("no descriptor came with `share`")
        self._drop(self.shared, msg["name"])
        mapping = device_memory.open_slot(device_memory.HOST, fds[0], int(msg["size"]))
        self.shared[msg["name"]] = mapping
        return {"ok": True}

    def _page_locked(self, name: str, nbytes: int) -> None:
        """The first `nbytes` of the host's shared memory `name` registered with the driver, for the
        copy engines (refused: the copies stay pageable)."""
        if self.kind == device_memory.CUDA:
            device_memory.page_lock(self.shared[name], self.device_index, nbytes)

    def place(self, msg: dict) -> dict:
        at, size = int(msg["at"]), int(msg["size"])
        if self.kind == device_memory.CUDA:
            device_memory.reset_persisting_l2(self.device_index)  # before every window, both sides'
        self._page_locked(msg["source"], at + size)
        target = self.slots[msg["slot"]].tensor()[at:at + size]
        target.copy_(self.shared[msg["source"]].tensor()[at:at + size])
        poisoned = msg.get("poison")
        if poisoned in self.slots:  # the outputs' slot: what the window does not write reads as poison
            self.slots[poisoned].tensor()[:self.extents.get(poisoned, 0)].fill_(POISON)
        self._wait()
        return {"ok": True, "probe_ms": self._idle_probe_ms()}

    def _idle_probe_ms(self) -> float | None:
        """How long a short kernel of the keeper's own takes just before a window opens (ms,
        timed with events in this trusted process; None without a GPU). On an idle device about
        its own length (PROBE_CYCLES); where another context has work (a frozen program's
        kernels, left running in a context of its own beside the other side's window), it waits
        for a time slice of the device. Reported per call (timing.device_probe_ms): judged by
        no rule until a GPU has shown how far the two lie apart."""
        if self.kind != device_memory.CUDA:
            return None
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(PROBE_CYCLES)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    def take(self, msg: dict) -> dict:
        slot = self.slots[msg["slot"]].tensor()
        spans = [(int(offset), int(size)) for offset, size in msg["spans"]]
        total = sum(size for _, size in spans)
        drawn, where = self._sample(spans, total)
        sample = slot[where.to(slot.device)]
        self._wait()
        taken_at = time.perf_counter()  # the window's end; the copy below lies outside it
        if self.staging is None or self.staging.numel() < total:
            self.staging = self.torch.empty(total, dtype=self.torch.uint8, device=slot.device)
        placed = 0
        for offset, size in spans:
            self.staging[placed:placed + size].copy_(slot[offset:offset + size])
            placed += size
        self._wait()
        self.extents[msg["slot"]] = max((offset + size for offset, size in spans), default=0)
        taken = self.staging[:total]
        late = int((taken[drawn.to(taken.device)] != sample).sum()) if total else 0
        reply: dict = {"ok": True, "taken_at": taken_at, "late_writes": late}
        to_host = msg.get("to_host", True)
        if msg.get("keep"):
            try:
                self.kept[str(msg["keep"])] = taken.clone()
            except RuntimeError:  # the device is full (the program's memory, perhaps): to the host then
                reply["kept"], to_host = False, True
        if msg.get("compare"):
            reply["comparison"] = self._compare(taken, msg["compare"])
        if to_host:
            self._page_locked(msg["dest"], total)
            self.shared[msg["dest"]].tensor()[:total].copy_(taken)
        check = msg.get("check_inputs")
        if check:
            at, size = int(check["at"]), int(check["size"])
            placed_inputs = self.shared[check["source"]].tensor()[at:at + size]
            now = self.slots[check["slot"]].tensor()[at:at + size]
            reply["inputs_held"] = bool(self.torch.equal(now.cpu(), placed_inputs))
        return reply

    def _sample(self, spans: list[tuple[int, int]], total: int) -> tuple[Any, Any]:
        """SAMPLE random bytes of the outputs at `spans` (offset, size in the slot), drawn anew
        for every call: their places among the outputs laid end to end, and in the slot (CPU
        tensors: one small copy to the device, not a kernel per step, inside the window)."""
        torch = self.torch
        if not total:
            empty = torch.zeros(0, dtype=torch.int64)
            return empty, empty
        drawn = torch.randint(0, total, (SAMPLE,), generator=self.random)
        starts = torch.tensor([0] + [size for _, size in spans]).cumsum(0)[:-1]
        offsets = torch.tensor([offset for offset, _ in spans])
        span = torch.searchsorted(starts, drawn, right=True) - 1
        return drawn, offsets[span] + (drawn - starts[span])

    def _compare(self, taken: Any, spec: dict) -> dict:
        """The outputs just taken against those kept under spec["with"] (dropped then), laid out
        by spec["layouts"] and spec["kept_layouts"] ([shape, dtype name] per output);
        spec["kept_side"] says which side the kept ones are. The fields of the host's Comparison."""
        kept = self.kept.pop(str(spec["with"]))
        taken_outputs = _laid_out(self.torch, taken, spec["layouts"])
        kept_outputs = _laid_out(self.torch, kept, spec["kept_layouts"])
        candidate, reference = ((taken_outputs, kept_outputs) if spec["kept_side"] == "reference"
                                else (kept_outputs, taken_outputs))
        tolerances = Tolerances(**spec["tolerances"])
        try:
            comparison = compare_outputs(candidate, reference, tolerances)
        except RuntimeError:  # no device memory for the comparison's temporaries: on the CPU then
            comparison = compare_outputs([t.cpu() for t in candidate], [t.cpu() for t in reference], tolerances)
        return dataclasses.asdict(comparison)

    def give(self, msg: dict) -> dict:
        """Kept outputs to the host's output buffer after all (their comparison could not be
        made here: the other side's outputs came in its answer)."""
        kept = self.kept[str(msg["key"])]
        size = int(msg["size"])
        if size > kept.numel():
            raise ValueError(f"{size} bytes asked of {kept.numel()} kept")
        self._page_locked(msg["dest"], size)
        self.shared[msg["dest"]].tensor()[:size].copy_(kept[:size])
        return {"ok": True}

    def forget(self, msg: dict) -> dict:
        """Drop every kept output (a round ends; one side's call failed before its comparison)."""
        self.kept.clear()
        return {"ok": True}

    def free(self, msg: dict) -> dict:
        for name in msg.get("names", []):
            self._drop(self.slots, name)
            self._drop(self.shared, name)
        return {"ok": True}

    def _wait(self) -> None:
        if self.kind == device_memory.CUDA:
            self.torch.cuda.synchronize(self.device_index)

    @staticmethod
    def _drop(table: dict, name: str) -> None:
        mapping = table.pop(name, None)
        if mapping is not None:
            mapping.close()


def _dtype(torch: Any, name: str) -> Any:
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"no dtype {name!r}")
    return dtype


def _laid_out(torch: Any, raw: Any, layouts: list) -> list:
    """The outputs packed one after another in `raw` (uint8), as tensors of their shapes and
    dtypes ([shape, dtype name] each; copied where an output does not start on its element
    size's boundary)."""
    outputs, offset = [], 0
    for shape, name in layouts:
        dtype, shape = _dtype(torch, name), [int(n) for n in shape]
        size = math.prod(shape) * dtype.itemsize
        if offset + size > raw.numel():
            raise ValueError("the layouts describe more bytes than were taken")
        part = raw[offset:offset + size]
        if offset % dtype.itemsize:
            part = part.clone()
        outputs.append(part.view(dtype).reshape(shape) if size else torch.empty(shape, dtype=dtype, device=raw.device))
        offset += size
    return outputs


_HANDLERS = {"alloc": Keeper.alloc, "share": Keeper.share, "place": Keeper.place, "take": Keeper.take,
             "give": Keeper.give, "forget": Keeper.forget, "free": Keeper.free}


def serve(keeper: Keeper, cmd_fd: int, out_fd: int) -> None:
    reader = wire.FrameReader(cmd_fd)
    wire.write_frame(out_fd, {"ok": True, "hello": "keeper", "pid": os.getpid()})
    while True:
        try:
            msg, _ = reader.read()
        except wire.ChannelClosed:
            return
        handler = _HANDLERS.get(str(msg.get("cmd")))
        if msg.get("cmd") == "quit":
            return
        try:
            reply = handler(keeper, msg) if handler else {"ok": False, "error": f"unknown command {msg.get('cmd')!r}"}
        except Exception as exc:  # noqa: BLE001 - every failure is the host's to report
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "trace": traceback.format_exc()[-2000:]}
        wire.write_frame(out_fd, reply)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kernelopt-keeper")
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--fds-fd", type=int, required=True)
    parser.add_argument("--kind", choices=[device_memory.CUDA, device_memory.HOST], required=True)
    parser.add_argument("--device-index", type=int, default=0)
    args = parser.parse_args(argv)
    fds = socket.socket(fileno=args.fds_fd)
    try:
        keeper = Keeper(args.kind, args.device_index, fds)
    except Exception as exc:  # noqa: BLE001 - told to the host, which then does without slots
        wire.write_frame(args.out_fd, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    serve(keeper, args.cmd_fd, args.out_fd)
    sys.stdout.flush()
