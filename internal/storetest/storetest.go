// Package storetest is the storage conformance suite: one specification of
// plantstore.Store's behaviour that every engine must pass.
package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
)

// Run runs the suite. open returns a new, empty store for each subtest.
func Run(t *testing.T, open func(t *testing.T) plantstore.Store) {
	t.Run("CreateThenGet", func(t *testing.T) { testCreateThenGet(t, open(t)) })
	t.Run("TagAbsentDiffersFromEmpty", func(t *testing.T) { testTagAbsentDiffersFromEmpty(t, open(t)) })
	t.Run("IdempotentReplay", func(t *testing.T) { testIdempotentReplay(t, open(t)) })
	t.Run("Conflict", func(t *testing.T) { testConflict(t, open(t)) })
	t.Run("ConcurrentCreatesOfOneID", func(t *testing.T) { testConcurrentCreates(t, open(t)) })
	t.Run("ConcurrentMixedCreates", func(t *testing.T) { testConcurrentMixedCreates(t, open(t)) })
	t.Run("Int64Extremes", func(t *testing.T) { testInt64Extremes(t, open(t)) })
	t.Run("GetMissing", func(t *testing.T) { testGetMissing(t, open(t)) })
	t.Run("ListPaging", func(t *testing.T) { testListPaging(t, open(t)) })
	t.Run("ListByTag", func(t *testing.T) { testListByTag(t, open(t)) })
	t.Run("ListEdges", func(t *testing.T) { testListEdges(t, open(t)) })
	t.Run("Update", func(t *testing.T) { testUpdate(t, open(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, open(t)) })
	t.Run("Preconditions", func(t *testing.T) { testPreconditions(t, open(t)) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, open(t)) })
	t.Run("TokenRevocation", func(t *testing.T) { testTokenRevocation(t, open(t)) })
	t.Run("TokenReplace", func(t *testing.T) { testTokenReplace(t, open(t)) })
	t.Run("TokenUse", func(t *testing.T) { testTokenUse(t, open(t)) })
	t.Run("ActiveTokenHashes", func(t *testing.T) { testActiveTokenHashes(t, open(t)) })
	runWebhooks(t, open)
	runEvents(t, open)
	t.Run("Ping", func(t *testing.T) {
		if err := open(t).Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func ptr(s string) *string { return &s }

func mustGet(t *testing.T, s plantstore.Store, id int64) plantstore.Plant {
	t.Helper()
	p, err := s.GetPlant(context.Background(), id)
	if err != nil {
		t.Fatalf("GetPlant(%d): %v", id, err)
	}
	return p
}

func testCreateThenGet(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	want := plantstore.Plant{ID: 7, Name: "Monstera deliciosa", Tag: ptr("tropical")}
	created, err := s.CreatePlant(ctx, want)
	if err != nil || !created {
		t.Fatalf("CreatePlant = %v, %v; want true, nil", created, err)
	}
	if got := mustGet(t, s, 7); !got.SameContent(want) {
		t.Errorf("GetPlant = %v, want %v", got, want)
	}
	untagged := plantstore.Plant{ID: 8, Name: "Aloe"}
	if _, err := s.CreatePlant(ctx, untagged); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, 8); got.Tag != nil {
		t.Errorf("untagged plant came back with tag %q", *got.Tag)
	}
}

func testTagAbsentDiffersFromEmpty(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	if _, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "a", Tag: ptr("")}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, 1); got.Tag == nil || *got.Tag != "" {
		t.Errorf("empty tag came back as %v", got.Tag)
	}
	_, err := s.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "a"})
	if code := plantstore.ErrorCode(err); code != plantstore.ECONFLICT {
		t.Errorf("no tag over empty tag: %v, want %s", err, plantstore.ECONFLICT)
	}
}

