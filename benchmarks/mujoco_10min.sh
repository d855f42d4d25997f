#!/bin/bash
# Issue 9's MuJoCo benchmark: HalfCheetah-v5 and Hopper-v5, 3 seeds, 10 minutes a run.
# For each seed and env: this project with 2 workers on both cores, then SB3 PPO and A2C
# (RL-Zoo settings) side by side, one torch thread and one core each. ~2 hours in all.
# Needs the mujoco extra and stable-baselines3 (pip install -e ".[mujoco]" stable-baselines3).
# Logs go to $LOGS (default: benchmarks-mujoco/); summarise with the lines they end with.
set -u
cd "$(dirname "$0")/.."
LOGS=${LOGS:-benchmarks-mujoco}
mkdir -p "$LOGS"
for seed in 1 2 3; do
  for env in HalfCheetah-v5 Hopper-v5; do
    name=${env%%-*}
    python benchmarks/suite.py --envs "$env" --seeds "$seed" --budget 600 \
      > "$LOGS/ours_${name}_s$seed.log" 2>&1
    python benchmarks/sb3_suite.py --algo ppo --threads 1 --envs "$env" --seeds "$seed" \
      --budget 600 > "$LOGS/ppo_${name}_s$seed.log" 2>&1 &
    python benchmarks/sb3_suite.py --algo a2c --threads 1 --envs "$env" --seeds "$seed" \
      --budget 600 > "$LOGS/a2c_${name}_s$seed.log" 2>&1 &
    wait
    grep -h "seed $seed:" "$LOGS"/*_"${name}"_s"$seed".log
  done
done
