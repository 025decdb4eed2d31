package webhook

import (
	"testing"
	"time"
)

func TestNewSecretRoundTrip(t *testing.T) {
	s1, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if s1 == s2 {
		t.Fatal("two NewSecret calls returned the same secret")
	}
	key, err := ParseSecret(s1)
	if err != nil {
		t.Fatalf("ParseSecret(NewSecret()): %v", err)
	}
	if len(key) != 32 {
		t.Fatalf("key is %d bytes, want 32", len(key))
	}

	now := time.Now()
	body := []byte(`{"type":"plant.created","data":{"id":1}}`)
	h := Headers(key, "msg_1", now, body)
	if err := Verify(key, h, body, now, 0); err != nil {
		t.Fatalf("Verify of our own Headers: %v", err)
	}
}

// Headers carries what Send sends: the id, the timestamp, a signature
// that verifies (the signing itself is tested in webhook/verify) and the
// content type.
func TestHeaders(t *testing.T) {
	key, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	at, body := time.Unix(1614265330, 0), []byte(`{"id":7}`)
	h := Headers(key, "msg_7", at, body)
	want := map[string]string{
		"webhook-id":        "msg_7",
		"webhook-timestamp": "1614265330",
		"webhook-signature": Sign(key, "msg_7", at, body),
		"Content-Type":      "application/json",
	}
	for name, v := range want {
		if got := h.Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	if err := Verify(key, h, body, at, 0); err != nil {
		t.Errorf("Verify: %v", err)
	}
}
