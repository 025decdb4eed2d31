#!/usr/bin/env bash
# Lints the OpenAPI documents in api/ with Spectral (spectral:oas, as
# .spectral.yaml amends it) and Redocly CLI (recommended, redocly.yaml),
# both at the versions package-lock.json pins. Any error or warning
# fails: a warning ignored today hides the next one.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null; then
	echo "tools/apilint/lint.sh needs Node.js (20.19 or later) and npm" >&2
	exit 1
fi

# npm ci installs exactly the lock, from npm's cache when it has it. No
# install scripts: the linters need none, and one of their dependencies
# only reports the install to its vendor.
npm ci --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error

cd ../..
bin=tools/apilint/node_modules/.bin
docs=(api/openapi.yaml api/openapi.json)

echo "-- spectral $("$bin/spectral" --version)"
"$bin/spectral" lint --ruleset .spectral.yaml --fail-severity hint "${docs[@]}"

# Redocly fails on errors only, so the totals of its JSON report (one per
# document) are checked for warnings too; the readable report is printed
# when anything is found.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
echo "-- redocly $("$bin/redocly" --version 2>/dev/null)"
for doc in "${docs[@]}"; do
	report=$("$bin/redocly" lint --config redocly.yaml --format json "$doc" 2>/dev/null || true)
	if ! node -e '
		const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
		console.log(`${process.argv[1]}: ${r.totals.errors} errors, ${r.totals.warnings} warnings`);
		process.exit(r.totals.errors + r.totals.warnings === 0 ? 0 : 1);
	' "$doc" <<<"$report"; then
		"$bin/redocly" lint --config redocly.yaml "$doc" 2>&1 || true
		exit 1
	fi
done
