package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/plantstore/plantstore"
	"github.com/plantstore/plantstore/internal/postgres"
)

// holdReaders makes the store's readers wait: another session locks the
// plants table against reads, and gets of absent plants wait for that
// lock, one a reader. Gets made until release is called queue behind
// them, and go in one batch (of up to 256) once release lets the lock go.
func holdReaders(t *testing.T, db *postgres.DB, url string, readers int) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx := lockPlants(t, url)
	done := make(chan error, readers)
	for i := range readers {
		go func() {
			_, err := db.GetPlant(ctx, sentinelID+int64(i))
			done <- err
		}()
		// One at a time, so that each reader takes one.
		waitForLockWaiters(t, connect(t, url), i+1)
	}
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for range readers {
			if err := <-done; plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
				t.Fatalf("a sentinel get: %v, want %s", err, plantstore.ENOTFOUND)
			}
		}
	}
}

// lockPlants locks the plants table against reads, in a transaction of
// another session, until the test commits it or ends.
func lockPlants(t *testing.T, url string) pgx.Tx {
	t.Helper()
	tx, err := connect(t, url).Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `LOCK TABLE plants IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return tx
}

// readBatch is how many gets and pages a batch of reads held.
type readBatch struct{ gets, pages int }

// observeReadBatches records db's batches of reads; batches returns those
// read so far.
func observeReadBatches(db *postgres.DB) (batches func() []readBatch) {
	var mu sync.Mutex
	var seen []readBatch
	postgres.SetObserveReadBatch(db, func(gets, pages int) {
		mu.Lock()
		seen = append(seen, readBatch{gets, pages})
		mu.Unlock()
	})
	return func() []readBatch {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// waitQueuedReads waits until n gets and pages wait for a reader.
func waitQueuedReads(t *testing.T, db *postgres.DB, n int) {
	t.Helper()
	waitCount(t, "reads queued", func() int { return postgres.QueuedReads(db) }, n)
}

// Gets and pages queued together are read in one batch. Each get has its
// own plant, or ENOTFOUND; ids asked for twice in a batch are answered
// twice. Each page has its own plants, of its tag if it has one, in
// order, from its first id, up to its limit; a page past the last plant
// is empty.
func TestBatchedReads(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	batches := observeReadBatches(db)
	for id := int64(1); id <= 40; id++ {
		p := plantstore.Plant{ID: id, Name: fmt.Sprintf("plant %d", id)}
		if id%2 == 0 {
			p.Tag = ptr(fmt.Sprintf("tag %d", id))
		}
		if _, err := db.CreatePlant(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	release := holdReaders(t, db, url, 1)
	type got struct {
		p   plantstore.Plant
		err error
	}
	const gets = 60 // ids 1 to 50 and 1 to 10 again: 41 to 50 are absent
	answers := make([]chan got, gets)
	for i := range gets {
		answers[i] = make(chan got, 1)
		go func() {
			p, err := db.GetPlant(context.Background(), int64(i%50+1))
			answers[i] <- got{p, err}
		}()
	}
	type page struct {
		after       *int64
		limit       int
		first, last int64 // the ids wanted; none when first is 0
		tag         string
	}
	pages := []page{
		{nil, 5, 1, 5, ""},
		{ptr[int64](1), 1, 2, 2, ""},
		{ptr[int64](1), 1, 2, 2, ""}, // the same page twice
		{ptr[int64](20), 100, 21, 40, ""},
		{ptr[int64](36), 3, 37, 39, ""},
		{ptr[int64](40), 10, 0, 0, ""},
		{ptr[int64](1000), 10, 0, 0, ""},
		{nil, 1000, 1, 40, ""},
		{nil, 10, 8, 8, "tag 8"},
		{ptr[int64](7), 10, 8, 8, "tag 8"},
		{ptr[int64](8), 10, 0, 0, "tag 8"},
		{nil, 10, 0, 0, "no such tag"},
		{nil, 10, 12, 12, "tag 12"},
	}
	pageAnswers := make([]chan []plantstore.Plant, len(pages))
	for i, pg := range pages {
		pageAnswers[i] = make(chan []plantstore.Plant, 1)
		go func() {
			opts := plantstore.ListOptions{After: pg.after, Limit: pg.limit}
			if pg.tag != "" {
				opts.Tag = &pg.tag
			}
			plants, err := db.ListPlants(context.Background(), opts)
			if err != nil {
				t.Errorf("page %+v: %v", pg, err)
			}
			pageAnswers[i] <- plants
		}()
	}
	waitQueuedReads(t, db, gets+len(pages))
	release()
	for i, c := range answers {
		id := int64(i%50 + 1)
		a := <-c
		switch {
		case id > 40:
			if perr, ok := errors.AsType[*plantstore.Error](a.err); !ok || perr.Code != plantstore.ENOTFOUND || perr.Message != fmt.Sprintf("plant %d not found", id) {
				t.Errorf("get %d: %+v, %v; want %s", id, a.p, a.err, plantstore.ENOTFOUND)
			}
		case a.err != nil || a.p.ID != id || a.p.Name != fmt.Sprintf("plant %d", id) || (id%2 == 0) != (a.p.Tag != nil):
			t.Errorf("get %d: %+v, %v", id, a.p, a.err)
		case a.p.Tag != nil && *a.p.Tag != fmt.Sprintf("tag %d", id):
			t.Errorf("get %d: tag %q", id, *a.p.Tag)
		}
	}
	for i, pg := range pages {
		checkPage(t, fmt.Sprintf("page %d", i), <-pageAnswers[i], pg.first, pg.last)
	}
	if got, want := batches(), []readBatch{{1, 0}, {gets, len(pages)}}; !slices.Equal(got, want) {
		t.Errorf("batches of %v, want the sentinel's and one of them all, %v", got, want)
	}
}

// checkPage checks that plants are those of ids first to last, as
// created in TestBatchedReads; none when first is 0.
func checkPage(t *testing.T, what string, plants []plantstore.Plant, first, last int64) {
	t.Helper()
	if plants == nil {
		t.Errorf("%s: nil, want a page", what)
		return
	}
	var want []int64
	for id := first; first != 0 && id <= last; id++ {
		want = append(want, id)
	}
	var ids []int64
	for _, p := range plants {
		ids = append(ids, p.ID)
		if p.Name != fmt.Sprintf("plant %d", p.ID) || (p.ID%2 == 0) != (p.Tag != nil) || (p.Tag != nil && *p.Tag != fmt.Sprintf("tag %d", p.ID)) {
			t.Errorf("%s: plant %+v", what, p)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("%s: ids %v, want %v", what, ids, want)
	}
}

// A get answered after a write was acknowledged sees it, on the instance
// that wrote or another: a batch's statement starts after its gets were
// queued.
func TestGetsSeeAcknowledgedWrites(t *testing.T) {
	a, url := openWith(t, postgres.Options{})
	b, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for range 30 {
				id := next.Add(1)
				want := plantstore.Plant{ID: id, Name: fmt.Sprintf("plant %d", id)}
				if _, err := a.CreatePlant(ctx, want); err != nil {
					t.Errorf("create %d: %v", id, err)
					return
				}
				for _, db := range []*postgres.DB{b, a} {
					if p, err := db.GetPlant(ctx, id); err != nil || p.Name != want.Name {
						t.Errorf("get %d just after its create: %+v, %v", id, p, err)
						return
					}
				}
				if err := a.DeletePlant(ctx, id, nil); err != nil {
					t.Errorf("delete %d: %v", id, err)
					return
				}
				if _, err := b.GetPlant(ctx, id); plantstore.ErrorCode(err) != plantstore.ENOTFOUND {
					t.Errorf("get %d just after its delete: %v, want %s", id, err, plantstore.ENOTFOUND)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A get whose deadline passes while its read waits answers unavailable
// then; the gets beside it, with later deadlines, are read once the wait
// ends.
func TestGetDeadlineWhileReadWaits(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx := lockPlants(t, url)
	patient := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := db.GetPlant(ctx, 1)
		if err == nil && p.Name != "Fern" {
			err = fmt.Errorf("got %+v", p)
		}
		patient <- err
	}()
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := db.GetPlant(short, 1)
	if plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Errorf("a get whose deadline passed while its read waited: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a get with a 200 ms deadline took %v", took)
	}
	select {
	case err := <-patient:
		t.Fatalf("the get with a 10 s deadline answered while the table was locked: %v", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-patient; err != nil {
		t.Errorf("the get with a 10 s deadline: %v", err)
	}
}

// Gets racing Close: each is answered with its plant or as unavailable;
// after Close, every get is refused (the race detector watches the
// channel).
func TestCloseWhileGetting(t *testing.T) {
	db, _ := openWith(t, postgres.Options{})
	for id := int64(1); id <= 100; id++ {
		if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: fmt.Sprintf("p%d", id)}); err != nil {
			t.Fatal(err)
		}
	}
	var answered atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				id := rand.Int64N(100) + 1
				p, err := db.GetPlant(context.Background(), id)
				if err != nil {
					if !isClosed(err) && plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
						t.Errorf("get %d: %v", id, err)
					}
					return
				}
				if p.Name != fmt.Sprintf("p%d", id) {
					t.Errorf("get %d: %+v", id, p)
				}
				answered.Add(1)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	db.Close()
	wg.Wait()
	if answered.Load() == 0 {
		t.Error("no get answered before Close")
	}
	if _, err := db.GetPlant(context.Background(), 1); !isClosed(err) {
		t.Errorf("a get after Close: %v, want %s \"the store is closed\"", err, plantstore.EUNAVAILABLE)
	}
}

// A batch whose callers have all given up has its statement cancelled on
// the server, and its reader goes on to the next.
func TestGetStatementEndsWithItsCallers(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "Fern"}); err != nil {
		t.Fatal(err)
	}
	tx := lockPlants(t, url)
	observer := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := db.GetPlant(ctx, 1); plantstore.ErrorCode(err) != plantstore.EUNAVAILABLE {
		t.Fatalf("a get whose deadline passed while its read waited: %v, want %s", err, plantstore.EUNAVAILABLE)
	}
	// Its statement no longer waits for the lock.
	waitForLockWaiters(t, observer, 0)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p, err := db.GetPlant(context.Background(), 1); err != nil || p.Name != "Fern" {
		t.Errorf("the next get: %+v, %v", p, err)
	}
}

// Close reads the gets and pages already queued, then refuses gets.
func TestCloseReadsQueuedReads(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	for id := int64(1); id <= 20; id++ {
		if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: id, Name: fmt.Sprintf("p%d", id)}); err != nil {
			t.Fatal(err)
		}
	}
	release := holdReaders(t, db, url, 1)
	answers := make([]chan error, 26) // 20 gets, 4 pages, 2 of a tag
	for i := range answers {
		answers[i] = make(chan error, 1)
		go func() {
			id := int64(i + 1)
			if i >= 24 {
				tag := "none has it"
				page, err := db.ListPlants(context.Background(), plantstore.ListOptions{Limit: 5, Tag: &tag})
				if err == nil && (page == nil || len(page) != 0) {
					err = fmt.Errorf("got %+v", page)
				}
				answers[i] <- err
				return
			}
			if i >= 20 {
				page, err := db.ListPlants(context.Background(), plantstore.ListOptions{Limit: 5})
				if err == nil && (len(page) != 5 || page[0].ID != 1 || page[4].Name != "p5") {
					err = fmt.Errorf("got %+v", page)
				}
				answers[i] <- err
				return
			}
			p, err := db.GetPlant(context.Background(), id)
			if err == nil && p.Name != fmt.Sprintf("p%d", id) {
				err = fmt.Errorf("got %+v", p)
			}
			answers[i] <- err
		}()
	}
	waitQueuedReads(t, db, len(answers))
	closed := closeUntilRefused(t, db, "get", func(ctx context.Context) error {
		_, err := db.GetPlant(ctx, 1)
		return err
	})
	release()
	for i, c := range answers {
		if err := <-c; err != nil {
			t.Errorf("read %d, queued before Close: %v", i+1, err)
		}
	}
	<-closed
}

// A batch's pages of one tag are read through plants_by_tag, each from
// its first id, even in the generic plan of a store where one tag is on
// nearly every plant: there, "tag = r.tag AND id >= r.first" walks the
// primary key and filters, which for a rare tag reads the whole table.
func TestTagPagesPlan(t *testing.T) {
	_, url := openWith(t, postgres.Options{})
	conn := connect(t, url)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO plants (id, name, tag, created_at)
			SELECT i, 'p' || i, CASE WHEN i % 1000 = 0 THEN 'rare' ELSE 'common' END, now()
			FROM generate_series(1, 50000) AS i`,
		`ANALYZE plants`,
		`SET plan_cache_mode = force_generic_plan`,
		`PREPARE tag_pages(text[], int8[], int4[]) AS ` + postgres.TagPagesSQL,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE tag_pages('{rare,common}', '{0,0}', '{100,100}')`, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Scan using plants_by_tag") || !strings.Contains(text, "Index Cond: ((ROW(tag, id) >= ROW(r.tag, r.first))") || strings.Contains(text, "Filter") {
		t.Errorf("the generic plan of a batch's tag pages:\n%s\nwant a range scan of plants_by_tag from (tag, first), no filter", text)
	}
	// And the pages are right: the rare tag's from its first id.
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	after := int64(45000)
	page, err := db.ListPlants(ctx, plantstore.ListOptions{Tag: ptr("rare"), After: &after, Limit: 100})
	if err != nil || len(page) != 5 || page[0].ID != 46000 || page[4].ID != 50000 {
		t.Errorf("the rare tag's page after %d: %v, %v", after, page, err)
	}
}

// A batch's pages ask for at most MaxReadRows rows: the page that would
// go past it heads the next batch, and every page is answered.
func TestReadBatchRowBudget(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	batches := observeReadBatches(db)
	if _, err := db.CreatePlant(context.Background(), plantstore.Plant{ID: 1, Name: "plant 1"}); err != nil {
		t.Fatal(err)
	}
	release := holdReaders(t, db, url, 1)
	long := plantstore.MaxListLimit + 1
	pages := postgres.MaxReadRows/long + 4 // four past the budget
	errs := make(chan error, pages)
	for range pages {
		go func() {
			page, err := db.ListPlants(context.Background(), plantstore.ListOptions{Limit: long})
			if err == nil && (len(page) != 1 || page[0].Name != "plant 1") {
				err = fmt.Errorf("got %+v", page)
			}
			errs <- err
		}()
	}
	waitQueuedReads(t, db, pages)
	release()
	for range pages {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got, want := batches(), []readBatch{{1, 0}, {0, pages - 4}, {0, 4}}; !slices.Equal(got, want) {
		t.Errorf("batches of %v, want %v", got, want)
	}
}

// When a batch's statements fail, every read in it is answered with the
// failure, the pages after the gets included, and none waits.
func TestBatchFailureAnswersEveryRead(t *testing.T) {
	db, url := openWith(t, postgres.Options{Readers: 1})
	batches := observeReadBatches(db)
	tx := lockPlants(t, url)
	sentinel := make(chan error, 1)
	go func() {
		_, err := db.GetPlant(context.Background(), sentinelID)
		sentinel <- err
	}()
	waitForLockWaiters(t, connect(t, url), 1)
	const gets, pages = 5, 6 // half the pages of a tag
	errs := make(chan error, gets+pages)
	for i := range gets + pages {
		go func() {
			var err error
			switch tag := "fern"; {
			case i < gets:
				_, err = db.GetPlant(context.Background(), int64(i))
			case i%2 == 0:
				_, err = db.ListPlants(context.Background(), plantstore.ListOptions{Limit: 10})
			default:
				_, err = db.ListPlants(context.Background(), plantstore.ListOptions{Limit: 10, Tag: &tag})
			}
			errs <- err
		}()
	}
	waitQueuedReads(t, db, gets+pages)
	// The batch's statements will find no table.
	if _, err := tx.Exec(context.Background(), `ALTER TABLE plants RENAME TO plants_gone`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-sentinel
	for range gets + pages {
		select {
		case err := <-errs:
			if code := plantstore.ErrorCode(err); code == "" || code == plantstore.ENOTFOUND {
				t.Errorf("a read of the batch: %v, want the statement's failure", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a read of the failed batch was not answered")
		}
	}
	if got := batches(); len(got) != 2 || got[1] != (readBatch{gets, pages}) {
		t.Errorf("batches of %v, want the sentinel's, then one of %d gets and %d pages", got, gets, pages)
	}
}