func testIdempotentReplay(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	p := plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("shade")}
	if _, err := s.CreatePlant(ctx, p); err != nil {
		t.Fatal(err)
	}
	created, err := s.CreatePlant(ctx, p)
	if err != nil || created {
		t.Errorf("replay = %v, %v; want false, nil", created, err)
	}
}

func testConflict(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	orig := plantstore.Plant{ID: 1, Name: "Fern", Tag: ptr("shade")}
	if _, err := s.CreatePlant(ctx, orig); err != nil {
		t.Fatal(err)
	}
	for _, other := range []plantstore.Plant{
		{ID: 1, Name: "Fern"},
		{ID: 1, Name: "Fern", Tag: ptr("sun")},
		{ID: 1, Name: "fern", Tag: ptr("shade")},
	} {
		if _, err := s.CreatePlant(ctx, other); plantstore.ErrorCode(err) != plantstore.ECONFLICT {
			t.Errorf("CreatePlant(%v) = %v, want %s", other, err, plantstore.ECONFLICT)
		}
	}
	if got := mustGet(t, s, 1); !got.SameContent(orig) {
		t.Errorf("after conflicts the plant is %v, want %v", got, orig)
	}
}

func testConcurrentCreates(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.CreatePlant(ctx, plantstore.Plant{ID: 99, Name: fmt.Sprintf("contender %d", i)})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch plantstore.ErrorCode(err) {
		case "":
			if winner >= 0 {
				t.Fatalf("contenders %d and %d both won", winner, i)
			}
			winner = i
		case plantstore.ECONFLICT:
		default:
			t.Errorf("contender %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no contender won")
	}
	if got := mustGet(t, s, 99); got.Name != fmt.Sprintf("contender %d", winner) {
		t.Errorf("stored %q, but contender %d won", got.Name, winner)
	}
}

// Creates of many ids at once, as an engine that batches them may gather
// them into one commit: stored ids replayed and contested, new ids created
// several times at once with two contents. Each create gets the answer it
// would get alone: of the creates of a new id one is created, and every
// other is a replay or a conflict of the content that won.
func testConcurrentMixedCreates(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	const stored, ids, perID = 8, 16, 6
	for id := int64(1); id <= stored; id++ {
		mustCreate(t, s, plantstore.Plant{ID: id, Name: "old"})
	}
	type attempt struct {
		p       plantstore.Plant
		created bool
		err     error
	}
	attempts := make([]attempt, 0, ids*perID)
	for id := int64(1); id <= ids; id++ {
		for k := range perID {
			p := plantstore.Plant{ID: id, Name: "old"}
			if k%2 == 1 {
				p.Tag = ptr("other")
			}
			attempts = append(attempts, attempt{p: p})
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			<-start
			attempts[i].created, attempts[i].err = s.CreatePlant(ctx, attempts[i].p)
		})
	}
	close(start)
	wg.Wait()
	winners := map[int64]int{}
	for _, a := range attempts {
		got := mustGet(t, s, a.p.ID)
		if a.p.ID <= stored && !got.SameContent(plantstore.Plant{ID: a.p.ID, Name: "old"}) {
			t.Errorf("plant %d, stored before, is now %v", a.p.ID, got)
		}
		switch {
		case a.err == nil && a.created:
			winners[a.p.ID]++
			if !got.SameContent(a.p) {
				t.Errorf("CreatePlant(%v) created it, but %v is stored", a.p, got)
			}
		case a.err == nil:
			if !got.SameContent(a.p) {
				t.Errorf("CreatePlant(%v) was a replay, but %v is stored", a.p, got)
			}
		case plantstore.ErrorCode(a.err) == plantstore.ECONFLICT:
			if got.SameContent(a.p) {
				t.Errorf("CreatePlant(%v) conflicted with the same content", a.p)
			}
		default:
			t.Errorf("CreatePlant(%v): %v", a.p, a.err)
		}
	}
	for id := int64(1); id <= ids; id++ {
		if want := map[bool]int{true: 0, false: 1}[id <= stored]; winners[id] != want {
			t.Errorf("plant %d: %d creates reported created, want %d", id, winners[id], want)
		}
	}
}

