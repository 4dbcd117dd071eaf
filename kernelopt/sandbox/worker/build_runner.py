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

         Also uses what `kernelopt cache warm` precompiled when it fits: torch/extension.h for
         main.cpp, and the host prefix of CUDA sources (below). C++ sources of a build that
         also compiles CUDA run at a lower priority: they are off the critical path (nvcc's
         host chain), and on a small machine they would slow it down.

  pch       builds torch/extension.h.gch for the request's C++ flags (`kernelopt cache warm`).
  pch-cuda  builds the host prefix for the request's CUDA flags: the part of cudafe++'s output
            (the host translation unit nvcc hands to the C++ compiler) that comes from the
            headers load_inline puts at the top of every CUDA source, precompiled for the host
            compile. A fast build whose cudafe++ output starts with exactly that text compiles
            the rest with `-include` of it; the object is byte-identical to the plain compile's.

Standard library and torch only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
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
    if request["mode"] == "pch-cuda":
        return make_host_prefix(ninja, build_dir, request, log), False
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
    variables, steps = ninja["vars"], []
    lean: list[str] = []  # the CUDA sources compiled with the lean header
    with_cuda = any(rule == "cuda_compile" for _, rule, _ in ninja["builds"])
    for output, rule, inputs in ninja["builds"]:
        target = os.path.join(build_dir, output)
        if rule == "compile":
            steps.append(lambda source=inputs[0], target=target:
                         compile_cpp(variables, source, target, request, log, background=with_cuda))
        elif rule == "cuda_compile":
            steps.append(lambda source=inputs[0], target=target:
                         compile_cuda(variables, source, target, request, log, lean))
        elif rule != "link":
            raise BuildFailed(f"unsupported build rule {rule!r} in build.ninja")
    run_concurrently(steps)
    return bool(lean)


def compile_cpp(variables: dict, source: str, target: str, request: dict, log: list[str],
                background: bool = False) -> None:
    """torch's C++ compile command, with the precompiled torch/extension.h when one fits; if
    the compile fails with it, it runs again without (so it never causes an error).
    `background`: at a lower CPU priority (the same command; only the scheduling differs)."""
    command = (shlex.split(variables.get("cflags", "")) + ["-c", source, "-o", target]
               + shlex.split(variables.get("post_cflags", "")))
    cxx = shlex.split(variables["cxx"])
    if background and shutil.which("nice"):
        cxx = ["nice", "-n", "10"] + cxx
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
                 lean: list[str]) -> None:
    module_id = translation_unit_id(request["module_id"], source)
    prefixes = host_prefix_finder(request) if request["mode"] == "fast" else None
    if request["mode"] == "fast":
        lean_source = lean_copy(source)
        if lean_source is not None:
            attempt: list[str] = []
            try:
                split_nvcc(nvcc_command(variables, lean_source, target), target, module_id, attempt, prefixes)
                log.extend(line for line in attempt if line.startswith("[kernelopt]"))
                lean.append(source)
                return
            except BuildFailed:
                log.append(f"[kernelopt] {os.path.basename(source)} needs the full torch/extension.h; "
                           "compiling it unchanged\n")
    split_nvcc(nvcc_command(variables, source, target), target, module_id, log, prefixes)


def nvcc_command(variables: dict, source: str, target: str) -> list[str]:
    """torch's nvcc command (from build.ninja) for one source."""
    return (shlex.split(variables["nvcc"]) + shlex.split(variables.get("cuda_cflags", ""))
            + ["-c", source, "-o", target] + shlex.split(variables.get("cuda_post_cflags", "")))


def translation_unit_id(base: str, source: str) -> str:
    """The module id of one CUDA source: the build's (which depends only on the toolchain, so
    that every build's cudafe++ output can share the precompiled host prefix) and the file
    name, so two sources of one library never share one."""
    return base + "_" + re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(source))


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


