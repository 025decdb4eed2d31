#!/bin/sh
# The TLS certificate of compose.yaml's PostgreSQL, made once, on the first
# "docker compose up", by the pg-tls service (in the postgres image, for
# its openssl). Nothing secret is in the repository: the keys are made
# here, on your machine.
#
#   - A CA of this deployment's own signs one server certificate, for the
#     name the instances connect to (postgres). The CA's key is thrown away
#     at once: nothing else can ever be signed with it. The instances trust
#     only this CA (sslmode=verify-full&sslrootcert=...ca.crt), so they talk
#     to this server and no other.
#   - ca.crt goes to $CA_DIR (the volume pg-ca, mounted read-only in the
#     instances); server.crt and server.key to $TLS_DIR (the volume pg-tls,
#     mounted only in postgres), the key 0600 and owned by the user
#     PostgreSQL runs as ($KEY_OWNER), as PostgreSQL requires.
#   - If both are there already, it does nothing. To make new ones:
#     docker compose down, docker volume rm plantstore_pg-ca plantstore_pg-tls,
#     docker compose up -d.
#
# deploy_test.go runs it with CA_DIR, TLS_DIR and KEY_OWNER set and checks
# the certificate it makes.
set -eu

CA_DIR=${CA_DIR:-/ca}
TLS_DIR=${TLS_DIR:-/tls}
SERVER_NAME=${SERVER_NAME:-postgres}
KEY_OWNER=${KEY_OWNER-postgres:postgres}

if [ -s "$CA_DIR/ca.crt" ] && [ -s "$TLS_DIR/server.crt" ] && [ -s "$TLS_DIR/server.key" ]; then
	echo "pg-tls: the certificate is there already; nothing to do"
	exit 0
fi

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
	-subj "/CN=plantstore compose PostgreSQL CA" \
	-addext "basicConstraints=critical,CA:TRUE" \
	-addext "keyUsage=critical,keyCertSign,cRLSign" \
	-keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=$SERVER_NAME" -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' \
	"$SERVER_NAME" >"$work/server.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
	-CAcreateserial -CAserial "$work/ca.srl" -days 825 -extfile "$work/server.ext" \
	-out "$work/server.crt" 2>/dev/null

mkdir -p "$CA_DIR" "$TLS_DIR"
# The instances (user 65532) read ca.crt, PostgreSQL (user postgres) its key.
chmod 0755 "$CA_DIR" "$TLS_DIR"
install -m 0644 "$work/ca.crt" "$CA_DIR/ca.crt"
install -m 0644 "$work/server.crt" "$TLS_DIR/server.crt"
install -m 0600 "$work/server.key" "$TLS_DIR/server.key"
if [ -n "$KEY_OWNER" ]; then
	chown "$KEY_OWNER" "$TLS_DIR/server.key"
fi
echo "pg-tls: made a CA and a certificate for $SERVER_NAME; the CA's key is not kept"
