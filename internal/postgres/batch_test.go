package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
	"github.com/plantstore/plantstore/internal/postgres/pgtest"
	"github.com/plantstore/plantstore/internal/storetest"
)

// openWith opens a store with opts on a fresh database and returns it with
// the database's URL.
func openWith(t *testing.T, opts postgres.Options) (*postgres.DB, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, url
}

// The suite again, with every create a transaction of its own and every
// get a statement of its own.
func TestConformanceNoBatch(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openWith(t, postgres.Options{NoBatch: true, NoReadBatch: true})
		return db
	})
}

// batchSizes records what a store tells Options.ObserveBatch.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) observe(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, n)
}

func (b *batchSizes) get() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sizes)
}

// sentinelID is the plant holdCommitter creates.
const sentinelID = -1

// holdCommitter makes the store's committer (it must have one only) wait:
// another session locks the plants table against inserts, and a create of
// sentinelID waits for that lock. Creates made until release is called
// queue behind it, and go in one batch (of up to 256) once release lets
// the lock go.
func holdCommitter(t *testing.T, db *postgres.DB, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE plants IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.CreatePlant(ctx, plantstore.Plant{ID: sentinelID, Name: "sentinel"})
		done <- err
	}()
	waitForLockWaiters(t, connect(t, url), 1)
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("the sentinel create: %v", err)
		}
	}
}

// waitQueued waits until n creates wait for a committer.
func waitQueued(t *testing.T, db *postgres.DB, n int) {
	t.Helper()
	waitCount(t, "creates queued", func() int { return postgres.QueuedCreates(db) }, n)
}

// waitCount waits up to 5 s until count says n.
func waitCount(t *testing.T, what string, count func() int, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s, want %d", count(), what, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type answer struct {
	created bool
	err     error
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("error %s (%v)", plantstore.ErrorCode(a.err), a.err)
	}
	return fmt.Sprintf("created=%v", a.created)
}

func isReplay(a answer) bool   { return a.err == nil && !a.created }
func isCreated(a answer) bool  { return a.err == nil && a.created }
func isConflict(a answer) bool { return plantstore.ErrorCode(a.err) == plantstore.ECONFLICT }

func ptr[T any](v T) *T { return &v }

