#!/bin/sh
# Registers the namespace the workers use once the server answers. Safe to
# rerun: an existing namespace is left alone.
set -eu
ns="${NAMESPACE:-default}"
addr="${TEMPORAL_ADDRESS:-temporal:7233}"
i=0
until temporal operator cluster health --address "${addr}" >/dev/null 2>&1; do
  i=$((i + 1))
  [ "$i" -lt 60 ] || { echo "Temporal at ${addr} did not become healthy"; exit 1; }
  sleep 2
done
if temporal operator namespace describe --namespace "${ns}" --address "${addr}" >/dev/null 2>&1; then
  echo "namespace ${ns} exists"
else
  temporal operator namespace create --namespace "${ns}" --retention 168h --address "${addr}"
  echo "namespace ${ns} created"
fi
