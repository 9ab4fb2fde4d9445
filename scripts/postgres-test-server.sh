#!/usr/bin/env bash
# A PostgreSQL server for tests, benchmarks and local trials, from Debian's `postgresql` package.
#
#   scripts/postgres-test-server.sh start [DIR]   start it (creating the cluster if needed) and
#                                                 print its URL; if it runs already, just print it
#   scripts/postgres-test-server.sh url [DIR]     print the URL of the running server
#   scripts/postgres-test-server.sh stop [DIR]    stop it (the cluster stays in DIR)
#   scripts/postgres-test-server.sh ca [DIR]      print the path of the CA certificate that
#                                                 signed the server's (for sslmode=verify-full)
#
# DIR defaults to $MISSION_TEST_POSTGRES_DIR, else ${TMPDIR:-/tmp}/mission-test-postgres-UID. The
# cluster is made by initdb as an unprivileged user (`postgres` when run as root, else the caller),
# listens on 127.0.0.1 only, on a free port, with a generated password (scram-sha-256) for the
# superuser `mission`. The URL names the `postgres` database; tests make a database of their own
# in it. Commits do not wait for the WAL to reach the disk (synchronous_commit=off: a crash loses
# the last moments, never consistency), as SQLite's WAL mode with synchronous=NORMAL does, so the
# two backends are compared on equal terms. It takes TLS (ssl=on) with a certificate for
# 127.0.0.1 and localhost, signed by a CA of the directory's own (DIR/ca.crt), so clients can
# connect with sslmode=verify-full&sslrootcert=DIR/ca.crt; plain connections are taken too.
set -euo pipefail

action="${1:-start}"
dir="${2:-${MISSION_TEST_POSTGRES_DIR:-${TMPDIR:-/tmp}/mission-test-postgres-$(id -u)}}"

bindir=""
for candidate in /usr/lib/postgresql/*/bin; do
  if [ -x "$candidate/pg_ctl" ]; then bindir="$candidate"; fi
done
if [ -z "$bindir" ]; then
  echo "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl): run scripts/install-test-deps.sh" >&2
  exit 3
fi

# Everything the cluster does runs as an unprivileged user: PostgreSQL refuses to run as root.
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
  if ! id postgres >/dev/null 2>&1; then
    echo "running as root needs the 'postgres' user (Debian's postgresql package makes it)" >&2
    exit 3
  fi
  as_owner=(runuser -u postgres --)
fi

url() {
  printf 'postgres://mission:%s@127.0.0.1:%s/postgres\n' "$(cat "$dir/password")" "$(cat "$dir/port")"
}

# The CA and the server's certificate, made once per directory.
make_certificates() {
  [ -f "$dir/server.crt" ] && [ -f "$dir/ca.crt" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Mission test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
    -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
  chmod 600 "$dir/ca.key" "$dir/server.key"
  chmod 644 "$dir/ca.crt" "$dir/server.crt"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/server.key" "$dir/server.crt"; fi
}

running() {
  [ -f "$dir/port" ] && "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

case "$action" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    # One starter at a time: test processes may call this together.
    exec 9>"$dir/.lock"
    flock -w 120 9
    if ! running; then
      if [ ! -f "$dir/data/PG_VERSION" ]; then
        rm -rf "$dir/data"
        head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$dir/password"
        chmod 600 "$dir/password"
        if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/password"; fi
        "${as_owner[@]}" "$bindir/initdb" -D "$dir/data" -U mission --pwfile="$dir/password" \
          --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
          { cat "$dir/initdb.log" >&2; exit 1; }
      fi
      make_certificates
      port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
      echo "$port" >"$dir/port"
      "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c max_connections=300 -c synchronous_commit=off -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" \
        start >/dev/null 9>&- || { tail -n 20 "$dir/server.log" >&2; exit 1; }
    fi
    url
    ;;
  url)
    running || { echo "no PostgreSQL test server runs in $dir" >&2; exit 1; }
    url
    ;;
  ca)
    [ -f "$dir/ca.crt" ] || { echo "no PostgreSQL test server was made in $dir" >&2; exit 1; }
    echo "$dir/ca.crt"
    ;;
  stop)
    if running; then "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null; fi
    ;;
  *)
    echo "usage: $0 start|url|ca|stop [DIR]" >&2
    exit 2
    ;;
esac
