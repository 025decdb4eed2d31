package webhook_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/sqlite"
	"github.com/plantstore/plantstore/internal/webhook"
)

func TestRedactURL(t *testing.T) {
	slack := "https://hooks.slack.com/services/T000SECRET/B000SECRET/XXXXXXXXXXXXXXXXXXXXXXXX"
	got := webhook.RedactURL(slack)
	if !strings.HasPrefix(got, "https://hooks.slack.com/…#") || len(got) != len("https://hooks.slack.com/…#")+8 {
		t.Errorf("RedactURL(slack) = %q, want scheme, host and an 8-digit hash", got)
	}
	if strings.Contains(got, "SECRET") || strings.Contains(got, "services") {
		t.Errorf("RedactURL(slack) = %q shows the path", got)
	}
	if again := webhook.RedactURL(slack); again != got {
		t.Errorf("RedactURL is not stable: %q, then %q", got, again)
	}
	for _, tc := range []struct{ raw, want string }{
		{"https://example.com", "https://example.com"},
		{"https://example.com/", "https://example.com/"},
		{"HTTP://Example.com:8080/", "http://Example.com:8080/"},
		{"http://[2001:db8::1]:8080", "http://[2001:db8::1]:8080"},
		{"not a url", "(a URL that does not parse)"},
		{"http://exa mple.com/x", "(a URL that does not parse)"},
		{"mailto:someone@example.com", "(a URL that does not parse)"},
	} {
		if got := webhook.RedactURL(tc.raw); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
	// The query alone, or another path, gives another hash.
	a := webhook.RedactURL("https://example.com/hook?token=one")
	b := webhook.RedactURL("https://example.com/hook?token=two")
	c := webhook.RedactURL("https://example.com/?token=one")
	if a == b || a == c || strings.Contains(a+b+c, "token") || strings.Contains(a+b+c, "hook") {
		t.Errorf("RedactURL: %q, %q, %q: want three hashes, no path or query", a, b, c)
	}
}

// syncBuffer is a log destination the dispatcher's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// No log line, at any level, holds a subscriber URL's path or query: the
// dispatcher runs at debug level through every outcome (delivered,
// retried, given up, 410 Gone, a refused address, an unusable secret) with
// URLs that carry their secret in the path (Slack style) or the query, and
// the log and the recorded last errors are searched for them.
func TestLogsShowNoURLPathOrQuery(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "plants.db"), sqlite.Options{SoleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	const pathSecret, querySecret = "PATHSECRET0123456789", "QUERYSECRET0123456789"
	add := func(url string, secret string) plantstore.Subscriber {
		t.Helper()
		if secret == "" {
			if secret, err = webhook.NewSecret(); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := store.AddSubscriber(ctx, url, secret)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	var subs []plantstore.Subscriber
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError, http.StatusBadGateway, http.StatusGone, http.StatusFound} {
		secret, _ := webhook.NewSecret()
		r := newReceiver(t, secret, func(int, delivery) (int, http.Header) { return status, nil })
		subs = append(subs, add(r.srv.URL+"/services/T0/B0/"+pathSecret+"?token="+querySecret, secret))
	}
	// A listener the client will refuse (it is loopback, and this client
	// allows no private address), and one whose secret is unusable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	subs = append(subs, add("http://"+ln.Addr().String()+"/"+pathSecret+"?token="+querySecret, ""))
	subs = append(subs, add("https://hooks.example.com/"+pathSecret+"?token="+querySecret, "whsec_not-base64"))

	// The receivers are on loopback, so the first dispatcher allows
	// private addresses; a second one, without, then serves the same store
	// and is refused the silent listener.
	for _, allowPrivate := range []bool{true, false} {
		disp, err := webhook.NewDispatcher(webhook.DispatcherConfig{
			Store:    store,
			Client:   webhook.NewClient(webhook.ClientOptions{AllowPrivate: allowPrivate, Timeout: time.Second}),
			Schedule: webhook.Schedule{Intervals: []time.Duration{20 * time.Millisecond}, ParkAfter: 400 * time.Millisecond},
			Log:      log, Poll: 10 * time.Millisecond, Workers: 8,
		})
		if err != nil {
			t.Fatal(err)
		}
		if allowPrivate {
			if _, err := store.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "fern"}); err != nil {
				t.Fatal(err)
			}
		}
		runCtx, cancel := context.WithTimeout(ctx, time.Second)
		disp.Run(runCtx)
		cancel()
	}

	out := logs.String()
	for _, want := range []string{"webhook delivered", "webhook attempt failed", "webhook delivery parked", "410 Gone", "not allowed", "webhook subscriber disabled", "/…#"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q, so an outcome was not exercised:\n%s", want, out)
		}
	}
	if !strings.Contains(out, `"level":"DEBUG"`) && !strings.Contains(out, `"level":"INFO"`) {
		t.Errorf("nothing logged below warn:\n%s", out)
	}
	for _, secret := range []string{pathSecret, querySecret, "token=", "/services/"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
	all, err := store.Subscribers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if strings.Contains(s.LastError+s.DisabledReason, "SECRET") {
			t.Errorf("subscriber %d records %q / %q", s.ID, s.LastError, s.DisabledReason)
		}
	}
	if len(all) != len(subs) {
		t.Errorf("%d subscribers, want %d", len(all), len(subs))
	}
}
