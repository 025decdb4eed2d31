package client_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/client"
	"github.com/plantstore/plantstore/internal/app"
	"github.com/plantstore/plantstore/internal/httpapi"
)

// serve runs the service as plantstore serve does, on a loopback
// listener over a new SQLite file, with api's settings, and returns its
// URL and a token with every scope.
func serve(t *testing.T, api httpapi.Config) (url, token string) {
	t.Helper()
	a, err := app.Open(t.Context(), app.Config{
		Store:           app.StoreConfig{DB: filepath.Join(t.TempDir(), "plants.db")},
		API:             api,
		Logger:          slog.New(slog.DiscardHandler),
		ShutdownTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
		a.Close()
	})
	token = plantstore.NewToken()
	if _, err := a.Store().CreateToken(t.Context(), plantstore.Token{Name: "test", Scopes: plantstore.KnownScopes}, plantstore.HashToken(token)); err != nil {
		t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), token
}

type item struct {
	ev  client.Event
	err error
}

// follow runs Events in the background, handing over what it yields.
func follow(ctx context.Context, c *client.Client, after int64) <-chan item {
	items := make(chan item, 100)
	go func() {
		defer close(items)
		for ev, err := range c.Events(ctx, after) {
			items <- item{ev, err}
		}
	}()
	return items
}

// A follower from now whose first stream is refused (429: the token's
// only stream is held by another) misses nothing made while it waits:
// once the other stream closes, it yields the plant created in between.
// Before, it asked again from a later now and never did.
func TestEventsFromNowRefusedAtFirstMissesNothing(t *testing.T) {
	t.Parallel()
	url, token := serve(t, httpapi.Config{MaxStreamsPerToken: 1})
	c, err := client.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, client.Plant{ID: 1, Name: "before"}); err != nil {
		t.Fatal(err)
	}
	// The first follower holds the token's one stream once it yields.
	holderCtx, release := context.WithCancel(ctx)
	defer release()
	holder := follow(holderCtx, c, 0)
	if it := <-holder; it.err != nil || it.ev.Plant.ID != 1 {
		t.Fatalf("the first follower yielded %+v; want plant 1's event", it)
	}
	late := follow(ctx, c, client.FromNow)
	it := <-late
	if client.StatusCode(it.err) != 429 {
		t.Fatalf("the second follower yielded %+v; want the 429 of a token with its one stream open", it)
	}
	// While it is refused, and waits its Retry-After (5 s), a plant comes.
	if _, err := c.Create(ctx, client.Plant{ID: 2, Name: "while refused"}); err != nil {
		t.Fatal(err)
	}
	release()
	for it := range late {
		if it.err != nil {
			if client.Permanent(it.err) {
				t.Fatalf("the second follower ended on %v", it.err)
			}
			t.Logf("the second follower: %v; reconnecting in %v", it.err, client.ReconnectPause(it.err))
			continue
		}
		if it.ev.Type != client.EventCreated || it.ev.Plant.ID != 2 {
			t.Fatalf("the second follower yielded %s of plant %d first; want the creation of plant 2", it.ev.Type, it.ev.Plant.ID)
		}
		return
	}
	t.Fatalf("the second follower yielded no event in 15 s (%v): it missed plant 2, created while it was refused", ctx.Err())
}
