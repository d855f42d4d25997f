#!/bin/bash
# This project against SB3 PPO and A2C at equal wall time, env by env and seed by seed:
# ours with 2 workers on both cores for $BUDGET seconds, then SB3 PPO and A2C (RL-Zoo
# settings, benchmarks/sb3_suite.py) side by side, one torch thread and one core each.
# Nothing else may run meanwhile. Logs go to $LOGS; each run's result is its last lines.
#
#   bash benchmarks/vs_sb3.sh HalfCheetah-v5 Hopper-v5   # issue 9: 3 seeds x 10 min (~2 h)
#   SEEDS="1 2" bash benchmarks/vs_sb3.sh MinAtar/Breakout-v1   # issue 10 (~40 min)
#
# Needs stable-baselines3 and the envs' extras (pip install -e ".[minatar]"
# "gymnasium[mujoco]" stable-baselines3).
set -u
cd "$(dirname "$0")/.."
LOGS=${LOGS:-benchmarks-vs-sb3}
SEEDS=${SEEDS:-1 2 3}
BUDGET=${BUDGET:-600}
[ $# -gt 0 ] || { echo "usage: $0 ENV_ID [ENV_ID ...]" >&2; exit 2; }
mkdir -p "$LOGS"
for seed in $SEEDS; do
  for env in "$@"; do
    name=${env//\//-}
    python benchmarks/suite.py --envs "$env" --seeds "$seed" --budget "$BUDGET" \
      > "$LOGS/ours_${name}_s$seed.log" 2>&1
    for algo in ppo a2c; do
      python benchmarks/sb3_suite.py --algo $algo --threads 1 --envs "$env" --seeds "$seed" \
        --budget "$BUDGET" > "$LOGS/${algo}_${name}_s$seed.log" 2>&1 &
    done
    wait
    grep -H "seed $seed:" "$LOGS"/*_"${name}"_s"$seed".log
  done
done
