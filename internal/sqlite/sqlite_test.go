package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/storetest"
)

func openTest(t testing.TB, opts Options) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plants.db")
	db, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t, Options{})
		return db
	})
}

// As serve opens it: with the plant cache.
func TestConformanceSoleServer(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t, Options{SoleServer: true})
		return db
	})
}

func TestSoleServerLock(t *testing.T) {
	db, path := openTest(t, Options{SoleServer: true})
	if _, err := Open(context.Background(), path, Options{SoleServer: true}); err == nil || !strings.Contains(err.Error(), "another plantstore serve") {
		t.Fatalf("a second server on the file: %v, want a refusal", err)
	}
	cli, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatalf("the token CLI beside a server: %v", err)
	}
	cli.Close()
	db.Close()
	again, err := Open(context.Background(), path, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("a server after the first closed: %v", err)
	}
	again.Close()
}

// Reads racing writes never see a value older than the last acknowledged
// write once it is acknowledged.
func TestCacheNeverServesAnOverwrittenPlant(t *testing.T) {
	db, _ := openTest(t, Options{SoleServer: true})
	ctx := context.Background()
	if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: 1, Name: "v0"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					db.GetPlant(ctx, 1)
				}
			}
		})
	}
	for v := 1; v <= 300; v++ {
		name := fmt.Sprint("v", v)
		if err := db.UpdatePlant(ctx, plantstore.Plant{ID: 1, Name: name}, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := db.GetPlant(ctx, 1); err != nil || got.Name != name {
			t.Fatalf("after update %d: %v, %v", v, got, err)
		}
	}
	if err := db.DeletePlant(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetPlant(ctx, 1); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("after delete: %v", err)
	}
	close(stop)
	readers.Wait()
}

// One transaction per create must behave the same: it is the benchmarks'
// baseline.
func TestConformanceWithoutGroupCommit(t *testing.T) {
	storetest.Run(t, func(t *testing.T) plantstore.Store {
		db, _ := openTest(t, Options{NoGroupCommit: true})
		return db
	})
}

