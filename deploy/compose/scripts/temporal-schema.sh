#!/bin/sh
# Creates Temporal's two PostgreSQL databases and brings their schemas up to
# the server's version. Safe to rerun: an existing database only gets
# update-schema, which applies the versions it lacks.
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
export SQL_PASSWORD="${POSTGRES_PWD:?POSTGRES_PWD is required}"
port="${DB_PORT:-5432}"
schema=/etc/temporal/schema/postgresql/v12

echo "waiting for PostgreSQL at ${POSTGRES_SEEDS}:${port}"
i=0
until nc -z -w 5 "${POSTGRES_SEEDS}" "${port}"; do
  i=$((i + 1))
  [ "$i" -lt 60 ] || { echo "PostgreSQL did not come up"; exit 1; }
  sleep 2
done

sql() { temporal-sql-tool --plugin postgres12 --ep "${POSTGRES_SEEDS}" -p "${port}" -u "${POSTGRES_USER}" "$@"; }
for db in temporal:temporal temporal_visibility:visibility; do
  name=${db%%:*}
  dir=${db##*:}
  if sql --db "${name}" create; then
    sql --db "${name}" setup-schema -v 0.0
  else
    echo "database ${name} exists: updating its schema"
  fi
  sql --db "${name}" update-schema -d "${schema}/${dir}/versioned"
done
echo "Temporal schema ready"
