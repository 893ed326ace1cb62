// Runs one SQL query in an in-memory DuckDB (the @duckdb/node-api package)
// and prints {"columns": [{"name", "type"}], "rows": [{column: value}]} as
// JSON. BIGINT values print as numbers when they are exact in a double, as
// strings otherwise; lists print as arrays, NULL as null.
//
//   node duckdb-query.mjs "SELECT ... FROM read_parquet('dir/**/*.parquet', hive_partitioning=true)"
import { DuckDBInstance } from '@duckdb/node-api';

const [sql] = process.argv.slice(2);
if (!sql) {
  console.error('usage: node duckdb-query.mjs SQL');
  process.exit(2);
}
const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
try {
  const reader = await conn.runAndReadAll(sql);
  const names = reader.columnNames();
  const types = reader.columnTypes();
  const out = {
    columns: names.map((name, i) => ({ name, type: types[i].toString() })),
    rows: reader.getRowObjectsJS(),
  };
  const json = JSON.stringify(out, (_, v) =>
    typeof v === 'bigint' ? (Number.isSafeInteger(Number(v)) ? Number(v) : v.toString()) : v);
  process.stdout.write(json + '\n');
} finally {
  conn.closeSync();
  instance.closeSync();
}
