"""Builds one extension from a build request, inside the build sandbox. Never loads it.

Run by the host as `python -E -s -c <boot> REQUEST.json RESULT.json` in a sandbox whose only
writable place is the build directory. The request holds what a candidate passed to
`load_inline`/`load` (sources as text, flags); this process runs only trusted code: torch's
own `load_inline`/`load` writes the sources and the stock `build.ninja` (its ninja run and its
import of the result are switched off), then the objects are built from that file's exact
command lines.

Modes:
  stock  ninja runs build.ninja as torch would.
  exact  the same compiler commands, scheduled faster: nvcc's device chain (preprocess, cicc,
         ptxas, fatbinary) runs beside its host chain (preprocess, cudafe++) instead of after
         it, with the module id both chains share written up front; the host C++ compiles at
         the same time. The objects equal stock's but for that unique id string.
  fast   exact, and a CUDA source's `#include <torch/extension.h>` is compiled as
         `#include <torch/types.h>` (which load_inline puts at the top of every CUDA source
         anyway) when the source uses nothing that header leaves out; if that compile fails,
         the untouched source is compiled. Skips parsing the C++ frontend, pybind11 and Python
         headers twice per CUDA source (cudafe++ and cicc): about half the build.

  pch    builds torch/extension.h.gch for the request's C++ flags (`kernelopt cache warm`);
         `fast` builds use one that fits when the host offers it.

Standard library and torch only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

_LEAN_BLOCKERS = re.compile(
    r"pybind11|PYBIND11|\bpy::|\bPy[A-Z_]\w*|\bTHP\w*|torch::(nn|optim|jit|autograd|data|serialize|"
    r"python|cuda|special|fft|linalg|nested|sparse|xpu|mps)\b|TORCH_LIBRARY|TORCH_EXTENSION_NAME"
)
_FULL_HEADER = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"][ \t]*$", re.M)


class BuildFailed(Exception):
    pass


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    log: list[str] = []
    began = time.monotonic()
    try:
        so_path, lean = build(request, log)
        result = {"ok": True, "so": so_path, "lean": lean}
    except BuildFailed as exc:
        result = {"ok": False, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - torch raises plain exceptions for bad arguments
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["log"] = "".join(log)[-200_000:]
    result["seconds"] = round(time.monotonic() - began, 3)
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


def build(request: dict, log: list[str]) -> tuple[str, bool]:
    build_dir = request["build_dir"]
    write_stock_build_files(request, build_dir)
    ninja = parse_ninja(os.path.join(build_dir, "build.ninja"))
    if request["mode"] == "pch":
        return make_precompiled_header(ninja["vars"], request, log), False
    if request["mode"] == "stock":
        run(["ninja", "-v", "-C", build_dir], log, cwd=build_dir)
        lean = False
    else:
        lean = build_objects(ninja, build_dir, request, log)
        link(ninja, build_dir, log)
    so_path = os.path.join(build_dir, ninja["default"])
    if not os.path.isfile(so_path):
        raise BuildFailed("the build produced no library")
    return so_path, lean


def write_stock_build_files(request: dict, build_dir: str) -> None:
    """torch's own load_inline/load writes main.cpp, cuda.cu and build.ninja; its ninja run
    and its import of the result are switched off (this process must never run built code)."""
    from torch.utils import cpp_extension

    cpp_extension._run_ninja_build = lambda *args, **kwargs: None
    cpp_extension._import_module_from_library = lambda *args, **kwargs: None
    common = dict(
        extra_cflags=request["extra_cflags"] or None,
        extra_cuda_cflags=request["extra_cuda_cflags"] or None,
        extra_ldflags=request["extra_ldflags"] or None,
        extra_include_paths=request["extra_include_paths"] or None,
        build_directory=build_dir, verbose=False, with_cuda=request["with_cuda"],
    )
    if request["builder"] == "load_inline":
        cpp_extension.load_inline(
            request["module_name"], list(request["cpp_sources"]),
            cuda_sources=list(request["cuda_sources"]) or None,
            functions=request["functions"],
            with_pytorch_error_handling=request["with_pytorch_error_handling"],
            no_implicit_headers=request["no_implicit_headers"], **common)
    else:
        source_dir = os.path.join(build_dir, "src")
        os.makedirs(source_dir, exist_ok=True)
        paths = []
        for name, text in request["sources"].items():
            paths.append(os.path.join(source_dir, name))
            with open(paths[-1], "w", encoding="utf-8") as handle:
                handle.write(text)
        cpp_extension.load(request["module_name"], paths, **common)


def parse_ninja(path: str) -> dict:
    """The variables, build statements and default target of torch's build.ninja."""
    variables, statements, default = {}, [], None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.startswith("build "):
                outputs, _, rest = line[len("build "):].partition(":")
                rule, *inputs = rest.split()
                statements.append((outputs.strip(), rule, inputs))
            elif line.startswith("default "):
                default = line.split(None, 1)[1].strip()
            elif " = " in line and not line.startswith(" "):
                key, _, value = line.partition(" = ")
                variables[key.strip()] = value
    return {"vars": variables, "builds": statements, "default": default}


