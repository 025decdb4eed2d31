#!/usr/bin/env bash
# Builds the static plantstore binary. This is the one build command: the
# Dockerfile's build stage runs it, and so does CI (.ci/run), which has no
# container engine, so CI proves that the image's build works.
#
#   bash deploy/build.sh OUTPUT
#
# OUTPUT is the binary's path (relative to the current directory).
# Optional variables, stamped into the binary for "plantstore version":
#   VERSION  the version, e.g. 1.2.0 (default: the module's version as Go
#            records it, else "dev")
#   COMMIT   the commit, for builds outside a git checkout; inside one, Go
#            records the revision itself, with +dirty for uncommitted changes
#   DATE     the build time, RFC 3339 (default: now, or SOURCE_DATE_EPOCH
#            when set, for reproducible builds)
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: bash deploy/build.sh OUTPUT" >&2
	exit 2
fi
out=$1
if [ -d "$out" ]; then
	echo "deploy/build.sh: $out is a directory; give the binary's path" >&2
	exit 2
fi
case $out in
/*) ;;
*) out=$PWD/${out#./} ;;
esac
cd "$(dirname "$0")/.."

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	default_date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
else
	default_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
fi
ldflags="-s -w -X main.date=${DATE:-$default_date}"
for v in VERSION COMMIT DATE; do
	# Each value becomes one -X flag: no spaces or quotes.
	if [[ -n ${!v:-} && ! ${!v} =~ ^[A-Za-z0-9._+:-]+$ ]]; then
		echo "deploy/build.sh: $v=${!v}: only letters, digits and . _ + : - are allowed" >&2
		exit 2
	fi
done
if [ -n "${VERSION:-}" ]; then ldflags+=" -X main.version=$VERSION"; fi
if [ -n "${COMMIT:-}" ]; then ldflags+=" -X main.commit=$COMMIT"; fi

# -buildvcs=auto records the commit when the source is a git checkout git
# can read (it overrides a GOFLAGS=-buildvcs=false); without one, Go
# would refuse to build, so turn it off and rely on COMMIT.
buildvcs=auto
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	buildvcs=false
fi

# CGO_ENABLED=0: both drivers (modernc.org/sqlite, pgx) are pure Go, so the
# binary is static and runs on an image with no C library.
CGO_ENABLED=0 go build -trimpath -buildvcs="$buildvcs" -ldflags "$ldflags" -o "$out" ./cmd/plantstore
echo "$out"