class NvccPlan:
    """nvcc's steps for one source (from `--dryrun --keep`), split for running side by side."""

    def __init__(self, environment: dict, module_id_file: str, host: list[str], device: list[str],
                 final: str):
        self.env = dict(os.environ, **environment)
        self.module_id_file, self.host, self.device, self.final = module_id_file, host, device, final
        cudafe = re.search(r'--gen_c_file_name\s+"([^"]+)"', host[-1])
        output = re.search(r'\s-o\s+"([^"]+)"\s*$', final)
        # The host compile's input (cudafe++'s output) and object, when they can be told apart.
        self.host_source = cudafe.group(1) if cudafe and f'"{cudafe.group(1)}"' in final else None
        self.host_object = output.group(1) if output else None


def nvcc_plan(command: list[str], target: str, module_id: str) -> NvccPlan | None:
    """nvcc's step list for `command` (which builds `target`), its files kept beside `target`,
    with `module_id` written to the file its steps read; None when the list does not have
    the expected shape."""
    keep_dir = os.path.join(os.path.dirname(target), "nvcc-" + os.path.basename(target))
    os.makedirs(keep_dir, exist_ok=True)
    dry = subprocess.run(command + ["--dryrun", "--keep", "--keep-dir", keep_dir],
                         capture_output=True, text=True)
    if dry.returncode != 0 or not module_id:
        return None
    environment, steps = _dryrun_steps(dry.stderr)
    cudafe = [i for i, s in enumerate(steps) if "cudafe++" in s and "--gen_module_id_file" in s]
    if len(cudafe) != 1:
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
    _write(match.group(1), module_id)
    return NvccPlan(environment, match.group(1), host, device, steps[-1])


def split_nvcc(command: list[str], target: str, module_id: str, log: list[str], prefixes=None) -> None:
    """nvcc's own steps (from --dryrun) with its device chain beside its host chain.

    nvcc runs: host preprocess, cudafe++ (which also writes the module id), device
    preprocess, cicc, ptxas, fatbinary, host compile. Only cicc needs cudafe++'s output (the
    module id), so writing the id first lets the two chains run at once; the final host
    compile needs both. Any step list that does not look like that runs as nvcc would.
    `prefixes`: finds a precompiled host prefix for the host compile (fast mode)."""
    plan = nvcc_plan(command, target, module_id)
    if plan is None:
        run(command, log, cwd=os.path.dirname(target))
        return
    run_concurrently([lambda: _run_chain(plan.host, plan.env, log),
                      lambda: _run_chain(plan.device, plan.env, log)])
    prefix = prefixes(plan) if prefixes else None
    if prefix is None or not compile_with_host_prefix(plan, prefix, log):
        _run_chain([plan.final], plan.env, log)


# -- the precompiled host prefix of CUDA sources --------------------------------------------

_HOST_PREFIX = "prefix.h"
_EPILOGUE = "\n#define _NV_ANON_NAMESPACE"  # cudafe++ output: after the code, before the stub


def host_prefix_identity(plan: NvccPlan, toolchain_key: str) -> str | None:
    """Which precompiled host prefix fits this host compile: a digest of the toolchain and the
    compile command with its input and output paths left out. None: not one we can use
    (no recognizable paths; debug info, whose file names would differ; -Werror, as the
    header's diagnostic pragmas may not carry over)."""
    if plan.host_source is None or plan.host_object is None or re.search(r"\s-(g|Werror)", plan.final):
        return None
    command = plan.final.replace(plan.host_source, "@INPUT").replace(plan.host_object, "@OUTPUT")
    return hashlib.sha256(f"{toolchain_key}\n{command}".encode()).hexdigest()[:32]


def host_prefix_finder(request: dict):
    """plan -> the directory of the precompiled host prefix that fits it, or None."""
    root = request.get("pch_root")
    if not root:
        return None

    def find(plan: NvccPlan) -> str | None:
        identity = host_prefix_identity(plan, request.get("toolchain_key", ""))
        directory = os.path.join(root, "cuda-" + identity) if identity else ""
        return directory if os.path.isfile(os.path.join(directory, _HOST_PREFIX + ".gch")) else None
    return find


