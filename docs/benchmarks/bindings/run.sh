#!/bin/sh
# Runs the whole comparison and prints the raw results on stdout:
#
#	./run.sh > results.txt
#
# 1. the benchmark pinned to one core (taskset -c 0, so GOMAXPROCS=1),
# 2. the same unpinned,
# 3. build checks: CGO_ENABLED=0 builds, mattn's fully static cgo build,
#    cold build times (each in an empty GOCACHE of its own).
# Arguments are passed to the benchmark program (e.g. -dur 2s -reps 3).
set -eu
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# mattn and ncruces both register the database/sql driver "sqlite3".
ldflags='-X github.com/ncruces/go-sqlite3/driver.driverName=sqlite3-ncruces'

go build -ldflags "$ldflags" -o "$work/bindings" .
echo "### $(date -u +%FT%TZ) $(go version) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### pinned: taskset -c 0"
taskset -c 0 "$work/bindings" "$@"
echo
echo "### $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### unpinned"
"$work/bindings" "$@"
echo
echo "### $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### build checks"

echo "## CGO_ENABLED=0 build of the benchmark, then -check (opens, writes, reads with each binding)"
if CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$work/bindings-nocgo" . 2>"$work/err"; then
	echo "build: ok"
	"$work/bindings-nocgo" -check || true
else
	echo "build: FAILED"
fi
cat "$work/err"

# cold NAME ENV... -- BUILD-ARGS: builds ./smoke/NAME in an empty GOCACHE,
# reports the time, whether the binary is static, and runs it.
cold() {
	name=$1
	shift
	echo "## cold build: smoke/$name: env $*"
	cache=$(mktemp -d "$work/gocache-XXXX")
	if /usr/bin/time -o "$work/time" -f '%e s wall, %U s user, %S s sys' \
		env GOCACHE="$cache" "$@" -o "$work/$name" "./smoke/$name" >"$work/err" 2>&1; then
		echo "build: ok in $(cat "$work/time"), size $(stat -c %s "$work/$name") bytes"
	else
		echo "build: FAILED"
	fi
	sed 's/^/build output: /' "$work/err"
	echo "ldd: $(ldd "$work/$name" 2>&1 | tr '\n' ' ')"
	echo "run: $("$work/$name" 2>&1)"
	rm -rf "$cache"
}
cold none CGO_ENABLED=0 go build
cold mattn CGO_ENABLED=1 go build -tags 'netgo osusergo sqlite_omit_load_extension' -ldflags '-linkmode external -extldflags -static'
cold mattn CGO_ENABLED=1 go build
cold modernc CGO_ENABLED=0 go build
cold zombiezen CGO_ENABLED=0 go build
cold ncruces CGO_ENABLED=0 go build
echo "### $(date -u +%FT%TZ) done"