func testInt64Extremes(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	for _, id := range []int64{-1 << 63, -1, 0, 1<<63 - 1} {
		p := plantstore.Plant{ID: id, Name: fmt.Sprint(id)}
		if _, err := s.CreatePlant(ctx, p); err != nil {
			t.Fatalf("CreatePlant(%d): %v", id, err)
		}
		if got := mustGet(t, s, id); !got.SameContent(p) {
			t.Errorf("GetPlant(%d) = %v", id, got)
		}
	}
}

func testGetMissing(t *testing.T, s plantstore.Store) {
	if _, err := s.GetPlant(context.Background(), 404); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("GetPlant(missing) = %v, want %s", err, plantstore.ENOTFOUND)
	}
}

func testTokens(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	secret := plantstore.NewToken()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, err := s.CreateToken(ctx, plantstore.Token{Name: "ci", Scopes: []string{plantstore.ScopePlantsRead}, CreatedAt: created}, plantstore.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if tok.ID == 0 {
		t.Error("CreateToken gave no id")
	}
	got, err := s.TokenByHash(ctx, plantstore.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "ci" || !got.HasScope(plantstore.ScopePlantsRead) || got.HasScope(plantstore.ScopePlantsWrite) || !got.CreatedAt.Equal(created) {
		t.Errorf("TokenByHash = %+v", got)
	}
	if _, err := s.TokenByHash(ctx, plantstore.HashToken(plantstore.NewToken())); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("unknown hash: %v, want %s", err, plantstore.ENOTFOUND)
	}
	_, err = s.CreateToken(ctx, plantstore.Token{Name: "ci", Scopes: []string{plantstore.ScopePlantsRead}}, plantstore.HashToken(plantstore.NewToken()))
	if plantstore.ErrorCode(err) != plantstore.ECONFLICT {
		t.Errorf("second active token named ci: %v, want %s", err, plantstore.ECONFLICT)
	}
	if _, err := s.CreateToken(ctx, plantstore.Token{Name: "admin", Scopes: plantstore.KnownScopes}, plantstore.HashToken(plantstore.NewToken())); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListTokens(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "admin" || list[1].Name != "ci" {
		t.Errorf("ListTokens = %+v, want admin then ci", list)
	}
}

func testTokenRevocation(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	secret := plantstore.NewToken()
	if _, err := s.CreateToken(ctx, plantstore.Token{Name: "temp", Scopes: plantstore.KnownScopes}, plantstore.HashToken(secret)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx, "temp", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TokenByHash(ctx, plantstore.HashToken(secret)); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("revoked token still found: %v", err)
	}
	if err := s.RevokeToken(ctx, "temp", time.Now()); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("second revoke: %v, want %s", err, plantstore.ENOTFOUND)
	}
	// The name can be issued again.
	if _, err := s.CreateToken(ctx, plantstore.Token{Name: "temp", Scopes: plantstore.KnownScopes}, plantstore.HashToken(plantstore.NewToken())); err != nil {
		t.Errorf("reissue revoked name: %v", err)
	}
	active, _ := s.ListTokens(ctx, false)
	all, _ := s.ListTokens(ctx, true)
	if len(active) != 1 || len(all) != 2 {
		t.Errorf("ListTokens: %d active, %d in all; want 1 and 2", len(active), len(all))
	}
	for _, tok := range all {
		if tok.RevokedAt.IsZero() == (tok.ID != active[0].ID) {
			t.Errorf("token %d: RevokedAt %v", tok.ID, tok.RevokedAt)
		}
	}
}

// ReplaceToken revokes the active token of the name and issues the new
// one together; on a free name it only issues; replaces of one name at
// once all succeed, each revoking the one before, and leave one active.
func testTokenReplace(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	old := plantstore.NewToken()
	if _, err := s.CreateToken(ctx, plantstore.Token{Name: "deploy", Scopes: plantstore.KnownScopes}, plantstore.HashToken(old)); err != nil {
		t.Fatal(err)
	}
	secret := plantstore.NewToken()
	tok, replaced, err := s.ReplaceToken(ctx, plantstore.Token{Name: "deploy", Scopes: []string{plantstore.ScopePlantsRead}}, plantstore.HashToken(secret))
	if err != nil || !replaced || tok.ID == 0 {
		t.Fatalf("ReplaceToken = %+v, %v, %v; want a token, true, nil", tok, replaced, err)
	}
	if _, err := s.TokenByHash(ctx, plantstore.HashToken(old)); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("the replaced token: %v, want %s", err, plantstore.ENOTFOUND)
	}
	if got, err := s.TokenByHash(ctx, plantstore.HashToken(secret)); err != nil || got.ID != tok.ID || got.HasScope(plantstore.ScopePlantsWrite) {
		t.Errorf("the replacement: %+v, %v", got, err)
	}
	if _, replaced, err := s.ReplaceToken(ctx, plantstore.Token{Name: "fresh", Scopes: plantstore.KnownScopes}, plantstore.HashToken(plantstore.NewToken())); err != nil || replaced {
		t.Errorf("ReplaceToken on a free name: replaced %v, %v; want false, nil", replaced, err)
	}
	const n = 8
	secrets := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		secrets[i] = plantstore.NewToken()
		wg.Go(func() {
			_, _, errs[i] = s.ReplaceToken(ctx, plantstore.Token{Name: "deploy", Scopes: plantstore.KnownScopes}, plantstore.HashToken(secrets[i]))
		})
	}
	wg.Wait()
	active := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("replace %d of %d at once: %v", i+1, n, errs[i])
		}
		if _, err := s.TokenByHash(ctx, plantstore.HashToken(secrets[i])); err == nil {
			active++
		}
	}
	all, err := s.ListTokens(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, tok := range all {
		if tok.Name == "deploy" {
			named++
		}
	}
	if active != 1 || named != n+2 {
		t.Errorf("after %d replaces at once: %d of them active, %d tokens named deploy in all; want 1 and %d", n, active, named, n+2)
	}
}