def remainder_after_prefix(text: str, prefix: str) -> str | None:
    """`text` without the prefix's lines, when it starts with them. The first line of each (a
    line marker naming the main source file, whose path differs between builds) is not
    compared; the remainder must start with a line marker, so that every line after the
    prefix keeps its file and line."""
    if not (text.startswith("# 1 ") and prefix.startswith("# 1 ")):
        return None
    start, body = text.find("\n") + 1, prefix[prefix.find("\n") + 1:]
    if not body or not text.startswith(body, start):
        return None
    rest = text[start + len(body):]
    return rest if rest.startswith("# ") else None


def compile_with_host_prefix(plan: NvccPlan, directory: str, log: list[str]) -> bool:
    """The host compile of cudafe++'s output with its header part read from the precompiled
    prefix: the file keeps only what follows the prefix, and the compile command gains
    `-include prefix.h` (GCC then loads prefix.h.gch). False, with the file unchanged, when
    the output does not start with the prefix or that compile fails."""
    prefix_path = os.path.join(directory, _HOST_PREFIX)
    if plan.host_source is None:  # no prefix fits such a plan (host_prefix_identity)
        return False
    with open(plan.host_source, encoding="utf-8", errors="surrogateescape") as handle:
        text = handle.read()
    with open(prefix_path, encoding="utf-8", errors="surrogateescape") as handle:
        rest = remainder_after_prefix(text, handle.read())
    if rest is None:
        return False
    _write(plan.host_source, rest)
    compiler, arguments = plan.final.split(" ", 1)
    attempt: list[str] = []
    try:
        _run_chain([f"{compiler} -include {shlex.quote(prefix_path)} {arguments}"], plan.env, attempt)
    except BuildFailed:
        _write(plan.host_source, text)
        log.append("[kernelopt] the host compile failed with the precompiled host prefix; "
                   "compiling it without\n")
        return False
    log.extend(attempt)
    log.append(f"[kernelopt] host compile uses the precompiled host prefix {os.path.basename(directory)}\n")
    return True


def make_host_prefix(ninja: dict, build_dir: str, request: dict, log: list[str]) -> str:
    """Precompile the host prefix for the request's CUDA flags (its CUDA source is empty: all
    that is left is what load_inline puts in front of every CUDA source); returns its
    directory."""
    output, _, inputs = next(b for b in ninja["builds"] if b[1] == "cuda_compile")
    source, target = inputs[0], os.path.join(build_dir, output)
    plan = nvcc_plan(nvcc_command(ninja["vars"], source, target), target,
                     translation_unit_id(request["module_id"], source))
    identity = host_prefix_identity(plan, request.get("toolchain_key", "")) if plan else None
    # (an identity implies both paths; the checker is told so)
    if plan is None or identity is None or plan.host_source is None or plan.host_object is None:
        raise BuildFailed("nvcc's steps for these flags do not allow a precompiled host prefix")
    _run_chain(plan.host, plan.env, log)
    with open(plan.host_source, encoding="utf-8", errors="surrogateescape") as handle:
        text = handle.read()
    epilogue = text.rfind(_EPILOGUE)
    end = text.rfind("\n", 0, epilogue)  # the line before is the stub's `# 1` line marker
    if epilogue < 0 or end <= 0 or " -c -x c++ " not in plan.final:
        raise BuildFailed("nvcc's host compile does not have the expected shape")
    directory = os.path.join(build_dir, "pch", "cuda-" + identity)
    os.makedirs(directory, exist_ok=True)
    prefix_path = os.path.join(directory, _HOST_PREFIX)
    _write(prefix_path, text[:end].rstrip("\n") + "\n")
    header = (plan.final.replace(" -c -x c++ ", " -x c++-header ", 1)
              .replace(f'"{plan.host_source}"', shlex.quote(prefix_path))
              .replace(f'"{plan.host_object}"', shlex.quote(prefix_path + ".gch")))
    _run_chain([header], plan.env, log)
    return directory


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)


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