// storedPlants reads every plant of the store, by id.
func storedPlants(t *testing.T, db *postgres.DB) map[int64]plantstore.Plant {
	t.Helper()
	ps, err := db.ListPlants(context.Background(), plantstore.ListOptions{Limit: plantstore.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	m := map[int64]plantstore.Plant{}
	for _, p := range ps {
		m[p.ID] = p
	}
	return m
}

// checkDeliveries checks that sub has exactly one delivery for each plant
// of want, carrying the plant as stored, each with an event id of its own.
func checkDeliveries(t *testing.T, db *postgres.DB, sub plantstore.Subscriber, want map[int64]plantstore.Plant) {
	t.Helper()
	ds, err := db.DueDeliveries(context.Background(), sub.ID, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	events := map[string]bool{}
	got := map[int64]bool{}
	for _, d := range ds {
		if got[d.Plant.ID] {
			t.Errorf("plant %d announced twice", d.Plant.ID)
		}
		got[d.Plant.ID] = true
		if events[d.EventID] {
			t.Errorf("event id %q used twice", d.EventID)
		}
		events[d.EventID] = true
		if w, ok := want[d.Plant.ID]; !ok {
			t.Errorf("plant %d announced, but this test did not create it", d.Plant.ID)
		} else if !d.Plant.SameContent(w) {
			t.Errorf("delivery of %v, want %v", d.Plant, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d plants announced, want %d", len(got), len(want))
	}
}

// Many concurrent creates: new ids, replays and conflicts of stored
// plants, and ids created twice at once with the same or other content.
// Each gets the answer of its own create, whatever else is in its batch:
// "one batch" holds all of them in one; "free" lets the committers batch
// as they come.
func TestBatchedCreatesMixed(t *testing.T) {
	for _, mode := range []string{"one batch", "free"} {
		t.Run(mode, func(t *testing.T) {
			var sizes batchSizes
			opts := postgres.Options{ObserveBatch: sizes.observe}
			if mode == "one batch" {
				opts.Committers = 1
			}
			db, url := openWith(t, opts)
			ctx := context.Background()
			// Stored before: 1-10 untagged, 11-30 tagged "t".
			old := map[int64]plantstore.Plant{}
			for id := int64(1); id <= 30; id++ {
				p := plantstore.Plant{ID: id, Name: fmt.Sprintf("old %d", id)}
				if id > 10 {
					p.Tag = ptr("t")
				}
				old[id] = p
				if _, err := db.CreatePlant(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			sub, err := db.AddSubscriber(ctx, "https://a.example/hook", "secret")
			if err != nil {
				t.Fatal(err)
			}

			type group struct {
				name   string
				plants []plantstore.Plant
				// check judges the answers to plants, in order; stored is
				// what the store holds under their id afterwards.
				check func(answers []answer, stored plantstore.Plant) error
			}
			var groups []group
			one := func(name string, p plantstore.Plant, ok func(answer) bool) {
				groups = append(groups, group{name, []plantstore.Plant{p}, func(as []answer, stored plantstore.Plant) error {
					if !ok(as[0]) {
						return fmt.Errorf("answer %v", as[0])
					}
					return nil
				}})
			}
			// Two creates of one id at once: exactly one is created, and
			// the other is a replay when the contents are the same, else a
			// conflict; the winner's content is stored.
			pair := func(name string, a, b plantstore.Plant) {
				groups = append(groups, group{name, []plantstore.Plant{a, b}, func(as []answer, stored plantstore.Plant) error {
					same := a.SameContent(b)
					for w, l := range []int{1, 0} {
						if isCreated(as[w]) && (same && isReplay(as[l]) || !same && isConflict(as[l])) {
							if want := []plantstore.Plant{a, b}[w]; !stored.SameContent(want) {
								return fmt.Errorf("stored %v, want the winner %v", stored, want)
							}
							return nil
						}
					}
					return fmt.Errorf("answers %v", as)
				}})
			}
			for id := int64(100); id < 140; id++ {
				one("new", plantstore.Plant{ID: id, Name: "new"}, isCreated)
			}
			for id := int64(1); id <= 10; id++ {
				one("replay", old[id], isReplay)
			}
			for id := int64(11); id <= 15; id++ {
				one("conflict, other tag", plantstore.Plant{ID: id, Name: old[id].Name}, isConflict)
			}
			for id := int64(16); id <= 20; id++ {
				one("conflict, other name", plantstore.Plant{ID: id, Name: "other", Tag: ptr("t")}, isConflict)
			}
			for id := int64(21); id <= 25; id++ {
				groups = append(groups, group{"replay, conflict, replay of a stored plant",
					[]plantstore.Plant{old[id], {ID: id, Name: "other"}, old[id]},
					func(as []answer, _ plantstore.Plant) error {
						if !isReplay(as[0]) || !isConflict(as[1]) || !isReplay(as[2]) {
							return fmt.Errorf("answers %v", as)
						}
						return nil
					}})
			}
			for id := int64(200); id < 210; id++ {
				p := plantstore.Plant{ID: id, Name: "twice", Tag: ptr("same")}
				pair("a new id twice, same content", p, p)
			}
			for id := int64(300); id < 310; id++ {
				pair("a new id twice, other names", plantstore.Plant{ID: id, Name: "a"}, plantstore.Plant{ID: id, Name: "b"})
			}
			for id := int64(400); id < 405; id++ {
				pair("a new id twice, empty tag and none", plantstore.Plant{ID: id, Name: "x", Tag: ptr("")}, plantstore.Plant{ID: id, Name: "x"})
			}
			total := 0
			for _, g := range groups {
				total += len(g.plants)
			}

			var release func()
			if mode == "one batch" {
				release = holdCommitter(t, db, url)
			}
			answers := make([][]answer, len(groups))
			var wg sync.WaitGroup
			start := make(chan struct{})
			for gi, g := range groups {
				answers[gi] = make([]answer, len(g.plants))
				for pi, p := range g.plants {
					wg.Go(func() {
						<-start
						created, err := db.CreatePlant(ctx, p)
						answers[gi][pi] = answer{created, err}
					})
				}
			}
			close(start)
			if release != nil {
				waitQueued(t, db, total)
				release()
			}
			wg.Wait()

			stored := storedPlants(t, db)
			want := map[int64]plantstore.Plant{}
			created := map[int64]plantstore.Plant{}
			for id, p := range old {
				want[id] = p
			}
			for gi, g := range groups {
				id := g.plants[0].ID
				if err := g.check(answers[gi], stored[id]); err != nil {
					t.Errorf("%s, plant %d: %v", g.name, id, err)
				}
				for pi, a := range answers[gi] {
					if a.created {
						want[id] = g.plants[pi]
						created[id] = g.plants[pi]
					}
				}
			}
			if release != nil {
				want[sentinelID] = plantstore.Plant{ID: sentinelID, Name: "sentinel"}
				created[sentinelID] = want[sentinelID]
			}
			if len(stored) != len(want) {
				t.Errorf("%d plants stored, want %d", len(stored), len(want))
			}
			for id, w := range want {
				if s, ok := stored[id]; !ok || !s.SameContent(w) {
					t.Errorf("plant %d stored as %v (found %v), want %v", id, s, ok, w)
				}
			}
			checkDeliveries(t, db, sub, created)
			if release != nil {
				if got := sizes.get(); slices.Max(got) != total {
					t.Errorf("batch sizes %v, want one of %d", got, total)
				}
			}
			t.Logf("batch sizes: %v", sizes.get())
		})
	}
}

// enqueueInOrder sends the creates of plants to a held committer one after
// the other, so that they are in its next batch in this order, and returns
// a function that waits for their answers.
func enqueueInOrder(t *testing.T, db *postgres.DB, plants []plantstore.Plant) (wait func() []answer) {
	t.Helper()
	answers := make([]answer, len(plants))
	var wg sync.WaitGroup
	for i, p := range plants {
		wg.Go(func() {
			created, err := db.CreatePlant(context.Background(), p)
			answers[i] = answer{created, err}
		})
		waitQueued(t, db, i+1)
	}
	return func() []answer {
		wg.Wait()
		return answers
	}
}

// A batch whose insert finds ids taken, which are deleted before it can
// read them: those ids are free again, and the batch inserts them in a
// second round, as creates of free ids.
func TestBatchWithConcurrentDelete(t *testing.T) {
	var sizes batchSizes
	db, url := openWith(t, postgres.Options{Committers: 1, ObserveBatch: sizes.observe})
	ctx := context.Background()
	for _, p := range []plantstore.Plant{{ID: 1, Name: "Fern"}, {ID: 2, Name: "Moss"}} {
		if _, err := db.CreatePlant(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := db.AddSubscriber(ctx, "https://a.example/hook", "secret")
	if err != nil {
		t.Fatal(err)
	}
	deleter := connect(t, url)
	var rounds [][]int64
	postgres.SetAfterInsert(db, func(candidates []plantstore.Plant) {
		var ids []int64
		for _, p := range candidates {
			ids = append(ids, p.ID)
		}
		slices.Sort(ids)
		rounds = append(rounds, ids)
		if slices.Contains(ids, 3) { // the batch under test, first round
			if _, err := deleter.Exec(ctx, `DELETE FROM plants WHERE id IN (1, 2)`); err != nil {
				t.Error(err)
			}
		}
	})
	release := holdCommitter(t, db, url)
	plants := []plantstore.Plant{
		{ID: 1, Name: "Fern"},  // a replay, but 1 is deleted: created
		{ID: 2, Name: "Other"}, // a conflict, but 2 is deleted: created
		{ID: 1, Name: "Fern"},  // a replay of the first
		{ID: 3, Name: "Aloe"},  // new
		{ID: 2, Name: "Moss"},  // a conflict with the second
	}
	wait := enqueueInOrder(t, db, plants)
	release()
	got := wait()
	want := []answer{{created: true}, {created: true}, {}, {created: true}, {err: plantstore.Errorf(plantstore.ECONFLICT, "")}}
	for i := range plants {
		if got[i].created != want[i].created || plantstore.ErrorCode(got[i].err) != plantstore.ErrorCode(want[i].err) {
			t.Errorf("create %d (%v): %v, want %v", i, plants[i], got[i], want[i])
		}
	}
	if fmt.Sprint(rounds) != "[[-1] [1 2 3] [1 2]]" {
		t.Errorf("inserts of ids %v, want [[-1] [1 2 3] [1 2]]: the sentinel, the batch, then the ids deleted", rounds)
	}
	if got := sizes.get(); fmt.Sprint(got[len(got)-2:]) != "[1 5]" {
		t.Errorf("batch sizes %v, want [1 5] last: the sentinel, the batch", got)
	}
	stored := storedPlants(t, db)
	wantStored := map[int64]plantstore.Plant{sentinelID: {ID: sentinelID, Name: "sentinel"}, 1: plants[0], 2: plants[1], 3: plants[3]}
	if len(stored) != len(wantStored) {
		t.Errorf("stored %v, want %v", stored, wantStored)
	}
	for id, w := range wantStored {
		if !stored[id].SameContent(w) {
			t.Errorf("plant %d stored as %v, want %v", id, stored[id], w)
		}
	}
	checkDeliveries(t, db, sub, wantStored)
}

// A create the server refuses fails alone: the batch it was in is retried
// one create at a time, and its neighbours are stored.
func TestBatchFaultIsNotTheNeighbours(t *testing.T) {
	var sizes batchSizes
	db, url := openWith(t, postgres.Options{Committers: 1, ObserveBatch: sizes.observe})
	release := holdCommitter(t, db, url)
	// Not valid UTF-8: the server refuses the text (a caller that skipped
	// validation, or a bug).
	plants := []plantstore.Plant{{ID: 1, Name: "Fern"}, {ID: 2, Name: "bad \xff"}, {ID: 3, Name: "Aloe"}}
	wait := enqueueInOrder(t, db, plants)
	release()
	got := wait()
	if !isCreated(got[0]) || !isCreated(got[2]) {
		t.Errorf("the neighbours: %v and %v, want both created", got[0], got[2])
	}
	if code := plantstore.ErrorCode(got[1].err); code != plantstore.EINTERNAL {
		t.Errorf("the bad create: %v, want %s", got[1], plantstore.EINTERNAL)
	}
	if fmt.Sprint(sizes.get()) != "[1 3]" {
		t.Errorf("batch sizes %v, want [1 3]", sizes.get())
	}
	stored := storedPlants(t, db)
	if len(stored) != 3 || !stored[1].SameContent(plants[0]) || !stored[3].SameContent(plants[2]) {
		t.Errorf("stored %v, want the sentinel, 1 and 3", stored)
	}
}

// A caller whose context ends while its create waits is answered at once;
// when every caller of a batch has gone, the server is told to stop it.
func TestCreateCancelledWhileQueued(t *testing.T) {
	db, url := openWith(t, postgres.Options{Committers: 1})
	release := holdCommitter(t, db, url)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "Fern"})
	if code := plantstore.ErrorCode(err); code != plantstore.EUNAVAILABLE {
		t.Errorf("a create whose deadline passed in the queue: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("a create with a 100 ms deadline took %v", elapsed)
	}
	release()
	// Its caller gone, the committer leaves it out.
	if _, err := db.GetPlant(context.Background(), 1); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("plant 1, whose caller gave up before its batch began: %v, want %s", err, plantstore.ENOTFOUND)
	}
	// And a retry is a create like any other.
	if created, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "Fern"}); err != nil || !created {
		t.Errorf("the retry: %v, %v", created, err)
	}
}

// Close commits what is queued, then refuses creates.
func TestCloseCommitsQueuedCreates(t *testing.T) {
	db, url := openWith(t, postgres.Options{Committers: 1})
	release := holdCommitter(t, db, url)
	var plants []plantstore.Plant
	for id := range int64(20) {
		plants = append(plants, plantstore.Plant{ID: id + 1, Name: "queued"})
	}
	wait := enqueueInOrder(t, db, plants)
	// Close refuses new creates at once, while it waits for the queue.
	closed := closeUntilRefused(t, db, "create", func(ctx context.Context) error {
		_, err := db.CreatePlant(ctx, plantstore.Plant{ID: 100, Name: "late"})
		return err
	})
	release()
	for i, a := range wait() {
		if !isCreated(a) {
			t.Errorf("queued create %d: %v, want created", i+1, a)
		}
	}
	<-closed
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 101, Name: "after"}); !isClosed(err) {
		t.Errorf("a create after Close: %v, want %s \"the store is closed\"", err, plantstore.EUNAVAILABLE)
	}
	var n int
	if err := connect(t, url).QueryRow(context.Background(), `SELECT count(*) FROM plants WHERE id BETWEEN 1 AND 20`).Scan(&n); err != nil || n != 20 {
		t.Errorf("%d queued plants stored (%v), want 20", n, err)
	}
}

// closeUntilRefused closes db in the background and waits until try, with
// a short deadline, is refused as after Close; what comes before Close
// begins queues, and gives up. The channel closes when Close returns.
func closeUntilRefused(t *testing.T, db *postgres.DB, what string, try func(ctx context.Context) error) (closed chan struct{}) {
	t.Helper()
	closed = make(chan struct{})
	go func() {
		db.Close()
		close(closed)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := try(ctx)
		cancel()
		if isClosed(err) {
			return closed
		}
		if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
			t.Fatalf("a %s while closing: %v, want %s", what, err, plantstore.EUNAVAILABLE)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a %s still accepted 5 s after Close began", what)
		}
	}
}

// isClosed reports whether err says the store is closed.
func isClosed(err error) bool {
	perr, ok := errors.AsType[*plantstore.Error](err)
	return ok && perr.Code == plantstore.EUNAVAILABLE && perr.Message == "the store is closed"
}

// Creates racing Close: each is committed or refused as unavailable, and
// none is lost once answered (the race detector watches the channel).
func TestCloseWhileCreating(t *testing.T) {
	db, url := openWith(t, postgres.Options{})
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var committed []int64
	for range 32 {
		wg.Go(func() {
			for {
				id := next.Add(1)
				created, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "p"})
				if err != nil {
					if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
						t.Errorf("create %d: %v", id, err)
					}
					return
				}
				if !created {
					t.Errorf("create %d: a replay", id)
				}
				mu.Lock()
				committed = append(committed, id)
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	db.Close()
	wg.Wait()
	var n int
	if err := connect(t, url).QueryRow(context.Background(), `SELECT count(*) FROM plants WHERE id = ANY($1)`, committed).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(committed) || n == 0 {
		t.Errorf("%d of %d acknowledged creates stored", n, len(committed))
	}
}

// Creates and deletes of a few ids, all at once, for a while: every create
// is answered as created, a replay, a conflict, or (when its id keeps
// being deleted under it) unavailable; nothing fails otherwise, and no
// batch deadlocks with another.
func TestBatchedCreatesRaceDeletes(t *testing.T) {
	db, _ := openWith(t, postgres.Options{Committers: 2})
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var creates, unavailable atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := plantstore.Plant{ID: int64(i % 8), Name: fmt.Sprint("content ", (g+i)%2)}
				_, err := db.CreatePlant(ctx, p)
				creates.Add(1)
				switch plantstore.ErrorCode(err) {
				case "", plantstore.ECONFLICT:
				case plantstore.EUNAVAILABLE:
					unavailable.Add(1)
				default:
					t.Errorf("CreatePlant(%v): %v", p, err)
				}
			}
		})
	}
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := db.DeletePlant(ctx, int64((g+i)%8), nil); err != nil && plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
					t.Errorf("DeletePlant: %v", err)
				}
			}
		})
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d creates, %d unavailable", creates.Load(), unavailable.Load())
	if unavailable.Load() > creates.Load()/10 {
		t.Errorf("%d of %d creates unavailable", unavailable.Load(), creates.Load())
	}
}
