#!/usr/bin/env bash
# Start a throwaway PostgreSQL server (Debian's package) on 127.0.0.1 for distributed-study tests.
# Usage: scripts/start_postgres.sh [DATADIR] [PORT]; prints the storage URL on its last line.
# Installs the package with apt-get when it is missing (Debian/Ubuntu, as root). Stop it with
#   pg_ctl -D DATADIR stop   (run as the postgres user when started as root).
set -euo pipefail
datadir=${1:-${TMPDIR:-/tmp}/autotune-pg}
port=${2:-55432}

find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
bindir=$(find_bin || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "installing PostgreSQL from Debian's packages" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bindir=$(find_bin)
fi

as_owner=()
if [ "$(id -u)" = 0 ]; then
  # postgres refuses to run as root: run it as the postgres user
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  as_owner=(runuser -u postgres --)
fi

if [ ! -f "$datadir/PG_VERSION" ]; then
  mkdir -p "$datadir"
  [ "$(id -u)" = 0 ] && chown postgres "$datadir"
  "${as_owner[@]}" "$bindir/initdb" -D "$datadir" -U postgres --auth=trust -E UTF8 >/dev/null
fi
if ! "${as_owner[@]}" "$bindir/pg_ctl" -D "$datadir" status >/dev/null 2>&1; then
  "${as_owner[@]}" "$bindir/pg_ctl" -D "$datadir" -l "$datadir/server.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $datadir" start >/dev/null
fi
"$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='autotune'" \
  | grep -q 1 || "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres autotune
echo "postgresql+psycopg://postgres@127.0.0.1:$port/autotune"