// ActiveTokenHashes lists the active tokens' hashes, newest first, up to
// its bound; never a revoked token's.
func testActiveTokenHashes(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	var hashes []plantstore.TokenHash
	for _, name := range []string{"a", "b", "c", "d"} {
		h := plantstore.HashToken(plantstore.NewToken())
		if _, err := s.CreateToken(ctx, plantstore.Token{Name: name, Scopes: plantstore.KnownScopes}, h); err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	if err := s.RevokeToken(ctx, "c", time.Now()); err != nil {
		t.Fatal(err)
	}
	got, err := s.ActiveTokenHashes(ctx, 10)
	if want := []plantstore.TokenHash{hashes[3], hashes[1], hashes[0]}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ActiveTokenHashes(10) = %x, %v; want %x", got, err, want)
	}
	got, err = s.ActiveTokenHashes(ctx, 2)
	if want := []plantstore.TokenHash{hashes[3], hashes[1]}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ActiveTokenHashes(2) = %x, %v; want %x", got, err, want)
	}
}

func testTokenUse(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	secret := plantstore.NewToken()
	tok, err := s.CreateToken(ctx, plantstore.Token{Name: "u", Scopes: plantstore.KnownScopes}, plantstore.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.LastUsedAt.IsZero() {
		t.Errorf("new token has LastUsedAt %v", tok.LastUsedAt)
	}
	later := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	earlier := later.Add(-time.Hour)
	if err := s.RecordTokenUse(ctx, map[int64]time.Time{tok.ID: later}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTokenUse(ctx, map[int64]time.Time{tok.ID: earlier}); err != nil {
		t.Fatal(err)
	}
	got, err := s.TokenByHash(ctx, plantstore.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastUsedAt.Equal(later) {
		t.Errorf("LastUsedAt = %v, want the later %v", got.LastUsedAt, later)
	}
}

func i64(n int64) *int64 { return &n }

func seed(t *testing.T, s plantstore.Store, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		p := plantstore.Plant{ID: id, Name: fmt.Sprint("plant ", id)}
		if id%3 == 0 {
			p.Tag = ptr("fizz")
		}
		if _, err := s.CreatePlant(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(ps []plantstore.Plant) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func testListPaging(t *testing.T, s plantstore.Store) {
	seed(t, s, 5, -3, 9, 0, 12, 1, 7, -1<<63, 1<<63-1, 3)
	want := []int64{-1 << 63, -3, 0, 1, 3, 5, 7, 9, 12, 1<<63 - 1}
	var got []int64
	opts := plantstore.ListOptions{Limit: 3}
	for range 10 {
		page, err := s.ListPlants(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("page of %d with limit 3", len(page))
		}
		if len(page) == 0 {
			break
		}
		got = append(got, ids(page)...)
		opts.After = i64(page[len(page)-1].ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("paging visited %v, want %v", got, want)
	}
	first, _ := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: 1})
	if len(first) != 1 || first[0].Name != fmt.Sprint("plant ", int64(-1<<63)) || first[0].Tag != nil {
		t.Errorf("first plant %v", first)
	}
}

func testListByTag(t *testing.T, s plantstore.Store) {
	seed(t, s, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if _, err := s.CreatePlant(context.Background(), plantstore.Plant{ID: 11, Name: "x", Tag: ptr("")}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListPlants(context.Background(), plantstore.ListOptions{Tag: ptr("fizz"), Limit: 2, After: i64(3)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(page)) != "[6 9]" {
		t.Errorf("fizz after 3, limit 2: %v, want [6 9]", ids(page))
	}
	for _, p := range page {
		if p.Tag == nil || *p.Tag != "fizz" {
			t.Errorf("plant %d has tag %v", p.ID, p.Tag)
		}
	}
	empty, _ := s.ListPlants(context.Background(), plantstore.ListOptions{Tag: ptr(""), Limit: 10})
	if fmt.Sprint(ids(empty)) != "[11]" {
		t.Errorf("empty tag lists %v, want only [11] (no tag is not the empty tag)", ids(empty))
	}
	none, _ := s.ListPlants(context.Background(), plantstore.ListOptions{Tag: ptr("FIZZ"), Limit: 10})
	if len(none) != 0 {
		t.Errorf("tags match exactly, but FIZZ lists %v", ids(none))
	}
}

func testListEdges(t *testing.T, s plantstore.Store) {
	empty, err := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: 10})
	if err != nil || empty == nil || len(empty) != 0 {
		t.Errorf("empty store lists %v, %v; want an empty, non-nil slice", empty, err)
	}
	seed(t, s, 1<<63-1, 1)
	last, err := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: 10, After: i64(1<<63 - 1)})
	if err != nil || len(last) != 0 {
		t.Errorf("after the largest id: %v, %v", ids(last), err)
	}
	all, _ := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: 10, After: i64(-1 << 63)})
	if len(all) != 2 {
		t.Errorf("after the smallest id: %v", ids(all))
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: limit}); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("limit %d: %v, want %s", limit, err, plantstore.EINVALID)
		}
	}
	// A tag no plant can have is refused, not sent to the database (which
	// may refuse it, with a fault of its own).
	for _, tag := range []string{"a\x00b", "\xff", strings.Repeat("x", plantstore.MaxTagLength+1)} {
		if _, err := s.ListPlants(context.Background(), plantstore.ListOptions{Tag: &tag, Limit: 10}); plantstore.ErrorCode(err) != plantstore.EINVALID {
			t.Errorf("tag %q: %v, want %s", tag, err, plantstore.EINVALID)
		}
	}
	big, err := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: plantstore.MaxListLimit + 1})
	if err != nil || len(big) != 2 {
		t.Errorf("a limit of one more than a page: %v, %v", ids(big), err)
	}
	// A Go caller may ask for more than any page holds.
	for _, limit := range []int{math.MaxInt32, math.MaxInt32 + 1, math.MaxInt} {
		if all, err := s.ListPlants(context.Background(), plantstore.ListOptions{Limit: limit}); err != nil || len(all) != 2 {
			t.Errorf("a limit of %d: %v, %v", limit, ids(all), err)
		}
	}
}

