// Package verify checks the signatures of the webhooks plantstore sends,
// for a receiver written in Go. It uses only the standard library, so a
// receiver outside this module can import it.
//
// plantstore signs as Standard Webhooks (https://www.standardwebhooks.com)
// specifies: each request carries webhook-id, webhook-timestamp (Unix
// seconds) and webhook-signature ("v1," and the base64 HMAC-SHA256 of
// id "." timestamp "." body, keyed with the base64-decoded part of the
// subscriber's secret after "whsec_"). A receiver reads the body whole,
// calls Verify before it trusts anything in it, and drops duplicates by
// webhook-id: a delivery may arrive more than once.
//
//	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err != nil || verify.Verify(secret, r.Header, body, time.Now(), 0) != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header names of the Standard Webhooks specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

const (
	secretPrefix    = "whsec_"
	signaturePrefix = "v1,"

	// minKeyBytes is the specification's lower bound on a signing key;
	// anything shorter is too easy to guess.
	minKeyBytes = 24
)

// DefaultTolerance is how far a message's timestamp may be from the
// receiver's clock: the specification's suggestion, and what Verify uses
// when given no tolerance.
const DefaultTolerance = 5 * time.Minute

// The reasons Verify refuses a message, for errors.Is.
var (
	ErrMissingHeader = errors.New("missing header")
	ErrStale         = errors.New("timestamp is stale")
	ErrFuture        = errors.New("timestamp is in the future")
	ErrNoMatch       = errors.New("no signature matches")
)

// ParseSecret returns the signing key that a "whsec_" secret stands for. It
// refuses keys shorter than 24 bytes, so a truncated or hand-typed secret is
// caught when it is configured rather than when every delivery fails to
// verify. Its errors never repeat the secret.
func ParseSecret(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("webhook secret: must start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, errors.New("webhook secret: the part after whsec_ is not valid standard base64")
	}
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("webhook secret: key is %d bytes, want at least %d", len(key), minKeyBytes)
	}
	return key, nil
}

// Verify checks a message against secret, the "whsec_" secret that
// plantstore webhook add printed: see VerifyKey.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return fmt.Errorf("verify webhook: %w", err)
	}
	return VerifyKey(key, h, body, now, tolerance)
}

// VerifyKey is what a receiver does with a message, given the key of
// ParseSecret: it requires the three webhook headers, refuses a timestamp
// more than tolerance before or after now (a replay, or a badly wrong
// clock), and accepts the message if any of the space-separated "v1,"
// signatures matches the body, compared in constant time. Several
// signatures appear while a sender rotates secrets. A tolerance of zero or
// less means DefaultTolerance. body must be the bytes received, unparsed:
// re-encoded JSON does not match.
func VerifyKey(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(key) == 0 {
		return errors.New("verify webhook: no key")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	msgID, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for _, hv := range [][2]string{{HeaderID, msgID}, {HeaderTimestamp, tsText}, {HeaderSignature, sigs}} {
		if hv[1] == "" {
			return fmt.Errorf("verify webhook: %w %s", ErrMissingHeader, hv[0])
		}
	}
	secs, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("verify webhook: %s %q is not Unix seconds", HeaderTimestamp, tsText)
	}
	// Compare in seconds, without subtracting the sender's value: an absurd
	// timestamp must not overflow its way inside the window.
	nowSecs, limit := now.Unix(), int64(tolerance/time.Second)
	switch {
	case secs < nowSecs-limit:
		return fmt.Errorf("verify webhook: %w (%s, tolerance %s)", ErrStale, tsText, tolerance)
	case secs > nowSecs+limit:
		return fmt.Errorf("verify webhook: %w (%s, tolerance %s)", ErrFuture, tsText, tolerance)
	}
	want := mac(key, msgID, tsText, body)
	for _, sig := range strings.Fields(sigs) {
		encoded, ok := strings.CutPrefix(sig, signaturePrefix)
		if !ok {
			continue // another scheme (v1a, ...) we cannot check
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("verify webhook: %w", ErrNoMatch)
}

// Sign returns the webhook-signature value of one message: "v1," and the
// base64 HMAC-SHA256, under key, of msgID "." Unix seconds of ts "." body.
// It is what plantstore sends; a receiver's tests can use it to make
// messages.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return signaturePrefix + base64.StdEncoding.EncodeToString(mac(key, msgID, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(key []byte, msgID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID))
	m.Write([]byte("."))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}
