package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
)

// The statements CreateToken, RevokeToken and ReplaceToken share.
const (
	insertToken       = `INSERT INTO tokens (name, hash, scopes, created_at) VALUES ($1, $2, $3, $4) RETURNING id`
	revokeActiveToken = `UPDATE tokens SET revoked_at = $1 WHERE name = $2 AND revoked_at IS NULL`
)

// tokenTime is a token's creation time as stored: now when unset, in
// microseconds (what timestamptz keeps), so the token returned equals the
// one read back.
func (db *DB) tokenTime(at time.Time) time.Time {
	if at.IsZero() {
		at = db.now()
	}
	return at.UTC().Truncate(time.Microsecond)
}

func (db *DB) CreateToken(ctx context.Context, t plantstore.Token, hash plantstore.TokenHash) (plantstore.Token, error) {
	t.CreatedAt = db.tokenTime(t.CreatedAt)
	err := retry(ctx, func(ctx context.Context) error {
		return db.pool.QueryRow(ctx, insertToken,
			t.Name, hash[:], strings.Join(t.Scopes, " "), t.CreatedAt).Scan(&t.ID)
	})
	if isUniqueViolation(err) {
		return plantstore.Token{}, plantstore.Errorf(plantstore.ECONFLICT, "an active token named %q already exists", t.Name)
	}
	if err != nil {
		return plantstore.Token{}, db.storeError("create token", err)
	}
	return t, nil
}

// isUniqueViolation tells a second active token of one name (or, by a
// chance of 2^-256, one hash) from other failures of an insert.
func isUniqueViolation(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "23505"
}

const tokenColumns = `id, name, scopes, created_at, last_used_at, revoked_at`

func scanToken(row pgx.Row) (plantstore.Token, error) {
	var t plantstore.Token
	var scopes string
	var lastUsed, revoked *time.Time
	if err := row.Scan(&t.ID, &t.Name, &scopes, &t.CreatedAt, &lastUsed, &revoked); err != nil {
		return plantstore.Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	t.CreatedAt = t.CreatedAt.UTC()
	if lastUsed != nil {
		t.LastUsedAt = lastUsed.UTC()
	}
	if revoked != nil {
		t.RevokedAt = revoked.UTC()
	}
	return t, nil
}

func (db *DB) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	t, err := scanToken(db.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1 AND revoked_at IS NULL`, hash[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return plantstore.Token{}, plantstore.Errorf(plantstore.ENOTFOUND, "no such token")
	}
	if err != nil {
		return plantstore.Token{}, db.storeError("look up token", err)
	}
	return t, nil
}

func (db *DB) ActiveTokenHashes(ctx context.Context, max int) ([]plantstore.TokenHash, error) {
	rows, err := db.pool.Query(ctx, `SELECT hash FROM tokens WHERE revoked_at IS NULL ORDER BY id DESC LIMIT $1`, max)
	if err != nil {
		return nil, db.storeError("list token hashes", err)
	}
	hashes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (plantstore.TokenHash, error) {
		var b []byte
		if err := row.Scan(&b); err != nil {
			return plantstore.TokenHash{}, err
		}
		var h plantstore.TokenHash
		if len(b) != len(h) {
			return h, fmt.Errorf("a stored hash of %d bytes", len(b))
		}
		return plantstore.TokenHash(b), nil
	})
	if err != nil {
		return nil, db.storeError("list token hashes", err)
	}
	return hashes, nil
}

func (db *DB) ListTokens(ctx context.Context, includeRevoked bool) ([]plantstore.Token, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens
		WHERE revoked_at IS NULL OR $1 ORDER BY name, id`, includeRevoked)
	if err != nil {
		return nil, db.storeError("list tokens", err)
	}
	tokens, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (plantstore.Token, error) { return scanToken(row) })
	if err != nil {
		return nil, db.storeError("list tokens", err)
	}
	return tokens, nil
}

func (db *DB) RevokeToken(ctx context.Context, name string, at time.Time) error {
	var tag pgconn.CommandTag
	err := retry(ctx, func(ctx context.Context) (err error) {
		tag, err = db.pool.Exec(ctx, revokeActiveToken, at, name)
		return err
	})
	if err != nil {
		return db.storeError("revoke token", err)
	}
	if tag.RowsAffected() == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, "no active token named %q", name)
	}
	return nil
}

// maxReplaceRounds bounds the times a replace starts again for another
// token of its name issued meanwhile.
const maxReplaceRounds = 16

// ReplaceToken revokes and inserts in one transaction. Two replaces of one
// name at once: the second's revoke waits for the first's row, finds it
// revoked, and its insert then meets the first's new token: it starts
// again, and revokes that one. Each round takes its time afresh, so that
// no token is revoked before it was created.
func (db *DB) ReplaceToken(ctx context.Context, t plantstore.Token, hash plantstore.TokenHash) (plantstore.Token, bool, error) {
	given := t.CreatedAt
	var replaced bool
	var err error
	for range maxReplaceRounds {
		err = retry(ctx, func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
				t.CreatedAt = db.tokenTime(given)
				tag, err := tx.Exec(ctx, revokeActiveToken, t.CreatedAt, t.Name)
				if err != nil {
					return err
				}
				replaced = tag.RowsAffected() > 0
				return tx.QueryRow(ctx, insertToken,
					t.Name, hash[:], strings.Join(t.Scopes, " "), t.CreatedAt).Scan(&t.ID)
			})
		})
		if !isActiveNameTaken(err) {
			break
		}
	}
	switch {
	case isActiveNameTaken(err):
		return plantstore.Token{}, false, plantstore.Errorf(plantstore.ECONFLICT, "tokens named %q kept being issued meanwhile", t.Name)
	case isUniqueViolation(err):
		return plantstore.Token{}, false, plantstore.Errorf(plantstore.ECONFLICT, "a token with this hash already exists")
	case err != nil:
		return plantstore.Token{}, false, db.storeError("replace token", err)
	}
	return t, replaced, nil
}

// isActiveNameTaken tells an insert that met another active token of its
// name from one that met its hash (tokens' two unique indexes).
func isActiveNameTaken(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "23505" && pgErr.ConstraintName == "tokens_active_name"
}

// RecordTokenUse updates every token in one statement. Two servers may
// record uses of the same tokens at once; the ids go in ascending order so
// that they tend to lock the rows in the same order, and a deadlock that
// happens anyway is retried.
func (db *DB) RecordTokenUse(ctx context.Context, lastUse map[int64]time.Time) error {
	if len(lastUse) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(lastUse))
	times := make([]time.Time, len(ids))
	for i, id := range ids {
		times[i] = lastUse[id]
	}
	err := retry(ctx, func(ctx context.Context) error {
		// GREATEST ignores NULL: a first use is simply stored.
		_, err := db.pool.Exec(ctx, `UPDATE tokens SET last_used_at = GREATEST(tokens.last_used_at, u.at)
			FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at)
			WHERE tokens.id = u.id`, ids, times)
		return err
	})
	return db.storeError("record token use", err)
}