func testUpdate(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	seed(t, s, 3)
	want := plantstore.Plant{ID: 3, Name: "renamed"}
	if err := s.UpdatePlant(ctx, want, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, 3); !got.SameContent(want) {
		t.Errorf("after update: %v, want %v (the tag is replaced too)", got, want)
	}
	if err := s.UpdatePlant(ctx, want, nil); err != nil {
		t.Errorf("an update to the same content: %v", err)
	}
	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 4, Name: "x"}, nil); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("update of a missing plant: %v, want %s", err, plantstore.ENOTFOUND)
	}
	if _, err := s.GetPlant(ctx, 4); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Error("update created a plant")
	}
}

func testDelete(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	seed(t, s, 3)
	if err := s.DeletePlant(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPlant(ctx, 3); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("deleted plant still found: %v", err)
	}
	if err := s.DeletePlant(ctx, 3, nil); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("second delete: %v, want %s", err, plantstore.ENOTFOUND)
	}
	again := plantstore.Plant{ID: 3, Name: "reborn"}
	if created, err := s.CreatePlant(ctx, again); err != nil || !created {
		t.Errorf("create after delete: %v, %v", created, err)
	}
}

// testPreconditions: a conditional update or delete sees the stored plant,
// and changes nothing when its precondition does not hold.
func testPreconditions(t *testing.T, s plantstore.Store) {
	ctx := context.Background()
	seed(t, s, 5)
	stored := mustGet(t, s, 5)
	var seen plantstore.Plant
	holds := func(p plantstore.Plant) bool { seen = p; return true }
	fails := func(plantstore.Plant) bool { return false }

	if err := s.UpdatePlant(ctx, plantstore.Plant{ID: 5, Name: "refused"}, fails); plantstore.ErrorCode(err) != plantstore.EPRECONDITION {
		t.Errorf("an update whose precondition fails: %v, want %s", err, plantstore.EPRECONDITION)
	}
	if err := s.DeletePlant(ctx, 5, fails); plantstore.ErrorCode(err) != plantstore.EPRECONDITION {
		t.Errorf("a delete whose precondition fails: %v, want %s", err, plantstore.EPRECONDITION)
	}
	if got := mustGet(t, s, 5); !got.SameContent(stored) {
		t.Errorf("refused writes changed the plant: %v, want %v", got, stored)
	}
	want := plantstore.Plant{ID: 5, Name: "conditionally renamed"}
	if err := s.UpdatePlant(ctx, want, holds); err != nil {
		t.Fatalf("an update whose precondition holds: %v", err)
	}
	if !seen.SameContent(stored) {
		t.Errorf("the precondition saw %v, want the stored %v", seen, stored)
	}
	if got := mustGet(t, s, 5); !got.SameContent(want) {
		t.Errorf("after the conditional update: %v, want %v", got, want)
	}
	if err := s.DeletePlant(ctx, 5, holds); err != nil {
		t.Fatalf("a delete whose precondition holds: %v", err)
	}
	if err := s.UpdatePlant(ctx, want, holds); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("a conditional update of a missing plant: %v, want %s", err, plantstore.ENOTFOUND)
	}
	if err := s.DeletePlant(ctx, 5, holds); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("a conditional delete of a missing plant: %v, want %s", err, plantstore.ENOTFOUND)
	}
}
