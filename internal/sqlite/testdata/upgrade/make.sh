#!/usr/bin/env bash
# Makes the upgrade fixtures: stores written by the real plantstore
# binaries of earlier schema versions, built from this repository's git
# history, through their own command line and HTTP API. The upgrade tests
# (internal/sqlite/upgrade_test.go, internal/postgres/upgrade_test.go)
# open them with the current code. README.md beside this script says what
# each fixture holds.
#
#   bash internal/sqlite/testdata/upgrade/make.sh sqlite-v1 sqlite-v2 sqlite-v3 sqlite-v6 sqlite-v7 postgres-v1 postgres-v2 postgres-v5
#
# postgres-* needs a server where databases may be created: run
#   eval "$(bash .ci/postgres.sh)"
# first (it exports PLANTSTORE_TEST_POSTGRES). Needs git, tar, go, curl, jq, and
# for postgres-* pg_dump and psql.
#
# Regenerating a fixture changes its token secrets (they are random) and
# its timestamps: the tests read the secrets from the fixture's .json, and
# the README's token tables need the lines this script prints. Make only
# the fixture you add; leave the others as they are.
#
# When a migration is added, add a case below for the schema version it
# replaces as the newest: the latest commit whose newest migration is that
# version, so the fixture is what that version's last binary wrote.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
sqlite_out=$here
postgres_out=$repo/internal/postgres/testdata/upgrade

work=$(mktemp -d /tmp/plantstore-fixtures.XXXXXX)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# build COMMIT: builds cmd/plantstore of COMMIT, from git archive (no
# worktree, nothing in the repository changes), and prints the binary's path.
build() {
	local commit=$1 src=$work/src-$1
	mkdir -p "$src"
	git -C "$repo" archive "$commit" | tar -x -C "$src"
	(cd "$src" && GOWORK=off GOFLAGS=-mod=readonly go build -o "$work/plantstore-$commit" ./cmd/plantstore) >&2
	echo "$work/plantstore-$commit"
}

# start BIN DB: runs BIN serve on DB on a free port; sets server_pid and url.
start() {
	local log=$work/serve.log
	: >"$log"
	"$1" serve --db "$2" --addr 127.0.0.1:0 2>"$log" &
	server_pid=$!
	for _ in $(seq 100); do
		url=$(jq -r 'select(.msg == "listening") | "http://" + .addr' "$log" 2>/dev/null | head -1)
		if [ -n "$url" ]; then return 0; fi
		sleep 0.1
	done
	echo "serve did not start:" >&2
	cat "$log" >&2
	exit 1
}

# stop: SIGTERM, as an operator stops it; the server writes the tokens'
# last use and closes the store.
stop() {
	kill -TERM "$server_pid"
	wait "$server_pid"
	server_pid=
}

# call METHOD PATH TOKEN [BODY]: one request, which must answer 2xx.
call() {
	local args=(-sS --fail-with-body -X "$1" "$url$2" -H "Authorization: Bearer $3")
	if [ $# -ge 4 ]; then args+=(-H 'Content-Type: application/json' -d "$4"); fi
	curl "${args[@]}" >/dev/null
}

# The tokens every fixture has, made with BIN token on DB; each secret goes
# into $work/tokens.json with what the fixture's test expects of it.
make_tokens() {
	local bin=$1 db=$2
	local admin reader rotated_old rotated_new
	admin=$("$bin" token create --db "$db" --name fixture-admin)
	reader=$("$bin" token create --db "$db" --name fixture-reader --scope plants:read)
	rotated_old=$("$bin" token create --db "$db" --name fixture-rotated --scope plants:write)
	"$bin" token revoke --db "$db" fixture-rotated
	# A revoked name may be issued again: two rows of one name.
	rotated_new=$("$bin" token create --db "$db" --name fixture-rotated)
	jq -n --arg admin "$admin" --arg reader "$reader" --arg old "$rotated_old" --arg new "$rotated_new" '[
		{name: "fixture-admin", secret: $admin, scopes: ["plants:read", "plants:write"], revoked: false},
		{name: "fixture-reader", secret: $reader, scopes: ["plants:read"], revoked: false},
		{name: "fixture-rotated", secret: $old, scopes: ["plants:write"], revoked: true},
		{name: "fixture-rotated", secret: $new, scopes: ["plants:read", "plants:write"], revoked: false}
	]' >"$work/tokens.json"
	echo "$admin" >"$work/admin"
	echo "$reader" >"$work/reader"
}

# add_subscriber BIN DB: a webhook subscriber (schema version 3 of SQLite,
# 2 of PostgreSQL, and up), added before the plants are created, so that
# each create leaves a delivery pending: its URL is in the reserved .invalid
# domain, which never resolves, so every attempt fails and is retried
# later. Its secret goes into $work/subscriber.
add_subscriber() {
	"$1" webhook add --db "$2" https://hooks.invalid/plants >"$work/subscriber"
}