// When the store fills under concurrent creates, batches fail part-way;
// every create must still be answered truly: stored when it succeeded,
// absent when it failed.
func TestConcurrentCreatesUntilFull(t *testing.T) {
	db, _ := openTest(t, Options{MaxBytes: 256 << 10})
	name := strings.Repeat("y", 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[int64]error{}
	for w := range 32 {
		wg.Go(func() {
			for i := int64(0); ; i++ {
				id := int64(w)<<32 | i
				_, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: name})
				mu.Lock()
				results[id] = err
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	stored, refused := 0, 0
	for id, err := range results {
		_, getErr := db.GetPlant(context.Background(), id)
		switch {
		case err == nil && getErr == nil:
			stored++
		case plantstore.ErrorCode(err) == plantstore.EINSUFFICIENT && plantstore.ErrorCode(getErr) == plantstore.ENOTFOUND:
			refused++
			// The log says which to raise: the cap, not the disk.
			if !strings.Contains(err.Error(), "the file reached its cap, --max-db-bytes") {
				t.Errorf("plant %d refused with %q, which does not name the cap", id, err)
			}
		default:
			t.Errorf("plant %d: create said %v, the store says %v", id, err, getErr)
		}
	}
	if stored == 0 || refused != 32 {
		t.Errorf("%d stored, %d refused; want some stored and each of 32 writers refused once", stored, refused)
	}
}

// A full store can be emptied: deletes, batched or alone, go past the cap
// by at most deleteHeadroom, and creates after them stay within it. Small
// plants too, whose delete events outweigh them: with a fixed headroom of
// 256 KiB, some 8,000 deletes used it up and the rest got 507.
func TestDeletesEmptyAFullStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		plant    func(id int64) string
	}{
		{"large plants", 256 << 10, func(int64) string { return strings.Repeat("z", 200) }},
		{"small plants", 2 << 20, func(id int64) string { return fmt.Sprint(id % 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) { deletesEmptyAFullStore(t, tc.maxBytes, tc.plant) })
	}
}

func deletesEmptyAFullStore(t *testing.T, maxBytes int64, name func(int64) string) {
	db, path := openTest(t, Options{MaxBytes: maxBytes})
	ctx := context.Background()
	// Filled by 16 writers at once, so that creates share batches.
	var mu sync.Mutex
	var stored []int64
	var next atomic.Int64
	var fill sync.WaitGroup
	for range 16 {
		fill.Go(func() {
			for {
				id := next.Add(1)
				if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: name(id)}); err != nil {
					if plantstore.ErrorCode(err) != plantstore.EINSUFFICIENT {
						t.Errorf("create %d: %v", id, err)
					}
					return
				}
				mu.Lock()
				stored = append(stored, id)
				mu.Unlock()
			}
		})
	}
	fill.Wait()
	slices.Sort(stored)
	pages := func() int64 {
		t.Helper()
		r, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var n int64
		if err := r.QueryRow(`PRAGMA page_count`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	capPages := maxBytes / 4096
	limit := capPages + db.deleteHeadroom()
	// One delete alone, then the others from 16 writers at once, so that
	// some share a batch.
	if err := db.DeletePlant(ctx, stored[0], nil); err != nil {
		t.Fatalf("the first delete on a full store: %v", err)
	}
	afterOne := pages()
	if afterOne > limit {
		t.Errorf("%d pages after one delete; the cap is %d, with the headroom %d", afterOne, capPages, limit)
	}
	// Creates get no more room than the delete took.
	for id := int64(1 << 40); ; id++ {
		if _, err := db.CreatePlant(ctx, plantstore.Plant{ID: id, Name: name(id)}); err != nil {
			break
		}
		stored = append(stored, id)
	}
	if n := pages(); n > afterOne {
		t.Errorf("creates after the delete grew the file to %d pages, from %d (the cap: %d)", n, afterOne, capPages)
	}
	ids := make(chan int64)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for id := range ids {
				if err := db.DeletePlant(ctx, id, nil); err != nil && failed.Add(1) <= 3 {
					t.Errorf("delete %d on a full store: %v", id, err)
				}
			}
		})
	}
	for _, id := range stored[1:] {
		ids <- id
	}
	close(ids)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d deletes refused", n, len(stored)-1)
	}
	if n := pages(); n > limit {
		t.Errorf("%d pages after the deletes; at most %d", n, limit)
	}
	page, err := db.ListPlants(ctx, plantstore.ListOptions{Limit: 10})
	if err != nil || len(page) != 0 {
		t.Errorf("after deleting every plant (%d): %v, %v", len(stored), page, err)
	}
}

// Close commits the creates already queued: with the writer held up by
// another process's lock, creates queue; Close, then the lock's release,
// must see every one of them stored and acknowledged.
func TestCloseCommitsQueuedCreates(t *testing.T) {
	db, path := openTest(t, Options{BusyTimeout: 20 * time.Second})
	release := lockFromOutside(t, path)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	create := func(i int) {
		wg.Go(func() {
			_, errs[i] = db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i), Name: "queued"})
		})
	}
	// The first create goes to the writer, which blocks on the lock;
	// the others then queue behind it.
	create(0)
	deadline := time.Now().Add(10 * time.Second)
	for len(db.writes) > 0 || time.Since(deadline.Add(-10*time.Second)) < 200*time.Millisecond {
		time.Sleep(5 * time.Millisecond)
	}
	for i := 1; i < n; i++ {
		create(i)
	}
	for len(db.writes) < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d creates queued", len(db.writes))
		}
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan error)
	go func() { closed <- db.Close() }()
	time.Sleep(50 * time.Millisecond)
	release()
	wg.Wait()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for i, err := range errs {
		if err != nil {
			t.Errorf("queued create %d: %v", i, err)
		}
		if _, err := again.GetPlant(context.Background(), int64(i)); err != nil {
			t.Errorf("queued create %d is not stored: %v", i, err)
		}
	}
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 999, Name: "late"}); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("a create after Close: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
}

