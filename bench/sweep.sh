#!/usr/bin/env bash
# The same `moert bench` sweep over rank counts: one combined CSV (one row per rank count and
# batch size, `moert bench --csv` columns) and one PNG (output throughput against ranks per
# batch size, and scaling efficiency = throughput(R) / (R x throughput(first R))).
# Under a Slurm allocation (SLURM_JOB_ID set) ranks start with `srun -n R --mpi=pmix`, else
# with `mpirun -np R`.
#   bash bench/sweep.sh OUT_PREFIX "1 2 4" [moert bench options...]
#   e.g. bash bench/sweep.sh build/sweep "1 2" --model M --batch-sizes 1,8 --input-len 64 --output-len 32
# Writes OUT_PREFIX.csv and OUT_PREFIX.png (and OUT_PREFIX.ranksR.json per rank count).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/sweep.sh OUT_PREFIX \"RANKS...\" [moert bench options]" >&2; exit 2; }
source "$(dirname "$0")/../scripts/env.sh"
moert="${MOERT_BIN:-$MOERT_BUILD_DIR/launch/moert}"
prefix=$1
ranks_list=$2
shift 2
csv="$prefix.csv"
: > "$csv.tmp"
for ranks in $ranks_list; do
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    launcher=(srun -n "$ranks" --mpi=pmix)
  else
    launcher=(mpirun -np "$ranks" --oversubscribe --bind-to none)
  fi
  "${launcher[@]}" "$moert" bench "$@" --csv "$prefix.ranks$ranks.csv" --json "$prefix.ranks$ranks.json" \
    | grep '^bench:'
  if [ ! -s "$csv.tmp" ]; then head -n 1 "$prefix.ranks$ranks.csv" > "$csv.tmp"; fi
  tail -n +2 "$prefix.ranks$ranks.csv" >> "$csv.tmp"
  rm -f "$prefix.ranks$ranks.csv"
done
mv "$csv.tmp" "$csv"
# Columns: 1 ranks, 2 batch_size, 8 output_throughput_tok_s; one line per batch size.
gnuplot <<GP
set datafile separator ','
set terminal png size 1200,480
set output '$prefix.png'
set multiplot layout 1,2 title "moert bench over rank counts"
set grid
set key top left
set xlabel 'ranks'
set xtics 1
set ylabel 'output tokens/s'
batches = system("tail -n +2 '$csv' | cut -d, -f2 | sort -n -u | tr '\\n' ' '")
rows(b) = sprintf("< awk -F, 'NR > 1 && \$2 == %s' '$csv' | sort -t, -k1,1n", b)
plot for [b in batches] rows(b) using 1:8 with linespoints pt 7 title sprintf('batch %s', b)
set ylabel 'scaling efficiency (vs the first rank count)'
set yrange [0:*]
first(b) = real(system(sprintf("awk -F, 'NR > 1 && \$2 == %s { print \$8 / \$1 }' '$csv' | head -n 1", b)))
plot for [b in batches] rows(b) using 1:(\$8 / (\$1 * first(b))) with linespoints pt 7 title sprintf('batch %s', b)
unset multiplot
GP
echo "sweep: $csv, $prefix.png"
