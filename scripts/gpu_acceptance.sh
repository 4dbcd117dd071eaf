#!/usr/bin/env bash
# Issue 30's GPU acceptance runs, as one timed script for a lent GPU machine (docs/gpu.md).
#
#   OUT=/some/folder bash scripts/gpu_acceptance.sh
#
# Needs: the CUDA build of torch, nvcc, cupy and triton (the lent machines' image has them);
# the Python packages kernelopt needs but the image lacks, as wheels in .whl/ (installed with
# --no-index: the machine has no network); KernelBench's level-1 problems (v0.1 sizes) in
# .kb/kb/KernelBench/level1 for the exact copies. Each phase has a time cap, so the script ends
# inside one 10-minute call; everything it learns goes to $OUT as it goes, so a phase cut off by
# its cap still leaves its log. Correctness runs first (they survive a shared GPU), timing last,
# alone on the GPU.
set -u
OUT=${OUT:?set OUT to a folder for the logs}
IDENTITY_PROBLEMS=${IDENTITY_PROBLEMS:-19,23,1,40,47,88,95,4,12,42,36,54,63,97,24,9,26,50,82,99}
export PYTHONUNBUFFERED=1
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }

stamp "setup" | tee "$OUT/env.txt"
{
  nvidia-smi
  nvcc --version | tail -2
  python3 -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda,
              torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'
  python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -3
  if ! command -v kernelopt; then  # no editable install: the checkout on the path, and a launcher
    echo "$PWD" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/kernelopt-checkout.pth"
    printf '#!/bin/sh\nexec python3 -c "import sys; from kernelopt.cli import main; sys.exit(main())" "$@"\n' \
      > /usr/local/bin/kernelopt && chmod +x /usr/local/bin/kernelopt
  fi
  python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|cupy|pydantic|numpy|pytest|nvidia-ml-py) "
  which kernelopt bwrap unshare setpriv ncu
  kernelopt doctor 2>&1 | tail -40
} >> "$OUT/env.txt" 2>&1
stamp "setup done" | tee -a "$OUT/env.txt"

# 1. The gpu-marked suite, and the whole adversarial corpus judged on the GPU, side by side.
gpu_tests="tests/test_gpu.py tests/test_backends.py tests/test_baselines.py tests/test_bench_agent.py
  tests/test_cuda_build.py tests/test_doctor.py tests/test_gpu_busy.py tests/test_model.py tests/test_profile.py
  tests/test_ray.py"
(stamp "gpu suite"; timeout -s INT -k 15 ${SUITE_CAP:-250} python3 -m pytest -p no:cacheprovider -n 5 -v \
   --tb=short -m "gpu or cuda_build" $gpu_tests; stamp "gpu suite rc=$?") > "$OUT/gpu_suite.log" 2>&1 &
suite=$!
(stamp "corpus on cuda"; KERNELOPT_CORPUS_DEVICE=cuda timeout -s INT -k 15 ${SUITE_CAP:-250} python3 -m pytest \
   -p no:cacheprovider -n 8 -v --tb=short tests/test_adversarial.py -k "test_adversarial_case and not container";
 stamp "corpus rc=$?") > "$OUT/corpus_cuda.log" 2>&1 &
corpus=$!
wait $suite $corpus
pkill -f pytest; sleep 1

# 3. Timing truth, alone on the GPU: exact copies of KernelBench level 1, then the spread of
# exact copies between evaluations.
(stamp "identity"; timeout -s INT -k 10 ${IDENTITY_CAP:-170} python3 benchmarks/kernelbench_identity.py \
   --kernelbench .kb/kb --level 1 --problems "$IDENTITY_PROBLEMS" --device cuda --timing-budget 1 \
   --timeout 120 --out /tmp/identity --kernelopt "$(command -v kernelopt)"; stamp "identity rc=$?") \
   > "$OUT/identity.log" 2>&1
pkill -f "kernelopt bench"; sleep 1  # a bench the cap cut off must not share the GPU with what follows
cp /tmp/identity/bench/results.jsonl "$OUT/identity_results.jsonl" 2>/dev/null
cp /tmp/identity/identity.md "$OUT/identity.md" 2>/dev/null
(stamp "stability"; timeout -s INT -k 10 ${STABILITY_CAP:-50} python3 benchmarks/timing_stability.py --device cuda \
   --runs 4 --timing-budget 2; stamp "stability rc=$?") > "$OUT/timing.log" 2>&1
# 5. Compile times of the GPU backends.
(stamp "compile"; timeout -s INT -k 10 ${COMPILE_CAP:-35} python3 benchmarks/backend_compile.py \
   --backends cuda,cupy,triton --repeats 1; stamp "compile rc=$?") >> "$OUT/timing.log" 2>&1
stamp "done"
grep -h -E "passed|failed|error" "$OUT/gpu_suite.log" "$OUT/corpus_cuda.log" | tail -6
tail -5 "$OUT/identity.log" "$OUT/timing.log"
