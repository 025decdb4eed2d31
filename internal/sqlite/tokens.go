package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/plantstore/plantstore"
)

// The statements CreateToken, RevokeToken and ReplaceToken share.
const (
	insertToken       = `INSERT INTO tokens (name, hash, scopes, created_at) VALUES (?, ?, ?, ?) RETURNING id`
	revokeActiveToken = `UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL`
)

// tokenTime is a token's creation time as stored: now when unset, in
// milliseconds, so the token returned equals the one read back.
func (db *DB) tokenTime(at time.Time) time.Time {
	if at.IsZero() {
		at = db.now()
	}
	return at.UTC().Truncate(time.Millisecond)
}

func (db *DB) CreateToken(ctx context.Context, t plantstore.Token, hash plantstore.TokenHash) (plantstore.Token, error) {
	t.CreatedAt = db.tokenTime(t.CreatedAt)
	err := db.write.QueryRowContext(ctx, insertToken,
		t.Name, hash[:], strings.Join(t.Scopes, " "), millis(t.CreatedAt)).Scan(&t.ID)
	if isUniqueViolation(err) {
		return plantstore.Token{}, plantstore.Errorf(plantstore.ECONFLICT, "an active token named %q already exists", t.Name)
	}
	if err != nil {
		return plantstore.Token{}, storeError("create token", err)
	}
	return t, nil
}

const tokenColumns = `id, name, scopes, created_at, last_used_at, revoked_at`

func scanToken(row interface{ Scan(...any) error }) (plantstore.Token, error) {
	var t plantstore.Token
	var scopes string
	var created int64
	var lastUsed, revoked sql.NullInt64
	if err := row.Scan(&t.ID, &t.Name, &scopes, &created, &lastUsed, &revoked); err != nil {
		return plantstore.Token{}, err
	}
	t.Scopes = strings.Fields(scopes)
	t.CreatedAt = time.UnixMilli(created).UTC()
	t.LastUsedAt = fromMillis(lastUsed)
	t.RevokedAt = fromMillis(revoked)
	return t, nil
}

func (db *DB) TokenByHash(ctx context.Context, hash plantstore.TokenHash) (plantstore.Token, error) {
	t, err := scanToken(db.tokenByHashStmt.QueryRowContext(ctx, hash[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return plantstore.Token{}, plantstore.Errorf(plantstore.ENOTFOUND, "no such token")
	}
	if err != nil {
		return plantstore.Token{}, storeError("look up token", err)
	}
	return t, nil
}

func (db *DB) ActiveTokenHashes(ctx context.Context, max int) ([]plantstore.TokenHash, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT hash FROM tokens WHERE revoked_at IS NULL ORDER BY id DESC LIMIT ?`, max)
	if err != nil {
		return nil, storeError("list token hashes", err)
	}
	defer rows.Close()
	var hashes []plantstore.TokenHash
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, storeError("list token hashes", err)
		}
		var h plantstore.TokenHash
		if len(b) != len(h) {
			return nil, storeError("list token hashes", fmt.Errorf("a stored hash of %d bytes", len(b)))
		}
		hashes = append(hashes, plantstore.TokenHash(b))
	}
	return hashes, storeError("list token hashes", rows.Err())
}

func (db *DB) ListTokens(ctx context.Context, includeRevoked bool) ([]plantstore.Token, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+tokenColumns+` FROM tokens
		WHERE revoked_at IS NULL OR ? ORDER BY name, id`, includeRevoked)
	if err != nil {
		return nil, storeError("list tokens", err)
	}
	defer rows.Close()
	var tokens []plantstore.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, storeError("list tokens", err)
		}
		tokens = append(tokens, t)
	}
	return tokens, storeError("list tokens", rows.Err())
}

func (db *DB) RevokeToken(ctx context.Context, name string, at time.Time) error {
	res, err := db.write.ExecContext(ctx, revokeActiveToken,
		millis(at), name)
	if err != nil {
		return storeError("revoke token", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return storeError("revoke token", err)
	} else if n == 0 {
		return plantstore.Errorf(plantstore.ENOTFOUND, "no active token named %q", name)
	}
	return nil
}

func (db *DB) ReplaceToken(ctx context.Context, t plantstore.Token, hash plantstore.TokenHash) (plantstore.Token, bool, error) {
	// BEGIN IMMEDIATE (the write pool's): replaces of one name run one
	// after the other, each timed once it has the lock, so that no token
	// is revoked before it was created.
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return plantstore.Token{}, false, storeError("replace token", err)
	}
	defer tx.Rollback()
	t.CreatedAt = db.tokenTime(t.CreatedAt)
	res, err := tx.ExecContext(ctx, revokeActiveToken, millis(t.CreatedAt), t.Name)
	if err != nil {
		return plantstore.Token{}, false, storeError("replace token", err)
	}
	revoked, err := res.RowsAffected()
	if err != nil {
		return plantstore.Token{}, false, storeError("replace token", err)
	}
	err = tx.QueryRowContext(ctx, insertToken,
		t.Name, hash[:], strings.Join(t.Scopes, " "), millis(t.CreatedAt)).Scan(&t.ID)
	if isUniqueViolation(err) { // the name was revoked just above: the hash
		return plantstore.Token{}, false, plantstore.Errorf(plantstore.ECONFLICT, "a token with this hash already exists")
	}
	if err != nil {
		return plantstore.Token{}, false, storeError("replace token", err)
	}
	if err := tx.Commit(); err != nil {
		return plantstore.Token{}, false, storeError("replace token", err)
	}
	return t, revoked > 0, nil
}

func (db *DB) RecordTokenUse(ctx context.Context, lastUse map[int64]time.Time) error {
	if len(lastUse) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return storeError("record token use", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `UPDATE tokens SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?`)
	if err != nil {
		return storeError("record token use", err)
	}
	defer stmt.Close()
	for id, at := range lastUse {
		if _, err := stmt.ExecContext(ctx, millis(at), id); err != nil {
			return storeError("record token use", err)
		}
	}
	return storeError("record token use", tx.Commit())
}
