#!/bin/bash
export DOCKER_HOST=unix:///tmp/dk/docker.sock
out=/tmp/bench-out; mkdir -p $out
for i in 1 2 3 4 5; do
  for c in honest/relu_exact_copy.py honest/softmax_exact_copy.py honest/softmax_skip_dead_work.py; do
    (cd /tmp/bt-before && PYTHONPATH=/tmp/bt-before /work/main/.venv/bin/python benchmarks/docker_transport.py --readings 1 --image kernelopt-sandbox-p5 --case $c --out $out/before.jsonl) >> $out/log 2>&1
    (cd /tmp/bt-after && PYTHONPATH=/tmp/bt-after /work/main/.venv/bin/python benchmarks/docker_transport.py --readings 1 --image kernelopt-sandbox --case $c --out $out/after.jsonl) >> $out/log 2>&1
  done
done
for c in honest/relu_exact_copy.py honest/softmax_exact_copy.py honest/softmax_skip_dead_work.py; do
  (cd /tmp/bt-after && PYTHONPATH=/tmp/bt-after /work/main/.venv/bin/python benchmarks/docker_transport.py --readings 2 --backend bubblewrap --case $c --out $out/after-bubblewrap.jsonl) >> $out/log 2>&1
done
echo done >> $out/log
