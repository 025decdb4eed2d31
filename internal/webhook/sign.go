package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/plantstore/plantstore/webhook/verify"
)

// Signing and verifying live in the public package webhook/verify, which
// receivers outside this module import; these are the sender's names for
// them, so the two sides cannot drift apart.

// DefaultTolerance is how far a message's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = verify.DefaultTolerance

// secretPrefix starts every secret (the specification's "whsec_").
const secretPrefix = "whsec_"

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

// ParseSecret returns the signing key that a "whsec_" secret stands for
// (verify.ParseSecret): keys shorter than 24 bytes are refused, and its
// errors never repeat the secret.
func ParseSecret(s string) ([]byte, error) { return verify.ParseSecret(s) }

// Sign returns the webhook-signature value for one message (verify.Sign).
// The body must be the exact bytes sent; any re-encoding breaks the
// signature.
func Sign(key []byte, msgID string, ts time.Time, body []byte) string {
	return verify.Sign(key, msgID, ts, body)
}

// Headers returns the headers that make a request a signed Standard Webhooks
// message: webhook-id, webhook-timestamp, webhook-signature and the JSON
// content type. Send uses it; it is exported for tools that send by hand.
func Headers(key []byte, msgID string, ts time.Time, body []byte) http.Header {
	// The keys in canonical form, as Header.Set would make them, without
	// its work on every delivery; room for the three Send adds.
	h := make(http.Header, 7)
	h[canonicalID] = []string{msgID}
	h[canonicalTimestamp] = []string{strconv.FormatInt(ts.Unix(), 10)}
	h[canonicalSignature] = []string{Sign(key, msgID, ts, body)}
	h["Content-Type"] = []string{"application/json"}
	return h
}

var (
	canonicalID        = http.CanonicalHeaderKey(verify.HeaderID)
	canonicalTimestamp = http.CanonicalHeaderKey(verify.HeaderTimestamp)
	canonicalSignature = http.CanonicalHeaderKey(verify.HeaderSignature)
	canonicalEventType = http.CanonicalHeaderKey(HeaderEventType)
	canonicalEventID   = http.CanonicalHeaderKey(HeaderEventID)
)

// Verify is what a receiver does with a message (verify.VerifyKey). We
// never receive webhooks; our tests use it as the receiver.
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	return verify.VerifyKey(key, h, body, now, tolerance)
}
