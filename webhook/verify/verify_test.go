package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The example published by the Standard Webhooks specification. Its id is
// the full "msg_p5jXN8AQM9LWM0D4loKWxJek": shortened, the signature differs.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func specKey(t *testing.T) []byte {
	t.Helper()
	key, err := ParseSecret(specSecret)
	if err != nil {
		t.Fatalf("ParseSecret(spec secret): %v", err)
	}
	return key
}

// signed is the headers of a message signed with key at ts.
func signed(key []byte, msgID string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(key, msgID, ts, body))
	return h
}

func TestSignMatchesSpecificationExample(t *testing.T) {
	key := specKey(t)
	got := Sign(key, specMsgID, time.Unix(specTimestamp, 0), []byte(specBody))
	if got != specSignature {
		t.Errorf("Sign = %q, want the specification's %q", got, specSignature)
	}

	// The same, from the documented formula, without our code.
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(specSecret, "whsec_"))
	m := hmac.New(sha256.New, raw)
	m.Write([]byte("msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330." + specBody))
	byHand := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if byHand != specSignature {
		t.Errorf("formula by hand = %q, want %q", byHand, specSignature)
	}
}

func TestVerifyAcceptsSpecificationExample(t *testing.T) {
	h := http.Header{}
	h.Set("webhook-id", specMsgID)
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", specSignature)
	now := time.Unix(specTimestamp+10, 0)
	if err := VerifyKey(specKey(t), h, []byte(specBody), now, time.Minute); err != nil {
		t.Fatalf("VerifyKey: %v", err)
	}
	if err := Verify(specSecret, h, []byte(specBody), now, time.Minute); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := Verify("whsec_short", h, []byte(specBody), now, time.Minute); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("Verify with a malformed secret: %v; want an error that does not repeat it", err)
	}
}

func TestParseSecretRejects(t *testing.T) {
	for _, tc := range []struct{ name, secret, wantInErr string }{
		{"empty", "", "whsec_"},
		{"no prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"},
		{"other prefix", "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"},
		{"prefix only", "whsec_", "0 bytes"},
		{"not base64", "whsec_not*base64!", "base64"},
		{"url-safe base64", "whsec_____________________________________________8=", "base64"},
		{"short key", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)), "23 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParseSecret(tc.secret)
			if err == nil {
				t.Fatalf("ParseSecret(%q) = %d bytes, want an error", tc.secret, len(key))
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantInErr)
			}
		})
	}
	if _, err := ParseSecret("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24))); err != nil {
		t.Errorf("a 24-byte key: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	key := specKey(t)
	otherKey := []byte("another key of at least 24 bytes")
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":7}`)
	sign := func(ts time.Time) http.Header { return signed(key, "msg_7", ts, body) }
	without := func(name string) http.Header {
		h := sign(now)
		h.Del(name)
		return h
	}
	withSignature := func(v string) http.Header {
		h := sign(now)
		h.Set("webhook-signature", v)
		return h
	}

	for _, tc := range []struct {
		name   string
		key    []byte
		header http.Header
		body   []byte
		want   error // nil: any error
	}{
		{"tampered body", key, sign(now), []byte(`{"id":8}`), ErrNoMatch},
		{"wrong key", otherKey, sign(now), body, ErrNoMatch},
		{"other id", key, func() http.Header { h := sign(now); h.Set("webhook-id", "msg_8"); return h }(), body, ErrNoMatch},
		{"stale", key, sign(now.Add(-6 * time.Minute)), body, ErrStale},
		{"future", key, sign(now.Add(6 * time.Minute)), body, ErrFuture},
		{"no id", key, without("webhook-id"), body, ErrMissingHeader},
		{"no timestamp", key, without("webhook-timestamp"), body, ErrMissingHeader},
		{"no signature", key, without("webhook-signature"), body, ErrMissingHeader},
		{"timestamp not a number", key, func() http.Header { h := sign(now); h.Set("webhook-timestamp", "1.7e9"); return h }(), body, nil},
		{"most negative timestamp", key, func() http.Header { h := sign(now); h.Set("webhook-timestamp", "-9223372036854775808"); return h }(), body, ErrStale},
		{"huge timestamp", key, func() http.Header { h := sign(now); h.Set("webhook-timestamp", "9223372036854775807"); return h }(), body, ErrFuture},
		{"only other schemes", key, withSignature("v1a,abc v2," + strings.TrimPrefix(Sign(key, "msg_7", now, body), "v1,")), body, ErrNoMatch},
		{"garbage signatures", key, withSignature("v1,!!! v1, ,,,"), body, ErrNoMatch},
		{"empty key", nil, sign(now), body, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyKey(tc.key, tc.header, tc.body, now, 5*time.Minute)
			if err == nil {
				t.Fatal("Verify accepted it")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyAcceptsAnyMatchingSignature(t *testing.T) {
	key := specKey(t)
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":7}`)
	good := Sign(key, "msg_7", now, body)
	old := Sign([]byte("the previous key, before rotation"), "msg_7", now, body)

	for _, sigs := range []string{
		good,
		old + " " + good,
		"v1a,c29tZXRoaW5n " + old + "  " + good + " v1,bm90IGl0",
	} {
		h := signed(key, "msg_7", now, body)
		h.Set("webhook-signature", sigs)
		if err := VerifyKey(key, h, body, now, time.Minute); err != nil {
			t.Errorf("signatures %q: %v", sigs, err)
		}
	}

	// At the edge of the tolerance, both ways.
	for _, skew := range []time.Duration{-time.Minute, time.Minute} {
		h := signed(key, "msg_7", now.Add(skew), body)
		if err := VerifyKey(key, h, body, now, time.Minute); err != nil {
			t.Errorf("timestamp %s from now: %v", skew, err)
		}
	}
}
