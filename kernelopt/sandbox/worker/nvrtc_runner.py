"""Compiles one CUDA C source to a cubin with NVRTC, called through ctypes on libnvrtc, inside
the build sandbox. Never loads or runs what it compiled.

Run by the host (sandbox/nvrtc.py) as `python -E -s -c <boot> REQUEST.json RESULT.json` in a
sandbox whose only writable place is its scratch directory. The request holds the library's
path, the source, the full NVRTC options and the name expressions; the result, the cubin's path,
the lowered name of each name expression, NVRTC's log and the seconds it took.

Standard library only: no torch, no CuPy (the host needs neither to compile).
"""

from __future__ import annotations

import ctypes
import json
import sys
import time


class NvrtcError(Exception):
    pass


def load(library: str) -> ctypes.CDLL:
    nvrtc = ctypes.CDLL(library)
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    nvrtc.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    return nvrtc


def version(nvrtc: ctypes.CDLL) -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(nvrtc, nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def compile_cubin(nvrtc: ctypes.CDLL, source: str, options: list[str], name_expressions: list[str],
                  file_name: str = "kernel.cu") -> tuple[bytes | None, dict[str, str], str]:
    """(cubin or None on a compile error, lowered names, NVRTC's log)."""
    program = ctypes.c_void_p()
    _check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), file_name.encode(),
                                           0, None, None), "nvrtcCreateProgram")
    try:
        for expression in name_expressions:
            _check(nvrtc, nvrtc.nvrtcAddNameExpression(program, expression.encode()), "nvrtcAddNameExpression")
        encoded = [o.encode() for o in options]
        argv = (ctypes.c_char_p * len(encoded))(*encoded)
        status = nvrtc.nvrtcCompileProgram(program, len(encoded), argv)
        log = _log(nvrtc, program)
        if status != 0:
            return None, {}, (log + "\n" + _error(nvrtc, status)).strip()
        size = ctypes.c_size_t()
        _check(nvrtc, nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        if size.value == 0:
            raise NvrtcError("NVRTC produced no cubin (was a virtual architecture, compute_XX, asked for?)")
        cubin = ctypes.create_string_buffer(size.value)
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        lowered = {}
        for expression in name_expressions:
            name = ctypes.c_char_p()
            _check(nvrtc, nvrtc.nvrtcGetLoweredName(program, expression.encode(), ctypes.byref(name)),
                   "nvrtcGetLoweredName")
            if name.value is None:
                raise NvrtcError(f"NVRTC gave no lowered name for {expression!r}")
            lowered[expression] = name.value.decode()
        return cubin.raw, lowered, log
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


def _log(nvrtc: ctypes.CDLL, program) -> str:
    size = ctypes.c_size_t()
    if nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    buffer = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, buffer)
    return buffer.value.decode(errors="replace")


def _error(nvrtc: ctypes.CDLL, status: int) -> str:
    return (nvrtc.nvrtcGetErrorString(status) or b"").decode(errors="replace")


def _check(nvrtc: ctypes.CDLL, status: int, call: str) -> None:
    if status != 0:
        raise NvrtcError(f"{call} failed: {_error(nvrtc, status)}")


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    began = time.monotonic()
    try:
        nvrtc = load(request["library"])
        cubin, lowered, log = compile_cubin(nvrtc, request["source"], request["options"],
                                            request.get("name_expressions") or [])
        if cubin is None:
            result = {"ok": False, "error": "compilation failed", "log": log}
        else:
            with open(request["out"], "wb") as handle:
                handle.write(cubin)
            result = {"ok": True, "cubin": request["out"], "lowered": lowered, "log": log}
    except (NvrtcError, OSError) as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "log": "", "crashed": True}
    result["seconds"] = round(time.monotonic() - began, 4)
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
