#!/usr/bin/env bash
# Answer reward-table plans on a GPU machine, for `bench table build --answers-from` on this one.
#
#   bash scripts/device_tables.sh GGUF OUTDIR SECONDS PLAN.json [PLAN.json ...]
#
# Plans come from `bench table build ... --plan PLAN.json` here (the arms and items, whole: that machine needs
# neither the data nor the encoder). Each is answered by `bench table calls` with the embedded model's GGUF copied
# by hand, in the given order, until SECONDS have passed (the last one gets what is left; a killed one keeps every
# call it finished, committed in its cache). OUTDIR then holds per plan its cache (gzip-compressed SQLite) and
# RECORDED.json (device, versions, sampler, time); a compressed cache over 15 MB is split into T.cache.sqlite.gz.part-NN
# (the device tool returns files of at most 16 MiB). ATTENTION=eager|sdpa|auto picks transformers' attention kernel
# (default eager: torch's CUDA memory-efficient SDPA kernel answered some SST-2 items wrong, see README). Back here:
#   cat OUTDIR/T.cache.sqlite.gz* | gunzip -c > runs/tables/T.cache.sqlite
# RESUME=DIR (carried there) resumes each plan from DIR/T.cache.sqlite.gz, the cache an earlier session returned.
#   python -m bench table build studies/tables/T-gemma3-270m.npz --task T ... \
#       --cache runs/tables/T.cache.sqlite --answers-from OUTDIR/T.recorded.json
source "$(dirname "$0")/_help.sh"  # -h/--help: the comment above, and nothing else
set -uo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 GGUF OUTDIR SECONDS PLAN.json [PLAN.json ...]" >&2; exit 2; }
GGUF=$1 OUTDIR=$2 SECONDS_ALLOWED=$3
shift 3
mkdir -p "$OUTDIR"
deadline=$(( $(date +%s) + SECONDS_ALLOWED ))
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for plan in "$@"; do
  name=$(basename "$plan" .plan.json)
  left=$(( deadline - $(date +%s) ))
  (( left > 20 )) || { echo "== $name: skipped, no time left" | tee -a "$OUTDIR/log"; continue; }
  echo "== $name: up to ${left} s" | tee -a "$OUTDIR/log"
  if [[ -n ${RESUME:-} && -f $RESUME/$name.cache.sqlite.gz && ! -f $OUTDIR/$name.cache.sqlite ]]; then
    gunzip -c "$RESUME/$name.cache.sqlite.gz" > "$OUTDIR/$name.cache.sqlite"  # its calls are not made again
  fi
  timeout "${left}s" python3 -m bench table calls "$plan" --gguf "$GGUF" --cache "$OUTDIR/$name.cache.sqlite" \
    --recorded "$OUTDIR/$name.recorded.json" --prefix-batch 1024 --kv-cache-gib 60 --attention "${ATTENTION:-eager}" 2>&1 | tr '\r' '\n' \
    | grep -v "^$" | tail -n 5 | tee -a "$OUTDIR/log"
done
for cache in "$OUTDIR"/*.cache.sqlite; do
  [[ -f $cache ]] || continue
  python3 - "$cache" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
print(sys.argv[1], con.execute("SELECT COUNT(*) FROM calls").fetchone()[0], "calls")
con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
con.execute("PRAGMA journal_mode=DELETE")
con.close()
PY
  gzip -f "$cache" && rm -f "$cache-wal" "$cache-shm"
  if (( $(stat -c %s "$cache.gz") > 15000000 )); then
    split -b 15000000 -d "$cache.gz" "$cache.gz.part-" && rm "$cache.gz"
  fi
done | tee -a "$OUTDIR/log"
