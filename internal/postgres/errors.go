package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/redact"
)

// storeError turns a driver error into a domain error (see classify) whose
// cause, for the log, is err with op as context and the URL's password
// taken out. Domain errors pass through unchanged.
func (db *DB) storeError(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*plantstore.Error](err); ok {
		return err
	}
	var cause error = &redactedError{err: fmt.Errorf("postgres: %s: %w", op, err), secrets: db.secrets}
	if db.closed.Load() {
		return plantstore.WrapError(plantstore.EUNAVAILABLE, "the store is closed", cause)
	}
	code, message := classify(err)
	return plantstore.WrapError(code, message, cause)
}

// classify is the one map from what the driver and the server report to
// the domain's codes. It recognises server errors by SQLSTATE, never by
// message text:
//
//   - the caller's deadline or cancellation, a failure to connect or to
//     get a pooled connection, a connection lost mid-statement, and the
//     server refusing work for now (shutting down, starting up, in
//     recovery, too many connections, out of memory, read-only, a
//     cancelled statement, a lock or serialization failure that outlived
//     its retries), the session ended by the server for any other
//     reason (a FATAL error): EUNAVAILABLE, which a retry may cure;
//   - a full disk: EINSUFFICIENT;
//   - anything else: EINTERNAL, a bug or a fault nobody planned for.
func classify(err error) (code, message string) {
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return plantstore.EUNAVAILABLE, "the store did not answer in time"
	}
	if errors.Is(err, context.Canceled) {
		return plantstore.EUNAVAILABLE, "the request was cancelled"
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch state := pgErr.Code; {
		case state == "53100": // disk_full
			return plantstore.EINSUFFICIENT, "the store is out of space"
		case state == "40001", state == "40P01": // serialization_failure, deadlock_detected
			return plantstore.EUNAVAILABLE, "the store is busy; retry shortly"
		case state == "55P03", state == "57014": // lock_not_available, query_canceled
			return plantstore.EUNAVAILABLE, "the store is busy; retry shortly"
		case state == "25006": // read_only_sql_transaction: a standby, or a read-only database
			return plantstore.EUNAVAILABLE, "the store takes no writes now (its database is read-only)"
		case strings.HasPrefix(state, "08"), // connection exceptions
			state == "57P01", state == "57P02", state == "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
			state == "53300", state == "53200", // too_many_connections, out_of_memory
			state == "58030": // io_error
			return plantstore.EUNAVAILABLE, "the store cannot answer now"
		}
		if _, connecting := errors.AsType[*pgconn.ConnectError](err); !connecting {
			if sessionEnded(pgErr) {
				return plantstore.EUNAVAILABLE, "the connection to the store was lost"
			}
			return plantstore.EINTERNAL, "internal error"
		}
		// The server refused a new connection for a reason of its own
		// (a wrong password, no such database): falls through, as every
		// failure to connect does, so the instance reads as not ready.
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return plantstore.EUNAVAILABLE, "the store cannot be reached"
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return plantstore.EUNAVAILABLE, "the store cannot be reached"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) {
		return plantstore.EUNAVAILABLE, "the connection to the store was lost"
	}
	return plantstore.EINTERNAL, "internal error"
}

// sessionEnded says whether the server ended the session with pgErr, a
// FATAL (or PANIC) error of a code not listed above: an idle-session or
// idle-in-transaction timeout (57P05, 25P03), its database dropped
// (57P04), or one a later version adds. The connection is gone, not the
// statement wrong: another connection may serve the retry.
func sessionEnded(pgErr *pgconn.PgError) bool {
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity // servers before 9.6 send only this
	}
	return severity == "FATAL" || severity == "PANIC"
}

// retryable reports whether err aborted its transaction only because of
// another one running at the same time, so that running it again from the
// start may succeed.
func retryable(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// maxAttempts bounds the runs of a write that keeps losing to concurrent
// transactions; then it fails as EUNAVAILABLE.
const maxAttempts = 3

// retry runs fn until it succeeds, fails for another reason than a
// serialization failure or a deadlock, or has run maxAttempts times. fn
// must run its whole transaction: PostgreSQL has rolled back the one that
// failed.
func retry(ctx context.Context, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if !retryable(err) || attempt == maxAttempts {
			return err
		}
		// A short random pause, longer each time, lets the transaction we
		// collided with finish before we start again.
		pause := time.Duration(attempt) * time.Duration(5+rand.IntN(20)) * time.Millisecond
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// redactedError hides secrets (passwords) in the text of err. pgx's errors
// name the user and the database but not the password; this is the second
// lock on that door, should some error quote a connection string.
type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string { return withoutSecrets(e.err.Error(), e.secrets) }
func (e *redactedError) Unwrap() error { return e.err }

func withoutSecrets(s string, secrets []string) string {
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		// As written, and as it appears in a URL's user information or
		// query.
		for _, form := range []string{secret, url.PathEscape(secret), url.QueryEscape(secret)} {
			s = redact.Replace(s, form, "xxxxx")
		}
	}
	return s
}

// RedactURL returns a connection URL fit to show (in a log, a usage text):
// its password in the user information and every parameter that can carry
// a secret (password, sslpassword, anything named like a secret, token or
// key password) masked. A URL that does not parse is not shown at all, as
// where a password is in it cannot be told.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	// u.Query would drop a malformed pair, and the raw query with it
	// would then be shown unmasked.
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	masked := false
	for name := range q {
		if secretParam(name) {
			q[name] = []string{"xxxxx"}
			masked = true
		}
	}
	if masked {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// secretParam reports whether a connection parameter can hold a secret:
// password and sslpassword (the client key's passphrase) today, and, for
// parameters pgx or libpq may learn later (libpq 18 has
// oauth_client_secret), any name that says password, secret or token.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, word := range []string{"password", "passwd", "secret", "token"} {
		if strings.Contains(name, word) {
			return true
		}
	}
	return false
}

// urlPasswords returns the secrets written in a connection URL: the
// password of its user information and the values of its secret
// parameters (see secretParam); ok is false when the URL does not parse,
// and so where a secret is in it cannot be told.
func urlPasswords(raw string) (pws []string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, false
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, false
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		pws = append(pws, pw)
	}
	for name, values := range q {
		if !secretParam(name) {
			continue
		}
		for _, v := range values {
			if v != "" {
				pws = append(pws, v)
			}
		}
	}
	return pws, true
}
