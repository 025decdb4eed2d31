package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header names and prefixes of the Standard Webhooks specification.
const (
	headerID        = "webhook-id"
	headerTimestamp = "webhook-timestamp"
	headerSignature = "webhook-signature"

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

// NewSecret returns a fresh signing secret for a subscriber, in the
// specification's "whsec_" + base64 form, which is what the subscriber pastes
// into their verifying library. It fails only if the system's random source
// does.
func NewSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("new webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// ParseSecret returns the signing key that a "whsec_" secret stands for. It
// refuses keys shorter than 24 bytes, so a truncated or hand-typed secret is
// caught when it is stored rather than when every delivery fails to verify.
// Its errors never repeat the secret.
func ParseSecret(s string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(s, secretPrefix)
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

// Sign returns the webhook-signature value for one message: "v1," and the
// base64 HMAC-SHA256, under key, of msgID "." unix-seconds "." body. The
// body must be the exact bytes sent; any re-encoding breaks the signature.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return signaturePrefix + base64.StdEncoding.EncodeToString(mac(key, msgID, unixSeconds(ts), body))
}

// Headers returns the headers that make a request a signed Standard Webhooks
// message: webhook-id, webhook-timestamp, webhook-signature and the JSON
// content type. Send uses it; it is exported for tools that send by hand.
func Headers(key []byte, msgID string, ts time.Time, body []byte) http.Header {
	h := make(http.Header, 4)
	h.Set(headerID, msgID)
	h.Set(headerTimestamp, unixSeconds(ts))
	h.Set(headerSignature, Sign(key, msgID, ts, body))
	h.Set("Content-Type", "application/json")
	return h
}

var (
	errMissingHeader = errors.New("missing header")
	errStale         = errors.New("timestamp is stale")
	errFuture        = errors.New("timestamp is in the future")
	errNoMatch       = errors.New("no signature matches")
)

// Verify is what a receiver does with a message: it requires the three
// webhook headers, refuses a timestamp more than tolerance before or after
// now (a replay or a badly wrong clock), and accepts the message if any of
// the space-separated "v1," signatures matches, compared in constant time.
// Several signatures appear while a subscriber rotates secrets. We never
// receive webhooks; our tests use Verify as the receiver, so it is the
// executable statement of what a subscriber's library checks. A tolerance of
// zero or less means DefaultTolerance.
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(key) == 0 {
		return errors.New("verify webhook: no key")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	msgID, tsText, sigs := h.Get(headerID), h.Get(headerTimestamp), h.Get(headerSignature)
	for _, hv := range [][2]string{{headerID, msgID}, {headerTimestamp, tsText}, {headerSignature, sigs}} {
		if hv[1] == "" {
			return fmt.Errorf("verify webhook: %w %s", errMissingHeader, hv[0])
		}
	}
	secs, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("verify webhook: %s %q is not Unix seconds", headerTimestamp, tsText)
	}
	// Compare in seconds, without subtracting the sender's value: an absurd
	// timestamp must not overflow its way inside the window.
	nowSecs, limit := now.Unix(), int64(tolerance/time.Second)
	switch {
	case secs < nowSecs-limit:
		return fmt.Errorf("verify webhook: %w (%s, tolerance %s)", errStale, tsText, tolerance)
	case secs > nowSecs+limit:
		return fmt.Errorf("verify webhook: %w (%s, tolerance %s)", errFuture, tsText, tolerance)
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
	return fmt.Errorf("verify webhook: %w", errNoMatch)
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

func unixSeconds(ts time.Time) string { return strconv.FormatInt(ts.Unix(), 10) }