// TestBatchWithTakenIDs commits one batch holding new plants, a replay, a
// conflict and one id twice, as the committer would under load: the
// multi-row insert of a chunk with a taken id fails, and that chunk is
// sorted out one create at a time, while the other chunks stay inserted.
// 68 creates: a chunk of 64 new plants (exactRows), then a chunk of 4
// with every kind of taken id.
func TestBatchWithTakenIDs(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	tag := "t"
	for _, p := range []plantstore.Plant{{ID: 2, Name: "replayed"}, {ID: 3, Name: "stored"}} {
		if _, err := db.CreatePlant(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var plants []plantstore.Plant
	for id := int64(100); id < 100+exactRows; id++ {
		plants = append(plants, plantstore.Plant{ID: id, Name: "new", Tag: &tag})
	}
	plants = append(plants,
		plantstore.Plant{ID: 2, Name: "replayed"}, plantstore.Plant{ID: 3, Name: "other content"},
		plantstore.Plant{ID: 20, Name: "twice"}, plantstore.Plant{ID: 20, Name: "twice, differently"})
	batch := make([]*writeRequest, len(plants))
	for i, p := range plants {
		batch[i] = &writeRequest{kind: writeCreate, plant: p}
	}
	results := commitAsWriter(db, batch)
	for i, p := range plants {
		r := results[i]
		switch {
		case p.ID == 2 && (r.err != nil || r.created):
			t.Errorf("replay of 2: created=%v err=%v, want false, nil", r.created, r.err)
		case p.ID == 3 && plantstore.ErrorCode(r.err) != plantstore.ECONFLICT:
			t.Errorf("create of 3 with other content: err=%v, want ECONFLICT", r.err)
		case p.ID == 20 && i == exactRows+2 && (r.err != nil || !r.created):
			t.Errorf("first create of 20: created=%v err=%v, want true, nil", r.created, r.err)
		case p.ID == 20 && i == exactRows+3 && plantstore.ErrorCode(r.err) != plantstore.ECONFLICT:
			t.Errorf("second create of 20 with other content: err=%v, want ECONFLICT", r.err)
		case p.ID >= 100 && (r.err != nil || !r.created):
			t.Errorf("create of %d: created=%v err=%v, want true, nil", p.ID, r.created, r.err)
		}
	}
	for _, want := range append(plants[:exactRows+1:exactRows+1], plantstore.Plant{ID: 3, Name: "stored"}, plantstore.Plant{ID: 20, Name: "twice"}) {
		got, err := db.GetPlant(ctx, want.ID)
		if err != nil || !got.SameContent(want) {
			t.Errorf("GetPlant(%d) = %v, %v; want %v", want.ID, got, err, want)
		}
	}
}

// commitAsWriter commits batch in one transaction as the writer does, and
// returns each write's result once the batch is durable.
func commitAsWriter(db *DB, batch []*writeRequest) []writeResult {
	job := db.commit(batch)
	defer db.releaseWriteConn()
	return db.finish(job, db.makeDurable(job))
}

func TestObserveBatch(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	db, _ := openTest(t, Options{ObserveBatch: func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: int64(i), Name: "p"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != 50 || len(sizes) == 0 {
		t.Errorf("batches %v: %d creates observed, want 50", sizes, total)
	}
}

// TestBatchMixesWrites commits creates, updates and deletes in one
// transaction, as the writer does under load: each gets its own answer,
// and the cache forgets what changed.
func TestBatchMixesWrites(t *testing.T) {
	db, _ := openTest(t, Options{SoleServer: true})
	ctx := context.Background()
	for _, p := range []plantstore.Plant{{ID: 1, Name: "to update"}, {ID: 2, Name: "to delete"}} {
		if _, err := db.CreatePlant(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := db.GetPlant(ctx, p.ID); err != nil { // now cached
			t.Fatal(err)
		}
	}
	tag := "new"
	batch := []*writeRequest{
		{kind: writeUpdate, plant: plantstore.Plant{ID: 1, Name: "updated", Tag: &tag}},
		{kind: writeCreate, plant: plantstore.Plant{ID: 3, Name: "created"}},
		{kind: writeDelete, plant: plantstore.Plant{ID: 2}},
		{kind: writeUpdate, plant: plantstore.Plant{ID: 9, Name: "nobody"}},
		{kind: writeDelete, plant: plantstore.Plant{ID: 9}},
		{kind: writeCreate, plant: plantstore.Plant{ID: 1, Name: "to update"}}, // runs before the update
	}
	results := commitAsWriter(db, batch)
	for i, want := range []struct {
		created bool
		code    string
	}{{false, ""}, {true, ""}, {false, ""}, {false, plantstore.ENOTFOUND}, {false, plantstore.ENOTFOUND}, {false, ""}} {
		if results[i].created != want.created || plantstore.ErrorCode(results[i].err) != want.code {
			t.Errorf("write %d: created=%v err=%v; want created=%v code %q", i, results[i].created, results[i].err, want.created, want.code)
		}
	}
	if p, err := db.GetPlant(ctx, 1); err != nil || !p.SameContent(plantstore.Plant{ID: 1, Name: "updated", Tag: &tag}) {
		t.Errorf("plant 1 after the batch: %v, %v", p, err)
	}
	if _, err := db.GetPlant(ctx, 2); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
		t.Errorf("plant 2 after its delete: %v", err)
	}
}

// TestBatchesStayBatchedOnOneCore is the regression test of the collapse
// at GOMAXPROCS=1: the writer woke on the first create and committed it
// alone, so every create paid a commit of its own. With 64 creators on
// one P, batches must hold many creates.
func TestBatchesStayBatchedOnOneCore(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var mu sync.Mutex
	var batches, creates int
	db, _ := openTest(t, Options{ObserveBatch: func(n int) { mu.Lock(); batches++; creates += n; mu.Unlock() }})
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 64 {
		wg.Go(func() {
			for id := next.Add(1); id <= 6400; id = next.Add(1) {
				if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: "p"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if creates != 6400 {
		t.Fatalf("%d creates observed, want 6400", creates)
	}
	if mean := float64(creates) / float64(batches); mean < 48 {
		t.Errorf("%d creates in %d batches: %.1f a batch on one P, want at least 48", creates, batches, mean)
	} else {
		t.Logf("%d creates in %d batches: %.1f a batch", creates, batches, mean)
	}
}

// A store named through a symbolic link is the file the link names: a
// second server on it, by either name, is refused, since the lock is the
// real file's.
func TestSoleServerLockThroughALink(t *testing.T) {
	db, path := openTest(t, Options{SoleServer: true})
	defer db.Close()
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if second, err := Open(context.Background(), link, Options{SoleServer: true}); err == nil || !strings.Contains(err.Error(), "another plantstore serve") {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second server on a link to the served file: %v, want a refusal", err)
	}
	if _, err := os.Lstat(link + ".lock"); err == nil {
		t.Error("a lock file was made beside the link")
	}
}

// A hard link is another name for the store's file, with a lock and a log
// of its own: a store with one is refused, under either name, by servers
// and commands alike.
func TestStoreWithAHardLinkRefused(t *testing.T) {
	db, path := openTest(t, Options{SoleServer: true})
	db.Close()
	hard := filepath.Join(filepath.Dir(path), "hard.db")
	if err := os.Link(path, hard); err != nil {
		t.Skip("no hard links here:", err)
	}
	for _, name := range []string{hard, path} {
		for _, opts := range []Options{{SoleServer: true}, {}} {
			if second, err := Open(context.Background(), name, opts); err == nil || !strings.Contains(err.Error(), "2 hard links") {
				if second != nil {
					second.Close()
				}
				t.Errorf("open %s (%+v) with a hard link: %v, want a refusal", filepath.Base(name), opts, err)
			}
		}
	}
	if err := os.Remove(hard); err != nil {
		t.Fatal(err)
	}
	// A restore cut short between its link and its removal: the message
	// names the name left behind.
	leftover := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-123")
	if err := os.Link(path, leftover); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), path, Options{}); err == nil || !strings.Contains(err.Error(), leftover) {
		t.Errorf("with a restore's leftover link: %v, want it named", err)
	}
	if err := os.Remove(leftover); err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), path, Options{SoleServer: true})
	if err != nil {
		t.Fatalf("once the link is gone: %v", err)
	}
	again.Close()
}
