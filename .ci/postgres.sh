#!/usr/bin/env bash
# A throwaway PostgreSQL 15 server for the tests of internal/postgres (and
# of anything else that uses internal/postgres/pgtest).
#
# Start one, and put its admin URL in the environment:
#
#   eval "$(bash .ci/postgres.sh)"
#   go test -race ./internal/postgres/...
#
# Standard output carries only two lines, for eval:
#
#   export PLANTSTORE_TEST_POSTGRES='postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable'
#   export PLANTSTORE_TEST_POSTGRES_DIR='/tmp/plantstore-pg.XXXXXX'
#
# Everything else (initdb's and pg_ctl's chatter, errors) goes to standard
# error. Stop the server and remove its files with
#
#   bash .ci/postgres.sh stop "$PLANTSTORE_TEST_POSTGRES_DIR"
#
# The server is for tests only: trust authentication, listening on
# 127.0.0.1 (a free port) and on a unix socket in its own directory, a
# fresh cluster in a fresh temporary directory each time it starts. fsync
# stays on, as on a real server: the tests are not slow enough with it to
# be worth testing against a server that commits differently.
#
# As root (CI here), initdb refuses to run, so the cluster belongs to the
# postgres user and the server runs as that user through runuser. The
# binaries are found in $PG_BIN, /usr/lib/postgresql/15/bin, or through
# pg_config; when none is there and we are root, Debian's postgresql-15 is
# installed with apt-get.
set -euo pipefail

# Only the final export lines may reach standard output.
exec 3>&1 1>&2

die() {
	echo "postgres.sh: $*"
	exit 1
}

# run runs a PostgreSQL program as the owner of the cluster. Descriptor 3
# is closed for it: a server that inherited the caller's standard output
# would keep $(...) waiting for it to end.
run() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@" 3>&-
	else
		"$@" 3>&-
	fi
}

find_bin() {
	local dir
	for dir in "${PG_BIN:-}" /usr/lib/postgresql/15/bin; do
		if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
			echo "$dir"
			return 0
		fi
	done
	if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
		pg_config --bindir
		return 0
	fi
	return 1
}

stop() {
	local dir=${1:-}
	[ -n "$dir" ] || die "usage: bash .ci/postgres.sh stop DIR (the PLANTSTORE_TEST_POSTGRES_DIR it printed)"
	# Refuse to remove a directory this script did not make.
	[ -f "$dir/plantstore-test-postgres" ] || die "$dir was not made by .ci/postgres.sh; not touching it"
	local bin
	bin=$(find_bin) || die "no PostgreSQL binaries found to stop the server with"
	if [ -f "$dir/data/postmaster.pid" ]; then
		run "$bin/pg_ctl" -D "$dir/data" -m fast -w stop || die "pg_ctl stop failed; the server in $dir may still run"
	fi
	rm -rf -- "$dir"
	echo "postgres.sh: stopped and removed $dir"
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on now. The
# server may still lose a race for it; start retries with another. The
# port lies below the kernel's range for outgoing connections (from 32768
# by default): one in it can be taken by a client's socket, and a client
# reconnecting to a stopped server can even connect to itself there,
# keeping the server from binding its port again for a minute.
free_port() {
	local port i low
	low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[ "$low" -gt 10000 ] || low=32768
	for i in $(seq 1 50); do
		port=$((10000 + RANDOM % (low - 10000)))
		if ! (exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

start() {
	local bin
	if ! bin=$(find_bin); then
		if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
			echo "postgres.sh: PostgreSQL 15 not found; installing Debian's postgresql-15"
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15
			bin=$(find_bin) || die "postgresql-15 installed, but initdb is still not found"
		else
			die "PostgreSQL 15 binaries not found: install postgresql-15 or set PG_BIN to its bin directory"
		fi
	fi

	local dir
	if [ "$(id -u)" -eq 0 ]; then
		id postgres >/dev/null 2>&1 || die "running as root needs a postgres user to own the cluster (initdb refuses root)"
		# /tmp, not $TMPDIR: the postgres user must be able to reach it.
		dir=$(mktemp -d /tmp/plantstore-pg.XXXXXX)
		chown postgres: "$dir"
	else
		dir=$(mktemp -d "${TMPDIR:-/tmp}/plantstore-pg.XXXXXX")
	fi
	touch "$dir/plantstore-test-postgres" # the mark stop looks for
	echo "postgres.sh: cluster in $dir (server log: $dir/server.log)"

	# A fixed superuser name whoever runs this; UTF8 and the C locale so
	# that every machine sorts and compares text the same way.
	if ! run "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1; then
		cat "$dir/initdb.log"
		rm -rf -- "$dir"
		die "initdb failed"
	fi

	local port attempt started=""
	for attempt in 1 2 3 4 5; do
		port=$(free_port) || die "no free TCP port found on 127.0.0.1"
		# max_connections: the tests of several packages may run at once,
		# each test with its own database and pool.
		if run "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c shared_buffers=64MB" \
			start; then
			started=yes
			break
		fi
		echo "postgres.sh: start on port $port failed (attempt $attempt):"
		tail -n 20 "$dir/server.log" || true
	done
	if [ -z "$started" ]; then
		rm -rf -- "$dir"
		die "the server did not start"
	fi

	local url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 10; then
		tail -n 50 "$dir/server.log" || true
		stop "$dir"
		die "the server started but does not answer on 127.0.0.1:$port"
	fi
	echo "postgres.sh: PostgreSQL ready on 127.0.0.1:$port and in $dir; stop it with: bash .ci/postgres.sh stop $dir"
	printf "export PLANTSTORE_TEST_POSTGRES='%s'\n" "$url" >&3
	printf "export PLANTSTORE_TEST_POSTGRES_DIR='%s'\n" "$dir" >&3
}

case "${1:-start}" in
start) start ;;
stop) stop "${2:-}" ;;
*) die "usage: bash .ci/postgres.sh [start] | bash .ci/postgres.sh stop DIR" ;;
esac