def build_objects(ninja: dict, build_dir: str, request: dict, log: list[str]) -> bool:
    """Compile every object at once (C++ and CUDA side by side); True when a CUDA source was
    compiled with the lean header."""
    variables, steps, lean = ninja["vars"], [], []
    for output, rule, inputs in ninja["builds"]:
        target = os.path.join(build_dir, output)
        if rule == "compile":
            steps.append(lambda source=inputs[0], target=target:
                         compile_cpp(variables, source, target, request, log))
        elif rule == "cuda_compile":
            steps.append(lambda source=inputs[0], target=target:
                         compile_cuda(variables, source, target, request, log, lean))
        elif rule != "link":
            raise BuildFailed(f"unsupported build rule {rule!r} in build.ninja")
    run_concurrently(steps)
    return bool(lean)


def compile_cpp(variables: dict, source: str, target: str, request: dict, log: list[str]) -> None:
    """torch's C++ compile command, with the precompiled torch/extension.h when one fits; if
    the compile fails with it, it runs again without (so it never causes an error)."""
    command = (shlex.split(variables.get("cflags", "")) + ["-c", source, "-o", target]
               + shlex.split(variables.get("post_cflags", "")))
    cxx = shlex.split(variables["cxx"])
    header = precompiled_header_flags(variables, request, log)
    if header:
        try:
            run(cxx + header + command, [], cwd=os.path.dirname(target))
            return
        except BuildFailed:
            log.append(f"[kernelopt] {os.path.basename(source)} failed with the precompiled header; "
                       "compiling it without\n")
    run(cxx + command, log, cwd=os.path.dirname(target))