# subscribers_json BIN DB: the subscribers as the fixture's manifest holds
# them: what the old binary lists, with the URL and secret as added.
subscribers_json() {
	"$1" webhook list --db "$2" --json | jq --arg secret "$(cat "$work/subscriber")" \
		'[.[] | {id, url: "https://hooks.invalid/plants", secret: $secret, pending, delivered, failed}]' >"$work/subscribers.json"
}

# The plants every fixture has, created with POST /plants (the only plant
# operation of schema version 1): with a tag, without, with the empty tag,
# non-ASCII text, and the ends of the id range.
create_plants() {
	local admin
	admin=$(cat "$work/admin")
	while IFS= read -r body; do
		call POST /plants "$admin" "$body"
		echo "$body"
	done >"$work/created.jsonl" <<-'EOF'
		{"id": 1, "name": "Monstera deliciosa", "tag": "tropical"}
		{"id": 2, "name": "Sansevieria"}
		{"id": 3, "name": "Fern", "tag": ""}
		{"id": 4, "name": "Ficus élastica 🌿", "tag": "tropical"}
		{"id": 5, "name": "Aloe vera", "tag": "succulent"}
		{"id": -7, "name": "Negative id", "tag": "edge"}
		{"id": 9223372036854775807, "name": "Largest id", "tag": "edge"}
		{"id": -9223372036854775808, "name": "Smallest id"}
	EOF
}

# The later API's writes (schema version 2 and up): an update that changes
# the tag, one that removes it, a delete, and reads by the reader token.
change_plants() {
	local admin reader
	admin=$(cat "$work/admin")
	reader=$(cat "$work/reader")
	call PUT /plants/2 "$admin" '{"name": "Snake plant", "tag": "shade"}'
	call PUT /plants/4 "$admin" '{"name": "Ficus elastica"}'
	call DELETE /plants/5 "$admin"
	call GET '/plants?tag=tropical' "$reader"
}

# manifest COMMIT VERSION PLANTS_JSON OUT: what a test checks the fixture
# against. The plants are copied as text: jq 1.6 reads numbers as doubles,
# which would round the ids at the ends of the int64 range.
manifest() {
	{
		printf '{\n"note": "TEST FIXTURE ONLY: these token secrets open nothing but this fixture",\n'
		printf '"commit": "%s",\n"schema_version": %d,\n"tokens": ' "$1" "$2"
		printf "%s" "$(cat "$work/tokens.json")"
		if [ -s "$work/subscribers.json" ]; then
			printf ',\n"subscribers": '
			cat "$work/subscribers.json"
		fi
		printf ',\n"plants": '
		cat "$3"
		printf '}\n'
	} >"$4"
	jq empty "$4" # well-formed
	# The tokens, as the README's tables show them.
	echo "$4:"
	jq -r '.tokens[] | "| `\(.name)` | \(.scopes | join(" ")) | \(if .revoked then "yes" else "no" end) | `\(.secret)` |"' "$4"
}

# sqlite-v1: schema version 1 (0001_init.sql). 9f5d784 is the last commit
# before 0002_tag_index.sql (327088d); its API has POST /plants only.
sqlite_v1() {
	local commit=9f5d784 bin db=$work/v1.db
	bin=$(build "$commit")
	make_tokens "$bin" "$db"
	start "$bin" "$db"
	create_plants
	stop
	finish_sqlite "$db" "$sqlite_out/v1.db"
	# Every create answered 200, and nothing else changed them.
	{
		echo '['
		sed '$!s/$/,/' "$work/created.jsonl"
		echo ']'
	} >"$work/plants.json"
	manifest "$(git -C "$repo" rev-parse "$commit")" 1 "$work/plants.json" "$sqlite_out/v1.json"
}

# sqlite-v2: schema version 2 (0002_tag_index.sql). 7436aa0 is the last
# commit before 0003_webhooks.sql (a88642e).
sqlite_v2() { sqlite_fixture 7436aa0 2; }

# sqlite-v3: schema version 3 (0003_webhooks.sql). 60b2988 is the last
# commit whose newest migration is 0003_webhooks.sql.
sqlite_v3() { sqlite_fixture 60b2988 3; }

# sqlite-v6: schema version 6 (0006_webhook_events.sql; versions 4 and 5
# were never the newest on main). 5019650 is the last commit whose newest
# migration is 0006_webhook_events.sql: it writes an outbox row with each
# change, which 0007_outbox_cursor.sql replaces with a cursor.
sqlite_v6() { sqlite_fixture 5019650 6; }

# sqlite-v7: schema version 7 (0007_outbox_cursor.sql). 4ad13b6 is the last
# commit whose newest migration is 0007_outbox_cursor.sql: it writes one
# change-feed row per change, which 0008_event_batches.sql packs into one
# row per committed batch.
sqlite_v7() { sqlite_fixture 4ad13b6 7; }

