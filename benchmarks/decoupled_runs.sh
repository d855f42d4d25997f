#!/bin/bash
# Decoupled PPO (--algo ppo): one run of N workers (N - 1 actors and a learner on LEARNER)
# for SECONDS, then every run's figures under LOGDIR (steps/s, lag, fit, return over time).
#
#   N=15 LEARNER=cuda SECONDS=270 bash benchmarks/decoupled_runs.sh
#   [ENV=PongNoFrameskip-v4] [LOGDIR=runs/decoupled]
set -euo pipefail
ENV=${ENV:-PongNoFrameskip-v4} LOGDIR=${LOGDIR:-runs/decoupled}
python -m a3c.train --env "$ENV" --algo ppo --workers "${N:?N workers}" \
  --learner-device "${LEARNER:-auto}" --time-limit "${SECONDS:-270}" --eval-interval 0 \
  --logdir "$LOGDIR" --run-name "w${N}_${LEARNER:-auto}"
python benchmarks/run_summary.py "$LOGDIR"
