#!/bin/sh
# serve_vllm.sh WEIGHTS VLLM [vllm serve options…]
#
# Execs `VLLM serve MODEL_DIR options…` for the planner model that WEIGHTS
# ({weights}) names: either
#   - the model directory itself (Roundhouse fetched it from S3), or
#   - model_dir.txt (with model_server.weights_file: model_dir.txt): its
#     first line is the absolute path of the model directory on storage
#     every rollout host mounts.
# Anything else fails before vLLM starts, with the reason on stderr (the
# model server's log), so the episode's infrastructure failure says why.
set -eu
if [ "$#" -lt 2 ]; then
  echo "usage: serve_vllm.sh WEIGHTS VLLM [vllm serve options...]" >&2
  exit 2
fi
weights=$1
vllm=$2
shift 2
if [ -d "$weights" ]; then
  dir=$weights
elif [ -f "$weights" ]; then
  dir=$(head -n 1 "$weights" | tr -d '\r')
  case "$dir" in
    /*) ;;
    *) echo "serve_vllm.sh: $weights must hold an absolute model directory path, has '$dir'" >&2; exit 1 ;;
  esac
else
  echo "serve_vllm.sh: weights $weights do not exist" >&2
  exit 1
fi
if [ ! -f "$dir/config.json" ]; then
  echo "serve_vllm.sh: $dir is not a model directory (no config.json); is the shared storage mounted on this host?" >&2
  exit 1
fi
echo "serve_vllm.sh: serving $dir"
exec "$vllm" serve "$dir" "$@"