def run_concurrently(steps: list) -> None:
    """Run the callables in threads (each mostly waits on a compiler); re-raise the first error."""
    errors: list[BaseException] = []

    def guarded(step) -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def header_identity(variables: dict, request: dict) -> tuple[str, list[str]]:
    """Which precompiled torch/extension.h fits this C++ compile: a digest of the toolchain,
    the compiler and every flag but the module name (which that header does not use), and
    those flags."""
    flags = [f for f in shlex.split(variables.get("cflags", "")) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    flags += shlex.split(variables.get("post_cflags", ""))
    payload = json.dumps([request.get("toolchain_key", ""), variables["cxx"], flags])
    return hashlib.sha256(payload.encode()).hexdigest()[:32], flags


def precompiled_header_flags(variables: dict, request: dict, log: list[str]) -> list[str]:
    """`-I DIR` where DIR/torch/extension.h.gch was made for exactly these flags (GCC then
    reads it instead of parsing the header; a header that does not fit is ignored by GCC)."""
    if request["mode"] != "fast" or not request.get("pch_root"):
        return []
    identity, _ = header_identity(variables, request)
    directory = os.path.join(request["pch_root"], identity)
    if not os.path.isfile(os.path.join(directory, "torch", "extension.h.gch")):
        return []
    log.append(f"[kernelopt] main.cpp uses the precompiled torch/extension.h {identity}\n")
    return ["-I", directory]


def make_precompiled_header(variables: dict, request: dict, log: list[str]) -> str:
    """Build torch/extension.h.gch for this request's C++ flags; returns its directory."""
    from torch.utils.cpp_extension import include_paths

    identity, flags = header_identity(variables, request)
    directory = os.path.join(request["build_dir"], "pch", identity)
    os.makedirs(os.path.join(directory, "torch"), exist_ok=True)
    header = os.path.join(include_paths()[0], "torch", "extension.h")
    run(shlex.split(variables["cxx"]) + ["-x", "c++-header", header, "-o",
                                         os.path.join(directory, "torch", "extension.h.gch")] + flags, log)
    # A source that includes the header a second time finds it here, after the .gch was used
    # for the first include (GCC then wants the header itself beside it).
    os.symlink(header, os.path.join(directory, "torch", "extension.h"))
    return directory


def link(ninja: dict, build_dir: str, log: list[str]) -> None:
    variables = ninja["vars"]
    for output, rule, inputs in ninja["builds"]:
        if rule == "link":
            objects = [os.path.join(build_dir, i) for i in inputs]
            run(shlex.split(variables["cxx"]) + objects + shlex.split(variables.get("ldflags", ""))
                + ["-o", os.path.join(build_dir, output)], log, cwd=build_dir)


def compile_cuda(variables: dict, source: str, target: str, request: dict, log: list[str],
                 lean: list) -> None:
    flags = (shlex.split(variables.get("cuda_cflags", "")), shlex.split(variables.get("cuda_post_cflags", "")))
    if request["mode"] == "fast":
        lean_source = lean_copy(source)
        if lean_source is not None:
            attempt: list[str] = []
            try:
                split_nvcc(variables["nvcc"], flags, lean_source, target, request["module_id"], attempt)
                lean.append(source)
                return
            except BuildFailed:
                log.append(f"[kernelopt] {os.path.basename(source)} needs the full torch/extension.h; "
                           "compiling it unchanged\n")
    split_nvcc(variables["nvcc"], flags, source, target, request["module_id"], log)


def lean_copy(source: str) -> str | None:
    """A copy of `source` with `#include <torch/extension.h>` compiled as torch/types.h, or
    None when the source may use what only the full header declares."""
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    if not _FULL_HEADER.search(text) or _LEAN_BLOCKERS.search(text):
        return None
    # Same file name in a subdirectory, so __FILE__ in messages keeps the source's name.
    lean_dir = os.path.join(os.path.dirname(source), "lean")
    os.makedirs(lean_dir, exist_ok=True)
    path = os.path.join(lean_dir, os.path.basename(source))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(_FULL_HEADER.sub("#include <torch/types.h>", text))
    return path


def split_nvcc(nvcc: str, flags: tuple[list[str], list[str]], source: str, target: str,
               module_id: str, log: list[str]) -> None:
    """nvcc's own steps (from --dryrun) with its device chain beside its host chain.

    nvcc runs: host preprocess, cudafe++ (which also writes the module id), device
    preprocess, cicc, ptxas, fatbinary, host compile. Only cicc needs cudafe++'s output (the
    module id), so writing the id first lets the two chains run at once; the final host
    compile needs both. Any step list that does not look like that runs as nvcc would."""
    before, after = flags
    keep_dir = os.path.join(os.path.dirname(target), "nvcc-" + os.path.basename(target))
    os.makedirs(keep_dir, exist_ok=True)
    command = shlex.split(nvcc) + before + ["-c", source, "-o", target] + after
    dry = subprocess.run(command + ["--dryrun", "--keep", "--keep-dir", keep_dir],
                         capture_output=True, text=True)
    environment, steps = _dryrun_steps(dry.stderr)
    plan = _plan(steps, module_id) if dry.returncode == 0 else None
    if plan is None:
        run(command, log, cwd=os.path.dirname(target))
        return
    module_id_file, host_chain, device_chain, final = plan
    with open(module_id_file, "w", encoding="utf-8") as handle:
        handle.write(module_id)
    env = dict(os.environ, **environment)
    run_concurrently([lambda: _run_chain(host_chain, env, log), lambda: _run_chain(device_chain, env, log)])
    _run_chain(final, env, log)


def _dryrun_steps(text: str) -> tuple[dict, list[str]]:
    environment, steps = {}, []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            continue
        body = line[3:].strip()
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", body)
        if match:
            if not match.group(1).startswith("_"):
                environment[match.group(1)] = match.group(2).strip().strip('"')
        else:
            steps.append(body)
    return environment, steps


def _plan(steps: list[str], module_id: str):
    cudafe = [i for i, s in enumerate(steps) if "cudafe++" in s and "--gen_module_id_file" in s]
    if len(cudafe) != 1 or not module_id:
        return None
    index = cudafe[0]
    match = re.search(r'--module_id_file_name\s+"([^"]+)"', steps[index])
    if not match or not steps[-1].split()[0].endswith(("gcc", "g++", "c++", "cc")) or " -c " not in steps[-1]:
        return None
    host = steps[: index + 1]
    host[index] = host[index].replace("--gen_module_id_file", "")
    device = steps[index + 1: -1]
    if not any("cicc" in s for s in device):
        return None
    return match.group(1), host, device, [steps[-1]]


def _run_chain(chain: list[str], env: dict, log: list[str]) -> None:
    for step in chain:
        run(["bash", "-c", step], log, env=env, show=step)


def run(command: list[str], log: list[str], cwd: str | None = None, env: dict | None = None,
        show: str | None = None) -> None:
    log.append("$ " + (show or shlex.join(command)) + "\n")
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    log.append(done.stdout)
    if done.returncode != 0:
        raise BuildFailed(f"{os.path.basename(command[0]) if not show else 'nvcc step'} exited with "
                          f"code {done.returncode}:\n{done.stdout[-4000:]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