# sqlite_fixture COMMIT VERSION: the store the binary of COMMIT wrote
# through the API of version 2 and up (creates, updates, a delete, reads).
sqlite_fixture() {
	local commit=$1 version=$2 bin db=$work/v$2.db
	bin=$(build "$commit")
	make_tokens "$bin" "$db"
	rm -f "$work/subscribers.json"
	if [ "$version" -ge 3 ]; then add_subscriber "$bin" "$db"; fi
	start "$bin" "$db"
	create_plants
	change_plants
	# What the old binary itself lists is the fixture's expected content.
	"$bin" plants list --all --json --server "$url" --token "$(cat "$work/admin")" >"$work/plants.json"
	stop
	if [ "$version" -ge 3 ]; then subscribers_json "$bin" "$db"; fi
	finish_sqlite "$db" "$sqlite_out/v$version.db"
	manifest "$(git -C "$repo" rev-parse "$commit")" "$version" "$work/plants.json" "$sqlite_out/v$version.json"
}

# finish_sqlite DB OUT: one file is the fixture. The old binary's last
# close normally checkpoints the write-ahead log and removes it; if one is
# left, fold it in with the sqlite3 shell.
finish_sqlite() {
	if [ -e "$1-wal" ]; then
		sqlite3 "$1" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
		rm -f "$1-wal" "$1-shm"
	fi
	cp "$1" "$2"
	chmod 0644 "$2"
}

# postgres-v1: schema version 1 of PostgreSQL (0001_init.sql, 274809a).
# 7436aa0 is the last commit before 0002_webhooks.sql (a88642e).
postgres_v1() { postgres_fixture 7436aa0 1; }

# postgres-v2: schema version 2 of PostgreSQL (0002_webhooks.sql, a88642e).
# 60b2988 is the last commit whose newest migration is 0002_webhooks.sql.
postgres_v2() { postgres_fixture 60b2988 2; }

# postgres-v5: schema version 5 of PostgreSQL (0005_webhook_events.sql;
# versions 3 and 4 were never the newest on main). ea89441 is the last
# commit whose newest migration is 0005_webhook_events.sql: it takes event
# ids without the timeline that 0006_event_timeline.sql adds.
postgres_v5() { postgres_fixture ea89441 5; }

# postgres_fixture COMMIT VERSION: the fixture is pg_dump's plain SQL of
# the database the binary of COMMIT wrote.
postgres_fixture() {
	local commit=$1 version=$2 bin name admin_url db
	: "${PLANTSTORE_TEST_POSTGRES:?postgres fixtures need a server: eval \"\$(bash .ci/postgres.sh)\"}"
	admin_url=$PLANTSTORE_TEST_POSTGRES
	bin=$(build "$commit")
	name=plantstore_fixture_v$version
	psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name TEMPLATE template0 ENCODING 'UTF8'"
	# The admin URL with the database's name for its path.
	db=$(sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/$name#" <<<"$admin_url")
	make_tokens "$bin" "$db"
	rm -f "$work/subscribers.json"
	if [ "$version" -ge 2 ]; then add_subscriber "$bin" "$db"; fi
	start "$bin" "$db"
	create_plants
	change_plants
	"$bin" plants list --all --json --server "$url" --token "$(cat "$work/admin")" >"$work/plants.json"
	stop
	if [ "$version" -ge 2 ]; then subscribers_json "$bin" "$db"; fi
	mkdir -p "$postgres_out"
	# --column-inserts: plain INSERTs, which a test can run through pgx (COPY
	# FROM stdin needs psql); no owners or grants, which name this server's
	# roles.
	pg_dump --column-inserts --no-owner --no-privileges --file "$postgres_out/v$version.sql" "$db"
	psql -q "$admin_url" -c "DROP DATABASE $name"
	manifest "$(git -C "$repo" rev-parse "$commit")" "$version" "$work/plants.json" "$postgres_out/v$version.json"
}

if [ $# -eq 0 ]; then
	echo "usage: make.sh FIXTURE... (sqlite-v1, sqlite-v2, sqlite-v3, sqlite-v6, sqlite-v7, postgres-v1, postgres-v2, postgres-v5)" >&2
	exit 2
fi
for fixture in "$@"; do
	echo "== $fixture" >&2
	case $fixture in
	sqlite-v1) sqlite_v1 ;;
	sqlite-v2) sqlite_v2 ;;
	sqlite-v3) sqlite_v3 ;;
	sqlite-v6) sqlite_v6 ;;
	sqlite-v7) sqlite_v7 ;;
	postgres-v1) postgres_v1 ;;
	postgres-v2) postgres_v2 ;;
	postgres-v5) postgres_v5 ;;
	*)
		echo "unknown fixture $fixture: want sqlite-v1, sqlite-v2, sqlite-v3, sqlite-v6, sqlite-v7, postgres-v1, postgres-v2 or postgres-v5" >&2
		exit 2
		;;
	esac
done
