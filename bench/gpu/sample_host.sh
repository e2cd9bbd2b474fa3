#!/usr/bin/env bash
# On the GPU host, beside a run: CPU by process (top every 2 s, the busiest 12) and the GPU's use and
# memory (nvidia-smi every 2 s), into a folder; stopped by its second form. The samplers' process ids
# are kept in a file, so stopping them never matches the calling command line (pkill -f would).
#   bash bench/gpu/sample_host.sh start "$OUT"; python3 -m ...; bash bench/gpu/sample_host.sh stop
set -u
pids=/tmp/sample_host.pids
case "${1:-}" in
  start)
    top -b -d 2 -w 160 -o %CPU | grep --line-buffered -A12 '^top -\|^ *PID' > "$2/top.txt" &
    echo $! > "$pids"
    (while sleep 2; do nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader; done) > "$2/gpu.txt" &
    echo $! >> "$pids"
    ;;
  stop)
    [ -f "$pids" ] && xargs -r kill < "$pids" 2> /dev/null  # top ends at its next write into the grep gone
    rm -f "$pids"
    ;;
  *) echo "usage: $0 start FOLDER | stop" >&2; exit 2 ;;
esac
